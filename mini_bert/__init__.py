"""mini_bert: the tiny, readable BERT family behind the book "Encoder-Only"."""
__version__ = "0.1.0"

from .config import PRESETS, BertConfig
from .model import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
)
from . import hf, minilm
from .params import count_parameters, formula_parameters
from .runtime import pick_device, seed_everything

__all__ = [
    "BertConfig", "PRESETS", "BertModel", "BertForPreTraining", "BertForMaskedLM",
    "BertForSequenceClassification", "count_parameters", "formula_parameters", "pick_device", "seed_everything",
]
