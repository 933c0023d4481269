/* glibc's setenv keeps every value it made in a search tree whose root node
 * is made by the first setenv -- the tracer's own, in its constructor.
 * Later nodes are reachable only through that root. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    char value[32];
    for (int i = 0; i < 8; i++) {
        snprintf(value, sizeof value, "value-%d", i);
        setenv("ENVTREE", value, 1);
    }
    puts(getenv("ENVTREE"));
    return 0;
}
