"""``run_federated``: the pipeline runner for specs with a ``federated`` section.

Same shape as :func:`engage.runtime.pipeline.run_pipeline`: data first (nothing is
created for bad input), then the MLflow run through the spool, Ray, the live monitor, the
rounds, the test evaluation. Every round reports through the one report path and gets a
child MLflow run; the run ends with a table of per-client verdicts.
"""

from __future__ import annotations

from typing import Any

from engage.events import Event, EventSink, FanOut, Reporter
from engage.federated import report
from engage.federated.keys import KeyStore, key_dir
from engage.federated.partition import FederatedData, partition
from engage.monitor.rules import FL_METRIC_DROP
from engage.runtime.pipeline import (
    NullObserver,
    PipelineResult,
    RunOptions,
    _HealthSink,
    _Timer,
    end_run,
    job_tracking,
)
from engage.spec import LoadedSpec
from engage.train.metrics import PRIMARY_VAL_METRIC


class _JobMetricSink:
    """Spools the job-level metric events of the run; per-client series go to round runs."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def emit(self, events) -> None:
        self._run.log_metric_events([e for e in events if "client" not in e.labels])


def run_federated(
    loaded: LoadedSpec, options: RunOptions, observer: Any | None = None
) -> PipelineResult:
    """Run the federated pipeline of ``loaded``; raises EngageError subclasses on bad input."""
    observer = observer or NullObserver()
    with job_tracking(options, observer) as (spool, drainer, bus):
        return _run(loaded, options, observer, bus, spool, drainer)


def _run(loaded, options, observer, bus: FanOut, spool, drainer) -> PipelineResult:
    from engage.runtime import _stages
    from engage.runtime.session import preflight, resolve_address

    fed = loaded.spec.federated
    timer = _Timer(observer)
    with timer.stage("data", "partitioning the data by household"):
        data = partition(loaded)
    keys = KeyStore(key_dir(options.home))
    made = keys.provision(data.ids, fed.signing)
    preflight(resolve_address(options.address))
    run = _stages.open_run(loaded, data, spool, options)
    run.set_tags({"engage.federated": "true", "engage.fl.clients": str(len(data.ids))})
    health = _HealthSink(run, bus.send)
    bus.sinks[:0] = [_JobMetricSink(run), health]
    reporter = Reporter(bus, report.STAGE)
    if made:
        bus.send(
            [
                _message(
                    "federated",
                    f"provisioned {fed.signing} keys for {len(made)} clients under {keys.root}",
                )
            ]
        )
    monitor = store = None
    status = "FAILED"
    try:
        with timer.stage(
            "ray", "starting Ray" if not options.address else f"joining {options.address}"
        ):
            session = _stages.enter_ray(options)
        try:
            monitor, store = _stages.start_monitor(loaded, run, spool, options, bus)
            live = [x for x in (monitor, store) if x is not None]
            timer.observers += live
            bus.sinks[2:2] = live
            if monitor is not None:
                bus.sinks.append(_fl_metrics(monitor, loaded.spec.name))
            with timer.stage("train", f"{fed.rounds} federated rounds"):
                rounds, sim = _rounds(loaded, data, keys, run, reporter, bus)
            with timer.stage("evaluate"):
                metrics = _test(loaded, data, sim, rounds, reporter)
        finally:
            session.close()
        logged = _stages.Logged(0, None, None)
        if loaded.spec.tracking.registration is not None:
            with timer.stage("register"):
                logged = _log_and_register(loaded, data, sim, run, metrics)
        rows = report.verdicts(rounds, data.ids, sim.malicious)
        run.log_text(report.verdict_table(rows), "federated/verdicts.txt")
        bus.send([_message("verdicts", "per-client verdicts\n" + report.verdict_table(rows))])
        reporter.metrics({f"stage_{k}_seconds": v for k, v in timer.seconds.items()})
        reporter.flush()
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        end_run(run, status, monitor, store)
    with timer.stage("tracking", "waiting for MLflow to have every point"):
        drainer.flush(run.local_id, timeout_s=options.drain_timeout_s)
    ids = run.ids()
    registration = run.registration(logged.register_seq) if logged.register_seq else None
    return PipelineResult(
        ids.run_id or ids.local_id,
        ids.local_id,
        ids.experiment_id,
        loaded.spec.experiment_name,
        run.tracking_uri,
        metrics,
        logged.decision,
        registration,
        run.model_uri(logged.model_seq) if logged.model_seq else None,
        dict(timer.seconds),
        session.info.resources,
        spool.pending_count(run.local_id),
        tuple(health.warnings),
        monitor.url if monitor is not None else None,
    )


def _fl_metrics(monitor: Any, job: str) -> EventSink:
    from engage.monitor.federated_metrics import FederatedMetrics

    return FederatedMetrics(monitor.sink.registry, job, monitor.sink.run_id)


def _rounds(loaded, data: FederatedData, keys: KeyStore, run, reporter: Reporter, bus: FanOut):
    from engage.federated.simulation import build

    fed = loaded.spec.federated
    sim = build(fed, loaded.spec.model, data, keys, use_ray=True)
    metric = PRIMARY_VAL_METRIC[data.task]
    best, results = None, []
    try:
        for r in range(1, fed.rounds + 1):
            result = sim.server.run_round(r)
            results.append(result)
            events = report.round_events(result)
            bus.send(events)
            _child(run, loaded, result, events)
            bus.send([_message("federated", report.round_line(result, fed.rounds, metric))])
            value = result.metrics.get(metric)
            best = _health(bus, metric, value, best, r)
    finally:
        sim.server.pool.close()
    return results, sim


def _health(bus: FanOut, metric: str, value: float | None, best: float | None, r: int):
    if value is None:
        return best
    better = (lambda a, b: a > b) if metric.endswith(("accuracy", "f1")) else (lambda a, b: a < b)
    if best is not None and abs(best - value) > FL_METRIC_DROP and better(best, value):
        bus.send(
            [
                _message(
                    "fl_global_health",
                    f"{metric} {value:.4f} in round {r} is {abs(best - value):.3f} off its best {best:.4f}",
                )
            ]
        )
    return value if best is None or better(value, best) else best


def _child(run, loaded, result, events: list[Event]) -> None:
    child = run.child(
        f"round-{result.round:04d}", {"engage.fl.round": str(result.round)}, loaded.base_dir
    )
    points = []
    for e in events:
        if e.kind != "metric":
            continue
        name = e.name if "client" not in e.labels else f"{e.name}.{e.labels['client']}"
        points.append(Event("metric", name, e.value, e.step, e.timestamp_ms))
    child.log_metric_events(points)
    child.set_tags(
        {
            "engage.fl.flagged": ",".join(result.flagged) or "-",
            "engage.fl.rejected": ",".join(
                sorted({f"{v.client}:{v.reason}" for v in result.rejected})
            )
            or "-",
            "engage.fl.aggregated": ",".join(result.aggregated) or "-",
        }
    )
    child.log_dict(
        {
            "round": result.round,
            "selected": result.selected,
            "verdicts": [
                e.data | {"client": e.labels.get("client")} for e in events if e.kind == "lifecycle"
            ],
            "stragglers": result.stragglers,
            "dropped": result.dropped,
        },
        "round.json",
    )
    child.end("FINISHED")


def _test(loaded, data: FederatedData, sim, rounds, reporter: Reporter) -> dict[str, float]:
    from engage.federated.simulation import (
        Evaluator,
        local_training,
        served_metrics,
        served_model,
    )

    training = local_training(loaded.spec.federated, loaded.spec.model, data)
    test = Evaluator(training, data, "test")(sim.server.weights)
    # The served model standardises with the clients' pooled statistics, not each one's own.
    test |= served_metrics(training, served_model(training, sim.server.weights, data), data)
    last = rounds[-1].metrics if rounds else {}
    flagged = sum(len(r.flagged) for r in rounds)
    rejected = sum(len(r.rejected) for r in rounds)
    summary = {
        "fl_rejected_updates_total": float(rejected),
        "fl_flagged_updates_total": float(flagged),
    }
    summary["fl_quarantined_clients"] = float(len(sim.server.policy.quarantined))
    reporter.metrics(test, step=len(rounds))
    reporter.flush()
    return {**last, **test, **summary}


def _log_and_register(loaded, data: FederatedData, sim, run, metrics: dict) -> Any:
    """Log the final global model (served on raw windows, standardised with the clients'
    pooled statistics) with its model card, and register it behind the spec's gate, as the
    central pipeline does."""
    import torch

    from engage.federated.partition import raw_windows
    from engage.federated.simulation import local_training, served_model
    from engage.runtime._stages import Logged
    from engage.tracking import decide

    spec = loaded.spec
    registration = spec.tracking.registration
    training = local_training(spec.federated, spec.model, data)
    model = served_model(training, sim.server.weights, data)
    example = raw_windows(data.clients[0], "test")[:5]
    with torch.no_grad():
        output = model(torch.from_numpy(example)).numpy()
    model_seq = run.log_model(model, input_example=example, output_example=output)
    run.log_dict(
        {
            "features": list(spec.data.features),
            "target": spec.data.target,
            "task": data.task,
            "classes": list(data.classes) if data.classes else None,
            "window": spec.data.window,
            "federated": {
                "clients": data.ids,
                "rounds": spec.federated.rounds,
                "normalization": "the clients' training statistics, pooled",
            },
        },
        "model_card/inputs.json",
    )
    decision = decide(registration, metrics)
    run.set_tags({"engage.gate": decision.explain()})
    if not decision.passed:
        return Logged(model_seq, None, decision)
    tags = {"engage.gate": decision.explain(), "engage.federated": "true"}
    if decision.metric:
        tags |= {"engage.gate_metric": decision.metric, "engage.gate_direction": decision.direction}
    return Logged(model_seq, run.register(registration.model_name, model_seq, tags), decision)


def _message(name: str, text: str) -> Event:
    return Event("lifecycle", name, data={"message": text})
