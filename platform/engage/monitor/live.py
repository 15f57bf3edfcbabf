"""The live view's data: running jobs from the store joined with a scrape of each endpoint.

Jobs come from two places, because either can be missing: the event store (jobs recorded
as running) and the discovery folder (endpoints advertised for Prometheus). An endpoint
that does not answer makes its job "unreachable", never an error of the view.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from engage.monitor._schema import AlertRecord, JobRecord
from engage.monitor.discovery import list_targets
from engage.monitor.store import TERMINAL_STATES, EventStore
from engage.train.metrics import PRIMARY_VAL_METRIC

SCRAPE_TIMEOUT_S = 2.0
_MAX_BODY = 8 * 1024 * 1024  # a job's exposition is a few KB; refuse anything absurd

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class Target:
    """A job's metrics endpoint, from discovery or from the store's ``metrics_url``."""

    job: str
    run_id: str
    url: str


@dataclass(frozen=True)
class Scrape:
    """One GET of a target's ``/metrics``: the exposition ``text`` if it answered, else
    ``error``."""

    target: Target
    at: float
    text: str | None = None  # the exposition text when the endpoint answered
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the endpoint answered with exposition text."""
        return self.text is not None


@dataclass(frozen=True)
class JobView:
    """One row of the live table."""

    job: str
    run_id: str
    state: str  # running | unreachable | lost
    url: str | None = None
    stage: str | None = None
    epoch: float | None = None
    train_loss: float | None = None
    val_metric: tuple[str, float] | None = None
    samples_per_second: float | None = None
    stall_ratio: float | None = None
    comm_blocked_ratio: float | None = None  # only for jobs whose all-reduce is timed
    since_last_step_s: float | None = None
    workers: float | None = None
    spool_depth: float | None = None
    firing: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class LiveView:
    """What the live view shows at ``taken_at``: a row per job, the open alerts, the store's
    display URL and notes on what could not be read (an unavailable store).
    """

    jobs: list[JobView]
    alerts: list[AlertRecord]
    taken_at: float
    store_url: str | None = None
    notes: list[str] = field(default_factory=list)


def discovered_targets(home: Path) -> list[Target]:
    """Every job endpoint advertised by a discovery file under ``home``."""
    return [
        Target(t.get("job", "?"), t.get("run_id", "?"), f"http://{t['address']}/metrics")
        for t in list_targets(home)
        if "address" in t
    ]


def scrape(target: Target, timeout_s: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """GET the endpoint; a failure is a Scrape with ``error``, never an exception."""
    at = time.time()
    try:
        with urllib.request.urlopen(target.url, timeout=timeout_s) as response:
            body = response.read(_MAX_BODY + 1)
        if len(body) > _MAX_BODY:
            return Scrape(target, at, error="exposition larger than 8 MiB")
        return Scrape(target, at, text=body.decode("utf-8", errors="replace"))
    except (OSError, ValueError) as exc:  # URLError, timeouts and resets are OSErrors
        return Scrape(target, at, error=str(getattr(exc, "reason", None) or exc))


def scrape_all(targets: Sequence[Target], timeout_s: float = SCRAPE_TIMEOUT_S) -> list[Scrape]:
    """Scrape ``targets`` in parallel (at most 8 at a time); failures are Scrapes with an error."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        return list(pool.map(lambda t: scrape(t, timeout_s), targets))


def parse_samples(text: str) -> Samples:
    """Exposition text -> ``{sample name: [(labels, value), ...]}``."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def job_view(target: Target, samples: Samples, now: float, state: str = "running") -> JobView:
    """The key metrics of one job from its parsed exposition."""

    def one(name: str, **match: str) -> float | None:
        """The first value of sample ``name`` whose labels include ``match``; None if none does."""
        for labels, value in samples.get(name, []):
            if all(labels.get(k) == v for k, v in match.items()):
                return value
        return None

    stage = next((lb.get("stage") for lb, v in samples.get("engage_stage", []) if v == 1), None)
    evals = {lb.get("metric", ""): v for lb, v in samples.get("engage_eval_metric", [])}
    vals = [m for m in (*PRIMARY_VAL_METRIC.values(), *sorted(evals)) if m.startswith("val_")]
    main = next((m for m in vals if m in evals), None)
    last_step = one("engage_last_step_timestamp_seconds")
    firing = tuple(
        lb.get("alertname", "?") for lb, v in samples.get("engage_alerts_firing", []) if v
    )
    return JobView(
        job=target.job,
        run_id=target.run_id,
        state=state,
        url=target.url,
        stage=stage,
        epoch=one("engage_epoch"),
        train_loss=one("engage_loss", split="train"),
        val_metric=(main, evals[main]) if main else None,
        samples_per_second=one("engage_samples_per_second"),
        stall_ratio=one("engage_data_stall_ratio"),
        comm_blocked_ratio=one("engage_comm_blocked_ratio"),
        since_last_step_s=max(0.0, now - last_step) if last_step else None,
        workers=one("engage_workers"),
        spool_depth=one("engage_tracking_spool_depth"),
        firing=firing,
    )


def collect(home: Path, store: EventStore | None, timeout_s: float = SCRAPE_TIMEOUT_S) -> LiveView:
    """Everything the live view shows, gathered now."""
    notes: list[str] = []
    known: dict[str, JobRecord] = {}
    alerts: list[AlertRecord] = []
    if store is not None and store.exists():
        try:
            known = {j.run_id: j for j in store.running_jobs()}
            alerts = store.open_alerts()
        except Exception as exc:  # the live view still shows what the endpoints say
            notes.append(f"event store unavailable: {exc}")
    targets = {t.run_id: t for t in discovered_targets(home)}
    for run_id, record in known.items():
        if run_id not in targets and record.metrics_url:
            targets[run_id] = Target(record.job, run_id, record.metrics_url)
    ended = _ended(store, [r for r in targets if r not in known]) if store else set()
    scrapes = {s.target.run_id: s for s in scrape_all(list(targets.values()), timeout_s)}
    now = time.time()
    views = []
    for run_id in dict.fromkeys([*known, *targets]):
        views.append(_view(known.get(run_id), targets.get(run_id), scrapes.get(run_id), now))
    # A stale discovery file of a job the store saw end, that no longer answers: not news.
    views = [v for v in views if not (v.run_id in ended and v.state != "running")]
    return LiveView(views, alerts, now, store.display_url if store else None, notes)


def _view(record: JobRecord | None, target: Target | None, got: Scrape | None, now: float):
    if target is not None and got is not None and got.ok:
        try:
            return job_view(target, parse_samples(got.text or ""), now)
        except ValueError as exc:
            return JobView(target.job, target.run_id, "unreachable", target.url, error=str(exc))
    if record is not None and record.state == "lost":
        return JobView(
            record.job, record.run_id, "lost", record.metrics_url, record.stage, record.epoch
        )
    job, run_id = (record.job, record.run_id) if record else (target.job, target.run_id)
    return JobView(
        job,
        run_id,
        "unreachable" if target is not None else "running",
        target.url if target else None,
        record.stage if record else None,
        record.epoch if record else None,
        error=got.error if got else None,
    )


def _ended(store: EventStore, run_ids: list[str]) -> set[str]:
    out = set()
    for run_id in run_ids:
        try:
            record = store.job(run_id) if store.exists() else None
        except Exception:
            return out
        if record is not None and record.state in TERMINAL_STATES:
            out.add(run_id)
    return out
