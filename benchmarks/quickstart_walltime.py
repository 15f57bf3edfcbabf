"""Wall time of `engage quickstart` (install excluded) and where it goes.

Each repetition runs the CLI as a new user would: a fresh ENGAGE_HOME, so the MLflow
database is created too. The split comes from the stage timings the runner logs to
MLflow (``stage_*_seconds``); "CLI start-up" is the rest (interpreter, imports, exit).
The baseline, measured in the same run, is the floor any Ray Train job pays here: a bare
``ray.init`` plus a 2-worker TorchTrainer whose loop does nothing. With ``--loaded N`` it
then runs the quickstart N more times beside CPU hogs (one busy process per core, at the
same priority; ``--hogs`` of them, one by default as in the e2e test), the way a new
user's busy laptop or a shared CI runner would. ``--loaded 0`` measures the idle figure
only. ``--keep-failed DIR`` keeps what a failed run leaves (its ENGAGE_HOME, the CLI's
stdout and stderr, the managed Ray head's session logs) under DIR and prints the path.

``--against REF`` measures before and after instead: the quickstart of git ref REF (checked
out in a temporary worktree, its ``platform/`` first on PYTHONPATH, so it runs on this
environment's packages) and of this checkout take turns, ``--repeat`` rounds of
REF, this, this, REF (ABBA), and the section ``quickstart-before-after`` gets both medians,
their ratio and the training stage's. Issue 14 asks that its input pipeline leave the
quickstart no slower: REF is then a commit from before its first change.

    python benchmarks/quickstart_walltime.py [--repeat 3] [--loaded 1] [--hogs 1]
        [--keep-failed DIR] [--no-doc]
    python benchmarks/quickstart_walltime.py --against 25049a0 --repeat 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import git_commit, machine, write_section

REPO = Path(__file__).resolve().parents[1]
ENGAGE = Path(sys.executable).with_name("engage")
STAGES = ("data", "ray", "train", "evaluate", "export", "register", "tracking", "deploy")

BASELINE = """
import ray
from ray.train import ScalingConfig, RunConfig
from ray.train.torch import TorchTrainer
import sys
ray.init(address="local", num_cpus=2, log_to_driver=False, logging_level="ERROR")
TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="floor", storage_path=sys.argv[1])).fit()
ray.shutdown()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QuickstartFailed(Exception):
    """A quickstart run that exited non-zero: its exit code, last stderr line and wall time."""

    def __init__(self, returncode: int, last_line: str, wall: float, kept: Path | None):
        super().__init__(f"exit {returncode}: {last_line}")
        self.returncode, self.last_line, self.wall, self.kept = returncode, last_line, wall, kept


def _keep(home: Path, done: subprocess.CompletedProcess, keep: Path) -> Path:
    """Copy a failed run's home, CLI output and the managed head's Ray logs under ``keep``."""
    dest = Path(tempfile.mkdtemp(prefix="quickstart-failed-", dir=keep))
    (dest / "stdout.txt").write_bytes(done.stdout or b"")
    (dest / "stderr.txt").write_bytes(done.stderr or b"")
    shutil.copytree(home, dest / "home", ignore=shutil.ignore_patterns("*.sock"), symlinks=True)
    # A failed job stops the head it started and forgets its record; the temp dir (named
    # after the home, as engage.serve.cluster does) and its logs stay.
    state = home / "serve" / "cluster.json"
    digest = hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:10]
    temp = Path(json.loads(state.read_text())["temp_dir"]) if state.is_file() else None
    logs = (temp or Path("/tmp") / f"engage-ray-{digest}") / "session_latest" / "logs"
    if logs.is_dir():
        shutil.copytree(logs, dest / "ray-logs", symlinks=True, dirs_exist_ok=True)
    return dest


def _what_failed(stderr: bytes | None) -> str:
    """The line of engage's error that says what failed (the last line is often the hint)."""
    lines = [x.strip() for x in (stderr or b"").decode(errors="replace").splitlines()]
    lines = [x for x in lines if x] or ["no output"]
    return next((x for x in lines if "failed:" in x), lines[-1])[:200]


