"""The training loop on a tiny BERT and synthetic topical triplets: learning, sparsity, exact gradient
accumulation, head rescaling at init, NaN stop, collapse stop, resume after kill -9."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from safetensors.torch import load_file
from torch.optim.optimizer import register_optimizer_step_post_hook

from collection_files import write_beir
from spladekit import SparseEncoder
from spladekit.common.atomic import OUTPUT_MARK, mark_output
from spladekit.common.errors import SpladekitError
from spladekit.data.collections import load_collection
from spladekit.evaluation.evaluate import evaluate
from spladekit.model.backbone import MLMHead
from spladekit.model.diagnosis import HeadReport, diagnose, step0_warnings
from spladekit.model.loading import load_model
from spladekit.training import TrainingStopped, loop, train
from spladekit.training.checkpoint import checkpoints
from spladekit.training.config import OptimizationConfig
from spladekit.training.monitors import CollapseDetector, read_metrics
from spladekit.training.setup import parameter_groups
from tiny_models import build_tiny_model
from train_helpers import TINY_BERT, TRIPLETS, tiny_config, write_triplets

LEARN = {"optimization": {"steps": 20, "batch_size": 8, "lr": 3e-3, "warmup_steps": 2}}

tiny_bert_fixture, triplets_fixture = TINY_BERT, TRIPLETS


@pytest.fixture(scope="module")
def unregularized(tiny_bert, triplets_file, tmp_path_factory):
    output = tmp_path_factory.mktemp("run") / "plain"
    train(tiny_config(tiny_bert, triplets_file, **LEARN, regularizer={"lambda_q": 0.0, "lambda_d": 0.0}), output)
    return output


def mean(values):
    return sum(values) / len(values)


def test_run_folder_holds_the_contract(unregularized):
    assert {p.name for p in unregularized.iterdir()} >= {"model", "metrics.jsonl", "config.yaml", "checkpoints"}
    records = read_metrics(unregularized)
    assert [r["step"] for r in records] == list(range(1, 21))
    expected = {
        "step",
        "loss",
        "ranking_loss",
        "flops_q",
        "flops_d",
        "lambda_q",
        "lambda_d",
        "q_nnz",
        "d_nnz",
        "head_norm",
        "grad_norm",
        "lr",
        "examples_per_s",
        "tokens_per_s",
        "loss_mean",
        "ranking_loss_mean",
    }
    assert expected <= records[0].keys()
    assert all(r["tokens_per_s"] > r["examples_per_s"] > 0 for r in records)  # a text is several tokens
    encoder = SparseEncoder.from_pretrained(unregularized / "model")
    assert encoder.encode(["paris is the capital"], show_progress=False).nnz > 0


def test_logged_norms_are_those_of_the_weights_after_the_update(unregularized):
    from spladekit.model.head import embedding_norms, head_norms

    last = read_metrics(unregularized)[-1]
    model = SparseEncoder.from_pretrained(unregularized / "model").model
    head = head_norms(model)
    assert last["head_mean_row_norm"] == pytest.approx(head["mean_row_norm"], rel=1e-6)
    assert (last["bias_mean"], last["bias_std"]) == pytest.approx((head["bias_mean"], head["bias_std"]), rel=1e-5)
    norms = embedding_norms(model)
    assert (last["word_norm"], last["position_norm"]) == pytest.approx(
        (norms["word_norm"], norms["position_norm"]), rel=1e-6
    )
    first = read_metrics(unregularized)[0]
    assert first["word_norm"] != last["word_norm"]  # training moved the word table (tied: the head too)


def test_loss_decreases(unregularized):
    losses = [r["ranking_loss"] for r in read_metrics(unregularized)]
    assert mean(losses[-4:]) < mean(losses[:4]) - 0.2


def test_flops_lowers_nnz_as_lambda_ramps_up(tiny_bert, triplets_file, unregularized, tmp_path):
    config = tiny_config(
        tiny_bert, triplets_file, **LEARN, regularizer={"lambda_q": 0.1, "lambda_d": 0.1, "warmup_steps": 10}
    )
    records = read_metrics(train(config, tmp_path / "flops").output)
    plain = read_metrics(unregularized)
    assert [r["lambda_d"] for r in records[:3]] == pytest.approx([0.1 * (t / 10) ** 2 for t in (1, 2, 3)])
    assert records[-1]["lambda_d"] == pytest.approx(0.1)
    assert records[-1]["d_nnz"] < 0.6 * records[0]["d_nnz"]
    assert records[-1]["d_nnz"] < 0.6 * plain[-1]["d_nnz"] and records[-1]["q_nnz"] < plain[-1]["q_nnz"]


@pytest.mark.parametrize("loss", ["margin_mse", "kl"])
def test_distillation_from_teacher_scores(tiny_bert, triplets_file, tmp_path, loss):
    rows = [line.split("\t") for line in triplets_file.read_text().splitlines()]
    (tmp_path / "queries.tsv").write_text("".join(f"q{i}\t{row[0]}\n" for i, row in enumerate(rows)))
    (tmp_path / "docs.tsv").write_text("".join(f"p{i}\t{row[1]}\nn{i}\t{row[2]}\n" for i, row in enumerate(rows)))
    (tmp_path / "ids.tsv").write_text("".join(f"q{i}\tp{i}\tn{i}\n" for i in range(len(rows))))
    (tmp_path / "teacher.jsonl").write_text(
        "".join(
            json.dumps({"qid": f"q{i}", "pid": f"{kind}{i}", "score": score}) + "\n"
            for i in range(len(rows))
            for kind, score in (("p", 6.0), ("n", 1.0))
        )
    )
    data = {
        "format": "id_triplets",
        "path": str(tmp_path / "ids.tsv"),
        "queries": str(tmp_path / "queries.tsv"),
        "collection": str(tmp_path / "docs.tsv"),
        "teacher": str(tmp_path / "teacher.jsonl"),
    }
    config = tiny_config(
        tiny_bert,
        triplets_file,
        data=data,
        loss={"name": loss},
        **LEARN,
        regularizer={"lambda_q": 0.0, "lambda_d": 0.0},
    )
    losses = [r["ranking_loss"] for r in read_metrics(train(config, tmp_path / "run").output)]
    assert mean(losses[-4:]) < 0.7 * mean(losses[:4])


def test_bf16_autocast_trains(tiny_bert, triplets_file, tmp_path):
    runs = [
        read_metrics(
            train(
                tiny_config(tiny_bert, triplets_file, optimization={"steps": 2, "bf16": bf16}),
                tmp_path / f"bf16-{bf16}",
            ).output
        )
        for bf16 in (False, True)
    ]
    assert all(math.isfinite(r["loss"]) for r in runs[1])
    assert (
        runs[1][0]["loss"] == pytest.approx(runs[0][0]["loss"], rel=0.05) and runs[1][0]["loss"] != runs[0][0]["loss"]
    )


@pytest.mark.parametrize("regularizer", ["flops", "df_flops"])
def test_gradient_accumulation_is_exact(tiny_bert, triplets_file, tmp_path, regularizer):
    """Accumulating 2 micro-batches (cached representations) = one batch: same losses, same weights."""
    runs = {}
    for accumulation in (1, 2):
        config = tiny_config(
            tiny_bert,
            triplets_file,
            optimization={"steps": 3, "accumulation": accumulation},
            regularizer={"name": regularizer, "lambda_q": 0.05, "lambda_d": 0.05, "warmup_steps": 0},
        )
        runs[accumulation] = train(config, tmp_path / f"acc{accumulation}").output
    one, two = (read_metrics(runs[a]) for a in (1, 2))
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], abs=1e-5)
    assert [r["grad_norm"] for r in two] == pytest.approx([r["grad_norm"] for r in one], rel=1e-4)
    weights = [load_file(runs[a] / "model" / "model.safetensors") for a in (1, 2)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)


LAYOUTS = {"padded": {}, "groups": {"length_groups": 3}, "packed": {"packing": True}}


def test_length_groups_and_packing_train_the_same_model(tiny_bert, triplets_file, tmp_path):
    """optimization.length_groups (each side of the batch cut by length into padded groups) and
    optimization.packing (texts packed into rows) = one padded batch: same losses, same gradient norms, same
    weights (with accumulation, whose cache replays the groups and rows too)."""
    runs = {}
    for layout, accumulation in (("padded", 1), ("groups", 1), ("groups", 2), ("packed", 1), ("packed", 2)):
        config = tiny_config(
            tiny_bert,
            triplets_file,
            optimization={"steps": 3, "accumulation": accumulation, **LAYOUTS[layout]},
            regularizer={"lambda_q": 0.05, "lambda_d": 0.05, "warmup_steps": 0},
        )
        runs[layout, accumulation] = train(config, tmp_path / f"{layout}{accumulation}").output
    one = read_metrics(runs["padded", 1])
    for key in (("groups", 1), ("groups", 2), ("packed", 1), ("packed", 2)):
        other = read_metrics(runs[key])
        assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in one], abs=1e-5)
        assert [r["grad_norm"] for r in other] == pytest.approx([r["grad_norm"] for r in one], rel=1e-4)
        # the same real tokens counted: equal ratio of tokens/s to examples/s
        ratios = [[r["tokens_per_s"] / r["examples_per_s"] for r in run] for run in (other, one)]
        assert ratios[0] == pytest.approx(ratios[1], rel=1e-9)
        weights = [load_file(runs[k] / "model" / "model.safetensors") for k in (("padded", 1), key)]
        for name, tensor in weights[0].items():
            torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["fused-adaptive", "triton", "fused-bf16"])
def test_the_head_implementations_train_the_same_model(pooling, tiny_bert, triplets_file, tmp_path):
    """optimization.pooling changes how the head computes, not what: the same losses, gradient norms and weights as
    the fp32 fused head (fused-adaptive: dense GEMMs for dense vocabulary blocks; triton: its kernels, here
    through Triton's interpreter; fused-bf16: the bf16 screen that auto runs on CPUs with native bf16)."""
    runs = {}
    for name in ("fused", pooling):
        config = tiny_config(
            tiny_bert,
            triplets_file,
            optimization={"steps": 3, "pooling": name},
            regularizer={"lambda_q": 0.05, "lambda_d": 0.05, "warmup_steps": 0},
        )
        runs[name] = train(config, tmp_path / name).output
    one, other = (read_metrics(runs[name]) for name in ("fused", pooling))
    assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in one], abs=1e-5)
    assert [r["grad_norm"] for r in other] == pytest.approx([r["grad_norm"] for r in one], rel=1e-4)
    weights = [load_file(runs[name] / "model" / "model.safetensors") for name in ("fused", pooling)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)


