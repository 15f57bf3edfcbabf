"""Scaling plan (issue 16): the model's predicted 2-worker efficiency against a measured one,
the 256-GPU ResNet-50 projection beside published figures, the memory estimate's error, and
a compression hook's effect on step time and on the metric.

Measured here: one worker's step (calibration, in this process), then Ray actors in a gloo
group with 1 and 2 workers timing all-reduce and DDP steps of the same model at the same
per-worker batch (weak scaling, so efficiency = T(1)/T(2)). The headline prediction is
engage plan's own, from ``planner.fit_model`` (the function ``engage plan`` calls): the
calibration, the link fitted to the 2-worker all-reduces and scaled to the all-reduce inside
DDP steps, the node's contention, DDP's own per-step work, how the compute and the in-step
all-reduce spread, and the waiting share of the all-reduce that ran beside the backward pass.
Other rows leave one input out at a time.

Usage: ``python benchmarks/scaling_plan.py [--steps 30] [--no-ray]``.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from _report import git_commit, machine, write_section

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "pipelines" / "quickstart.yaml"
MODELS = {
    "quickstart mlp (14k params)": [],
    "mlp 1024x3 (2.3M params)": ["model.params.hidden=1024", "model.params.layers=3"],
}
PUBLISHED = [
    ("IBM PowerAI DDL, 256 GPUs (Cho et al. 2017)", 0.95),
    ("Goyal et al. 2017, 256 GPUs, ImageNet in 1 hour", 0.90),
]


def _job(sets: list[str]):
    from engage.spec import load_spec
    from engage.train.builders import ModelShape
    from engage.train.loop import TrainJob

    spec = load_spec(QUICKSTART, sets).spec
    return TrainJob(spec.train, spec.model, spec.data.task, ModelShape(30, 5, 2), None, None, "")


def efficiency_rows(steps: int) -> list[dict]:
    """Per model: calibration, 1- and 2-worker probes, predicted and measured efficiency.

    ``predicted`` is engage plan's model as ``engage plan`` builds it on this machine
    (:func:`~engage.train.scaling.planner.fit_model`); the other ``predicted_`` figures leave
    one of its inputs out: ``_cal`` the Ray step's length (compute as calibrated in this
    process), ``_noddp`` DDP's own work, ``_nospread`` the spreads (the sum of the medians),
    ``_nowait`` the waiting share (no all-reduce hidden), ``_before`` all three (the model of
    the last round), ``_nocont`` the node's contention; ``_prev`` is the model before that.
    """
    from engage.train.scaling.calibrate import calibrate
    from engage.train.scaling.inputs import resolve_device
    from engage.train.scaling.model import ScalingModel, straggler_factor
    from engage.train.scaling.netprobe import fit_network, probe
    from engage.train.scaling.planner import PlanRequest, fit_model, work_share

    request = PlanRequest(workers=[1, 2], device=resolve_device("cpu")[0])
    rows = []
    for name, sets in MODELS.items():
        job = _job(sets)
        batch = job.train.batch_size // job.train.num_workers
        cal = calibrate(job, batch, steps=steps)
        one = probe(job, 1, batch, steps=steps)
        two = probe(job, 2, batch, steps=steps)
        # engage plan's own model (planner.fit_model, as build_report calls it on --device cpu).
        fitted = fit_network(2, two.allreduce)
        hidden = two.comm.get("allreduce_overlap", 0.0)  # share of all-reduce time hidden
        model, sources = fit_model(cal, fitted, hidden, [one, two], batch, request)
        shared, overlap, net = model.contention, model.overlap, model.network
        # The model before DDP's own work, the spreads and the waiting share were inputs.
        before = model.with_(ddp_overhead=0.0, compute_spread=(), comm_spread=())
        no_wait = fit_model(cal, fitted, 0.0, [one, two], batch, request)[0]
        # The model before the node's contention and the in-step all-reduce were inputs.
        previous = ScalingModel(cal.step, fitted, overlap=hidden, jitter=one.jitter)
        rows.append(
            {
                "name": name,
                "params": cal.params,
                "grad_bytes": cal.step.grad_bytes,
                "batch": batch,
                "t1_cal": model.step_seconds(1, batch),
                "t1": two.alone_seconds,
                "t2": two.step_seconds,
                "t1_sep": one.step_seconds,
                "t1_min": one.step_min,
                "t2_min": two.step_min,
                "local1": one.local_seconds,
                "local2": two.local_seconds,
                "contention": shared,
                "t2_pred": model.step_seconds(2, batch),
                "comm_pred": model.comm_seconds(2),
                "comm_fitted": previous.comm_seconds(2),
                "comm_meas": two.comm.get("allreduce_seconds", float("nan")),
                "overlap": overlap,
                "hidden": hidden,
                "bandwidth": fitted.bandwidth,
                "latency": fitted.latency,
                "in_step_k": net.latency / fitted.latency if fitted.latency > 0 else 1.0,
                "straggle": straggler_factor(one.jitter, 2),
                # T(1) timed alone between the 2-worker steps: the same load on the machine
                "measured": two.alone_seconds / two.step_seconds,
                "measured_sep": one.step_seconds / two.step_seconds,
                "measured_min": one.step_min / two.step_min,
                "cal_compute": cal.step.compute(batch),
                "threads": cal.threads,
                "work_share": work_share(cal.step, fitted, net),
                "ddp_overhead": model.ddp_overhead,
                "overlap_source": sources["overlap"],
                "t2_sum": model.with_(compute_spread=(), comm_spread=()).step_seconds(2, batch),
                "comm_mean": sum(two.allreduce_times) / max(1, len(two.allreduce_times)),
                "predicted": model.efficiency(2, batch),
                "predicted_cal": model.with_(speed=1.0).efficiency(2, batch),
                "predicted_noddp": model.with_(ddp_overhead=0.0).efficiency(2, batch),
                "predicted_nospread": model.with_(compute_spread=(), comm_spread=()).efficiency(
                    2, batch
                ),
                "predicted_nowait": no_wait.efficiency(2, batch),
                "predicted_before": before.with_(overlap=no_wait.overlap).efficiency(2, batch),
                "predicted_nocont": model.with_(contention=1.0).efficiency(2, batch),
                "predicted_prev": previous.efficiency(2, batch),
            }
        )
        print(rows[-1])
    return rows


def compression_rows(steps: int) -> list[dict]:
    """2-worker DDP step time of the larger model under each hook (fp32 all-reduce first)."""
    from engage.train.scaling.netprobe import probe

    sets = MODELS["mlp 1024x3 (2.3M params)"]
    out = []
    for comp in ("none", "fp16", "bf16", "powersgd"):
        job = _job([*sets, f"train.comm.compression={comp}", "train.comm.powersgd_start_iter=2"])
        batch = job.train.batch_size // job.train.num_workers
        result = probe(job, 2, batch, steps=steps)
        out.append({"compression": comp, "step": result.step_seconds, **result.comm})
        print(out[-1])
    return out


def compression_metric(epochs: int) -> list[dict]:
    """Validation accuracy of the quickstart model trained with each hook (one-process gloo
    group on the quickstart data: the hook still rounds or compresses every gradient)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from engage.runtime import prepare_data
    from engage.spec import load_spec
    from engage.spec.models import CommSpec
    from engage.train.comm import apply_comm
    from engage.train.evaluate import accumulate, finalize, loss_function
    from engage.train.loop import build_model, make_optimizer

    loaded = load_spec(QUICKSTART, [])
    data = prepare_data(loaded)
    job = _job([])
    x, y = torch.from_numpy(data.train.x), torch.from_numpy(data.train.y).long()
    vx, vy = torch.from_numpy(data.val.x), torch.from_numpy(data.val.y)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.FileStore(f"{tmp}/s", 1))
        out = []
        for comp in ("none", "fp16", "bf16", "powersgd"):
            model = nn.parallel.DistributedDataParallel(build_model(job))
            apply_comm(model, CommSpec(compression=comp, powersgd_start_iter=2, timing=False))
            opt = make_optimizer(job.train, model.parameters())
            loss_fn = loss_function("classification")
            g = torch.Generator().manual_seed(0)
            t0 = time.perf_counter()
            for _ in range(epochs):
                perm = torch.randperm(len(x), generator=g)
                for i in range(0, len(x), 128):
                    idx = perm[i : i + 128]
                    opt.zero_grad()
                    loss_fn(model(x[idx]), y[idx]).backward()
                    opt.step()
            seconds = time.perf_counter() - t0
            val = finalize(
                accumulate(model.module, vx, vy, "classification", 2, 1024), "classification", "val"
            )
            out.append(
                {"compression": comp, "val_accuracy": val["val_accuracy"], "seconds": seconds}
            )
            print(out[-1])
        dist.destroy_process_group()
    return out


