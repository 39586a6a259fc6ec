"""Running chapter 17's domain-adaptation study: one arm and seed, its fingerprint, its resumable log.

The arms are data (mini_bert.smaller.specialised: "domain-adaptation", and
"domain-adaptation-rate", the choice of the continued arms' peak rates on validation with seed 0),
the plan is mini_bert/results/plan-distillation.md. One run:

1. the model: the book's pretrained tiny-wiki, continued for the arm's extra steps
   (domain.continue_pretraining: the book's recipe on 128-token inputs, specialised.CONTINUATION,
   its batches and loop, a fresh optimiser and schedule) on its text: the whole training split
   ("general", the control), the domain's training articles ("domain", DAPT) or the in-domain truecase task's drawn training sentences without
   their capitals ("task", TAPT); or the model as it is ("none"), or the recipe's initial weights
   drawn with the seed ("untrained");
2. held-out MLM at 128 tokens (mini_bert.train.runs.score: BERT's masking with the fixed
   evaluation seed) on the validation and test articles of the domain ("domain.mlm@128") and of
   every topic ("general.mlm@128"), the same targets for every arm;
3. unless the arm is a rate choice's: chapter 10's fine-tuning runs from its encoder
   (specialised.ADAPTATION_DOWNSTREAM: truecasing inside and outside the domain, topics at 1,000
   labels), the fine-tuning seed the run's seed, so that arms stay paired.
"""
from __future__ import annotations

import copy
import platform
import time
from dataclasses import dataclass

import torch

from ..build.data import load_corpus
from ..core.cache import code_version
from ..train.finetune_runs import finetune_model, prefix_init, prefix_settings, run_settings
from ..train.fingerprint import PREFIX, Prefix, fingerprint, isolated, rounded
from ..train.heldout import most_frequent_token
from ..train.recipe import Recipe
from ..train.runs import flatten_metrics, nested_metric, score
from . import domain, study_log
from .specialised import ADAPTATION_DOWNSTREAM, CHOSEN_BY, CONTINUATION, CONTINUED_RATE, SpecialisedStudy
from .specialised import STUDIES as DEFINED
from .study_log import LOG_FORMAT, StudyResult, arm_definition, study_command, study_path  # noqa: F401

CODE = ("smaller.domain_study",)  # the code version the logs carry: this module and all it imports
STUDIES = {name: DEFINED[name] for name in ("domain-adaptation-rate", "domain-adaptation")}
SCORE_LENGTH = 128  # held-out MLM at 128 tokens, as Part III's grids score and choose by


# ============================================================================================
# The model of an arm
# ============================================================================================

@dataclass
class Start:
    """What a run starts from: a BertForPreTraining, its tokenizer and the recipe it was trained with."""

    model: torch.nn.Module
    tokenizer: object
    recipe: Recipe


def book_model(prefix: Prefix | None = None) -> Start:
    """The book's pretrained tiny-wiki (for a fingerprint, the model of its own run's prefix, so
    that the fingerprint chains to the pretraining code)."""
    if prefix is None:
        from ..train.pretrained import pretrained

        run = pretrained("tiny-wiki", progress=False)
        return Start(run.model, run.tokenizer, run.recipe)
    from ..train.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(prefix_init("tiny-wiki", prefix))
    return Start(checkpoint.model, checkpoint.tokenizer, Recipe.from_dict(checkpoint.recipe))


def continuation_documents(text: str, seed: int, prefix: Prefix | None = None) -> list:
    """The training text an arm continues on (a fingerprint's prefix: its first prefix.labels
    documents). TAPT's are the in-domain truecase task's training sentences drawn with `seed`, the
    ones its fine-tuning learns from, without their capitals (the uncased model reads no capitals)."""
    if text == "general":
        documents = domain.general_documents("train")
    elif text == "domain":
        documents = domain.domain_documents(domain.DOMAIN, "train")
    elif text == "task":
        labels = ADAPTATION_DOWNSTREAM["truecase_in"]["labels"]
        sentences = domain.truecase_training_sentences(domain.DOMAIN, labels=labels, seed=seed)
        documents = domain.text_documents(" ".join(words) for words, _ in sentences)
    else:
        raise ValueError(f"unknown text {text!r} to continue on; the texts: general, domain, task")
    return documents if prefix is None else documents[:prefix.labels]


