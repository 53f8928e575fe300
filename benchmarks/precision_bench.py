"""Encoding at each precision on this CPU, side by side (issue 45, item 5): sentence-transformers fp32 and under bf16
autocast, our ONNX graph fp32 and int8, fastembed where it is installed and can load the model, and spladekit at
--precision fp32 / bf16 / int8.

* **Models** (``--models``): ``bert-base``: a BERT-base-shaped masked LM with random weights (``--backbone-files``: a
  config and tokenizer, no weights; random init is fine for timing) whose vocabulary projection bias is shifted so that
  an average passage has about ``--active`` terms (as a trained model; ``benchmarks/real_inputs.py``'s calibration),
  on MS MARCO passages (``--passages``: trec-dl-2019-subset's corpus, real lengths) and queries; ``splade-tiny``:
  ``--splade-tiny`` on SciFact (``--scifact``: its corpus, title + " " + text, and its queries).
* **Timing**: one process per model loads every configuration, then ``--rounds`` rounds alternate them (the order
  rotates each round), so load from other processes on a shared machine hits every configuration alike; the best
  round counts. A round encodes the first ``--docs`` passages at ``--batch-size`` (docs/s), then ``--queries``
  queries one at a time (single-query latency, the serving case: the round's median).
* **Memory**: each configuration in its own fresh subprocess (same imports, same model, same texts): peak resident set
  (``VmHWM``, not ``ru_maxrss``: see :func:`peak_rss_mb`) after one encode pass, next to the resident set right after
  loading.
* **Agreement**: top-10 overlap of each configuration's vectors with sentence-transformers fp32's on the first 64
  passages (vector-level parity; effectiveness parity is docs/results/precision-parity/).
* Reported per model: docs/s, latency, peak memory, and each as a ratio to sentence-transformers fp32 (``ratios``).

Every configuration uses the same token limit (``--max-length``), batch size and thread count (``--threads``, also
onnxruntime's). fastembed is not a dependency: without it its row says why it was skipped.

    python benchmarks/precision_bench.py --output precision-bench.json
    python benchmarks/precision_bench.py --quick          # a smoke run: small counts, one round, no BERT-base shift
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

CONFIGS = ("st-fp32", "st-bf16", "onnx-fp32", "onnx-int8", "fastembed", "ours-fp32", "ours-bf16", "ours-int8")
REFERENCE = "st-fp32"
FASTEMBED_NAME = "prithivida/Splade_PP_en_v1"  # fastembed's SPLADE class; the weights come from a local folder
VOCAB_AT_LEAST = 30522
AGREEMENT_DOCS, AGREEMENT_K = 64, 10


def status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:")) / 1024


def rss_mb() -> float:
    return status_mb("VmRSS")


def peak_rss_mb() -> float:
    """This process's peak resident set: ``VmHWM``, which starts afresh at exec. Not ``ru_maxrss``: Linux carries it
    over fork + exec, so a worker started by a parent that holds a BERT-base would report at least the parent's peak
    (seen: every configuration at the parent's 2.6 GB)."""
    return status_mb("VmHWM")


def read_jsonl_texts(path: Path, count: int) -> list[str]:
    texts = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            texts.append(f"{row.get('title', '')} {row['text']}".strip())
            if len(texts) == count:
                break
    return texts


# ------------------------------------------------------------------------------------------------ configurations
class Config:
    """One configuration: ``load()`` once, then ``encode(texts, batch_size)`` → a dense float32 array or None."""

    def __init__(self, name: str, model: Path, onnx: dict[str, Path], max_length: int, threads: int):
        self.name, self.model, self.onnx, self.max_length, self.threads = name, model, onnx, max_length, threads
        self.encoder = None

    def load(self) -> None:
        name = self.name
        if name.startswith("st-"):
            from sentence_transformers.base.modules import Transformer
            from sentence_transformers.sparse_encoder import SparseEncoder
            from sentence_transformers.sparse_encoder.modules import SpladePooling

            mlm = Transformer(str(self.model), transformer_task="fill-mask", max_seq_length=self.max_length)
            self.encoder = SparseEncoder(modules=[mlm, SpladePooling(pooling_strategy="max")], device="cpu")
        elif name.startswith("onnx-"):
            from spladekit.model.onnx import OnnxEncoder

            self.encoder = OnnxEncoder(self.onnx[name], threads=self.threads)
        elif name == "fastembed":
            from fastembed import SparseTextEmbedding

            # fastembed's SPLADE++ class runs any local ONNX graph of MLM logits (log1p(relu) and the max over tokens
            # are its own numpy post-processing), given under that class's model name with a local path
            self.encoder = SparseTextEmbedding(
                FASTEMBED_NAME, specific_model_path=self.onnx[name], threads=self.threads, local_files_only=True
            )
        elif name.startswith("ours-"):
            from spladekit.model.loading import load_model

            precision = name.removeprefix("ours-")
            self.encoder = load_model(self.model, device="cpu", max_length=self.max_length, precision=precision)
        else:
            raise ValueError(name)

    def encode(self, texts: list[str], batch_size: int):
        if self.name.startswith("st-"):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.name == "st-bf16"):
                return self.encoder.encode(texts, batch_size=batch_size, show_progress_bar=False)
        if self.name == "fastembed":
            return list(self.encoder.embed(texts, batch_size=batch_size))
        return self.encoder.encode(texts, batch_size=batch_size, show_progress=False)

    def dense(self, vectors) -> np.ndarray:
        if self.name.startswith("st-"):
            return vectors.to_dense().float().numpy()
        if self.name == "fastembed":
            width = max(int(v.indices.max()) for v in vectors if len(v.indices)) + 1
            dense = np.zeros((len(vectors), max(width, VOCAB_AT_LEAST)), dtype=np.float32)
            for row, vector in enumerate(vectors):
                dense[row, vector.indices] = vector.values
            return dense
        return vectors.toarray()