def test_a_head_that_cannot_run_on_the_device_is_refused_before_any_work(
    tiny_bert, triplets_file, tmp_path, monkeypatch
):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the CPU without Triton's interpreter
    config = tiny_config(tiny_bert, triplets_file, optimization={"pooling": "triton"})
    monkeypatch.setattr(loop, "load_training_set", lambda *_: pytest.fail("the data was read before the refusal"))
    with pytest.raises(SpladekitError, match=r"^optimization\.pooling: .*triton.*cpu"):
        train(config, tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_compiled_backbone_trains_the_same_model(tiny_bert, triplets_file, tmp_path):
    """optimization.compile (torch.compile of the backbone) computes the same model up to float rounding."""
    runs = {}
    for compiled in (False, True):
        config = tiny_config(
            tiny_bert,
            triplets_file,
            optimization={"steps": 3, "compile": compiled},
            regularizer={"lambda_q": 0.05, "lambda_d": 0.05, "warmup_steps": 0},
        )
        runs[compiled] = train(config, tmp_path / str(compiled)).output
    one, other = (read_metrics(runs[compiled]) for compiled in (False, True))
    assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in one], abs=1e-5)
    assert [r["grad_norm"] for r in other] == pytest.approx([r["grad_norm"] for r in one], rel=1e-4)
    weights = [load_file(runs[compiled] / "model" / "model.safetensors") for compiled in (False, True)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)


