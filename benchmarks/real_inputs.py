"""Training and encoding speed on inputs users have: real text lengths and realistic head sparsity, spladekit against
sentence-transformers, side by side, each configuration in its own fresh process (its peak memory is its own).

* **Model**: a BERT-base-shaped masked LM with random weights (``--backbone-files``: a config and tokenizer, no
  weights; random init is fine for timing), saved once. **Sparsity** is set by shifting the vocabulary projection's
  bias so that an average passage has about ``--active`` terms (``init``: no shift, every term active as at
  initialisation; e.g. 2000 for mid-training, 200 for a trained model); the shift is found by bisection on 64 passages
  and recorded. Both tools load the same shifted folder.
* **Texts**: MS MARCO passages (``--passages``: trec-dl-2019-subset's corpus) and MS MARCO dev queries (``--queries``),
  tokenized by the model's tokenizer (real lengths). A training batch is ``--batch`` queries with a positive and a
  negative passage each, drawn at random (real batches are padded to their longest text).
* **Training step**: spladekit encodes queries and passages (``SparseEncoder.forward_texts`` with
  ``--length-groups`` groups, 1 = one padded batch, or ``packed``: the texts packed into rows without padding;
  ``+checkpointing`` / ``+checkpointingN``: activation checkpointing of every / every N-th layer, as
  ``optimization.activation_checkpointing: 1`` / ``N``),
  InfoNCE over in-batch passages + FLOPS on both sides, AdamW; sentence-transformers runs its
  ``SpladeLoss(SparseMultipleNegativesRankingLoss)`` with the same FLOPS weights.
* **Encoding**: ``--encode-docs`` passages at batch 32, both tools sorting by length. The encode pass runs after the
  training steps, on the weights they left: its measured active terms per passage (reported) fall below the
  calibrated level (a few AdamW steps at random init move the logits), and it does not use ``--length-groups``.

Each configuration runs in a subprocess: one warm-up step, then ``--steps`` timed steps (and one encode pass); the
configurations alternate ``--rounds`` times and the best round counts. Reported: steps/s, real tokens/s, docs/s, peak
RSS (``ru_maxrss``), and the ratios to sentence-transformers.

    python benchmarks/real_inputs.py --active init,2000,200 --length-groups 1,4,packed --output real-inputs.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
LAMBDA = 1e-3


def read_texts(path: Path, count: int) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            texts.append(f"{row.get('title', '')} {row['text']}".strip())
            if len(texts) == count:
                break
    return texts


def make_model(files: Path, folder: Path) -> None:
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(files))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(files).save_pretrained(folder)


def shift_for(folder: Path, passages: list[str], active: int, max_length: int, device: str = "cpu") -> float:
    """The bias shift that gives ``active`` terms per passage on average (bisection; 0 when ``active`` is 0)."""
    from spladekit import SparseEncoder

    encoder = SparseEncoder.from_pretrained(folder, max_length=max_length, device=device)
    bias = encoder.model.get_output_embeddings().bias
    original = bias.detach().clone()

    def mean_active(shift: float) -> float:
        with torch.no_grad():
            bias.copy_(original - shift)
        return float(encoder.encode(passages, show_progress=False).getnnz(axis=1).mean())

    low, high = 0.0, 1.0
    while mean_active(high) > active:
        low, high = high, 2 * high
    for _ in range(20):
        middle = (low + high) / 2
        low, high = (middle, high) if mean_active(middle) > active else (low, middle)
    return high


def apply_shift(folder: Path, shift: float, target: Path) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(folder)
    with torch.no_grad():
        model.get_output_embeddings().bias -= shift
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(folder).save_pretrained(target)


# ------------------------------------------------------------------------------------- one configuration (worker)
def flops(vectors: torch.Tensor) -> torch.Tensor:
    return (vectors.abs().mean(0) ** 2).sum()


@dataclasses.dataclass(frozen=True)
class Layout:
    """One configuration of a tool: length groups (1 = one padded batch) or packing, activation checkpointing of
    every ``every``-th layer (0: off), ``torch.compile`` of the backbone, the head's pooling, and bf16 autocast of the
    step and the encode pass."""

    groups: int = 1
    packing: bool = False
    every: int = 0
    compiled: bool = False
    pooling: str = "fused"
    bf16: bool = False


OPTIONS = "checkpointing[N], compile, triton, adaptive, bf16screen, bf16"
HEADS = {"triton": "triton", "adaptive": "fused-adaptive", "bf16screen": "fused-bf16"}  # options that pick the head


def spladekit_layout(value: str) -> Layout:
    """A ``--length-groups`` value: ``N`` or ``packed``, then any of ``+checkpointing`` (every layer),
    ``+checkpointingN``, ``+compile``, ``+triton`` (the Triton head), ``+adaptive`` (pooling fused-adaptive) and
    ``+bf16screen`` (pooling fused-bf16), ``+bf16`` (bf16 autocast); anything else exits with one line. The head is
    ``fused`` otherwise (the fp32 baseline, not the library's default ``auto``)."""
    layout, *extras = value.split("+")
    fields: dict = {"packing": True} if layout == "packed" else {}
    if not fields and not (layout.isdigit() and int(layout) >= 1):
        raise SystemExit(f"real_inputs.py: --length-groups: expected N or packed, then +{OPTIONS}; got {value!r}")
    fields.setdefault("groups", 1 if layout == "packed" else int(layout))
    for extra in extras:
        every = extra.removeprefix("checkpointing")
        if extra == "compile":
            fields["compiled"] = True
        elif extra == "bf16":
            fields["bf16"] = True
        elif extra in HEADS:
            fields["pooling"] = HEADS[extra]
        elif extra.startswith("checkpointing") and (every == "" or every.isdigit() and int(every) >= 1):
            fields["every"] = int(every or 1)
        else:
            raise SystemExit(f"real_inputs.py: --length-groups: unknown option {extra!r} in {value!r} ({OPTIONS})")
    return Layout(**fields)


def on_device(value, device: str):
    """A tensor moved to ``device``; anything else (sentence-transformers' features hold text too) as it is."""
    return value.to(device) if isinstance(value, torch.Tensor) else value


def trainee(tool: str, folder: Path, max_length: int, layout: Layout = Layout(), device: str = "cpu"):
    """The model to train (in training mode) and its loss on a batch of (query, positive, negative) texts, with the
    real tokens read: sentence-transformers' ``SpladeLoss(SparseMultipleNegativesRankingLoss)`` (``tool`` "st"), or
    spladekit's ``forward_texts`` (``layout``: groups, packing, checkpointing of every ``every``-th layer as
    ``optimization.activation_checkpointing`` does, compile, pooling) with InfoNCE + the same FLOPS weights."""
    if tool == "st":
        from sentence_transformers.base.modules import Transformer
        from sentence_transformers.sparse_encoder import SparseEncoder as STEncoder
        from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
        from sentence_transformers.sparse_encoder.modules import SpladePooling

        mlm = Transformer(str(folder), transformer_task="fill-mask", max_seq_length=max_length)
        st = STEncoder(modules=[mlm, SpladePooling(pooling_strategy="max")], device=device).train()
        if layout.compiled:
            mlm.auto_model.compile(dynamic=True)
        splade_loss = SpladeLoss(
            st,
            SparseMultipleNegativesRankingLoss(st),
            document_regularizer_weight=LAMBDA,
            query_regularizer_weight=LAMBDA,
        )

        def st_loss(batch) -> tuple[torch.Tensor, int]:
            features = [st.tokenize(list(texts)) for texts in zip(*batch)]
            features = [{name: on_device(value, device) for name, value in f.items()} for f in features]
            return sum(splade_loss(features, None).values()), sum(int(f["attention_mask"].sum()) for f in features)

        return st, st_loss
    from spladekit import SparseEncoder

    ours = SparseEncoder.from_pretrained(folder, max_length=max_length, pooling=layout.pooling, device=device).train()
    if layout.every:
        ours.model.activation_checkpointing_enable(every_n_layers=layout.every)
    if layout.compiled:
        ours.compile_backbone()

    def our_loss(batch) -> tuple[torch.Tensor, int]:
        q_texts, p_texts, n_texts = (list(column) for column in zip(*batch))
        q, read_q = ours.forward_texts(q_texts, 32, layout.groups, layout.packing)
        d, read_d = ours.forward_texts(p_texts + n_texts, max_length, layout.groups, layout.packing)
        labels = torch.arange(len(q_texts), device=q.device)
        ranking = torch.nn.functional.cross_entropy(q.float() @ d.float().T, labels)
        return ranking + LAMBDA * flops(q.float()) + LAMBDA * flops(d.float()), read_q + read_d

    return ours, our_loss


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float:
    """The device's peak: allocated CUDA memory, or the process's peak resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> None:
    from spladekit.common.devices import autocast, resolve_device

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = resolve_device(args.device)
    queries, passages = read_texts(args.queries, 4000), read_texts(args.passages, 4000)
    rng = random.Random(0)
    batches = [
        [(rng.choice(queries), rng.choice(passages), rng.choice(passages)) for _ in range(args.batch)]
        for _ in range(args.steps + args.warmup)
    ]
    tool, value = args.worker.split(":")
    layout = spladekit_layout(value)
    bf16 = args.bf16 or layout.bf16
    model, loss_of = trainee(tool, args.model, args.max_length, layout, str(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    tokens = 0

    def step(batch) -> None:
        nonlocal tokens
        with autocast(device, bf16):
            loss, read = loss_of(batch)
        tokens += read
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for batch in batches[: args.warmup]:  # warm-up (and compilation of each graph, where compiled)
        step(batch)
    tokens = 0
    synchronize(device)
    started = time.perf_counter()
    for batch in batches[args.warmup :]:
        step(batch)
    synchronize(device)
    train_seconds = time.perf_counter() - started
    model.eval()
    docs = passages[: args.encode_docs]

    def encode(texts: list[str]) -> float:
        """Active terms per text."""
        with torch.inference_mode(), autocast(device, bf16):
            if tool == "st":
                vectors = model.encode(texts, batch_size=32, show_progress_bar=False, convert_to_sparse_tensor=True)
                return vectors.coalesce().values().numel() / len(texts)
            return model.encode(texts, batch_size=32, show_progress=False).nnz / len(texts)

    encode(passages[-32:])  # warm-up: the inference graph, where compiled
    synchronize(device)
    started = time.perf_counter()
    nnz = encode(docs)
    synchronize(device)
    encode_seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "config": args.worker,
                "steps_per_s": args.steps / train_seconds,
                "real_tokens_per_s": tokens / train_seconds,
                "encode_docs_per_s": len(docs) / encode_seconds,
                "active_per_doc": nnz,
                "peak_memory_mb": peak_memory_mb(device),
            }
        )
    )


# ------------------------------------------------------------------------------------- the run
def run_worker(config: str, model: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--worker", config, "--model", str(model)]
    for name in ("passages", "queries", "batch", "steps", "warmup", "max_length", "encode_docs", "threads", "device"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--bf16"] if args.bf16 else []
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"real_inputs.py: worker {config} failed: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """The model files and the texts every real-input benchmark reads (``--backbone-files``, ``--passages``,
    ``--queries``)."""
    parser.add_argument("--backbone-files", type=Path, default=SHARED / "backbone-files" / "bert-base-uncased")
    parser.add_argument("--passages", type=Path, default=SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl")
    parser.add_argument(
        "--queries", type=Path, default=SHARED / "data" / "msmarco-passage-queries-qrels" / "queries-dev-small.jsonl"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_inputs(parser)
    parser.add_argument("--active", default="init,2000,200", help="comma-separated: init, or terms per passage")
    parser.add_argument(
        "--length-groups",
        default="1,4,packed",
        help="spladekit configurations: length groups (1: one padded batch) or 'packed' (packing), each with "
        "options: '+checkpointing' or '+checkpointingN' (activation checkpointing of every (N-th) layer), '+compile' "
        "(torch.compile of the backbone), '+triton' (the Triton head), '+adaptive' (pooling fused-adaptive), "
        "'+bf16screen' (pooling fused-bf16), '+bf16' (bf16 autocast of that configuration alone)",
    )
    parser.add_argument(
        "--st",
        default="plain",
        help="sentence-transformers configurations: plain, compile, bf16 (autocast), compile+bf16 (comma-separated); "
        "the first is the reference of every ratio",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument(
        "--bf16", action="store_true", help="every configuration under bf16 autocast (both tools; or '+bf16' per one)"
    )
    parser.add_argument("--batch", type=int, default=8, help="queries per training step (each + 2 passages)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed steps first (compiled: one graph per input layout, e.g. 3)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--encode-docs", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    layouts = args.length_groups.split(",")
    st_values = args.st.split(",")
    if not set(st_values) <= {"plain", "compile", "bf16", "compile+bf16"}:
        raise SystemExit(f"real_inputs.py: --st: expected plain, compile, bf16, compile+bf16; got {args.st!r}")
    st_configs = ["st:1" + ("" if value == "plain" else f"+{value}") for value in st_values]
    for value in layouts:  # every value checked before any work
        spladekit_layout(value)
    configs = [*st_configs, *(f"ours:{value}" for value in layouts)]
    report: dict = {"args": vars(args), "levels": []}
    with tempfile.TemporaryDirectory(prefix="real-inputs-") as scratch:
        base = Path(scratch) / "random"
        make_model(args.backbone_files, base)
        sample = read_texts(args.passages, 64)
        for level in args.active.split(","):
            shift = 0.0 if level == "init" else shift_for(base, sample, int(level), args.max_length, args.device)
            folder = Path(scratch) / f"shift-{level}"
            apply_shift(base, shift, folder)
            rows: dict[str, dict] = {}
            for _ in range(args.rounds):
                for config in configs:
                    measured = run_worker(config, folder, args)
                    best = rows.get(config)
                    if best is None or measured["steps_per_s"] > best["steps_per_s"]:
                        rows[config] = measured | (
                            {"encode_docs_per_s": max(measured["encode_docs_per_s"], best["encode_docs_per_s"])}
                            if best
                            else {}
                        )
                    elif measured["encode_docs_per_s"] > best["encode_docs_per_s"]:
                        best["encode_docs_per_s"] = measured["encode_docs_per_s"]
            st = rows[st_configs[0]]
            for row in rows.values():
                row["train_vs_st"] = row["steps_per_s"] / st["steps_per_s"]
                row["encode_vs_st"] = row["encode_docs_per_s"] / st["encode_docs_per_s"]
                row["memory_vs_st"] = row["peak_memory_mb"] / st["peak_memory_mb"]
            report["levels"].append({"active": level, "bias_shift": shift, "rows": list(rows.values())})
            print(json.dumps(report["levels"][-1]), flush=True)
    print("\n| sparsity | config | steps/s | real tokens/s | train vs ST | docs/s | encode vs ST | peak MB | vs ST |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for level in report["levels"]:
        for row in level["rows"]:
            print(
                f"| {level['active']} ({row['active_per_doc']:.0f}/doc) | {row['config']} | {row['steps_per_s']:.3f} | "
                f"{row['real_tokens_per_s']:.0f} | {row['train_vs_st']:.2f} | {row['encode_docs_per_s']:.1f} | "
                f"{row['encode_vs_st']:.2f} | {row['peak_memory_mb']:.0f} | {row['memory_vs_st']:.2f} |"
            )
    if args.output:
        args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