def unavailable(name: str) -> str | None:
    """Why configuration ``name`` cannot run here, or None."""
    if name == "fastembed":
        try:
            import fastembed  # noqa: F401
        except ImportError:
            return "fastembed is not installed (not a spladekit dependency)"
    if name.startswith("st-"):
        try:
            import sentence_transformers  # noqa: F401
        except ImportError:
            return "sentence-transformers is not installed"
    if name.startswith("onnx-"):
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnx / onnxruntime are not installed (pip install 'spladekit[onnx]')"
    return None


def top_k_overlap(reference: np.ndarray, other: np.ndarray, k: int = AGREEMENT_K) -> float:
    """Mean share of the reference's top k terms (at most its non-zeros) among ``other``'s top k, per text."""
    shares = []
    for row_a, row_b in zip(reference, other):
        n = min(k, int((row_a > 0).sum()))
        if n:
            top_a = set(np.argsort(-row_a, kind="stable")[:n].tolist())
            top_b = set(np.argsort(-row_b, kind="stable")[:n].tolist())
            shares.append(len(top_a & top_b) / n)
    return float(np.mean(shares)) if shares else float("nan")


# ------------------------------------------------------------------------------------------------ workers
def worker_args(args: argparse.Namespace) -> list[str]:
    return [
        "--max-length",
        str(args.max_length),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--rounds",
        str(args.rounds),
    ]


def timing_worker(args: argparse.Namespace, job: dict) -> dict:
    """Every configuration of one model in this process, alternating ``--rounds`` times."""
    docs, queries = job["docs"], job["queries"]
    configs = [Config(name, Path(job["model"]), job["onnx"], args.max_length, args.threads) for name in job["configs"]]
    for config in configs:
        config.load()
        config.encode(docs[: args.batch_size], args.batch_size)  # warm-up: first-call allocations, lazy inits
        config.encode(queries[:1], 1)
    seconds: dict[str, list[float]] = {config.name: [] for config in configs}
    latency: dict[str, list[float]] = {config.name: [] for config in configs}
    agreement_vectors = {}
    for round_index in range(args.rounds):
        shift = round_index % len(configs)
        for config in configs[shift:] + configs[:shift]:
            started = time.perf_counter()
            vectors = config.encode(docs, args.batch_size)
            seconds[config.name].append(time.perf_counter() - started)
            if round_index == 0:
                agreement_vectors[config.name] = config.dense(vectors)[:AGREEMENT_DOCS]
            singles = []
            for query in queries:
                started = time.perf_counter()
                config.encode([query], 1)
                singles.append(time.perf_counter() - started)
            latency[config.name].append(statistics.median(singles))
    reference = agreement_vectors.get(REFERENCE)
    rows = {}
    for config in configs:
        vectors = agreement_vectors[config.name]
        rows[config.name] = {
            "docs_per_s": len(docs) / min(seconds[config.name]),
            "seconds_per_round": seconds[config.name],
            "query_latency_ms": 1000 * min(latency[config.name]),
            "query_latency_ms_per_round": [1000 * value for value in latency[config.name]],
            "avg_active_terms": float((vectors > 0).sum(1).mean()),
            f"top{AGREEMENT_K}_overlap_vs_{REFERENCE}": None
            if reference is None
            else top_k_overlap(reference, vectors),
        }
    return rows