def test_activation_checkpointing_trains_the_same_model(tiny_bert, triplets_file, tmp_path, monkeypatch):
    """optimization.activation_checkpointing recomputes the layers in the backward with their dropout masks
    replayed: with dropout on, the same losses, gradient norms and weights as keeping the activations (with
    accumulation too, whose cache replays the forward again); and the layers are checkpointed."""
    from transformers.models.bert import modeling_bert

    calls = {}
    attention_forward = modeling_bert.BertAttention.forward  # inside the layer: BertLayer's own wrapper stays

    def counted(self, *args, **kwargs):  # a checkpointed layer runs again in the backward
        calls[current] = calls.get(current, 0) + 1
        return attention_forward(self, *args, **kwargs)

    monkeypatch.setattr(modeling_bert.BertAttention, "forward", counted)
    runs = {}
    for every, accumulation in ((0, 1), (1, 1), (0, 2), (2, 2)):
        current = every, accumulation
        config = tiny_config(
            tiny_bert,
            triplets_file,
            backbone={"id": str(tiny_bert), "dropout": True},
            optimization={"steps": 3, "accumulation": accumulation, "activation_checkpointing": every},
        )
        runs[current] = train(config, tmp_path / f"c{every}a{accumulation}").output
    assert calls[1, 1] - calls[0, 1] == 3 * 2 * 2  # each of 3 steps recomputes both sides' 2 layers once
    assert calls[2, 2] > calls[0, 2]  # every second layer, in each micro-batch's pass with gradients
    for checkpointed, kept in (((1, 1), (0, 1)), ((2, 2), (0, 2))):  # dropout draws depend on the micro-batches
        other, one = read_metrics(runs[checkpointed]), read_metrics(runs[kept])
        assert [r["loss"] for r in other] == pytest.approx([r["loss"] for r in one], abs=1e-5)
        assert [r["grad_norm"] for r in other] == pytest.approx([r["grad_norm"] for r in one], rel=1e-4)
        weights = [load_file(runs[k] / "model" / "model.safetensors") for k in (kept, checkpointed)]
        for name, tensor in weights[0].items():
            torch.testing.assert_close(weights[1][name], tensor, atol=1e-5, rtol=1e-4)


