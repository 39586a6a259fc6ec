"""mini_bert.smaller.domain_study: chapter 17's domain-adaptation study continues the book's model on the text
each arm names, scores every arm on the same held-out articles and the same fine-tuning runs, chooses the
continued arms' rates on validation before the study runs, and logs like the other studies (resumable,
fingerprinted, checked by the provenance command). The runs here are fingerprint prefixes."""
from __future__ import annotations

import pytest
from conftest import study_log_round_trip

from mini_bert.build.data import load_corpus
from mini_bert.build.tokenization import default_tokenizer
from mini_bert.experiments import study_module
from mini_bert.smaller import domain, domain_study as dm, study_log
from mini_bert.smaller.specialised import (ADAPTATION_DOWNSTREAM, CONTINUATION_RATES, CONTINUED_RATE, STUDIES,
                                           TEXTS, continuation_rates, rate_arms)
from mini_bert.train.finetuning import load_task
from mini_bert.train.fingerprint import PREFIX, compare

RATES = dm.get_study("domain-adaptation-rate")
STUDY = dm.get_study("domain-adaptation")


def test_both_studies_run_through_the_study_command_and_unknown_names_are_refused(tmp_path):
    assert study_module("domain-adaptation") is dm and study_module("domain-adaptation-rate") is dm
    with pytest.raises(ValueError, match="unknown domain-adaptation study 'distillation'"):
        dm.get_study("distillation")
    with pytest.raises(ValueError, match="no arm 'domain-601'"):
        dm.study_grid("domain-adaptation", 1, arms=["domain-601"], results=tmp_path / "x.json", progress=False)
    with pytest.raises(ValueError, match="with seed 0"):
        dm.study_grid("domain-adaptation-rate", 3, results=tmp_path / "x.json", progress=False)
    assert not (tmp_path / "x.json").exists()


def test_the_rate_choice_tries_each_text_at_the_plans_rates_and_nothing_else_moves():
    assert RATES.choice and RATES.seeds == 1 and not RATES.comparisons
    arms = RATES.arms["cpu"]
    assert len(arms) == sum(len(continuation_rates(text)) for text in TEXTS)
    study_arms = STUDY.arms["cpu"]
    for definition in arms.values():
        continued = study_arms[f"{definition['text']}-600"]
        # the study's arm, but for the rate, and no fine-tuning (a choice reads held-out MLM only)
        assert {**definition, "lr": continued["lr"], "choice": None} == {**continued, "choice": None}
    # every continuation reads 128-token inputs, 2,048 tokens a step, as the model's pretraining ended
    assert all(d["seq_len"] == 128 and d["batch_size"] * d["seq_len"] == 2048 and d["long_seq_len"] == 0
               for d in [*arms.values(), *(study_arms[f"{t}-600"] for t in TEXTS)])
    for text in TEXTS:  # the plan's three rates, and the edge rule's extensions
        tried = sorted(d["lr"] for d in arms.values() if d["text"] == text)
        assert tried == list(continuation_rates(text)) and set(CONTINUATION_RATES) <= set(tried)


def test_the_task_adaptive_text_is_the_in_domain_tasks_own_training_sentences_without_capitals():
    labels = ADAPTATION_DOWNSTREAM["truecase_in"]["labels"]
    documents = dm.continuation_documents("task", 2)
    task = load_task("truecase-in", default_tokenizer(), 64, labels=labels, seed=2, max_eval=5)
    assert len(documents) == labels == len(task.train)
    assert [d.sentences[0] for d in documents] == task.examples["train"]  # the same draw, the same words
    assert all(d.sentences[0] == d.sentences[0].lower() for d in documents)
    assert dm.continuation_documents("task", 3) != documents  # another seed, another draw
    assert {d.topic for d in dm.continuation_documents("domain", 0)} == {domain.DOMAIN}
    assert len(dm.continuation_documents("general", 0)) == len(load_corpus("train"))
    with pytest.raises(ValueError, match="unknown text 'news'"):
        dm.continuation_documents("news", 0)


def test_a_prefix_run_continues_on_its_text_and_scores_the_same_articles_as_the_model_it_started_from():
    continued = dm.run_arm(RATES, "domain-600/lr=0.001", 0, device="cpu", prefix=PREFIX)
    as_is = dm.run_arm(STUDY, "tiny-wiki", 0, device="cpu", prefix=PREFIX)
    assert continued["steps"] == PREFIX.steps and continued["documents"] == PREFIX.labels
    assert as_is["steps"] == 0 and as_is["documents"] == 0
    assert len(continued["history"]["continuation"]["loss"]) == PREFIX.steps
    for where in ("domain", "general"):  # the same targets for every arm, and the continuation moved them
        for split in ("validation", "test"):
            key = f"{split}.{where}.mlm@128"
            assert continued["metrics"][f"{key}.targets"] == as_is["metrics"][f"{key}.targets"] > 0
            assert continued["metrics"][f"{key}.loss"] != as_is["metrics"][f"{key}.loss"]
    # a choice reads held-out MLM only; the study's arms are also fine-tuned, paired on the seed
    assert continued["downstream"] == {} and not any("truecase" in k for k in continued["metrics"])
    assert set(as_is["downstream"]) == set(ADAPTATION_DOWNSTREAM)
    assert all(run["train_examples"] == PREFIX.labels for run in as_is["downstream"].values())
    assert {"test.truecase_in.macro_f1", "test.truecase_out.macro_f1", "test.topic.accuracy"} <= set(as_is["metrics"])
    untrained = dm.run_arm(STUDY, "untrained", 0, device="cpu", prefix=PREFIX)
    assert untrained["metrics"]["test.domain.mlm@128.loss"] != as_is["metrics"]["test.domain.mlm@128.loss"]
    found = dm.arm_fingerprint(RATES, "task-600/lr=0.001", 0)
    assert compare(found, dm.arm_fingerprint(RATES, "task-600/lr=0.001", 0)) == []  # the same run, again