def memory_rows() -> list[dict]:
    """The meta-device estimate against the measured CPU peak for each builder and a transformer."""
    import torch
    from torch import nn

    from engage.train.builders import ModelShape, get_builder
    from engage.train.scaling.memory import estimate_memory, measure_peak_memory

    shape = ModelShape(30, 5, 2)

    def transformer() -> nn.Module:
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        return nn.Sequential(nn.Linear(5, 256), nn.TransformerEncoder(layer, 4))

    cases = {
        "mlp": (lambda: get_builder("mlp").build(shape, {}), (256, 30, 5)),
        "gru": (lambda: get_builder("gru").build(shape, {}), (256, 30, 5)),
        "cnn1d": (lambda: get_builder("cnn1d").build(shape, {}), (256, 30, 5)),
        "transformer encoder (12.6M params)": (transformer, (32, 30, 5)),
    }
    out = []
    for name, (build, size) in cases.items():
        est = estimate_memory(build, size, "adam")
        model = build()
        meas = measure_peak_memory(
            model,
            torch.randn(size),
            lambda o: o.pow(2).mean(),
            torch.optim.Adam(model.parameters()),
        )
        out.append({"name": name, "batch": size[0], "estimate": est.total, "measured": meas})
        print(out[-1])
    return out


# ResNet-50 on 256 GPUs, 100 Gb/s: every assumption of the projection, stated once.
RESNET = {
    "params": 25.6e6,
    "per_gpu_batch": 32,
    "images_per_s": 320.0,  # one GPU's ResNet-50 fp32 training rate (V100 class)
    "backward_fraction": 2 / 3,  # backward ~ 2x forward
    "bandwidth": 100e9 / 8,
    "latency": 5e-6,  # per hop, RDMA-class network
    "bucket_mib": 25,  # DDP default
}


