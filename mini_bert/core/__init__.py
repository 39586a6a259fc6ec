"""The package's plumbing, used by every part: which device and seeds (runtime), where cached
artifacts live and how they are written and read safely (cache), where the command line reads
and writes (paths). Nothing here knows about BERT."""
