"""What a run shows while it trains: ``metrics.jsonl``, a collapse detector, and the final plots.

``metrics.jsonl`` holds one JSON object per logged step: ``step``, ``loss`` (total), ``ranking_loss``,
``reg_q`` / ``reg_d`` (the regularizer values), ``flops_q`` / ``flops_d`` (FLOPS of the batch, whatever
the regularizer), ``lambda_q`` / ``lambda_d``, ``q_nnz`` / ``d_nnz`` (average active dimensions),
``head_norm`` (Frobenius norm of the vocabulary projection), ``grad_norm`` (before clipping), ``lr``,
``examples_per_s``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from spladekit.atomic import atomic_file
from spladekit.data.lines import expect
from spladekit.errors import InputError

logger = logging.getLogger("spladekit")

METRICS_FILE = "metrics.jsonl"
EVALUATION_FILE = "evaluation.jsonl"  # one object per evaluation: step + the results of spladekit.evaluate


def read_metrics(output: Path, name: str = METRICS_FILE, numbers: tuple[str, ...] = ("step",)) -> list[dict]:
    """The records of ``metrics.jsonl`` (or another JSONL log): JSON objects carrying each key of
    ``numbers`` as a number (``step`` an integer); anything else is an error naming the line.

    Every record is written with its newline in one call, so only a last line without a newline can be
    a write cut short by a kill; it is ignored. Any other undecodable line is an error: skipping it (or
    everything after it) would silently drop history that a resume then rewrites without it.
    """
    path = Path(output) / name
    if not path.is_file():
        return []
    records = []
    try:
        lines = path.read_bytes().decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise InputError(f"not valid UTF-8 (byte at offset {error.start})", path) from None
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # empty after the final newline, or the cut-short last write
                break
            raise InputError(f"not valid JSON ({error.msg})", path, number) from None
        expect(record, dict, "a record", path, number)
        for key in numbers:
            expect(record.get(key), int if key == "step" else float, repr(key), path, number)
        records.append(record)
    return records


class MetricsLog:
    """Appends records to ``metrics.jsonl`` (or ``name``); on resume keeps only the steps up to the checkpoint."""

    def __init__(self, output: Path, resume_step: int = 0, name: str = METRICS_FILE):
        self.path = Path(output) / name
        kept = [record for record in read_metrics(output, name) if record["step"] <= resume_step]
        with atomic_file(self.path) as stream:
            stream.writelines(json.dumps(record) + "\n" for record in kept)
        self.stream = self.path.open("a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.stream.close()


@dataclass
class CollapseDetector:
    """Flags the failure modes of SPLADE training (the head-norm collapse of Jang et al., arXiv:2606.18811).

    * vanishing: average active dimensions of queries or documents below 1 (everything pruned);
    * saturation: more than half of the vocabulary active (no sparsity, scores inflated);
    * explosion: loss above ``explosion_factor`` × its lowest logged value.

    A condition must hold for ``patience`` consecutive logs to count; ``update`` returns the reason the
    first time it does (once per episode: the condition must clear before it is reported again).
    """

    vocab_size: int
    patience: int = 5
    explosion_factor: float = 10.0
    lowest_loss: float = math.inf
    streaks: dict = field(default_factory=dict)

    def update(self, record: dict) -> str | None:
        nnz = min(record["q_nnz"], record["d_nnz"]), max(record["q_nnz"], record["d_nnz"])
        conditions = {
            "vanishing": (nnz[0] < 1, f"average active dimensions fell to {nnz[0]:.2f}"),
            "saturation": (nnz[1] > self.vocab_size / 2,
                           f"{nnz[1]:.0f} of {self.vocab_size} dimensions active (> 50 % of the vocabulary)"),
            "explosion": (record["loss"] > self.explosion_factor * self.lowest_loss and record["loss"] > 0,
                          f"loss {record['loss']:.4g} > {self.explosion_factor:g} × its lowest {self.lowest_loss:.4g}"),
        }
        self.lowest_loss = min(self.lowest_loss, record["loss"])
        for name, (holds, message) in conditions.items():
            self.streaks[name] = self.streaks.get(name, 0) + 1 if holds else 0
            if self.streaks[name] == self.patience:
                return f"{name}: {message} for {self.streaks[name]} consecutive logs"
        return None


PLOTS = {
    "loss.png": ("loss", ["loss", "ranking_loss"]),
    "lambda.png": ("regularization weight λ", ["lambda_q", "lambda_d"]),
    "nnz.png": ("average active dimensions", ["q_nnz", "d_nnz"]),
    "head_norm.png": ("head Frobenius norm", ["head_norm"]),
}


def write_plots(output: Path) -> list[Path]:
    """PNG curves from ``metrics.jsonl`` into ``plots/`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(output)
    if not records:
        return []
    folder = Path(output) / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    steps = [record["step"] for record in records]
    for name, (title, keys) in PLOTS.items():
        figure, axes = plt.subplots(figsize=(6, 3.5))
        for key in keys:
            axes.plot(steps, [record[key] for record in records], label=key)
        axes.set_xlabel("step")
        axes.set_title(title)
        axes.legend()
        figure.tight_layout()
        with atomic_file(folder / name, "wb") as stream:
            figure.savefig(stream, format="png")
        plt.close(figure)
        written.append(folder / name)
    return written
