// Control flow that trips tracers: spawning children every way, exceptions
// and longjmp through allocating frames, allocation on a makecontext stack.
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

extern "C" {
#include "checkpoint.h"
}
extern char **environ;

#define SITE __attribute__((noinline))
static void *volatile sink;
static jmp_buf jump;

SITE void *site_throwing(int depth) {
    std::string s(100, 'x');  // freed by unwinding
    if (depth == 0) throw std::runtime_error("boom");
    return site_throwing(depth - 1);
}
SITE void *site_after_throw() { return sink = malloc(111); }
SITE void site_longjmp_inner() { sink = malloc(222); longjmp(jump, 1); }
SITE void *site_coroutine_alloc() { return sink = malloc(333); }
SITE void *site_after_vfork() { return sink = malloc(444); }
static void coroutine() { site_coroutine_alloc(); }

int main() {
    try { site_throwing(5); } catch (const std::exception &) {}
    site_after_throw();
    if (setjmp(jump) == 0) site_longjmp_inner();

    static char stack[64 * 1024];
    ucontext_t main_ctx, co_ctx;
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = sizeof stack;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine, 0);
    swapcontext(&main_ctx, &co_ctx);

    pid_t pid;
    char *argv[] = {(char *)"true", nullptr};
    int status = 0;
    if (posix_spawnp(&pid, "true", nullptr, nullptr, argv, environ) != 0) return 3;
    waitpid(pid, &status, 0);
    if (status != 0) return 4;
    if (system("exit 7") != 7 << 8) return 5;
    pid = vfork();
    if (pid == 0) { execlp("true", "true", (char *)nullptr); _exit(127); }
    waitpid(pid, &status, 0);
    if (status != 0) return 6;
    /* execve with a made-up environment: one without the tracer at all, one
     * with the program's environment plus a variable of its own. */
    static char bare_path[] = "PATH=/usr/bin:/bin";
    char *bare_env[] = {bare_path, nullptr};
    char *sh_argv[] = {(char *)"sh", (char *)"-c", (char *)"test -z \"$LD_PRELOAD\"", nullptr};
    if ((pid = fork()) == 0) { execve("/bin/sh", sh_argv, bare_env); _exit(127); }
    waitpid(pid, &status, 0);
    if (status != 0) return 7;
    static char extra[] = "ODDFLOW_EXTRA=1";
    char *more_env[256];
    int n = 0;
    for (char **e = environ; *e && n < 254; e++) more_env[n++] = *e;
    more_env[n++] = extra;
    more_env[n] = nullptr;
    char *sh2_argv[] = {(char *)"sh", (char *)"-c", (char *)"test \"$ODDFLOW_EXTRA\" = 1", nullptr};
    if ((pid = fork()) == 0) { execve("/bin/sh", sh2_argv, more_env); _exit(127); }
    waitpid(pid, &status, 0);
    if (status != 0) return 8;
    /* A vfork child that leaves by _exit() without an exec shares our
     * memory, thread variables included: the tracer's _exit must leave
     * them as they were, or this thread's later blocks go unseen. */
    if ((pid = vfork()) == 0) _exit(9);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 9) return 9;
    site_after_vfork();
    checkpoint("done");
    return 0;
}
