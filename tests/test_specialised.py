"""mini_bert.smaller.specialised: the chapter's grids as data, checked before any run, and their verdicts."""
import pytest

from mini_bert.train.stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE
from mini_bert.smaller.specialised import (LABEL_BUDGETS, SEEDS, STUDIES, Comparison, SpecialisedStudy, check_study,
                                   verdicts)


def test_both_studies_have_a_cpu_and_a_gpu_scale_three_seeds_or_more_and_chapter_10s_budgets():
    for study in STUDIES.values():
        assert set(study.arms) == {"cpu", "gpu"}
        assert study.seeds == SEEDS >= 3 or (study.choice and study.seeds == 1)  # a choice on seed 0
    cpu = STUDIES["distillation"].arms["cpu"]
    for n in LABEL_BUDGETS["cpu"]:
        for arm in ("teacher", "tfidf", "tiny-wiki/labels", "tiny-wiki/soft", "tiny-wiki/soft+labels",
                    "scratch/labels"):
            assert f"{arm}/labels={n}" in cpu
        # the student's labels-only arm is chapter 10's data-efficiency run at that budget
        assert cpu[f"tiny-wiki/labels/labels={n}"]["finetune"]["lr"] == 1e-3
    assert cpu["tiny-wiki/soft/labels=100"]["pool"] == "all"
    assert "minilm-l3/soft+attention/labels=1000" in cpu
    assert "labels=all" in " ".join(STUDIES["distillation"].arms["gpu"])
    adaptation = STUDIES["domain-adaptation"].arms
    steps = {a["steps"] for a in adaptation["cpu"].values() if a["text"] in ("general", "domain", "task")}
    assert steps == {600}  # equal extra steps: the control separates more training from the right text


def test_a_study_with_too_few_seeds_or_a_comparison_of_no_arm_is_refused():
    study = STUDIES["domain-adaptation"]
    with pytest.raises(ValueError, match="at least 3 seeds"):
        check_study(SpecialisedStudy("x", "", study.arms, seeds=2))
    with pytest.raises(ValueError, match="names no arm"):
        check_study(SpecialisedStudy("x", "", study.arms,
                                     comparisons=[Comparison("m", "nope", "tiny-wiki", 0.01, "q")]))


def test_verdicts_read_the_books_rule_from_records():
    study = SpecialisedStudy("toy", "", {"cpu": {"a": {}, "b": {}, "c": {}}}, comparisons=[
        Comparison("test.accuracy", "a", "b", 0.02, "a vs b"), Comparison("test.accuracy", "c", "b", 0.02, "c vs b")])
    records = [{"arm": arm, "seed": s, "metrics": {"test.accuracy": base + offset + noise}}
               for s, noise in enumerate((0.001, -0.002, 0.0, 0.002, -0.001))
               for arm, offset in (("a", 0.10), ("b", 0.0), ("c", 0.0))
               for base in (0.7,)]
    found = {c.question: v.kind for c, v in verdicts(study, records)}
    assert found == {"a vs b": DIFFERENT, "c vs b": EQUIVALENT}
    few = [r for r in records if r["seed"] < 1]
    assert {v.kind for _, v in verdicts(study, few)} == {INCONCLUSIVE}
