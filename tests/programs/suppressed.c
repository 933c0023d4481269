/* A program that tells LeakSanitizer which of its leaks are expected, the
 * way test suites do (#30): it defines __lsan_default_suppressions, and
 * leaks 1000 bytes from expected_leak (suppressed) and 24 from real_leak. */
#include <stdio.h>
#include <stdlib.h>

const char *__lsan_default_suppressions(void)
{
    return "# caches kept on purpose\nleak:expected_leak\nrace:not_ours\n";
}

void *volatile sink;

__attribute__((noinline)) static void expected_leak(void) { sink = malloc(1000); sink = NULL; }
__attribute__((noinline)) static void real_leak(void) { sink = malloc(24); sink = NULL; }

int main(void)
{
    expected_leak();
    real_leak();
    puts("done");
    return 0;
}
