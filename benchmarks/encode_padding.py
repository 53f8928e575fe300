"""How much padding an encode pass computes (issue 27): real / computed tokens of length-sorted batches.

``SparseEncoder.encode`` sorts its texts by token length and pads each batch to its longest, so a batch holds texts
of nearly one length; packing would save at most the rest. This tokenizes the first ``--count`` texts of each
``--passages`` prefix with the model's tokenizer and reports real / computed tokens for length-sorted batches of
``--batch`` (the encode path) and for random batches (a training step's documents).

    python benchmarks/encode_padding.py --counts 128,4000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from real_inputs import read_texts  # the benchmarks' one reader of passages (title + text)

SHARED = Path(__file__).resolve().parents[2] / "shared"


def real_share(lengths: np.ndarray, batch: int) -> float:
    """Real / computed tokens when ``lengths`` are batched in this order, each batch padded to its longest."""
    batches = [lengths[start : start + batch] for start in range(0, len(lengths), batch)]
    return float(lengths.sum() / sum(len(b) * b.max() for b in batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone-files", type=Path, default=SHARED / "backbone-files" / "bert-base-uncased")
    parser.add_argument("--passages", type=Path, default=SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl")
    parser.add_argument("--counts", default="128,4000", help="comma-separated numbers of texts")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    args = parser.parse_args()
    counts = [int(value) for value in args.counts.split(",")]

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.backbone_files)
    texts = read_texts(args.passages, max(counts))
    lengths = np.array([len(ids) for ids in tokenizer(texts, truncation=True, max_length=args.max_length).input_ids])
    header = f"sorted batches of {args.batch}: real / computed | random batches: real / computed"
    print(f"| texts | mean tokens | {header} |")
    print("|---:|---:|---:|---:|")
    for count in counts:
        part = lengths[:count]
        shuffled = np.random.default_rng(0).permutation(part)
        print(
            f"| {count} | {part.mean():.1f} | {real_share(np.sort(part)[::-1], args.batch):.3f} | "
            f"{real_share(shuffled, args.batch):.3f} |"
        )


if __name__ == "__main__":
    main()
