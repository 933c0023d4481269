/* One thread, and five regions laid out as a JavaScript engine or an
 * allocator lays out its own: a PROT_NONE guard page, the rw region right
 * above it -- as glibc lays out a thread's stack (#64 item 4: a one-thread
 * program had 101 "thread stacks").  Each region touched. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(void)
{
    for (int i = 0; i < 5; i++) {
        char *p = mmap(NULL, 4096 + 65536, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || mprotect(p + 4096, 65536, PROT_READ | PROT_WRITE) != 0)
            return 1;
        memset(p + 4096, i + 1, 65536);
    }
    printf("mapped\n");
    return 0;
}
