"""mini_bert.improve.papers: the papers' own comparisons, each named once with the arms that make it, and
read against our verdicts by the plan's rule (mini_bert/results/plan-3300.md)."""
from types import SimpleNamespace

import pytest

import mini_bert.experiments  # noqa: F401  (registers every grid the rows name)
from mini_bert.improve import papers
from mini_bert.improve.ablations import Precondition
from mini_bert.improve.papers import (AGREES, DISAGREES, DOWNSTREAM_MEAN, NOT_COUNTED, NOT_THE_PAPERS,
                                      PAPER_ROWS, PaperRow, agreement, effect, format_headline, headline, tally)
from mini_bert.train.stats import DIFFERENT, EQUIVALENT, INCONCLUSIVE, verdict

NOISE = (0.001, -0.002, 0.0, 0.002, -0.001)


def by_seed(offset, noise=NOISE):
    return {s: 0.7 + offset + n for s, n in enumerate(noise)}


def test_every_row_names_arms_of_its_grid_and_the_papers_numbers_are_the_tables():
    papers.check_rows()
    rows = {(r.source, r.arm, r.baseline, r.metric): r for rs in PAPER_ROWS.values() for r in rs}
    # RoBERTa Table 2, DOC-SENTENCES - SEGMENT-PAIR+NSP over its five tasks: (0.2 + 1.0 + 0.7 - 0.2 + 1.4) / 5
    assert rows["RoBERTa Table 2", "doc-sentences", "segment-pair-nsp", DOWNSTREAM_MEAN].effect == 0.62
    # BERT Table 5, removing NSP: (-0.5 - 3.5 - 0.2 - 0.1 - 0.6) / 5
    assert rows["BERT Table 5", "segment-pair", "segment-pair-nsp", DOWNSTREAM_MEAN].effect == -0.98
    # ALBERT Table 5: an NSP-trained model is near chance on SOP, an SOP-trained one good on NSP
    assert rows["ALBERT Table 5", "nsp", "mlm", "test.sop_probe.accuracy"].expected == -1
    assert rows["ALBERT Table 5", "sop", "mlm", "test.nsp_probe.accuracy"].effect == 26.5
    assert rows["RoBERTa Table 1", "static-2", "dynamic", DOWNSTREAM_MEAN].expected == 0  # -0.17: no difference
    # ALBERT Tables 3-4 at E = 768 (our layers are unfactorised): all -2.5, FFN -2.8, attention -0.7
    # (a drop beyond PAPER_EQUAL), embeddings of 128 -0.6; E = 256 shown beside them, not counted
    albert = {(r.arm, r.baseline): r for r in PAPER_ROWS["albert-parameters-3300"]}
    assert [albert[a, "none"].effect for a in ("all", "ffn", "attention", "e16", "e64")] == [
        -2.5, -2.8, -0.7, -0.6, -0.5]
    assert all(albert[a, "none"].expected == -1 for a in ("all", "ffn", "attention", "e16"))
    assert [r.arm for r in PAPER_ROWS["albert-parameters-3300"] if not r.counted] == ["e64"]
    # every comparison the paper made is counted once; the rows beside them are marked
    counted = [(r.source, r.arm, r.baseline, r.metric) for rs in PAPER_ROWS.values() for r in rs if r.counted]
    assert len(counted) == len(set(counted))
    assert {r.arm for r in PAPER_ROWS["roberta-masking-3300"] if not r.counted} == {"static-1"}
    with pytest.raises(ValueError, match="not both"):
        PaperRow("X", "", "a", "b", 1.0, sign=1)
    with pytest.raises(ValueError, match="same tasks"):
        effect([1.0], [1.0, 2.0])


def test_the_plans_reading_of_a_verdict_against_the_paper():
    helps, costs, none = (PaperRow("P", "", "a", "b", e) for e in (1.2, -2.5, 0.3))
    up = verdict(by_seed(0.05), by_seed(0.0, (0.0,) * 5), 0.02)
    flat = verdict(by_seed(0.0), by_seed(0.0, (0.0,) * 5), 0.02)
    noisy = verdict(by_seed(0.0, (0.03, -0.04, 0.05, -0.03, 0.0)), by_seed(0.0, (0.0,) * 5), 0.02)
    assert (up.kind, flat.kind, noisy.kind) == (DIFFERENT, EQUIVALENT, INCONCLUSIVE)
    assert agreement(helps, up) == AGREES and agreement(costs, up) == DISAGREES
    assert agreement(none, up) == DISAGREES  # the paper saw no difference, we see one
    assert agreement(none, flat) == AGREES
    assert agreement(costs, flat) == DISAGREES  # 2.5 points lie outside the +-2 our interval allows
    assert agreement(helps, flat) == INCONCLUSIVE  # 1.2 points lie inside it: not excluded
    assert all(agreement(row, noisy) == INCONCLUSIVE for row in (helps, costs, none))
    assert agreement(PaperRow("P", "", "a", "b", None, sign=0), flat) == AGREES
    assert agreement(PaperRow("P", "", "a", "b", None, sign=-1), flat) == INCONCLUSIVE


def test_a_row_counts_only_when_both_arms_pass_their_preconditions(monkeypatch):
    runs = [{"arm": arm, "seed": s, "metrics": {DOWNSTREAM_MEAN: v}}
            for arm, offset in (("a", 0.05), ("b", 0.0), ("c", 0.05)) for s, v in by_seed(offset).items()]
    result = SimpleNamespace(runs=runs)
    failed = Precondition("c", "beats the untrained control on topic", "+0.001 [-0.01, +0.01] (n=5)", False,
                          "test.topic.accuracy")
    monkeypatch.setattr(papers, "preconditions", lambda r: [Precondition("a", "x", "y", True, "test.x"), failed])
    rows = [PaperRow("P", "helps", "a", "b", 1.0), PaperRow("P", "helps", "c", "b", 1.0),
            PaperRow("P", "beside", "c", "a", None, sign=0, counted=False),
            PaperRow("P", "helps", "a", "b", 1.0, metric="test.nothing.accuracy")]
    found = headline(result, rows)
    assert [r.agreement for r in found] == [AGREES, NOT_COUNTED, NOT_THE_PAPERS, INCONCLUSIVE]
    assert found[1].failed == (f"c: {failed.what} ({failed.measured})",) and found[3].verdict is None
    assert tally(found) == {"verdicts": {DIFFERENT: 1, EQUIVALENT: 0, INCONCLUSIVE: 0},
                            "readings": {AGREES: 1, DISAGREES: 0, INCONCLUSIVE: 1, NOT_COUNTED: 1}}
    table = format_headline(found, label=str.upper)
    assert f"| A − B (P) | +1.00 (helps) | {DOWNSTREAM_MEAN} | +5.0 [" in table and "| shown, not counted |" in table
    assert "| test.nothing.accuracy | - | - |" in table  # each row says which score it reads
    from mini_bert.views.figures import metric_label

    assert "| mean downstream accuracy (test) | +5.0 [" in format_headline(found, score=metric_label)
    assert len(table.splitlines()) == 2 + len(rows)