def test_a_backbone_without_activation_checkpointing_is_refused_before_any_work(
    tiny_model_dirs, triplets_file, tmp_path
):
    """ALBERT cannot checkpoint its (shared) layers: one error naming it, and the run being replaced is untouched."""
    output = tmp_path / "run"
    output.mkdir()
    (output / "keep.txt").write_text("an earlier run")
    mark_output(output)
    config = tiny_config(
        tiny_model_dirs["albert"],
        triplets_file,
        backbone={"id": str(tiny_model_dirs["albert"]), "dropout": True},
        optimization={"activation_checkpointing": 1},
    )
    with pytest.raises(SpladekitError, match="optimization.activation_checkpointing: AlbertForMaskedLM does not"):
        train(config, output, overwrite=True)
    assert (output / "keep.txt").read_text() == "an earlier run"


def test_packing_a_backbone_that_cannot_pack_warns_and_trains_padded(tiny_model_dirs, triplets_file, tmp_path, caplog):
    gte = tiny_model_dirs["gte"]
    config = tiny_config(
        gte,
        triplets_file,
        backbone={"id": str(gte), "dropout": False, "trust_remote_code": True},
        optimization={"steps": 1, "packing": True},
    )
    with caplog.at_level("WARNING", logger="spladekit"):
        train(config, tmp_path / "run")
    warning = "optimization.packing: gte_standin (eager attention) cannot pack; training runs padded batches"
    assert warning in caplog.text


def test_k_is_applied_once_at_init_and_recorded(tiny_bert, triplets_file, tmp_path):
    config = tiny_config(
        tiny_bert,
        triplets_file,
        rescale={"k": 4},
        optimization={"steps": 4, "lr": 1e-12},
        logging={"checkpoint_every": 2},
    )
    output = train(config, tmp_path / "k4").output
    original = MLMHead.of(SparseEncoder.from_pretrained(tiny_bert).model).projection.weight
    for folder in (output / "model", checkpoints(output)[-1] / "model"):
        trained = SparseEncoder.from_pretrained(folder)
        assert json.loads((folder / "spladekit.json").read_text())["rescale"]["k"] == 4.0
        # lr ~ 0: the head is the original / 4, not / 16 (applied once, also through the checkpoint)
        torch.testing.assert_close(MLMHead.of(trained.model).projection.weight, original / 4, atol=1e-6, rtol=1e-5)
    assert yaml.safe_load((output / "config.yaml").read_text())["rescale"]["k"] == 4.0


def test_auto_k_resolves_to_a_number_logged_and_recorded(triplets_file, tmp_path, caplog):
    inflated = build_tiny_model("bert", tmp_path / "inflated", head_scale=16.0)
    config = tiny_config(inflated, triplets_file, rescale={"k": "auto", "auto_pairs": 8}, optimization={"steps": 1})
    with caplog.at_level(logging.INFO, logger="spladekit"):
        run = train(config, tmp_path / "auto")
    output = run.output
    encoder = SparseEncoder.from_pretrained(inflated)
    groups = [line.split("\t") for line in triplets_file.read_text().splitlines()[:8]]
    expected = diagnose(encoder, [(q, p) for q, p, *_ in groups], max_length=16).recommended_k
    assert expected > 1  # the inflated head needs rescaling
    saved = yaml.safe_load((output / "config.yaml").read_text())
    assert saved["rescale"]["k"] == expected and (output / "config.yaml").read_text().startswith(
        "# rescale.k was 'auto'"
    )
    assert json.loads((output / "model" / "spladekit.json").read_text())["rescale"]["k"] == expected
    assert f"rescale.k: auto resolved to {expected:g}" in caplog.text
    assert config.rescale.k == "auto"  # the caller's config is not modified; the resolved one is returned
    assert run.config.rescale.k == expected and run.rescale.k == expected and run.rescale.auto == ("k",)


@pytest.mark.parametrize("decay_embeddings", [True, False])
def test_no_weight_decay_on_biases_and_layernorm_and_embeddings_by_choice(tiny_bert, decay_embeddings):
    encoder = SparseEncoder.from_pretrained(tiny_bert)
    settings = OptimizationConfig(weight_decay=0.01, decay_embeddings=decay_embeddings)
    decay, no_decay = parameter_groups(encoder, settings)
    named = dict(encoder.named_parameters())
    assert sorted(map(id, decay["params"] + no_decay["params"])) == sorted(map(id, named.values()))
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    exempt = {name for name, parameter in named.items() if any(parameter is p for p in no_decay["params"])}
    assert {name for name in named if name.endswith("bias") or "LayerNorm" in name} <= exempt
    embeddings = encoder.model.get_input_embeddings().weight  # tied: also the vocabulary projection
    assert any(embeddings is p for p in decay["params"]) == decay_embeddings


