/* A tiny "server" with two leaks, for `libmemleak demo`.
 *   - finish_request() forgets to free the request's path (strdup'ed);
 *   - cache_put() overwrites cache slots without freeing the old entry.
 * It serves a batch of requests at a time and waits after each (so that a
 * report can be taken while it runs), then exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct request {
    char *path;
    char *body;
};

static char *cache[64];

static struct request *parse_request(int i)
{
    struct request *r = malloc(sizeof *r);
    r->path = strdup(i % 2 ? "/index.html" : "/about.html");
    r->body = malloc(256);
    return r;
}

static void finish_request(struct request *r)
{
    free(r->body);
    free(r); /* bug: r->path is never freed */
}

static void cache_put(int i)
{
    cache[i % 64] = malloc(128); /* bug: the old entry is overwritten, not freed */
}

static void serve(int n)
{
    for (int i = 0; i < n; i++) {
        finish_request(parse_request(i));
        cache_put(i);
    }
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 2;
    for (int b = 1; b <= batches; b++) {
        serve(100);
        printf("served batch %d\n", b);
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) /* the demo takes a report, then sends a line */
            return 1;
    }
    return 0;
}