def arm_model(definition: dict, seed: int, *, device=None, prefix: Prefix | None = None):
    """(BertForPreTraining in eval mode, tokenizer, continuation history or None, documents
    continued on) of an arm with `seed`."""
    start = book_model(prefix)
    text = definition["text"]
    if text == "none":
        return start.model.eval(), start.tokenizer, None, 0
    if text == "untrained":
        from ..train.pretraining import build_model

        return build_model(start.recipe.replace(seed=seed), start.tokenizer.vocab_size).eval(), start.tokenizer, None, 0
    if definition["lr"] is None:
        raise ValueError(f"the {text} arm's rate is not chosen yet: run {study_command('domain-adaptation-rate', [0], 'cpu')} "
                         "and write the choice into specialised.CONTINUED_RATE (the plan)")
    documents = continuation_documents(text, seed, prefix)
    changes = {k: definition[k] for k in CONTINUATION if k in definition}
    continued = domain.continue_pretraining(documents, definition["steps"], lr=definition["lr"], seed=seed,
                                            start=start, device=device if prefix is None else "cpu",
                                            stop_at_step=None if prefix is None else prefix.steps, **changes)
    return continued.model, continued.tokenizer, continued.history, len(documents)


# ============================================================================================
# Scores
# ============================================================================================

def heldout_documents(where: str, split: str, prefix: Prefix | None = None) -> list:
    """The held-out articles MLM is scored on: the domain's, or every article of the split."""
    documents = domain.domain_documents(domain.DOMAIN, split) if where == "domain" else load_corpus(split)
    return documents if prefix is None else documents[:prefix.heldout_docs]


def mlm_scores(model, tokenizer, prefix: Prefix | None = None) -> dict[str, float]:
    """Held-out MLM at SCORE_LENGTH tokens on the domain's and on all validation and test articles:
    {"validation.domain.mlm@128.accuracy": ..., "test.general.mlm@128.loss": ...}; the unigram
    baseline beside it is the training split's most frequent token (a prefix: of its first
    documents)."""
    train = None if prefix is None else load_corpus("train")[:prefix.labels]
    unigram = most_frequent_token(tokenizer, train)
    out = {}
    for where in ("domain", "general"):
        scores = score(model, tokenizer, lengths=(SCORE_LENGTH,), unigram=unigram,
                       validation_documents=heldout_documents(where, "validation", prefix),
                       test_documents=heldout_documents(where, "test", prefix))
        out.update({nested_metric(key, where): value for key, value in flatten_metrics(scores).items()})
    return out


def downstream(model, tokenizer, seed: int, *, untrained: bool, device=None,
               prefix: Prefix | None = None) -> tuple[dict[str, float], dict[str, dict]]:
    """Chapter 10's runs from the model's encoder (a copy for each), with the fine-tuning seed
    `seed`: ({"test.truecase_in.macro_f1": ...}, {run: {"train_examples", "best_epoch",
    "train_loss"}})."""
    metrics, runs = {}, {}
    for name, settings in ADAPTATION_DOWNSTREAM.items():
        # "init" names what the encoder is, for the record; the encoder itself is given
        settings = run_settings(**settings, init="scratch" if untrained else "tiny-wiki")
        if prefix is not None:
            settings = prefix_settings(settings, prefix)
        encoder = copy.deepcopy(model.bert).train()
        record, _ = finetune_model(settings, seed, device=device if prefix is None else "cpu",
                                   encoder=(encoder, tokenizer))
        metrics.update({nested_metric(key, name): value for key, value in record["metrics"].items()})
        runs[name] = {"train_examples": record["train_examples"], "best_epoch": record["best_epoch"],
                      "train_loss": record["history"]["train_loss"]}
    return metrics, runs


# ============================================================================================
# One run
# ============================================================================================

