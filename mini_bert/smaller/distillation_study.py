"""Running chapter 17's distillation study: one arm and seed, its fingerprint, its resumable log.

The arms are data (mini_bert.smaller.specialised: "distillation", and "distillation-temperature",
the choice of the temperature on validation with seed 0), the plan is
mini_bert/results/plan-distillation.md. What one run is depends on the arm's role:

- "teacher": MiniLM fine-tuned on the budget's labels, chapter 10's run
  (finetune_runs.finetune_model). Its soft targets over every training article of the task and its
  weights are kept in the cache (verified when read) for the students of the same budget and seed:
  every student of a seed learns from the same teacher, and a student never trains one of its own
  unless the teacher's arm has not run yet.
- "tfidf": chapter 10's bag of words on the same labels.
- "student" without distillation: chapter 10's run; the three-layer MiniLM is first cut from
  MiniLM's layers 0, 2 and 4 (distillation.student_from_teacher, DistilBERT's start).
- "student" with distillation: distillation.distill on the teacher's soft targets over the task's
  training articles, the budget's labelled ones carrying their labels (which count only through
  label_weight), the epoch chosen on the validation articles, as every other arm.

Every arm is scored on the same validation and test articles. `study_grid` runs arms x seeds into
one log (mini_bert.train.engine), rewritten after every run so that a stopped command resumes, with
the fingerprint of every arm (`arm_fingerprint`: the same code on a few examples, which
`python -m mini_bert provenance` recomputes after a refactor).
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..build.data import topic_labels
from ..build.tokenization import bert_base_uncased_tokenizer
from ..core.cache import cache_key, cached_artifact, code_version
from ..train.finetune_runs import (finetune_config, finetune_model, prefix_init, prefix_settings, run_settings,
                                   split_metrics)
from ..train.finetuning import evaluate, load_encoder, make_head, tfidf_baseline
from ..train.fingerprint import PREFIX, Prefix, fingerprint, isolated, rounded
from ..train.tasks import encode_texts, subsample, topic_examples
from . import distillation as distil
from . import study_log
from .specialised import STUDIES as DEFINED
from .specialised import TEMPERATURE, SpecialisedStudy, distillation_arms
from .study_log import LOG_FORMAT, StudyResult, arm_definition, study_command, study_path  # noqa: F401

CODE = ("smaller.distillation_study",)  # the code version the logs carry: this module and all it imports
TEACHER_FORMAT = "mini_bert-distillation-teacher/1"
STUDIES = {name: DEFINED[name] for name in ("distillation", "distillation-temperature")}


# ============================================================================================
# What a run reads: the labelled draw, the unlabelled pool, the held-out articles
# ============================================================================================

def _settings(definition: dict, prefix: Prefix | None) -> dict:
    """The arm's fine-tuning settings as finetune_model takes them (the three-layer MiniLM's init
    is "minilm", the model it is cut from); for a fingerprint, cut to the prefix and starting from
    the book's model's own prefix (prefix_init), as every student of the prefix does."""
    settings = dict(definition["finetune"])
    if settings.get("init") == "minilm-l3":
        settings["init"] = "minilm"
    settings = run_settings(**settings)
    if prefix is None:
        return settings
    return {**prefix_settings(settings, prefix), "init": prefix_init(settings["init"], prefix)}


def _prefix_labels(labels: int | None, prefix: Prefix | None) -> int | None:
    """The labelled draw of a run: the arm's, or a fingerprint's at most prefix.labels (as
    prefix_settings cuts it)."""
    return labels if prefix is None else min(labels or prefix.labels, prefix.labels)


def pool(labels: int | None, seed: int, prefix: Prefix | None = None) -> list[tuple[str, int | None]]:
    """The texts a student distils on: every training article of the topic task, the `labels` drawn
    with `seed` keeping their label (the same draw as the teacher's and the labels-only arms',
    tasks.subsample), the others None. A fingerprint's prefix: its labelled draw and as many
    unlabelled articles after them."""
    articles = topic_examples("train")
    drawn = set(subsample(list(range(len(articles))), _prefix_labels(labels, prefix), seed, "articles"))
    texts = [(text, label if i in drawn else None) for i, (text, label) in enumerate(articles)]
    if prefix is not None:
        unlabelled = [t for t in texts if t[1] is None][:len(drawn)]
        texts = [t for t in texts if t[1] is not None] + unlabelled
    return texts


def held_out(settings: dict) -> dict[str, list[tuple[str, int]]]:
    """The validation and test articles every arm is scored on (the first max_eval, or all)."""
    return {split: topic_examples(split)[:settings["max_eval"]] for split in ("validation", "test")}


def _encoder(init: str, seed: int, prefix: Prefix | None):
    """(BertModel, tokenizer) a student starts from: the three-layer MiniLM cut from MiniLM, or
    chapter 10's init (for a fingerprint, the book's model's own prefix)."""
    if init == "minilm-l3":
        minilm, _ = load_encoder("minilm")
        return distil.student_from_teacher(minilm), bert_base_uncased_tokenizer()
    return load_encoder(init if prefix is None else prefix_init(init, prefix), seed=seed)


