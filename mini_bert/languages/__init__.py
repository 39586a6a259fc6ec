"""Part V, beyond one language (chapters 16 and 18): Chinese text and models (chinese), and one
vocabulary for many languages (multilingual)."""
