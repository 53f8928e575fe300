"""A sweep checked without training (``spladekit sweep --dry-run``): backbones, data and suites validated, and a rough
training-time estimate per run from the model's size and this machine's matmul speed."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from spladekit.common.errors import SpladekitError
from spladekit.common.sources import is_local, is_local_model
from spladekit.data.suites import SUITES
from spladekit.experiments.sweep_config import BackboneSpec, Cell, SweepConfig, plan, run_values
from spladekit.model.backbone import MLMHead, check_model_folder


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connection to the Hugging Face endpoint succeeds (seconds, instead of the hub client's retries)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _backbone_check(spec: BackboneSpec, online: bool) -> tuple[str, int | None]:
    """('ok' | 'not checked: …', body parameter count or None) without loading any weights.

    The body count leaves out embedding tables (lookups, no matmul) and the vocabulary projection
    (counted separately by :func:`estimate_step_flops`)."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    local = is_local_model(spec.id)
    if local:
        check_model_folder(Path(spec.id).expanduser())
    try:
        config = AutoConfig.from_pretrained(
            spec.id, trust_remote_code=spec.trust_remote_code, local_files_only=not (local or online)
        )
    except (OSError, ValueError) as error:
        if local:
            raise SpladekitError(f"{spec.id}: {str(error).splitlines()[0]}") from None
        reason = "hub unreachable, not in the local cache" if not online else str(error).splitlines()[0][:100]
        return f"not checked ({reason})", None
    try:
        with torch.device("meta"):
            model = AutoModelForMaskedLM.from_config(config, trust_remote_code=spec.trust_remote_code)
        not_matmul = {
            id(p) for module in model.modules() if isinstance(module, torch.nn.Embedding) for p in module.parameters()
        } | {id(MLMHead.of(model).weight)}
        return "ok", sum(p.numel() for p in model.parameters() if id(p) not in not_matmul)
    except Exception as error:
        return f"ok (size unknown: {type(error).__name__})", None


def _data_check(sweep: SweepConfig) -> list[str]:
    """Problems with the training data and the evaluation datasets (nothing is downloaded)."""
    problems = []
    data = sweep.recipe.get("data", {})
    fmt, path = data.get("format", "triplets"), data.get("path", "")
    if fmt in ("triplets", "id_triplets", "hard_negatives") and not Path(path).exists():
        problems.append(f"recipe.data.path: {path}: no such file")
    if fmt == "ir_datasets":
        import ir_datasets

        if path not in ir_datasets.registry:
            problems.append(f"recipe.data.path: {path!r} is not an ir_datasets id")
    for item in sweep.evaluation.data:
        item = str(item)
        if item in SUITES:
            root = sweep.evaluation.data_root
            if root is not None and not Path(root).is_dir():
                problems.append(f"evaluation.data_root: {root}: no such folder")
        elif is_local(item):
            if not (Path(item) / "corpus.jsonl").is_file():
                problems.append(f"evaluation.data: {item}: not a BEIR folder (no corpus.jsonl)")
        elif item not in SUITES and "/" not in item:
            problems.append(f"evaluation.data: {item!r} is neither a suite ({', '.join(SUITES)}) nor a folder or id")
    return problems


def _machine_flops_per_second() -> float:
    """Measured fp32 matmul throughput of this machine (one 1024³ product, best of 3)."""
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - began)
    return 2 * 1024**3 / best


def estimate_step_flops(parameters: int, vocab: int, hidden: int, recipe: dict) -> float:
    """≈ training FLOPs per step: 6·params·tokens (body without embeddings, forward + backward) +
    2·tokens·H·V (head forward; the fused head's backward is sparse, see pooling.py)."""
    data, opt = recipe.get("data", {}), recipe.get("optimization", {})
    batch = opt.get("batch_size", 8)
    tokens = batch * (
        data.get("query_max_length", 32) + (1 + data.get("negatives", 1)) * data.get("doc_max_length", 128)
    )
    return 6 * parameters * tokens + 2 * tokens * hidden * vocab


def dry_run(sweep: SweepConfig, output: str | Path | None = None) -> dict:
    """Validate everything without training; return the plan with a rough cost estimate."""
    problems = _data_check(sweep)
    checks, estimates = {}, {}
    throughput = _machine_flops_per_second() * 0.25  # training reaches a fraction of peak matmul speed
    online = any(not is_local_model(spec.id) for spec in sweep.backbones) and hub_reachable()
    for spec in sweep.backbones:
        try:
            status, parameters = _backbone_check(spec, online)
        except SpladekitError as error:
            problems.append(str(error))
            continue
        checks[spec.name] = status
        if parameters:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(
                spec.id, trust_remote_code=spec.trust_remote_code, local_files_only=not online
            )
            text = config.get_text_config()
            hidden = int(
                getattr(text, "embedding_size", None)
                or getattr(text, "hidden_size", None)
                or getattr(text, "dim", None)
                or 768
            )
            recipe = run_values(sweep, spec, Cell(spec.name, 1.0, "none"), spec.id)
            flops = estimate_step_flops(parameters, text.vocab_size, hidden, recipe)
            estimates[spec.name] = recipe.get("optimization", {}).get("steps", 1000) * flops / throughput
    cells = plan(sweep)
    rows: list[dict[str, Any]] = [
        {
            "run": cell.name,
            "backbone": cell.backbone,
            "k": cell.k,
            "mode": cell.mode,
            "backbone_check": checks.get(cell.backbone, "failed"),
            "estimated_train_seconds": None if cell.backbone not in estimates else round(estimates[cell.backbone]),
        }
        for cell in cells
    ]
    known = [row["estimated_train_seconds"] for row in rows if row["estimated_train_seconds"] is not None]
    return {
        "name": sweep.name,
        "runs": rows,
        "problems": problems,
        "estimated_total_train_hours_on_this_machine": round(sum(known) / 3600, 2) if known else None,
        "estimate_covers_runs": f"{len(known)}/{len(rows)}",
        "output": None if output is None else str(output),
    }
