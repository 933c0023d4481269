/* Takes malloc's address: built -no-pie, that makes the program's own PLT
 * entry malloc's canonical address (what dlsym(RTLD_DEFAULT, "malloc")
 * then answers) -- the case that once made the preloaded tracer think it
 * had been dlopen'ed and stay inert. */
#include <stdio.h>
#include <stdlib.h>

void *(*volatile allocate)(size_t) = malloc;

int main(void)
{
    void *p = allocate(1234);
    printf("%d\n", p != NULL);
    return 0;
}
