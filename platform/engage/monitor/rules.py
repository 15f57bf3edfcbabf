"""The alert rule catalogue: the one source of truth for engage's alerts.

Each :class:`AlertRule` carries its PromQL expression (rendered into
deploy/prometheus/rules.yml by :mod:`engage.monitor.promexport`) and a Python ``check``
stating the same condition over engage's own series (:mod:`engage.monitor.series`), which
the job's monitor evaluates. A check returns values, never alerts: the
:class:`~engage.monitor.evaluator.AlertEvaluator` applies ``for`` and decides.

Every expression is aggregated ``by (job, run_id)``, so an alert names one run, and the
thresholds are the named constants below, used by both the expression and the check.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from engage.errors import EngageError
from engage.monitor.series import (
    Labels,
    SeriesBuffer,
    Vector,
    count_by,
    deriv,
    max_by,
    max_over_time,
    min_over_time,
    over_time,
)

Severity = Literal["critical", "warning", "info"]
Check = Callable[[SeriesBuffer, float], Vector]

# The thresholds. A job's stall threshold is not here: it is MonitorSpec.stall_seconds,
# exported per job as engage_stall_threshold_seconds.
DATA_BOUND_RATIO = 0.3  # share of step time spent waiting for data
COMM_BOUND_RATIO = 0.5  # share of step time blocked on gradient all-reduce...
COMM_BOUND_FOR_S = 300.0  # ...for this long (a job warming up or checkpointing passes)
LOSS_DIVERGENCE_FACTOR = 2.0  # train loss above this multiple of its recent minimum
LOSS_WINDOW_S = 600.0  # ...over this window
THROUGHPUT_DROP_RATIO = 0.5  # throughput below this share of its recent peak
THROUGHPUT_WINDOW_S = 600.0  # ...over this window
SPOOL_LAG_S = 60.0  # the oldest tracking entry not yet in MLflow is older than this
SPOOL_GROWTH_WINDOW_S = 300.0  # ...and the spool depth grew over this window
FL_SCORE_FLAG = 1.0  # a client's anomaly score at which its update is flagged
FL_QUARANTINED = 1.0  # engage_fl_quarantined of a quarantined client
FL_METRIC_DROP = 0.05  # the global model's val_accuracy this far below its recent best
FL_METRIC_WINDOW_S = 600.0  # ...over this window
DRIFT_DETECTED = 1.0  # engage_drift_detected of a detector whose latest check found drift
DRIFT_FAILED_DETECTORS = 1.0  # detectors without a verdict (NaN) at which checks "failed"
TRAINING_RESTARTS = 1.0  # worker group restarts (within train.max_failures) of one run
# The label-free performance proxy reports through the drift gauges under this detector
# label; it has its own alert (EngagePredictionShift), so EngageDriftDetected leaves it out.
PREDICTION_SHIFT_DETECTOR = "prediction_shift"

_TRAINING = '(max by (job, run_id) (engage_stage{stage="train"}) == 1)'
_TEMPLATE_PART = re.compile(r"{{\s*(.*?)\s*}}")
_VALUE_FORMAT = re.compile(r'^\$value \| printf "%\.(\d)f"$')


@dataclass(frozen=True)
class AlertRule:
    """One alert: its PromQL (for Prometheus) and its Python check (for engage).

    ``summary`` and ``description`` are Prometheus templates restricted to
    ``{{ $labels.NAME }}`` and ``{{ $value | printf "%.Nf" }}``, which :meth:`render`
    reproduces exactly. ``series`` names every metric the rule reads; ``params`` the
    thresholds it uses.
    """

    name: str
    severity: Severity
    summary: str
    description: str
    expr: str
    for_seconds: float
    check: Check
    series: tuple[str, ...]
    params: Mapping[str, float] = field(default_factory=dict)

    def render(self, template: str, labels: Labels, value: float) -> str:
        """The template filled in as Prometheus fills it in.

        Raises
        ------
        ValueError
            If the template has a part other than a label or a ``printf`` of the value.
        """
        have = dict(labels)

        def fill(match: re.Match) -> str:
            """One ``{{ ... }}`` part filled in: a label's value, or the value as Go prints it."""
            part = match.group(1)
            if part.startswith("$labels."):
                return have.get(part.removeprefix("$labels."), "")
            fmt = _VALUE_FORMAT.match(part)
            if fmt is None:
                raise ValueError(f"{self.name}: unsupported template part {{{{ {part} }}}}")
            return _go_float(value, int(fmt.group(1)))

        return _TEMPLATE_PART.sub(fill, template)


