"""One meaning per option name: every option that more than one command has is declared here, once.

A command takes such an option through :func:`option`, which writes its help as the declared meaning followed by
what is particular to that command (what its ``--output`` holds, which side a token limit is for). A name used by
two commands with two meanings is then impossible without editing this table, and ``tests/cli/test_options.py``
fails on any option name that two commands share without a declaration here, or whose help does not start with
the declared meaning.
"""

from __future__ import annotations

from typing import Any

import typer

from spladekit.common.schema import MIN_TOKEN_LIMIT

MEANINGS: dict[str, str] = {
    "--backend": "Search backend.",
    "--batch-size": "Texts per forward pass.",
    "--bf16": "Deprecated spelling of --precision bf16 (still accepted; a one-line notice says so).",
    "--cache": "Reuse/stash encoded corpora in $SPLADEKIT_CACHE (default ~/.cache/spladekit), keyed by model hash, "
    "corpus hash, token limits and precision.",
    "--compile": "torch.compile the model's backbone with its weights frozen in (dynamic shapes; compiling takes "
    "time and memory first): the same vectors up to float rounding, faster once compiled (docs/benchmarks.md).",
    "--corpus": "The documents, each with an id.",
    "--data": "Evaluation data.",
    "--device": "Where the model runs: auto (the GPU when CUDA is available, else the CPU), cpu, cuda or cuda:N.",
    "--doc-max-length": "Token limit for documents.",
    "--dry-run": "Validate the inputs and print the plan with an estimated cost; do no work, write nothing.",
    "--field": "Name of the vector field in the exported mapping, documents and queries.",
    "--field-type": "Mapping type of the vector field.",
    "--hits": "Documents retrieved per query (the Python API's and POST /search's `k`; pyserini's spelling).",
    "--index-name": "Index name in the exported bulk actions and queries.",
    "--json": "Print machine-readable JSON instead of the readable summary.",
    "--json-out": "Also write the JSON result to this file (must not exist unless --overwrite; checked before the "
    "work).",
    "--max-active-dims": "Keep only the K largest weights of each vector (ties: the lower term id); K >= 1. "
    "Default: keep all.",
    "--max-length": "Token limit written into the exported model, for both sides (default: the model's, else 256).",
    "--mode": "Rescale mode: tied (scale the shared matrix, keep the tie: the paper), untie (copy the head first, "
    "scale only the copy) or auto (untie when tied rescaling would shrink word embeddings below position "
    "embeddings).",
    "--model": "A SPLADE model: a folder spladekit loads or a hub id.",
    "--output": "Where the result is written (atomically; must not exist unless --overwrite or --resume).",
    "--overwrite": "Replace an existing output (once the new one is complete).",
    "--param": "Backend parameter NAME=VALUE, repeatable.",
    "--pooling": "SPLADE head, the same vectors whichever: auto (fused-bf16 on CPUs with native bf16 matmuls, "
    "AVX512-BF16 or AMX; else fused), fused (exact fp32), fused-bf16 (a bf16 matmul screens the terms under a "
    "proven rounding-error bound, fp32 recomputes the rest: the same non-zero set), triton (CUDA kernels) or "
    "naive (B x L x V logits; the reference).",
    "--precision": "The encoder's arithmetic: fp32 (default), bf16 (autocast; the weights stay fp32), int8 (the "
    "backbone's linear layers quantized dynamically; CPU only, encoding only) or auto (fp32 on every device: bf16's "
    "parity with fp32 was shown neither on a CPU nor on a GPU, docs/results/precision-parity). bf16 and int8 are not "
    "bit-identical to fp32; what ran is recorded with the vectors / result. Speed and parity: docs/benchmarks.md.",
    "--quantization-scale": "Weights become whole numbers round(w x SCALE); weights that round to 0 are dropped.",
    "--query-max-length": "Token limit for queries.",
    "--query-vectors": "Pre-encoded queries: a `spladekit encode --side query` folder.",
    "--queries": 'Query texts: JSONL, one {"_id", "text"} object per line.',
    "--resume": "Continue an interrupted run into --output from what it completed (the same plan; another plan is "
    "an error).",
    "--shard": "I/N: this worker's share of the work, for N workers sharing one output (Slurm: --shard "
    "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT).",
    "--side": "Encode as a query or as a document (each side has its own token limit).",
    "--split": "Qrels split (BEIR folders: qrels/<split>.tsv; ir_datasets: <id>/<split> when it exists).",
    "--trust-remote-code": "Allow the model folder/hub repo to run its own Python code (e.g. GTE).",
}


def option(default: Any, name: str, *other_names: str, detail: str = "", **settings: Any) -> Any:
    """``typer.Option(default, name, *other_names, ...)`` with the help ``MEANINGS[name]`` followed by
    ``detail``: what this command's use adds (typer.Option's own return type)."""
    declared = name.split("/")[0]  # "--cache/--no-cache": the flag's positive name
    if declared not in MEANINGS:
        raise KeyError(f"{declared} is not declared in spladekit.cli.options.MEANINGS")
    help_text = f"{MEANINGS[declared]} {detail}".strip()
    return typer.Option(default, name, *other_names, help=help_text, **settings)


def violations(command: Any) -> list[str]:
    """Every breach of one meaning per name in a click/typer command tree: a long option name that two commands
    share without a declaration in :data:`MEANINGS`, or whose help does not start with the declared meaning."""
    uses: dict[str, list[tuple[str, str]]] = {}

    def walk(node: Any, path: str) -> None:
        for name, sub in getattr(node, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        if getattr(node, "commands", None):
            return
        for parameter in node.params:
            if type(parameter).__name__.endswith("Argument") or not parameter.opts[0].startswith("-"):
                continue
            for opt in [*parameter.opts, *parameter.secondary_opts]:
                if opt.startswith("--") and not opt.startswith("--no-"):
                    uses.setdefault(opt, []).append((path, parameter.help or ""))

    walk(command, "")
    found = []
    for name, places in sorted(uses.items()):
        commands = sorted({path for path, _ in places})
        if name not in MEANINGS:
            if len(commands) > 1:
                found.append(f"{name} is used by {', '.join(commands)} but not declared in MEANINGS")
            continue
        for path, help_text in places:
            if not help_text.startswith(MEANINGS[name]):
                found.append(f"{name} in `{path}` does not start with its declared meaning: {help_text[:80]!r}")
    return found


# The options whose every use is the same: one object each.
DEVICE = option("auto", "--device")
PRECISION = option("fp32", "--precision")
BF16 = option(False, "--bf16")
COMPILE = option(False, "--compile")
TRUST_REMOTE_CODE = option(False, "--trust-remote-code")
JSON_FLAG = option(False, "--json")
JSON_OUTPUT = option(None, "--json-out")
OVERWRITE_FILE = option(False, "--overwrite", detail="Here: the --json-out file.")
MODEL_DEFAULTS = "(default: the model's limit for that side, else 256)"


def max_active_dims_option(what: str) -> Any:
    """``--max-active-dims K`` (checked by ``vectors_ops.check_max_active_dims``: a bad K is one error line)."""
    return option(None, "--max-active-dims", detail=f"Here: each {what} vector.")


def doc_max_length_option(detail: str = f"{MODEL_DEFAULTS}.") -> Any:
    return option(None, "--doc-max-length", min=MIN_TOKEN_LIMIT, detail=detail)


def query_max_length_option(detail: str = f"{MODEL_DEFAULTS}.") -> Any:
    return option(None, "--query-max-length", min=MIN_TOKEN_LIMIT, detail=detail)
