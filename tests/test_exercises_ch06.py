"""The chapter 6 checkers accept right answers and reject typical wrong ones, with a hint."""
from __future__ import annotations

from mini_bert.exercises import check_count_distinct_masks, check_replace_selected, check_word_groups
from conftest import rejects


# ---- exercise 1: the 80/10/10 rule ---------------------------------------------------------

def replace_selected(input_ids, selected, mask_id, normal_ids, rng):
    out = list(input_ids)
    for i, is_target in enumerate(selected):
        if is_target:
            u = rng.random()
            if u < 0.8:
                out[i] = mask_id
            elif u < 0.9:
                out[i] = rng.choice(normal_ids)
    return out


def test_replace_selected_accepts_right_answers(capsys):
    assert check_replace_selected(replace_selected) is True
    assert "check_replace_selected: all 3 checks passed." in capsys.readouterr().out

    import torch  # a tensor-based answer is fine too

    def with_torch(input_ids, selected, mask_id, normal_ids, rng):
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        ids, sel = torch.tensor(input_ids), torch.tensor(selected)
        u = torch.rand(len(ids), generator=g)
        pool = torch.tensor(normal_ids)
        rand = pool[torch.randint(len(pool), (len(ids),), generator=g)]
        out = torch.where(sel & (u < 0.8), mask_id, ids)
        return torch.where(sel & (u >= 0.8) & (u < 0.9), rand, out)

    assert check_replace_selected(with_torch) is True


def test_replace_selected_rejects_wrong_answers(capsys):
    def all_mask(input_ids, selected, mask_id, normal_ids, rng):
        return [mask_id if s else t for t, s in zip(input_ids, selected)]

    def two_draws(input_ids, selected, mask_id, normal_ids, rng):  # 80%, then 10% of the rest
        out = list(input_ids)
        for i, s in enumerate(selected):
            if s:
                if rng.random() < 0.8:
                    out[i] = mask_id
                elif rng.random() < 0.1:
                    out[i] = rng.choice(normal_ids)
        return out

    def in_place(input_ids, selected, mask_id, normal_ids, rng):
        for i, s in enumerate(selected):
            if s:
                u = rng.random()
                input_ids[i] = mask_id if u < 0.8 else rng.choice(normal_ids) if u < 0.9 else input_ids[i]
        return input_ids

    def any_id(input_ids, selected, mask_id, normal_ids, rng):  # random ids from outside normal_ids
        out = list(input_ids)
        for i, s in enumerate(selected):
            if s:
                u = rng.random()
                out[i] = mask_id if u < 0.8 else rng.randrange(0, 100_000) if u < 0.9 else out[i]
        return out

    def same_random(input_ids, selected, mask_id, normal_ids, rng):
        out = list(input_ids)
        for i, s in enumerate(selected):
            if s:
                u = rng.random()
                out[i] = mask_id if u < 0.8 else normal_ids[0] if u < 0.9 else out[i]
        return out

    def touches_others(input_ids, selected, mask_id, normal_ids, rng):
        out = replace_selected(input_ids, selected, mask_id, normal_ids, rng)
        out[0] = mask_id
        return out

    def crashes(input_ids, selected, mask_id, normal_ids):
        return list(input_ids)

    expected_hints = {
        all_mask: "u < 0.8",
        two_draws: "Two separate draws",
        in_place: "in place",
        any_id: "normal_ids",
        same_random: "new random id",
        touches_others: "only targets may change",
        crashes: "TypeError",
    }
    for wrong, hint in expected_hints.items():
        rejects(check_replace_selected(wrong), hint, capsys, mark="WRONG:")


# ---- exercise 2: distinct masks --------------------------------------------------------------

def count_distinct_masks(dataset, index, epochs):
    seen = set()
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        seen.add(tuple(dataset[index]["input_ids"].tolist()))
    return len(seen)


def test_count_distinct_masks_accepts_right_answer(capsys):
    assert check_count_distinct_masks(count_distinct_masks) is True
    out = capsys.readouterr().out
    assert "4 distinct masks" in out and "12 distinct masks" in out
    assert "check_count_distinct_masks: all 4 checks passed." in out


def test_count_distinct_masks_rejects_wrong_answers(capsys):
    def no_set_epoch(dataset, index, epochs):
        return len({tuple(dataset[index]["input_ids"].tolist()) for _ in range(epochs)})

    def tensors_in_set(dataset, index, epochs):
        seen = set()
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            seen.add(dataset[index]["input_ids"])  # hashed by identity: every epoch looks new
        return len(seen)

    def lists_in_set(dataset, index, epochs):
        seen = set()
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            seen.add(dataset[index]["input_ids"].tolist())
        return len(seen)

    def labels_only(dataset, index, epochs):  # targets, ignoring what replaced them
        seen = set()
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            seen.add(tuple(dataset[index]["mlm_labels"].tolist()))
        return len(seen)

    for wrong, hint in [(no_set_epoch, "set_epoch"), (tensors_in_set, "count each mask once"),
                        (lists_in_set, "tuple(t.tolist())")]:
        rejects(check_count_distinct_masks(wrong), hint, capsys, mark="WRONG:")
    # Counting label patterns gives the same numbers here (a fresh mask always moves the targets),
    # so it is accepted: the exercise is about epochs and copies, not about what identifies a mask.
    assert check_count_distinct_masks(labels_only) is True


# ---- exercise 3: whole words -----------------------------------------------------------------

def word_groups(tokens):
    groups = []
    for i, token in enumerate(tokens):
        if token.startswith("##") and groups:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def test_word_groups_accepts_right_answer(capsys):
    assert check_word_groups(word_groups) is True
    assert "check_word_groups: the check passed." in capsys.readouterr().out


def test_word_groups_rejects_wrong_answers(capsys):
    def crashes_on_leading_piece(tokens):
        groups = []
        for i, token in enumerate(tokens):
            if token.startswith("##"):
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups

    def returns_tokens(tokens):
        return [[tokens[i] for i in g] for g in word_groups(tokens)]

    def special_tokens_join(tokens):  # [SEP] glued to the word before it
        groups = []
        for i, token in enumerate(tokens):
            if (token.startswith("##") or token == "[SEP]") and groups:
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups

    def one_group_per_token(tokens):
        return [[i] for i in range(len(tokens))]

    for wrong, hint in [(crashes_on_leading_piece, "first token starting with ##"),
                        (returns_tokens, "not the tokens"),
                        (special_tokens_join, "joins the previous group"),
                        (one_group_per_token, "joins the previous group")]:
        rejects(check_word_groups(wrong), hint, capsys, mark="WRONG:")


def test_a_stub_is_reported_as_not_written_yet(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    for checker in (check_replace_selected, check_count_distinct_masks, check_word_groups):
        out = rejects(checker(stub), f"{checker.__name__}: not written yet", capsys)
        assert "WRONG" not in out, out