def _go_float(value: float, digits: int) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.{digits}f}"


def _training(view: SeriesBuffer, now: float) -> set[Labels]:
    stage = max_by(view.instant("engage_stage", now, stage="train"))
    return {k for k, v in stage.items() if v == 1}


# -- the checks: each states its rule's expr over engage's own series ---------------------------
def _stalled(view: SeriesBuffer, now: float) -> Vector:
    last = max_by(view.instant("engage_last_step_timestamp_seconds", now))
    limit = max_by(view.instant("engage_stall_threshold_seconds", now))
    training = _training(view, now)
    ages = {k: now - t for k, t in last.items()}
    return {k: a for k, a in ages.items() if k in limit and a > limit[k] and k in training}


def _data_bound(view: SeriesBuffer, now: float) -> Vector:
    ratio = max_by(view.instant("engage_data_stall_ratio", now))
    training = _training(view, now)
    return {k: r for k, r in ratio.items() if r > DATA_BOUND_RATIO and k in training}


def _comm_bound(view: SeriesBuffer, now: float) -> Vector:
    ratio = max_by(view.instant("engage_comm_blocked_ratio", now))
    training = _training(view, now)
    return {k: r for k, r in ratio.items() if r > COMM_BOUND_RATIO and k in training}


def _loss_nan(view: SeriesBuffer, now: float) -> Vector:
    loss = view.instant("engage_loss", now, split="train")
    return count_by({k: v for k, v in loss.items() if math.isnan(v)})


def _loss_diverging(view: SeriesBuffer, now: float) -> Vector:
    loss = view.instant("engage_loss", now, split="train")
    lowest = over_time(view.window("engage_loss", now, LOSS_WINDOW_S, split="train"), min_over_time)
    above = {
        k: v
        for k, v in loss.items()
        if k in lowest and lowest[k] > 0 and v > LOSS_DIVERGENCE_FACTOR * lowest[k]
    }
    return max_by(above)


def _throughput_drop(view: SeriesBuffer, now: float) -> Vector:
    current = max_by(view.instant("engage_samples_per_second", now))
    peak = max_by(
        over_time(view.window("engage_samples_per_second", now, THROUGHPUT_WINDOW_S), max_over_time)
    )
    training = _training(view, now)
    out: Vector = {}
    for k, v in current.items():
        if k in peak and peak[k] > 0 and k in training and v / peak[k] < THROUGHPUT_DROP_RATIO:
            out[k] = v / peak[k]
    return out


def _spool_lag_growing(view: SeriesBuffer, now: float) -> Vector:
    lag = max_by(view.instant("engage_tracking_spool_lag_seconds", now))
    slope = max_by(
        over_time(view.window("engage_tracking_spool_depth", now, SPOOL_GROWTH_WINDOW_S), deriv)
    )
    return {k: v for k, v in lag.items() if v > SPOOL_LAG_S and slope.get(k, 0.0) > 0}


_CLIENT = ("job", "run_id", "client")


def _fl_flagged(view: SeriesBuffer, now: float) -> Vector:
    score = max_by(view.instant("engage_fl_client_score", now), _CLIENT)
    return {k: v for k, v in score.items() if v >= FL_SCORE_FLAG}


def _fl_quarantined(view: SeriesBuffer, now: float) -> Vector:
    quarantined = max_by(view.instant("engage_fl_quarantined", now), _CLIENT)
    return {k: v for k, v in quarantined.items() if v == FL_QUARANTINED}