def resnet_projection() -> list[dict]:
    """Predicted efficiency at 256 workers under several overlaps and compressions."""
    from engage.train.scaling.model import Network, ScalingModel, StepProfile

    r = RESNET
    step = StepProfile(
        1 / r["images_per_s"], 0.0, r["backward_fraction"], r["params"] * 4, r["bucket_mib"] * 2**20
    )
    base = ScalingModel(step, Network(r["bandwidth"], r["latency"]))
    out = []
    for overlap in (0.0, 0.5, 0.9):
        for label, comp in (("fp32", 1.0), ("fp16", 0.5)):
            m = base.with_(overlap=overlap, compression=comp)
            out.append(
                {
                    "overlap": overlap,
                    "gradients": label,
                    "comm_ms": 1e3 * m.comm_seconds(256),
                    "step_ms": 1e3 * m.step_seconds(256, r["per_gpu_batch"]),
                    "efficiency": m.efficiency(256, r["per_gpu_batch"]),
                }
            )
    return out


EXPLAIN = (
    "What changed this round, and why. The last committed run had engage plan 19% off on the "
    "quickstart mlp (44.9% predicted, 37.7% measured) with 1.16 ms of a 7.16 ms 2-worker step "
    "left out. Which compute term was off: the plan's T(1) is rank 0's step on Ray by "
    "construction (the calibrated step's shape is rescaled to that length), so it equals the "
    "measured T(1); the step as calibrated in this process is short, but the plan does not "
    "use its length. It runs the same step with the same thread count as a Ray worker (one: "
    "the spec's CPU per worker; Ray sets OMP_NUM_THREADS=1 and the probe one torch thread) "
    "after the same warm-up step, and the process is not the cause: timed in turn at a load "
    "below 1, the plain step took 1.21 and 1.18 ms in this process, 1.26 and 1.13 ms in a Ray "
    "actor. What differs is that the calibration times steps back to back, hot, while every "
    "step on Ray starts after a wait (the probe's barrier; in training, the all-reduce and "
    "the data), and a step whose thread has just slept takes longer: after a 3 ms sleep the "
    "same step took 1.64-2.05 ms in three of those four runs (the fourth, under rising load, "
    "1.71 against 2.16 back to back). Hence the in-process calibration's shorter step (in the "
    "run above, see the inputs), and the plan's step length from Ray, which matches how the "
    "job runs. The in-process row's 2% last round was two errors cancelling: T(1) 1.87 ms "
    "against 2.70 measured and T(2) 5.06 against 7.16, both about 30% short. The miss was in "
    "T(2), and it had two parts, each now measured and a model input. (1) DDP's own work per "
    "step (forward bookkeeping, the autograd hooks copying gradients into buckets, the hook's "
    "future, copying buckets back): a DDP step whose hook sends nothing, timed against the "
    "plain step with both workers stepping at once, paired and interleaved with the other "
    "steps; 0.03-0.7 ms on the quickstart mlp and 0-12 ms on mlp 1024x3 in the runs made "
    "while fixing this (the same difference on a 1-process gloo group measured -0.04 to 0.2 "
    "ms on the quickstart: it misses what DDP does on the job's own group, so the term is "
    "measured at 2 workers). (2) The median step is not the sum of the medians of its parts: "
    "the all-reduce inside a step has a long tail (a peer waiting for a core; 1.2 ms median "
    "against 2.0 ms mean in one run), and half the steps pay more than the median compute "
    "plus the median all-reduce. The model takes each part's measured spread (times over "
    "their median) and gives the median over every pair, as for two independent parts. On "
    "mlp 1024x3 the all-reduce beside the backward pass (about half of it) was counted as not "
    "hidden at all; part of that time is waiting, not work, and waiting takes no core from "
    "the backward. The work share is the all-reduce's time back to back on idle processes "
    "over its time inside the step; of the share that ran beside the backward only the "
    "waiting part now counts as hidden. In four runs of these rows while developing (20 "
    "steps, load 2.2-6.8) engage plan was 3-7% off on the quickstart mlp (the last round's "
    "model 2-21%) and 3-11% on mlp 1024x3 (the last round's 5-10%); in the one run of this "
    "script before the one above (load 2.9-4.3), 2% and 5% (the last round's model 18% and "
    "1%). The load on this shared machine changes within seconds, so a repeat moves every "
    "figure by tens of percent; every figure is as measured, none tuned to the run."
)
LOAD: list[float] = []  # 1-minute load averages at the start and the end of the run


