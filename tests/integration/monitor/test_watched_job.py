"""One real job watched by a real Prometheus: discovery, scraping, PromQL against what the job
reported, promtool on the live endpoint, and the data-bound and stall alerts end to end.

One job serves every test here (a Ray job costs a minute of start-up on 2 cores): it is
data-bound from its first step (``data_delay_seconds``) for longer than EngageDataBound's 1 m
``for``, then hangs after epoch STALL_AFTER for longer than the 5 s stall threshold plus
EngageJobStalled's 30 s ``for``, then finishes. The metrics are compared while it hangs,
when nothing moves. The scenario records what it saw; each test asserts one claim.

The scenario mostly waits, so tests/conftest.py starts it in a thread when the unit tests
begin and runs this module after them (``start_in_background``); run alone, the module
fixture starts it. The time, subprocess and Prometheus helpers it calls are bound at import:
a unit test may monkeypatch ``time.monotonic`` or ``subprocess.run`` while it runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import run as run_command  # bound at import, as monotonic (see below)
from time import monotonic  # a unit test may patch time.monotonic while the scenario runs
from typing import Any

import pytest
from _cli_job import ENGAGE, CliJob
from _prometheus import Prometheus, wait_for
from mlflow import MlflowClient
from prometheus_client.parser import text_string_to_metric_families

from engage.monitor.discovery import target_file
from engage.monitor.rules import DATA_BOUND_RATIO, get_rule
from engage.monitor.store import EventStore

_INSTALLED = shutil.which("prometheus") is not None and shutil.which("promtool") is not None
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not _INSTALLED,
        reason="prometheus/promtool not installed; `make test` installs them (Debian prometheus)",
    ),
]

REPO = Path(__file__).resolve().parents[3]
EPOCHS, STALL_AFTER, STALL_S, STALL_THRESHOLD_S = 16, 15, 50, 5
DELAY_S, BATCH = 0.1, 128  # 44 steps of >= 0.1 s per epoch: 15 epochs >= 66 s data-bound
JOB_ARGS = [
    "run", "pipelines/quickstart.yaml",
    "--set", "data.source.days=7",
    "--set", "deploy.after_training=false",
    "--set", f"train.epochs={EPOCHS}",
    "--set", f"train.batch_size={BATCH}",
    "--set", "train.checkpoint_every=1000",  # one checkpoint, at the end
    "--set", f"train.faults.data_delay_seconds={DELAY_S}",
    "--set", f"train.faults.stall_after_epoch={STALL_AFTER}",
    "--set", f"train.faults.stall_seconds={STALL_S}",
    "--set", f"monitor.stall_seconds={STALL_THRESHOLD_S}",
    "--set", "monitor.evaluate_every_seconds=1",
    "--set", "export.formats=[]",  # after training: nothing here watches the export stage
]  # fmt: skip
QUERIES = (
    "engage_epoch",
    'engage_loss{split="train"}',
    "engage_steps_total",
    "engage_step_seconds_count",
    "engage_workers",
    "engage_data_stall_ratio",
)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Watch:
    """What the scenario saw, in the order it happened (wall-clock times)."""

    home: Path
    job: CliJob | None = None
    failure: str | None = None  # the first phase that did not happen, and why
    url: str | None = None
    printed_at: float | None = None  # "monitor: metrics at" read
    discovered_at: float | None = None  # Prometheus has up == 1 for the job
    up_labels: dict[str, str] = field(default_factory=dict)
    promtool: subprocess.CompletedProcess | None = None
    stall_line: str | None = None  # "epoch STALL_AFTER/EPOCHS: loss ..."
    stall_at: float | None = None
    prometheus_at_stall: Samples = field(default_factory=dict)
    endpoint_at_stall: Samples = field(default_factory=dict)
    alerts_cli_while_stalled: subprocess.CompletedProcess | None = None
    prometheus_firing: dict[str, float] = field(default_factory=dict)  # alertname -> first seen
    returncode: int | None = None
    ended_at: float | None = None
    target_gone_at: float | None = None
    alerts_cli_after: subprocess.CompletedProcess | None = None
    run_id: str | None = None

    def need(self, *names: str) -> None:
        missing = [n for n in names if getattr(self, n) in (None, {}, "")]
        if missing:
            out = self.job.output[-3000:] if self.job else ""
            pytest.fail(f"the scenario did not get {missing}: {self.failure}\n{out}")


def _endpoint(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def _parse(text: str, names: set[str]) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in names and s.labels.get("split", "train") == "train":
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _prometheus_samples(prom: Prometheus) -> Samples:
    out: Samples = {}
    for q in QUERIES:
        name = q.split("{")[0]
        for labels, value in prom.values(q).items():
            out[(name, tuple((k, v) for k, v in labels if k != "instance"))] = value
    return out


def _engage(watch: Watch, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_command(
        [str(ENGAGE), *args],
        cwd=watch.home.parent, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _poll_prometheus_alerts(prom: Prometheus, watch: Watch, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        for a in prom.alerts():
            if a.get("state") == "firing" and a["labels"].get("job") == "quickstart":
                watch.prometheus_firing.setdefault(a["labels"]["alertname"], time.time())


def _scenario(watch: Watch, prom: Prometheus, env: dict[str, str]) -> None:
    job = watch.job = CliJob.start(JOB_ARGS, watch.home.parent, env)
    _, m = job.wait_for_line(r"monitor: metrics at (http://\S+/metrics)", 120)
    watch.url, watch.printed_at = m.group(1), time.time()

    up = wait_for(lambda: prom.query('up{job="quickstart"} == 1'), 30, "Prometheus scraping")
    watch.discovered_at, watch.up_labels = time.time(), up[0]["metric"]

    job.wait_for_line(r"epoch 1/", 300)
    text = _endpoint(watch.url)
    watch.promtool = run_command(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )

    watch.stall_at, m = job.wait_for_line(rf"epoch {STALL_AFTER}/{EPOCHS}: .*", 400)
    watch.stall_line = m.group(0)
    names = {q.split("{")[0] for q in QUERIES}
    deadline = monotonic() + 15
    while True:  # the last steps' events reach the endpoint, then the next scrape
        time.sleep(2)
        endpoint = _parse(_endpoint(watch.url), names)
        scraped = _prometheus_samples(prom)
        if all(endpoint.get(k) == v for k, v in scraped.items()) or monotonic() > deadline:
            break
    watch.endpoint_at_stall, watch.prometheus_at_stall = endpoint, scraped

    job.wait_for_line(r"alert EngageJobStalled firing", STALL_S + 10)
    watch.alerts_cli_while_stalled = _engage(watch, env, "monitor", "alerts")

    watch.returncode = job.wait(300)
    watch.ended_at = time.time()
    _, m = job.wait_for_line(r"run id: ([0-9a-f]{32})", 1)
    watch.run_id = m.group(1)

    def gone() -> bool:
        return all(t["labels"].get("run_id") != watch.run_id for t in prom.active_targets())

    wait_for(gone, 15, "the finished job's target leaving Prometheus' discovery")
    watch.target_gone_at = time.time()
    watch.alerts_cli_after = _engage(watch, env, "monitor", "alerts", "--all")


def _run_scenario(root: Path, running: _Background) -> Watch:
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env |= {"ENGAGE_HOME": str(root / ".engage"), "COLUMNS": "200"}
    watch = running.watch = Watch(home=root / ".engage")
    prom = running.prom = Prometheus(root).start()  # discovers root/.engage/prometheus/targets
    stop = threading.Event()
    poller = threading.Thread(target=_poll_prometheus_alerts, args=(prom, watch, stop))
    poller.start()
    started = monotonic()
    try:
        _scenario(watch, prom, env)
    except AssertionError as exc:
        watch.failure = str(exc)
    finally:
        stop.set()
        poller.join()
        if watch.job is not None:
            watch.job.kill()
        prom.stop()
    running.seconds = monotonic() - started
    return watch


class _Background:
    """The scenario in a thread of its own: it mostly waits (slow input, then a hang)."""

    def __init__(self, root: Path) -> None:
        self.watch: Watch | None = None
        self.prom: Prometheus | None = None
        self.seconds = 0.0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(root,), name="watched-job")
        self._thread.daemon = True
        self._thread.start()

    def _run(self, root: Path) -> None:
        try:
            _run_scenario(root, self)
        except BaseException as exc:  # handed to the fixture that waits for the result
            self._error = exc

    def result(self) -> Watch:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self.watch is not None
        return self.watch

    def stop(self) -> None:
        """End the job and Prometheus if the scenario still runs (an interrupted session)."""
        if self._thread.is_alive():
            if self.watch is not None and self.watch.job is not None:
                self.watch.job.kill()
            if self.prom is not None:
                self.prom.stop()
            self._thread.join(timeout=60)


_running: list[_Background] = []


def start_in_background(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Start the scenario now, in a thread; the ``watch`` fixture waits for what it saw.

    tests/conftest.py calls this when the unit tests begin and runs this module after them:
    the unit tests keep about one core busy, the scenario mostly sleeps, so its three minutes
    overlap theirs instead of adding to them.
    """
    if not _running and _INSTALLED:
        _running.append(_Background(tmp_path_factory.mktemp("watched")))


