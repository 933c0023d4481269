/* Whether thread tid of this process sleeps in the kernel (its /proc stat
 * says S): a parked thread's stack is then told by the stack pointer /proc
 * gives for a thread in a system call.  Raw calls and a buffer on the
 * stack: nothing allocates. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int sleeping(int tid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0)
        return 0;
    stat[n] = 0;
    const char *end = strrchr(stat, ')');
    return end && end[1] == ' ' && end[2] == 'S';
}
