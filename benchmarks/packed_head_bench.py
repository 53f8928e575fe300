"""The SPLADE head after packing: one pass over the padded batch against passes per length group (issue 27).

Packing (``spladekit.model.packing``) runs the backbone on real tokens only and puts its output back in the padded
B × L_max layout, where the fused head would compute every padded position. Cut by length into G groups
(``batches.length_groups``), each padded only to its own longest text, the head computes less padding for G passes.
This times the head alone, forward and backward (``splade_max_pool_fused``), on the token lengths of real training
batches: ``--batch`` random MS MARCO passages (trec-dl-2019-subset) tokenized by the model's tokenizer, random
hidden states and a head of the model's shape (``--backbone-files``: config and tokenizer, random weights), with a
bias shift giving about ``--active`` active terms per text. Every G runs ``--repeats`` times, alternating; the best
counts. Reported: ms per pass, the speed ratio to G = 1, and real / computed tokens.

    python benchmarks/packed_head_bench.py --groups 1,2,4,8
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from real_inputs import read_texts  # the benchmarks' one reader of passages (title + text)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone-files", type=Path, default=SHARED / "backbone-files" / "bert-base-uncased")
    parser.add_argument("--passages", type=Path, default=SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl")
    parser.add_argument("--groups", default="1,2,4,8", help="comma-separated numbers of length groups")
    parser.add_argument("--batch", type=int, default=16, help="passages per batch (a training step's documents)")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--shift", type=float, default=3.0, help="bias shift: fewer active terms as it grows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    try:
        groups = [int(value) for value in args.groups.split(",")]
    except ValueError:
        raise SystemExit(f"packed_head_bench.py: --groups: expected numbers, got {args.groups!r}") from None

    from transformers import AutoConfig, AutoTokenizer

    from spladekit.model.batches import in_order, length_groups
    from spladekit.model.pooling import splade_max_pool_fused

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(args.backbone_files)
    tokenizer = AutoTokenizer.from_pretrained(args.backbone_files)
    texts = read_texts(args.passages, 4000)
    batch = random.Random(0).sample(texts, args.batch)
    lengths = np.array([len(ids) for ids in tokenizer(batch, truncation=True, max_length=args.max_length).input_ids])
    width, vocab = config.hidden_size, config.vocab_size
    steps = torch.arange(int(lengths.max()))
    mask = (steps < torch.from_numpy(lengths).unsqueeze(1)).long()
    hidden = (torch.randn(len(batch), int(lengths.max()), width) * mask.unsqueeze(2)).requires_grad_()
    weight = (torch.randn(vocab, width) / width**0.5).requires_grad_()
    bias = torch.full((vocab,), -args.shift, requires_grad=True)

    def run(count: int) -> tuple[float, float]:
        cut = length_groups(lengths, count)
        for tensor in (hidden, weight, bias):
            tensor.grad = None
        started = time.perf_counter()
        parts = []
        for members in cut:
            index, longest = torch.from_numpy(members), int(lengths[members].max())
            parts.append(splade_max_pool_fused(hidden[index, :longest], weight, bias, mask[index, :longest]))
        vectors = in_order(parts, cut)
        (vectors * torch.linspace(0.5, 1.5, vocab)).sum().backward()
        seconds = time.perf_counter() - started
        return seconds, float((vectors > 0).sum(1).float().mean())

    best: dict[int, float] = {}
    active = 0.0
    run(1)  # warm-up
    for _ in range(args.repeats):
        for count in groups:
            seconds, active = run(count)
            best[count] = min(best.get(count, float("inf")), seconds)
    report = {"command": " ".join(sys.argv), "torch": torch.__version__, "lengths": lengths.tolist(), "rows": []}
    print(
        f"{len(batch)} passages, lengths mean {lengths.mean():.1f}, max {lengths.max()}; H {width}, V {vocab}; "
        f"{active:.0f} active terms per text"
    )
    print("| groups | ms (forward + backward) | speed vs the first | real / computed tokens |")
    print("|---:|---:|---:|---:|")
    for count in groups:
        computed = sum(len(members) * int(lengths[members].max()) for members in length_groups(lengths, count))
        row = {
            "groups": count,
            "ms": best[count] * 1000,
            "vs_1": best[groups[0]] / best[count],
            "real_over_computed": float(lengths.sum() / computed),
        }
        report["rows"].append(row)
        print(f"| {count} | {row['ms']:.0f} | {row['vs_1']:.2f} | {row['real_over_computed']:.2f} |")
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
