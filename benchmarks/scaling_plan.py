"""Scaling plan (issue 16): the model's predicted 2-worker efficiency against a measured one,
the 256-GPU ResNet-50 projection beside published figures, the memory estimate's error, and
a compression hook's effect on step time and on the metric.

Measured here: one worker's step (calibration, in this process), then Ray actors in a gloo
group with 1 and 2 workers timing all-reduce and DDP steps of the same model at the same
per-worker batch (weak scaling, so efficiency = T(1)/T(2)). The headline prediction is
engage plan's: the calibration, the network fitted to the 2-worker all-reduce timings, the
overlap measured by the communication timer, the step spread, and the node's contention (the
plain step with both workers stepping at once over one alone). Other rows take the compute
from the 1-worker run instead of the calibration, or leave the contention out.

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

    ``predicted`` is engage plan's model as ``engage plan`` builds it on this machine (step
    calibrated in this process; network, overlap, node contention and step spread from the
    probes); ``predicted_t1`` the same with the compute of one step taken from the 1-worker
    run on Ray instead; the ``_nocont`` twins leave the node's contention out (the model before
    it had that term); ``predicted_min`` uses the fastest repeats throughout.
    """
    from engage.train.scaling.calibrate import calibrate
    from engage.train.scaling.model import ScalingModel, straggler_factor
    from engage.train.scaling.netprobe import contention, fit_network, probe
    from engage.train.scaling.planner import (
        in_step_network,
        measured_overlap_share,
        ray_speed,
    )

    rows = []
    for name, sets in MODELS.items():
        job = _job(sets)
        batch = job.train.batch_size // job.train.num_workers
        cal = calibrate(job, batch, steps=steps)
        one = probe(job, 1, batch, steps=steps)
        two = probe(job, 2, batch, steps=steps)
        # As engage plan builds its model here (planner.build_report on --device cpu).
        fitted = fit_network(2, two.allreduce)
        net = in_step_network(cal.step, fitted, two)
        shared = contention(one, two)
        hidden = two.comm.get("allreduce_overlap", 0.0)  # share of all-reduce time hidden
        speed, _ = ray_speed(cal, two, batch)
        overlap, _ = measured_overlap_share(cal.step, net, hidden, batch, shared, speed, True)
        model = ScalingModel(cal.step, net, overlap=overlap, contention=shared, speed=speed)
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
                "predicted": model.efficiency(2, batch),
                "predicted_cal": model.with_(speed=1.0).efficiency(2, batch),
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
    "Why the previous model missed (72% on mlp 1024x3 in the last committed run; 8-104% in the "
    "runs made while fixing it): it took the compute of a 2-worker step from one worker alone "
    "and the all-reduce from back-to-back probes on otherwise idle processes, and put the rest "
    "down to stragglers. On this 2-core machine neither holds: with both workers stepping, "
    "each one's plain step (no gradient exchange) took 1.1-2.5x as long as alone (the two "
    "cores, memory bandwidth and caches shared, and the machine's other work on the same "
    "cores), and the all-reduce inside a DDP step took 0.6-8x the back-to-back one (it waits "
    "for the slower worker, and its gloo threads share the cores with the backward pass). The "
    "1-worker and 2-worker runs were also timed minutes apart under different load (compare "
    "the separate-run figures above). And the timer's overlap (over half of the larger "
    "model's all-reduce ran beside the backward pass) was read as a share of the backward, "
    "which hid the whole all-reduce; on CPU cores the workers keep busy that all-reduce runs "
    "on the same cores as the backward pass, concurrent but not hidden, so the model now "
    "counts none of it there (elsewhere the measured share is converted to a share of the "
    "backward). The probe now times, interleaved so that all see the same load: rank "
    "0's plain step alone, every worker's plain step at once, and the DDP step; the model "
    "multiplies the compute of N > 1 workers on a node by the contention, scales the fitted "
    "link to the all-reduce measured inside DDP steps, and adds no separate straggler term "
    "(that wait is inside the measured all-reduce). The load on this shared machine changes "
    "within seconds (1-minute averages between 1 and 60 while this was developed), so a "
    "repeat moves the measured and predicted figures by tens of percent (two runs at load "
    "10-16 gave 14% and 13%, then 18% and 34% before the overlap change). Every figure is as "
    "measured, none tuned to the run."
)
LOAD: list[float] = []  # 1-minute load averages at the start and the end of the run


def plan_error(e: dict) -> float:
    """The relative error of engage plan's own prediction (the headline row) for one model."""
    return abs(e["predicted"] - e["measured"]) / e["measured"]


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
        "The first row of each model is engage plan's own prediction, as `engage plan` builds "
        "it here: the step's shape (per-sample and fixed cost, backward share) calibrated in this "
        "process and its length from rank 0's step on Ray; the link (scaled to the all-reduce "
        "inside DDP steps), the overlap and the node's contention measured on Ray. The others "
        "show what each input does.",
        "",
        "| model | grads | batch/worker | prediction | T(1) | T(2) | efficiency measured | "
        "predicted | error |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in eff:
        for stat, pred in (
            ("**engage plan**", e["predicted"]),
            ("engage plan, compute calibrated in-process", e["predicted_cal"]),
            ("engage plan without the node's contention", e["predicted_nocont"]),
            ("previous model (probe link, stragglers, no contention)", e["predicted_prev"]),
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
        + " measured that way); T(2): the median DDP step, the slower worker's. Inputs: "
        + "; ".join(
            f"{e['name']}: node contention x{e['contention']:.2f} (plain step "
            f"{1e3 * e['t1']:.2f} ms alone, {1e3 * e['local2']:.2f} ms with both workers "
            f"stepping at once); all-reduce {1e3 * e['comm_meas']:.2f} ms inside DDP steps "
            f"(the hook, waiting for the peer included) against {1e3 * e['comm_fitted']:.2f} ms "
            f"from the link fitted to back-to-back all-reduces ({8 * e['bandwidth'] / 1e9:.2f} "
            f"Gb/s, {1e6 * e['latency']:.0f} µs/hop), so the link is scaled by "
            f"x{e['in_step_k']:.1f}; {e['hidden']:.0%} of the all-reduce ran beside the backward "
            f"pass (counted as {e['overlap']:.0%} hidden: same busy cores); straggler factor {e['straggle']:.2f} (used "
            "by the previous model only)"
            for e in eff
        )
        + ". What the model leaves out, per 2-worker step (T(2) less the contended compute "
        "and the exposed all-reduce): "
        + ", ".join(
            f"{e['name']} {1e3 * (e['t2'] - e['contention'] * e['t1'] - e['comm_meas'] * (1 - e['overlap'])):.2f} ms"
            for e in eff
        )
        + " (where positive, DDP's own work per step, bucket copies, the hook's futures and "
        "Python, which weighs most on the small model's 2-3 ms step; where negative, the model "
        "counts more than the step took)"
        + ". The error target is 15%; engage plan's prediction is "
        + ", ".join(f"{e['name']} {plan_error(e):.0%} off" for e in eff)
        + ". "
        + EXPLAIN,
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