def run_quickstart(
    keep: Path | None = None, tree: Path | None = None
) -> tuple[float, dict[str, float]]:
    """One quickstart in a fresh home: wall seconds and the split by stage.

    The deploy stage is split further by the steps ``engage deploy`` times (its
    ``deployment.json``), and the rest of the wall time into the drift demo (the seconds the
    CLI prints), the CLI's start-up (until its first line) and exit (after its last line),
    and what lies between the stages (opening the run, waiting for MLflow's first run id,
    the summary).

    ``tree``: another checkout of engage to run instead of this one (its ``platform/``
    first on PYTHONPATH, run from its root).

    Raises
    ------
    QuickstartFailed
        The CLI exited non-zero (what it left is kept under ``keep`` when given).
    """
    from mlflow import MlflowClient

    env = None if tree is None else os.environ | {"PYTHONPATH": str(tree / "platform")}
    cwd = tree or REPO
    with tempfile.TemporaryDirectory() as home:
        try:
            done, wall, first, last = _run_timed(
                [str(ENGAGE), "quickstart", "--home", home, "--set", f"deploy.port={_free_port()}"],
                cwd,
                env,
            )
            if done.returncode != 0:
                kept = _keep(Path(home), done, keep) if keep else None
                raise QuickstartFailed(done.returncode, _what_failed(done.stderr), wall, kept)
            phases = _deploy_phases(Path(home))  # before `serve stop` removes the app's state
        finally:  # the served model outlives the command; the benchmark must not
            subprocess.run(
                [str(ENGAGE), "serve", "stop", "--home", home],
                capture_output=True,
                cwd=cwd,
                env=env,
            )
        client = MlflowClient(f"sqlite:///{home}/mlflow.db")
        run = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])[0]
        stages = {s: run.data.metrics.get(f"stage_{s}_seconds", 0.0) for s in STAGES}
    split = {s: stages[s] for s in STAGES if s != "deploy"}
    split |= {f"deploy: {k}": v for k, v in phases.items()}
    split["deploy: process start-up, smoke request"] = stages["deploy"] - sum(phases.values())
    drift = _drift_demo_seconds(done.stdout)
    split["drift demo"] = drift
    split["cli start-up (to its first line)"] = first
    split["cli exit (after its last line)"] = wall - last
    split["between stages: opening the run, MLflow's first run id, summary"] = (
        wall - sum(stages.values()) - drift - first - (wall - last)
    )
    return wall, split


def _run_timed(
    command: list[str], cwd: Path = REPO, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, float, float, float]:
    """Run ``command``: its result, wall seconds, and when its first and last lines came."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err)
        lines, times = [], []
        for line in process.stdout:
            lines.append(line)
            times.append(time.perf_counter() - started)
        returncode = process.wait()
        wall = time.perf_counter() - started
        err.seek(0)
        done = subprocess.CompletedProcess(command, returncode, b"".join(lines), err.read())
    return done, wall, (times or [wall])[0], (times or [wall])[-1]


def _deploy_phases(home: Path) -> dict[str, float]:
    """The seconds per step of the quickstart's deploy, as ``engage deploy`` recorded them."""
    states = sorted(home.glob("serve/*/deployment.json"))
    return json.loads(states[0].read_text()).get("phases", {}) if states else {}


def _drift_demo_seconds(stdout: bytes) -> float:
    """The drift demo's seconds, from the alert line the quickstart prints."""
    found = re.search(rb"after\s+\d+\s+windows\s+\((\d+(?:\.\d+)?)\s+s\)", stdout or b"")
    return float(found.group(1)) if found else 0.0


def run_loaded(hogs: int, keep: Path | None = None) -> tuple[float, str]:
    """One quickstart beside ``hogs`` CPU-bound processes: its wall time and outcome.

    A failure under load is a result, not a crash of the benchmark: the outcome names the
    exit code and the last line engage printed on stderr.
    """
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        return run_quickstart(keep)[0], "completed"
    except QuickstartFailed as exc:
        if exc.kept:
            print(f"failed run kept in {exc.kept}")
        return exc.wall, str(exc)
    finally:
        for hog in procs:
            hog.kill()
            hog.wait()


