/* Five calls on one line of code: five return addresses, one stack as a
 * report prints it (same function, file and line in every frame).  Built
 * -O1 they were five "+17 +1" entries with identical frames. */
#include <stdio.h>
#include <string.h>

static char *keep[5];

__attribute__((noinline)) char *prefix_copy(const char *s) { return strdup(s); }

int main(void)
{
    keep[0] = prefix_copy("0123456789abcdef"); keep[1] = prefix_copy("0123456789abcdef"); keep[2] = prefix_copy("0123456789abcdef"); keep[3] = prefix_copy("0123456789abcdef"); keep[4] = prefix_copy("0123456789abcdef");
    printf("%p\n", (void *)keep[0]);
    return 0;
}