def memory_worker(args: argparse.Namespace, job: dict) -> dict:
    """One configuration in a fresh process: resident set after loading, peak after one encode pass."""
    config = Config(job["configs"][0], Path(job["model"]), job["onnx"], args.max_length, args.threads)
    config.load()
    loaded = rss_mb()
    config.encode(job["docs"], args.batch_size)
    for query in job["queries"][:8]:
        config.encode([query], 1)
    return {"rss_after_load_mb": loaded, "peak_rss_mb": peak_rss_mb()}


def run_worker(kind: str, job_file: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, f"--{kind}-worker", str(job_file), *worker_args(args)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        tail = result.stderr.strip().splitlines()[-3:]
        raise SystemExit(f"precision_bench.py: {kind} worker failed: {' | '.join(tail)}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------ models
def bert_base_folder(args: argparse.Namespace, scratch: Path, passages: list[str]) -> tuple[Path, float]:
    """The random-init BERT-base folder, its projection bias shifted to about ``--active`` terms per passage."""
    from real_inputs import apply_shift, make_model, shift_for

    raw, shifted = scratch / "bert-base-init", scratch / "bert-base"
    make_model(args.backbone_files, raw)
    shift = 0.0 if args.active == 0 else shift_for(raw, passages[: args.calibration_docs], args.active, args.max_length)
    apply_shift(raw, shift, shifted)
    return shifted, shift


def export_graphs(model: Path, scratch: Path, max_length: int, wanted: list[str]) -> dict[str, str]:
    from spladekit.model.loading import load_model
    from spladekit.model.onnx import export_onnx

    folders = {}
    encoder = load_model(model, device="cpu", max_length=max_length)
    for name, quantize in (("onnx-fp32", None), ("onnx-int8", "int8")):
        if name in wanted:
            folder = scratch / f"{model.name}-{name}"
            folder.mkdir()
            export_onnx(encoder, folder, quantize=quantize)
            folders[name] = str(folder)
    if "fastembed" in wanted:
        folders["fastembed"] = str(export_mlm_logits(model, scratch / f"{model.name}-fastembed", max_length))
    return folders


def export_mlm_logits(model: Path, folder: Path, max_length: int) -> Path:
    """``model``'s masked LM as an ONNX graph of its logits (B × L × V) with its tokenizer files, the layout
    fastembed's SPLADE models have (``model.onnx``, ``tokenizer.json``, ``tokenizer_config.json``, ``config.json``),
    the tokenizer's limit set to ``max_length``."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    folder.mkdir()
    mlm = AutoModelForMaskedLM.from_pretrained(model).eval()
    tokenizer = AutoTokenizer.from_pretrained(model, model_max_length=max_length)
    tokenizer.save_pretrained(folder)
    mlm.config.save_pretrained(folder)
    sample = tokenizer(["a sample text", "another"], padding=True, return_tensors="pt")

    class Logits(torch.nn.Module):  # token_type_ids: fastembed feeds them where the graph takes them (BERT)
        def __init__(self) -> None:
            super().__init__()
            self.mlm = mlm

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
            return self.mlm(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_length)
    names = ("input_ids", "attention_mask", "token_type_ids")
    inputs = tuple(sample.get(name, torch.zeros_like(sample["input_ids"])) for name in names)
    with torch.no_grad():
        torch.onnx.export(
            Logits().eval(),
            inputs,
            str(folder / "model.onnx"),
            input_names=list(names),
            output_names=["logits"],
            dynamic_shapes=tuple({0: batch, 1: sequence} for _ in names),
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    return folder


def ratios(rows: dict[str, dict]) -> dict[str, dict]:
    """Each configuration against sentence-transformers fp32: speed-up (docs/s), latency and memory as fractions."""
    reference = rows.get(REFERENCE, {})
    out = {}
    for name, row in rows.items():
        if "docs_per_s" not in row or "docs_per_s" not in reference:
            continue
        out[name] = {
            "docs_per_s_x": row["docs_per_s"] / reference["docs_per_s"],
            "query_latency_x": row["query_latency_ms"] / reference["query_latency_ms"],
        }
        if "peak_rss_mb" in row and "peak_rss_mb" in reference:
            out[name]["peak_rss_x"] = row["peak_rss_mb"] / reference["peak_rss_mb"]
    return out


def table(model: str, rows: dict[str, dict], relative: dict[str, dict]) -> str:
    lines = [
        f"{model}",
        f"  {'config':<10} {'docs/s':>9} {'x ST':>6} {'query ms':>9} {'x ST':>6} {'peak MB':>8} {'x ST':>6} "
        f"{'top10':>6}",
    ]
    for name, row in rows.items():
        if "skipped" in row:
            lines.append(f"  {name:<10} skipped: {row['skipped']}")
            continue
        rel = relative.get(name, {})
        overlap = row.get(f"top{AGREEMENT_K}_overlap_vs_{REFERENCE}")
        lines.append(
            f"  {name:<10} {row['docs_per_s']:>9.1f} {rel.get('docs_per_s_x', float('nan')):>6.2f} "
            f"{row['query_latency_ms']:>9.2f} {rel.get('query_latency_x', float('nan')):>6.2f} "
            f"{row.get('peak_rss_mb', float('nan')):>8.0f} {rel.get('peak_rss_x', float('nan')):>6.2f} "
            f"{float('nan') if overlap is None else overlap:>6.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bert-base,splade-tiny", help="comma-separated: bert-base, splade-tiny")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    parser.add_argument("--backbone-files", type=Path, default=SHARED / "backbone-files" / "bert-base-uncased")
    parser.add_argument("--passages", type=Path, default=SHARED / "data" / "trec-dl-2019-subset" / "corpus.jsonl")
    parser.add_argument(
        "--passage-queries", type=Path, default=SHARED / "data" / "trec-dl-2019-subset" / "queries.jsonl"
    )
    parser.add_argument("--splade-tiny", type=Path, default=SHARED / "models" / "splade-tiny-msmarco")
    parser.add_argument("--scifact", type=Path, default=SHARED / "data" / "scifact")
    parser.add_argument("--docs", type=int, default=512, help="passages encoded per round (docs/s)")
    parser.add_argument("--queries", type=int, default=64, help="queries encoded one at a time per round (latency)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best counts")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256, help="token limit of every configuration")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch and onnxruntime threads")
    parser.add_argument("--active", type=int, default=200, help="bert-base: terms per passage after the bias shift")
    parser.add_argument("--calibration-docs", type=int, default=64, help="bert-base: passages the shift is fit on")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-configuration memory subprocesses")
    parser.add_argument("--quick", action="store_true", help="smoke run: 16 docs, 4 queries, 1 round, max length 64")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    parser.add_argument("--timing-worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--memory-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for kind, worker in (("timing", timing_worker), ("memory", memory_worker)):
        job_file = getattr(args, f"{kind}_worker")
        if job_file is not None:
            print(json.dumps(worker(args, json.loads(job_file.read_text()))))
            return
    if args.quick:
        args.docs, args.queries, args.rounds, args.max_length = 16, 4, 1, 64
        args.active, args.calibration_docs = 0, 8
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    bad = [name for name in models if name not in ("bert-base", "splade-tiny")] + [
        name for name in configs if name not in CONFIGS
    ]
    if bad:
        raise SystemExit(f"precision_bench.py: unknown model or configuration {bad[0]!r}")
    report: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {
            key: os.path.relpath(value, ROOT) if isinstance(value, Path) else value  # no machine's folders
            for key, value in vars(args).items()
            if not key.endswith("_worker")
        },
        "torch": torch.__version__,
        "cpu_native_bf16": bool(
            getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
            or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        ),
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="precision-bench-") as scratch_name:
        scratch = Path(scratch_name)
        for model_name in models:
            if model_name == "bert-base":
                docs = read_jsonl_texts(args.passages, args.docs)
                queries = read_jsonl_texts(args.passage_queries, args.queries)
                folder, shift = bert_base_folder(args, scratch, docs)
                extra = {"bias_shift": shift, "active_target": args.active}
            else:
                docs = read_jsonl_texts(args.scifact / "corpus.jsonl", args.docs)
                queries = read_jsonl_texts(args.scifact / "queries.jsonl", args.queries)
                folder, extra = args.splade_tiny, {}
            rows: dict[str, dict] = {}
            runnable = []
            for name in configs:
                reason = unavailable(name)
                if reason is None:
                    runnable.append(name)
                else:
                    rows[name] = {"skipped": reason}
            onnx = export_graphs(folder, scratch, args.max_length, runnable)
            job = {"model": str(folder), "onnx": onnx, "docs": docs, "queries": queries, "configs": runnable}
            job_file = scratch / f"{model_name}-job.json"
            job_file.write_text(json.dumps(job))
            timed = run_worker("timing", job_file, args)
            for name in runnable:
                rows[name] = timed[name]
                if not args.no_memory:
                    single = scratch / f"{model_name}-{name}-job.json"
                    single.write_text(json.dumps({**job, "configs": [name]}))
                    rows[name].update(run_worker("memory", single, args))
            rows = {name: rows[name] for name in configs}
            relative = ratios(rows)
            report["models"][model_name] = {
                "docs": len(docs),
                "queries": len(queries),
                **extra,
                "results": rows,
                "ratios_vs_st_fp32": relative,
            }
            print(table(model_name, rows, relative), flush=True)
            if args.output is not None:  # after every model: a run cut short keeps what it measured
                args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