def before_after(ref: str, rounds: int, keep: Path | None = None) -> str:
    """The quickstart at ``ref`` against this checkout's, ``rounds`` ABBA rounds (``ref``,
    this, this, ``ref``): the section's body."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    load = _load()
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), sha],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        try:
            for i in range(rounds):
                for side in ("before", "after", "after", "before"):
                    try:
                        got = run_quickstart(keep, tree if side == "before" else None)
                    except QuickstartFailed as exc:
                        sys.exit(f"round {i + 1}, {side}: failed after {exc.wall:.1f} s: {exc}")
                    runs[side].append(got)
                    print(f"round {i + 1}: {side} {got[0]:.1f} s (train {got[1]['train']:.1f} s)")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True
            )
    floor = run_baseline()

    def med(side: str, key: str | None = None) -> float:
        return statistics.median(w if key is None else s[key] for w, s in runs[side])

    def listed(side: str) -> str:
        return ", ".join(f"{w:.1f}" for w, _ in runs[side])

    ratio, train_ratio = (
        med("after") / med("before"),
        med("after", "train") / med("before", "train"),
    )
    verdict = "no regression" if ratio <= 1.05 else "SLOWER"
    return f"""## `make quickstart` before and after the input pipeline (issue 14)

Machine: {machine()}. Commit {git_commit()} against {sha}, from before issue 14's first
change (e8b6a10). The later commits before it do not run the quickstart: 029b2c7 (issue 13's
one cluster for training and serving) already called a method issue 14 added, and the two
commits of parallel work just before e8b6a10 fail on an import. Command: `python benchmarks/quickstart_walltime.py --against {sha} --repeat
{rounds}`: {rounds} rounds of before, after, after, before (ABBA), each `engage quickstart`
in a fresh ENGAGE_HOME; the before side runs from a git worktree of {sha} with its
`platform/` first on PYTHONPATH (the same installed packages). Load average before: {load}.

| figure | before ({sha}) | after ({git_commit()}) | after / before |
| --- | --- | --- | --- |
| quickstart wall time, median | {med("before"):.1f} s (runs: {listed("before")}) | {med("after"):.1f} s (runs: {listed("after")}) | **{ratio:.2f}** |
| train stage (data to the trained model, `stage_train_seconds`), median | {med("before", "train"):.1f} s | {med("after", "train"):.1f} s | {train_ratio:.2f} |
| data stage, median | {med("before", "data"):.1f} s | {med("after", "data"):.1f} s | |
| baseline: bare `ray.init` + empty 2-worker TorchTrainer, after the rounds | {floor:.1f} s | | |

