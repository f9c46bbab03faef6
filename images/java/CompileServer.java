import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.StringWriter;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import javax.tools.FileObject;
import javax.tools.ForwardingJavaFileManager;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileManager;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.StandardLocation;
import javax.tools.ToolProvider;

/**
 * javac kept warm: compiles Java jobs' sources in memory, one request at a time, for the
 * sandbox server (sandbox/server/javacd.py), which starts it under a uid of its own.
 *
 * A cold javac spends ~0.5 s loading and warming itself up for a compile that takes ~30 ms
 * once warm. Nothing of one compile reaches the next: each request gets a fresh javac task
 * (its own symbol tables) and a file manager of its own whose sources and outputs live in
 * this request's memory; the class path and source path are empty, so no class a request
 * produced can be found by a later one; annotation processors are off (-proc:none), so no
 * code of a job runs here. The only state shared between requests is the JDK's own
 * read-only platform classes.
 *
 * Protocol (big-endian, on stdin/stdout): at start, after warming up, the int 0 ("ready").
 * A request: int units, then per unit a string path (as javac names it in messages) and a
 * string source. A reply: int status (0 compiled, 1 compile errors, 2 this server could not
 * judge: it exits after replying and the caller runs javac itself), a string of javac's
 * messages exactly as the command line prints them, then int classes and per class its
 * binary name and bytes. A string is an int length and UTF-8 bytes.
 */
public final class CompileServer {
    static final List<String> OPTIONS = List.of(
        "-proc:none", "-implicit:none", "-nowarn", "-Xlint:none", "--limit-modules", "java.se");
    // What javac prints when it failed itself (a bug, or out of memory or stack): no verdict.
    static final String[] JAVAC_FAILED = {"An exception has occurred in the compiler",
                                          "The system is out of resources"};
    static final String WARMUP = "import java.util.*;\npublic class Warm {\n"
        + "  static List<Integer> f(List<Integer> l) { List<Integer> r = new ArrayList<>(l);\n"
        + "    Collections.sort(r); return r; }\n"
        + "  public static void main(String[] a) { assert f(Arrays.asList(2, 1)).equals(List.of(1, 2)); }\n}\n";

    static final class Source extends SimpleJavaFileObject {
        final String path;
        final String text;

        Source(String path, String text) {
            super(URI.create("file:///" + path.replace(" ", "%20")), Kind.SOURCE);
            this.path = path;
            this.text = text;
        }

        @Override public String getName() { return path; }

        @Override public CharSequence getCharContent(boolean ignoreEncodingErrors) { return text; }
    }

    static final class Output extends SimpleJavaFileObject {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream();

        Output(String binaryName) {
            super(URI.create("mem:///" + binaryName.replace('.', '/') + ".class"), Kind.CLASS);
        }

        @Override public OutputStream openOutputStream() { return bytes; }
    }

    record Reply(int status, String messages, Map<String, Output> classes) {}

    public static void main(String[] args) throws IOException {
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        StandardJavaFileManager platform = javac.getStandardFileManager(null, null, StandardCharsets.UTF_8);
        platform.setLocation(StandardLocation.CLASS_PATH, List.of());
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in));
        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(System.out));
        for (int i = 0; i < 3; i++) {
            compile(javac, platform, List.of(new Source("Warm.java", WARMUP)));
        }
        out.writeInt(0);
        out.flush();
        while (true) {
            int units;
            try {
                units = in.readInt();
            } catch (EOFException e) {
                return;
            }
            List<Source> sources = new ArrayList<>();
            for (int i = 0; i < units; i++) {
                sources.add(new Source(readString(in), readString(in)));
            }
            Reply reply;
            try {
                reply = compile(javac, platform, sources);
            } catch (Throwable e) {   // out of memory or stack, or a javac bug: the caller runs javac itself
                reply = new Reply(2, String.valueOf(e), Map.of());
            }
            write(out, reply);
            if (reply.status() == 2) {
                System.exit(3);   // a JVM that failed this way is not trusted with another job
            }
        }
    }

    static Reply compile(JavaCompiler javac, StandardJavaFileManager platform, List<Source> sources) {
        Map<String, Output> classes = new TreeMap<>();
        JavaFileManager files = new ForwardingJavaFileManager<JavaFileManager>(platform) {
            @Override
            public JavaFileObject getJavaFileForOutput(Location location, String binaryName,
                                                       JavaFileObject.Kind kind, FileObject sibling) {
                Output output = new Output(binaryName);
                classes.put(binaryName, output);
                return output;
            }
        };
        StringWriter messages = new StringWriter();
        boolean ok = javac.getTask(messages, files, null, OPTIONS, null, sources).call();
        String text = messages.toString();
        for (String failed : JAVAC_FAILED) {
            if (text.contains(failed)) {
                return new Reply(2, text, Map.of());
            }
        }
        return new Reply(ok ? 0 : 1, text, ok ? classes : Map.of());
    }

    static void write(DataOutputStream out, Reply reply) throws IOException {
        out.writeInt(reply.status());
        writeBytes(out, reply.messages().getBytes(StandardCharsets.UTF_8));
        out.writeInt(reply.classes().size());
        for (Map.Entry<String, Output> entry : reply.classes().entrySet()) {
            writeBytes(out, entry.getKey().getBytes(StandardCharsets.UTF_8));
            writeBytes(out, entry.getValue().bytes.toByteArray());
        }
        out.flush();
    }

    static void writeBytes(DataOutputStream out, byte[] bytes) throws IOException {
        out.writeInt(bytes.length);
        out.write(bytes);
    }

    static String readString(DataInputStream in) throws IOException {
        byte[] bytes = new byte[in.readInt()];
        in.readFully(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
