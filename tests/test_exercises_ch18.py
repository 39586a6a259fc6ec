"""Chapter 18's checkers accept a right answer (written two ways where there are two) and reject the usual
wrong ones, with a hint; an unwritten stub gets the "not written yet" report."""
import torch

from mini_bert.exercises import check_sampling_weights, check_shared_share, check_twin_ranks
from conftest import rejects


# ---- exercise 1: sampling weights --------------------------------------------------------------

def sampling_weights(sizes, alpha):
    total = sum(sizes.values())
    powered = {lang: (n / total) ** alpha for lang, n in sizes.items()}
    norm = sum(powered.values())
    return {lang: q / norm for lang, q in powered.items()}


def sampling_weights_from_counts(sizes, alpha):
    # n_i ** alpha / sum_j n_j ** alpha: the total cancels out of p_i ** alpha / sum_j p_j ** alpha.
    weights = {}
    for lang in sizes:
        weights[lang] = sizes[lang] ** alpha
    norm = sum(weights.values())
    for lang in weights:
        weights[lang] /= norm
    return weights


def test_sampling_weights_accepts_right_answers(capsys):
    for right in (sampling_weights, sampling_weights_from_counts):
        assert check_sampling_weights(right) is True, right.__name__
        assert "check_sampling_weights: all 6 checks passed." in capsys.readouterr().out


def test_sampling_weights_rejects_the_usual_mistakes(capsys):
    def not_renormalised(sizes, alpha):
        total = sum(sizes.values())
        return {lang: (n / total) ** alpha for lang, n in sizes.items()}

    rejects(check_sampling_weights(not_renormalised), "renormalise", capsys, mark="WRONG:")
    rejects(check_sampling_weights(lambda s, a: sampling_weights(s, 1 / a)), "the exponent is alpha itself",
            capsys, mark="WRONG:")
    rejects(check_sampling_weights(lambda s, a: {k: a * v for k, v in sampling_weights(s, 1).items()}),
            "not a factor", capsys, mark="WRONG:")
    rejects(check_sampling_weights(lambda s, a: list(sampling_weights(s, a).values())), "keyed by language",
            capsys, mark="WRONG:")
    rejects(check_sampling_weights(lambda s, a: {k: 1 / len(s) for k in s}), "proportions", capsys, mark="WRONG:")


# ---- exercise 2: the pieces two languages share ---------------------------------------------------

def shared_share(english, other):
    seen = set(english)
    return sum(piece in seen for piece in other) / len(other)


def test_shared_share_accepts_a_right_answer_and_rejects_the_usual_mistakes(capsys):
    assert check_shared_share(shared_share) is True
    assert "all 4 checks passed" in capsys.readouterr().out
    rejects(check_shared_share(lambda en, o: len(set(o) & set(en)) / len(set(o))), "occurrences", capsys,
            mark="WRONG:")
    rejects(check_shared_share(lambda en, o: shared_share(o, en)), "OTHER language's pieces", capsys, mark="WRONG:")
    rejects(check_shared_share(lambda en, o: sum(p in set(en) for p in o)), "a share, not a count", capsys,
            mark="WRONG:")


def test_an_unwritten_stub_is_reported_as_such(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_sampling_weights, check_shared_share, check_twin_ranks):
        assert checker(stub) is False
        assert "not written yet" in capsys.readouterr().out


# ---- exercise 3: scoring a ranking of English twins --------------------------------------------

def twin_ranks(similarity):
    right = similarity.diagonal().unsqueeze(1)
    ranks = (similarity > right).sum(dim=1) + 1
    return {"top1": (ranks == 1).float().mean().item(), "mrr": (1 / ranks.float()).mean().item()}


def twin_ranks_by_sorting(similarity):
    # In plain Python: a twin's rank is one more than the scores above it (a tie is not above).
    top1 = mrr = 0.0
    for i, row in enumerate(similarity.tolist()):
        rank = 1 + sum(score > row[i] for score in row)
        top1 += rank == 1
        mrr += 1 / rank
    return {"top1": top1 / len(similarity), "mrr": mrr / len(similarity)}


def test_twin_ranks_accepts_right_answers_and_rejects_the_usual_mistakes(capsys):
    for right in (twin_ranks, twin_ranks_by_sorting):
        assert check_twin_ranks(right) is True, right.__name__
        assert "check_twin_ranks: all 4 checks passed." in capsys.readouterr().out

    def ties_against(similarity):
        ranks = (similarity >= similarity.diagonal().unsqueeze(1)).sum(dim=1)
        return {"top1": (ranks == 1).float().mean().item(), "mrr": (1 / ranks.float()).mean().item()}

    rejects(check_twin_ranks(ties_against), "in the twin's favour", capsys, mark="WRONG:")
    rejects(check_twin_ranks(lambda s: twin_ranks(s.T)), "along each ROW", capsys, mark="WRONG:")

    def one_over_mean_rank(similarity):
        ranks = (similarity > similarity.diagonal().unsqueeze(1)).sum(dim=1) + 1
        return {"top1": (ranks == 1).float().mean().item(), "mrr": 1 / ranks.float().mean().item()}

    rejects(check_twin_ranks(one_over_mean_rank), "not 1 / (the mean rank)", capsys, mark="WRONG:")
    rejects(check_twin_ranks(lambda s: [1.0, 1.0]), '"top1" and "mrr"', capsys, mark="WRONG:")
    assert check_twin_ranks(lambda s: twin_ranks(torch.as_tensor(s))) is True
