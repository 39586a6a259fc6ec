"""How fast do our tokenizers encode the whole corpus, and how fast do they train?

    python benchmarks/tokenize_speed.py            # everything (about a minute on 2 cores)
    python benchmarks/tokenize_speed.py --no-train # encoding only
    python benchmarks/tokenize_speed.py --smoke    # CI: 2,000 sentences, no trainers, the usual cache

Prints wall-clock seconds (time.perf_counter). "cold" = a fresh tokenizer whose word cache is
empty; "warm" = the same tokenizer a second time. The budget the book sets: the fast path
tokenizes the whole corpus in at most 10 s on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from mini_bert.build import bpe, tokenization
from mini_bert.build.data import load_corpus


def timed(label: str, fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    print(f"  {label:<58s} {time.perf_counter() - start:7.2f} s", flush=True)
    return result


def encode_all(tok, texts):
    return [tok.encode(t) for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-train", action="store_true", help="skip the trainer timings")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--smoke", action="store_true", help="a quick check that the script runs (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.no_train = True

    docs = load_corpus()
    sentences = [s for d in docs for s in d.sentences][: 2000 if args.smoke else None]
    train = tokenization.training_sentences()
    words = sum(len(s.split()) for s in sentences)
    print(f"corpus: {len(docs):,} documents, {len(sentences):,} sentences, {words:,} words; "
          f"train split {len(train):,} sentences; {os.cpu_count()} CPUs")

    print("\nWordPiece, real bert-base-uncased vocabulary, whole corpus:")
    path = tokenization.bert_base_uncased_vocab_file()
    fast = timed("fast path: encode_batch (tokenizers)", tokenization.bert_base_uncased_tokenizer().encode_batch,
                 sentences)
    bert = tokenization.bert_base_uncased_tokenizer()
    pure = timed("pure Python: encode, cold cache", encode_all, bert, sentences)
    timed("pure Python: encode, warm cache", encode_all, bert, sentences)
    import tokenizers

    reference = tokenizers.BertWordPieceTokenizer(str(path), lowercase=True)
    ref = timed("reference: BertWordPieceTokenizer.encode_batch",
                lambda: [e.ids for e in reference.encode_batch(sentences, add_special_tokens=False)])
    same = sum(a == b for a, b in zip(pure, ref))
    print(f"  identical to the reference: {same:,} of {len(sentences):,} sentences "
          f"({100 * same / len(sentences):.1f}%); fast path identical: {fast == ref}")

    # French, Spanish and Chinese are all non-ASCII: normalize's character tables, not the ASCII
    # shortcut, do the work; the reference is BERT's normaliser and pre-tokeniser from tokenizers.
    from mini_bert.languages import chinese

    print("\nPre-tokenisation of non-ASCII text (French and Spanish lead sections, Chinese paragraphs):")
    foreign = [t for lang in ("fr", "es") for d in chinese.load_wiki(lang, "train") for t in d.sentences]
    foreign += [p.text for p in chinese.people_daily("train")]
    foreign = foreign[: 2000 if args.smoke else None]
    from tokenizers import normalizers, pre_tokenizers

    bert_normalizer = normalizers.BertNormalizer(lowercase=True)
    bert_pre = pre_tokenizers.BertPreTokenizer()
    start = time.perf_counter()
    ours = timed(f"pure Python: pre_tokenize, {len(foreign):,} texts",
                 lambda: [tokenization.pre_tokenize(t) for t in foreign])
    middle = time.perf_counter()
    theirs = timed("reference: BertNormalizer + BertPreTokenizer (tokenizers)",
                   lambda: [[w for w, _ in bert_pre.pre_tokenize_str(bert_normalizer.normalize_str(t))]
                            for t in foreign])
    ratio = (middle - start) / (time.perf_counter() - middle)
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"  ours / reference: {ratio:.2f}x the time; identical to the reference: {same:,} of "
          f"{len(foreign):,} texts ({100 * same / len(foreign):.1f}%)")

    with tempfile.TemporaryDirectory() as tmp:
        if not args.smoke:  # time the builds from an empty cache
            os.environ["MINI_BERT_CACHE"] = tmp
        print(f"\nDefault vocabulary ({args.vocab_size}), empty cache:")
        timed("default_vocab(): build (count_words + train + save)", tokenization.default_vocab, args.vocab_size)
        timed("default_vocab(): second call (cache hit)", tokenization.default_vocab, args.vocab_size)
        wp = tokenization.default_tokenizer(args.vocab_size)
        timed("fast path: encode_batch, whole corpus", wp.encode_batch, sentences)
        timed("pure Python: encode, cold cache, whole corpus", encode_all, wp, sentences)

        if not args.no_train:
            print(f"\nTrainers, train split, vocab_size={args.vocab_size}:")
            counts = timed("count_words (normalise + pre-tokenise)", tokenization.count_words, train)
            print(f"  ({sum(counts.values()):,} words, {len(counts):,} distinct)")
            for score in ("likelihood", "pmi", "count"):
                timed(f"pure Python learn_wordpiece_vocab, score={score!r}",
                      tokenization.learn_wordpiece_vocab, counts, args.vocab_size, score, 2)
            timed("tokenizers WordPieceTrainer (method='tokenizers')", tokenization.train_wordpiece,
                  train, args.vocab_size, method="tokenizers")
            chunks = timed("count_chunks (GPT-2 pre-tokenisation)", bpe.count_chunks, train)
            print(f"  ({sum(chunks.values()):,} chunks, {len(chunks):,} distinct)")
            timed("pure Python learn_bpe_merges", bpe.learn_bpe_merges, chunks, args.vocab_size - 261)

        print(f"\nByte-level BPE ({args.vocab_size}), whole corpus:")
        b = timed("default_bpe_tokenizer(): build", bpe.default_bpe_tokenizer, args.vocab_size)
        timed("fast path: encode_batch (tokenizers)", b.encode_batch, sentences)
        b = bpe.default_bpe_tokenizer(args.vocab_size)
        timed("pure Python: encode, cold cache", encode_all, b, sentences)
        timed("pure Python: encode, warm cache", encode_all, b, sentences)

        print("\nValidation split, side by side:")
        validation = [s for d in load_corpus("validation") for s in d.sentences]
        rows = bpe.compare_tokenizers({"bert-base-uncased": bert, "wordpiece (ours)": wp, "byte-level BPE": b},
                                      validation)
        print(f"  {'tokenizer':<20s} {'vocab':>7s} {'tokens/word':>12s} {'chars/token':>12s} {'unk rate':>9s}")
        for r in rows:
            print(f"  {r['name']:<20s} {r['vocab_size']:>7,d} {r['tokens_per_word']:>12.3f} "
                  f"{r['chars_per_token']:>12.2f} {r['unk_rate']:>9.2e}")


if __name__ == "__main__":
    main()
