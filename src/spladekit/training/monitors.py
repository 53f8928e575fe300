"""What a run shows while it trains: ``metrics.jsonl``, a collapse detector, and the final plots.

``metrics.jsonl`` holds one JSON object per logged step: ``step``, ``loss`` (total), ``ranking_loss``,
``reg_q`` / ``reg_d`` (the regularizer values), ``flops_q`` / ``flops_d`` (FLOPS of the batch, whatever
the regularizer), ``lambda_q`` / ``lambda_d``, ``q_nnz`` / ``d_nnz`` (average active dimensions),
``head_norm`` (Frobenius norm of the vocabulary projection), ``grad_norm`` (before clipping), ``lr`` —
each the logged step's own value —, ``loss_mean`` / ``ranking_loss_mean`` (means over the steps since the
previous record, or since the resume), ``examples_per_s`` and ``tokens_per_s`` (over those steps; real,
non-padding tokens through this process's backbone); for the collapse detector ``uniform_loss`` (the ranking loss
when every candidate
scores the same: ``ln(candidates)`` for InfoNCE, absent for distillation), ``score_spread`` (mean over
queries of the standard deviation of their in-batch candidate scores), ``doc_similarity`` (mean cosine
between different documents of the batch), and ``collapse`` (the shape's name) on the log where one is
declared.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from spladekit.common.atomic import atomic_file
from spladekit.common.errors import InputError
from spladekit.common.lines import expect

logger = logging.getLogger("spladekit")

METRICS_FILE = "metrics.jsonl"
EVALUATION_FILE = "evaluation.jsonl"  # one object per evaluation: step + the results of spladekit.evaluation.evaluate


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


# |ranking loss / loss of equal scores − 1| under this, for `collapse_patience` logs = uniform collapse. On the 34
# committed mini-reproduction runs (docs/results/mini-repro*/runs, InfoNCE, 9 candidates, a log every 10 steps)
# it fires at step 50 on the two uniform collapses (tiny k16 tied, MiniLM k64 tied: loss within 0.3 % of ln 9
# for 20 logs) and never on the 32 others (their longest streak within 2 %: 2 logs).
UNIFORM_TOLERANCE = 0.02


@dataclass
class CollapseDetector:
    """Flags the three collapse shapes of SPLADE training (Jang et al., arXiv:2606.18811), by name:

    * uniform: every candidate scores the same, so the ranking loss sits at its equal-score value
      (InfoNCE: ``ln(candidates)``; ``uniform_loss`` in the record) — over-rescaled heads;
    * everything active: more than half of the vocabulary active (no sparsity, scores inflated);
    * vanishing: average active dimensions of queries or documents below 1 (everything pruned);
    * explosion: loss above ``explosion_factor`` × the larger of its lowest logged value and its equal-score
      value (``uniform_loss``, when the loss has one): a ranking loss far *worse than chance*. The chance floor
      keeps a healthy run whose single-batch loss once dipped to ~0 (a lowest of 5e-4 made a later 0.005 an
      "explosion") from being flagged.

    A condition must hold for ``patience`` consecutive logs to count; ``update`` returns ``(shape,
    message)`` the first time it does (once per episode: the condition must clear before it is reported again).
    """

    vocab_size: int
    patience: int = 5
    explosion_factor: float = 10.0
    uniform_tolerance: float = UNIFORM_TOLERANCE
    lowest_loss: float = math.inf
    streaks: dict = field(default_factory=dict)

    def update(self, record: dict) -> tuple[str, str] | None:
        nnz = min(record["q_nnz"], record["d_nnz"]), max(record["q_nnz"], record["d_nnz"])
        equal_scores = record.get("uniform_loss")
        uniform = bool(equal_scores) and abs(record["ranking_loss"] / equal_scores - 1) < self.uniform_tolerance
        reference = max(self.lowest_loss, equal_scores or 0.0)
        conditions = {
            "uniform": (
                uniform,
                lambda: (
                    f"ranking loss {record['ranking_loss']:.4f} ≈ {equal_scores:.4f}, its value when "
                    f"every candidate scores the same (score spread {record.get('score_spread', math.nan):.3g}, "
                    f"document cosine {record.get('doc_similarity', math.nan):.3f})"
                ),
            ),
            "everything active": (
                nnz[1] > self.vocab_size / 2,
                lambda: f"{nnz[1]:.0f} of {self.vocab_size} dimensions active (> 50 % of the vocabulary)",
            ),
            "vanishing": (nnz[0] < 1, lambda: f"average active dimensions fell to {nnz[0]:.2f}"),
            "explosion": (
                record["loss"] > self.explosion_factor * reference and record["loss"] > 0,
                lambda: (
                    f"loss {record['loss']:.4g} > {self.explosion_factor:g} × {reference:.4g} (the larger "
                    "of its lowest logged value and its equal-score value)"
                ),
            ),
        }
        self.lowest_loss = min(self.lowest_loss, record["loss"])
        found = None
        for name, (holds, message) in conditions.items():
            self.streaks[name] = self.streaks.get(name, 0) + 1 if holds else 0
            if self.streaks[name] == self.patience and found is None:
                found = (name, f"{name} collapse: {message()} for {self.streaks[name]} consecutive logs")
        return found


# file → (title, keys); the loss curves are window means (a single batch's loss is noisy), steps for older logs
LOSS_FALLBACK = {"loss_mean": "loss", "ranking_loss_mean": "ranking_loss"}
PLOTS = {
    "loss.png": ("loss (mean of each logging window)", ["loss_mean", "ranking_loss_mean"]),
    "lambda.png": ("regularization weight λ", ["lambda_q", "lambda_d"]),
    "nnz.png": ("average active dimensions", ["q_nnz", "d_nnz"]),
    "head_norm.png": ("head Frobenius norm", ["head_norm"]),
    "norms.png": ("median / mean row norms", ["head_mean_row_norm", "word_norm", "position_norm"]),
    "bias.png": ("vocabulary bias", ["bias_mean", "bias_std"]),
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
        # a key absent or null in every record (a model without bias or position table, an older log) is left out
        present = [key for key in keys if any(record.get(key) is not None for record in records)]
        keys = present or [LOSS_FALLBACK[key] for key in keys if key in LOSS_FALLBACK]
        if not keys:
            continue
        figure, axes = plt.subplots(figsize=(6, 3.5))
        for key in keys:
            axes.plot(steps, [math.nan if record.get(key) is None else record[key] for record in records], label=key)
        axes.set_xlabel("step")
        axes.set_title(title)
        axes.legend()
        figure.tight_layout()
        with atomic_file(folder / name, "wb") as stream:
            figure.savefig(stream, format="png")
        plt.close(figure)
        written.append(folder / name)
    return written


def write_comparison_plot(runs: dict[str, Path], target: Path) -> Path | None:
    """One PNG of the loss and the document sparsity (active terms) of several training runs against the step, each
    run one line (``runs``: label → run folder with ``metrics.jsonl``); None when no run logged anything."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logged = {label: read_metrics(folder) for label, folder in runs.items()}
    if not any(logged.values()):
        return None
    figure, (loss_axes, nnz_axes) = plt.subplots(1, 2, figsize=(10, 3.5))
    for label, records in logged.items():
        steps = [record["step"] for record in records]
        loss_axes.plot(steps, [record.get("loss", math.nan) for record in records], label=label)
        nnz_axes.plot(steps, [record.get("d_nnz", math.nan) for record in records], label=label)
    loss_axes.set(xlabel="step", title="training loss")
    nnz_axes.set(xlabel="step", title="active terms per document", yscale="log")
    loss_axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    with atomic_file(target, "wb") as stream:
        figure.savefig(stream, format="png")
    plt.close(figure)
    return target
