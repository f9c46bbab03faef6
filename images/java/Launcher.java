package proctor.launcher;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URL;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import jdk.internal.access.SharedSecrets;

/**
 * Runs a Java job's main class and proves that its main() returned.
 *
 * <p>An exit code of 0 can be forged: System.exit(0) in the middle of the tests stops
 * them and still "passes". So the server hands the program a one-time nonce on fd 4,
 * and this class writes it back on fd 3 only when the main method returned without
 * throwing. The nonce is read only then: while the program runs it is in the kernel's
 * pipe, not in this JVM's memory, so no scan of the program's own memory finds it (under
 * gVisor the JVM is dumpable and /proc/self/mem is the program's to read). The pipe
 * belongs to root, so the program cannot reopen it through /proc/self/fd, and Java
 * code can name an fd only by path: this class reads fd 4 through a FileDescriptor it
 * makes with jdk.internal.access, exported to this module alone. This module exports
 * nothing, so reflection cannot reach it, and the JVM runs with the attach mechanism
 * off. A System.exit or Runtime.halt from the program ends the JVM before the marker
 * is written.
 *
 * <p>The classes (the program's and the tests') arrive on fd 5 as one bundle, which
 * this class reads to its end before any of them is defined: no class file of the
 * tests is ever a file the program could read. They are defined by one loader
 * ({@link Classes}), which shows no resources and refuses to change assertion status.
 *
 * <p>Arguments: the candidate main classes, in order; the first with a
 * {@code public static void main(String[])} runs.
 */
public final class Launcher {
    private static final int MAX = 128;

    private Launcher() {
    }

    public static void main(String[] args) throws IOException {
        FileDescriptor nonceFd = new FileDescriptor();
        SharedSecrets.getJavaIOFileDescriptorAccess().set(nonceFd, 4);
        Classes classes = new Classes(readBundle());
        PrintStream out = System.out;
        PrintStream err = System.err;
        FileOutputStream marker = new FileOutputStream("/proc/self/fd/3");
        Method entry = findMain(classes, args);
        if (entry == null) {
            err.println("[proctor] no class of " + String.join(", ", args)
                    + " has a public static void main(String[] args)");
            err.flush();
            Runtime.getRuntime().halt(1);
        }
        try {
            entry.invoke(null, (Object) new String[0]);
        } catch (InvocationTargetException e) {
            reportUncaught(e.getCause());
            Runtime.getRuntime().halt(1);
        } catch (IllegalAccessException e) {
            err.println("[proctor] " + entry.getDeclaringClass().getName() + ".main is not accessible: " + e);
            err.flush();
            Runtime.getRuntime().halt(1);
        }
        // Reached only when main() returned: the tests ran to their end.
        flush(System.out, out, System.err, err);
        byte[] nonce = new byte[MAX];
        int length = 0;
        try (FileInputStream in = new FileInputStream(nonceFd)) {
            int n;
            while (length < MAX && (n = in.read(nonce, length, MAX - length)) > 0) {
                length += n;
            }
        } catch (IOException e) {
            length = 0;
        }
        if (length > 0) {
            marker.write(nonce, 0, length);
            marker.flush();
        }
        Runtime.getRuntime().halt(0);
    }

    /** The class bundle of fd 5: a count, then (name, bytes) records; empty when there is none. */
    private static Map<String, byte[]> readBundle() throws IOException {
        Map<String, byte[]> out = new HashMap<>();
        byte[] all;
        try (InputStream in = new FileInputStream("/proc/self/fd/5")) {
            ByteArrayOutputStream buffer = new ByteArrayOutputStream();
            in.transferTo(buffer);
            all = buffer.toByteArray();
        } catch (IOException e) {
            return out;
        }
        if (all.length == 0) {
            return out;
        }
        DataInputStream data = new DataInputStream(new java.io.ByteArrayInputStream(all));
        int count = data.readInt();
        for (int i = 0; i < count; i++) {
            byte[] name = new byte[data.readInt()];
            data.readFully(name);
            byte[] bytes = new byte[data.readInt()];
            data.readFully(bytes);
            out.put(new String(name, java.nio.charset.StandardCharsets.UTF_8), bytes);
        }
        return out;
    }

    /**
     * The one loader of a job's classes: defines each from the bundle when first asked
     * (then forgets its bytes), shows no resources (no class file to read back), and
     * refuses every change of assertion status (the tests' {@code assert}s stay on).
     */
    static final class Classes extends ClassLoader {
        private final Map<String, byte[]> bytes;

        Classes(Map<String, byte[]> bytes) {
            super("proctor-job", ClassLoader.getPlatformClassLoader());
            super.setDefaultAssertionStatus(true);
            this.bytes = bytes;
        }

        @Override
        protected Class<?> findClass(String name) throws ClassNotFoundException {
            byte[] b;
            synchronized (bytes) {
                b = bytes.remove(name);
            }
            if (b == null) {
                throw new ClassNotFoundException(name);
            }
            return defineClass(name, b, 0, b.length);
        }

        @Override
        public URL getResource(String name) {
            return null;
        }

        @Override
        public Enumeration<URL> getResources(String name) {
            return Collections.emptyEnumeration();
        }

        @Override
        public InputStream getResourceAsStream(String name) {
            return null;
        }

        @Override
        protected URL findResource(String name) {
            return null;
        }

        @Override
        public void setDefaultAssertionStatus(boolean enabled) {
            throw new UnsupportedOperationException("assertion status cannot change in the sandbox");
        }

        @Override
        public void setPackageAssertionStatus(String packageName, boolean enabled) {
            throw new UnsupportedOperationException("assertion status cannot change in the sandbox");
        }

        @Override
        public void setClassAssertionStatus(String className, boolean enabled) {
            throw new UnsupportedOperationException("assertion status cannot change in the sandbox");
        }

        @Override
        public void clearAssertionStatus() {
            throw new UnsupportedOperationException("assertion status cannot change in the sandbox");
        }
    }

    private static Method findMain(ClassLoader loader, String[] names) {
        for (String name : names) {
            try {
                Class<?> cls = Class.forName(name, false, loader);
                Method m = cls.getMethod("main", String[].class);
                if (Modifier.isStatic(m.getModifiers()) && m.getReturnType() == void.class) {
                    return m;
                }
            } catch (ClassNotFoundException | NoSuchMethodException | LinkageError e) {
                // not this one
            }
        }
        return null;
    }

    /** As the JVM's default handler prints it, without the launcher's frames. */
    private static void reportUncaught(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            List<StackTraceElement> kept = new ArrayList<>();
            for (StackTraceElement e : c.getStackTrace()) {
                String cls = e.getClassName();
                if (cls.startsWith("jdk.internal.reflect.") || cls.equals("java.lang.reflect.Method")
                        || cls.startsWith("proctor.launcher.")) {
                    break;
                }
                kept.add(e);
            }
            if (!kept.isEmpty()) {
                c.setStackTrace(kept.toArray(new StackTraceElement[0]));
            }
        }
        System.out.flush();
        System.err.print("Exception in thread \"main\" ");
        t.printStackTrace();
        System.err.flush();
    }

    private static void flush(PrintStream... streams) {
        for (PrintStream s : streams) {
            s.flush();
        }
    }
}
