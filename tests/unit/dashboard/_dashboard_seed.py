"""A small engage home for the dashboard's tests: an event store and a SQLite MLflow store.

Filled through engage's own write paths: ``StoreSink`` (what jobs and replicas write the
event store with), the federated server's ``report.round_events``, the registry's
``promote``; MLflow runs carry the same metric keys, parameters and tags as the runners
log: per-epoch metrics, rank 0's per-step timings and resources, the flattened spec as
parameters and the lineage tags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.events import Event
from engage.federated import report
from engage.federated.attacks import Delivery
from engage.federated.policy import Decision
from engage.federated.scoring import ClientScore
from engage.federated.server import RoundResult
from engage.federated.verify import Reason, UpdateVerdict
from engage.monitor.store import EventStore
from engage.monitor.store_sink import StoreSink
from engage.tracking import ensure_experiment, open_client
from engage.tracking.promotion import promote

MODEL = "smart-home-occupancy"
FL_JOB = "federated-smart-home"
TRAIN_JOB = "quickstart-occupancy"
APP = "occupancy"
CLIENTS = ("house-01", "house-02", "house-03", "house-04")
ROUNDS = 4
TRAIN_PARAMS = {
    "data.source": "data/occupancy.csv",
    "model.hidden": "[32, 16]",
    "train.epochs": "3",
    "train.lr": "0.01",
    "train.batch_size": "64",
}
COMPARED_LR = "0.003"


@dataclass(frozen=True)
class Seeded:
    home: Path
    train_run: str
    fl_run: str
    running_run: str
    monitoring_run: str
    compared_run: str


def seed(home: Path) -> Seeded:
    """Write every kind of record the dashboard reads into ``home`` (ENGAGE_HOME)."""
    home.mkdir(parents=True, exist_ok=True)
    client = open_client(f"sqlite:///{home / 'mlflow.db'}")
    store = EventStore.open(home)
    try:
        train_run = _training_run(client, store)
        compared = _compared_run(client)
        running = _running_job(client, store)
        monitoring = _drift(client, store)
        fl_run = _federated(client, store)
    finally:
        store.close()
    return Seeded(home, train_run, fl_run, running, monitoring, compared)


def _training_run(client: Any, store: EventStore) -> str:
    experiment = ensure_experiment(client, "quickstart")
    run = client.create_run(
        experiment, run_name="quickstart", start_time=_ago_ms(900), tags=_lineage("a1b2c3d")
    )
    run_id = run.info.run_id
    from mlflow.entities import Metric, Param

    start = _ago_ms(900)
    metrics = [Metric("train_loss", 0.9 - 0.2 * e, start + 60_000 * (e + 1), e) for e in range(3)]
    metrics += [
        Metric("val_accuracy", 0.9 + 0.04 * e, start + 60_000 * (e + 1), e) for e in range(3)
    ]
    metrics += _step_metrics(start, steps=120, stall_from=None)
    params = [
        Param("tracking.registration.gate.metric", "val_accuracy"),
        Param("tracking.registration.gate.direction", "maximize"),
        *(Param(k, v) for k, v in TRAIN_PARAMS.items()),
    ]
    client.log_batch(run_id, metrics=metrics, params=params)
    client.set_terminated(run_id, end_time=start + 200_000)
    client.create_registered_model(MODEL)
    tags = {
        "engage.gate": "gate passed: val_accuracy = 0.98 (needs >= 0.8)",
        "engage.gate_metric": "val_accuracy",
        "engage.gate_direction": "maximize",
    }
    version = client.create_model_version(MODEL, f"runs:/{run_id}/model", run_id, tags=tags)
    client.set_registered_model_alias(MODEL, "candidate", version.version)
    promote(client, MODEL, "first champion for the dashboard tests", version=version.version)

    sink = StoreSink(store, TRAIN_JOB, run_id)
    sink.start("http://127.0.0.1:9/metrics")
    sink.stage("train", "2 workers")
    sink.emit([Event("metric", "epoch", 2.0)])
    alert = _alert("EngageDataBound", "firing", "warning", "data stall ratio 0.45 above 0.3")
    sink.emit([Event("lifecycle", "alert", data=alert)])
    sink.finish("FINISHED")  # resolves the alert
    return run_id


def _compared_run(client: Any) -> str:
    """A second quickstart run with another learning rate: what the Experiments page compares."""
    experiment = ensure_experiment(client, "quickstart")
    start = _ago_ms(600)
    run = client.create_run(
        experiment, run_name="quickstart-lr", start_time=start, tags=_lineage("d4e5f6a")
    )
    run_id = run.info.run_id
    from mlflow.entities import Metric, Param

    metrics = [Metric("train_loss", 1.0 - 0.1 * e, start + 60_000 * (e + 1), e) for e in range(3)]
    metrics += [
        Metric("val_accuracy", 0.85 + 0.02 * e, start + 60_000 * (e + 1), e) for e in range(3)
    ]
    params = {**TRAIN_PARAMS, "train.lr": COMPARED_LR}
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run_id, end_time=start + 190_000)
    return run_id


def _running_job(client: Any, store: EventStore) -> str:
    """A job running in this very process (so it is not "lost"), with a firing alert.

    Its MLflow run has the per-step timings and resources of its last five minutes, the
    data stall rising half-way, and the all-reduce timing of a DDP job with ``train.comm``:
    what the Job page draws while a job runs.
    """
    experiment = ensure_experiment(client, "still-training")
    start = _ago_ms(300)
    run = client.create_run(experiment, run_name="still-training", start_time=start)
    run_id = run.info.run_id
    metrics = _step_metrics(start, steps=150, stall_from=75, allreduce=True)
    client.log_batch(run_id, metrics=metrics)
    sink = StoreSink(store, "still-training", run_id)
    sink.start(None)
    sink.stage("train")
    sink.emit([Event("metric", "epoch", 5.0)])
    alert = _alert("EngageJobStalled", "firing", "critical", "no training step for 120 s")
    sink.emit([Event("lifecycle", "alert", data=alert)])
    return run_id


def _step_metrics(
    start_ms: int, steps: int, stall_from: int | None, allreduce: bool = False
) -> list:
    """Rank 0's per-step timings and resources, as the training loop reports them (with
    ``allreduce``, the seconds in and blocked on all-reduce that train.comm timing adds)."""
    from mlflow.entities import Metric

    out, cpu = [], 0.0
    for step in range(1, steps + 1):
        ts = start_ms + 2_000 * step
        wait = 0.06 if stall_from is not None and step >= stall_from else 0.004 + 0.001 * (step % 3)
        compute = 0.04 + 0.002 * (step % 5)
        out += [
            Metric("step_seconds", wait + compute, ts, step),
            Metric("data_wait_seconds", wait, ts, step),
            Metric("compute_seconds", compute, ts, step),
            Metric("samples", 64.0, ts, step),
        ]
        if allreduce:
            out += [
                Metric("allreduce_seconds", 0.6 * compute, ts, step),
                Metric("allreduce_blocked_seconds", 0.25 * compute, ts, step),
            ]
        cpu += 1.6
        out += [
            Metric("worker_cpu_seconds", cpu, ts, step),
            Metric("worker_resident_memory_bytes", (300 + 0.4 * step) * 2**20, ts, step),
        ]
    return out


def _lineage(commit: str) -> dict[str, str]:
    """The tags ``engage run`` sets (engage.tracking.lineage and runtime.stages.open_run)."""
    return {
        "mlflow.source.git.commit": commit * 5 + "12345",
        "engage.git.branch": "main",
        "engage.git.dirty": "false",
        "engage.dataset.digest": "5f2c9e1d0b7a4c3e",
        "engage.dataset.rows": "8143",
        "engage.dataset.source": "data/occupancy.csv",
        "engage.pipeline": "quickstart",
        "engage.spec_file": "pipelines/quickstart.yaml",
        "engage.version": "0.1.0",
        "engage.python": "3.11.9",
        "engage.torch": "2.5.1",
        "engage.host": "laptop",
        "engage.cpus": "2",
    }


def _ago_ms(seconds: float) -> int:
    return int((time.time() - seconds) * 1000)


def _drift(client: Any, store: EventStore) -> str:
    """A deployment's monitoring run with drift checks over time, and its drift alert."""
    experiment = ensure_experiment(client, "engage-serving")
    tags = {
        "engage.serve.app": APP,
        "engage.serve.model": MODEL,
        "engage.serve.version": "1",
        "engage.serve.deployed.1700000000": f"{MODEL}/1",
    }
    run = client.create_run(experiment, run_name=f"serve-{APP}", tags=tags)
    run_id = run.info.run_id
    from mlflow.entities import Metric

    start = int(time.time() * 1000) - 10 * 60_000
    metrics = []
    for i in range(10):
        ts, moved = start + i * 60_000, i >= 6
        for feature, drifts in (("co2", True), ("temperature", True), ("humidity", False)):
            stat = (1.8 if moved and drifts else 0.2) + 0.01 * i
            metrics.append(Metric(f"drift_statistic_cusum_{feature}", stat, ts, i))
            metrics.append(Metric(f"drift_threshold_cusum_{feature}", 1.0, ts, i))
            metrics.append(Metric(f"drift_statistic_quality_{feature}", 0.0, ts, i))
            metrics.append(Metric(f"drift_threshold_quality_{feature}", 0.01, ts, i))
        metrics.append(Metric("drift_detected_cusum", 1.0 if moved else 0.0, ts, i))
        metrics.append(Metric("drift_detected_quality", 0.0, ts, i))
        metrics.append(Metric("drift_checks_ok" if not moved else "drift_checks_drift", 2.0, ts, i))
    client.log_batch(run_id, metrics=metrics)
    sink = StoreSink(store, f"serve-{APP}", run_id)
    data = _alert(
        "EngageDriftDetected",
        "firing",
        "critical",
        f"input drift in co2, temperature of {MODEL}/1 (app {APP})",
        labels={"model": MODEL, "version": "1"},
    )
    data["features"] = ["co2", "temperature"]
    sink.emit([Event("lifecycle", "alert", data=data)])
    return run_id


