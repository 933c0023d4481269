/* dlopen/dlclose in loops from two threads (one per plugin variant) while
 * two more threads allocate and free.  Each load leaks one block from the
 * plugin.  Usage: dlloop PLUGIN1 PLUGIN2 ITERATIONS */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

static const char *plugins[2];
static int iterations;
static volatile int stop;

static void *loader(void *arg)
{
    const char *path = plugins[(long)arg];
    for (int i = 0; i < iterations; i++) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            exit(3);
        }
        void *(*entry)(void) = (void *(*)(void))dlsym(h, "plugin_entry");
        if (!entry || !entry())
            exit(4);
        dlclose(h);
    }
    return NULL;
}

__attribute__((noinline)) static void *churn_site(int i) { return malloc(16 + (size_t)(i & 255)); }

static void *churner(void *arg)
{
    (void)arg;
    for (int i = 0; !stop; i++)
        free(churn_site(i));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    plugins[0] = argv[1];
    plugins[1] = argv[2];
    iterations = atoi(argv[3]);
    pthread_t load[2], churn[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&churn[i], NULL, churner, NULL);
    for (long i = 0; i < 2; i++)
        pthread_create(&load[i], NULL, loader, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(load[i], NULL);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(churn[i], NULL);
    checkpoint("done");
    return 0;
}
