/** The launcher of every Java job; it exports nothing, so no program can reach into it. */
module proctor.launcher {
}
