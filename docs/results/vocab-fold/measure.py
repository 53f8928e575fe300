"""Folded sizes of the real tokenizers in ../shared/backbone-files (head.vocab_fold: spladekit.model.folding).

Run from the repository root: .venv/bin/python docs/results/vocab-fold/measure.py (ALBERT's spiece.model needs
`pip install sentencepiece`; without it that row is left out and says so). Prints a Markdown table.
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, BertTokenizerFast, RobertaTokenizerFast

from spladekit.model.folding import build_fold

FILES = Path(__file__).resolve().parents[3].parent / "shared" / "backbone-files"


def albert():
    import sentencepiece
    from transformers import AlbertTokenizerFast

    model = sentencepiece.SentencePieceProcessor(model_file=str(FILES / "albert-base-v2" / "spiece.model"))
    pieces = [(model.id_to_piece(i), model.get_score(i)) for i in range(model.get_piece_size())]
    return AlbertTokenizerFast(vocab=pieces)


LOADERS = {
    "ModernBERT-base": lambda: AutoTokenizer.from_pretrained(FILES / "ModernBERT-base"),
    "roberta-base": lambda: RobertaTokenizerFast(
        str(FILES / "roberta-base" / "vocab.json"), str(FILES / "roberta-base" / "merges.txt")
    ),
    "bert-base-uncased": lambda: AutoTokenizer.from_pretrained(FILES / "bert-base-uncased"),
    "distilbert-base-uncased": lambda: BertTokenizerFast(str(FILES / "distilbert-base-uncased" / "vocab.txt")),
    "albert-base-v2": albert,
}


def main() -> None:
    print("| tokenizer | marker | token ids | case | space | case_space |")
    print("|---|---|---:|---:|---:|---:|")
    for name, load in LOADERS.items():
        try:
            tokenizer = load()
        except ImportError as error:
            print(f"| {name} | not measured: {error} | | | | |")
            continue
        size = len(tokenizer)
        folds = {mode: build_fold(tokenizer, size, mode) for mode in ("case", "space", "case_space")}
        marker = folds["space"].marker
        cells = " | ".join(f"{fold.dimensions:,}" for fold in folds.values())
        print(f"| {name} | `{marker}` | {size:,} | {cells} |")


if __name__ == "__main__":
    main()