def test_the_rates_are_chosen_inside_those_tried_and_a_choice_at_an_edge_is_extended():
    def result(scores):  # scores: {text: [accuracy at each of its rates, smallest first]}
        runs = []
        for arm, d in RATES.arms["cpu"].items():
            value = scores[d["text"]][continuation_rates(d["text"]).index(d["lr"])]
            runs.append({"arm": arm, "seed": 0, "definition": d,
                         "metrics": {f"validation.{w}.mlm@128.accuracy": value for w in ("domain", "general")}})
        return dm.StudyResult(RATES, "cpu", runs)

    def peaked(text, at, values=(0.30, 0.32, 0.31)):  # the second-best rate of the text wins
        n = len(continuation_rates(text))
        return [values[1] if k == at else 0.30 for k in range(n)]

    inside = {text: peaked(text, 1) for text in TEXTS}
    assert dm.chosen_rates(result(inside)) == {text: continuation_rates(text)[1] for text in TEXTS}
    tied = {**inside, "task": [0.30, 0.32, 0.32] + [0.30] * (len(continuation_rates("task")) - 3)}
    assert dm.chosen_rates(result(tied))["task"] == continuation_rates("task")[1]  # a tie: the smaller rate
    largest = continuation_rates("domain")[-1]
    with pytest.raises(ValueError, match=rf"domain text is best at {largest:g}, an edge .* add {2 * largest:g} "
                                         r"to specialised.RATE_EXTENSIONS\['domain'\]"):
        dm.chosen_rates(result({**inside, "domain": peaked("domain", len(continuation_rates("domain")) - 1)}))
    partial = result(inside)
    partial.runs = partial.runs[:-1]
    with pytest.raises(ValueError, match=f"has not run the task text at {continuation_rates('task')[-1]:g}"):
        dm.chosen_rates(partial)


def test_the_study_refuses_to_run_before_its_rates_are_chosen(tmp_path, monkeypatch):
    monkeypatch.setattr(study_log, "study_path", lambda name, scale: tmp_path / f"{name}-{scale}.json")
    with pytest.raises(ValueError, match="rates are not chosen yet: run python -m mini_bert study "
                                         "domain-adaptation-rate --seeds 1 --scale cpu"):
        dm.study_grid("domain-adaptation", 1, arms=["domain-600"], results=tmp_path / "d.json", progress=False)
    assert not (tmp_path / "d.json").exists()
    if None in CONTINUED_RATE.values():  # before the choice, a continued arm cannot run at all
        with pytest.raises(ValueError, match="rate is not chosen yet"):
            dm.arm_model(STUDY.arms["cpu"]["general-600"], 0, prefix=PREFIX)


def test_the_rates_in_the_code_are_the_shipped_choice():
    path = dm.study_path("domain-adaptation-rate", "cpu")
    if not path.is_file():
        pytest.skip("the rate choice has not run yet: CONTINUED_RATE holds no rate")
    assert dm.chosen_rates(dm.load_study("domain-adaptation-rate")) == CONTINUED_RATE
    assert rate_arms("cpu")  # (the choice's arms are still defined)


def test_a_rate_choice_log_resumes_and_passes_the_provenance_check(tmp_path, monkeypatch):
    arms = ["general-600/lr=0.0005", "task-600/lr=0.002"]
    study_log_round_trip(dm, "domain-adaptation-rate", arms, tmp_path / "domain-adaptation-rate-cpu.json",
                         monkeypatch, "domain", "validation.domain.mlm@128.accuracy")
    assert STUDIES["domain-adaptation-rate"] is RATES


def test_the_shipped_study_is_complete_at_the_chosen_rates_and_its_preconditions_hold():
    result = dm.load_study("domain-adaptation")
    assert result.log["command"] == "python -m mini_bert study domain-adaptation --seeds 5 --scale cpu"
    arms = STUDY.arms["cpu"]
    assert sorted((r["arm"], r["seed"]) for r in result.runs) == sorted((a, s) for a in arms for s in range(5))
    for record in result.runs:  # every run at its arm's definition as the code holds it (the chosen rates)
        assert record["definition"] == arms[record["arm"]]
        assert record["steps"] == arms[record["arm"]]["steps"]
    found = {(c.arm, c.baseline, c.metric): v for c, v in result.verdicts()}
    preconditions = [(c.arm, c.baseline, c.metric) for c in STUDY.comparisons if c.question.startswith("precondition")]
    assert len(preconditions) == 4
    # each precondition detected, and in the right direction: the comparisons count
    assert all(found[p].kind == "different" and found[p].difference.mean > 0 for p in preconditions)
