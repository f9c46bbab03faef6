/* Linked into every C/C++ job: proves that main() returned on its own.
 *
 * An exit code of 0 can be forged: exit(0) in the middle of the tests stops them
 * and still "passes". So the server hands the program a one-time nonce on fd 4,
 * which this file reads before any user code runs (constructor priority 101 runs
 * before C++ static initialisers), and writes it back on fd 3 from an atexit
 * handler only when main() returned: calls to exit() from user code are routed
 * through __wrap_exit (linked with -Wl,--wrap=exit), which cancels the marker.
 * libc's own exit() after main returns is not wrapped, since it is called from
 * inside libc. Valid as C and as C++ (g++ compiles .c files as C++).
 */
#include <stdlib.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

static char proctor_nonce[256];
static ssize_t proctor_nonce_len = 0;
static pid_t proctor_pid = 0;
static volatile int proctor_early_exit = 0;

void __real_exit(int status) __attribute__((noreturn));

void __wrap_exit(int status) {
    proctor_early_exit = 1;
    __real_exit(status);
}

static void proctor_mark(void) {
    ssize_t off = 0;
    /* Forked children run atexit handlers too; only the first process may mark. */
    if (proctor_early_exit || getpid() != proctor_pid || proctor_nonce_len <= 0) return;
    while (off < proctor_nonce_len) {
        ssize_t n = write(3, proctor_nonce + off, (size_t)(proctor_nonce_len - off));
        if (n <= 0) break;
        off += n;
    }
}

__attribute__((constructor(101))) static void proctor_init(void) {
    ssize_t n;
    proctor_pid = getpid();
    while (proctor_nonce_len < (ssize_t)sizeof(proctor_nonce)) {
        n = read(4, proctor_nonce + proctor_nonce_len, sizeof(proctor_nonce) - (size_t)proctor_nonce_len);
        if (n <= 0) break;
        proctor_nonce_len += n;
    }
    close(4);
    atexit(proctor_mark);
}

#ifdef __cplusplus
}
#endif
