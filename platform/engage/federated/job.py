"""The federated job, kind ``"federated"``: rounds of signed client updates on Ray.

:class:`FederatedJob` supplies the stages of a spec with a ``federated`` section to the
job template (:class:`engage.runtime.job.Job`), which opens the MLflow run, enters Ray,
starts the monitor, wires the sinks and ends the run as for every kind. The data stage
partitions the data by household and provisions the clients' signing keys; training is
the server's rounds, each reported through the one report path and logged to a child
MLflow run; the run ends with a table of per-client verdicts. Importing this module
registers the kind (:mod:`engage.runtime.kinds` imports it by name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engage.events import Event, EventSink, FanOut, Reporter
from engage.federated import report
from engage.federated.keys import KeyStore, key_dir
from engage.federated.partition import FederatedData, partition
from engage.monitor.rules import FL_METRIC_DROP
from engage.runtime.context import JobContext, Observer
from engage.runtime.job import Job
from engage.runtime.kinds import JOB_KINDS
from engage.runtime.options import RunOptions
from engage.runtime.stages import Logged
from engage.spec import LoadedSpec
from engage.train.metrics import PRIMARY_VAL_METRIC

if TYPE_CHECKING:
    from engage.federated.server import RoundResult
    from engage.federated.simulation import Simulation
    from engage.tracking import PipelineRun


@JOB_KINDS.register()
class FederatedJob(Job[FederatedData, "list[RoundResult]"]):
    """Federated learning: one client per household partition, a server running rounds."""

    name = "federated"
    labels = report.STAGE

    def __init__(
        self, loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
    ) -> None:
        super().__init__(loaded, options, observer)
        self.keys = KeyStore(key_dir(options.home))
        self._provisioned: list[str] = []
        self._sim: Simulation | None = None
        self._rounds: list[RoundResult] = []

    def data_detail(self) -> str:
        """The data stage partitions by household."""
        return "partitioning the data by household"

    def prepare(self) -> FederatedData:
        """Partition the data by household, then give every client without one a key.

        Raises
        ------
        DataError
            The data is missing, malformed or leaves a client too few windows.
        FederatedError
            A key file is unsafe (readable by others) or cannot be written.
        """
        data = partition(self.loaded)
        self._provisioned = self.keys.provision(data.ids, self.loaded.spec.federated.signing)
        return data

    def opened(self, ctx: JobContext[FederatedData]) -> None:
        """Tag the run as federated and say which keys were provisioned."""
        ctx.run.set_tags({"engage.federated": "true", "engage.fl.clients": str(len(ctx.data.ids))})
        if self._provisioned:
            scheme = self.loaded.spec.federated.signing
            ctx.message(
                "federated",
                f"provisioned {scheme} keys for {len(self._provisioned)} clients "
                f"under {self.keys.root}",
            )

    def extra_sinks(self, ctx: JobContext[FederatedData]) -> list[EventSink]:
        """The federated Prometheus series, on the monitor's registry (none without it)."""
        if ctx.monitor is None:
            return []
        from engage.monitor.federated_metrics import FederatedMetrics

        sink = ctx.monitor.sink
        return [FederatedMetrics(sink.registry, self.loaded.spec.name, sink.run_id)]

    def train_detail(self) -> str:
        """The train stage runs the spec's rounds."""
        return f"{self.loaded.spec.federated.rounds} federated rounds"

    def train(self, ctx: JobContext[FederatedData]) -> list[RoundResult]:
        """Every round of the server on Ray, each logged to a child run."""
        self._rounds, self._sim = _rounds(self.loaded, ctx.data, self.keys, ctx.run, ctx.bus)
        return self._rounds

    def evaluate(
        self, ctx: JobContext[FederatedData], trained: list[RoundResult]
    ) -> dict[str, float]:
        """The global model's test metrics, with the rounds' rejection and flag counts."""
        assert self._sim is not None  # train ran first
        return _test(self.loaded, ctx.data, self._sim, trained, ctx.reporter)

    def register(self, ctx: JobContext[FederatedData], metrics: dict[str, float]) -> Logged:
        """Log and register the global model (when the spec registers), then the verdicts."""
        assert self._sim is not None  # train ran first
        logged = Logged()
        if self.loaded.spec.tracking.registration is not None:
            with ctx.stage("register"):
                logged = _log_and_register(self.loaded, ctx.data, self._sim, ctx.run, metrics)
        rows = report.verdicts(self._rounds, ctx.data.ids, self._sim.malicious)
        table = report.verdict_table(rows)
        ctx.run.log_text(table, "federated/verdicts.txt")
        ctx.message("verdicts", "per-client verdicts\n" + table)
        return logged


def _rounds(
    loaded: LoadedSpec, data: FederatedData, keys: KeyStore, run: PipelineRun, bus: FanOut
) -> tuple[list[RoundResult], Simulation]:
    """Build the simulation and run every round, reporting each and watching global health."""
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


def _health(
    bus: FanOut, metric: str, value: float | None, best: float | None, r: int
) -> float | None:
    """Warn when the global metric falls more than ``FL_METRIC_DROP`` off its best; the new best."""
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


def _child(run: PipelineRun, loaded: LoadedSpec, result: RoundResult, events: list[Event]) -> None:
    """Log one round to its own child run: per-client series, verdict tags, round.json."""
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


def _test(
    loaded: LoadedSpec,
    data: FederatedData,
    sim: Simulation,
    rounds: list[RoundResult],
    reporter: Reporter,
) -> dict[str, float]:
    """Test metrics of the global model (and of it as served), with the rounds' totals."""
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


def _log_and_register(
    loaded: LoadedSpec, data: FederatedData, sim: Simulation, run: PipelineRun, metrics: dict
) -> Logged:
    """Log the final global model (served on raw windows, standardised with the clients'
    pooled statistics) with its model card, and register it behind the spec's gate, as the
    central pipeline does."""
    import torch

    from engage.federated.partition import raw_windows
    from engage.federated.simulation import local_training, served_model
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
    """A lifecycle message the display prints."""
    return Event("lifecycle", name, data={"message": text})
