"""mini_bert: the tiny, readable BERT family behind the book "Encoder-Only".

From a terminal (`python -m mini_bert --help` lists the commands):

    python -m mini_bert pretrain --out runs/tiny           pretrain the book's tiny BERT (4.5-9 minutes, 2 cores)
    python -m mini_bert fill-mask tiny-wiki "paris is the capital of [MASK] ."
    python -m mini_bert finetune --init tiny-wiki --task topic
    python -m mini_bert grid --list                         the experiments behind Parts II and III

From Python, the pieces most readers start with (each also in its part, named below):

    pretrained("tiny-wiki")                       the book's pretrained tiny BERT, with its tokenizer
    default_tokenizer()                           the book's WordPiece vocabulary (train_wordpiece, BPETokenizer)
    BertConfig.from_preset("tiny", vocab_size=8192); BertForPreTraining(cfg)   a model's shape; the model
    pretrain(Recipe(budget="5m"))                 training, every setting in the Recipe
    load_checkpoint("runs/tiny"); fill_mask(model, tokenizer, "paris is the capital of [MASK] .")

The package reads like the book's table of contents, each part importing only from itself and
the parts before it (tests/test_layout.py):
    core/       plumbing: devices and seeds, the cache, paths
    build/      chapters 1-7: corpus, tokenizers, the model, masking, objectives, transformers bridge
    train/      chapters 8-10: recipe, loop, pretraining, runs and grids, inspection, fine-tuning
    improve/    chapters 11-13: RoBERTa's and ALBERT's ablations, the scores they are judged by
    beyond/     chapters 14-15: ELECTRA, SpanBERT, XLNet, DeBERTa, ModernBERT; equal compute
    languages/  chapter 16: Chinese, and many languages
    smaller/    chapter 17: distillation, domain adaptation
    experiments.py (every experiment, registered), hf.py (to and from transformers, every family),
    provenance.py, __main__.py (the command line);
    views/ (widgets and figures) and exercises/ (the checkers) read from all of them.
"""
__version__ = "0.1.0"

from .build.bpe import BPETokenizer, train_bpe
from .build.config import PRESETS, BertConfig
from .build.model import BertForMaskedLM, BertForPreTraining, BertForSequenceClassification, BertModel
from .build.params import count_parameters, formula_parameters
from .build.tokenization import WordPieceTokenizer, bert_base_uncased_tokenizer, default_tokenizer, train_wordpiece
from .core.runtime import pick_device, seed_everything
from .train.checkpoint import load_checkpoint, save_checkpoint
from .train.evaluation import fill_mask
from .train.pretrained import pretrained
from .train.pretraining import pretrain
from .train.recipe import Recipe

__all__ = [
    "BertConfig", "PRESETS", "BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
    "count_parameters", "formula_parameters", "pick_device", "seed_everything",
    "WordPieceTokenizer", "default_tokenizer", "bert_base_uncased_tokenizer", "train_wordpiece",
    "BPETokenizer", "train_bpe",
    "Recipe", "pretrain", "pretrained", "load_checkpoint", "save_checkpoint", "fill_mask",
]
