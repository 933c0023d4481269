/* Ignored objects, root regions and a thread's recording (lsan.c), for
 * api.c's table and LeakSanitizer's exports. */
#ifndef MLK_API_LSAN_H
#define MLK_API_LSAN_H

#include <stddef.h>

#include "../mlk.h"

MLK_HIDDEN void mlk_ignore_object(const void *p);
MLK_HIDDEN void mlk_root_region(const void *p, size_t size, int add);
MLK_HIDDEN void mlk_thread_recording(int on);

#endif
