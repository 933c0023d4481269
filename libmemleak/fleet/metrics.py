"""Prometheus's text exposition format (version 0.0.4) of the traced
processes' samples: one series per process per metric, labelled by pid,
program and where it runs -- a label set bounded by the processes, never
by what a program allocates.  Label values are the programs' own (argv[0],
their environment): escaped as the format says, and cut."""

METRICS = (
    # (name, type, help, value of a Sample)
    ("libmemleak_live_bytes", "gauge",
     "Bytes in blocks allocated and not yet freed, as the process's next report counts them.",
     lambda s: s.live_bytes),
    ("libmemleak_live_blocks", "gauge", "Blocks allocated and not yet freed.", lambda s: s.live_blocks),
    ("libmemleak_allocated_bytes_total", "counter", "Bytes allocated since collection started.",
     lambda s: s.allocated_bytes),
    ("libmemleak_allocations_total", "counter", "Allocations made since collection started.",
     lambda s: s.allocations),
    ("libmemleak_freed_bytes_total", "counter", "Bytes freed since collection started.",
     lambda s: max(0, s.allocated_bytes - s.live_bytes)),
    ("libmemleak_rss_bytes", "gauge", "Resident memory of the process (VmRSS).", lambda s: s.rss_bytes),
    ("libmemleak_malloc_free_bytes", "gauge",
     "Bytes glibc's malloc holds free (its arenas' own count): memory the process keeps that no block uses.",
     lambda s: s.malloc_free_bytes),
    ("libmemleak_blind", "gauge",
     "1 when the process has allocations the tracer cannot see (its reports' blind line), else 0.",
     lambda s: int(s.blind)),
    ("libmemleak_sampled", "gauge",
     "1 when the counts are estimates from byte-weighted sampling, 0 when exact.", lambda s: int(s.sampled)),
)
MAX_LABEL_VALUE = 256


def escape(value):
    value = str(value)[:MAX_LABEL_VALUE]
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_of(sample):
    pairs = (("pid", sample.pid), ("program", sample.program)) + sample.labels
    return ",".join(f'{name}="{escape(value)}"' for name, value in pairs)


def exposition(samples, scrape_errors=0):
    """The /metrics page."""
    lines = []
    for name, kind, text, value_of in METRICS:
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")
        for s in samples:
            value = value_of(s)
            if value is not None:
                lines.append(f"{name}{{{labels_of(s)}}} {value}")
    lines.append("# HELP libmemleak_suspect_live_bytes A leak suspect's live bytes, ranked as `libmemleak "
                 "report` ranks the process's reports (rank 1: the most likely leak).")
    lines.append("# TYPE libmemleak_suspect_live_bytes gauge")
    for s in samples:
        for rank, site, live, _grown in s.suspects:
            lines.append(f'libmemleak_suspect_live_bytes{{{labels_of(s)},rank="{rank}",site="{escape(site)}"}} {live}')
    lines.append("# HELP libmemleak_exporter_processes Traced processes this exporter may read.")
    lines.append("# TYPE libmemleak_exporter_processes gauge")
    lines.append(f"libmemleak_exporter_processes {len(samples)}")
    return "\n".join(lines) + "\n"
