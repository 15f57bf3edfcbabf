"""Input pipeline (issue 14): the profile's what-if predictions against measured speedups,
and engage's default loader against a plain torch DataLoader at its best num_workers.

Two jobs, each profiled with ``engage.profiler.profile_job`` and then run end to end
(loader + training step) under every remedy the profile proposes:

(a) pipelines/preprocess_heavy.yaml (spectral features, rolling and lag features, jitter
    and scaling on 2-hour sensor windows), storage at full speed: preprocessing-bound;
(b) pipelines/quickstart.yaml with storage reads throttled to ``--bandwidth``:
    storage-bound.

Each measured speedup is the median of ``--rounds`` rounds of default, remedy, remedy,
default (ABBA, :func:`engage.profiler.compare.abba`), and each table opens with the
default against itself (the control: its error is the noise floor).

For (a) it also measures a plain ``torch.utils.data.DataLoader`` (per-window dataset over
the windows in memory, the batch preprocessed in its collate function) at num_workers
0..cores and keeps its best, Ray Data at its defaults (``map_batches`` of the
preprocessing over the windows, ``iter_torch_batches``, on a local cluster of usable-cores
CPUs), and engage's auto-tuned loader (``train.loader: auto``: the setting
:func:`engage.train.loader_tune.tune_loader` picks from timed trials of the loader alone,
then run end to end with the training step), against the bound max(compute,
preprocessing / usable cores). When the tuner picks the features cache (deterministic
preprocessing once, augmentation per epoch), its steady rate (epochs after the first) and
the whole job's (the spec's epochs run end to end on a fresh cache, built before the first
epoch or by the loader during it) are reported.

    python benchmarks/input_pipeline.py [--steps 20] [--bandwidth 2MB/s] [--set data.source.days=7]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np
import torch
from _report import git_commit, machine, write_section

from engage.data import prepare
from engage.profiler import LoaderConfig, WindowStore, parse_bandwidth, profile_job, run_pipeline
from engage.profiler.compare import Comparison, abba
from engage.profiler.compute import make_step
from engage.profiler.cores import usable_cores
from engage.profiler.measure import FREE_SAMPLE_S, torch_threads
from engage.profiler.verdict import default_config
from engage.spec import load_spec
from engage.train.builders import ModelShape
from engage.train.loader_tune import summary, tune_loader

ROOT = Path(__file__).resolve().parents[1]


def _step_fn(spec, data):
    shape = data.model_inputs("train").shape
    outputs = len(data.classes) if data.classes else 1
    return make_step(spec, ModelShape(shape[1], shape[2], outputs))


def whatif(spec, data, bandwidth, steps, repeats):
    """Profile and measure each remedy end to end against the default pipeline, ``repeats``
    times: each repetition profiles the job afresh (its predictions), then runs one ABBA
    round of every remedy (:func:`engage.profiler.compare.abba`: default, remedy, remedy,
    default). A remedy's predicted and measured speedups are the medians over the
    repetitions.

    Repeated, because on this shared host one profile and one round are each a sample of a
    machine whose speed drifts: the same default pipeline ran 22.6 ms a step, then 31.8 ms
    in the same round, and 8 repetitions of the 1-worker remedy gave errors from -19% to
    +27% around medians 1% apart (predicted 1.16x, measured 1.15x). A control compares the
    default with itself the same way (its measured ratio is the noise floor). Every
    configuration runs once untimed before its first round (its shards written, its first
    allocations made), and each run times ``steps`` steps after :data:`RUN_WARMUP`, and
    more until the timed steps have lasted :data:`RUN_MIN_S`.

    Returns the profile of median predicted step (its stage times are the ones printed),
    the median default run, and a row per remedy.
    """
    step = _step_fn(spec, data)
    reports, bases = [], []
    predicted: dict[str, list[float]] = {}
    measured: dict[str, list] = {}
    names: dict[str, str] = {CONTROL_KEY: CONTROL}
    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        store = WindowStore(data.train.x, data.train.y, Path(tmp))
        warmed = set()

        def run(config):
            if config not in warmed:  # untimed, once: shards written, first allocations
                run_pipeline(store, config, data.preprocess, step, RUN_WARMUP, RUN_WARMUP)
                warmed.add(config)
            return lambda: run_pipeline(
                store, config, data.preprocess, step, steps, RUN_WARMUP, RUN_MIN_S
            )

        for k in range(repeats):
            report = profile_job(spec, data, bandwidth=bandwidth, steps=steps)
            reports.append(report)
            base_cfg = default_config(report.times, data.preprocess is not None)
            got = abba(run(base_cfg), run(base_cfg), 1)
            bases += got.base
            measured.setdefault(CONTROL_KEY, []).append(got)
            predicted.setdefault(CONTROL_KEY, []).append(1.0)
            for remedy in report.remedies:
                names[remedy.key] = remedy.name
                if remedy.speedup is None:
                    predicted.setdefault(remedy.key, [])
                    continue
                got = abba(run(base_cfg), run(remedy.config), 1)
                bases += got.base
                measured.setdefault(remedy.key, []).append(got)
                predicted.setdefault(remedy.key, []).append(remedy.speedup)
            print(
                f"  repetition {k + 1}/{repeats}: "
                + ", ".join(
                    f"{key} {predicted[key][-1]:.2f}/{measured[key][-1].ratio:.2f}"
                    for key in measured
                    if len(measured[key]) == k + 1
                ),
                flush=True,
            )
    rows = []
    for key, name in names.items():
        if not measured.get(key):
            rows.append((name, None, None, None, None, None, (None, None)))
            continue
        got = _pooled(measured[key])
        pred = float(median(predicted[key]))
        rows.append((name, pred, got.ratio, *got.by_order(), *_paired(predicted[key], got)))
        print(f"  {name}: predicted {pred:.2f}x measured {got.ratio:.2f}x ({_spread(got)})")
    report = sorted(reports, key=lambda r: r.times.step)[len(reports) // 2]
    base = sorted(bases, key=lambda b: b.samples_per_s)[len(bases) // 2]  # the median run
    return report, base, rows


def _paired(predicted, got) -> tuple[float, tuple[float, float]]:
    """The median over the repetitions of each one's prediction against its own round
    (``|predicted / measured - 1|``), and the lowest and highest round measured."""
    errors = [abs(p / r - 1.0) for p, r in zip(predicted, got.ratios, strict=True)]
    return float(median(errors)), (min(got.ratios), max(got.ratios))


def _pooled(rounds) -> Comparison:
    """One comparison of the rounds of several (one-round) comparisons."""
    ratios = tuple(r for c in rounds for r in c.ratios)
    base = tuple(b for c in rounds for b in c.base)
    other = tuple(o for c in rounds for o in c.other)
    return Comparison(float(median(ratios)), ratios, base, other)


CONTROL_KEY = "control"
CONTROL = "none: the default against itself (control)"
#: Untimed steps at the start of every run (the loader's first batches, a worker's start).
RUN_WARMUP = 4
#: Seconds a what-if run's timed steps last at least (more steps than asked when fast).
RUN_MIN_S = 0.5


def _spread(got) -> str:
    ab, ba = got.by_order()
    rounds = ", ".join(f"{r:.2f}" for r in got.ratios)
    return f"rounds {rounds}; default first {ab:.2f}x, remedy first {ba:.2f}x"


class _Windows(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def plain_loader(data, spec, batch, steps, workers):
    """A plain DataLoader: per-window items, batch preprocessing in collate_fn."""
    fitted = data.preprocess

    def collate(items):
        x = np.stack([i[0] for i in items])
        y = np.array([i[1] for i in items])
        x, _ = fitted.transform(x, train=True)
        return torch.from_numpy(x), torch.from_numpy(y)

    kwargs = {"prefetch_factor": 2, "persistent_workers": True} if workers else {}
    loader = torch.utils.data.DataLoader(
        _Windows(data.train.x, data.train.y), batch_size=batch, shuffle=False, drop_last=True,
        num_workers=workers, collate_fn=collate, **kwargs,
    )  # fmt: skip
    step = _step_fn(spec, data)
    waits, computes = [], []
    with torch_threads(1):
        it = iter(loader)
        for k in range(steps + 2):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            step(x, y)
            if k >= 2:
                waits.append(t1 - t0)
                computes.append(time.perf_counter() - t1)
        del it
    wait, compute = float(np.mean(waits)), float(np.mean(computes))
    return {"workers": workers, "stall": wait / (wait + compute), "sps": batch / (wait + compute)}


def ray_data_loader(data, spec, batch):
    """Ray Data's defaults: the preprocessing as a ``map_batches`` over the training windows
    (its default batch size and concurrency), read with ``iter_torch_batches`` (its default
    prefetch) by the training step, on a local cluster of usable-cores CPUs (shut down after).

    Ray Data preprocesses whole blocks ahead of the reader, so a few steps after a warm-up
    would time batches it had ready: one whole epoch is timed, from its first batch on (Ray
    Data re-runs the pipeline every epoch), the second one: the first, untimed, starts
    its worker processes.
    """
    import ray

    ray.init(address="local", num_cpus=usable_cores(), include_dashboard=False, log_to_driver=False)
    try:
        refs = ray.put(data.train.x), ray.put(data.train.y)
        fitted = data.preprocess

        def prep(b):
            x_all, y_all = ray.get(list(refs))
            x, _ = fitted.transform(x_all[b["id"]], train=True)
            return {"x": x, "y": y_all[b["id"]]}

        ds = ray.data.range(len(data.train.y)).map_batches(prep)
        step = _step_fn(spec, data)
        waits, computes = [], []
        with torch_threads(1):
            for _ in ds.iter_torch_batches(batch_size=batch, drop_last=True):
                pass  # the first epoch starts Ray Data's worker processes: not timed
            t0 = time.perf_counter()
            for b in ds.iter_torch_batches(batch_size=batch, drop_last=True):
                t1 = time.perf_counter()
                step(b["x"], b["y"])
                t2 = time.perf_counter()
                waits.append(t1 - t0)
                computes.append(t2 - t1)
                t0 = time.perf_counter()
    finally:
        ray.shutdown()
    wait, compute = float(np.mean(waits)), float(np.mean(computes))
    return {"stall": wait / (wait + compute), "sps": batch / (wait + compute), "steps": len(waits)}


def stall_anatomy(data, spec, batch, reps=30):
    """Where an inline step's time goes with the features cache, per batch of ``batch`` on
    one thread: the augmentation (of it, the jitter's random draws), gathering a shuffled
    batch from the cache, the training step. CPU seconds of this thread (``thread_time``:
    what the work costs, whatever the other processes on the node take) and wall seconds;
    the fastest of 3 rounds of ``reps`` calls each."""
    fitted = data.preprocess
    if fitted is None or not fitted.augments:
        return None
    cached, per_epoch = fitted.split_for_cache()
    n = min(len(data.train.x), 16 * batch)
    features = torch.from_numpy(cached.transform(data.train.x[:n], train=False)[0])
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:batch]
    x = features[idx]
    y = torch.from_numpy(data.train.y[:n])[idx]
    raw = data.train.x[:batch]
    step = _step_fn(spec, data)
    gen = torch.Generator()

    def timed(fn):
        fn()
        cpu = wall = float("inf")
        for _ in range(3):
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(reps):
                fn()
            cpu = min(cpu, (time.thread_time() - c0) / reps)
            wall = min(wall, (time.perf_counter() - w0) / reps)
        return cpu, wall

    with torch_threads(1):
        out = {
            "augment": timed(lambda: per_epoch.transform(x.numpy(), train=True)),
            "draws": timed(lambda: torch.randn(tuple(x.shape), generator=gen)),
            "gather": timed(lambda: features[idx]),
            "compute": timed(lambda: step(x, y)),
            "preprocess": timed(lambda: fitted.transform(raw, train=True)),
        }
    out["shape"] = tuple(x.shape[1:])
    print("  stall anatomy (cpu, wall ms): " + ", ".join(
        f"{k} {out[k][0] * 1e3:.2f}/{out[k][1] * 1e3:.2f}"
        for k in ("augment", "draws", "gather", "compute", "preprocess")
    ))  # fmt: skip
    return out


def auto_tuned(data, spec, batch, steps, cores, compute_s, rounds):
    """The loader ``train.loader: auto`` picks (as the train stage runs the search: its
    trials time the loader with the job's training step end to end, within the spec's
    search budget), then that setting run end to end with the training step against the
    default loader in ``rounds`` ABBA rounds (median ratio, as for the remedies), and the
    other way to feed the same cache ``rounds`` times: inline when the search chose a
    loader thread or worker, else a loader thread (prefetch 2). Each run is one epoch of
    the training windows at least (``steps`` if more), after warm-up steps that empty what
    a queue held ready (its depth plus two), on a features cache built before. Then the
    whole job on a fresh cache, built before the first epoch or in it
    (:func:`_whole_jobs`)."""
    search = spec.train.loader_search
    started = time.perf_counter()
    with torch_threads(1):
        result = tune_loader(
            data, batch, cores, time_budget_s=search.time_budget_seconds,
            memory_fraction=search.memory_fraction, compute_s_per_window=compute_s / batch,
            epochs=spec.train.epochs, step_fn=_step_fn(spec, data),
            features_only=data.stream is None and data.preprocess is not None
            and data.preprocess.augments,
        )  # fmt: skip
    tune_s = time.perf_counter() - started
    for t in result.trials:  # the evidence, on stdout only
        print(
            f"    trial {t.candidate}: loader {t.loader_samples_per_s} predicted {t.samples_per_s}"
        )
    c = result.chosen
    # What training takes: the train stage caches the deterministic features of every
    # in-memory split whose preprocessing augments (new draws each epoch), whatever the
    # search ranked first (engage.runtime.stages.training_job).
    augments = data.preprocess is not None and data.preprocess.augments and data.stream is None
    cache = "features" if augments else c.cache
    sources = {"memory": "cache", "storage": "storage", "features": "features"}
    config = LoaderConfig(
        sources[cache], c.workers, "cpu" if data.preprocess else "none", c.batch, None,
        c.prefetch, c.thread,
    )  # fmt: skip
    default = LoaderConfig("storage", 0, config.preprocess, batch)
    overlapped = bool(c.thread or c.workers)
    inline = (
        LoaderConfig(sources[cache], 0, config.preprocess, c.batch)
        if overlapped
        else LoaderConfig(sources[cache], 0, config.preprocess, c.batch, None, 2, thread=True)
    )
    step, inlines = _step_fn(spec, data), []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        store = WindowStore(data.train.x, data.train.y, Path(tmp))
        n_steps = max(steps, store.batches(c.batch))
        warm = max(config.prefetch, inline.prefetch) * max(1, c.workers) + 2

        def run(cfg):
            return lambda: run_pipeline(store, cfg, data.preprocess, step, n_steps, warm)

        if cache == "features" and data.preprocess is not None:
            store.features(data.preprocess)  # the steady runs read a whole cache
        paired = abba(run(default), run(config), rounds)
        for _ in range(rounds):
            inlines.append(run(inline)())
        whole = _whole_jobs(data, config, step, spec.train.epochs, rounds, Path(tmp), cache)
    runs = list(paired.other)
    got = sorted(runs, key=lambda r: r.samples_per_s)[len(runs) // 2]  # the median run
    inline_got = sorted(inlines, key=lambda r: r.samples_per_s)[len(inlines) // 2]
    n, epochs = len(data.train.y), spec.train.epochs
    over_epochs = whole["before"]["rate"] if whole else got.samples_per_s
    print(
        f"  {summary(result)}; end to end {got.samples_per_s:.0f}/s, {paired.ratio:.2f}x "
        f"default; the whole job ({epochs} epochs) {over_epochs:.0f}/s"
    )
    return {
        "result": result, "tune_s": tune_s, "stats": got, "ratio": paired.ratio,
        "over_epochs": over_epochs, "epochs": epochs, "windows": n, "cache": cache,
        "other": inline_got, "other_thread": not overlapped, "steps": n_steps, "warmup": warm,
        "rounds": rounds, "whole": whole,
        "load": (load_before, os.getloadavg()[0]), "cores": cores,
    }  # fmt: skip


def _whole_jobs(data, config, step, epochs, rounds, tmp, cache):
    """The spec's ``epochs`` epochs run end to end on a fresh features cache, built before
    the first step (as the train stage builds it today) or by the loader in the first
    epoch (:attr:`LoaderConfig.build`), ``rounds`` ABBA rounds of the two (median), each
    timed whole: cache build, loader thread start and every step. None without a features
    cache. Per build: the median run's rate and seconds, its first epoch's seconds and
    CPU per step (every thread of the process), and its cache's build seconds."""
    if cache != "features" or data.preprocess is None:
        return None
    count = iter(range(10**6))

    def job(build):
        def once():
            fresh = WindowStore(data.train.x, data.train.y, tmp / f"job{next(count)}")
            cfg = dataclasses.replace(config, build=build)
            batches = fresh.batches(cfg.batch)
            t0 = time.perf_counter()
            first = run_pipeline(fresh, cfg, data.preprocess, step, batches, 0)
            t1 = time.perf_counter()
            rest = run_pipeline(fresh, cfg, data.preprocess, step, batches * (epochs - 1), 0)
            wall = time.perf_counter() - t0
            return {
                "rate": epochs * batches * cfg.batch / wall, "seconds": wall,
                "first_s": t1 - t0, "rest_s": wall - (t1 - t0), "first": first, "rest": rest,
                "build_s": fresh.feature_seconds[id(data.preprocess)], "batches": batches,
            }  # fmt: skip

        return once

    got = abba(job("before"), job("first_epoch"), rounds, rate=lambda r: r["rate"])

    def median_run(runs):
        return sorted(runs, key=lambda r: r["rate"])[len(runs) // 2]

    out = {"before": median_run(got.base), "first_epoch": median_run(got.other)}
    out["ratio"] = got.ratio
    for build in ("before", "first_epoch"):
        r = out[build]
        print(
            f"    whole job, cache built {build}: {r['seconds']:.2f} s ({r['rate']:.0f}/s; "
            f"epoch 1 {r['first_s']:.2f} s, then {r['rest_s']:.2f} s; build {r['build_s']:.2f} s"
            f"; epoch 1 CPU/step {r['first'].process_cpu * 1e3:.1f} ms, wall step "
            f"{r['first'].step * 1e3:.1f} ms)"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--rounds", type=int, default=3, help="ABBA rounds of the loaders compared on (a)"
    )
    parser.add_argument(
        "--repeats", type=int, default=11, help="what-if repetitions: a profile, a round each"
    )
    parser.add_argument("--bandwidth", default="2MB/s")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    rate = parse_bandwidth(args.bandwidth)
    cores = usable_cores()

    heavy = load_spec(ROOT / "pipelines" / "preprocess_heavy.yaml", args.overrides)
    t = time.perf_counter()
    heavy_data = prepare(heavy.spec.data, heavy.base_dir)
    prep_s = time.perf_counter() - t
    print(f"(a) {heavy.spec.name}: prepared in {prep_s:.1f} s")
    rep_a, base_a, rows_a = whatif(heavy.spec, heavy_data, None, args.steps, args.repeats)
    plain = [
        plain_loader(heavy_data, heavy.spec, rep_a.times.batch, args.steps, w)
        for w in range(0, cores + 1)
    ]
    best = max(plain, key=lambda r: r["sps"])
    auto = auto_tuned(
        heavy_data, heavy.spec, rep_a.times.batch, args.steps, cores, rep_a.times.compute,
        args.rounds,
    )  # fmt: skip
    anatomy = stall_anatomy(heavy_data, heavy.spec, rep_a.times.batch)
    ta = rep_a.times
    bound_step = max(ta.compute, ta.preprocess / cores)
    bound = ta.batch / bound_step
    print(
        f"  default {base_a.samples_per_s:.0f}/s stall {base_a.stall_ratio:.0%}; plain best {best}"
    )

    quick = load_spec(ROOT / "pipelines" / "quickstart.yaml", [])
    quick_data = prepare(quick.spec.data, quick.base_dir)
    print(f"(b) {quick.spec.name} at {args.bandwidth}")
    rep_b, base_b, rows_b = whatif(quick.spec, quick_data, rate, args.steps, args.repeats)
    # Last: no DataLoader worker process is forked after Ray has run in this process.
    raydata = ray_data_loader(heavy_data, heavy.spec, rep_a.times.batch)
    print(f"(a) Ray Data defaults {raydata['sps']:.0f}/s stall {raydata['stall']:.0%}")

    command = (
        f"python benchmarks/input_pipeline.py --steps {args.steps} --rounds {args.rounds} "
        f"--repeats {args.repeats} --bandwidth {args.bandwidth}"
    )
    command += "".join(f" --set {o}" for o in args.overrides)
    body = render(
        rep_a, base_a, rows_a, plain, best, bound, rep_b, base_b, rows_b, args, cores, command,
        auto, raydata, anatomy,
    )  # fmt: skip
    write_section("input-pipeline", body)
    print(body)


def _whatif_table(rows) -> list[str]:
    lines = [
        "| remedy | predicted | measured (ABBA) | error | paired error | measured, lowest-highest "
        "round | default run first | remedy run first |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, pred, got, ab, ba, paired, (lo, hi) in rows:
        if pred is None:
            lines.append(f"| {name} | n/a | n/a | | | | | |")
        else:
            lines.append(
                f"| {name} | {pred:.2f}x | {got:.2f}x | {abs(pred - got) / got:.0%} | "
                f"{paired:.0%} | {lo:.2f}-{hi:.2f}x | {ab:.2f}x | {ba:.2f}x |"
            )
    return lines


def _auto_lines(auto, bound, base_a, best, raydata=None, anatomy=None) -> list[str]:
    """The auto-tuned loader's rows and its search, for table (a)."""
    c, got, cache = auto["result"].chosen, auto["stats"], auto["cache"]
    timed = sum(t.samples_per_s is not None for t in auto["result"].trials)
    ranked = "" if cache == c.cache else f"; the search ranked {c.cache} first"
    thread = ", a loader thread" if c.thread else ""
    name = (
        f"engage auto-tuned (prefetch {c.prefetch}, {c.workers} loader workers{thread}, cache "
        f"in {cache} as training applies it{ranked})"
    )
    after = ", epochs after the first" if cache == "features" else ""
    rows = [
        f"| {name}{after} | "
        f"{got.samples_per_s:.0f} | {got.stall_ratio:.0%} | {got.samples_per_s / bound:.2f} |"
    ]
    other = auto.get("other")
    if other is not None:
        how = (
            "with a loader thread (prefetch 2), not chosen"
            if auto["other_thread"]
            else "inline (no loader thread or worker)"
        )
        rows.append(
            f"| the same cache in {cache}, {how}{after} | "
            f"{other.samples_per_s:.0f} | {other.stall_ratio:.0%} | "
            f"{other.samples_per_s / bound:.2f} |"
        )
    whole = auto.get("whole")
    if whole:
        first, before = whole["first_epoch"], whole["before"]
        rows += [
            f"| {name}, the spec's {auto['epochs']} epochs whole, the cache built before the "
            f"first epoch (the whole split on {auto['cores']} threads, as the train stage "
            f"builds it) | {before['rate']:.0f} | | {before['rate'] / bound:.2f} |",
            "| the same, the cache built by the loader in the first epoch as it reads each "
            f"batch (the overlap evaluated; not what training does) | {first['rate']:.0f} | | "
            f"{first['rate'] / bound:.2f} |",
        ]
    peers = f"{got.samples_per_s / best['sps']:.2f}x the best plain DataLoader"
    if raydata:
        peers += f" and {got.samples_per_s / raydata['sps']:.2f}x Ray Data's defaults"
    notes = [n for n in auto["result"].notes if n.startswith("trials timed")]
    how = "loader with the training step, end to end" if notes else "loader alone"
    lines = [
        *rows,
        "",
        f"Auto-tuned: {timed} of {len(auto['result'].trials)} candidates timed ({how}) in "
        f"{auto['tune_s']:.1f} s; each engage row above is the median of {auto['rounds']} runs "
        f"of {auto['steps']} steps (an epoch of the training windows at least; "
        f"{auto['warmup']} warm-up steps first); end to end {auto['ratio']:.2f}x the "
        f"default loader (median of {auto['rounds']} ABBA rounds), {peers} (runs not paired); "
        f"1-minute load average {auto['load'][0]:.1f} before these runs and "
        f"{auto['load'][1]:.1f} after, on {auto['cores']} cores.",
    ]
    if anatomy is not None:
        (ac, aw), (dc, dw) = anatomy["augment"], anatomy["draws"]
        (gc, gw), (cc, cw) = anatomy["gather"], anatomy["compute"]
        lines += [
            "",
            "Why the features cache stalled inline: per batch of "
            f"{c.batch} windows on one thread (CPU ms of the thread / "
            f"wall ms), the augmentation takes {ac * 1e3:.2f} / {aw * 1e3:.2f} ms (of which "
            f"the jitter's random draws alone {dc * 1e3:.2f} / {dw * 1e3:.2f} ms: one normal "
            f"draw per value of the {anatomy['shape'][0]} x {anatomy['shape'][1]} feature "
            "window), gathering a shuffled batch from "
            f"the cache {gc * 1e3:.2f} / {gw * 1e3:.2f} ms, the training step "
            f"{cc * 1e3:.2f} / {cw * 1e3:.2f} ms. Inline, the next batch is prepared only "
            "after the step returns, so every step pays the augmentation too. A loader "
            "thread prepares it while the step computes: torch releases the GIL inside "
            "its operators, so the two run on the two cores, with no process to start and "
            "no batch to copy across (a loader worker process's transfer).",
        ]
        lines += _cpu_lines(auto, anatomy)
    if whole:
        lines += _whole_lines(auto, bound)
    return lines


def _whole_lines(auto, bound) -> list[str]:
    """The whole job on a features cache, built before the first epoch or by the loader in
    it, both measured end to end, and the CPU arithmetic of why the overlap gains (or not):
    the build's CPU against what the epochs leave of the cores."""
    whole, cores, epochs = auto["whole"], auto["cores"], auto["epochs"]
    first, before = whole["first_epoch"], whole["before"]
    batch, per = auto["result"].chosen.batch, first["batches"]  # per: steps an epoch
    at_bound = epochs * per * batch / bound
    rest, during = first["rest"], first["first"]
    build_cpu = max(0.0, during.process_cpu - rest.process_cpu)  # a step's features, in epoch 1
    spare = max(0.0, cores * rest.step - rest.process_cpu)  # idle core time a later step
    best_first = per * max(during.main_cpu, during.process_cpu / cores)
    return [
        "",
        "The features cache holds the output of the preprocessing steps before the first "
        "augmentation (clip, rolling, lag, spectral); each batch then runs only the "
        "augmentation (jitter, scale). The bound charges every step the whole "
        "preprocessing, so it does not limit the epochs after the first. The whole job "
        f"({epochs} epochs of {per} steps on a fresh cache, timed from the build's start to "
        f"the last step; the median of {auto['rounds']} ABBA rounds of the two ways to "
        "build): with the cache built before the first epoch, "
        f"{before['seconds']:.2f} s ({before['build_s']:.2f} s of build, epoch 1 with it "
        f"{before['first_s']:.2f} s, the other {epochs - 1} {before['rest_s']:.2f} s); "
        "built by the loader in the first epoch (each batch's windows through the "
        f"cacheable steps on {cores} threads when the batch is first read, in the loader "
        "thread beside the training step; the same inputs to the model, bitwise: tested), "
        f"{first['seconds']:.2f} s (epoch 1 {first['first_s']:.2f} s, the other "
        f"{epochs - 1} {first['rest_s']:.2f} s): {whole['ratio']:.2f}x the rate of the "
        f"build before. At the bound the job takes {at_bound:.2f} s.",
        "",
        "The arithmetic of the overlap, in CPU time (every thread of the process): built "
        f"in the first epoch, the build adds {build_cpu * 1e3:.2f} ms of CPU to each of its "
        f"steps ({during.process_cpu * 1e3:.2f} ms a step, against "
        f"{rest.process_cpu * 1e3:.2f} ms in the epochs after it), "
        f"{per * build_cpu:.2f} CPU-s in all. An epoch after the first leaves "
        f"{spare * 1e3:.2f} ms a step of the {cores} cores to other work ({cores} x the "
        f"wall step {rest.step * 1e3:.2f} ms, less its CPU: idle, or held by other "
        f"processes; the training thread alone works {rest.main_cpu * 1e3:.2f} ms a step): "
        f"{per * spare:.2f} s an epoch, all the room there is to hide the build in. "
        "The rest lengthens epoch 1: with no thread ever "
        f"waiting, it takes at least {best_first:.2f} s (its CPU over {cores} cores, or the "
        "training thread's, whichever is more), against "
        f"{before['first_s']:.2f} s for the build alone on {cores} threads plus an epoch. "
        "The overlap gains only where the steps leave cores idle (a slower model, more "
        "cores than the step and the augmentation use).",
    ]


def _cpu_lines(auto, anatomy) -> list[str]:
    """The loader thread's run in CPU time: what each thread worked per step, and the share
    of the bound that gives on two cores free of other work (a projection, not a run)."""
    runs = [auto["stats"]] + ([auto["other"]] if auto.get("other") is not None else [])
    threaded = next((r for r in runs if r.loader_cpu is not None), None)
    if threaded is None:
        return []
    main, loader = threaded.main_cpu, threaded.loader_cpu
    compute, prep = anatomy["compute"][0], anatomy["preprocess"][0]
    bound = max(compute, prep / auto["cores"])
    return [
        "",
        "The loader thread's run in CPU time (each thread's `thread_time`, which waiting for "
        "a core does not count): per step the training thread worked "
        f"{main * 1e3:.2f} ms (the step, taking the batch) and the loader thread "
        f"{loader * 1e3:.2f} ms (the augmentation), against a wall step of "
        f"{threaded.step * 1e3:.2f} ms (the rest is time a thread waited: for the other, or "
        "for a core other processes held). "
        f"In the same CPU time the bound is max(step {compute * 1e3:.2f} ms, whole "
        f"preprocessing {prep * 1e3:.2f} ms / {auto['cores']} cores) = {bound * 1e3:.2f} ms; "
        "on two cores free of other work the threads would take max(training, loader) = "
        f"{max(main, loader) * 1e3:.2f} ms per step, {bound / max(main, loader):.2f} of the "
        "bound (a load-adjusted projection from CPU time, not a measured rate).",
    ]


def _free_bound_line(ta, auto, raydata, best, base_a) -> list[str]:
    """The bound again with the CPU capacity other processes left, and each loader against it."""
    if ta.free_cpus is None:  # not read on this system
        return []
    free = max(1.0, ta.free_cpus)
    bound = ta.batch / max(ta.compute, ta.preprocess / free)
    got = auto["stats"].samples_per_s
    over = auto.get("over_epochs", got)
    return [
        "",
        f"With the CPU capacity other processes left when profiled ({ta.free_cpus:.1f} cores), "
        f"the bound is max(compute, preprocessing / {free:.1f}) = {bound:.0f} samples/s: "
        f"auto-tuned {got / bound:.2f} of it ({over / bound:.2f} over the spec's epochs, cache "
        f"build included), default {base_a.samples_per_s / bound:.2f}, best plain DataLoader "
        f"{best['sps'] / bound:.2f}"
        + (f", Ray Data {raydata['sps'] / bound:.2f}." if raydata else "."),
    ]


def _shared_cores_line(ta, auto, raydata, best, base_a, cores) -> list[str]:
    """The bound where the training step runs on the same CPU cores as the preprocessing
    (no GPU), and each loader against it."""
    bound = ta.batch / max(ta.compute, (ta.compute + ta.preprocess) / cores)
    over = auto.get("over_epochs", auto["stats"].samples_per_s)
    return [
        "",
        "On this machine the training step itself runs on the CPU cores the preprocessing "
        "needs (no GPU): a loader that preprocesses every batch can at best spread the step "
        f"and the preprocessing over the {cores} cores, max(compute, (compute + "
        f"preprocessing) / {cores}) = {bound:.0f} samples/s. Against it: default "
        f"{base_a.samples_per_s / bound:.2f}, best plain DataLoader {best['sps'] / bound:.2f}"
        + (f", Ray Data {raydata['sps'] / bound:.2f}" if raydata else "")
        + f"; auto-tuned over the spec's epochs, cache build included, {over / bound:.2f} "
        "(its cache preprocesses each window once, so no per-batch bound holds it).",
    ]


def render(
    rep_a, base_a, rows_a, plain, best, bound, rep_b, base_b, rows_b, args, cores, command,
    auto=None, raydata=None, anatomy=None,
) -> str:  # fmt: skip
    ta, tb = rep_a.times, rep_b.times
    plain_rows = [
        f"| plain DataLoader, num_workers={r['workers']} | {r['sps']:.0f} | {r['stall']:.0%} | {r['sps'] / bound:.2f} |"
        for r in plain
    ]
    lines = [
        "## Input pipeline: profile verdicts, what-if accuracy, loaders (issue 14)",
        "",
        f"Machine: {machine()}; commit {git_commit()}. Command: `{command}`.",
        f"Each what-if run times {args.steps} steps after {RUN_WARMUP} warm-up steps (more "
        f"steps until they have lasted {RUN_MIN_S:g} s), torch "
        "on 1 thread per process (a training worker's CPU), and every configuration runs once "
        f"untimed before its first round. The what-if is repeated {args.repeats} times: each "
        "repetition profiles the job afresh (the predictions) and then runs one round of "
        "every remedy as default, remedy, remedy, default (ABBA: run as A B A B, every "
        "remedy took the second place of its pair, so load from other processes that "
        "came and went with the places biased every remedy alike). Predicted and measured "
        "are the medians over the repetitions: on this shared host one profile or one round "
        "is a sample of a machine whose speed drifts (the stage times printed are the "
        "profile of median predicted step). The first row of each table is the default "
        "against itself, measured the "
        "same way: its error is the noise floor. The paired error is the median over the "
        "repetitions of each one's prediction against its own round, a few seconds after "
        "its profile: this host's speed drifts in spells of seconds (a cached quickstart "
        "step of about 1 ms ran between 0.9 and 2.0 ms in 0.5 s windows over one minute), "
        "so medians over all repetitions can pair a profile in a fast spell with rounds in "
        "slow ones; a remedy that turns a step waiting on reads into one computing takes "
        "the drift whole (the range column). The last two columns split each round "
        "in its halves, default then remedy (the old order) and remedy then default: what "
        f"the order alone does. {cores} usable core(s); the machine is "
        f"shared with other jobs (1-minute load average {os.getloadavg()[0]:.1f} at the end "
        "of the run).",
        "",
        f"### (a) `pipelines/preprocess_heavy.yaml`, storage at full speed: **{rep_a.verdict}**",
        "",
        f"Stages alone, per step of {ta.batch} windows: storage {ta.storage * 1e3:.1f} ms, "
        f"preprocessing (1 core) {ta.preprocess * 1e3:.1f} ms"
        + (
            f" ({ta.preprocess_large * 1e3:.1f} ms at {2 * ta.batch})"
            if ta.preprocess_large is not None
            else ""
        )
        + f", compute {ta.compute * 1e3:.1f} ms ({ta.compute_large * 1e3:.1f} ms at "
        f"{2 * ta.batch}), a batch's transfer from a loader worker process "
        f"{ta.transfer * 1e3:.1f} ms "
        f"(predicted stall ratio {ta.stall_ratio:.0%}); CPU capacity other processes left when "
        f"profiled: {ta.free_cpus:.1f} of {cores} cores (sampled from /proc/stat over "
        f"{FREE_SAMPLE_S:g} s, this process's own CPU time not counted).",
        "",
        *_whatif_table(rows_a),
        "",
        f"Loaders on the same job (bound = max(compute, preprocessing / {cores} cores) = "
        f"{bound:.0f} samples/s):",
        "",
        "| loader | samples/s | stall ratio | of bound |",
        "|---|---:|---:|---:|",
        f"| engage default pipeline (inline preprocessing, from storage; the what-if baseline) | {base_a.samples_per_s:.0f} | {base_a.stall_ratio:.0%} | {base_a.samples_per_s / bound:.2f} |",
        *plain_rows,
        *(
            [
                f"| Ray Data defaults (map_batches, iter_torch_batches; its 2nd epoch, whole, "
                f"{raydata['steps']} steps) | {raydata['sps']:.0f} | "
                f"{raydata['stall']:.0%} | {raydata['sps'] / bound:.2f} |"
            ]
            if raydata
            else []
        ),
        *(_auto_lines(auto, bound, base_a, best, raydata, anatomy) if auto else []),
        *(_free_bound_line(ta, auto, raydata, best, base_a) if auto else []),
        *(_shared_cores_line(ta, auto, raydata, best, base_a, cores) if auto else []),
        "",
        f"Best plain DataLoader: num_workers={best['workers']}, {best['sps'] / base_a.samples_per_s:.2f}x "
        "the default loader.",
        "",
        f"### (b) `pipelines/quickstart.yaml`, reads throttled to {args.bandwidth}: **{rep_b.verdict}**",
        "",
        f"Stages alone, per step of {tb.batch} windows: storage {tb.storage * 1e3:.1f} ms (of which "
        f"the bandwidth imposes {tb.read * 1e3:.1f} ms), cache {tb.cache * 1e3:.2f} ms, compute "
        f"{tb.compute * 1e3:.2f} ms, a batch's transfer from a loader worker process "
        f"{tb.transfer * 1e3:.2f} ms"
        + "".join(
            f", compute after {gap * 1e3:.1f} ms idle {(tb.compute + extra) * 1e3:.2f} ms"
            for gap, extra in tb.idle_penalty
        )
        + f"; default loader measured {base_b.samples_per_s:.0f} samples/s, "
        f"stall ratio {base_b.stall_ratio:.0%}.",
        "",
        *_whatif_table(rows_b),
        "",
        "Not measured here: streaming memory against data-set size "
        "(benchmarks/streaming_ingest.py); GPU preprocessing (no GPU on this machine).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
