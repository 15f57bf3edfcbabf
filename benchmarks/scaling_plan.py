"""Scaling plan (issue 16): the model's predicted 2-worker efficiency against a measured one,
the 256-GPU ResNet-50 projection beside published figures, the memory estimate's error, and
a compression hook's effect on step time and on the metric.

Measured here: one worker's step (calibration, in this process), then Ray actors in a gloo
group with 1 and 2 workers timing all-reduce and DDP steps of the same model at the same
per-worker batch (weak scaling, so efficiency = T(1)/T(2)). The prediction uses the
calibration, the network fitted to the 2-worker all-reduce timings and the overlap measured by
the communication timer; a second prediction takes its compute time from the 1-worker run
instead of the calibration, which removes the difference between this process and an actor.

Usage: ``python benchmarks/scaling_plan.py [--steps 30] [--no-ray]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
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
    """Per model: calibration, 1- and 2-worker probes, predicted and measured efficiency."""
    from engage.train.scaling.calibrate import calibrate
    from engage.train.scaling.model import ScalingModel, straggler_factor
    from engage.train.scaling.netprobe import fit_network, probe

    rows = []
    for name, sets in MODELS.items():
        job = _job(sets)
        batch = job.train.batch_size // job.train.num_workers
        cal = calibrate(job, batch, steps=steps)
        one = probe(job, 1, batch, steps=steps)
        two = probe(job, 2, batch, steps=steps)
        net = fit_network(2, two.allreduce)
        overlap = two.comm.get("allreduce_overlap", 0.0)
        model = ScalingModel(cal.step, net, overlap=overlap)

        hide = overlap * cal.step.backward_fraction

        def with_t1(t1: float, comm: float, hide: float = hide) -> float:
            """Predicted T(1)/T(2) with compute time ``t1`` and all-reduce ``comm``."""
            return t1 / (t1 + max(0.0, comm - hide * t1))

        net_min = fit_network(2, two.allreduce_min)
        comm_min = model.with_(network=net_min).comm_seconds(2)
        rows.append(
            {
                "name": name,
                "params": cal.params,
                "grad_bytes": cal.step.grad_bytes,
                "batch": batch,
                "t1_cal": model.step_seconds(1, batch),
                "t1": one.step_seconds,
                "t2": two.step_seconds,
                "t1_min": one.step_min,
                "t2_min": two.step_min,
                "t2_pred": model.step_seconds(2, batch),
                "comm_pred": model.comm_seconds(2),
                "comm_min": comm_min,
                "comm_meas": two.comm.get("allreduce_seconds", float("nan")),
                "overlap": overlap,
                "bandwidth": net.bandwidth,
                "latency": net.latency,
                "bandwidth_min": net_min.bandwidth,
                "latency_min": net_min.latency,
                "predicted": model.efficiency(2, batch),
                "predicted_t1": with_t1(one.step_seconds, model.comm_seconds(2)),
                "measured": one.step_seconds / two.step_seconds,
                "predicted_min": with_t1(one.step_min, comm_min),
                "straggle": straggler_factor(one.jitter, 2),
                "predicted_straggle": one.step_seconds
                / (
                    statistics.fmean(one.step_times) * straggler_factor(one.jitter, 2)
                    + max(0.0, model.comm_seconds(2) - hide * one.step_seconds)
                ),
                "measured_min": one.step_min / two.step_min,
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


LOAD: list[float] = []  # 1-minute load averages at the start and the end of the run


def best_error(e: dict) -> float:
    """The smallest relative error among the efficiency rows of one model."""
    pairs = [
        (e["predicted"], e["measured"]),
        (e["predicted_t1"], e["measured"]),
        (e["predicted_straggle"], e["measured"]),
        (e["predicted_min"], e["measured_min"]),
    ]
    return min(abs(p - m) / m for p, m in pairs)


def render(eff, comp, metric, mem, proj, command: str) -> str:
    r = RESNET
    ratios = [e["comm_meas"] / e["comm_pred"] for e in eff]
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
        "| model | grads | batch/worker | statistic | T(1) | T(2) | efficiency measured | "
        "predicted | error |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in eff:
        for stat, t1, t2, meas, pred in (
            (
                "median, model calibrated in-process",
                e["t1"],
                e["t2"],
                e["measured"],
                e["predicted"],
            ),
            ("median, compute from T(1)", e["t1"], e["t2"], e["measured"], e["predicted_t1"]),
            (
                "median, compute from T(1), stragglers",
                e["t1"],
                e["t2"],
                e["measured"],
                e["predicted_straggle"],
            ),
            (
                "fastest step, compute from T(1)",
                e["t1_min"],
                e["t2_min"],
                e["measured_min"],
                e["predicted_min"],
            ),
        ):
            lines.append(
                f"| {e['name']} | {e['grad_bytes'] / 2**20:.2f} MiB | {e['batch']} | {stat} | "
                f"{1e3 * t1:.2f} ms | {1e3 * t2:.2f} ms | {meas:.1%} | {pred:.1%} | "
                f"{abs(pred - meas) / meas:.0%} |"
            )
    lines += [
        "",
        "Network fitted to the 2-worker gloo all-reduce timings on loopback, and the overlap the "
        "communication timer measured: "
        + "; ".join(
            f"{e['name']}: {8 * e['bandwidth'] / 1e9:.2f} Gb/s and {1e6 * e['latency']:.0f} µs/hop "
            f"from medians ({8 * e['bandwidth_min'] / 1e9:.2f} Gb/s, {1e6 * e['latency_min']:.0f} "
            f"µs/hop from the fastest repeats), overlap {e['overlap']:.0%}, straggler factor "
            f"{e['straggle']:.2f}, all-reduce predicted "
            f"{1e3 * e['comm_pred']:.2f} ms (fastest {1e3 * e['comm_min']:.2f} ms) vs "
            f"{1e3 * e['comm_meas']:.2f} ms in the DDP hook (which includes waiting for the peer)"
            for e in eff
        )
        + ". The error target is 15%; the closest prediction per model is "
        + ", ".join(f"{e['name']} {best_error(e):.0%} off" for e in eff)
        + ". Where it is missed: the model predicts the 2-worker "
        "step from one worker's compute, the fitted link and the measured overlap and spread, "
        "but on 2 cores already oversubscribed by other work every all-reduce hop waits for "
        "both processes to be scheduled, and the all-reduce measured inside the DDP step "
        f"(above) is {min(ratios):.1f}-{max(ratios):.1f}x the one the back-to-back probe fits. "
        "This run measures the machine's "
        "contention, not the network; a quiet node or a GPU machine (none was available to "
        "this session) is needed to check the 15% target. Every figure is as measured, none "
        "tuned to the run.",
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
