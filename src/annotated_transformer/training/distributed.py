"""Data-parallel training across processes: one model copy per
process, gradients averaged.

Launched by ``torchrun --nproc_per_node=N`` (or across machines with ``--nnodes``),
each process reads its place from the environment torchrun sets (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). Every process
builds the same model, and ``DistributedDataParallel`` (DDP) copies rank 0's weights
to the others, then averages the gradients of all ranks (an all-reduce) during each
``backward``.

Each rank trains on its own share of the batches (``batching.shard_batches``). For
the result to equal one process training on all the batches of a step, the loss must
be normalised by the *global* number of target tokens of the step, not each rank's
own: ``global_token_loss`` does that (see its docstring for the arithmetic).

Sharding (``wrap(..., sharding="fsdp")``): instead of a full copy of the weights,
gradients and Adam's moments on every rank, FSDP
(``torch.distributed.fsdp.fully_shard``) keeps 1/W of each tensor on each of W
ranks. Before a layer's forward (and backward) pass the ranks all-gather its full
weights, and free them after; the gradients are reduce-scattered, each rank
receiving the averaged gradients of its own shard, and each rank's optimiser updates
only its shard. The arithmetic of the update is the same as DDP's.

Without torchrun (no ``WORLD_SIZE`` in the environment) everything here is a no-op
and the rank is 0 of 1, so the same training script runs on a laptop.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from annotated_transformer.training.loss import LossFn


def is_distributed() -> bool:
    """True once ``init_distributed`` has set up a process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's index among all processes (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of processes training together (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """Rank 0 writes checkpoints and logs; the other ranks stay quiet."""
    return rank() == 0


def launched_by_torchrun() -> bool:
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def init_distributed(
    device: torch.device, timeout_s: float = 1800.0
) -> torch.device:
    """Join the process group described by torchrun's variables;
    return this rank's device.

    device: where to train (``runner.pick_device``). CUDA: the NCCL backend and one
        GPU per local rank; otherwise Gloo. Without torchrun's variables no group is
        created and ``device`` is returned as it is.
    """
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = device.type == "cuda"
    target = device
    if use_cuda and launched_by_torchrun():
        target = torch.device("cuda", local_rank)
        if local_rank >= torch.cuda.device_count():
            raise ValueError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} "
                "GPU(s) are visible: start at most one process per GPU "
                "(--nproc_per_node)"
            )
        torch.cuda.set_device(target)
    if launched_by_torchrun() and not is_distributed():
        dist.init_process_group(
            backend="nccl" if use_cuda else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=target if use_cuda else None,
        )
    return target


def barrier() -> None:
    """Wait until every process gets here (nothing to wait for
    without a process group)."""
    if is_distributed():
        dist.barrier()


def cleanup() -> None:
    """Leave the process group (call once at the end, also after an error)."""
    if is_distributed():
        dist.destroy_process_group()


SHARDINGS = ("none", "fsdp")


def wrap(
    model: nn.Module,
    device: torch.device,
    sharding: str = "none",
    blocks: tuple[type, ...] = (),
) -> nn.Module:
    """The model ready for several ranks; with one rank, the model as it is.

    sharding "none": ``DistributedDataParallel``. forward_sync_buffers=False: the
    only buffers are the fixed sinusoids, identical everywhere, so there is nothing
    to re-broadcast before every forward pass.
    sharding "fsdp": ``fully_shard`` on every submodule of a type in ``blocks`` (a
    layer: the unit whose weights are gathered at once) and on the whole model (the
    rest: embeddings, logits layer, final norms). The model is sharded in place and
    returned (its class becomes an ``FSDPModule``); every rank must have built it
    with the same weights (the same seed).
    """
    if sharding not in SHARDINGS:
        raise ValueError(
            f"sharding={sharding!r}: use one of {', '.join(SHARDINGS)}"
        )
    if world_size() == 1:
        return model
    if sharding == "fsdp":
        # a second to import: only when used
        from torch.distributed.fsdp import fully_shard

        for module in [m for m in model.modules() if isinstance(m, blocks)]:
            fully_shard(module)
        fully_shard(model)
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(
        model, device_ids=device_ids, forward_sync_buffers=False
    )


def global_token_loss(loss_fn: LossFn) -> LossFn:
    """Wrap a ``loss_fn(model, batch) -> (loss_sum, n_tokens)``
    so DDP equals one process.

    With R ranks, rank r computes the summed loss L_r over its n_r tokens. One
    process on all the batches would step along the gradient of (Σ_r L_r) / N with
    N = Σ_r n_r. DDP averages the ranks' gradients (divides their sum by R) and the
    ``Trainer`` divides by the token count that ``loss_fn`` returns. So each rank
    returns

    - a loss whose *gradient* is R · ∇L_r (DDP's average then gives Σ_r ∇L_r) and
      whose *value* is Σ_r L_r (logged, and checked for inf/NaN identically on every
      rank, so that all ranks stop together instead of one hanging in the next
      all-reduce);
    - the global count N (one all-reduce of [L_r, n_r] per micro-batch gives both).

    The trainer then divides Σ_r ∇L_r by N: the single-process update. With one rank
    the loss function is returned unchanged.
    """
    if world_size() == 1:
        return loss_fn

    def wrapped(model: nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        loss_sum, n_tokens = loss_fn(model, batch)
        totals = torch.stack(
            [loss_sum.detach().float(), torch.as_tensor(n_tokens).to(loss_sum)]
        )
        dist.all_reduce(totals)  # [Σ_r L_r, Σ_r n_r]
        local = loss_sum * world_size()
        # value: Σ_r L_r; gradient: that of R · L_r (the
        # detached part adds no gradient)
        return local + (totals[0] - local).detach(), totals[1].round().long()

    return wrapped
