"""The report files: the .memlog format, written and read (memlog), and the
one reader of the offline tools (series).  Imports nothing of daemon/ or
live/: every answer can be had from the files alone."""