def stop_background() -> None:
    """Stop a scenario still running when the session ends (tests/conftest.py calls this)."""
    for running in _running:
        running.stop()


@pytest.fixture(scope="module")
def watch(tmp_path_factory: pytest.TempPathFactory) -> Watch:
    start_in_background(tmp_path_factory)  # unless tests/conftest.py started it already
    waited = monotonic()
    watch = _running[0].result()
    print(
        f"\nwatched job scenario: {_running[0].seconds:.0f} s, "
        f"{monotonic() - waited:.0f} s of it after the tests before this module"
    )
    return watch


def _one(samples: Samples, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(hits) == 1, f"{name}{labels}: {hits} in {sorted(samples)}"
    return hits[0]


# -- 1. Prometheus discovers, scrapes, and agrees with the job ------------------------------------
def test_prometheus_discovers_the_job_within_seconds_with_its_run_labels(watch: Watch) -> None:
    watch.need("discovered_at", "run_id")

    assert watch.discovered_at - watch.printed_at < 10
    assert watch.up_labels["job"] == "quickstart"
    assert watch.up_labels["run_id"] == watch.run_id  # the MLflow run id the CLI printed


def test_promql_and_the_endpoint_agree_with_what_the_job_reported(watch: Watch) -> None:
    watch.need("prometheus_at_stall", "stall_line", "run_id")
    prom, endpoint = watch.prometheus_at_stall, watch.endpoint_at_stall
    mlflow = MlflowClient(f"sqlite:///{watch.home}/mlflow.db")
    steps_per_epoch = max(m.step for m in mlflow.get_metric_history(watch.run_id, "step_seconds"))
    steps_per_epoch //= EPOCHS
    printed_loss = float(watch.stall_line.split("loss ")[1].split()[0])
    (mlflow_loss,) = [
        m.value
        for m in mlflow.get_metric_history(watch.run_id, "train_loss")
        if m.step == STALL_AFTER
    ]

    assert prom == endpoint  # every series the queries return, same labels, same values
    assert {dict(ls)["run_id"] for _, ls in prom} == {watch.run_id}
    assert {dict(ls)["job"] for _, ls in prom} == {"quickstart"}
    assert _one(prom, "engage_epoch") == STALL_AFTER  # the epoch the CLI showed last
    assert _one(prom, "engage_loss", split="train") == pytest.approx(mlflow_loss, rel=1e-12)
    assert _one(prom, "engage_loss", split="train") == pytest.approx(printed_loss, abs=5e-5)
    assert _one(prom, "engage_workers") == 2
    for rank in ("0", "1"):
        assert _one(prom, "engage_steps_total", rank=rank) == STALL_AFTER * steps_per_epoch
        assert _one(prom, "engage_step_seconds_count", rank=rank) == STALL_AFTER * steps_per_epoch
    assert DATA_BOUND_RATIO < _one(prom, "engage_data_stall_ratio") <= 1


def test_the_live_endpoint_passes_promtool_check_metrics(watch: Watch) -> None:
    watch.need("promtool")

    assert watch.promtool.returncode == 0, watch.promtool.stdout + watch.promtool.stderr
    assert watch.promtool.stdout + watch.promtool.stderr == ""


def test_the_target_leaves_discovery_when_the_job_ends(watch: Watch) -> None:
    watch.need("target_gone_at")

    assert watch.returncode == 0, watch.job.output[-3000:]
    assert not target_file(watch.home, "quickstart", watch.run_id).exists()
    assert watch.target_gone_at - watch.ended_at < 10


# -- 3. the alerts, through every channel ---------------------------------------------------------
def _stored_alerts(watch: Watch) -> dict[str, Any]:
    store = EventStore.open(watch.home)
    try:
        return {a.rule: a for a in store.alerts(watch.run_id)}
    finally:
        store.close()


def _tags(watch: Watch) -> dict[str, str]:
    return MlflowClient(f"sqlite:///{watch.home}/mlflow.db").get_run(watch.run_id).data.tags


def test_a_stalled_job_raises_engage_job_stalled(watch: Watch) -> None:
    watch.need("alerts_cli_while_stalled", "alerts_cli_after", "run_id")
    stalled = _stored_alerts(watch)["EngageJobStalled"]
    for_s = get_rule("EngageJobStalled").for_seconds

    # it fired once the hang outlasted the threshold and the rule's `for`, and resolved after.
    # The value is the job's own stall clock (from its last step); `stall_at` is when this test
    # read the epoch line, a pipe hop later, so the wall-clock bound allows that hop.
    assert stalled.value > for_s + STALL_THRESHOLD_S
    assert for_s + STALL_THRESHOLD_S - 2 < stalled.started_at - watch.stall_at < STALL_S
    assert stalled.resolved_at is not None
    assert "EngageJobStalled" in watch.alerts_cli_while_stalled.stdout  # open while it hung
    assert "No training step for" in watch.alerts_cli_while_stalled.stdout
    assert "EngageJobStalled" in watch.alerts_cli_after.stdout
    assert "alert EngageJobStalled firing: No training step for" in watch.job.output
    assert "alert EngageJobStalled resolved" in watch.job.output
    assert _tags(watch)["engage.alert.EngageJobStalled"].startswith(("firing", "resolved"))
    assert "EngageJobStalled" in watch.prometheus_firing  # the shipped rule, in Prometheus


def test_a_data_bound_job_raises_engage_data_bound_before_it_stalls(watch: Watch) -> None:
    watch.need("alerts_cli_after", "run_id", "stall_at")
    bound = _stored_alerts(watch)["EngageDataBound"]

    assert bound.started_at < watch.stall_at  # from the slow input alone, not the hang
    assert bound.value > DATA_BOUND_RATIO
    assert "EngageDataBound" in watch.alerts_cli_after.stdout
    assert "alert EngageDataBound firing: Training waits for data" in watch.job.output
    assert "Training waits for data" in _tags(watch)["engage.alert.EngageDataBound"]
    assert watch.prometheus_firing["EngageDataBound"] < watch.stall_at + 5