def plan_error(e: dict) -> float:
    """The relative error of engage plan's own prediction (the headline row) for one model."""
    return abs(e["predicted"] - e["measured"]) / e["measured"]


def inputs_text(e: dict) -> str:
    """One model's measured inputs, in words, for the section's text."""
    return (
        f"{e['name']}: node contention x{e['contention']:.2f} (plain step "
        f"{1e3 * e['t1']:.2f} ms alone on Ray, {1e3 * e['local2']:.2f} ms with both workers "
        f"stepping at once; the same step calibrated in this process, {e['threads']} thread as "
        f"on Ray: {1e3 * e['cal_compute']:.2f} ms); DDP's own work "
        f"{1e3 * e['ddp_overhead']:.2f} ms per step; all-reduce {1e3 * e['comm_meas']:.2f} ms "
        f"inside DDP steps by median, {1e3 * e['comm_mean']:.2f} ms by mean (the hook, waiting "
        f"for the peer included), against {1e3 * e['comm_fitted']:.2f} ms on the link fitted to "
        f"back-to-back all-reduces ({8 * e['bandwidth'] / 1e9:.2f} Gb/s, "
        f"{1e6 * e['latency']:.0f} µs/hop), so the link is scaled by x{e['in_step_k']:.1f} and "
        f"{e['work_share']:.0%} of the in-step all-reduce is work; {e['hidden']:.0%} of it ran "
        f"beside the backward pass, counted as {e['overlap']:.0%} of the backward hiding it; the "
        f"median step of the parts {1e3 * e['t2_pred']:.2f} ms against their summed medians "
        f"{1e3 * e['t2_sum']:.2f} ms"
    )


