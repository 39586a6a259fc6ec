"""Part I, build it (chapters 1-7): the corpus (data), WordPiece and byte-level BPE
(tokenization, bpe), the model and its settings (config, model, params), masking and the
pretraining examples (masking, examples), the objectives (objectives), and the bridge to
transformers' BERT, RoBERTa and ALBERT with the real MiniLM weights (hf, conversion, minilm)."""
