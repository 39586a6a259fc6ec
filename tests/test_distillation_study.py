"""mini_bert.smaller.distillation_study: chapter 17's distillation study runs every role on the same draw of
labels and the same held-out articles, keeps one verified teacher per budget and seed, and logs like the other
studies (resumable, fingerprinted, checked by the provenance command). The runs here are fingerprint prefixes:
a few dozen articles, two epochs."""
from __future__ import annotations

import json

import pytest
import torch
from conftest import study_log_round_trip

from mini_bert.smaller import distillation as distil
from mini_bert.smaller import distillation_study as ds
from mini_bert.smaller import study_log
from mini_bert.smaller.specialised import STUDIES, TEMPERATURE, TEMPERATURES, SpecialisedStudy, check_study
from mini_bert.train.finetune_runs import prefix_init
from mini_bert.train.fingerprint import PREFIX, compare
from mini_bert.train.tasks import subsample, topic_examples

STUDY = ds.get_study("distillation")


def test_the_pool_labels_the_same_draw_as_the_teacher_and_hides_the_rest():
    articles = topic_examples("train")
    texts = ds.pool(100, 3)
    assert [t for t, _ in texts] == [t for t, _ in articles]  # every training article, in order
    labelled = [(t, label) for t, label in texts if label is not None]
    assert labelled == subsample(articles, 100, 3, "articles")  # load_task's draw with that seed
    cut = ds.pool(1000, 3, PREFIX)  # a prefix: its own labelled draw and as many unlabelled articles
    assert sum(label is not None for _, label in cut) == PREFIX.labels == sum(label is None for _, label in cut)
    assert [x for x in cut if x[1] is not None] == subsample(articles, PREFIX.labels, 3, "articles")


def test_unknown_studies_arms_and_scales_are_refused_before_anything_trains(tmp_path):
    with pytest.raises(ValueError, match="unknown distillation study 'domain'"):
        ds.get_study("domain")
    with pytest.raises(ValueError, match="no arm 'teacher/labels=5'"):
        ds.study_grid("distillation", 1, arms=["teacher/labels=5"], results=tmp_path / "x.json", progress=False)
    with pytest.raises(ValueError, match="no 'tpu' scale"):
        ds.run_arm(STUDY, "tfidf/labels=100", 0, "tpu")
    with pytest.raises(ValueError, match="no 'tpu' scale"):
        ds.study_grid("distillation", 1, scale="tpu", results=tmp_path / "x.json", progress=False)
    with pytest.raises(ValueError, match="no teacher at 50 labels"):
        ds.teacher(50, 0)
    with pytest.raises(ValueError, match="with seed 0"):
        ds.study_grid("distillation-temperature", 3, results=tmp_path / "x.json", progress=False)
    assert not (tmp_path / "x.json").exists()


def test_a_prefix_run_of_each_kind_scores_the_same_articles_and_repeats_itself():
    fingerprints = {arm: ds.arm_fingerprint(STUDY, arm, 0)
                    for arm in ("tfidf/labels=100", "tiny-wiki/labels/labels=100", "tiny-wiki/soft+labels/labels=100")}
    for arm, found in fingerprints.items():
        assert compare(found, ds.arm_fingerprint(STUDY, arm, 0)) == [], arm  # the same run, again
    distilled = ds.run_arm(STUDY, "tiny-wiki/soft+labels/labels=100", 0, device="cpu", prefix=PREFIX)
    assert distilled["role"] == "student" and distilled["definition"]["distillation"]["label_weight"] == 1.0
    assert set(distilled["metrics"]) == {f"{s}.{m}" for s in ("validation", "test") for m in ("accuracy", "macro_f1")}
    assert distilled["best_epoch"] in (1, 2) and len(distilled["history"]["train_loss"]) >= 1
    # every kind is read on the same held-out articles, after the same labelled draw
    exact = [found["exact"] for found in fingerprints.values()]
    assert all(e["heldout"] == {"validation": PREFIX.max_eval, "test": PREFIX.max_eval} for e in exact)
    assert all(e["train_examples"] == PREFIX.labels for e in exact)


