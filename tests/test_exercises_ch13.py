"""Chapter 13's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import math

import torch
import torch.nn.functional as F

from mini_bert import BertConfig, BertForPreTraining
from mini_bert.exercises import check_paired_interval, check_pretraining_loss, check_segment_masks, check_verdict
from mini_bert.train.stats import paired_difference, student_t_quantile
from conftest import rejects


# ---- exercise 1: the pretraining loss --------------------------------------------------------

def pretraining_loss(mlm_logits, mlm_labels, sentence_logits, sentence_labels):
    loss = F.cross_entropy(mlm_logits.flatten(0, 1), mlm_labels.flatten(), ignore_index=-100)
    return loss if sentence_labels is None else loss + F.cross_entropy(sentence_logits, sentence_labels)


def test_pretraining_loss_is_the_models_own_and_is_accepted(capsys):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=32, max_position_embeddings=16)).eval()
    ids = torch.randint(4, 30, (3, 10))
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    sentence = torch.tensor([0, 1, 1])
    out = model(ids, mlm_labels=labels, sentence_labels=sentence)
    assert torch.allclose(pretraining_loss(out.mlm_logits, labels, out.sentence_logits, sentence), out.loss)
    assert check_pretraining_loss(pretraining_loss) is True
    assert "check_pretraining_loss: all 3 checks passed." in capsys.readouterr().out


def test_pretraining_loss_rejects_wrong_answers(capsys):
    def no_sentence(m, y, s, t):
        return pretraining_loss(m, y, s, None)

    def every_position(m, y, s, t):
        loss = F.cross_entropy(m.flatten(0, 1), y.clamp_min(0).flatten())
        return loss if t is None else loss + F.cross_entropy(s, t)

    def crashes_without_sentence(m, y, s, t):
        return F.cross_entropy(m.flatten(0, 1), y.flatten()) + F.cross_entropy(s, t)

    for wrong, hint in [(no_sentence, "sentence task's loss is missing"), (every_position, "ignore_index=-100"),
                        (crashes_without_sentence, "sentence_labels may be None")]:
        rejects(check_pretraining_loss(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: the segments of a pair ------------------------------------------------------

def segment_masks(batch):
    real = batch["attention_mask"].bool()
    ids, types = batch["input_ids"], batch["token_type_ids"]
    content = real & (ids != 2) & (ids != 3)  # the book's test batch: [CLS] = 2, [SEP] = 3
    return content & (types == 0), content & (types == 1)


def test_segment_masks_accepts_right_answers(capsys):
    assert check_segment_masks(segment_masks) is True
    assert "check_segment_masks: all 2 checks passed." in capsys.readouterr().out


def test_segment_masks_rejects_wrong_answers(capsys):
    def with_padding(batch):
        a, b = segment_masks(batch)
        return a | (batch["attention_mask"] == 0), b

    def with_specials(batch):
        real = batch["attention_mask"].bool()
        return real & (batch["token_type_ids"] == 0), real & (batch["token_type_ids"] == 1)

    def swapped(batch):
        a, b = segment_masks(batch)
        return b, a

    for wrong, hint in [(with_padding, "use the attention mask"), (with_specials, "[CLS] and the [SEP]s"),
                        (swapped, "segment A is token type 0")]:
        rejects(check_segment_masks(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: the paired interval ---------------------------------------------------------

def paired_interval(arm, baseline):
    seeds = sorted(set(arm) & set(baseline))
    d = [arm[s] - baseline[s] for s in seeds]
    n = len(d)
    mean = sum(d) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = student_t_quantile(0.975, n - 1) * std / math.sqrt(n)
    return mean, mean - half, mean + half


def test_paired_interval_accepts_right_answers(capsys):
    assert check_paired_interval(paired_interval) is True
    assert "check_paired_interval: all 3 checks passed." in capsys.readouterr().out


def test_paired_interval_rejects_wrong_answers(capsys):
    def normal(arm, baseline):
        mean, low, high = paired_interval(arm, baseline)
        n = len(set(arm) & set(baseline))
        half = (high - mean) * 1.959964 / student_t_quantile(0.975, n - 1)
        return mean, mean - half, mean + half

    def population_std(arm, baseline):
        mean, low, high = paired_interval(arm, baseline)
        n = len(set(arm) & set(baseline))
        half = (high - mean) * math.sqrt((n - 1) / n)
        return mean, mean - half, mean + half

    def unpaired(arm, baseline):  # two independent samples: the seed's shared effect stays in the noise
        a, b = list(arm.values()), list(baseline.values())
        n = len(a)
        mean = sum(a) / n - sum(b) / n
        var = sum((x - sum(a) / n) ** 2 for x in a) / (n - 1) / n + sum((x - sum(b) / n) ** 2 for x in b) / (n - 1) / n
        half = student_t_quantile(0.975, n - 1) * math.sqrt(var)
        return mean, mean - half, mean + half

    def all_seeds(arm, baseline):  # right where every seed is in both; else means over unpaired seeds
        right, low, high = paired_interval(arm, baseline)
        mean = sum(arm.values()) / len(arm) - sum(baseline.values()) / len(baseline)
        return mean, mean - (right - low), mean + (high - right)

    for wrong, hint in [(normal, "not the normal 1.96"), (population_std, "divides by n - 1"),
                        (unpaired, "not of two separate means"), (all_seeds, "over the seeds both dicts have")]:
        rejects(check_paired_interval(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 4: the verdict ------------------------------------------------------------------

def verdict(arm, baseline, margin):
    d95, d90 = paired_difference(arm, baseline, 0.95), paired_difference(arm, baseline, 0.90)
    if d95.detectable:
        return "different"
    if -margin <= d90.ci_low and d90.ci_high <= margin:
        return "equivalent"
    return "inconclusive"


def test_verdict_accepts_the_rule_and_its_cases_cover_every_branch(capsys):
    from mini_bert.exercises.ch13 import _VERDICT_CASES
    from mini_bert.train.stats import verdict as reference

    assert check_verdict(verdict) is True
    assert "check_verdict: all 6 checks passed." in capsys.readouterr().out
    kinds = [reference(arm, base, margin).kind for arm, base, margin, _ in _VERDICT_CASES]
    assert kinds == ["different", "equivalent", "inconclusive", "different", "equivalent", "different"]
    # the fourth is detected inside the margin; the fifth is inside it at 90% and not at 95%
    small = paired_difference(*_VERDICT_CASES[3][:2], 0.90)
    assert -0.02 <= small.ci_low and small.ci_high <= 0.02
    wide = paired_difference(*_VERDICT_CASES[4][:2], 0.95)
    assert wide.ci_high > 0.02 and not wide.detectable


def test_verdict_rejects_the_usual_misreadings(capsys):
    def not_different_is_equivalent(arm, baseline, margin):
        return "different" if paired_difference(arm, baseline).detectable else "equivalent"

    def equivalence_first(arm, baseline, margin):
        d90 = paired_difference(arm, baseline, 0.90)
        if -margin <= d90.ci_low and d90.ci_high <= margin:
            return "equivalent"
        return verdict(arm, baseline, margin)

    def ninety_five_for_both(arm, baseline, margin):
        d95 = paired_difference(arm, baseline, 0.95)
        if d95.detectable:
            return "different"
        return "equivalent" if -margin <= d95.ci_low and d95.ci_high <= margin else "inconclusive"

    def paired_by_position(arm, baseline, margin):
        return verdict(dict(enumerate(arm.values())), dict(enumerate(baseline.values())), margin)

    def says_yes(arm, baseline, margin):
        return True

    for wrong, hint in [(not_different_is_equivalent, "'not different' is not 'equivalent'"),
                        (equivalence_first, "ask 'different' first"),
                        (ninety_five_for_both, "reads the 90% interval"),
                        (paired_by_position, "over the seeds both dicts have"),
                        (says_yes, "return one of")]:
        rejects(check_verdict(wrong), hint, capsys, mark="WRONG:")

