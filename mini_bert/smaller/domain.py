"""Domain adaptation at small scale: the corpus's topics as domains.

The reference the chapter on smaller and specialised encoders builds against (issue 29). SciBERT
and BioBERT took the two routes to a domain model (FACTS.md, "Smaller and specialised encoders"):
a vocabulary of the domain's own text, and continued pretraining of a general model on it
(Gururangan et al. 2020 call the latter domain-adaptive pretraining, DAPT, and pretraining on a
task's own unlabelled text task-adaptive, TAPT). Both at our scale:

- Domains: one topic's articles (`domain_documents`; "Biology and health sciences" by default,
  the nearest to BioBERT's) against the whole corpus (`general_documents`).
- `continue_pretraining`: the book's pretrained model trained N more steps on given text with
  the book's recipe (its loop, batches and masking: mini_bert.train.batches.recipe_batches and
  mini_bert.train.loop.train, the pieces mini_bert.train.pretraining.pretrain is made of), a fresh optimiser
  and schedule. On the domain's training articles (DAPT), on a task's training texts (TAPT), or
  on the general training text at the same N (the control that separates "more training" from
  "the right text").
- Tasks inside and outside a domain: truecasing (chapter 10's token task: restore the capitals of
  lower-cased words) on the domain's sentences and on the other topics' (`truecase_task`).
- Vocabulary: `domain_vocabulary` (WordPiece trained on the domain's text, the book's size and
  trainer), `pieces_per_word` on in-domain and general text, `vocabulary_overlap` (SciBERT's measure:
  the share of one vocabulary's pieces found in the other).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from ..build.data import UNCATEGORIZED, Document, load_corpus, topic_labels
from ..build.tokenization import pre_tokenize
from ..core.runtime import seed_everything
from ..train.finetuning import register_task
from ..train.recipe import Recipe
from ..train.tasks import CASES, Task, check_uncased, encode_tagged, subsample, truecase_sentences

DOMAIN = "Biology and health sciences"  # the nearest topic to BioBERT's domain, and the second largest


# ============================================================================================
# Domains
# ============================================================================================

def check_topic(topic: str) -> str:
    if topic not in topic_labels():
        raise ValueError(f"unknown topic {topic!r}; the domains are the corpus's topics: {', '.join(topic_labels())}")
    return topic


def domain_documents(topic: str = DOMAIN, split: str = "train", *, inside: bool = True) -> list[Document]:
    """The articles of `split` whose topic is `topic` (inside=False: those of every other topic,
    "Uncategorized" left out, since it is no topic), in corpus order."""
    check_topic(topic)
    return [d for d in load_corpus(split) if (d.topic == topic) == inside and d.topic != UNCATEGORIZED]


def general_documents(split: str = "train") -> list[Document]:
    """The general text: every article of `split`, the domain's included (what the book's model was
    pretrained on, so that continuing on it is "more of the same training")."""
    return load_corpus(split)


# ============================================================================================
# Continued pretraining
# ============================================================================================

@dataclass
class ContinuedRun:
    model: torch.nn.Module  # a BertForPreTraining
    tokenizer: object
    history: dict
    recipe: Recipe  # the continuation's recipe (its budget is the extra steps)
    documents: int  # how many documents it continued on


def continuation_recipe(steps: int, lr: float, seed: int, base: Recipe | None = None, **changes) -> Recipe:
    """The book's recipe (chapter 8's) with a budget of `steps` more steps at peak rate `lr`: its
    warmup and decay restart, as a new run on an already trained model does. `changes`: other
    settings of the continuation (the domain study continues on 128-token inputs only)."""
    from ..train.pretrained import PRETRAINED

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    return (base or PRETRAINED["tiny-wiki"]).replace(budget=str(steps), lr=lr, seed=seed, **changes)


def continue_pretraining(documents: Sequence, steps: int, *, lr: float = 1e-3, seed: int = 0, start=None,
                         device=None, progress: bool = False, stop_at_step: int | None = None,
                         **changes) -> ContinuedRun:
    """Train `start` (a mini_bert.train.runs.Run or PretrainResult; default the book's pretrained
    "tiny-wiki") `steps` more steps on `documents` with the book's recipe (with `changes`, e.g.
    seq_len=128, long_seq_len=0, batch_size=16), its batches and its loop. The start is copied,
    never changed. Seeded: the batches, masks and dropout follow `seed`.
    stop_at_step: stop there, the schedule still that of `steps` (a fingerprint's prefix)."""
    from ..train.batches import recipe_batches
    from ..train.loop import train
    from ..train.pretrained import pretrained

    if len(documents) == 0:
        raise ValueError("no documents to continue pretraining on")
    start = start if start is not None else pretrained("tiny-wiki", progress=progress)
    model, tokenizer = copy.deepcopy(start.model), start.tokenizer
    recipe = continuation_recipe(steps, lr, seed, start.recipe, **changes)
    if recipe.model_config(tokenizer.vocab_size) != model.config:
        raise ValueError("the continuation recipe describes another model than the one given")
    batches, _ = recipe_batches(list(documents), tokenizer, recipe)
    seed_everything(seed)  # dropout draws from the global generator
    history = train(model, batches, recipe, device=device, progress=progress, stop_at_step=stop_at_step)
    return ContinuedRun(model.eval(), tokenizer, history, recipe, len(documents))


def text_documents(texts: Iterable[str], split: str = "train") -> list[Document]:
    """Plain texts (a task's training inputs) as one-sentence Documents, for continued pretraining
    on them (TAPT)."""
    return [Document(f"text {i}", UNCATEGORIZED, (text,), split) for i, text in enumerate(texts)]


# ============================================================================================
# Tasks inside and outside a domain
# ============================================================================================

def truecase_task(tokenizer, max_length: int = 64, *, topic: str = DOMAIN, inside: bool = True,
                  labels: int | None = 2000, seed: int = 0, max_eval: int | None = None) -> Task:
    """Truecasing on the sentences of the domain's articles (inside=True) or of the other topics'
    (inside=False): `labels` training sentences drawn with `seed`, every held-out sentence (or the
    first max_eval); macro-F1 chooses the epoch, as chapter 10's truecase task."""
    check_uncased(tokenizer)
    splits = {s: truecase_sentences(domain_documents(topic, s, inside=inside)) for s in ("validation", "test")}
    splits["train"] = truecase_training_sentences(topic, inside=inside, labels=labels, seed=seed)
    if max_eval is not None:
        splits["validation"], splits["test"] = splits["validation"][:max_eval], splits["test"][:max_eval]
    data = {s: encode_tagged(tokenizer, examples, max_length) for s, examples in splits.items()}
    name = f"truecase-{'in' if inside else 'out'}"
    return Task(name, "token", data["train"], data["validation"], data["test"], list(CASES), "macro_f1",
                {"train": [" ".join(words) for words, _ in splits["train"]]})


def truecase_training_sentences(topic: str = DOMAIN, *, inside: bool = True, labels: int | None = 2000,
                                seed: int = 0) -> list[tuple[list[str], list[int]]]:
    """The labelled training sentences of the truecase task inside (or outside) the domain: `labels`
    drawn with `seed` ((lower-cased words, case tags) pairs). Their words, without the tags, are
    what task-adaptive pretraining continues on."""
    return subsample(truecase_sentences(domain_documents(topic, "train", inside=inside)), labels, seed, "sentences")


# The two tasks as fine-tuning runs name them (settings {"task": "truecase-in", ...}): the domain's
# sentences and the other topics'.
TRUECASE_TASKS = {"truecase-in": True, "truecase-out": False}


def _truecase_loader(inside: bool):
    def load(tokenizer, max_length: int, *, labels: int | None = None, seed: int = 0,
             max_eval: int | None = None) -> Task:
        return truecase_task(tokenizer, max_length, inside=inside, labels=labels, seed=seed, max_eval=max_eval)
    return load


for _name, _inside in TRUECASE_TASKS.items():
    register_task(_name, _truecase_loader(_inside))


# ============================================================================================
# Vocabularies
# ============================================================================================

def pieces_per_word(tokenizer, texts: Iterable[str]) -> float:
    """WordPiece pieces per word (words as BERT's pre-tokenizer splits them: punctuation marks are
    words too) over `texts`: 1.0 when every word is one piece; higher when words are cut."""
    words = pieces = 0
    for text in texts:
        for word in pre_tokenize(text, lowercase=tokenizer.lowercase):
            words += 1
            pieces += len(tokenizer.encode(word)) or 1
    if words == 0:
        raise ValueError("no words to count")
    return pieces / words


def vocabulary_overlap(a, b) -> float:
    """The share of a's pieces (special tokens left out) that b also has: SciBERT's measure
    (SciVocab shares 42% of its pieces with BERT's, FACTS.md)."""
    from ..build.tokenization import SPECIAL_TOKENS

    mine = set(a.ids_to_tokens) - set(SPECIAL_TOKENS)
    if not mine:
        raise ValueError("the first vocabulary has no pieces besides the special tokens")
    return len(mine & set(b.ids_to_tokens)) / len(mine)


def domain_vocabulary(topic: str = DOMAIN, vocab_size: int = 8192):
    """A WordPiece vocabulary trained on the domain's training sentences with the book's trainer
    and settings (mini_bert.build.tokenization.default_recipe: likelihood gain, lower-cased, pairs seen at
    least twice). A small domain may run out of pairs worth merging before vocab_size."""
    from ..build.tokenization import default_recipe, train_wordpiece

    recipe = default_recipe(vocab_size)
    sentences = [s for d in domain_documents(topic, "train") for s in d.sentences]
    return train_wordpiece(sentences, vocab_size, lowercase=recipe["lowercase"], method=recipe["method"],
                           min_frequency=recipe["min_frequency"])
