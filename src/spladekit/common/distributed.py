"""Data parallelism across processes started by ``torchrun`` (gloo on CPU, nccl on GPU).

Every process holds a full replica and encodes its share of each micro-batch. Representations are
gathered *with gradient* (``torch.distributed.nn.functional.all_gather``) so that in-batch negatives
and the FLOPS batch mean see the whole batch, whatever the number of processes. Each process then
computes the same full-batch loss; the backward of the gather sums the identical contributions of the
W processes onto each one's own representations (W × the true gradient), and averaging the parameter
gradients across processes (what ``DistributedDataParallel`` does) gives back exactly the true
gradient. We average them ourselves, after the step's last backward, instead of wrapping the model in
``DistributedDataParallel``: a step runs the encoder several times (queries, documents, and the
second pass of gradient accumulation, see loop.py) before one update, which DDP's per-forward hooks
do not support.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from spladekit.common.devices import resolve_device


@dataclass(frozen=True)
class Processes:
    rank: int
    world_size: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def launched() -> bool:
    """Whether ``torchrun`` started this process as one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device_name: str | None = "auto") -> Processes:
    """Join the process group that ``torchrun`` describes in the environment, or run alone, on
    ``device_name`` (:func:`spladekit.common.devices.resolve_device`; ``auto``: ``cuda:LOCAL_RANK`` or the CPU)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(device_name, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return Processes(dist.get_rank() if world_size > 1 else 0, world_size, device)


def teardown(processes: Processes) -> None:
    if processes.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def gather(tensor: torch.Tensor, processes: Processes) -> torch.Tensor:
    """Concatenate every process's ``tensor`` along dim 0 (rank order), keeping the gradient path."""
    if processes.world_size == 1:
        return tensor
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(tensor.contiguous()), dim=0)


def average_gradients(parameters: list[torch.nn.Parameter], processes: Processes) -> None:
    """Average ``.grad`` over processes in one flat all-reduce (as DistributedDataParallel would)."""
    if processes.world_size == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= processes.world_size
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def barrier(processes: Processes) -> None:
    if processes.world_size > 1:
        dist.barrier()