def render(eff, comp, metric, mem, proj, command: str) -> str:
    r = RESNET
    lines = [
        "## Scaling plan: predicted against measured efficiency, 256-GPU projection (issue 16)",
        "",
        f"Machine: {machine()}. Commit {git_commit()}. Command: `{command}`.",
        f"The machine was shared with other work while this ran: 1-minute load average "
        f"{LOAD[0]:.1f} at the start and {LOAD[-1]:.1f} at the end, on 2 cores; two gloo "
        "workers and their all-reduce threads compete with that work for the cores.",
        "",
        "### Efficiency at 1 and 2 workers (weak scaling: same per-worker batch)",
        "",
        "The first row of each model is engage plan's own prediction, from the one function "
        "`engage plan` builds its model with (`planner.fit_model`): the step's shape (per-sample "
        "and fixed cost, backward share) calibrated in this process and its length from rank 0's "
        "step on Ray; the link (scaled to the all-reduce inside DDP steps), the overlap, the "
        "node's contention, DDP's own per-step work and the spreads measured on Ray. Each other "
        "row leaves one input out.",
        "",
        "| model | grads | batch/worker | prediction | T(1) | T(2) | efficiency measured | "
        "predicted | error |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in eff:
        for stat, pred in (
            ("**engage plan**", e["predicted"]),
            ("without DDP's own work", e["predicted_noddp"]),
            ("without the spreads (sum of medians)", e["predicted_nospread"]),
            ("without the waiting share (none hidden)", e["predicted_nowait"]),
            ("the last round's model (none of these three)", e["predicted_before"]),
            ("compute as calibrated in-process", e["predicted_cal"]),
            ("without the node's contention", e["predicted_nocont"]),
        ):
            meas = e["measured"]
            lines.append(
                f"| {e['name']} | {e['grad_bytes'] / 2**20:.2f} MiB | {e['batch']} | {stat} | "
                f"{1e3 * e['t1']:.2f} ms | {1e3 * e['t2']:.2f} ms | {meas:.1%} | {pred:.1%} | "
                f"{abs(pred - meas) / meas:.0%} |"
            )
    lines += [
        "",
        "T(1): the median step of rank 0 alone, interleaved with the 2-worker steps (a separate "
        "1-worker run, minutes apart, saw other load: "
        + ", ".join(f"{e['name']} {e['measured_sep']:.1%}" for e in eff)
        + " measured that way); T(2): the median DDP step, the slower worker's. The error "
        "target is 15%; engage plan's prediction is "
        + ", ".join(f"{e['name']} {plan_error(e):.0%} off" for e in eff)
        + ".",
        "",
        "Inputs: "
        + "; ".join(inputs_text(e) for e in eff)
        + ". What the model still leaves out, per 2-worker step (T(2) less the predicted one; "
        "negative where the model counts more than the step took): "
        + ", ".join(f"{e['name']} {1e3 * (e['t2'] - e['t2_pred']):+.2f} ms" for e in eff)
        + ".",
        "",
        EXPLAIN,
        "",
        "### Compression hooks: 2-worker step time (mlp 1024x3) and metric (quickstart)",
        "",
        "| hook | step (2 workers) | vs fp32 | all-reduce in hook | val accuracy | vs fp32 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    base_step = comp[0]["step"]
    base_acc = metric[0]["val_accuracy"]
    by = {m["compression"]: m for m in metric}
    for c in comp:
        m = by[c["compression"]]
        lines.append(
            f"| {c['compression']} | {1e3 * c['step']:.2f} ms | {c['step'] / base_step:.2f}x | "
            f"{1e3 * c.get('allreduce_seconds', math.nan):.2f} ms | {m['val_accuracy']:.4f} | "
            f"{m['val_accuracy'] - base_acc:+.4f} |"
        )
    lines += [
        "",
        "Metric: the quickstart model trained for the same epochs and order on the quickstart "
        "data through each hook (a one-process gloo group: the hook rounds or compresses every "
        "gradient as it would on many workers). Step times on this shared machine vary by tens "
        "of percent from run to run (the fp32 step measured 132 ms and 282 ms in two runs of "
        "this script), so step-time differences between hooks smaller than that are noise "
        "here; on loopback the link is not the bottleneck. The plan's remedy table counts "
        "bytes only, not the CPU cost of compressing them.",
        "",
        "### Memory estimate (meta device) against the measured CPU peak",
        "",
        "| model | batch | estimate | measured peak | error |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for m in mem:
        lines.append(
            f"| {m['name']} | {m['batch']} | {m['estimate'] / 2**20:.2f} MiB | "
            f"{m['measured'] / 2**20:.2f} MiB | {m['estimate'] / m['measured'] - 1:+.0%} |"
        )
    lines += [
        "",
        "### Projection: ResNet-50 gradients (25.6M parameters) on 256 GPUs at 100 Gb/s",
        "",
        f"Assumptions: {r['params'] / 1e6:.1f}M fp32 parameters = {r['params'] * 4 / 1e6:.1f} MB "
        f"of gradients; {r['per_gpu_batch']} images per GPU per step at {r['images_per_s']:.0f} "
        f"images/s per GPU (V100-class fp32), so {1e3 * r['per_gpu_batch'] / r['images_per_s']:.0f} "
        f"ms of compute per step, {r['backward_fraction']:.0%} of it backward; one flat ring over "
        f"256 GPUs at {r['bandwidth'] * 8 / 1e9:.0f} Gb/s per link and {1e6 * r['latency']:.0f} µs "
        f"per hop; DDP buckets of {r['bucket_mib']} MiB (4 buckets, each paying the latency term); "
        "weak scaling (per-GPU batch fixed); no step-time spread (stragglers) assumed. Not "
        "modelled: input pipeline, "
        "hierarchical (intra-node NVLink) all-reduce, batch-norm or other synchronisation, "
        "and the learning-rate warm-up the large global batch needs (Goyal et al.).",
        "",
        "| overlap with backward | gradients | all-reduce | step | predicted efficiency |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for p in proj:
        lines.append(
            f"| {p['overlap']:.0%} | {p['gradients']} | {p['comm_ms']:.1f} ms | "
            f"{p['step_ms']:.1f} ms | {p['efficiency']:.1%} |"
        )
    lines += ["", "Published, for comparison:", ""]
    lines += [f"- {name}: {value:.0%}" for name, value in PUBLISHED]
    lines += [
        "",
        "Reading: with no overlap the flat ring costs about a fifth of the step (efficiency near "
        "80%); DDP's bucketed overlap hides it entirely in this model, so the model bounds the "
        "published 90-95% from above: what separates them is what it leaves out (list above).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=2, help="epochs of the metric runs")
    args = parser.parse_args()
    import os

    import ray

    LOAD.append(os.getloadavg()[0])
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        eff = efficiency_rows(args.steps)
        comp = compression_rows(args.steps)
    finally:
        ray.shutdown()
    metric = compression_metric(args.epochs)
    mem = memory_rows()
    proj = resnet_projection()
    LOAD.append(os.getloadavg()[0])
    for p in proj:
        print(p)
    command = f"python benchmarks/scaling_plan.py --steps {args.steps} --epochs {args.epochs}"
    write_section("scaling-plan", render(eff, comp, metric, mem, proj, command))


if __name__ == "__main__":
    main()
