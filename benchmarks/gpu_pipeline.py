"""The GPU path users take, end to end, from local copies only: train, encode under torchrun, index, evaluate, and
a 2 × 2 sweep spread over devices — each stage the `spladekit` command a user runs, timed, with the GPU memory its
processes held. Prints one table (stage, device seen, seconds, docs/s, peak GPU MiB, nDCG@10) and writes it as JSON.

On a GPU machine (≤ 8 minutes on one H200 with the defaults):

    python benchmarks/gpu_pipeline.py --output gpu-pipeline

Every stage runs with ``--device cuda`` (torchrun: one rank per visible GPU; the sweep: ``--devices`` with one
worker per GPU, or two workers on GPU 0 when there is one), and the script fails unless ``nvidia-smi`` saw each
stage's processes hold GPU memory. With ``--device cpu`` the same stages run on the CPU (what the test suite does
with tiny models and a tiny collection, to keep the script working where no GPU is).

Inputs (defaults: this project's offline assets in ../shared): a trained SPLADE model (``--tiny``), a BERT-base
config + tokenizer folder (``--base``: trained from random initialisation), a BEIR folder (``--data``) with
``triplets-train.tsv``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def gpu_count(device: str) -> int:
    if device == "cpu":
        return 0
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (use --device cpu to run the stages on the CPU)")
    return torch.cuda.device_count()


class GpuMemory:
    """Samples ``nvidia-smi``'s per-process GPU memory every 0.5 s while a stage runs; ``peak`` is the largest
    sum over the processes seen at one time (MiB), 0 when none held any."""

    def __init__(self, enabled: bool):
        self.enabled, self.peak, self._stop = enabled, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            try:
                lines = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.splitlines()
                used = sum(int(line.split(",")[1]) for line in lines if line.strip())
                self.peak = max(self.peak, used)
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(0.5)

    def __enter__(self) -> GpuMemory:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join()


def spladekit(*args: object) -> list[str]:
    return [sys.executable, "-m", "spladekit", *map(str, args)]


def torchrun(ranks: int, *args: object) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    return launcher + ["-m", "spladekit", *map(str, args)]


def run_stage(name: str, command: list[str], device: str, rows: list[dict], docs: int | None = None) -> None:
    """Run one stage and append its row (a failed stage stops the script, naming its log)."""
    log = Path(os.environ["PIPELINE_OUTPUT"]) / f"{name}.log"
    print(f"=== {name}: {' '.join(command)}", flush=True)
    started = time.perf_counter()
    with GpuMemory(device != "cpu") as memory, log.open("w") as errors:
        result = subprocess.run(command, stdout=errors, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{name} failed (exit {result.returncode}): see {log}\n{log.read_text()[-2000:]}")
    seen = "cpu" if device == "cpu" else ("cuda" if memory.peak > 0 else "NOT ON THE GPU")
    rows.append(
        {
            "stage": name,
            "device_seen": seen,
            "seconds": round(seconds, 1),
            "docs_per_s": round(docs / seconds, 1) if docs else None,
            "peak_gpu_mib": memory.peak if device != "cpu" else None,
            "ndcg@10": None,
        }
    )


def random_base_model(base: Path, folder: Path) -> Path:
    """A random-initialised MLM of ``base``'s config, saved with its tokenizer (no weights are downloaded)."""
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    if not (folder / "config.json").is_file():
        model = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(base))
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def train_config(model: Path, data: Path, steps: int, bf16: bool, path: Path) -> Path:
    recipe = {
        "backbone": {"id": str(model)},
        "data": {"format": "triplets", "path": str(data / "triplets-train.tsv"), "doc_max_length": 256},
        "optimization": {"steps": steps, "batch_size": 32, "warmup_steps": max(1, steps // 10), "bf16": bf16},
        "logging": {"every": max(1, steps // 10), "checkpoint_every": steps, "progress": False, "plots": False},
    }
    path.write_text(json.dumps(recipe, indent=2))
    return path


def sweep_config(tiny: Path, base: Path, data: Path, steps: int, bf16: bool, path: Path) -> Path:
    sweep = {
        "name": "gpu-pipeline",
        "backbones": [{"name": "tiny", "id": str(tiny)}, {"name": "base", "id": str(base)}],
        "k": [1, 4],
        "modes": ["tied"],
        "seeds": [13],
        "baselines": [],
        "recipe": {
            "data": {"format": "triplets", "path": str(data / "triplets-train.tsv"), "doc_max_length": 256},
            "optimization": {"steps": steps, "batch_size": 32, "warmup_steps": max(1, steps // 10), "bf16": bf16},
            "logging": {"every": max(1, steps // 10), "checkpoint_every": steps, "progress": False, "plots": False},
        },
        "evaluation": {"data": [str(data)], "split": "test", "max_length": 256, "batch_size": 128},
    }
    path.write_text(json.dumps(sweep, indent=2))
    return path


def documents_of(data: Path) -> int:
    with (data / "corpus.jsonl").open() as corpus:
        return sum(1 for line in corpus if line.strip())


def pipeline(args: argparse.Namespace, gpus: int) -> list[dict]:
    out, device = args.output, args.device
    ranks = max(gpus, 1) if args.ranks is None else args.ranks
    cuda = "cuda" if device != "cpu" else "cpu"
    bf16 = device != "cpu" and not args.fp32
    precision = ["--bf16"] if bf16 else []
    docs = documents_of(args.data)
    rows: list[dict] = []
    base = random_base_model(args.base, out / "bert-base-random")
    for name, model in (("train bert-base (random init)", base), ("train splade-tiny", args.tiny)):
        slug = "base" if model == base else "tiny"
        config = train_config(model, args.data, args.steps, bf16, out / f"train-{slug}.json")
        run_stage(name, spladekit("train", config, "--output", out / f"run-{slug}", "--device", cuda), device, rows)
    trained = out / "run-tiny" / "model"
    vectors = out / "vectors"
    encode = ["encode", trained, "--corpus", args.data / "corpus.jsonl", "--output", vectors, "--device", "auto"]
    encode += ["--batch-size", "128", *precision]
    run_stage(f"encode corpus (torchrun, {ranks} ranks)", torchrun(ranks, *encode), device, rows, docs)
    index = spladekit("index", vectors, "--output", out / "index", "--backend", "seismic")
    run_stage("index (seismic, CPU)", index, "cpu", rows)
    evaluate = ["evaluate", trained, "--data", args.data, "--split", "test", "--device", "auto", *precision]
    evaluate += ["--batch-size", "128", "--doc-max-length", "256", "--json-out", out / "evaluate.json"]
    run_stage(f"evaluate (torchrun, {ranks} ranks)", torchrun(ranks, *evaluate), device, rows, docs)
    rows[-1]["ndcg@10"] = round(json.loads((out / "evaluate.json").read_text())["nDCG@10"], 4)
    devices = ",".join(f"cuda:{i}" for i in range(min(gpus, 4))) if gpus > 1 else f"{cuda},{cuda}"
    config = sweep_config(args.tiny, base, args.data, args.sweep_steps, bf16, out / "sweep.json")
    sweep = spladekit("sweep", config, "--output", out / "sweep", "--devices", devices)
    run_stage(f"sweep 2 × 2 (--devices {devices})", sweep, device, rows)
    cells = sorted((out / "sweep" / "runs").glob("*/evaluation.json"))
    if len(cells) != 4:
        raise SystemExit(f"the sweep finished {len(cells)} of its 4 cells: see {out / 'sweep'}")
    scores = {cell.parent.name: json.loads(cell.read_text())[args.data.name]["nDCG@10"] for cell in cells}
    rows[-1]["ndcg@10"] = ", ".join(f"{name} {score:.4f}" for name, score in scores.items())
    return rows


def table(rows: list[dict]) -> str:
    header = "| stage | device seen | seconds | docs/s | peak GPU MiB | nDCG@10 |\n|---|---|---:|---:|---:|---:|\n"
    return header + "".join(
        f"| {r['stage']} | {r['device_seen']} | {r['seconds']} | {r['docs_per_s'] or ''} | "
        f"{'' if r['peak_gpu_mib'] is None else r['peak_gpu_mib']} | {'' if r['ndcg@10'] is None else r['ndcg@10']} |\n"
        for r in rows
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True, help="a new folder for every stage's output and logs")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", type=Path, default=SHARED / "models" / "splade-tiny-msmarco")
    parser.add_argument("--base", type=Path, default=SHARED / "backbone-files" / "bert-base-uncased")
    parser.add_argument("--data", type=Path, default=SHARED / "data" / "scifact")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the two training stages")
    parser.add_argument("--sweep-steps", type=int, default=100, help="training steps of each sweep cell")
    parser.add_argument("--ranks", type=int, help="torchrun ranks (default: one per visible GPU; 1 on the CPU)")
    parser.add_argument("--fp32", action="store_true", help="train and encode in fp32 (default on a GPU: bf16)")
    args = parser.parse_args()
    if args.device == "cuda" and shutil.which("nvidia-smi") is None:
        raise SystemExit("nvidia-smi is missing: no stage could be shown to run on the GPU")
    gpus = gpu_count(args.device)
    if args.output.exists():
        raise SystemExit(f"{args.output}: already exists (choose a new folder)")
    args.output.mkdir(parents=True)
    os.environ["PIPELINE_OUTPUT"] = str(args.output)
    os.environ["SPLADEKIT_CACHE"] = str(args.output / "cache")
    rows = pipeline(args, gpus)
    (args.output / "pipeline.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    wrong = [row["stage"] for row in rows if row["device_seen"] == "NOT ON THE GPU"]
    if wrong:
        raise SystemExit(f"these stages held no GPU memory: {wrong}")


if __name__ == "__main__":
    main()
