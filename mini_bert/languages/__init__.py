"""Part IV, beyond one language (chapter 16): Chinese text and models (chinese), and one
vocabulary for many languages (multilingual)."""
