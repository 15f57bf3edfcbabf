"""What ``engage plan`` shows and keeps: the printed plan, plan.svg and plan.json, the MLflow run."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

PLAN_EXPERIMENT = "engage-plans"
"""The MLflow experiment plans are logged in (kept apart from the training runs they plan)."""


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 or x < 0.005 else f"${x:.2f}"


def _si(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.3g}"


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def curve_table(report: Any) -> Table:
    """The predicted curve: one row per worker count, the chosen one in bold."""
    table = Table(
        "N", "b/w", "global", "step ms", "comm ms", "samp/s", "eff", "train", "cost", "ok",
        box=box.SIMPLE, pad_edge=False,
    )  # fmt: skip
    best = report.plan.best
    for r in report.plan.rows:
        style = "bold green" if best is not None and r.workers == best.workers else None
        table.add_row(
            str(r.workers),
            f"{r.per_worker_batch:.0f}",
            f"{r.global_batch:.0f}",
            f"{r.step_seconds * 1e3:.3g}",
            f"{r.comm_seconds * 1e3:.3g}",
            _si(r.throughput),
            f"{r.efficiency:.1%}",
            _duration(r.train_seconds),
            _money(r.cost),
            "yes" if r.meets_deadline else "no",
            style=style,
        )
    return table


def remedy_table(report: Any) -> Table:
    """The communication remedies at the chosen worker count and what each gains."""
    table = Table("remedy", "bytes sent", "efficiency", "throughput gain", "pays", box=box.SIMPLE)
    for m in report.plan.remedies:
        table.add_row(
            m.name, f"{m.compression:.1%}", f"{m.efficiency:.1%}", f"{m.gain:+.1%}",
            "yes" if m.pays else "no",
        )  # fmt: skip
    return table


def print_report(console: Console, name: str, report: Any) -> None:
    """Print the plan: inputs and their sources, curve, choice, remedies, memory."""
    cal, model, req = report.calibration, report.model, report.request
    net = model.network
    console.print(f"[bold]engage plan[/] for [cyan]{name}[/] on {req.device.name} devices")
    console.print(
        f"calibrated step: {cal.step.seconds_per_sample * 1e6:.1f} µs/sample + "
        f"{cal.step.step_overhead * 1e3:.2f} ms/step, backward {cal.step.backward_fraction:.0%}, "
        f"{cal.params:,} parameters ({_bytes(cal.step.grad_bytes)} of gradients)"
    )
    console.print(
        f"network: {net.bandwidth * 8 / 1e9:.2f} Gb/s, {net.latency * 1e6:.1f} µs/hop "
        f"({report.sources['network']}); speed x{model.speed:.3g} ({report.sources['speed']}); "
        f"overlap {model.overlap:.0%} ({report.sources['overlap']})"
    )
    if model.contention != 1.0:
        console.print(
            f"shared node: one worker's compute takes x{model.contention:.2f} while the "
            "other workers compute too (measured on Ray, no gradient exchange)"
        )
    if model.ddp_overhead or model.comm_spread:
        spread = sorted(model.comm_spread) or [1.0]
        console.print(
            f"DDP's own work: {model.ddp_overhead * 1e3:.2f} ms per step; the all-reduce inside "
            f"a step took x{spread[0]:.2f}-x{spread[-1]:.2f} its median (the step's median "
            "counts how the parts spread, not the sum of their medians)"
        )
    if model.jitter:
        from engage.train.scaling.model import straggler_factor

        console.print(
            f"stragglers: the measured step-time spread makes a synchronous step wait "
            f"x{straggler_factor(model.jitter, 2):.2f} at 2 workers, "
            f"x{straggler_factor(model.jitter, max(req.workers)):.2f} at {max(req.workers)}"
        )
    scaling = (
        "per-worker batch fixed (weak scaling)" if req.mode == "weak" else "global batch fixed"
    )
    console.print(
        f"{report.epochs} epochs x {report.samples:,} samples, {scaling}, ${report.price:.2f}/device-hour"
        + (f", deadline {_duration(req.deadline_s)}" if req.deadline_s else "")
    )
    console.print(curve_table(report))
    plan = report.plan
    colour = "green" if plan.best is not None else "yellow"
    console.print(f"[{colour}]→ {plan.reason}[/]")
    console.print(f"communication remedies at {plan.remedies_at} workers:")
    console.print(remedy_table(report))
    paying = [m for m in plan.remedies if m.pays]
    if paying:
        top = max(paying, key=lambda m: m.gain)
        console.print(f"→ {top.name} pays: {top.gain:+.1%} throughput (set train.comm)")
    else:
        console.print("→ no compression pays here: communication is not what limits this job")
    mem, choice = report.memory, plan.memory
    console.print(
        f"memory per worker at batch {mem.batch}: parameters {_bytes(mem.params)}, gradients "
        f"{_bytes(mem.grads)}, optimiser {_bytes(mem.optimizer)}, activations "
        f"{_bytes(mem.activations)} = {_bytes(mem.total)}"
    )
    verdict = "fits" if choice.fits else "does NOT fit"
    console.print(
        f"→ {choice.strategy}: {_bytes(choice.per_worker_bytes)} of {_bytes(choice.capacity_bytes)} "
        f"usable ({verdict}); micro-batch {choice.micro_batch} x {choice.accumulation} step(s)"
        + (f" ({hint})" if (hint := memory_hint(choice)) else "")
    )
    auto = report.auto
    if auto is not None:
        console.print(
            f"→ train.strategy auto, the spec's {auto.workers} worker(s) here: {auto.describe()}"
        )
    elif report.auto_error:
        console.print(f"[yellow]→ {report.auto_error}[/]")


def memory_hint(choice: Any) -> str:
    """The spec fields that apply the memory choice (``train.strategy: auto`` applies it by
    itself; see :mod:`engage.train.scaling.strategy`)."""
    fields = ["train.strategy: fsdp"] if choice.strategy.startswith("fsdp") else []
    if "activation checkpointing" in choice.strategy:
        fields.append("train.activation_checkpointing: true")
    if choice.accumulation > 1:
        fields.append(
            f"micro-batches of {choice.micro_batch} per worker "
            f"(train.batch_size / workers) x train.grad_accumulation: {choice.accumulation}"
        )
    return ("set " + ", ".join(fields) + ", or train.strategy: auto") if fields else ""


def report_dict(report: Any) -> dict[str, Any]:
    """The plan as plain JSON-able data (plan.json and the run's artifact)."""
    return {
        "request": {**asdict(report.request), "device": report.request.device.name},
        "sources": report.sources,
        "calibration": asdict(report.calibration),
        "model": asdict(report.model),
        "memory": {**asdict(report.memory), "total": report.memory.total},
        "plan": asdict(report.plan),
        "epochs": report.epochs,
        "samples": report.samples,
        "price": report.price,
        "probes": [asdict(p) for p in report.probes],
        "auto": asdict(report.auto) if report.auto is not None else report.auto_error,
    }


def save_report(report: Any, name: str, folder: Path) -> tuple[Path, Path]:
    """Write ``plan.svg`` and ``plan.json`` into ``folder``; returns their paths."""
    from engage.train.scaling.plot import plan_svg

    folder.mkdir(parents=True, exist_ok=True)
    plan = report.plan
    workers = [r.workers for r in plan.rows]
    best_remedy = max(plan.remedies, key=lambda m: m.gain)
    efficiency = {"predicted": [r.efficiency for r in plan.rows], "ideal": [1.0] * len(workers)}
    if best_remedy.pays:
        m = report.model.with_(compression=best_remedy.compression, rounds=best_remedy.rounds)
        efficiency[best_remedy.name] = [
            m.efficiency(n, report.batch, report.request.mode) for n in workers
        ]
    cost = {"cost": [r.cost for r in plan.rows]}
    chosen = plan.best.workers if plan.best is not None else None
    svg = folder / "plan.svg"
    svg.write_text(plan_svg(f"engage plan: {name}", workers, efficiency, cost, chosen))
    data = folder / "plan.json"
    data.write_text(json.dumps(report_dict(report), indent=2, default=str))
    return svg, data


def log_report(loaded: Any, report: Any, folder: Path, tracking_uri: str | None, home: Path) -> str:
    """Log the plan as an MLflow run (parameters, the curve as metrics by worker count, the
    files of ``folder`` as artifacts) through the spool; returns the run id.

    Raises
    ------
    TrackingError
        The spool cannot be written.
    """
    from engage.cli.report_run import log_report_run
    from engage.events import Event

    req = report.request
    params = {
        "workers": ",".join(str(n) for n in req.workers),
        "device": req.device.name,
        "mode": req.mode,
        "price": report.price,
        "deadline_s": req.deadline_s,
        "bandwidth_bytes_per_s": report.model.network.bandwidth,
        "latency_s": report.model.network.latency,
        "overlap": report.model.overlap,
        "speed": report.model.speed,
        **{f"source.{k}": v for k, v in report.sources.items()},
        **(report.auto.tags() if report.auto is not None else {}),
    }
    return log_report_run(
        loaded,
        experiment=PLAN_EXPERIMENT,
        kind="plan",
        params=params,
        events=_metric_events(report, Event),
        folder=folder,
        tracking_uri=tracking_uri,
        home=home,
    )


def _metric_events(report: Any, event: Any) -> list[Any]:
    """The curve by worker count (as the step), and the choice as plain metrics."""
    events = []
    for r in report.plan.rows:
        for key in ("efficiency", "throughput", "train_seconds", "cost", "step_seconds"):
            events.append(event("metric", f"plan_{key}", float(getattr(r, key)), r.workers))
    best = report.plan.best
    chosen = {
        "plan_best_workers": best.workers if best else 0,
        "plan_best_cost": best.cost if best else float("nan"),
        "plan_memory_bytes": report.memory.total,
        "plan_memory_choice_bytes": report.plan.memory.per_worker_bytes,
    }
    events += [event("metric", k, float(v), 0) for k, v in chosen.items() if v == v]
    return events
