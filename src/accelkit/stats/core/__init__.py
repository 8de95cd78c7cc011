"""The pure maths of statistics: moments, exact quantiles and their sort keys, histograms, per-episode and camera statistics, action chunks, the tolerance rule. No files, no devices."""