def run_arm(study: SpecialisedStudy | str, arm: str, seed: int, scale: str = "cpu", *, device=None,
            prefix: Prefix | None = None) -> dict:
    """Run one arm of a domain-adaptation study with one seed and return its record (see the
    module's docstring); prefix: a fingerprint's run, on a few steps and examples, its losses kept."""
    study = get_study(study) if isinstance(study, str) else study
    definition = arm_definition(study, arm, scale)
    started = time.perf_counter()
    model, tokenizer, history, documents = arm_model(definition, seed, device=device, prefix=prefix)
    metrics = mlm_scores(model, tokenizer, prefix)
    runs = {}
    if not definition.get("choice"):
        found, runs = downstream(model, tokenizer, seed, untrained=definition["text"] == "untrained", device=device,
                                 prefix=prefix)
        metrics.update(found)
    record = {"arm": arm, "seed": seed, "definition": definition, "metrics": metrics,
              "steps": history["step"][-1] if history else 0, "documents": documents,
              "train_seconds": round(history["seconds"][-1], 1) if history else 0.0,
              "downstream": {name: {k: v for k, v in run.items() if k != "train_loss"} for name, run in runs.items()},
              "seconds": round(time.perf_counter() - started, 1),
              "provenance": {"code_version": code_version(*CODE), "torch": torch.__version__,
                             "python": platform.python_version(), "threads": torch.get_num_threads()}}
    if prefix is not None:
        record["history"] = {"continuation": {k: history[k] for k in ("loss", "lr")} if history else None,
                             "downstream": {name: run["train_loss"] for name, run in runs.items()}}
    return record


@isolated
def arm_fingerprint(study: SpecialisedStudy, arm: str, seed: int, scale: str = "cpu", *,
                    prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of one arm's record (mini_bert.train.fingerprint): run_arm on the prefix.
    exact: the continuation's steps and documents, each fine-tuning's examples and chosen epoch;
    close: every score and each step's and epoch's loss."""
    record = run_arm(study, arm, seed, scale, device="cpu", prefix=prefix)
    definition = {"definition": record["definition"], "score_length": SCORE_LENGTH}
    if not record["definition"].get("choice"):
        definition["downstream"] = ADAPTATION_DOWNSTREAM
    exact = {k: record[k] for k in ("steps", "documents", "downstream")}
    return fingerprint(definition, exact, rounded({"metrics": record["metrics"], "history": record["history"]}),
                       prefix)


# ============================================================================================
# The log (mini_bert.smaller.study_log) and the choice of the rates
# ============================================================================================

def _check(study: SpecialisedStudy, arms: list[str], scale: str) -> None:
    """The study's continued arms run only at the chosen rates (check_rates)."""
    if not study.choice and any(study.arms[scale][a]["steps"] for a in arms):
        check_rates()


def chosen_rates(result: StudyResult) -> dict[str, float]:
    """{text: peak rate} the choice study's log chooses: for each text, the rate whose run has the
    best held-out MLM accuracy on validation text like its own (specialised.CHOSEN_BY; a tie goes
    to the smaller rate). ValueError when a text has not run at every rate, or when its best is the
    smallest or largest tried: the plan then extends its rates by the next factor of 2
    (specialised.RATE_EXTENSIONS) and chooses again."""
    by_text: dict[str, dict[float, float]] = {}
    for r in result.runs:
        text = r["definition"]["text"]
        by_text.setdefault(text, {})[r["definition"]["lr"]] = r["metrics"][f"validation.{CHOSEN_BY[text]}.mlm@128.accuracy"]
    expected: dict[str, set] = {}
    for definition in result.study.arms[result.scale].values():
        expected.setdefault(definition["text"], set()).add(definition["lr"])
    chosen = {}
    for text, rates in expected.items():
        missing = sorted(rates - set(by_text.get(text, {})))
        if missing:
            raise ValueError(f"the rate choice has not run the {text} text at {', '.join(f'{r:g}' for r in missing)} "
                             "yet: run it to the end before choosing")
        tried = sorted(rates)
        best = max(tried, key=lambda lr: by_text[text][lr])
        if best in (tried[0], tried[-1]):
            beyond = best / 2 if best == tried[0] else best * 2
            raise ValueError(f"the {text} text is best at {best:g}, an edge of the rates tried "
                             f"({', '.join(f'{r:g}' for r in tried)}): add {beyond:g} to "
                             f"specialised.RATE_EXTENSIONS[{text!r}] and run the choice again (the plan)")
        chosen[text] = best
    return chosen


def check_rates() -> None:
    """Refuse to run the study's continued arms before their rates are chosen or when
    specialised.CONTINUED_RATE is not that choice (study_log.Runner.check_choice)."""
    RUNNER.check_choice("domain-adaptation-rate", chosen_rates, CONTINUED_RATE, "the continued arms' rates are",
                        "specialised.CONTINUED_RATE")


RUNNER = study_log.Runner("domain-adaptation", STUDIES, CODE, __name__, check=_check)
get_study, load_study, study_grid = RUNNER.get_study, RUNNER.load_study, RUNNER.study_grid