@pytest.mark.parametrize("k, expected", [(4.0, "tied"), (64.0, "untie")])
def test_auto_mode_unties_when_tied_rescaling_would_let_positions_dominate(k, expected, triplets_file, tmp_path):
    from spladekit.model.head import word_position_ratio

    inflated = build_tiny_model("bert", tmp_path / "inflated", head_scale=16.0)  # tied: inputs ×16 too
    ratio = word_position_ratio(SparseEncoder.from_pretrained(inflated).model)
    assert 4 < ratio < 64  # so k = 4 keeps words above positions, k = 64 does not
    config = tiny_config(inflated, triplets_file, rescale={"k": k, "mode": "auto"}, optimization={"steps": 1})
    output = train(config, tmp_path / "auto-mode").output
    text = (output / "config.yaml").read_text()
    assert yaml.safe_load(text)["rescale"]["mode"] == expected and text.startswith("# rescale.mode was 'auto'")
    assert json.loads((output / "model" / "spladekit.json").read_text())["rescale"]["mode"] == expected


def test_evaluation_hook_calls_evaluate_and_leaves_training_unchanged(tiny_bert, triplets_file, tmp_path):
    plain = train(tiny_config(tiny_bert, triplets_file), tmp_path / "plain").output
    collection = write_beir(tmp_path / "collection")
    evaluation = {"data": str(collection), "every": 4, "max_active_dims": 2}
    evaluated = train(tiny_config(tiny_bert, triplets_file, evaluation=evaluation), tmp_path / "evaluated").output
    results = read_metrics(evaluated, "evaluation.jsonl")
    assert [r["step"] for r in results] == [4, 6]
    assert all(r["queries"] == 4 for r in results)
    # the last record is the final model's evaluation, as a separate evaluate() of the saved model computes it
    final = evaluate(
        load_model(str(evaluated / "model")),
        load_collection(collection, "test"),
        max_length=16,
        max_active_dims=2,
        cache=False,
        show_progress=False,
    )
    assert results[-1]["nDCG@10"] == pytest.approx(final.metrics["nDCG@10"])
    assert all(r["max_active_dims"] == 2 and r["avg_d_nnz"] <= 2 and r["avg_q_nnz"] <= 2 for r in results)
    assert without_timing(read_metrics(evaluated)) == without_timing(read_metrics(plain))


def test_a_log_record_holds_the_mean_of_its_window(tiny_bert, triplets_file, tmp_path):
    """Logging every 3 steps gives the loss of the third step and the mean of the three (what the plots
    show), the same numbers a run logging every step writes step by step."""
    every_step = read_metrics(train(tiny_config(tiny_bert, triplets_file), tmp_path / "one").output)
    windows = read_metrics(
        train(tiny_config(tiny_bert, triplets_file, logging={"every": 3}), tmp_path / "three").output
    )
    assert [r["step"] for r in windows] == [3, 6]
    for record, window in zip(windows, (every_step[0:3], every_step[3:6])):
        assert record["loss"] == pytest.approx(window[-1]["loss"], rel=1e-6)
        assert record["loss_mean"] == pytest.approx(sum(r["loss"] for r in window) / 3, rel=1e-6)
        assert record["ranking_loss_mean"] == pytest.approx(sum(r["ranking_loss"] for r in window) / 3, rel=1e-6)
        assert record["loss_mean"] != pytest.approx(record["loss"], rel=1e-4)  # the window really is averaged


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tiny_bert, triplets_file, tmp_path):
    config = tiny_config(
        tiny_bert,
        triplets_file,
        optimization={"steps": 8, "lr": 1e30, "warmup_steps": 0, "max_grad_norm": None},
        logging={"checkpoint_every": 1},
    )
    with pytest.raises(TrainingStopped, match=r"non-finite .* at step (\d+); the model was not updated") as caught:
        train(config, tmp_path / "nan")
    kept = checkpoints(tmp_path / "nan")
    assert kept and f"Last good checkpoint: {kept[-1]}" in str(caught.value)
    weights = load_file(kept[-1] / "model" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())
    assert not (tmp_path / "nan" / "model").exists()


def finite_checkpoint(checkpoint):
    weights = load_file(checkpoint / "model" / "model.safetensors")
    state = torch.load(checkpoint / "state.pt", weights_only=True)["optimizer"]["state"]
    moments = [t for entry in state.values() for t in entry.values() if t.is_floating_point()]
    return all(torch.isfinite(t).all() for t in [*weights.values(), *moments])