def _fl_metric_drop(view: SeriesBuffer, now: float) -> Vector:
    match = {"metric": "val_accuracy"}
    current = max_by(view.instant("engage_fl_global_metric", now, **match))
    window = view.window("engage_fl_global_metric", now, FL_METRIC_WINDOW_S, **match)
    best = max_by(over_time(window, max_over_time))
    drops = {k: best[k] - v for k, v in current.items() if k in best}
    return {k: d for k, d in drops.items() if d > FL_METRIC_DROP}


def _drift_detected(view: SeriesBuffer, now: float) -> Vector:
    inputs = {
        k: v
        for k, v in view.instant("engage_drift_detected", now).items()
        if dict(k).get("detector", "") != PREDICTION_SHIFT_DETECTOR
    }
    return {k: v for k, v in max_by(inputs).items() if v == DRIFT_DETECTED}


def _prediction_shift(view: SeriesBuffer, now: float) -> Vector:
    shift = view.instant("engage_drift_detected", now, detector=PREDICTION_SHIFT_DETECTOR)
    return {k: v for k, v in max_by(shift).items() if v == DRIFT_DETECTED}


def _drift_check_failed(view: SeriesBuffer, now: float) -> Vector:
    detected = view.instant("engage_drift_detected", now)
    failed = count_by({k: v for k, v in detected.items() if math.isnan(v)})
    return {k: n for k, n in failed.items() if n >= DRIFT_FAILED_DETECTORS}


def _restarted(view: SeriesBuffer, now: float) -> Vector:
    restarts = max_by(view.instant("engage_restarts_total", now))
    return {k: v for k, v in restarts.items() if v >= TRAINING_RESTARTS}


def _duration(seconds: float) -> str:
    """A PromQL duration: 600 -> "10m", 90 -> "90s"."""
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


_RUN = "run {{ $labels.run_id }} of job {{ $labels.job }}"

