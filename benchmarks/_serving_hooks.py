"""The serving monitoring hooks' cost per request, measured in-process as a replica runs them.

The end-to-end A/B (an app with the hooks and one without, same load) is in the main table;
this splits the hooks' cost where no HTTP noise reaches it. It builds a replica's real
``ServingHooks`` (Prometheus endpoint, MLflow aggregate through the spool with its drainer,
drift sampler at the spec's rate into SQLite, the hooks' own reporting thread) in this
process, and runs the request path of ``Ingress._predict`` (parse, model forward, answer)
in blocks without (A) and with (B) the hook calls it makes (``batched``, ``request``,
``predicted``). Per request it reports the wall time of those calls on the request path,
and the process CPU of A and B blocks; each B block ends by draining what it queued, so
its CPU includes every thread's reporting work (events, Prometheus, samples, SQLite).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median


@dataclass(frozen=True)
class HookCost:
    hook_median_us: float  # wall time of the hook calls on the request path, per request
    hook_mean_us: float
    hook_p99_us: float
    cpu_a_us: float  # process CPU per request without hooks (parse, forward, answer)
    cpu_b_us: float  # the same with the hooks, their thread's reporting included
    requests: int
    sample_rate: float
    sampled: int


def measure(home: Path, uri: str, model: str, version: str, body: bytes, rounds: int, n: int):
    """``rounds`` × (A block, B block) of ``n`` requests each, ABBA order."""
    import torch

    from engage.serve.app import _answer, _Version
    from engage.serve.build import ingress_settings
    from engage.serve.controller import _monitoring_run
    from engage.serve.hooks import ServingHooks
    from engage.serve.model import load, resolve
    from engage.serve.validation import parse_predict
    from engage.spec.models import DeploySpec
    from engage.tracking.store import open_client

    torch.set_num_threads(1)  # as a replica does
    target = resolve(open_client(uri), model, version, None)
    served = _Version(target, load(target, home / "serve" / "cache"))
    spec = DeploySpec()
    run_local, run_id = _monitoring_run(home, uri, "bench-hooks", target, {})
    settings = ingress_settings("bench-hooks", spec, None, home, run_local, run_id)
    hooks = ServingHooks(settings.hooks, "bench")
    hooks.prepare(target)  # as a replica does when it loads the version: drift detectors fitted

    def request(with_hooks: bool, hook_times: list[float]) -> None:
        t0 = time.perf_counter()
        req = parse_predict(body, served.spec, spec.nan_policy)
        out = served.forward(req.inputs)
        labels, _extra = _answer(target, out)
        seconds = time.perf_counter() - t0
        if with_hooks:  # exactly the calls Ingress._predict makes
            h0 = time.perf_counter()
            hooks.batched(1)
            hooks.request("/predict", 200, seconds)
            hooks.predicted(target, req.request_ids, req.inputs, out, labels)
            hook_times.append(time.perf_counter() - h0)

    try:
        for _ in range(50):  # warm-up: both paths
            request(True, [])
        hooks.drain()
        cpu = {"A": 0.0, "B": 0.0}
        hook_times: list[float] = []
        for r in range(rounds):
            for arm in "AB" if r % 2 == 0 else "BA":
                c0 = time.process_time()
                for _ in range(n):
                    request(arm == "B", hook_times)
                if arm == "B":
                    hooks.drain()  # the block's reporting, whichever thread would do it
                cpu[arm] += time.process_time() - c0
        deadline = time.monotonic() + 30  # let the sampler hand its last batch on
        while hooks.sampler._queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        sampled = hooks.sampler.handed
    finally:
        hooks.close()
    total = rounds * n
    s = sorted(hook_times)
    return HookCost(
        1e6 * median(s),
        1e6 * sum(s) / len(s),
        1e6 * s[min(len(s) - 1, round(0.99 * (len(s) - 1)))],
        1e6 * cpu["A"] / total,
        1e6 * cpu["B"] / total,
        total,
        spec.sampling.rate,
        sampled,
    )
