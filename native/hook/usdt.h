/* OpenTelemetry's memory-profiling probes (the eBPF profiler's
 * design-docs/00003: provider otel_memory, alloc(ptr, size, weight) on a
 * sampled allocation, free(ptr) for a sampled pointer), fired in the
 * sampled mode (sample=BYTES) on the blocks it records, so that a
 * profiler attached by uprobe sees the same samples the reports count.
 * weight: the bytes the sample stands for, size / (1 - exp(-size /
 * sample_bytes)) -- the estimate the reports make.  A probe is one nop
 * where no one is attached.  Built only where <sys/sdt.h> is
 * (setup.py's usdt_flags). */
#ifndef MLK_USDT_H
#define MLK_USDT_H

#ifdef MLK_USDT
#include <sys/sdt.h>
#define MLK_PROBE_ALLOC(p, size, weight) DTRACE_PROBE3(otel_memory, alloc, (p), (size), (weight))
#define MLK_PROBE_FREE(p) DTRACE_PROBE1(otel_memory, free, (p))
#else
#define MLK_PROBE_ALLOC(p, size, weight) ((void)(p), (void)(size), (void)(weight))
#define MLK_PROBE_FREE(p) ((void)(p))
#endif

#endif