Verdict: {verdict} (the issue: the quickstart must not get slower; more than 5% slower
would be called a regression here). The quickstart's split stays in memory: each worker
gets the prepared split through the object store, as before, and only a streamed source
reads through Ray Data. Whatever else changed between the two commits is in the after
figures too: issues 10, 11 and 15-17, and issue 13's quickstart that trains on the Ray head
it then serves from (one cluster start instead of two).
"""


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def run_baseline() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", BASELINE, tmp], check=True, capture_output=True)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loaded", type=int, default=1, help="runs beside CPU hogs (0: idle only)")
    parser.add_argument(
        "--hogs", type=int, default=1, help="CPU-bound processes beside a loaded run"
    )
    parser.add_argument(
        "--keep-failed", type=Path, metavar="DIR", help="keep a failed run's home and logs here"
    )
    parser.add_argument(
        "--no-doc", action="store_true", help="print the figures, leave docs/BENCHMARKS.md alone"
    )
    parser.add_argument(
        "--against", metavar="REF", help="before and after: this checkout against git ref REF"
    )
    args = parser.parse_args()
    if args.keep_failed:
        args.keep_failed.mkdir(parents=True, exist_ok=True)
    if args.against:
        body = before_after(args.against, args.repeat, args.keep_failed)
        if not args.no_doc:
            write_section("quickstart-before-after", body)
        print(body)
        return
    walls, splits, floors = [], [], []
    idle_load = _load()  # the machine is shared: say how busy it was before the idle runs
    for i in range(args.repeat):
        try:
            wall, split = run_quickstart(args.keep_failed)
        except QuickstartFailed as exc:
            sys.exit(f"repetition {i + 1} failed after {exc.wall:.1f} s: {exc} (kept: {exc.kept})")
        floor = run_baseline()
        walls.append(wall)
        splits.append(split)
        floors.append(floor)
        print(f"repetition {i + 1}: quickstart {wall:.1f} s, bare Ray Train floor {floor:.1f} s")
        print("  " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()))
    loaded, outcomes = [], []
    loaded_load = _load()
    for i in range(args.loaded):
        wall, outcome = run_loaded(args.hogs, args.keep_failed)
        loaded.append(wall)
        outcomes.append(outcome)
        print(
            f"loaded repetition {i + 1}: quickstart {wall:.1f} s beside {args.hogs} CPU hogs, {outcome}"
        )
    if not walls:  # a loaded-only run (a diagnosis) has no idle figure to write
        return
    med = statistics.median(walls)
    floor = statistics.median(floors)
    loaded_row = (
        f"| quickstart beside {args.hogs} CPU hog{'s' if args.hogs != 1 else ''} "
        f"({os.cpu_count()} cores; load average before {loaded_load}), median of {args.loaded} | "
        f"{statistics.median(loaded):.1f} s (runs: {', '.join(f'{w:.1f}' for w in loaded)}); "
        f"{statistics.median(loaded) / med:.2f}× the idle time; {'; '.join(outcomes)} |\n"
        if loaded
        else ""
    )
    rows = "\n".join(
        f"| {k} | {statistics.median(s.get(k, 0.0) for s in splits):.1f} | "
        f"{100 * statistics.median(s.get(k, 0.0) for s in splits) / med:.0f}% |"
        for k in splits[0]
    )
    largest = max(splits[0], key=lambda k: statistics.median(s.get(k, 0.0) for s in splits))
    body = f"""## `make quickstart` wall time (issues 2 and 13)

Machine: {machine()}. Commit {git_commit()}. Command: `python benchmarks/quickstart_walltime.py --repeat {args.repeat} --loaded {args.loaded} --hogs {args.hogs}`
(runs `engage quickstart` with a fresh ENGAGE_HOME each time; install excluded).

| figure | value |
| --- | --- |
| load average (1, 5, 15 min) before the idle runs | {idle_load} |
| quickstart wall time, median of {args.repeat} | **{med:.1f} s** (runs: {", ".join(f"{w:.1f}" for w in walls)}) |
| target | ≤ 120 s → {"met" if med <= 120 else "NOT met"} |
| baseline: bare `ray.init` + empty 2-worker TorchTrainer, same run | {floor:.1f} s |
| ratio quickstart / baseline | {med / floor:.2f}× |
{loaded_row}
Split (median seconds per stage):

| stage | seconds | share |
| --- | --- | --- |
{rows}

Largest cost: **{largest}**. The quickstart trains, exports ONNX/TorchScript copies, and
ends by serving the model on the Ray head it trained on (the `ray` stage starts engage's
serving head, one cluster for both) and showing a drift alert. The `deploy:` rows are the
steps `engage deploy` times (`deployment.json`): the deploy's process is started when the
job joins the head, so it imports, connects and starts Serve's controller and proxies while
the model trains, and `deploy: serve start` is only what was left of that wait; `process
start-up, smoke request` is the rest of the stage. The drift demo's first round of shifted
windows is sized to reach the replica's first drift check. The `between stages` row is
time no stage timer covers: in a profile of the CLI it is mostly opening the MLflow run
(lineage capture, the dataset) before the `ray` stage and the monitor's wait for the
drainer to create the run in a fresh home's MLflow database after it. Training's share is almost all
Ray Train start-up (worker processes, torch import, gloo process group): the baseline
above, which trains nothing, costs {floor:.0f} s. What would cut it further: a warm
cluster between runs (`ray start --head` once, then `--address auto`).
"""
    if not args.no_doc:
        write_section("quickstart", body)
    print(body)


if __name__ == "__main__":
    main()
