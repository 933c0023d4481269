"""What runs in the reporter process beside the traced program: it maps the
segment (segment, layout, trust), sums and writes reports (reporter,
report_core, diff, modmap, misuse, memory_use), scans (reachability),
holds descendants' segments (keeper, standby), serves requests posted in
the segment (requests) and remote shells (remote).  It imports the file
format (files/) and pure analysis, never the live commands (live/)."""
