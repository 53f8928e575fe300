"""training/step.py directly: the objective against a hand computation, one step lowering the loss, GradCache's
replay of dropout, the collapse signals, and how a batch is split over micro-batches and ranks."""

from __future__ import annotations

import math

import pytest
import torch

from spladekit import SparseEncoder
from spladekit.common.distributed import Processes
from spladekit.data.training import load_training_set
from spladekit.training.step import (
    StepSettings,
    collapse_signals,
    encode_examples,
    forward_backward,
    objective,
    split_batch,
)
from train_helpers import TINY_BERT, TRIPLETS, tiny_config

tiny_bert_fixture, triplets_fixture = TINY_BERT, TRIPLETS

ALONE = Processes(rank=0, world_size=1, device=torch.device("cpu"))


def settings(loss: str = "infonce", regularizer: str = "flops") -> StepSettings:
    return StepSettings(
        query_max_length=8, doc_max_length=8, negatives=1, bf16=False, loss=loss, regularizer=regularizer
    )


def test_the_objective_is_infonce_plus_lambda_weighted_flops_computed_by_hand():
    """B = 2 queries, K = 1 negative, V = 3: every term written out with plain Python floats."""
    q = [[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]]
    p = [[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]]
    n = [[[0.0, 0.0, 1.0]], [[3.0, 0.0, 0.0]]]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    ranking = 0.0
    for i in range(2):
        logits = [dot(q[i], p[0]), dot(q[i], p[1]), dot(q[i], n[i][0])]  # in-batch positives, then own negative
        ranking -= math.log(math.exp(logits[i]) / sum(math.exp(x) for x in logits))
    ranking /= 2
    flops_of = lambda rows: sum((sum(abs(r[v]) for r in rows) / len(rows)) ** 2 for v in range(3))  # noqa: E731
    docs = p + [n[0][0], n[1][0]]
    lambdas = (0.3, 0.7)
    total, parts = objective(torch.tensor(q), torch.tensor(p), torch.tensor(n), None, lambdas, settings())
    assert parts["ranking_loss"] == pytest.approx(ranking)
    assert parts["reg_q"] == pytest.approx(flops_of(q)) and parts["reg_d"] == pytest.approx(flops_of(docs))
    assert float(total) == pytest.approx(ranking + 0.3 * flops_of(q) + 0.7 * flops_of(docs))
    assert parts["q_nnz"] == pytest.approx(1.5) and parts["d_nnz"] == pytest.approx(1.25)
    assert parts["uniform_loss"] == pytest.approx(math.log(3))


def test_steps_on_one_batch_lower_its_loss(tiny_bert, triplets_file):
    """forward_backward's gradients point downhill: five plain SGD steps on one batch lower its objective (zero,
    detached or wrong-signed gradients would not)."""
    config = tiny_config(tiny_bert, triplets_file)
    examples = load_training_set(config.data).batch(1, 4, 1, seed=0)
    step = StepSettings.of(config)
    torch.manual_seed(0)
    encoder = SparseEncoder.from_pretrained(tiny_bert).eval()  # no dropout: the same function at every step
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.05)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        losses.append(forward_backward(encoder, [examples], None, (1e-3, 1e-3), step, ALONE).loss)
        optimizer.step()
    assert losses[-1] < losses[0] - 1e-3, losses


def test_cached_representations_replay_dropout(tiny_bert, triplets_file):
    """With dropout on, the two passes of accumulation see the same masks: the gradient equals the one of
    encoding both micro-batches with a graph in one go (same RNG sequence)."""
    config = tiny_config(tiny_bert, triplets_file, optimization={"accumulation": 2})
    examples = load_training_set(config.data).batch(1, 4, 1, seed=0)
    settings = StepSettings.of(config)
    grads = []
    for cached in (True, False):
        encoder = SparseEncoder.from_pretrained(tiny_bert).train()
        torch.manual_seed(5)
        if cached:
            forward_backward(encoder, [examples[:2], examples[2:]], None, (0.1, 0.1), settings, ALONE)
        else:
            reps = [
                encode_examples(encoder, micro, settings, ALONE.device)[:3] for micro in (examples[:2], examples[2:])
            ]
            total, _ = objective(*(torch.cat(parts) for parts in zip(*reps)), None, (0.1, 0.1), settings)
            total.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in encoder.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_collapse_signals_measure_the_spread_of_scores_and_the_likeness_of_documents():
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    alike = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # every candidate scores 1 for both queries
    uniform = collapse_signals(q, alike, alike.view(2, 1, 3), torch.cat([alike, alike]))
    assert float(uniform["score_spread"]) == 0.0 and float(uniform["doc_similarity"]) == pytest.approx(1.0)
    p, n = torch.eye(3)[:2], torch.tensor([[[0.0, 0.0, 1.0]], [[0.0, 0.0, 1.0]]])
    apart = collapse_signals(q, p, n, torch.cat([p, n.flatten(0, 1)]))
    # each query scores its positive 1 and the two other candidates 0: std of (1, 0, 0) = sqrt(1/3)
    assert float(apart["score_spread"]) == pytest.approx(math.sqrt(1 / 3))
    # of the 12 ordered pairs of distinct documents only the two negatives (n0, n1), (n1, n0) are alike
    assert float(apart["doc_similarity"]) == pytest.approx(2 / 12)


def test_a_batch_is_split_by_micro_batch_then_rank_in_the_order_of_its_examples():
    examples = list(range(8))
    by_rank = [split_batch(examples, 2, Processes(rank=r, world_size=2, device=torch.device("cpu"))) for r in (0, 1)]
    assert by_rank == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    # gathered in (micro-batch, rank) order, the shares are the batch again
    assert [x for j in range(2) for r in range(2) for x in by_rank[r][j]] == examples
    assert split_batch(examples, 1, ALONE) == [examples]
