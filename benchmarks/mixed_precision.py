"""bf16 autocast against fp32 on CPU (and fp16/bf16 on a GPU when one is present).

The training loop Ray Train runs (:func:`engage.train.loop.make_worker`,
:func:`~engage.train.loop.train_epoch`), one worker in this process, on the quickstart's
data (occupancy from simulated sensors, windows of 30 x 5): the same seeded model trained
for the same epochs in each precision, the arms interleaved repetition by repetition so the
machine's other load falls on all of them. Each arm reports samples/s (training rows over
the epochs' wall time) and the final val_loss and val_accuracy.

    .venv/bin/python benchmarks/mixed_precision.py              # writes its docs section
    .venv/bin/python benchmarks/mixed_precision.py --reps 1 --no-write
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _report import git_commit, machine, write_section

from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.runtime.stages import prepare_data
from engage.spec import load_spec
from engage.spec.models import ModelSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, make_worker, train_epoch

SPEC = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"


class _Drop:
    """A transport that keeps nothing (the arms read the returned metrics)."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def _data(days: int) -> tuple[dict, ModelShape, object]:
    loaded = load_spec(SPEC, [f"data.source.days={days}"])
    data = prepare_data(loaded)
    arrays = {
        "train_x": data.train.x,
        "train_y": data.train.y,
        "val_x": data.val.x,
        "val_y": data.val.y,
    }
    shape = ModelShape(data.train.x.shape[1], data.train.x.shape[2], 2)
    return arrays, shape, loaded.spec


def arm(precision: str, device: str, arrays: dict, shape: ModelShape, spec, args) -> dict:
    """Train one seeded model in ``precision`` on ``device``; its samples/s and final metrics."""
    train = spec.train.model_copy(
        update={"precision": precision, "num_workers": 1, "epochs": args.epochs}
    )
    model = ModelSpec(name="mlp", params={"hidden": args.hidden, "layers": 2, "dropout": 0.1})
    job = TrainJob(train, model, "classification", shape, None, None, "")
    w = make_worker(job, arrays, Reporter(_Drop()), device=device)
    w.model.to(device)
    resources = ResourceSampler(device, every_s=3600.0)
    epochs = [train_epoch(w, e, resources) for e in range(1, args.epochs + 1)]
    w.reporter.flush(wait=True)
    rows = sum(m["samples_per_second"] * m["epoch_seconds"] for m in epochs)
    return {
        "samples_per_second": rows / sum(m["epoch_seconds"] for m in epochs),
        "val_loss": epochs[-1]["val_loss"],
        "val_accuracy": epochs[-1]["val_accuracy"],
    }


def _arms() -> list[tuple[str, str]]:
    arms = [("fp32", "cpu"), ("bf16", "cpu")]
    if torch.cuda.is_available():
        arms += [("fp32", "cuda"), ("bf16", "cuda"), ("fp16", "cuda")]
    return arms


def _bf16_flags() -> str:
    """The CPU's bf16 instruction flags from /proc/cpuinfo, or a sentence saying there are none."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "the CPU's flags could not be read"
    have = sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})
    return (
        f"CPU bf16 flags: {', '.join(have)}"
        if have
        else (
            "this CPU has no bf16 instructions (no avx512_bf16 or amx_bf16 in /proc/cpuinfo), "
            "so bf16 matrix products are emulated"
        )
    )


def _render(rows: dict, args) -> str:
    lines = [
        "## Mixed precision: bf16 against fp32 (issue 15)",
        "",
        f"Machine: {machine()}; torch {torch.__version__}; commit {git_commit()}; load "
        f"average {args.load:.1f} at the start (other jobs shared the cores). Command: "
        f"`python benchmarks/mixed_precision.py --reps {args.reps} --epochs {args.epochs} "
        f"--days {args.days} --hidden {args.hidden}`.",
        "",
        f"The quickstart's data ({args.days} days), an MLP 150-{args.hidden}-{args.hidden}-2, "
        f"Adam, batch 256, one worker, {args.epochs} epochs; the arms interleaved, "
        f"{args.reps} repetitions each, medians shown. `train.precision` picks the arm; "
        f"{_bf16_flags()}.",
        "",
        "| precision | device | samples/s | ÷ fp32 same device | val_loss | val_accuracy |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (precision, device), runs in rows.items():
        sps = statistics.median(r["samples_per_second"] for r in runs)
        base = statistics.median(r["samples_per_second"] for r in rows[("fp32", device)])
        loss = statistics.median(r["val_loss"] for r in runs)
        acc = statistics.median(r["val_accuracy"] for r in runs)
        lines.append(
            f"| {precision} | {device} | {sps:,.0f} | {sps / base:.2f}× | {loss:.4f} | {acc:.4f} |"
        )
    if not torch.cuda.is_available():
        lines += ["", "No GPU on this machine: the fp16 and GPU bf16 arms did not run."]
    lines += [
        "",
        "bf16 keeps fp32's exponent range, so it needs no gradient scaler; its 8-bit mantissa "
        "costs precision in the forward pass only (weights, gradients and Adam's state stay "
        "fp32). On a CPU without native bf16 matrix units autocast adds casts and is not "
        "expected to be faster; the win is on hardware with bf16 units (recent Xeon AMX, "
        "GPUs).",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run the arms, print the table and write the docs section unless ``--no-write``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.load = os.getloadavg()[0]
    torch.set_num_threads(1)
    arrays, shape, spec = _data(args.days)
    rows: dict[tuple[str, str], list[dict]] = {a: [] for a in _arms()}
    for rep in range(args.reps):
        for precision, device in rows:
            result = arm(precision, device, arrays, shape, spec, args)
            rows[(precision, device)].append(result)
            print(rep, precision, device, result, flush=True)
    body = _render(rows, args)
    print(body)
    if not args.no_write:
        write_section("mixed-precision", body)


if __name__ == "__main__":
    main()
