/* What tracing descriptors costs (bench/callgrind.py's fds workload):
 * ROUNDS times, a file opened and closed, a pipe made and closed, a socket
 * made and closed, a stream opened and closed -- the calls a server makes
 * per connection -- and nothing kept. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    for (int i = 0; i < rounds; i++) {
        int fd = open("/dev/null", O_RDONLY);
        int p[2];
        if (fd < 0 || pipe(p))
            return 1;
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        FILE *f = fopen("/dev/null", "r");
        if (s < 0 || !f)
            return 1;
        fclose(f);
        close(s);
        close(p[0]);
        close(p[1]);
        close(fd);
    }
    return 0;
}
