"""The GPU path (devices.py, pooling.py, encoder.py, training/loop.py on CUDA): encoding and a training run on
a GPU give what the CPU gives. Skipped, with the reason, where CUDA is not available."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spladekit import SparseEncoder
from spladekit.model.bf16_screen import screen_is_sound
from spladekit.model.pooling import splade_max_pool_fused
from spladekit.training import train
from tiny_models import SAMPLE_TEXTS as TEXTS
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert, triplets_file = TINY_BERT, TRIPLETS

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason=f"CUDA is not available (torch {torch.__version__}, CUDA build {torch.version.cuda}): the GPU path "
    "runs only on a machine with a GPU",
)


@pytest.mark.parametrize("pooling", ["fused", "fused-bf16"])
def test_encoding_on_cuda_equals_the_cpu(pooling, tiny_model_dirs):
    cpu = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling="fused", device="cpu")
    gpu = SparseEncoder.from_pretrained(tiny_model_dirs["bert"], pooling=pooling, device="cuda")
    assert gpu.device.type == "cuda"
    expected = cpu.encode(TEXTS, batch_size=3, show_progress=False).toarray()
    got = gpu.encode(TEXTS, batch_size=3, show_progress=False).toarray()
    assert (expected > 0).sum() > 0
    assert np.abs(got - expected).max() <= 1e-4
    clear = np.abs(expected) > 1e-4  # a weight within the two devices' rounding of 0 may differ in sign
    assert np.array_equal((got > 0)[clear], (expected > 0)[clear])


def test_the_bf16_screen_is_sound_and_exact_on_cuda():
    device = torch.device("cuda")
    assert screen_is_sound(device, torch.bfloat16, 130)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.nn.functional.layer_norm(torch.randn(8, 64, 128, generator=generator), (128,)).to(device)
    weight = (torch.randn(3000, 128, generator=generator) / 4).to(device)
    bias = (torch.randn(3000, generator=generator) - 2).to(device)
    mask = torch.ones(8, 64, dtype=torch.long, device=device)
    mask[3, 40:] = 0
    hidden.requires_grad_()
    fp32 = splade_max_pool_fused(hidden, weight, bias, mask)
    screened = splade_max_pool_fused(hidden, weight, bias, mask, search_dtype=torch.bfloat16)
    assert (fp32 > 0).sum() > 100
    torch.testing.assert_close(screened, fp32, rtol=0, atol=1e-6)
    grad_output = torch.randn(fp32.shape, device=device)
    (fp32_grad,) = torch.autograd.grad(fp32, [hidden], grad_output)
    (screened_grad,) = torch.autograd.grad(screened, [hidden], grad_output)
    torch.testing.assert_close(screened_grad, fp32_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bf16", [False, True])
def test_training_runs_on_cuda(bf16, tiny_bert, triplets_file, tmp_path):
    config = tiny_config(
        tiny_bert,
        triplets_file,
        optimization={"steps": 2, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "bf16": bf16},
    )
    run = train(config, tmp_path / "run", device="cuda")
    trained = SparseEncoder.from_pretrained(run.output / "model")
    initial = SparseEncoder.from_pretrained(tiny_bert)
    moved = max((a - b).abs().max().item() for a, b in zip(trained.parameters(), initial.parameters()))
    assert moved > 0  # the steps on the GPU changed the weights that were saved
