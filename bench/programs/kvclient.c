/* The load for kvserver.cc: CONNS connections at once, each sending
 * REQUESTS requests in pipelined batches of BATCH (a SET for every three
 * GETs, over 10,000 keys, 100-byte values) and reading every answer before
 * the next batch; then a SHUTDOWN.  Run bare (bench/run.py times it): it
 * allocates nothing per request, so the server's cost is what is measured.
 *
 *   kvclient PORT CONNS REQUESTS
 *
 * Exits 0 when every request was answered as the protocol says, 1 else. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 32
#define KEYS 10000

static int port;
static long requests;

static int connect_to_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("kvclient: connect");
        exit(1);
    }
    return fd;
}

static int send_all(int fd, const char *data, size_t len)
{
    for (size_t sent = 0; sent < len;) {
        ssize_t n = write(fd, data + sent, len - sent);
        if (n <= 0)
            return -1;
        sent += (size_t)n;
    }
    return 0;
}

static void *drive(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    int fd = connect_to_server();
    char value[101];
    char out[BATCH * 160], in[65536];
    long answered = 0, bad = 0;
    int line_start = 1;
    for (long done = 0; done < requests; done += BATCH) {
        size_t len = 0;
        int batch = requests - done < BATCH ? (int)(requests - done) : BATCH;
        for (int i = 0; i < batch; i++) {
            seed = seed * 1103515245 + 12345;
            int key = (int)((seed >> 8) % KEYS);
            if (seed % 4 == 0) {
                memset(value, 'a' + (int)(seed >> 24) % 26, 100);
                value[100] = 0;
                len += (size_t)snprintf(out + len, sizeof out - len, "SET key:%05d %s\n", key, value);
            } else {
                len += (size_t)snprintf(out + len, sizeof out - len, "GET key:%05d\n", key);
            }
        }
        if (send_all(fd, out, len) != 0)
            break;
        for (int lines = 0; lines < batch;) { /* every answer of the batch before the next */
            ssize_t n = read(fd, in, sizeof in);
            if (n <= 0) {
                lines = batch;
                break;
            }
            for (ssize_t k = 0; k < n; k++) {
                bad += line_start && in[k] == 'E'; /* "ERROR" */
                line_start = in[k] == '\n';
                lines += line_start;
                answered += line_start;
            }
        }
    }
    close(fd);
    return (void *)(intptr_t)(answered == requests && bad == 0);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: kvclient PORT CONNS REQUESTS\n");
        return 2;
    }
    port = atoi(argv[1]);
    int conns = atoi(argv[2]);
    requests = atol(argv[3]);
    if (conns < 1 || conns > 256 || requests < 1) {
        fprintf(stderr, "kvclient: CONNS 1..256, REQUESTS 1 or more\n");
        return 2;
    }
    pthread_t threads[256];
    for (int i = 0; i < conns; i++)
        pthread_create(&threads[i], NULL, drive, (void *)(uintptr_t)i);
    int ok = 1;
    for (int i = 0; i < conns; i++) {
        void *r;
        pthread_join(threads[i], &r);
        ok &= r != NULL;
    }
    int fd = connect_to_server();
    ok &= send_all(fd, "SHUTDOWN\n", 9) == 0;
    close(fd);
    if (!ok)
        fprintf(stderr, "kvclient: some requests were not answered\n");
    return ok ? 0 : 1;
}
