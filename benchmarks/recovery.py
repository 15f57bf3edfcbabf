"""Recovery from a killed training worker: time to progress again and work lost, by interval.

The quickstart through ``run_pipeline`` on one embedded Ray cluster (2 workers), with a
slow input pipeline (``train.faults.data_delay_seconds``) so an epoch lasts seconds. In each
arm the last-ranked worker SIGKILLs itself halfway through epoch ``--kill-epoch``
(``train.faults.kill_worker_at_epoch``); Ray Train restarts both workers from the newest
valid checkpoint (``train.max_failures: 2``). Per ``train.checkpoint_every`` it reports:

- recovery: seconds from the kill to the first training step of the restarted workers;
- work lost: seconds of training between the checkpoint resumed from and the kill (trained
  again after the restart);
- the train stage's wall time against the same job without a kill.

The same job with Ray Train's default failure budget (``train.max_failures: 0``) is the
comparison: it fails at the kill, and everything trained so far is lost.

    .venv/bin/python benchmarks/recovery.py            # writes its section of docs/BENCHMARKS.md
    .venv/bin/python benchmarks/recovery.py --intervals 1 --no-write
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray
from _report import git_commit, machine, write_section

from engage.errors import EngageError
from engage.events import Event
from engage.runtime.pipeline import RunOptions, run_pipeline
from engage.spec import load_spec

SPEC = Path(__file__).resolve().parents[1] / "pipelines" / "quickstart.yaml"


class Recorder:
    """An observer that keeps every event of the job."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def stage(self, name: str, detail: str = "") -> None:
        """Stage boundaries are not needed here."""

    def emit(self, events: Sequence[Event]) -> None:
        """Keep the batch."""
        self.events.extend(events)


def _overrides(args, every: int, budget: int, kill: bool) -> list[str]:
    out = [
        f"train.epochs={args.epochs}",
        f"train.checkpoint_every={every}",
        f"train.checkpoints_to_keep={args.epochs}",
        f"train.max_failures={budget}",
        f"train.faults.data_delay_seconds={args.delay}",
        f"data.source.days={args.days}",
        "deploy.after_training=false",
        "export.formats=[]",
        "tracking.registration=null",
    ]
    return [*out, f"train.faults.kill_worker_at_epoch={args.kill_epoch}"] if kill else out


def _times(events: list[Event], kind: str, name: str, **labels: str) -> list[tuple[float, Event]]:
    return [
        (e.timestamp_ms / 1000, e)
        for e in events
        if e.kind == kind
        and e.name == name
        and all(e.labels.get(k) == v for k, v in labels.items())
    ]


def _analyse(events: list[Event], home: Path) -> dict:
    """Kill time, recovery seconds and work lost from the job's events and the kill marker."""
    marker = next((home / "ray_results").glob("*/engage-fault-killed.txt"))
    killed_at = float(marker.read_text().split()[0])
    starts = sorted(t for t, _ in _times(events, "lifecycle", "train_start", rank="0"))
    steps_after = [
        t for t, _ in _times(events, "metric", "step_seconds", rank="0") if t > killed_at
    ]
    restart = [e for _, e in _times(events, "lifecycle", "restart")]
    resumed = int(restart[0].data["epoch"]) if restart else None
    out = {"killed_after_s": killed_at - starts[0], "resumed_epoch": resumed}
    if resumed is None:
        out["work_lost_s"] = killed_at - starts[0]
        return out
    ends = {int(e.step): t for t, e in _times(events, "metric", "epoch", rank="0") if t < killed_at}
    since = ends.get(resumed - 1, starts[0])
    out["work_lost_s"] = killed_at - since
    out["recovery_s"] = (min(steps_after) - killed_at) if steps_after else float("nan")
    return out


