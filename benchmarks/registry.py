"""The rows of docs/benchmarks.md's summary table, declared once: the script that measures each, its arguments, and
how the script's JSON becomes the table's cells.

Why a registry: the summary used to be filled by hand, row by row, from runs on different machines. With every row
declared here, ``python -m benchmarks`` (benchmarks/__main__.py) reruns them on one machine, records that machine,
and rewrites the table from the recorded results, so a row's numbers always come with the command and the hardware
that produced them.

A row's ``args`` are the measured sizes; its ``quick_args`` replace the values of the options they name (and add
the others) to shrink the run to a smoke test of seconds; a row without them has no quick form. Placeholders in
either: ``{output}``, the JSON file the script writes (a row without it has its stdout's JSON lines read instead);
``{scratch}``, a folder of the row's own, emptied before the run and removed after it; ``{shared}``, the offline
assets beside the repository (../shared).

Every parser takes the raw JSON (the script's file, or ``{"stdout_json": [one object per JSON line]}``) and returns
the cells; a missing key raises, and the runner reports the row as failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

Raw = dict[str, Any]


class Cells(NamedTuple):
    """What a row shows: spladekit's value, the anchor's value (the tool compared against, named), and the ratio
    (None where the row has no anchor it can run), also as text (several ratios may share one row)."""

    spladekit: str
    anchor: str
    ratio: float | None
    ratio_text: str


@dataclass(frozen=True)
class Row:
    """One summary row. ``replaces``: the beginnings of the hand-made rows' workload texts this row supersedes once it
    has a result (they stay in the "measured by hand" table until then). ``section``: a Markdown link to the part of
    docs/benchmarks.md that explains the measurement."""

    name: str
    workload: str
    hardware_kind: Literal["cpu", "gpu"]
    script: str
    args: tuple[str, ...]
    parse: Callable[[Raw], Cells]
    quick_args: tuple[str, ...] | None = None
    timeout_s: int = 3600
    section: str = ""
    replaces: tuple[str, ...] = ()

    @property
    def quick(self) -> bool:
        """Whether the row has a smoke-test form (``--quick``)."""
        return self.quick_args is not None

    @property
    def writes_output(self) -> bool:
        """Whether the script writes its JSON to ``{output}`` (else its stdout's JSON lines are read)."""
        return any("{output}" in argument for argument in self.args)

    def arguments(self, quick: bool) -> list[str]:
        """The script's arguments, placeholders unresolved; with ``quick``, each option ``quick_args`` names takes its
        value from there (in place, so the command reads as one set of options) and its other options follow."""
        if not quick or self.quick_args is None:
            return list(self.args)
        smaller = dict(option_groups(self.quick_args))
        kept = [(option, smaller.pop(option, values)) for option, values in option_groups(self.args)]
        return [token for option, values in [*kept, *smaller.items()] for token in (option, *values)]


def option_groups(arguments: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``--docs 10 --ranks 1 1 --quick`` → ``[("--docs", ("10",)), ("--ranks", ("1", "1")), ("--quick", ())]``: an
    option and the values up to the next option (registry arguments hold no positional ones)."""
    groups: list[tuple[str, list[str]]] = []
    for token in arguments:
        if token.startswith("--"):
            groups.append((token, []))
        elif groups:
            groups[-1][1].append(token)
        else:
            raise ValueError(f"registry arguments start with an option, not {token!r}")
    return [(option, tuple(values)) for option, values in groups]


# ----------------------------------------------------------------------------------------------- formatting
def times(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}×"


def span(values: Iterable[float], digits: int) -> str:
    """``a–b`` over several measurements (sparsity levels, shapes), one number where they agree at that precision."""
    shown = [f"{value:.{digits}f}" for value in sorted(values)]
    return shown[0] if shown[0] == shown[-1] else f"{shown[0]}–{shown[-1]}"


# ----------------------------------------------------------------------------------------------- parsers
def parse_search(raw: Raw) -> Cells:
    """search_bench.py --json: the first size's rows; exact with 1 thread against scipy's brute force."""
    rows = raw["rows"][0]
    exact = next(row for row in rows if row["method"] == "exact")
    brute = next(row for row in rows if row["method"].startswith("scipy brute force"))
    ratio = exact["qps_1"] / brute["qps_1"]
    return Cells(
        f"{exact['qps_1']:,.1f} queries/s",
        f"scipy brute force `D @ Qᵀ`: {brute['qps_1']:,.1f} queries/s",
        ratio,
        times(ratio, 1),
    )


def parse_encode_train(raw: Raw) -> Cells:
    """encode_train_bench.py --output: pooling auto and fused against sentence-transformers, encoding and training."""
    encode, train = raw["encode_docs_per_s"], raw["train_steps_per_s"]
    st_encode, st_train = encode["sentence-transformers"], train["sentence-transformers"]
    return Cells(
        f"{encode['auto']:.2f} / {encode['fused']:.2f} docs/s; {train['auto']:.2f} / {train['fused']:.2f} steps/s",
        f"sentence-transformers: {st_encode:.2f} docs/s; {st_train:.3f} steps/s",
        encode["auto"] / st_encode,
        f"{times(encode['auto'] / st_encode)} / {times(encode['fused'] / st_encode)}; "
        f"{times(train['auto'] / st_train, 1)} / {times(train['fused'] / st_train, 1)}",
    )


def parse_onnx(raw: Raw) -> Cells:
    """onnx_scifact.py --output: the fp32 and int8 graphs against spladekit's torch path."""
    speed = {row["encoder"]: row["docs_per_s"] for row in raw["rows"]}
    fp32, int8, torch_path = speed["onnx fp32"], speed["onnx int8"], speed["torch"]
    return Cells(
        f"{fp32:.1f} / {int8:.1f} docs/s",
        f"spladekit's torch path: {torch_path:.1f} docs/s",
        fp32 / torch_path,
        f"{times(fp32 / torch_path)} / {times(int8 / torch_path)}",
    )


REAL_INPUT_CONFIGS = ("ours:packed+checkpointing2", "ours:packed", "ours:1")


def parse_real_inputs(raw: Raw) -> Cells:
    """real_inputs.py --output: per configuration, the range over the sparsity levels; the headline ratio is the
    slowest level of packing + checkpointing 2 against sentence-transformers."""
    levels = [{row["config"]: row for row in level["rows"]} for level in raw["levels"]]
    st = next(config for config in levels[0] if config.startswith("st:"))  # st:1 (st:0 in older runs)

    def values(config: str, key: str) -> list[float]:
        return [level[config][key] for level in levels]

    ours = " / ".join(span(values(config, "steps_per_s"), 3) for config in REAL_INPUT_CONFIGS)
    ratios = " / ".join(
        f"{span(values(config, 'train_vs_st'), 2)}× at {span(values(config, 'memory_vs_st'), 2)}× peak RSS"
        for config in REAL_INPUT_CONFIGS
    )
    return Cells(
        f"{ours} steps/s",
        f"sentence-transformers: {span(values(st, 'steps_per_s'), 3)} steps/s",
        min(values(REAL_INPUT_CONFIGS[0], "train_vs_st")),
        ratios,
    )


def parse_training_memory(raw: Raw) -> Cells:
    """training_data_memory.py (stdout): the last run, the store already built by the first. Its anchor, the code
    before the store (287e797), is another checkout, which the registry does not build: no ratio."""
    last = raw["stdout_json"][-1]
    peaks = " / ".join(f"{mb:,} MB" for mb in last["peak_anon_mb_per_rank"])
    return Cells(f"{peaks} peak anonymous memory; first step after {last['seconds_to_first_step']} s", "—", None, "—")


def parse_precision(raw: Raw) -> Cells:
    """precision_bench.py --output: BERT-base's shape; spladekit bf16 and fp32 against sentence-transformers fp32
    (and under the same bf16 autocast)."""
    model = raw["models"]["bert-base"]
    speed = {name: row["docs_per_s"] for name, row in model["results"].items() if "docs_per_s" in row}
    ours_bf16, ours_fp32, st_fp32, st_bf16 = (speed[name] for name in ("ours-bf16", "ours-fp32", "st-fp32", "st-bf16"))
    return Cells(
        f"bf16 {ours_bf16:.1f} / fp32 {ours_fp32:.1f} docs/s",
        f"sentence-transformers fp32: {st_fp32:.1f} docs/s (under bf16 autocast: {st_bf16:.1f})",
        ours_bf16 / st_fp32,
        f"{times(ours_bf16 / st_fp32)} / {times(ours_fp32 / st_fp32)} ({times(ours_bf16 / st_bf16)} against "
        "sentence-transformers under autocast)",
    )


def gpu_bench_parser(task: str, ours: str, reference: str, memory: bool, anchor: str) -> Callable[[Raw], Cells]:
    """gpu_bench.py --output: ``ours`` against ``reference`` (shown as ``anchor``) for ``task`` on every shape run
    (shapes joined by " / "); ``memory``: the peak memory ratio too (the GPU's own counter; on the CPU a process's
    RSS is shared by every configuration it ran, so it is left out there)."""
    unit = "docs_per_s" if task == "encode" else "steps_per_s"
    label = unit.replace("_per_s", "/s")

    def parse(raw: Raw) -> Cells:
        runs = [shape[task] for shape in raw["results"].values()]
        speeds = [run[ours][unit] / run[reference][unit] for run in runs]
        text = f"{' / '.join(times(value) for value in speeds)} speed"
        if memory:
            peaks = [run[ours]["peak_mb"] / run[reference]["peak_mb"] for run in runs]
            text += f", {' / '.join(times(value) for value in peaks)} memory"
        return Cells(
            f"{' / '.join(f'{run[ours][unit]:.2f}' for run in runs)} {label}",
            f"{anchor}: {' / '.join(f'{run[reference][unit]:.2f}' for run in runs)} {label}",
            min(speeds),
            text,
        )

    return parse


# ----------------------------------------------------------------------------------------------- the rows
ST = "sentence-transformers `SparseEncoder`"
GPU_SIZES = ("--batch", "64", "--length", "256", "--output", "{output}")
GPU_QUICK = ("--batch", "4", "--length", "64", "--batches", "2", "--steps", "2")

ROWS: tuple[Row, ...] = (
    Row(
        name="exact-search-100k",
        workload="exact search, 100k synthetic documents, 1,000 queries, k = 10, 1 thread",
        hardware_kind="cpu",
        script="search_bench.py",
        args=("--docs", "100000", "--queries", "1000", "--slow-queries", "200", "--backends", "exact")
        + ("--baselines", "brute", "--json", "{output}"),
        quick_args=("--docs", "2000", "--queries", "50", "--slow-queries", "20", "--extrapolate-to", "2000"),
        timeout_s=1800,
        section="[Search](#search)",
        replaces=("exact search, 100k synthetic documents",),
        parse=parse_search,
    ),
    Row(
        name="encode-train-splade-tiny",
        workload="encode / train step, splade-tiny (trained), 512 SciFact documents / 8 triplets a step: pooling "
        "`auto` / `fused`",
        hardware_kind="cpu",
        script="encode_train_bench.py",
        args=("--parts", "encode,train", "--docs", "512", "--train-steps", "8")
        + (
            "--encode-configs",
            "sentence-transformers,fused,auto",
            "--train-configs",
            "sentence-transformers,fused,auto",
        )
        + ("--output", "{output}"),
        quick_args=("--docs", "16", "--batch-size", "8", "--max-length", "64", "--train-batch", "2")
        + ("--train-steps", "1"),
        section="[native bf16](#on-a-cpu-with-native-bf16-avx512-bf16-the-default-auto-2026-12-03)",
        replaces=("encode / train step, splade-tiny",),
        parse=parse_encode_train,
    ),
    Row(
        name="onnx-scifact",
        workload="encode, splade-tiny, SciFact documents, through the exported ONNX graph (fp32 / int8)",
        hardware_kind="cpu",
        script="onnx_scifact.py",
        args=("--model", "{shared}/models/splade-tiny-msmarco", "--data", "{shared}/data/scifact")
        + ("--output", "{output}"),
        quick_args=None,  # nDCG@10 on the whole collection, three times: minutes whatever --speed-docs says
        timeout_s=7200,
        section="[docs/export.md](export.md#onnx-the-sparse-vector-from-one-graph)",
        replaces=("encode, splade-tiny, SciFact documents, through the exported ONNX graph",),
        parse=parse_onnx,
    ),
    Row(
        name="real-inputs-bert-base",
        workload="train step, BERT-base (random init) at real MS MARCO lengths, 8 queries + 16 passages, fp32, three "
        "sparsity levels: `packing` + `activation_checkpointing` 2 / `packing` / padded",
        hardware_kind="cpu",
        script="real_inputs.py",
        args=("--active", "init,2000,200", "--length-groups", "packed+checkpointing2,packed,1", "--rounds", "1")
        + ("--output", "{output}"),
        # splade-tiny's config (2 layers) in place of BERT-base's, no calibration, one step: the same pipeline
        quick_args=("--backbone-files", "{shared}/models/splade-tiny-msmarco", "--active", "init", "--batch", "2")
        + ("--steps", "1", "--encode-docs", "8", "--max-length", "64"),
        timeout_s=7200,
        section="[Real inputs](#real-inputs-on-this-cpu-bert-base-ms-marco-lengths-three-sparsity-levels)",
        replaces=("train step, BERT-base (random init) at real MS MARCO lengths",),
        parse=parse_real_inputs,
    ),
    Row(
        name="training-data-memory",
        workload="training data per rank, 4M passages + 40M teacher pairs (MS MARCO shape), `spladekit train`, "
        "1 rank, the store already built: peak anonymous memory",
        hardware_kind="cpu",
        script="training_data_memory.py",
        # two runs: the first builds the training-data store, the second (the one reported) reads it
        args=("--work", "{scratch}", "--passages", "4000000", "--pairs", "40000000", "--ranks", "1", "1"),
        quick_args=("--passages", "1000", "--pairs", "10000", "--ranks", "1"),
        timeout_s=3 * 3600,
        section="[Training-data memory](#training-data-memory-at-ms-marco-shape)",
        replaces=(),  # the hand-made row compares with the code before the store: it stays
        parse=parse_training_memory,
    ),
    Row(
        name="precision-bert-base",
        workload="encode, BERT-base shape (random init, bias set for ~200 terms a passage), 64 MS MARCO passages, "
        "batch 32: `--precision bf16` / fp32",
        hardware_kind="cpu",
        script="precision_bench.py",
        args=("--models", "bert-base", "--configs", "st-fp32,st-bf16,ours-fp32,ours-bf16", "--docs", "64")
        + ("--queries", "32", "--rounds", "3", "--output", "{output}"),
        quick_args=("--quick", "--no-memory", "--backbone-files", "{shared}/models/splade-tiny-msmarco"),
        timeout_s=3600,
        section="[Precision](#precision-on-this-cpu-fp32-bf16-int8-onnx-issue-45)",
        parse=parse_precision,
    ),
    Row(
        name="cpu-encode-bert-base",
        workload="encode, BERT-base (random init), 8 × 256 tokens (random ids), fp32",
        hardware_kind="cpu",
        script="gpu_bench.py",
        args=("--device", "cpu", "--shapes", "bert-base", "--tasks", "encode")
        + ("--configs", "sentence-transformers,fused", "--batch", "8", "--length", "256", "--batches", "2")
        + ("--output", "{output}"),
        quick_args=("--batch", "2", "--length", "32", "--batches", "1"),
        section="[Base size on this CPU](#base-size-on-this-cpu)",
        replaces=("encode, BERT-base (random init), 8 × 256 tokens",),
        parse=gpu_bench_parser("encode", "fused", "sentence-transformers", memory=False, anchor=ST),
    ),
    Row(
        name="gpu-encode-fp32",
        workload="encode, BERT-base / ModernBERT-base (random init), 64 × 256 tokens, fp32",
        hardware_kind="gpu",
        script="gpu_bench.py",
        args=("--device", "cuda", "--tasks", "encode", "--configs", "sentence-transformers,fused", *GPU_SIZES),
        quick_args=GPU_QUICK,
        section="[GPU](#gpu)",
        replaces=(
            "encode, BERT-base (random init), 64 × 256 tokens, fp32",
            "encode, ModernBERT-base (random init), same batch, fp32",
            "peak GPU memory, both backbones",
        ),
        parse=gpu_bench_parser("encode", "fused", "sentence-transformers", memory=True, anchor=ST),
    ),
    Row(
        name="gpu-train-fp32",
        workload="train step, BERT-base / ModernBERT-base (random init), 64 queries + 128 passages of 256 tokens, fp32",
        hardware_kind="gpu",
        script="gpu_bench.py",
        args=("--device", "cuda", "--tasks", "train", "--configs", "sentence-transformers,fused", *GPU_SIZES),
        quick_args=GPU_QUICK,
        section="[GPU](#gpu)",
        replaces=("train step, BERT-base / ModernBERT-base, fp32",),
        parse=gpu_bench_parser("train", "fused", "sentence-transformers", memory=True, anchor=ST),
    ),
    Row(
        name="gpu-train-bf16",
        workload="train step, BERT-base / ModernBERT-base (random init), same batch, bf16 autocast",
        hardware_kind="gpu",
        script="gpu_bench.py",
        args=("--device", "cuda", "--tasks", "train")
        + ("--configs", "sentence-transformers+autocast,fused+autocast", *GPU_SIZES),
        quick_args=GPU_QUICK,
        section="[GPU](#gpu)",
        replaces=("train step, BERT-base / ModernBERT-base, bf16 autocast",),
        parse=gpu_bench_parser(
            "train",
            "fused+autocast",
            "sentence-transformers+autocast",
            memory=True,
            anchor=f"{ST} under the same autocast",
        ),
    ),
)
