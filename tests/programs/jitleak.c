/* A program with a JIT: it writes machine code into an executable mapping
 * of its own -- a function that keeps a frame pointer, as V8's and the
 * JVM's compiled frames do, and calls a C function through a register --
 * and says where, in /tmp/perf-PID.map, the file Linux perf reads (and
 * Node --perf-basic-prof, the JVM's perf-map-agent, Python 3.12's -X perf
 * write).  The C function it calls leaks: 5 blocks of 777 bytes, each
 * from under the JIT frame "LazyCompile:*handleRequest app.js:17".
 * With argument "foreign" the map is given to another user (uid 65534) as
 * it is written: a file someone else planted, not to be believed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) void *site_from_jit(void)
{
    void *volatile p = malloc(777);
    return p;
}

int main(int argc, char **argv)
{
    /* push rbp; mov rbp,rsp; movabs rax,FN; call rax; pop rbp; ret */
    unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xd0, 0x5d, 0xc3};
    void *fn = (void *)site_from_jit;
    memcpy(code + 6, &fn, sizeof fn);
    unsigned char *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (jit == MAP_FAILED)
        return 2;
    memcpy(jit + 256, code, sizeof code);
    if (mprotect(jit, 4096, PROT_READ | PROT_EXEC) != 0)
        return 2;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "w");
    if (!map)
        return 2;
    if (argc > 1 && !strcmp(argv[1], "foreign") && fchown(fileno(map), 65534, 65534) != 0)
        return 3;
    fprintf(map, "%lx %zx LazyCompile:*handleRequest app.js:17\n", (unsigned long)(jit + 256), sizeof code);
    fclose(map);
    void *(*compiled)(void) = (void *(*)(void))(jit + 256);
    for (int i = 0; i < 5; i++)
        compiled();
    printf("done\n"); /* (the map is left, as runtimes leave theirs: its reader removes it) */
    return 0;
}
