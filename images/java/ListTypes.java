import java.io.IOException;
import java.net.URI;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystem;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.TreeSet;

/**
 * Run once at image build: writes "package TypeName" for every top-level type of every
 * package the JDK exports. A program's own top-level type of such a name would hide the
 * JDK's from tests that import the package on demand (Arrays, List, AssertionError...),
 * so the server refuses it.
 */
public final class ListTypes {
    private ListTypes() {
    }

    public static void main(String[] args) throws IOException {
        FileSystem jrt = FileSystems.getFileSystem(URI.create("jrt:/"));
        TreeSet<String> out = new TreeSet<>();
        for (Module module : ModuleLayer.boot().modules()) {
            for (var export : module.getDescriptor().exports()) {
                if (export.isQualified()) {
                    continue;
                }
                Path dir = jrt.getPath("/modules", module.getName(), export.source().replace('.', '/'));
                try (DirectoryStream<Path> classes = Files.newDirectoryStream(dir, "*.class")) {
                    for (Path file : classes) {
                        String name = file.getFileName().toString().replaceFirst("\\.class$", "");
                        if (!name.contains("$") && !name.equals("package-info") && !name.equals("module-info")) {
                            out.add(export.source() + " " + name);
                        }
                    }
                }
            }
        }
        Files.write(Path.of(args[0]), out);
    }
}
