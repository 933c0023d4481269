/* The reporter's life, as the program tells it without a system call
 * (shm_layout.h, reporter_life): the reporter locks the segment's robust
 * mutex and never unlocks it; when its thread dies -- exit, SIGKILL, exec
 * -- the kernel walks that thread's robust list and marks the mutex's word
 * with FUTEX_OWNER_DIED, the owner's id cleared.  The kernel writes that
 * word through the address the thread locked it at, so the mutex is locked
 * through a mapping of the segment's own that is never unmapped: the
 * Python side's map may be gone by the time the process ends, and the mark
 * would then never be made. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../shm_layout.h"

#define EXPORT __attribute__((visibility("default")))

/* Lock the reporter's life mutex of the segment open on fd, as the
 * reporter pid is: the first thing the reporter does (_reporter_main.py),
 * so that the moment the program must ask /proc instead is short.  0: held,
 * else an errno (EBUSY: a live reporter holds it -- the program then asks
 * /proc about this one). */
EXPORT int mlk_rc_take_reporter_life(int fd, int32_t pid)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (offsetof(struct mlk_header, reporter_life) + sizeof ((struct mlk_header *)0)->reporter_life +
                  page - 1) & ~(page - 1);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return errno;
    if ((size_t)st.st_size < len)
        return EINVAL;
    void *kept = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (kept == MAP_FAILED)
        return errno;
    struct mlk_header *h = kept;
    if (h->magic != MLK_MAGIC || h->layout_version != MLK_LAYOUT_VERSION) {
        munmap(kept, len);
        return EINVAL;
    }
    pthread_mutex_t *life = (pthread_mutex_t *)(void *)h->reporter_life;
    int r = pthread_mutex_trylock(life);
    if (r == EOWNERDEAD) /* the reporter before us died holding it */
        r = pthread_mutex_consistent(life);
    if (r != 0) {
        munmap(kept, len);
        return r;
    }
    __atomic_store_n(&h->reporter_life_tid, (int32_t)gettid(), __ATOMIC_RELAXED);
    __atomic_store_n(&h->reporter_life_pid, pid, __ATOMIC_RELEASE);
    return 0; /* (never unmapped: see above) */
}