def _federated(client: Any, store: EventStore) -> str:
    """Four rounds: house-04 flagged then quarantined, house-03's update once tampered."""
    experiment = ensure_experiment(client, FL_JOB)
    run = client.create_run(experiment, run_name=FL_JOB, tags={"engage.federated": "true"})
    run_id = run.info.run_id
    sink = StoreSink(store, FL_JOB, run_id)
    sink.start(None)
    rounds = [_round(r) for r in range(1, ROUNDS + 1)]
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    points = []
    for r in rounds:
        events = report.round_events(r)
        sink.emit(events)
        points += [Metric(k, v, now, r.round) for k, v in report.round_metrics(r).items()]
        _child_run(client, experiment, run_id, r, events)
    client.log_batch(run_id, metrics=points)
    rows = report.verdicts(rounds, list(CLIENTS), {"house-04": "scale"})
    message = "per-client verdicts\n" + report.verdict_table(rows)
    sink.emit([Event("lifecycle", "verdicts", data={"message": message})])
    sink.finish("FINISHED")
    return run_id


def _child_run(client: Any, experiment: str, parent: str, r: RoundResult, events) -> None:
    """The round's child run as ``federated.job._child`` logs it."""
    from mlflow.entities import Metric

    tags = {
        "mlflow.parentRunId": parent,
        "engage.fl.round": str(r.round),
        "engage.fl.flagged": ",".join(r.flagged) or "-",
        "engage.fl.rejected": ",".join(sorted({f"{v.client}:{v.reason}" for v in r.rejected}))
        or "-",
    }
    child = client.create_run(experiment, run_name=f"round-{r.round:04d}", tags=tags)
    now = int(time.time() * 1000)
    points = [
        Metric(
            e.name if "client" not in e.labels else f"{e.name}.{e.labels['client']}",
            e.value,
            now,
            r.round,
        )
        for e in events
        if e.kind == "metric"
    ]
    client.log_batch(child.info.run_id, metrics=points)
    client.set_terminated(child.info.run_id)