def test_a_prefix_run_of_the_labels_only_arm_starts_from_the_prefix_of_the_books_model_as_the_students_do():
    labels_only = ds._settings(STUDY.arms["cpu"]["tiny-wiki/labels/labels=100"], PREFIX)
    assert labels_only["init"] == prefix_init("tiny-wiki", PREFIX) != "tiny-wiki"
    assert ds._settings(STUDY.arms["cpu"]["teacher/labels=100"], PREFIX)["init"] == "minilm"
    assert ds._settings(STUDY.arms["cpu"]["tiny-wiki/labels/labels=100"], None)["init"] == "tiny-wiki"


def test_the_teacher_is_trained_once_per_budget_and_seed_and_verified_when_read(tmp_path, monkeypatch):
    monkeypatch.setenv("MINI_BERT_CACHE", str(tmp_path))
    calls = []
    real = ds._train_teacher

    def on_a_prefix(labels, seed, scale, device, prefix):  # a real teacher, trained on a few articles
        calls.append((labels, seed))
        return real(labels, seed, scale, device, PREFIX)

    monkeypatch.setattr(ds, "_train_teacher", on_a_prefix)
    first = ds.teacher(100, 0)
    assert not first.from_cache and calls == [(100, 0)]
    texts = [text for text, _ in ds.pool(100, 0, PREFIX)]
    # the soft targets are the teacher's logits on the pool's articles, row for row
    assert torch.allclose(first.soft_targets, distil.teacher_logits(first.classifier, texts, PREFIX.max_length),
                          atol=1e-5)
    again = ds.teacher(100, 0)
    assert again.from_cache and calls == [(100, 0)]  # read, not trained
    assert (again.soft_targets == first.soft_targets).all() and again.record == first.record
    folder = next(p for p in tmp_path.iterdir() if p.name.startswith("distil-teacher"))
    (folder / "soft_targets.safetensors").write_bytes(b"damaged")
    rebuilt = ds.teacher(100, 0)  # a damaged entry is found by its manifest and trained again
    assert not rebuilt.from_cache and calls == [(100, 0), (100, 0)]
    ds.teacher(300, 0)
    assert calls[-1] == (300, 0)  # another budget, another teacher


def test_a_distillation_log_resumes_refuses_changed_arms_and_passes_the_provenance_check(tmp_path, monkeypatch):
    path = tmp_path / "distillation-cpu.json"
    arms = ["tfidf/labels=100", "tiny-wiki/labels/labels=100"]
    log = study_log_round_trip(ds, "distillation", arms, path, monkeypatch, "distillation", "test.accuracy")
    log["runs"][0]["definition"] = {**log["runs"][0]["definition"], "pool": "half"}
    path.write_text(json.dumps(log))
    with pytest.raises(ValueError, match="defined otherwise than the study's now"):
        ds.study_grid("distillation", 1, arms=arms, results=path, progress=False)


def test_the_temperature_is_chosen_by_a_one_seed_study_of_three_arms_that_differ_only_in_it():
    study = ds.get_study("distillation-temperature")
    assert study.choice and study.seeds == 1 and not study.comparisons and TEMPERATURE in TEMPERATURES
    arms = study.arms["cpu"]
    assert sorted(a["distillation"]["temperature"] for a in arms.values()) == sorted(TEMPERATURES)
    base = STUDIES["distillation"].arms["cpu"]["tiny-wiki/soft/labels=1000"]
    for arm in arms.values():
        assert {**arm, "distillation": base["distillation"]} == base  # only the temperature moves
    with pytest.raises(ValueError, match="reads no verdicts"):
        check_study(SpecialisedStudy("x", "", study.arms, seeds=1, choice=True,
                                     comparisons=STUDIES["distillation"].comparisons[:1]))