def test_a_non_finite_update_stops_at_once_and_no_checkpoint_holds_it(tiny_bert, triplets_file, tmp_path):
    """A finite loss and gradient can still give NaN weights (injected here after the 2nd optimizer step, as an
    overflowing update would): the run stops right there, saves nothing, and every checkpoint on disk is finite.
    Before, step 2 was checkpointed with the NaN and called "last good" when step 3's loss came out NaN."""
    steps = []

    def poison(optimizer, args, kwargs):
        steps.append(len(steps) + 1)
        if len(steps) == 2:
            with torch.no_grad():
                optimizer.param_groups[0]["params"][0].view(-1)[0] = float("nan")

    handle = register_optimizer_step_post_hook(poison)
    try:
        with pytest.raises(
            TrainingStopped,
            match=r"non-finite weights after the update of step 2 \(.+\); nothing was "
            r"saved\. Last good checkpoint: .*step-00000001$",
        ):
            train(tiny_config(tiny_bert, triplets_file, logging={"checkpoint_every": 1}), tmp_path / "nan")
    finally:
        handle.remove()
    kept = checkpoints(tmp_path / "nan")
    assert [path.name for path in kept] == ["step-00000001"] and all(finite_checkpoint(path) for path in kept)
    assert not (tmp_path / "nan" / "model").exists()