# ============================================================================================
# The teacher, trained once per budget and seed
# ============================================================================================

@dataclass
class Teacher:
    classifier: distil.Classifier
    soft_targets: torch.Tensor  # its logits on pool(labels, seed), in that order
    record: dict  # its run's record (finetune_model's, with the pool's size)
    from_cache: bool


def _teacher_definition(labels: int | None, scale: str) -> dict:
    arms = distillation_arms(scale)
    arm = f"teacher/labels={labels or 'all'}"
    if arm not in arms:
        budgets = [a.split("=")[1] for a in arms if a.startswith("teacher/")]
        raise ValueError(f"the {scale} scale has no teacher at {labels} labels; its budgets: {', '.join(budgets)}")
    return arms[arm]


def _train_teacher(labels: int | None, seed: int, scale: str, device, prefix: Prefix | None):
    settings = _settings(_teacher_definition(labels, scale), prefix)
    record, model = finetune_model(settings, seed, device=device)
    model = model.cpu().eval()
    tokenizer = bert_base_uncased_tokenizer()
    names = topic_labels()
    texts = pool(labels, seed, prefix)
    soft = distil.teacher_logits(distil.Classifier(model, tokenizer, names), [t for t, _ in texts],
                                 settings["max_length"])
    return model, soft, {**record, "pool": len(texts)}


def teacher(labels: int | None, seed: int, scale: str = "cpu", *, device=None, prefix: Prefix | None = None) -> Teacher:
    """The teacher of the budget `labels` and `seed`: trained here for a fingerprint's prefix, else
    read from the cache (verified) or trained into it. The cache key holds the teacher's settings,
    the seed, the label names, the corpus (training_data_recipe) and the pool's texts and labels, so
    that soft targets are never read against other articles; the code that trains it is vouched for
    by the log's fingerprints."""
    from safetensors.torch import load_file, save_file

    from ..build.tokenization import training_data_recipe

    names = topic_labels()
    if prefix is not None:
        model, soft, record = _train_teacher(labels, seed, scale, device, prefix)
        return Teacher(distil.Classifier(model, bert_base_uncased_tokenizer(), names), soft, record, False)
    settings = _settings(_teacher_definition(labels, scale), None)
    texts = pool(labels, seed)
    key = cache_key("distil-teacher", code=TEACHER_FORMAT, settings=settings, seed=seed, labels=names,
                    data=training_data_recipe(),
                    pool=hashlib.sha256(json.dumps(texts).encode("utf-8")).hexdigest())
    trained = []

    def fill(folder: Path) -> None:
        model, soft, record = _train_teacher(labels, seed, scale, device, None)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
        save_file({"soft_targets": soft.contiguous()}, str(folder / "soft_targets.safetensors"))
        (folder / "record.json").write_text(json.dumps(record), encoding="utf-8")
        trained.append(True)

    folder = cached_artifact(key, fill, format=TEACHER_FORMAT)
    encoder, tokenizer = load_encoder("minilm")
    model = make_head("sequence", encoder, len(names), finetune_config(settings, seed))
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    soft = load_file(str(folder / "soft_targets.safetensors"))["soft_targets"]
    record = json.loads((folder / "record.json").read_text(encoding="utf-8"))
    return Teacher(distil.Classifier(model.eval(), tokenizer, names), soft, record, not trained)


# ============================================================================================
# One run
# ============================================================================================

def _labels_of(definition: dict) -> int | None:
    return definition["finetune"]["labels"]


