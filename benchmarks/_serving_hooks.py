"""The serving monitoring hooks' cost per request, measured in-process as a replica runs them.

engage has no switch that turns the hooks off, so instead of an A/B of two deployments this
builds the ingress's real ``ServingHooks`` (Prometheus endpoint, MLflow aggregate through
the spool with its drainer, drift sampler at the spec's rate into SQLite) in this process,
and runs the request path of ``Ingress.predict`` (parse, model forward, answer) in blocks
without (A) and with (B) the two hook calls its background task makes. Per request it
reports the wall time of the hook calls on the calling thread and the process CPU of A and
B blocks (which includes the sampler's, aggregate's and drainer's threads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median


@dataclass(frozen=True)
class HookCost:
    hook_median_us: float  # wall time of request() + predicted() per request
    hook_mean_us: float
    hook_p99_us: float
    cpu_a_us: float  # process CPU per request without hooks (parse, forward, answer)
    cpu_b_us: float  # the same with the hooks
    requests: int
    sample_rate: float
    sampled: int


def measure(home: Path, uri: str, model: str, version: str, body: bytes, rounds: int, n: int):
    """``rounds`` × (A block, B block) of ``n`` requests each, ABBA order."""
    import torch

    from engage.serve.app import _answer
    from engage.serve.controller import _ingress_settings, _monitoring_run
    from engage.serve.hooks import ServingHooks
    from engage.serve.model import load, resolve
    from engage.serve.validation import parse_predict
    from engage.spec.models import DeploySpec
    from engage.tracking.store import open_client

    torch.set_num_threads(1)  # as a replica does
    target = resolve(open_client(uri), model, version, None)
    net = load(target, home / "serve" / "cache")
    spec = DeploySpec()
    run_local, run_id = _monitoring_run(home, uri, "bench-hooks", target, {})
    settings = _ingress_settings("bench-hooks", spec, None, home, run_local, run_id)
    hooks = ServingHooks(settings.hooks, "bench")

    def request(with_hooks: bool, hook_times: list[float]) -> None:
        t0 = time.perf_counter()
        req = parse_predict(body, target.input_spec, spec.nan_policy)
        with torch.no_grad():
            out = net(torch.from_numpy(req.inputs)).numpy()
        labels, _extra = _answer(target, out)
        seconds = time.perf_counter() - t0
        if with_hooks:  # exactly the ingress's background task
            h0 = time.perf_counter()
            hooks.request("/predict", 200, seconds)
            hooks.predicted(target, req.request_ids, req.inputs, out, labels, 1)
            hook_times.append(time.perf_counter() - h0)

    try:
        for _ in range(50):  # warm-up: both paths
            request(True, [])
        cpu = {"A": 0.0, "B": 0.0}
        hook_times: list[float] = []
        for r in range(rounds):
            for arm in "AB" if r % 2 == 0 else "BA":
                c0 = time.process_time()
                for _ in range(n):
                    request(arm == "B", hook_times)
                cpu[arm] += time.process_time() - c0
        time.sleep(0.5)  # let the sampler hand its last batch to SQLite
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
