"""Chapter 16's multilingual study (mini_bert.languages.multilingual_pretraining): the arms, the sampled
training text, retrieval's ranks, and a whole study log (tiny model) that resumes and passes its fingerprints."""
from __future__ import annotations

import json
import math

import pytest
import torch

from mini_bert import provenance
from mini_bert.languages import multilingual_pretraining as mp
from mini_bert.languages.multilingual import joint_vocabulary, sampling_weights, words_in
from mini_bert.train.grids import SMOKE_MODEL, Experiment, chosen_rates, sweep_arm
from mini_bert.train.recipe import Recipe

pytest.importorskip("snownlp")


def test_rank_scores_count_the_twins_rank_among_the_candidates():
    similarity = torch.tensor([[0.9, 0.1, 0.2],   # right at rank 1
                               [0.8, 0.5, 0.1],   # right at rank 2
                               [0.3, 0.2, 0.1]])  # right at rank 3
    found = mp.rank_scores(similarity)
    assert found["top1"] == pytest.approx(1 / 3) and found["candidates"] == 3.0
    assert found["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)


def test_centring_removes_the_direction_every_vector_shares():
    # Twins close to each other, all far out along one shared direction by varying amounts: the raw
    # cosine is near 1 for every pair (as a BERT's mean-pooled vectors are) and ranks partly by
    # that amount; centred on each side's mean, each twin comes first.
    torch.manual_seed(0)
    own, shared = torch.randn(20, 16), torch.eye(16)[0]

    def side():
        along = 30.0 * (1 + 0.3 * torch.randn(20, 1)) * shared
        return torch.nn.functional.normalize(along + own + 0.1 * torch.randn(20, 16), dim=-1)

    foreign, english = side(), side()
    assert (foreign @ english.T).mean() > 0.95
    raw = mp.rank_scores(foreign @ english.T)
    fixed = mp.rank_scores(mp.centred(foreign, foreign.mean(0)) @ mp.centred(english, english.mean(0)).T)
    assert fixed["top1"] == 1.0 > raw["top1"]
    assert mp.centred(foreign, foreign.mean(0)).norm(dim=-1) == pytest.approx(torch.ones(20))


def test_the_arms_differ_in_their_languages_and_vocabulary_only():
    study, sweep = mp.get_study("multilingual"), mp.get_study("multilingual-lr")
    recipes = {arm: mp.study_recipe(study, arm, "cpu", 2) for arm in study.arms}
    for arm, recipe in recipes.items():
        assert recipe.replace(vocab_size=8192, lr=Recipe().lr) == Recipe(seed=2)
        assert recipe.vocab_size == mp.VOCAB_SIZES[arm]
    assert recipes["en-only"].lr == Recipe().lr  # chapter 8's rate, not swept
    assert sorted(sweep.arms) == sorted(f"{arm}-lr{lr:g}" for arm in ("en-fr-es", "en-fr-es-zh")
                                        for lr in (1e-3, 2e-3, 4e-3))
    assert mp.language_set("en-fr-es-zh-lr0.004") == "en-fr-es-zh"
    with pytest.raises(ValueError, match="names no language set"):
        mp.language_set("de-only")


def test_the_multilingual_rates_are_its_shipped_sweeps_choice():
    # The sweep finished 2026-11-27; its choice is written into the study (the English-only arm keeps
    # chapter 8's rate, unswept), and the seeded study's seed 0 trains exactly the sweep's run.
    study, sweep = mp.get_study("multilingual"), mp.get_study("multilingual-lr")
    shipped = mp.load_study("multilingual-lr")  # current (test_provenance)
    assert chosen_rates(shipped, mp.SWEEP_METRIC) == {"en-fr-es": 2e-3, "en-fr-es-zh": 2e-3}
    assert study.chosen_lr == {**chosen_rates(shipped, mp.SWEEP_METRIC), "en-only": Recipe().lr}
    for arm, lr in chosen_rates(shipped, mp.SWEEP_METRIC).items():
        assert mp.study_recipe(study, arm, "cpu", 0) == mp.study_recipe(sweep, sweep_arm(arm, lr), "cpu", 0)


def test_the_training_text_samples_the_languages_with_xlmrs_alpha():
    docs = mp.training_documents("en-fr-es")
    # (by identity: a French article and its English twin may share their title)
    language_of = {id(d): lang for lang in ("en", "fr", "es") for d in mp.documents(lang, "train")}
    words = {"en": 0, "fr": 0, "es": 0}
    for d in docs:
        words[language_of[id(d)]] += words_in(d.text)
    sizes = {lang: sum(words_in(d.text) for d in mp.documents(lang, "train")) for lang in words}
    share = {lang: n / sum(words.values()) for lang, n in words.items()}
    for lang, q in sampling_weights(sizes, mp.ALPHA).items():
        assert share[lang] == pytest.approx(q, abs=0.01)
    assert share["es"] > sizes["es"] / sum(sizes.values()) + 0.03  # the smallest language is up-weighted
    assert mp.training_documents("en-only") == mp.documents("en", "train")


def test_a_multilingual_study_log_resumes_and_its_fingerprints_pass(cache, tmp_path, monkeypatch):
    tiny = Experiment(name="ml-tiny", description="two arms, a few steps", baseline="en-fr-es",
                      arms={"en-only": {"vocab_size": 8192}, "en-fr-es": {"vocab_size": 3000}},
                      base={"cpu": Recipe(model=SMOKE_MODEL, budget="4", long_seq_len=0)})
    monkeypatch.setitem(mp.STUDIES, "ml-tiny", tiny)
    # a small joint vocabulary, learnt once here (the study's takes half a minute; what is tested is the log)
    small = joint_vocabulary({lang: [s for d in mp.documents(lang, "train")[:300] for s in d.sentences]
                              for lang in ("en", "fr", "es")}, 3000, mp.ALPHA, 20_000)
    english = mp.ml_tokenizer
    monkeypatch.setattr(mp, "ml_tokenizer", lambda arm: english(arm) if arm == "en-only" else small)
    monkeypatch.setattr(mp, "TOPIC_RUN", {**mp.TOPIC_RUN, "labels": 64, "epochs": 1})
    thin = mp.training_documents
    monkeypatch.setattr(mp, "training_documents", lambda arm: thin(arm)[::50])
    path = tmp_path / "ml-tiny-cpu.json"
    mp.study_grid("ml-tiny", 1, results=path, progress=False)
    log = json.loads(path.read_text())
    assert [r["arm"] for r in log["runs"]] == ["en-only", "en-fr-es", mp.UNTRAINED]
    runs = {r["arm"]: r for r in log["runs"]}
    assert runs[mp.UNTRAINED]["languages"] == ["en", "fr", "es"] and runs[mp.UNTRAINED]["steps"] == 0
    for record in log["runs"]:
        m = record["metrics"]
        assert {"test.topic_en.accuracy", "test.topic_fr.accuracy", "test.topic_es.accuracy",
                "test.topic_es.restricted_accuracy", "test.retrieval_fr.top1", "test.mlm_es@128.accuracy"} <= set(m)
        assert "test.mlm_zh@128.accuracy" not in m  # no arm here was trained on Chinese
        assert m["test.retrieval_fr.candidates"] == len(mp.twin_pairs("fr"))
        assert {"test.retrieval_fr.centred_top1", "test.retrieval_es.centred_mrr"} <= set(m)
        assert m["test.topic_fr.accuracy"] == pytest.approx(sum(m[f"test.topic_fr.accuracy#{k}"] for k in range(3)) / 3)
    before = path.read_text()
    mp.study_grid("ml-tiny", 1, results=path, progress=False)  # resumed: nothing runs again
    assert json.loads(path.read_text())["runs"] == json.loads(before)["runs"]
    # the trained arms are kept: scored again in a fresh log, they load instead of training
    assert not any(r["from_cache"] for r in log["runs"])
    again = tmp_path / "again.json"
    mp.study_grid("ml-tiny", 1, results=again, progress=False)
    rerun = {r["arm"]: r for r in json.loads(again.read_text())["runs"]}
    assert rerun["en-fr-es"]["from_cache"] and rerun["en-only"]["from_cache"]
    assert rerun["en-fr-es"]["metrics"] == runs["en-fr-es"]["metrics"]
    # each trained arm logs its training curve, and a replay of its first windows lands on it
    assert runs["en-fr-es"]["curve"]["step"] == [1, 2, 3, 4] and runs[mp.UNTRAINED]["curve"] == {}
    rows = mp.replay(tiny, "en-fr-es", 0, runs["en-fr-es"]["curve"], windows=2)
    assert [r["live"] for r in rows] == runs["en-fr-es"]["curve"]["mlm_loss"][:2]
    assert provenance.log_kind(log) == "multilingual"
    now = provenance.fingerprint_logs([path], jobs=1, progress=False)["fingerprints"][str(path)]
    assert provenance.problems_of(path, now) == []


def test_the_controls_score_what_spelling_and_topic_counts_alone_give():
    """The English bag of words and the majority topic on each seed's three English label draws,
    tested in three languages; character trigrams and a random ranking for retrieval."""
    topics = mp.topic_control_scores(0)
    bag, majority = topics[mp.BAG_OF_WORDS], topics[mp.MAJORITY]
    assert set(bag) == set(majority) == {f"test.topic_{lang}.accuracy" for lang in ("en", "fr", "es")}
    assert bag["test.topic_en.accuracy"] > majority["test.topic_en.accuracy"] + 0.3  # it reads English
    assert all(0.0 < v < bag["test.topic_en.accuracy"] for k, v in bag.items() if "_en." not in k)
    assert mp.topic_control_scores(1000)[mp.BAG_OF_WORDS] != bag  # another seed, other draws
    chance = mp.random_ranking_scores()
    for lang in mp.FOREIGN:
        n = len(mp.twin_pairs(lang))
        assert chance[f"test.retrieval_{lang}.top1"] == pytest.approx(1 / n)
        assert chance[f"test.retrieval_{lang}.candidates"] == n > 100
        assert 1 / n < chance[f"test.retrieval_{lang}.mrr"] < 2 * (1 + math.log(n)) / n
    spelled = mp.trigram_retrieval_scores()
    assert all(spelled[f"test.retrieval_{lang}.top1"] > 0.5 for lang in mp.FOREIGN)  # names and numbers
    # centring fixes a model's vectors: the retrieval controls rank the same under the centred keys
    records = {r["arm"]: r["metrics"] for r in mp.baseline_records([0])}
    for control in (mp.TRIGRAMS, mp.RANDOM):
        for lang in mp.FOREIGN:
            assert (records[control][f"test.retrieval_{lang}.centred_top1"]
                    == records[control][f"test.retrieval_{lang}.top1"])


def test_the_verdicts_read_the_plans_comparisons_paired_by_seed(monkeypatch):
    found = {(c.arm, c.baseline, c.metric): c.margin for c in mp.comparisons()}
    assert found["en-fr-es", "en-only", "test.mlm_en@128.accuracy"] == 0.005
    assert found["en-fr-es-zh", "en-fr-es", "test.topic_fr.accuracy"] == 0.02
    assert found["en-fr-es", mp.BAG_OF_WORDS, "test.topic_es.accuracy"] == 0.02
    assert found["en-fr-es-zh", mp.TRIGRAMS, "test.retrieval_fr.top1"] == 0.02
    # the centred score, added after seed 0 (plan-chinese.md), is read like the planned one
    assert found["en-fr-es", "en-only", "test.retrieval_es.centred_top1"] == 0.02
    assert found["en-fr-es", mp.TRIGRAMS, "test.retrieval_es.centred_top1"] == 0.02
    assert len(found) == 28
    assert ("en-only", mp.BAG_OF_WORDS, "test.topic_fr.accuracy") not in found  # the question is the joint model
    monkeypatch.setattr(mp, "baseline_records", lambda seeds: [
        {"arm": mp.BAG_OF_WORDS, "seed": s, "metrics": {"test.topic_fr.accuracy": 0.2}} for s in seeds])
    runs = [{"arm": arm, "seed": s, "metrics": {"test.topic_fr.accuracy": value + s / 1000}}
            for s in range(3) for arm, value in (("en-only", 0.25), ("en-fr-es", 0.30), ("en-fr-es-zh", 0.30))]
    read = {(c.arm, c.baseline, c.metric): v for c, v in mp.verdicts(mp.GridResult(mp.MULTILINGUAL, "cpu", runs))}
    assert read["en-fr-es", "en-only", "test.topic_fr.accuracy"].difference.mean == pytest.approx(0.05)
    assert read["en-fr-es", mp.BAG_OF_WORDS, "test.topic_fr.accuracy"].kind == "different"
    assert read["en-fr-es-zh", "en-fr-es", "test.topic_fr.accuracy"].kind == "equivalent"