def run_arm(study: SpecialisedStudy | str, arm: str, seed: int, scale: str = "cpu", *, device=None,
            prefix: Prefix | None = None) -> dict:
    """Run one arm of a distillation study with one seed and return its record (see the module's
    docstring); prefix: a fingerprint's run, on a few examples, its losses kept."""
    study = get_study(study) if isinstance(study, str) else study
    definition = arm_definition(study, arm, scale)
    started = time.perf_counter()
    settings = _settings(definition, prefix) if definition["role"] != "tfidf" else None
    labels = _labels_of(definition)
    from_cache, history, best_epoch, teacher_from_cache = False, None, None, None
    held = held_out(settings or {"max_eval": None if prefix is None else prefix.max_eval})
    labelled = subsample(topic_examples("train"), _prefix_labels(labels, prefix), seed, "articles")
    train_examples = len(labelled)
    if definition["role"] == "tfidf":
        scores = {split: tfidf_baseline(labelled, held[split], len(topic_labels()), seed=seed) for split in held}
        metrics = split_metrics(scores["validation"], scores["test"])
    elif definition["role"] == "teacher":
        found = teacher(labels, seed, scale, device=device, prefix=prefix)
        metrics, best_epoch, history, from_cache = (found.record["metrics"], found.record["best_epoch"],
                                                    found.record["history"], found.from_cache)
    elif definition["distillation"] is None:
        init = definition["finetune"]["init"]
        encoder = _encoder(init, seed, prefix) if init == "minilm-l3" else None
        record, _ = finetune_model(settings, seed, device=device, encoder=encoder)
        metrics, best_epoch, history = record["metrics"], record["best_epoch"], record["history"]
    else:
        their = teacher(labels, seed, scale, device=device, prefix=prefix)
        teacher_from_cache = their.from_cache
        config = finetune_config(settings, seed)
        encoder, tokenizer = _encoder(definition["finetune"]["init"], seed, prefix)
        names = topic_labels()
        student = distil.Classifier(make_head("sequence", encoder, len(names), config), tokenizer, names)
        result = distil.distill(their.classifier, student, pool(labels, seed, prefix), held["validation"], config,
                                distil.DistillConfig(**definition["distillation"]),
                                max_length=settings["max_length"], device=device, soft_targets=their.soft_targets)
        test = evaluate(result.model, encode_texts(tokenizer, held["test"], settings["max_length"], pairs=False))
        metrics, best_epoch, history = split_metrics(result.validation, test), result.best_epoch, result.history
    record = {"arm": arm, "seed": seed, "role": definition["role"], "definition": definition, "metrics": metrics,
              "best_epoch": best_epoch, "train_examples": train_examples,
              "heldout": {split: len(examples) for split, examples in held.items()},
              "seconds": round(time.perf_counter() - started, 1), "from_cache": from_cache,
              # a student that found no teacher trained it first: its seconds include the teacher's
              "teacher_from_cache": teacher_from_cache,
              "provenance": {"code_version": code_version(*CODE), "torch": torch.__version__,
                             "python": platform.python_version(), "threads": torch.get_num_threads()}}
    if prefix is not None:
        record["history"] = {k: history[k] for k in ("train_loss", "lr") if k in history} if history else None
    return json.loads(json.dumps(record))


@isolated
def arm_fingerprint(study: SpecialisedStudy, arm: str, seed: int, scale: str = "cpu", *,
                    prefix: Prefix = PREFIX) -> dict:
    """The fingerprint of one arm's record (mini_bert.train.fingerprint): run_arm on the prefix.
    exact: the chosen epoch, the labelled draw's size and the held-out articles' counts; close: the
    scores of a few dozen articles and each epoch's loss and rate."""
    record = run_arm(study, arm, seed, scale, device="cpu", prefix=prefix)
    exact = {k: record[k] for k in ("best_epoch", "train_examples", "heldout")}
    return fingerprint({"definition": record["definition"]}, exact,
                       rounded({"metrics": record["metrics"], "history": record["history"]}), prefix)


# ============================================================================================
# The log (mini_bert.smaller.study_log) and the choice of the temperature
# ============================================================================================

def _check(study: SpecialisedStudy, arms: list[str], scale: str) -> None:
    """A student distils at the cpu scale only at the chosen temperature (check_temperature)."""
    if scale == "cpu" and not study.choice and any(study.arms[scale][a].get("distillation") for a in arms):
        check_temperature()


def _order(study: SpecialisedStudy, scale: str) -> list[str]:
    """The teachers first: a second worker would otherwise wait on a teacher a student is training."""
    return sorted(study.arms[scale], key=lambda a: study.arms[scale][a]["role"] != "teacher")


def chosen_temperature(result: StudyResult) -> float:
    """The temperature the choice study's log chooses: its arm with the best validation accuracy
    (seed 0; a tie goes to the arm tried first, the smaller temperature). ValueError when that is the
    smallest or largest tried: the plan then extends the choice by the next factor of 2 (add it to
    specialised.TEMPERATURES and run the study again)."""
    best = result.best_arm(result.arms(), "validation.accuracy")
    chosen = result.record(best, 0)["definition"]["distillation"]["temperature"]
    tried = sorted(r["definition"]["distillation"]["temperature"] for r in result.runs)
    if chosen in (tried[0], tried[-1]):
        raise ValueError(f"the best temperature, {chosen:g}, is at the edge of those tried ({tried}): extend "
                         "specialised.TEMPERATURES by the next factor of 2 and run the choice again (the plan)")
    return chosen


def check_temperature() -> None:
    """Refuse to distil at the cpu scale before the temperature is chosen or when the code's
    TEMPERATURE is not that choice (study_log.Runner.check_choice)."""
    RUNNER.check_choice("distillation-temperature", chosen_temperature, TEMPERATURE, "the temperature is",
                        "specialised.TEMPERATURE")


RUNNER = study_log.Runner("distillation", STUDIES, CODE, __name__, check=_check, order=_order)
get_study, load_study, study_grid = RUNNER.get_study, RUNNER.load_study, RUNNER.study_grid
