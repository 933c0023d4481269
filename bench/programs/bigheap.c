/* A big live heap for the scan's pause (bench/scan_pause.py): argv[1] MB
 * of blocks (16 to 4,096 bytes) in 1,024 linked lists reachable from a
 * global, one in 64 dropped (definitely lost), and argv[2] threads each
 * holding a list head on its stack, blocked in read().  Prints "ready"
 * and waits for a line on stdin. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LISTS 1024

struct node { struct node *next; char payload[]; };
struct node *heads[LISTS];
static int gate[2];

static void *holder(void *arg)
{
    struct node *volatile mine = arg;
    char c;
    if (read(gate[0], &c, 1) < 0)
        return NULL;
    (void)mine;
    return NULL;
}

int main(int argc, char **argv)
{
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int threads = argc > 2 ? atoi(argv[2]) : 16;
    size_t want = mb << 20, made = 0;
    unsigned x = 12345;
    for (unsigned long i = 0; made < want; i++) {
        x = x * 1103515245u + 12345;
        size_t size = 16 + (x >> 8) % 4081;
        struct node *n = malloc(size);
        memset(n, 0, size < 64 ? size : 64);
        made += size;
        if (i % 64 == 63)
            continue; /* dropped: lost */
        n->next = heads[i % LISTS];
        heads[i % LISTS] = n;
    }
    if (pipe(gate))
        return 1;
    pthread_t t[256];
    if (threads > 256)
        threads = 256;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, holder, heads[i]);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    for (int i = 0; i < threads; i++)
        if (write(gate[1], "g", 1) != 1)
            return 1;
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return 0;
}
