/* Stopping a traced process's threads from outside it, and reading its
 * memory: what the reachability scan (scan.c) stands on.  Reporter side
 * only (libmlkreport.so); never loaded into a traced program. */
#ifndef MLK_WORLD_H
#define MLK_WORLD_H

#include <stddef.h>
#include <stdint.h>

#define MLK_REG_WORDS 64 /* general registers kept per thread (x86-64: 27, arm64: 34) */

struct mlk_thread {
    int tid;
    int signal;     /* a signal that arrived as it stopped: delivered again on resume */
    uint64_t sp;    /* stack pointer */
    int nregs;
    uint64_t regs[MLK_REG_WORDS];
    int dead_stack; /* exiting: nothing on its stack is a root (mlk_world_forget_thread) */
};

struct mlk_world {
    int pid;
    int mem_pid;        /* a live thread's id, to read memory and /proc through: a main
                         * thread that called pthread_exit is a zombie without either */
    int nthreads;
    int64_t cap;
    struct mlk_thread *threads;
    int64_t stopped_ns; /* CLOCK_MONOTONIC when the last thread stopped */
};

/* Every thread of `pid` stopped (PTRACE_SEIZE + PTRACE_INTERRUPT: no signal
 * the program sees), its registers read.  NULL if that failed; `why` then
 * says why in one line.  Threads created meanwhile are stopped too. */
struct mlk_world *mlk_world_stop(int pid, char *why, int why_len);

/* The same, but for the thread except_tid (one this process has seized
 * already: a thread borrowed by an attach, inject.c). */
struct mlk_world *mlk_world_stop_except(int pid, int except_tid, char *why, int why_len);
/* Where stopped thread i was (its instruction pointer), or 0. */
uint64_t mlk_world_pc(const struct mlk_world *w, int i);

/* Resume every thread untouched and free the world. */
void mlk_world_resume(struct mlk_world *w);
int mlk_world_threads(const struct mlk_world *w);
/* Thread tid's stack and registers are dead (it is exiting): no roots. */
void mlk_world_forget_thread(struct mlk_world *w, int tid);

/* Copy len bytes at addr in the stopped process to buf; what cannot be
 * read (a page unmapped, a file mapping past its end) reads as zeros.
 * Returns the bytes really read. */
size_t mlk_read_mem(int pid, uint64_t addr, void *buf, size_t len);

int64_t mlk_now_monotonic_ns(void);

/* An exited thread not reaped yet (a main thread after pthread_exit, while
 * the others run): seized, it would never stop; it has no memory to read. */
int mlk_thread_is_zombie(int pid, int tid);

#endif
