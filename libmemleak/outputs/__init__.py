"""One small module per output format, each over the analysis of
libmemleak/analysis (memray's reporters pattern): text, json."""
