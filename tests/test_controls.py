"""Chapter 10's controls (mini_bert.train.controls): the bag of words on whole texts and on exactly the
models' truncated inputs, the truecasing word lookup, each on every seed's own training subset."""
import pytest

from mini_bert.build.model import IGNORE_INDEX
from mini_bert.train import controls
from mini_bert.train.finetuning import load_task, tfidf_baseline
from mini_bert.train.tasks import Task, encode_tagged, encode_texts

pytest.importorskip("sklearn")


def text_task(tokenizer, train, test, max_length=64):
    return Task("toy", "sequence", encode_texts(tokenizer, train, max_length), encode_texts(tokenizer, test, max_length),
                encode_texts(tokenizer, test, max_length), ["a", "b"], "accuracy", {"train": train, "test": test})


def test_seen_texts_read_back_the_models_truncated_input(tokenizer):
    data = encode_texts(tokenizer, [("the cat sat on the mat in the afternoon sun", 0)], 6)
    seen = controls.seen_texts(data, tokenizer)[0]
    assert seen.split() and " ##" not in seen
    assert len(seen.split()) < len("the cat sat on the mat in the afternoon sun".split())  # 4 pieces at most
    assert "the cat sat on the mat".startswith(seen.split()[0])


def test_the_bag_of_words_reads_whole_texts_or_only_what_the_model_reads(tokenizer):
    # The label is the last word, which a 6-token input never reaches.
    filler = "the history of the city and its people in the early years of the region"
    train = [(f"{filler} {word}", label) for label, word in ((0, "river"), (1, "mountain")) for _ in range(20)]
    test = [(f"{filler} {word}", label) for label, word in ((0, "river"), (1, "mountain")) for _ in range(5)]
    whole, short = text_task(tokenizer, train, test), text_task(tokenizer, train, test, max_length=6)
    subsets = {0: whole, 1: whole}
    assert controls.bag_of_words(whole, subsets)["accuracy"] == 1.0
    assert controls.bag_of_words(short, {0: short}, tokenizer=tokenizer)["accuracy"] == 0.5
    assert controls.bag_of_words(whole, subsets, test_limit=5)["accuracy"] == 1.0  # the first 5: all river
    with pytest.raises(ValueError, match="keeps no raw examples"):
        controls.bag_of_words(Task("tags", "token", whole.train, whole.test, whole.test, ["a"], "macro_f1"), subsets)


def test_each_seed_gets_its_own_subset_and_the_mean_is_over_the_seeds(tokenizer):
    task = load_task("topic", tokenizer, 32, max_eval=50)
    subsets = controls.seed_subsets(task, tokenizer, 32, 40, (0, 1))
    assert set(subsets) == {0, 1} and subsets[0].examples["train"] != subsets[1].examples["train"]
    every = controls.seed_subsets(task, tokenizer, 32, None, (3, 4))  # every label: one set, nothing drawn
    assert list(every) == [3] and every[3] is task
    each = [tfidf_baseline(list(subsets[s].examples["train"]), task.examples["test"][:50], task.num_labels, seed=s)
            for s in (0, 1)]
    found = controls.bag_of_words(task, subsets, test_limit=50)
    assert found["accuracy"] == pytest.approx((each[0]["accuracy"] + each[1]["accuracy"]) / 2)


def test_the_word_lookup_answers_each_words_most_frequent_case(tokenizer):
    # Case labels: 0 lower, 1 capitalised, 2 upper; the first word carries none (IGNORE_INDEX).
    train = [(["we", "saw", "paris", "and", "nasa"], [IGNORE_INDEX, 0, 1, 0, 2]),
             (["then", "paris", "again"], [IGNORE_INDEX, 1, 0]),
             (["a", "paris", "hat"], [IGNORE_INDEX, 0, 0])]
    test = [(["so", "paris", "and", "nasa", "zanzibar"], [IGNORE_INDEX, 1, 0, 2, 1])]
    data = {s: encode_tagged(tokenizer, rows, 32) for s, rows in (("train", train), ("test", test))}
    task = Task("case", "token", data["train"], data["test"], data["test"], ["lower", "capitalised", "upper"],
                "macro_f1")
    assert list(controls.tagged_words(data["test"], tokenizer)) == [("paris", 1), ("and", 0), ("nasa", 2),
                                                                     ("zanzibar", 1)]
    found = controls.word_lookup(task, {7: task}, tokenizer)
    # paris: capitalised twice, lower once; nasa upper; zanzibar unseen: lower (wrong).
    assert (found["targets"], found["accuracy"]) == (4, 0.75)
    assert set(found["by_seed"]) == {7} and found["by_seed"][7] == found["macro_f1"] < 1
