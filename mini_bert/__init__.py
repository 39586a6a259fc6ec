"""mini_bert: the tiny, readable BERT family behind the book "Encoder-Only".

From a terminal (`python -m mini_bert --help` lists the commands):

    python -m mini_bert pretrain --out runs/tiny           pretrain the book's tiny BERT (4.5-9 minutes, 2 cores)
    python -m mini_bert fill-mask tiny-wiki "paris is the capital of [MASK] ."
    python -m mini_bert finetune --init tiny-wiki --task topic
    python -m mini_bert grid --list                         the experiments behind Parts II and III

From Python, the pieces most readers start with:

    BertConfig.from_preset("tiny", vocab_size=8192)         a model's shape (mini_bert.config)
    BertForPreTraining(cfg)(input_ids, attention_mask, mlm_labels=labels)   the model (mini_bert.model)
    mini_bert.runs.pretrained("tiny-wiki")                  the book's pretrained model, with its tokenizer
    mini_bert.tokenization.default_tokenizer()              the book's WordPiece vocabulary
    mini_bert.pretraining.pretrain(recipe)                  training (mini_bert.recipe: every setting)

Each module's docstring says what it holds; README.md has the map of the package.
"""
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
