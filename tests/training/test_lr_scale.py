"""rescale.lr_scale: the rescaled matrix learns at lr / k, so AdamW's step relative to each weight is what it was.

The decisive check is a function-preserving reparametrization (the head-only inflation grid's tinyT-x8 case):
the MLM transform's output LayerNorm × k, then ``untie`` rescaling by k, computes exactly the function of the
untied original. With every parameter's lr scaled by the factor its size changed (the head ÷ k from
:func:`step_factors`; the LayerNorm × k, which spladekit's rescaling never touches, added here by hand), AdamW
follows the same loss trajectory — up to ε, which is relatively k× smaller against the head's k× larger gradient
and k× larger against the LayerNorm's (gradients here are ≫ ε). Weight decay does not break it: the group's decay
is multiplied by k, so AdamW's decoupled shrink ``lr · decay`` is the same. Gradient clipping by the global norm
would (the head's gradient is k× larger), so it is off here as in the unit under test.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spladekit import SparseEncoder
from spladekit.experiments.inflate import inflate
from spladekit.model.backbone import MLMHead
from spladekit.model.head import divide_head, rescale
from spladekit.model.rescaling import RescaleRecord, step_factors
from spladekit.training import train
from spladekit.training.config import OptimizationConfig, load_config
from spladekit.training.setup import parameter_groups
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

K = 8.0
QUERIES = ["the cat sat", "a dog ran in the park", "an apple of the tree", "is the sun hot"]
DOCS = ["the cat sat on the mat", "dogs run in parks", "apples grow on trees", "the sun is a hot star"]


def _losses(encoder: SparseEncoder, groups: list[dict], lr: float, steps: int = 6) -> list[float]:
    optimizer = torch.optim.AdamW(groups, lr=lr)
    queries, docs = encoder.tokenize(QUERIES, 16), encoder.tokenize(DOCS, 16)
    losses = []
    for _ in range(steps):
        scores = encoder(queries) @ encoder(docs).T
        loss = nn.functional.cross_entropy(scores, torch.arange(len(QUERIES)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _pair(folder) -> tuple[SparseEncoder, SparseEncoder]:
    """The untied original, and its transform LayerNorm × K then untie-rescaled by K (the same function)."""
    reference = SparseEncoder.from_pretrained(folder).eval()
    divide_head(reference.model, 1.0, mode="untie")  # the same topology as the rescaled copy: an untied head
    inflated = SparseEncoder.from_pretrained(folder).eval()
    inflate(inflated.model, K, "transform")
    rescale(inflated.model, K, mode="untie")
    batch = reference.tokenize(DOCS, 16)
    torch.testing.assert_close(inflated(batch), reference(batch), rtol=1e-4, atol=1e-5)
    return reference, inflated


@pytest.fixture
def settings() -> OptimizationConfig:
    return OptimizationConfig(lr=1e-3, weight_decay=0.1)


def test_lr_scale_follows_the_original_trajectory(tiny_model_dirs, settings):
    reference, inflated = _pair(tiny_model_dirs["bert"])
    expected = _losses(reference, parameter_groups(reference, settings), settings.lr)
    norm = MLMHead.of(inflated.model).transform_norm
    assert norm is not None and norm is inflated.model.cls.predictions.transform.LayerNorm
    factors = step_factors(inflated.model, RescaleRecord(K, "untie")) | {norm.weight: K, norm.bias: K}
    scaled = _losses(inflated, parameter_groups(inflated, settings, factors=factors), settings.lr)
    _, fresh = _pair(tiny_model_dirs["bert"])
    unscaled = _losses(fresh, parameter_groups(fresh, settings), settings.lr)
    assert max(abs(a - b) for a, b in zip(scaled, expected, strict=True)) < 1e-3 * abs(expected[-1] - expected[0])
    # without the factors the same function trains differently: the test can fail
    assert abs(unscaled[-1] - expected[-1]) > 0.05 * abs(expected[-1] - expected[0])


@pytest.mark.parametrize("mode", ["tied", "untie"])
@pytest.mark.parametrize("rescale_bias", [False, True])
def test_step_factors_name_what_the_rescaling_divided(tiny_model_dirs, mode, rescale_bias):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    record = RescaleRecord(4.0, mode, rescale_bias)
    rescale(encoder.model, 4.0, mode=mode, rescale_bias=rescale_bias)
    head = MLMHead.of(encoder.model)
    factors = step_factors(encoder.model, record)
    assert list(factors) == [head.weight] + ([head.bias] if rescale_bias else [])
    assert set(factors.values()) == {0.25}
    assert (head.weight is encoder.model.get_input_embeddings().weight) == (mode == "tied")
    assert step_factors(encoder.model, RescaleRecord(None, "none")) == {}


def test_scaled_groups_keep_lr_times_decay(tiny_model_dirs, settings):
    encoder = SparseEncoder.from_pretrained(tiny_model_dirs["bert"])
    rescale(encoder.model, 4.0, mode="untie", rescale_bias=True)
    head = MLMHead.of(encoder.model)
    groups = parameter_groups(encoder, settings, factors=step_factors(encoder.model, RescaleRecord(4.0, "untie", True)))
    by_parameter = {id(p): group for group in groups for p in group["params"]}
    weight, bias = by_parameter[id(head.weight)], by_parameter[id(head.bias)]
    assert weight["lr"] == settings.lr / 4 and weight["lr"] * weight["weight_decay"] == pytest.approx(
        settings.lr * settings.weight_decay
    )
    assert bias["lr"] == settings.lr / 4 and bias["weight_decay"] == 0.0  # a bias is never decayed
    assert sum(len(group["params"]) for group in groups) == len(list(encoder.parameters()))


tiny_bert = TINY_BERT
triplets_file = TRIPLETS


@pytest.mark.parametrize("lr_scale", [False, True])
def test_training_with_lr_scale_moves_the_rescaled_matrix_k_times_less(tiny_bert, triplets_file, tmp_path, lr_scale):
    """One AdamW step from zero moments moves each coordinate by exactly lr (ε aside): lr / k with lr_scale."""
    config = tiny_config(
        tiny_bert,
        triplets_file,
        rescale={"k": 4.0, "mode": "tied", "lr_scale": lr_scale},
        optimization={"steps": 1, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": None},
    )
    run = train(config, tmp_path / "run")
    before = SparseEncoder.from_pretrained(tiny_bert).head.weight / 4
    moved = (SparseEncoder.from_pretrained(run.model).head.weight - before).abs().max().item()
    lr = config.optimization.lr / (4 if lr_scale else 1)
    assert moved == pytest.approx(lr, rel=1e-3)
    assert load_config(run.output / "config.yaml").rescale.lr_scale is lr_scale
    assert f"| rescale_lr_scale | {lr_scale} |" in (run.model / "README.md").read_text()
