"""Chapter 10's checkers accept a right answer and reject the usual wrong ones, with a hint."""
import torch

from mini_bert.exercises import check_layer_rates, check_macro_f1, check_pool_windows
from mini_bert.train.finetuning import FinetuneConfig, parameter_groups, scores, window_logits
from conftest import rejects


# ---- exercise 1: layer-wise rates ------------------------------------------------------------

def layer_rates(num_layers, peak, decay):
    return [peak * decay ** (num_layers - d) for d in range(num_layers + 1)] + [peak]


def test_layer_rates_agree_with_the_package_and_accept_right_answers(capsys):
    from mini_bert import BertConfig, BertModel
    from mini_bert.train.finetuning import SequenceClassifier

    encoder = BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=32))
    config = FinetuneConfig(strategy="llrd", lr=1e-3, layer_decay=0.8)
    groups = parameter_groups(SequenceClassifier(encoder, 2), config)
    by_depth = {g["depth"]: g["lr"] for g in groups}
    assert [by_depth[d] for d in sorted(by_depth)] == layer_rates(3, 1e-3, 0.8)
    assert check_layer_rates(layer_rates) is True
    assert "check_layer_rates: all 4 checks passed." in capsys.readouterr().out


def test_layer_rates_rejects_wrong_answers(capsys):
    def upside_down(n, peak, decay):
        return layer_rates(n, peak, decay)[-2::-1] + [peak]

    def one_too_many(n, peak, decay):
        return [peak * decay ** (n - d + 1) for d in range(n + 1)] + [peak]

    def no_head(n, peak, decay):
        return layer_rates(n, peak, decay)[:-1]

    for wrong, hint in [(upside_down, "upside down"), (one_too_many, "top layer trains at the peak"),
                        (no_head, "embeddings AND the head")]:
        rejects(check_layer_rates(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: macro-F1 --------------------------------------------------------------------

def macro_f1(predictions, labels, num_labels):
    return scores(predictions, labels, num_labels)["macro_f1"]


def test_macro_f1_accepts_right_answers(capsys):
    assert check_macro_f1(macro_f1) is True
    assert "check_macro_f1: all 4 checks passed." in capsys.readouterr().out


def test_macro_f1_rejects_wrong_answers(capsys):
    def accuracy(p, y, k):
        return (p == y).float().mean()

    def every_class(p, y, k):
        f1s = []
        for c in range(k):
            tp, fp, fn = [int(x.sum()) for x in ((p == c) & (y == c), (p == c) & (y != c), (p != c) & (y == c))]
            f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
        return sum(f1s) / k

    def nan_classes(p, y, k):
        f1s = []
        for c in range(k):
            tp, fp, fn = [int(x.sum()) for x in ((p == c) & (y == c), (p == c) & (y != c), (p != c) & (y == c))]
            f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan"))
        return sum(f1s) / k

    for wrong, hint in [(accuracy, "that is the accuracy"), (every_class, "neither occurs nor is predicted"),
                        (nan_classes, "0/0")]:
        rejects(check_macro_f1(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 3: pooling windows -----------------------------------------------------------

def pool_windows(logits, text_of, n_texts):
    out = torch.zeros(n_texts, logits.shape[1]).index_add_(0, text_of, logits)
    return out / torch.bincount(text_of, minlength=n_texts).unsqueeze(1)


def test_pool_windows_accepts_right_answers_and_matches_the_package(capsys):
    assert check_pool_windows(pool_windows) is True
    assert "check_pool_windows: all 3 checks passed." in capsys.readouterr().out

    class Fixed(torch.nn.Module):  # a "model" whose logits are its input's first two ids
        num_labels = 2

        def __init__(self):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(1))  # where the evaluation loop looks for the device

        def forward(self, ids, mask, types=None):
            return ids[:, :2].float()

    from mini_bert.train.tasks import TaskData, Windows

    ids = torch.tensor([[1, 2], [3, 4], [5, 6]])
    windows = Windows(TaskData(ids, torch.ones_like(ids), torch.zeros_like(ids), torch.zeros(3, dtype=torch.long)),
                      torch.tensor([0, 0, 1]), torch.tensor([0, 1]))
    assert torch.equal(window_logits(Fixed(), windows), pool_windows(ids.float(), windows.text_of, 2))


def test_pool_windows_rejects_wrong_answers(capsys):
    def summed(logits, text_of, n):
        return torch.zeros(n, logits.shape[1]).index_add_(0, text_of, logits)

    def first_window(logits, text_of, n):
        return torch.stack([logits[text_of == t][0] for t in range(n)])

    def per_window(logits, text_of, n):
        return logits

    for wrong, hint in [(summed, "divide by each text's number of windows"), (first_window, "the mean of the logits"),
                        (per_window, "one row per text")]:
        rejects(check_pool_windows(wrong), hint, capsys, mark="WRONG:")
