/* A plugin: allocates from its own code, is dlclose'd before the report. */
#include <stdlib.h>

__attribute__((noinline)) void *plugin_leak(void) { return malloc(777); }
void *plugin_entry(void) { return plugin_leak(); }
