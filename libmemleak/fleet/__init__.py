"""The fleet side: `libmemleak exporter`, which serves every traced
process it may read to the engines fleets already run (Prometheus's
/metrics), from their segments, touching none of them."""