def _round(n: int) -> RoundResult:
    selected = [c for c in CLIENTS if not (n == ROUNDS and c == "house-04")]
    result = RoundResult(n, selected, metrics={"val_accuracy": 0.70 + 0.05 * n, "val_loss": 1 / n})
    for c in selected:
        reason = Reason.TAMPERED if (c == "house-03" and n == 2) else None
        result.verdicts.append((Delivery(c, b"", None), UpdateVerdict(n, c, reason)))
    for c in selected:
        if c == "house-03" and n == 2:
            continue
        bad = c == "house-04"
        score = 2.5 + n if bad else 0.1 * (CLIENTS.index(c) + 1)
        reasons = ("norm",) if bad else ()
        result.scores.append(ClientScore(c, n, 1.0, 0.9, 0.1, 0.0, 0.0, score, 0.0, reasons))
        action = ("quarantine" if n == 3 else "exclude") if bad else "aggregate"
        result.decisions.append(Decision(c, n, action, n if bad else 0, reasons))
    return result


def _alert(
    rule: str, state: str, severity: str, summary: str, labels: dict | None = None
) -> dict[str, Any]:
    return {
        "rule": rule,
        "state": state,
        "severity": severity,
        "summary": summary,
        "value": 1.0,
        "labels": labels or {},
    }
