/* A thread that runs without a system call until SIGUSR2 stops it, then
 * waits in the kernel; the main thread waits in pause() from the start.
 * For the reporter's reading of thread stack pointers
 * (tests/test_memory_use.py): a running thread's /proc syscall file says
 * "running", a waiting one's gives its stack pointer.  Prints "spinning"
 * once the thread runs. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_usr2(int sig)
{
    (void)sig;
    stop = 1;
}

static volatile int started;

static void *spin(void *unused)
{
    (void)unused;
    started = 1;
    while (!stop)
        ;
    for (;;)
        pause();
    return NULL;
}

int main(void)
{
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);        /* (it inherits SIGUSR2 unblocked) */
    pthread_sigmask(SIG_BLOCK, &usr2, NULL);     /* so that SIGUSR2 lands on the spinner */
    while (!started)
        ;
    printf("spinning\n");
    fflush(stdout);
    for (;;)
        pause();
}
