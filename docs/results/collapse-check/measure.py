"""The collapse check's measurements: the untrained SPLADE vectors of diagnose's sample texts, per model.

Run from the repository root (CPU, a few minutes): .venv/bin/python docs/results/collapse-check/measure.py
Models: the seed architectures at random init in their real base-size configs (../shared/backbone-files;
weights drawn by transformers' own init, seed 0), splade-tiny (../shared/models) and its inflated variants
(spladekit.experiments.inflate: the head × s, tied or untied, the MLM transform × s). Prints a Markdown table:
mean and std of the active weights, active dimensions per text, mean pairwise cosine between different texts,
the median positive-pair score, and diagnose's verdict.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, BertTokenizerFast, RobertaTokenizerFast

from spladekit import SparseEncoder
from spladekit.experiments.inflate import inflate
from spladekit.model.diagnosis import diagnose
from spladekit.model.head_options import HeadOptions

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
FILES = SHARED / "backbone-files"
TINY = SHARED / "models" / "splade-tiny-msmarco"
# (name, config folder, tokenizer loader)
RANDOM_INIT = [
    ("bert-base-uncased", "bert-base-uncased", lambda: AutoTokenizer.from_pretrained(FILES / "bert-base-uncased")),
    ("ModernBERT-base", "ModernBERT-base", lambda: AutoTokenizer.from_pretrained(FILES / "ModernBERT-base")),
]
# config.json is absent for these: the transformers defaults of the family, with the real vocabulary
FAMILY_CONFIGS = [
    (
        "roberta-base",
        "roberta",
        lambda: RobertaTokenizerFast(
            str(FILES / "roberta-base" / "vocab.json"), str(FILES / "roberta-base" / "merges.txt")
        ),
    ),
    (
        "distilbert-base-uncased",
        "distilbert",
        lambda: BertTokenizerFast(str(FILES / "distilbert-base-uncased" / "vocab.txt")),
    ),
]


def row(name: str, encoder: SparseEncoder) -> str:
    report = diagnose(encoder, mode="untie")
    return (
        f"| {name} | {report.mean_term_weight:.3f} | {report.term_weight_std:.3f} | "
        f"{(report.avg_q_nnz + report.avg_d_nnz) / 2:.0f} / {report.vocab_size} | {report.mean_cosine:.3f} | "
        f"{report.median_pair_score:.1f} | {report.collapse or '—'} |"
    )


def random_init(folder: Path, config, tokenizer) -> SparseEncoder:
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return SparseEncoder.from_pretrained(folder)


def main() -> None:
    print("| model | mean active weight | std | active dims / V | mean cosine | median pair score | verdict |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for name, folder, tokenizer in RANDOM_INIT:
            config = AutoConfig.from_pretrained(FILES / folder)
            print(row(f"{name}, random init", random_init(Path(scratch) / name, config, tokenizer())), flush=True)
        for name, family, tokenizer in FAMILY_CONFIGS:
            loaded = tokenizer()
            config = AutoConfig.for_model(family, vocab_size=len(loaded))
            print(row(f"{name}, random init", random_init(Path(scratch) / name, config, loaded)), flush=True)
        # what the head options do to the untrained vectors of one of them (not evidence about training)
        folder = Path(scratch) / "ModernBERT-base"
        report = diagnose(SparseEncoder.from_pretrained(folder), mode="untie")
        fixes = [
            (f"rescale k = {report.recommended_k:g} (auto), untie", {}, report.recommended_k),
            ("logit_shift = 15 (SPARSEUP)", {"logit_shift": 15.0}, None),
            ("position_top_k = 12 (SPARSEUP)", {"position_top_k": 12}, None),
            ("logit_shift = 15 + position_top_k = 12", {"logit_shift": 15.0, "position_top_k": 12}, None),
        ]
        for label, options, k in fixes:
            encoder = SparseEncoder.from_pretrained(
                folder, head=HeadOptions(**options), rescale_k=k, rescale_mode="untie"
            )
            print(row(f"ModernBERT-base, random init, {label}", encoder), flush=True)
    print(row("splade-tiny (trained)", SparseEncoder.from_pretrained(TINY)), flush=True)
    for target, factor in (("untie", 4), ("untie", 8), ("untie", 16), ("tied", 8), ("transform", 8), ("untie", 64)):
        encoder = SparseEncoder.from_pretrained(TINY)
        inflate(encoder.model, factor, target)
        print(row(f"splade-tiny, {target} × {factor}", encoder), flush=True)


if __name__ == "__main__":
    sys.exit(main())
