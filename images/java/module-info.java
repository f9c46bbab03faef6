/**
 * The launcher of every Java job; it exports nothing, so no program can reach into it.
 * It requires java.se: the JVM resolves the Java SE modules and nothing else, so no
 * program sees sun.misc.Unsafe (jdk.unsupported) or any other JDK-internal API.
 */
module proctor.launcher {
    requires java.se;
}
