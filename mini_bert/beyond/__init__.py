"""Beyond BERT (chapters 14-15): ELECTRA, SpanBERT, XLNet, DeBERTa and ModernBERT built into the
family, each in its own file, and the studies that train them at equal compute (equal_compute)."""
