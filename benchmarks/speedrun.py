"""The speedrun's training step against the 2017 recipe's, on the translate task's
own batches: target tokens/s and the peak memory of the whole training process.

The 2017 recipe is the ``cpu`` preset in fp32; the speedrun is the ``speedrun``
preset (half the merges, so shorter output rows, and the fused attention kernel).
Each runs in a fresh process with ``--threads`` threads (the speedrun is timed on
2), over the first ``--steps`` batches of epoch 0 after one untimed step. Peak
memory is the process's peak resident set: data, vocabulary, model, Adam and
activations, what a laptop must hold. Prints both and the speedrun / 2017 ratio.

    PYTHONPATH=src python benchmarks/speedrun.py --threads 2 --steps 30
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from annotated_transformer.runner import make_optimizer_for, new_config
from annotated_transformer.tasks import TASKS
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import Trainer

RECIPES = {"2017 recipe": "cpu", "speedrun": "speedrun"}


def run_one(preset: str, threads: int, steps: int) -> dict[str, float]:
    """Tokens/s of ``steps`` training steps of ``preset``, and the peak memory."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = new_config("translate", preset, ["precision=fp32"])
    task = TASKS["translate"](config)
    model = task.build_model()
    optimizer = make_optimizer_for(model, config)
    scheduler = make_scheduler(
        optimizer, config.schedule, config.lr, config.warmup, 10 * config.warmup
    )
    trainer = Trainer(model, optimizer, task.loss, scheduler)
    batches = list(task.batches(0))[: steps + 1]
    trainer.train_step([batches[0]])  # untimed: allocations, kernel choice
    start = time.perf_counter()
    tokens = sum(trainer.train_step([b])["tokens"] for b in batches[1:])
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    return {"tokens_per_s": tokens / seconds, "peak_mb": peak_kib / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--one", metavar="PRESET", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.threads, args.steps)))
        return
    print(f"translate, fp32, {args.threads} threads, {args.steps} timed steps")
    results = {}
    for name, preset in RECIPES.items():
        command = [sys.executable, __file__, "--one", preset]
        command += ["--threads", str(args.threads), "--steps", str(args.steps)]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        results[name] = json.loads(out.stdout.splitlines()[-1])
        r = results[name]
        print(f"{name:12} {r['tokens_per_s']:8.0f} target tokens/s  "
              f"peak {r['peak_mb']:6.0f} MB")  # fmt: skip
    speed = {name: r["tokens_per_s"] for name, r in results.items()}
    ratio = speed["speedrun"] / speed["2017 recipe"]
    print(f"speedrun / 2017 recipe: {ratio:.2f}x tokens/s")


if __name__ == "__main__":
    main()
