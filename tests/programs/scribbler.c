/* A hostile traced program: after it drops to nobody it rewrites its own
 * segment -- the directory its reports go to, its name and its executable's
 * path -- hoping that root's reporter builds paths from them.
 *   scribbler worker NEWDIR NEWNAME NEWEXE   a forked worker does it (root's keeper reports it)
 *   scribbler self   NEWDIR NEWNAME NEWEXE   the process itself does it (root's own reporter)
 * Each replacement is cut or padded to the original's length. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm_layout.h"

#define NOBODY 65534

__attribute__((noinline)) void *site_scribbler(size_t n) { return malloc(n); }

static struct mlk_header *own_segment(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo = 0;
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "memfd:libmemleak") && strstr(line, "rw-s")) {
            lo = strtoul(line, NULL, 16);
            break;
        }
    if (maps)
        fclose(maps);
    return (struct mlk_header *)lo;
}

static void overwrite(struct mlk_header *h, uint32_t off, uint32_t len, const char *with)
{
    char *s = (char *)h + h->strings_off + off;
    size_t n = strlen(with);
    for (uint32_t i = 0; i < len; i++)
        s[i] = i < n ? with[i] : '/';
}

static int scribble(char **argv)
{
    struct mlk_header *h = own_segment();   /* found while still root */
    void *volatile keep = site_scribbler(4321);
    (void)keep;
    if (!h)
        return 4;
    if (getuid() == 0 && (setgid(NOBODY) != 0 || setuid(NOBODY) != 0))
        return 3;
    overwrite(h, h->dir_off, h->dir_len, argv[2]);
    overwrite(h, h->name_off, h->name_len, argv[3]);
    overwrite(h, h->exe_off, h->exe_len, argv[4]);
    printf("scribbled %d uid %d\n", (int)getpid(), (int)geteuid());
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    if (strcmp(argv[1], "self") == 0)
        return scribble(argv);
    pid_t child = fork();
    if (child == 0)
        _exit(scribble(argv));
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}