def arm(args, every: int, budget: int, kill: bool, base: Path) -> dict:
    """One job; its train-stage seconds, whether it finished, and the recovery figures."""
    home = base / f"every{every}-budget{budget}-{'kill' if kill else 'clean'}" / ".engage"
    recorder = Recorder()
    loaded = load_spec(SPEC, _overrides(args, every, budget, kill))
    started = time.perf_counter()
    try:
        result = run_pipeline(loaded, RunOptions(home=home), recorder)
        out = {"finished": True, "train_s": result.stage_seconds["train"]}
        out["val_loss"] = result.metrics["val_loss"]
        out["epoch_s"] = result.metrics.get("epoch_seconds", float("nan"))
    except EngageError as exc:
        out = {"finished": False, "error": type(exc).__name__}
    out["job_s"] = time.perf_counter() - started
    if kill:
        out |= _analyse(recorder.events, home)
    return out


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def _render(rows: dict, args) -> str:
    clean = rows["clean"]["train_s"]
    lines = [
        "## Recovery from a killed training worker (issue 15)",
        "",
        f"Machine: {machine()}; commit {git_commit()}; load average {args.load:.1f} at the "
        f"start (other jobs shared the cores). Command: `python benchmarks/recovery.py "
        f"--epochs {args.epochs} --kill-epoch {args.kill_epoch} --days {args.days} "
        f"--delay {args.delay} --intervals {' '.join(map(str, args.intervals))}`.",
        "",
        f"The quickstart, 2 Ray Train workers, {args.epochs} epochs of about "
        f"{args.epoch_s:.1f} s (a {args.delay} s input delay per batch); the last-ranked "
        f"worker SIGKILLs itself halfway through epoch {args.kill_epoch}. Recovery: kill to "
        "the first step of the restarted workers. Work lost: training time between the "
        "checkpoint resumed from and the kill, trained again. The train stage without a kill "
        f"took {clean:.1f} s.",
        "",
        "| arm | finished | resumed at epoch | recovery s | work lost s | train stage s | "
        "÷ no kill | final val_loss − no kill's |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rows.items():
        if name == "clean":
            continue
        train = r.get("train_s")
        ratio = f"{train / clean:.2f}×" if train else "–"
        lines.append(
            f"| {name} | {'yes' if r['finished'] else 'no: ' + r['error']} | "
            f"{r.get('resumed_epoch') or '–'} | {_f(r.get('recovery_s'))} | "
            f"{_f(r.get('work_lost_s'))} | {_f(train)} | {ratio} | "
            f"{_f(r['val_loss'] - rows['clean']['val_loss'], 3) if 'val_loss' in r else '–'} |"
        )
    lines += [
        "",
        "A resumed run ends with the uninterrupted run's val_loss exactly (the checkpoint "
        "restores the RNG states and the data position). "
        "With Ray Train's default budget (`max_failures: 0`) the job fails at the kill and "
        "all its training is lost: finishing means running the whole job again. Recovery "
        "time is mostly Ray Train noticing the dead worker and starting a new worker group "
        "(processes, torch, the process group); work lost grows with the checkpoint interval "
        "(up to `checkpoint_every` epochs), while checkpointing costs one write per interval. "
        "Recovery and work lost come from event timestamps within each run; the train "
        "stage's wall time carries the other jobs' load on the machine, which at the load "
        "average above is as large as the recovery itself (a ratio under 1× is that noise).",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run the arms on one local Ray, print the table and write the docs section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--kill-epoch", type=int, default=4)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.load = os.getloadavg()[0]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="engage-recovery-") as tmp:
        base = Path(tmp)
        rows["clean"] = arm(args, 1, 2, False, base)
        args.epoch_s = rows["clean"]["epoch_s"]
        for every in args.intervals:
            rows[f"checkpoint_every {every}, max_failures 2"] = arm(args, every, 2, True, base)
            print(rows, flush=True)
        rows["checkpoint_every 1, max_failures 0 (Ray default)"] = arm(args, 1, 0, True, base)
    ray.shutdown()
    print(rows, flush=True)
    body = _render(rows, args)
    print(body)
    if not args.no_write:
        write_section("recovery", body)


if __name__ == "__main__":
    main()