def test_the_study_command_names_chapter_17s_studies(capsys):
    from mini_bert.__main__ import main

    assert main(["study", "no-such-study"]) == 2
    err = capsys.readouterr().err
    assert "distillation" in err and "distillation-temperature" in err


def test_no_student_distils_before_the_temperature_is_chosen_and_a_choice_at_an_edge_is_extended(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setattr(study_log, "study_path", lambda name, scale: tmp_path / f"{name}-{scale}.json")
    with pytest.raises(ValueError, match="temperature is not chosen yet: run python -m mini_bert study "
                                         "distillation-temperature --seeds 1 --scale cpu"):
        ds.study_grid("distillation", 1, arms=["tiny-wiki/soft/labels=100"], results=tmp_path / "d.json",
                      progress=False)
    assert not (tmp_path / "d.json").exists()
    choice = ds.get_study("distillation-temperature")

    def result(accuracies):
        runs = [{"arm": arm, "seed": 0, "definition": d, "metrics": {"validation.accuracy": accuracies[i]}}
                for i, (arm, d) in enumerate(choice.arms["cpu"].items())]
        return ds.StudyResult(choice, "cpu", runs)

    temperatures = [d["distillation"]["temperature"] for d in choice.arms["cpu"].values()]
    inside = [0.70, 0.72] + [0.71] * (len(temperatures) - 2)
    assert ds.chosen_temperature(result(inside)) == temperatures[1]
    tied = [0.70, 0.72, 0.72] + [0.71] * (len(temperatures) - 3)
    assert ds.chosen_temperature(result(tied)) == temperatures[1]  # a tie: the first tried
    with pytest.raises(ValueError, match="at the edge of those tried"):
        ds.chosen_temperature(result(inside[:-1] + [0.73]))


def test_the_temperature_in_the_code_is_the_shipped_choice():
    """specialised.TEMPERATURE is the best validation accuracy of the temperature study's log, once it
    ships (the plan: chosen with seed 0 before the study's other seeds run)."""
    path = ds.study_path("distillation-temperature", "cpu")
    if not path.is_file():
        pytest.skip("the temperature study has not run yet: TEMPERATURE is the plan's starting value")
    assert ds.chosen_temperature(ds.load_study("distillation-temperature")) == TEMPERATURE


def test_the_shipped_study_is_complete_at_the_chosen_temperature_and_its_preconditions_hold():
    """The shipped log: every planned arm at every seed, at its definition as the code holds it (the
    chosen temperature), each arm seeing its budget's labels alone and scored on the same articles;
    the labels-only arms are chapter 10's data-efficiency runs; the nine preconditions hold."""
    from mini_bert.train.finetune_runs import load_finetune_grid

    result = ds.load_study("distillation")
    assert result.log["command"] == "python -m mini_bert study distillation --seeds 5 --scale cpu"
    arms = STUDY.arms["cpu"]
    assert sorted((r["arm"], r["seed"]) for r in result.runs) == sorted((a, s) for a in arms for s in range(5))
    for record in result.runs:
        assert record["definition"] == arms[record["arm"]]
        assert record["train_examples"] == record["definition"]["finetune"]["labels"]
    assert all(d["distillation"]["temperature"] == TEMPERATURE for d in arms.values() if d.get("distillation"))
    assert len({json.dumps(r["heldout"], sort_keys=True) for r in result.runs}) == 1
    ch10 = load_finetune_grid("data-efficiency")
    for model in ("tiny-wiki", "scratch"):  # on the three seeds chapter 10's study has
        for n in (100, 300, 1000):
            ours, theirs = (log.values(arm, "test.accuracy") for log, arm in
                            ((result, f"{model}/labels/labels={n}"), (ch10, f"{model}/labels={n}")))
            assert sorted(theirs) == [0, 1, 2] and {s: ours[s] for s in theirs} == theirs
    pre = [v for c, v in result.verdicts() if c.question.startswith("precondition")]
    assert len(pre) == 9 and all(v.difference.above_zero for v in pre)