RULES: tuple[AlertRule, ...] = (
    AlertRule(
        name="EngageJobStalled",
        severity="critical",
        summary='No training step for {{ $value | printf "%.0f" }} s in ' + _RUN,
        description=(
            "The run is in its train stage but has reported no step for longer than its "
            "stall threshold (monitor.stall_seconds in the spec). A worker may be hung in "
            "a data loader, a collective operation or a deadlock: read the worker logs and "
            "compare engage_worker_cpu_seconds_total across ranks."
        ),
        expr=(
            "(time() - max by (job, run_id) (engage_last_step_timestamp_seconds))\n"
            "  > on (job, run_id) max by (job, run_id) (engage_stall_threshold_seconds)\n"
            f"and on (job, run_id) {_TRAINING}"
        ),
        for_seconds=30.0,
        check=_stalled,
        series=("engage_last_step_timestamp_seconds", "engage_stall_threshold_seconds"),
    ),
    AlertRule(
        name="EngageDataBound",
        severity="warning",
        summary=(
            'Training waits for data {{ $value | printf "%.2f" }} of its step time in ' + _RUN
        ),
        description=(
            f"Over the last minute more than {DATA_BOUND_RATIO:.0%} of step time (data wait, "
            "host-to-device copy and compute, per worker) went to waiting for the next batch: "
            "the input pipeline, not the model, limits throughput. Raise train.batch_size "
            "(fewer, larger fetches per epoch), check that train.faults.data_delay_seconds is "
            "unset, run `engage profile SPEC` for the remedy, or set train.loader: auto."
        ),
        expr=(
            f"max by (job, run_id) (engage_data_stall_ratio) > {DATA_BOUND_RATIO:g}\n"
            f"and on (job, run_id) {_TRAINING}"
        ),
        for_seconds=60.0,
        check=_data_bound,
        series=("engage_data_stall_ratio",),
        params={"ratio": DATA_BOUND_RATIO},
    ),
    AlertRule(
        name="EngageCommBound",
        severity="warning",
        summary=(
            'Training is blocked on gradient all-reduce {{ $value | printf "%.2f" }} of its '
            "step time in " + _RUN
        ),
        description=(
            f"For {_duration(COMM_BOUND_FOR_S)}, more than {COMM_BOUND_RATIO:.0%} of step time "
            "over the last minute went to waiting for gradient all-reduce after the backward "
            "pass: communication, not compute, limits throughput, and more workers will not "
            "help. Compress gradients (train.comm.compression fp16, bf16 or powersgd), tune "
            "train.comm.bucket_cap_mb, raise train.batch_size or train.grad_accumulation "
            "(fewer all-reduces per sample), or use fewer workers; `engage plan SPEC` "
            "predicts which pays."
        ),
        expr=(
            f"max by (job, run_id) (engage_comm_blocked_ratio) > {COMM_BOUND_RATIO:g}\n"
            f"and on (job, run_id) {_TRAINING}"
        ),
        for_seconds=COMM_BOUND_FOR_S,
        check=_comm_bound,
        series=("engage_comm_blocked_ratio",),
        params={"ratio": COMM_BOUND_RATIO},
    ),
    AlertRule(
        name="EngageLossNaN",
        severity="critical",
        summary="Train loss is NaN in " + _RUN,
        description=(
            "The latest train loss is not a number; training cannot recover by itself. "
            "Usual causes: a learning rate too high, a log of zero or a division by zero "
            "in the loss, or NaN in the input data. An infinite loss shows as "
            "EngageLossDiverging."
        ),
        expr='count by (job, run_id) (engage_loss{split="train"} != engage_loss{split="train"})',
        for_seconds=30.0,
        check=_loss_nan,
        series=("engage_loss",),
    ),
    AlertRule(
        name="EngageLossDiverging",
        severity="warning",
        summary='Train loss {{ $value | printf "%.4f" }} is diverging in ' + _RUN,
        description=(
            f"The train loss is above {LOSS_DIVERGENCE_FACTOR:g} times its minimum over "
            f"the last {_duration(LOSS_WINDOW_S)}. Lower the learning rate, add gradient "
            "clipping or warm-up, or check the latest data for outliers."
        ),
        expr=(
            "max by (job, run_id) (\n"
            '  engage_loss{split="train"}\n'
            f"    > {LOSS_DIVERGENCE_FACTOR:g} * min_over_time("
            f'engage_loss{{split="train"}}[{_duration(LOSS_WINDOW_S)}])\n'
            f'  and min_over_time(engage_loss{{split="train"}}[{_duration(LOSS_WINDOW_S)}]) > 0\n'
            ")"
        ),
        for_seconds=60.0,
        check=_loss_diverging,
        series=("engage_loss",),
        params={"factor": LOSS_DIVERGENCE_FACTOR, "window_seconds": LOSS_WINDOW_S},
    ),
    AlertRule(
        name="EngageThroughputDrop",
        severity="warning",
        summary=('Throughput at {{ $value | printf "%.2f" }} of its recent peak in ' + _RUN),
        description=(
            f"Samples per second fell below {THROUGHPUT_DROP_RATIO:.0%} of their maximum "
            f"over the last {_duration(THROUGHPUT_WINDOW_S)} while training. Look for "
            "contention on the node (CPU, memory, GPU), a slower data source, or a "
            "worker group restart."
        ),
        expr=(
            "(\n"
            "  max by (job, run_id) (engage_samples_per_second)\n"
            "  / max by (job, run_id) (max_over_time("
            f"engage_samples_per_second[{_duration(THROUGHPUT_WINDOW_S)}]))\n"
            f") < {THROUGHPUT_DROP_RATIO:g}\n"
            f"and on (job, run_id) {_TRAINING}"
        ),
        for_seconds=120.0,
        check=_throughput_drop,
        series=("engage_samples_per_second",),
        params={"ratio": THROUGHPUT_DROP_RATIO, "window_seconds": THROUGHPUT_WINDOW_S},
    ),
    AlertRule(
        name="EngageTrackingLagGrowing",
        severity="warning",
        summary=(
            'Tracking is {{ $value | printf "%.0f" }} s behind and falling further in ' + _RUN
        ),
        description=(
            f"The oldest tracking entry not yet in MLflow is older than {SPOOL_LAG_S:g} s "
            f"and the spool grew over the last {_duration(SPOOL_GROWTH_WINDOW_S)}. Nothing "
            "is lost (the spool is durable), but MLflow is unreachable or too slow: check "
            "the tracking server, then run `engage sync` once it is back."
        ),
        expr=(
            f"max by (job, run_id) (engage_tracking_spool_lag_seconds) > {SPOOL_LAG_S:g}\n"
            "and on (job, run_id)\n"
            "  max by (job, run_id) (deriv(engage_tracking_spool_depth"
            f"[{_duration(SPOOL_GROWTH_WINDOW_S)}])) > 0"
        ),
        for_seconds=120.0,
        check=_spool_lag_growing,
        series=("engage_tracking_spool_lag_seconds", "engage_tracking_spool_depth"),
        params={"lag_seconds": SPOOL_LAG_S, "window_seconds": SPOOL_GROWTH_WINDOW_S},
    ),
    AlertRule(
        name="EngageFederatedClientFlagged",
        severity="warning",
        summary=(
            'Federated client {{ $labels.client }} scores {{ $value | printf "%.2f" }} '
            "(anomalous update) in " + _RUN
        ),
        description=(
            "The client's last update was flagged by the anomaly scorer (score >= "
            f"{FL_SCORE_FLAG:g}: an outlying norm or distance, a direction against the "
            "robust centre, or a copy of another client's or of a past update) and was left "
            "out of the aggregate. Check the client's data and software; repeated flags "
            "quarantine it (federated.quarantine_after)."
        ),
        expr=f"max by (job, run_id, client) (engage_fl_client_score) >= {FL_SCORE_FLAG:g}",
        for_seconds=30.0,
        check=_fl_flagged,
        series=("engage_fl_client_score",),
        params={"score": FL_SCORE_FLAG},
    ),
    AlertRule(
        name="EngageFederatedClientQuarantined",
        severity="critical",
        summary="Federated client {{ $labels.client }} is quarantined in " + _RUN,
        description=(
            "The client was flagged federated.quarantine_after times; the server no longer "
            "samples it and refuses its updates. Investigate it (compromised device, "
            "poisoned data) and rotate its key with `engage fl keys --rotate` before it "
            "rejoins a new run."
        ),
        expr=f"max by (job, run_id, client) (engage_fl_quarantined) == {FL_QUARANTINED:g}",
        for_seconds=15.0,
        check=_fl_quarantined,
        series=("engage_fl_quarantined",),
        params={"value": FL_QUARANTINED},
    ),
    AlertRule(
        name="EngageFederatedGlobalMetricDrop",
        severity="warning",
        summary=(
            'Global model val_accuracy fell {{ $value | printf "%.3f" }} below its recent '
            "best in " + _RUN
        ),
        description=(
            f"The federated global model's validation accuracy is more than "
            f"{FL_METRIC_DROP:g} below its maximum over the last "
            f"{_duration(FL_METRIC_WINDOW_S)}. Poisoned updates may be getting through: "
            "look at the flagged and rejected updates of the last rounds, or use a robust "
            "aggregator (median, trimmed_mean, krum)."
        ),
        expr=(
            "max by (job, run_id) (max_over_time("
            f'engage_fl_global_metric{{metric="val_accuracy"}}[{_duration(FL_METRIC_WINDOW_S)}]))\n'
            '  - max by (job, run_id) (engage_fl_global_metric{metric="val_accuracy"})\n'
            f"> {FL_METRIC_DROP:g}"
        ),
        for_seconds=30.0,
        check=_fl_metric_drop,
        series=("engage_fl_global_metric",),
        params={"drop": FL_METRIC_DROP, "window_seconds": FL_METRIC_WINDOW_S},
    ),
    AlertRule(
        name="EngageDriftDetected",
        severity="warning",
        summary="Served inputs drift from the training data in " + _RUN,
        description=(
            "A drift detector's latest check of the sampled requests found the inputs "
            "changed from the served version's training reference. "
            "engage_drift_statistic over engage_drift_threshold by feature shows which "
            "inputs moved (the alert in `engage monitor alerts` names them). Check the "
            "sensors and the upstream data; retrain on recent data if the change is real."
        ),
        expr=(
            "max by (job, run_id) ("
            f'engage_drift_detected{{detector!="{PREDICTION_SHIFT_DETECTOR}"}})'
            f" == {DRIFT_DETECTED:g}"
        ),
        for_seconds=60.0,
        check=_drift_detected,
        series=("engage_drift_detected",),
        params={"detected": DRIFT_DETECTED},
    ),
    AlertRule(
        name="EngagePredictionShift",
        severity="warning",
        summary="Served predictions shift from the training outputs in " + _RUN,
        description=(
            "The label-free performance proxy's latest check found the sampled predictions "
            "moved from the served version's training outputs: the predicted-class (or "
            "value) distribution shifted, or the mean confidence dropped. "
            f'engage_drift_statistic{{detector="{PREDICTION_SHIFT_DETECTOR}"}} by feature '
            "(predicted_class, confidence_drop, prediction) shows which. The model may be "
            "decaying without labels to show it yet: compare with EngageDriftDetected, join "
            "delayed labels with `engage drift performance`, and retrain if it persists."
        ),
        expr=(
            "max by (job, run_id) ("
            f'engage_drift_detected{{detector="{PREDICTION_SHIFT_DETECTOR}"}})'
            f" == {DRIFT_DETECTED:g}"
        ),
        for_seconds=60.0,
        check=_prediction_shift,
        series=("engage_drift_detected",),
        params={"detected": DRIFT_DETECTED},
    ),
    AlertRule(
        name="EngageDriftCheckFailed",
        severity="warning",
        summary=('{{ $value | printf "%.0f" }} drift detector(s) without a verdict in ' + _RUN),
        description=(
            "A drift detector's latest check raised an error or gave a NaN p-value, so "
            "nothing is known about drift (this is never read as no drift). Read the "
            "replica's log for the detector error; a missing or unreadable reference, "
            "non-finite inputs or an unreachable MLflow are the usual causes."
        ),
        expr=(
            "count by (job, run_id) (engage_drift_detected != engage_drift_detected)"
            f" >= {DRIFT_FAILED_DETECTORS:g}"
        ),
        for_seconds=60.0,
        check=_drift_check_failed,
        series=("engage_drift_detected",),
        params={"detectors": DRIFT_FAILED_DETECTORS},
    ),
    AlertRule(
        name="EngageTrainingRestarted",
        severity="warning",
        summary=(
            'Training workers restarted {{ $value | printf "%.0f" }} time(s) from a checkpoint '
            "in " + _RUN
        ),
        description=(
            "A training worker process or its node died and Ray Train restarted every worker "
            "from the last valid checkpoint; the epochs since that checkpoint were trained "
            "again (MLflow keeps one value per epoch). The job fails once it has used up "
            "train.max_failures. Read the worker logs and the node's memory for the cause; "
            "the run's engage.restart tags say where each restart resumed."
        ),
        expr=f"max by (job, run_id) (engage_restarts_total) >= {TRAINING_RESTARTS:g}",
        for_seconds=15.0,
        check=_restarted,
        series=("engage_restarts_total",),
        params={"restarts": TRAINING_RESTARTS},
    ),
)
_BY_NAME = {rule.name: rule for rule in RULES}


def get_rule(name: str) -> AlertRule:
    """The rule called ``name``.

    Raises
    ------
    EngageError
        If no rule has that name; the hint lists the valid ones.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        valid = ", ".join(sorted(_BY_NAME))
        raise EngageError(f"unknown alert rule {name!r}", hint=f"valid rules: {valid}") from None


def rule_names() -> list[str]:
    """The names of every alert rule, in the order :data:`RULES` defines them."""
    return list(_BY_NAME)


def series_names(rules: tuple[AlertRule, ...] = RULES) -> set[str]:
    """Every metric name the rules read (what a :class:`SeriesBuffer` must keep)."""
    return {"engage_stage"} | {name for rule in rules for name in rule.series}
