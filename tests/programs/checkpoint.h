/* Lets a test stop the program at known points: the program writes
 * "checkpoint NAME\n" and blocks until the test writes a line back.
 * Raw read/write, so the protocol itself allocates nothing. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <stdlib.h>

static void checkpoint(const char *name)
{
    char line[128] = "checkpoint ";
    strncat(line, name, sizeof line - 13);
    strcat(line, "\n");
    if (write(1, line, strlen(line)) < 0)
        _exit(98);
    char c;
    do {
        ssize_t n = read(0, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(99);
    } while (c != '\n');
}
