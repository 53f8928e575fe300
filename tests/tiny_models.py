"""Tiny random-init masked-LM folders for the seven seed architectures (no downloads).

Every model shares one small WordPiece tokenizer; hidden sizes are <= 64 so the whole suite runs on
2 CPU cores in minutes. ``build_tiny_model(arch, folder)`` writes a standard HF folder.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import torch
import transformers as T

ARCHITECTURES = ("bert", "distilbert", "albert", "roberta", "modernbert", "ettin", "gte")
# Where each architecture keeps its vocabulary projection (found generically; asserted in tests).
PROJECTION_PATHS = {
    "bert": "cls.predictions.decoder",
    "distilbert": "vocab_projector",
    "albert": "predictions.decoder",
    "roberta": "lm_head.decoder",
    "modernbert": "decoder",
    "ettin": "decoder",
    "gte": "lm_head.decoder",
}
GTE_CODE = Path(__file__).parent / "fixtures" / "gte_standin"

WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "and",
    "or",
    "is",
    "are",
    "was",
    "be",
    "for",
    "on",
    "with",
    "by",
    "as",
    "at",
    "from",
    "that",
    "this",
    "it",
    "what",
    "how",
    "who",
    "why",
    "which",
    "capital",
    "france",
    "paris",
    "city",
    "river",
    "seine",
    "vaccine",
    "immune",
    "system",
    "virus",
    "vitamin",
    "bone",
    "pain",
    "muscle",
    "novel",
    "written",
    "water",
    "boils",
    "pressure",
    "python",
    "list",
    "light",
    "speed",
    "plant",
    "glucose",
    "oxygen",
    "price",
    "inflation",
    "diabetes",
    "treatment",
    "war",
    "japan",
    "travel",
    "spring",
    "autumn",
    "document",
    "query",
    "search",
    "retrieval",
    "sparse",
    "dense",
    "model",
    "train",
    "test",
    "cat",
    "dog",
    "sat",
    "mat",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "data",
    "science",
    "protein",
    "cell",
    "gene",
    "study",
    "result",
    "effect",
]
SUBWORDS = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz0123456789.,?!-")
VOCAB = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + SUBWORDS))
MAX_POSITIONS = 128
# Texts made of VOCAB words, with very different lengths (padding and batching tests).
SAMPLE_TEXTS = [
    "what is the capital of france",
    "paris is the capital city of france on the river seine and a quick brown fox jumps over the lazy dog",
    "a cat",
    "vitamin d deficiency causes bone pain",
    "python list",
]


def tiny_tokenizer() -> T.PreTrainedTokenizerBase:
    vocab = {token: index for index, token in enumerate(VOCAB)}
    return T.BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=MAX_POSITIONS)


def _config(arch: str):
    common = dict(vocab_size=len(VOCAB), pad_token_id=0)
    layers = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    if arch == "bert":
        return T.BertConfig(hidden_size=32, max_position_embeddings=MAX_POSITIONS, **layers, **common)
    if arch == "distilbert":
        return T.DistilBertConfig(
            dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=MAX_POSITIONS, **common
        )
    if arch == "albert":  # factorized embeddings: decoder is V x 16, hidden 32
        return T.AlbertConfig(
            embedding_size=16, hidden_size=32, max_position_embeddings=MAX_POSITIONS, **layers, **common
        )
    if arch == "roberta":
        return T.RobertaConfig(hidden_size=32, max_position_embeddings=MAX_POSITIONS + 2, **layers, **common)
    if arch in ("modernbert", "ettin"):  # Ettin encoders are ModernBERT configs
        specials = dict(bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3)
        extra = dict(global_attn_every_n_layers=2, local_attention=16) if arch == "ettin" else {}
        return T.ModernBertConfig(
            hidden_size=32, max_position_embeddings=MAX_POSITIONS, **layers, **common, **specials, **extra
        )
    raise ValueError(arch)


def _load_gte_module(name: str):
    spec = importlib.util.spec_from_file_location(
        f"gte_standin.{name}", GTE_CODE / f"{name}.py", submodule_search_locations=None
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _gte_model():
    package = importlib.util.module_from_spec(importlib.util.spec_from_loader("gte_standin", loader=None))
    package.__path__ = [str(GTE_CODE)]
    sys.modules.setdefault("gte_standin", package)
    configuration = _load_gte_module("configuration_gte_standin")
    modeling = _load_gte_module("modeling_gte_standin")
    config = configuration.GteStandinConfig(vocab_size=len(VOCAB))
    config.auto_map = {
        "AutoConfig": "configuration_gte_standin.GteStandinConfig",
        "AutoModelForMaskedLM": "modeling_gte_standin.GteStandinForMaskedLM",
    }
    return modeling.GteStandinForMaskedLM(config)


def build_tiny_model(arch: str, folder: Path, seed: int = 0, head_scale: float = 1.0) -> Path:
    """Write a tiny random-init ``arch`` masked-LM (+ tokenizer) to ``folder``; ``head_scale`` inflates W_head."""
    torch.manual_seed(seed)
    folder = Path(folder)
    tokenizer = tiny_tokenizer()
    if arch == "gte":
        model = _gte_model()
    else:
        model = T.AutoModelForMaskedLM.from_config(_config(arch))
    with torch.no_grad():
        projection = model.get_output_embeddings()
        projection.bias.normal_(0.0, 0.5)  # random-init biases are zero; make the bias visible to tests
        projection.weight.mul_(head_scale)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if arch == "gte":
        for source in GTE_CODE.glob("*.py"):
            shutil.copy(source, folder / source.name)
    return folder
