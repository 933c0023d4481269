/* The program controls reporting through <mcheck.h>.  Each mtrace() after
 * the first must return only once its report file is complete: checked
 * here, from inside the program, right after the call returns. */
#include <fcntl.h>
#include <mcheck.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void *site_before_start(void) { return malloc(501); }
__attribute__((noinline)) void *site_collected(void) { return malloc(502); }
__attribute__((noinline)) void *site_after_stop(void) { return malloc(503); }

static int report_exists(int seq)
{
    char name[256];
    snprintf(name, sizeof name, "mtrace_api-%d-%d.memlog", (int)getpid(), seq);
    return access(name, R_OK) == 0;
}

int main(void)
{
    site_before_start();
    mtrace();                 /* starts collecting (unless mtraceinit did) */
    site_collected();
    mtrace();                 /* report now */
    int first = report_exists(1);
    site_collected();
    muntrace();               /* final report, stop collecting */
    int second = report_exists(2);
    site_after_stop();
    printf("sync %d %d\n", first, second);
    return 0;
}
