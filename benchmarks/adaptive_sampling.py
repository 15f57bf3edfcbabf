"""Adaptive against uniform against Latin hypercube sampling of the simulator's scenario space.

Each sampler runs the same loop (benchmarks and the ``adaptive`` job share
:func:`engage.train.adaptive.loop.run_rounds`): round 1 simulates 4 scenarios, every
later round adds 4 chosen by the sampler, an ensemble of 3 small MLPs is retrained on
every window so far and tested on a broad held-out set (24 scenarios, a Latin hypercube
over all 18 parameters, the same for the three samplers of a seed). The figure is test
accuracy against simulated training samples (windows), over several seeds; the adaptive
sampler's probe windows (one household-day per candidate, to score it) are counted apart.

    .venv/bin/python benchmarks/adaptive_sampling.py              # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/adaptive_sampling.py --seeds 1 --rounds 3 --no-write
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import git_commit, machine, write_section

from engage.runtime.options import RunOptions
from engage.spec import load_spec
from engage.train.adaptive.job import AdaptiveJob
from engage.train.adaptive.loop import run_rounds

SPEC = Path(__file__).resolve().parents[1] / "pipelines" / "adaptive_sampling.yaml"
SAMPLERS = ("adaptive", "uniform", "lhs")


def curve(sampler: str, seed: int, args: argparse.Namespace) -> list[tuple[int, float, int]]:
    """(training samples, test accuracy, probe samples) after each round of one run."""
    overrides = [
        f"adaptive.sampler={sampler}",
        f"adaptive.acquisition={args.acquisition}",
        f"adaptive.seed={seed}",
        f"adaptive.rounds={args.rounds}",
        "adaptive.budget=null",
        f"train.epochs={args.epochs}",
    ]
    loaded = load_spec(SPEC, overrides)
    data = AdaptiveJob(loaded, RunOptions(home=Path(".engage"))).prepare()
    rounds, _ = run_rounds(loaded, data.held_out)
    return [(r.samples, r.metrics["test_accuracy"], r.probe_samples) for r in rounds]


def reach(curve_: list[tuple[int, float, int]], target: float) -> int | None:
    """The fewest samples at which ``curve_`` reaches ``target`` accuracy (None: never)."""
    return next((s for s, acc, _ in curve_ if acc >= target), None)


def render(curves: dict, args: argparse.Namespace, total_s: float) -> str:
    """The docs/BENCHMARKS.md section."""
    seeds = sorted({seed for _, seed in curves})
    rounds = min(len(c) for c in curves.values())
    mean = {
        s: [np.mean([curves[s, seed][r][1] for seed in seeds]) for r in range(rounds)]
        for s in SAMPLERS
    }
    samples = [curves["uniform", seeds[0]][r][0] for r in range(rounds)]
    lines = [
        "## Adaptive sampling of the simulation space (issue 17)",
        "",
        f"Machine: {machine()}; commit {git_commit()}; load average at start {args.load:.1f} "
        "(other jobs shared the cores).",
        f"Command: `.venv/bin/python benchmarks/adaptive_sampling.py --seeds {args.seeds} "
        f"--rounds {args.rounds} --epochs {args.epochs} --acquisition {args.acquisition}` "
        f"({total_s:.0f} s in all).",
        "",
        "pipelines/adaptive_sampling.yaml: occupancy from 5 sensors, windows of 30 minutes "
        "every 10; a scenario is one household for 2 days (~286 windows); round 1 simulates "
        f"4 scenarios, each later round 4 more; an ensemble of 3 MLPs ({args.epochs} epochs, "
        "batch 32) is retrained every round and tested (ensemble mean) on 24 held-out scenarios, a Latin "
        "hypercube over all 18 parameters. Adaptive: 48 uniform candidates per round, each "
        f"probed with one household-day, scored by {args.acquisition}, the best 4 at least "
        f"half a typical distance apart kept. Seeds {', '.join(map(str, seeds))}; mean test "
        "accuracy per round:",
        "",
        "| round | training samples | " + " | ".join(SAMPLERS) + " |",
        "| ---: | ---: | " + " | ".join("---:" for _ in SAMPLERS) + " |",
    ]
    for r in range(rounds):
        cells = " | ".join(f"{mean[s][r]:.4f}" for s in SAMPLERS)
        lines.append(f"| {r + 1} | {samples[r]} | {cells} |")
    target = mean["uniform"][-1]
    mean_curve = [(samples[r], mean["adaptive"][r], 0) for r in range(rounds)]
    reached = reach(mean_curve, target)
    spread = ", ".join(
        f"{s} {np.ptp([curves[s, seed][rounds - 1][1] for seed in seeds]):.4f}" for s in SAMPLERS
    )
    probes = np.mean([sum(p for *_, p in curves["adaptive", seed]) for seed in seeds])
    verdict = (
        f"adaptive reached it at {reached} samples ({reached / samples[-1]:.2f}x uniform's)"
        if reached is not None
        else "adaptive did not reach it within the same samples"
    )
    per_seed = []
    for seed in seeds:
        goal = curves["uniform", seed][-1][1]
        got = reach(curves["adaptive", seed], goal)
        per_seed.append(
            f"seed {seed}: {got / samples[-1]:.2f}x" if got else f"seed {seed}: not reached"
        )
    lines += [
        "",
        f"Uniform's final mean accuracy is {target:.4f} at {samples[-1]} samples; {verdict}. "
        f"Per seed (samples adaptive needed for that seed's uniform final accuracy, as a share "
        f"of uniform's): {'; '.join(per_seed)}. The issue's target was at most 0.5x. "
        f"Adaptive also simulated {probes:.0f} probe windows per run to score its candidates "
        "(not trained on, not in the samples column).",
        "",
        f"How to read it: the spread across seeds at the last round (max - min) is {spread}, "
        f"and uniform gains {mean['uniform'][-1] - mean['uniform'][0]:+.4f} from round 1 to "
        f"round {rounds}: on this broad space the ensemble's accuracy hardly grows with more "
        "scenarios at these sizes, so differences between samplers are within the noise of "
        "one seed's draws and training. A sampler advantage would need a model and budget "
        "where accuracy still climbs with data (more windows per scenario, longer training).",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run every sampler for every seed and print (and by default write) the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--acquisition", default="disagreement", choices=["disagreement", "error"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.load = os.getloadavg()[0]
    import torch

    torch.set_num_threads(1)  # one core per run: the machine is shared
    started = time.perf_counter()
    curves = {}
    for seed in range(args.seeds):
        for sampler in SAMPLERS:
            curves[sampler, seed] = curve(sampler, seed, args)
            print(sampler, seed, curves[sampler, seed], f"{time.perf_counter() - started:.0f}s")
    body = render(curves, args, time.perf_counter() - started)
    print(body)
    if not args.no_write:
        write_section("adaptive-sampling", body)


if __name__ == "__main__":
    main()