def test_cli_an_overflowing_update_exits_2_in_one_line(tiny_bert, triplets_file, tmp_path, cli):
    """lr = 3e38 is a finite number (accepted), but AdamW's first step size (lr / 0.1) overflows float32: a
    traceback before."""
    config = tiny_config(
        tiny_bert, triplets_file, optimization={"lr": 3e38, "warmup_steps": 0}, logging={"checkpoint_every": 1}
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    result = cli("train", path, "--output", tmp_path / "run")
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "the update of step 1 overflowed" in errors[0] and "Last good checkpoint: none" in errors[0]
    assert checkpoints(tmp_path / "run") == [] and not (tmp_path / "run" / "model").exists()


def test_a_checkpoint_with_non_finite_weights_or_state_is_refused(tiny_bert, tmp_path):
    from spladekit.training.checkpoint import save_checkpoint

    encoder = SparseEncoder.from_pretrained(tiny_bert)
    parameter = next(encoder.parameters())
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    encoder(encoder.tokenize(["a cat"])).sum().backward()
    optimizer.step()
    optimizer.state[parameter]["exp_avg_sq"].view(-1)[0] = float("inf")
    with pytest.raises(SpladekitError, match="checkpoint at step 3 not written: 1 optimizer state tensor"):
        save_checkpoint(tmp_path, 3, encoder, optimizer, scheduler, keep=2)
    optimizer.state[parameter]["exp_avg_sq"].zero_()
    with torch.no_grad():
        parameter.view(-1)[0] = float("nan")
    with pytest.raises(SpladekitError, match="checkpoint at step 3 not written: the model's weights hold NaN or inf"):
        save_checkpoint(tmp_path, 3, encoder, optimizer, scheduler, keep=2)
    assert checkpoints(tmp_path) == [] and not (tmp_path / "checkpoints").exists()


def test_train_checks_a_config_built_in_python(tiny_bert, triplets_file, tmp_path):
    config = tiny_config(tiny_bert, triplets_file)
    config.optimization.max_grad_norm = -1.0  # clip_grad_norm_ would flip the gradient: training uphill
    with pytest.raises(SpladekitError, match="'optimization.max_grad_norm': expected a finite number > 0 or null"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_collapse_detector_conditions():
    detector = CollapseDetector(vocab_size=100, patience=2)
    healthy = {"loss": 1.0, "ranking_loss": 0.9, "uniform_loss": 2.2, "q_nnz": 10, "d_nnz": 20}
    assert detector.update(healthy) is None
    assert detector.update({**healthy, "q_nnz": 0.5}) is None
    assert detector.update({**healthy, "q_nnz": 0.2})[0] == "vanishing"
    assert detector.update({**healthy, "q_nnz": 0.1}) is None  # reported once per episode
    assert detector.update({**healthy, "d_nnz": 60}) is None
    assert detector.update({**healthy, "d_nnz": 70})[0] == "everything active"
    assert detector.update({**healthy, "loss": 50.0}) is None
    shape, message = detector.update({**healthy, "loss": 60.0})
    assert shape == "explosion" and message.startswith("explosion collapse: loss 60")
    assert detector.update({**healthy, "ranking_loss": 2.19}) is None
    shape, message = detector.update({**healthy, "ranking_loss": 2.21, "score_spread": 0.001})
    assert shape == "uniform" and "every candidate scores the same" in message and "score spread 0.001" in message
    assert detector.update({**healthy, "ranking_loss": 2.2 * 1.03}) is None  # 3 % off: not uniform, streak over
    # distillation records carry no equal-score loss: never uniform
    assert all(detector.update({**healthy, "uniform_loss": None, "ranking_loss": 2.2}) is None for _ in range(3))


def test_explosion_is_measured_against_chance_not_a_lucky_batch():
    # tinyT-x8 k=8 untie, seed 15 (docs/results/head-only-inflation): one batch reached loss 0.000469, later
    # batches ~1 — worse than that batch, better than chance (ln 9): healthy, not an explosion
    detector = CollapseDetector(vocab_size=100, patience=2)
    record = {"ranking_loss": 0.5, "uniform_loss": math.log(9), "q_nnz": 10, "d_nnz": 20}
    assert detector.update({**record, "loss": 0.000469}) is None
    assert all(detector.update({**record, "loss": 1.05}) is None for _ in range(4))
    detector.update({**record, "loss": 23.0})
    shape, message = detector.update({**record, "loss": 25.0})  # > 10 × ln 9 = 21.97 twice
    assert shape == "explosion" and "× 2.197" in message
    # without an equal-score value (distillation) the lowest logged loss is the reference
    distilling = CollapseDetector(vocab_size=100, patience=1)
    distilling.update({**record, "uniform_loss": None, "loss": 0.5})
    assert distilling.update({**record, "uniform_loss": None, "loss": 5.5})[0] == "explosion"


@pytest.mark.parametrize(
    "history, fires_at",
    [
        # the logged InfoNCE ranking losses of two committed runs (9 candidates, ln 9 = 2.1972), first 7 logs
        ([2.1969, 2.1976, 2.2015, 2.1954, 2.1958, 2.1960, 2.1950], 5),  # tiny__k16__tied: uniform
        ([0.4268, 0.2563, 0.2587, 0.3104, 0.1745, 0.2221, 0.1502], None),  # tiny__k1__none: healthy
    ],
)
def test_uniform_collapse_on_the_losses_of_committed_runs(history, fires_at):
    detector = CollapseDetector(vocab_size=30522)
    found = [
        detector.update({"loss": loss, "ranking_loss": loss, "uniform_loss": math.log(9), "q_nnz": 50, "d_nnz": 100})
        for loss in history
    ]
    fired = [i + 1 for i, hit in enumerate(found) if hit]
    assert fired == ([] if fires_at is None else [fires_at])


def test_stop_on_collapse_names_the_shape_in_the_message_and_in_metrics(tiny_bert, triplets_file, tmp_path):
    # the random tiny head activates most of its 160-term vocabulary: everything active
    config = tiny_config(tiny_bert, triplets_file, logging={"stop_on_collapse": True, "collapse_patience": 2})
    with pytest.raises(TrainingStopped, match="stopped on collapse at step 2: everything active collapse"):
        train(config, tmp_path / "collapse")
    records = read_metrics(tmp_path / "collapse")
    assert [record.get("collapse") for record in records] == [None, "everything active"]


def test_metrics_carry_the_collapse_signals(tiny_bert, triplets_file, tmp_path):
    run = train(tiny_config(tiny_bert, triplets_file, optimization={"steps": 2}), tmp_path / "run")
    record = read_metrics(run.output)[-1]
    batch, negatives = 4, 1  # tiny_config
    assert record["uniform_loss"] == pytest.approx(math.log(batch + negatives))
    assert {"score_spread", "doc_similarity"} <= record.keys()


HEALTHY_REPORT = {  # the shape of `spladekit diagnose` of a healthy SPLADE model (values illustrative)
    "architecture": "BertForMaskedLM",
    "model_type": "bert",
    "vocab_size": 30522,
    "hidden_size": 128,
    "head_param": "cls.predictions.decoder.weight",
    "tied": True,
    "frobenius_norm": 250.0,
    "mean_row_norm": 1.4,
    "max_row_norm": 3.0,
    "bias_mean": -0.5,
    "bias_std": 0.3,
    "avg_q_nnz": 20.0,
    "avg_d_nnz": 80.0,
    "mean_term_weight": 0.8,
    "max_term_weight": 2.5,
    "median_pair_score": 15.7,
    "mean_score": 4.0,
    "recommended_k": 1.0,
    "word_position_ratio": 1.64,
}


def test_step0_warnings_name_inflated_scores_and_shrunken_word_embeddings():
    report = HeadReport(**{**HEALTHY_REPORT, "median_pair_score": 160.0, "recommended_k": 8.0})
    assert [w.split(" ")[:3] for w in step0_warnings(report)] == [["initial", "median", "pair"]]
    report = HeadReport(**{**HEALTHY_REPORT, "word_position_ratio": 0.1})
    assert step0_warnings(report)[0].startswith("input word embeddings are 0.10× the position embeddings")
    assert "no rescale mode raises them" in step0_warnings(report)[0]  # not caused by rescaling: untie cannot help
    untied = HeadReport(**{**HEALTHY_REPORT, "word_position_ratio": 0.2, "rescale": {"k": 8.0, "mode": "untie"}})
    assert "no rescale mode raises them" in step0_warnings(untied)[0]
    tied_before = HeadReport(**{**HEALTHY_REPORT, "word_position_ratio": 0.2, "rescale": {"k": 8.0, "mode": "tied"}})
    assert "already tied-rescaled by k = 8" in step0_warnings(tied_before)[0]
    assert step0_warnings(HeadReport(**HEALTHY_REPORT)) == []


def test_resume_refuses_a_different_config(tiny_bert, triplets_file, tmp_path):
    output = train(tiny_config(tiny_bert, triplets_file, optimization={"steps": 4}), tmp_path / "run").output
    with pytest.raises(SpladekitError, match=r"optimization.lr changed"):
        train(tiny_config(tiny_bert, triplets_file, optimization={"steps": 4, "lr": 0.5}), output, resume=True)
    with pytest.raises(SpladekitError, match="output already exists"):
        train(tiny_config(tiny_bert, triplets_file, optimization={"steps": 4}), output)


def old_run(folder):
    """A run spladekit wrote earlier (marked as its own: --overwrite may replace it)."""
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("the old run\n")
    mark_output(folder)
    return folder


def test_overwrite_keeps_the_old_run_when_data_or_backbone_are_bad(tiny_bert, triplets_file, tmp_path):
    run = old_run(tmp_path / "run")
    with pytest.raises(SpladekitError, match="missing.tsv"):
        train(tiny_config(tiny_bert, tmp_path / "missing.tsv"), run, overwrite=True)
    with pytest.raises(SpladekitError, match="no-such-model"):
        train(tiny_config(tmp_path / "no-such-model", triplets_file), run, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert (run / "metrics.jsonl").read_text() == "the old run\n"


def test_failing_overwrite_run_puts_the_old_run_back(tiny_bert, triplets_file, tmp_path):
    run = old_run(tmp_path / "run")
    config = tiny_config(tiny_bert, triplets_file, logging={"stop_on_collapse": True, "collapse_patience": 2})
    with pytest.raises(TrainingStopped, match="stopped on collapse .* previous run in .* is put back"):
        train(config, run, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert sorted(p.name for p in run.iterdir()) == [OUTPUT_MARK, "metrics.jsonl"]
    assert (run / "metrics.jsonl").read_text() == "the old run\n"
    train(tiny_config(tiny_bert, triplets_file, optimization={"steps": 2}), run, overwrite=True)
    assert [r["step"] for r in read_metrics(run)] == [1, 2] and (run / "model").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_second_train_into_the_same_folder_fails_at_once(tiny_bert, triplets_file, tmp_path):
    from spladekit.common.atomic import OutputBusy, open_in_place

    with open_in_place(tmp_path / "run"):  # a first run, still training
        for flags in ({}, {"overwrite": True}, {"resume": True}):
            with pytest.raises(OutputBusy, match="another process .* is writing this output"):
                train(tiny_config(tiny_bert, triplets_file), tmp_path / "run", **flags)
    assert list(tmp_path.iterdir()) == []


def without_timing(records):
    return [{k: v for k, v in record.items() if k not in ("examples_per_s", "tokens_per_s")} for record in records]


@pytest.mark.slow
def test_resume_after_kill_9_reproduces_the_uninterrupted_losses(tiny_bert, tmp_path):
    """kill -9 a CLI run after its first checkpoint, resume it: metrics equal an uninterrupted run's."""
    triplets = write_triplets(tmp_path / "t.tsv", negatives=2)
    sections = {
        "optimization": {"steps": 24, "lr": 3e-3, "warmup_steps": 2},
        "data": {"negatives": 2},
        "regularizer": {"lambda_q": 0.01, "lambda_d": 0.01, "warmup_steps": 20},
        "backbone": {"dropout": True},
        "logging": {"checkpoint_every": 4},
    }
    config = tiny_config(tiny_bert, triplets, **sections)
    reference = read_metrics(train(config, tmp_path / "reference").output)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.to_dict()))
    command = [sys.executable, "-m", "spladekit", "train", str(config_file), "--output", str(tmp_path / "killed")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not checkpoints(tmp_path / "killed") and process.poll() is None:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, process.stderr.read()
    interrupted = read_metrics(tmp_path / "killed")
    assert len(interrupted) < 24 and not (tmp_path / "killed" / "model").exists()
    resumed = subprocess.run(command + ["--resume"], capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert without_timing(read_metrics(tmp_path / "killed")) == without_timing(reference)
