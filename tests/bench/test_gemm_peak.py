"""benchmarks/gemm_peak.py: its FLOP formula agrees with torch's own FLOP counter on a real (tiny, random) BERT masked
LM, and its fractions divide a configuration's useful rate by the peak of that configuration's precision."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
gemm_peak = importlib.import_module("benchmarks.gemm_peak")


@pytest.mark.parametrize("tokens", [1, 7, 33])
def test_the_formula_counts_what_torch_counts_for_a_bert_forward(tokens):
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=997, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4
    )
    config._attn_implementation = "eager"  # attention as matmuls, which the counter sees (not a fused SDPA kernel)
    model = BertForMaskedLM(config).eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=torch.randint(0, 997, (1, tokens)))
    assert gemm_peak.forward_flops(config.to_dict(), tokens) == counter.get_total_flops()


def test_each_configuration_is_measured_against_its_own_precision():
    work = {"splade-tiny": {"mean_tokens": 10.0, "gflops_per_doc": 2.0}}
    bench = {
        "settings": {},
        "models": {
            "splade-tiny": {
                "results": {
                    "st-fp32": {"docs_per_s": 10.0},
                    "ours-bf16": {"docs_per_s": 30.0},
                    "ours-int8": {"docs_per_s": 40.0},
                    "fastembed": {"skipped": "not installed"},
                }
            }
        },
    }
    peaks = {"fp32": 100.0, "bf16": 200.0, "int8": 400.0}
    report = gemm_peak.fractions(bench, peaks, work)["splade-tiny"]["configs"]
    assert set(report) == {"st-fp32", "ours-bf16", "ours-int8"}
    assert report["st-fp32"]["fraction_of_peak"] == pytest.approx(20.0 / 100.0)
    assert report["ours-bf16"]["fraction_of_peak"] == pytest.approx(60.0 / 200.0)
    assert report["ours-int8"]["fraction_of_peak"] == pytest.approx(80.0 / 400.0)


def test_a_registry_results_file_gives_its_precision_bench_runs():
    run = {"settings": {"docs": 4}, "models": {}}
    results = {"rows": {"precision-bert-base": {"raw": run}, "exact-search-100k": {"raw": {"rows": []}}}}
    assert gemm_peak.precision_runs(results) == [run]
    assert gemm_peak.precision_runs(run) == [run]


def test_every_precision_bench_configuration_has_a_precision():
    precision_bench = importlib.import_module("benchmarks.precision_bench")
    assert set(gemm_peak.PRECISION_OF) == set(precision_bench.CONFIGS)
    assert set(gemm_peak.PRECISION_OF.values()) == {"fp32", "bf16", "int8"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [("{not json", "not a precision_bench result"), ('{"rows": {}}', "holds no precision_bench run")],
)
def test_a_bad_input_ends_in_one_line_before_any_timing(tmp_path, content, expected):
    import subprocess

    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gemm_peak.py"), "--precision-bench", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and expected in done.stderr and "Traceback" not in done.stderr
    assert "GEMM peak" not in done.stdout  # nothing was timed
