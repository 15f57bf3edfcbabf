"""Wall time of `engage quickstart` (install excluded) and where it goes.

Each repetition runs the CLI as a new user would: a fresh ENGAGE_HOME, so the MLflow
database is created too. The split comes from the stage timings the runner logs to
MLflow (``stage_*_seconds``); "CLI start-up" is the rest (interpreter, imports, exit).
The baseline, measured in the same run, is the floor any Ray Train job pays here: a bare
``ray.init`` plus a 2-worker TorchTrainer whose loop does nothing. With ``--loaded N`` it
then runs the quickstart N more times beside CPU hogs (one busy process per core, at the
same priority), the way a new user's busy laptop or a shared CI runner would.

    python benchmarks/quickstart_walltime.py [--repeat 3] [--loaded 1]
"""

from __future__ import annotations

import argparse
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


def run_quickstart() -> tuple[float, dict[str, float]]:
    from mlflow import MlflowClient

    with tempfile.TemporaryDirectory() as home:
        started = time.perf_counter()
        try:
            subprocess.run(
                [str(ENGAGE), "quickstart", "--home", home, "--set", f"deploy.port={_free_port()}"],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
            wall = time.perf_counter() - started
        finally:  # the served model outlives the command; the benchmark must not
            subprocess.run([str(ENGAGE), "serve", "stop", "--home", home], capture_output=True)
        client = MlflowClient(f"sqlite:///{home}/mlflow.db")
        run = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])[0]
        stages = {s: run.data.metrics.get(f"stage_{s}_seconds", 0.0) for s in STAGES}
    stages["cli start-up, drift demo, exit"] = wall - sum(stages.values())
    return wall, stages


def run_loaded() -> tuple[float, str]:
    """One quickstart beside one CPU-bound process per core: its wall time and outcome.

    A failure under load is a result, not a crash of the benchmark: the outcome names the
    exit code and the last line engage printed on stderr.
    """
    import os

    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    started = time.perf_counter()
    try:
        return run_quickstart()[0], "completed"
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or b"").decode(errors="replace").strip().splitlines() or ["no output"]
        return time.perf_counter() - started, f"exit {exc.returncode}: {lines[-1]}"
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run_baseline() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", BASELINE, tmp], check=True, capture_output=True)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loaded", type=int, default=1, help="runs beside CPU hogs")
    args = parser.parse_args()
    walls, splits, floors = [], [], []
    for i in range(args.repeat):
        wall, split = run_quickstart()
        floor = run_baseline()
        walls.append(wall)
        splits.append(split)
        floors.append(floor)
        print(f"repetition {i + 1}: quickstart {wall:.1f} s, bare Ray Train floor {floor:.1f} s")
    loaded, outcomes = [], []
    for i in range(args.loaded):
        wall, outcome = run_loaded()
        loaded.append(wall)
        outcomes.append(outcome)
        print(f"loaded repetition {i + 1}: quickstart {wall:.1f} s beside CPU hogs, {outcome}")
    med = statistics.median(walls)
    floor = statistics.median(floors)
    loaded_row = (
        f"| quickstart beside one CPU hog per core, median of {args.loaded} | "
        f"{statistics.median(loaded):.1f} s (runs: {', '.join(f'{w:.1f}' for w in loaded)}); "
        f"{statistics.median(loaded) / med:.2f}× the idle time; {'; '.join(outcomes)} |\n"
        if loaded
        else ""
    )
    rows = "\n".join(
        f"| {k} | {statistics.median(s[k] for s in splits):.1f} | "
        f"{100 * statistics.median(s[k] for s in splits) / med:.0f}% |"
        for k in splits[0]
    )
    largest = max(splits[0], key=lambda k: statistics.median(s[k] for s in splits))
    body = f"""## `make quickstart` wall time (issues 2 and 13)

Machine: {machine()}. Commit {git_commit()}. Command: `python benchmarks/quickstart_walltime.py --repeat {args.repeat} --loaded {args.loaded}`
(runs `engage quickstart` with a fresh ENGAGE_HOME each time; install excluded).

| figure | value |
| --- | --- |
| quickstart wall time, median of {args.repeat} | **{med:.1f} s** (runs: {", ".join(f"{w:.1f}" for w in walls)}) |
| target | ≤ 120 s → {"met" if med <= 120 else "NOT met"} |
| baseline: bare `ray.init` + empty 2-worker TorchTrainer, same run | {floor:.1f} s |
| ratio quickstart / baseline | {med / floor:.2f}× |
{loaded_row}
Split (median seconds per stage):

| stage | seconds | share |
| --- | --- | --- |
{rows}

Largest cost: **{largest}**. The quickstart now also exports ONNX/TorchScript copies and
ends by serving the model (the `deploy` stage starts Serve's controller, proxy and
replicas on the Ray head the job trained on: the `ray` stage starts engage's serving head,
one cluster for both), on top of training. Training's share is almost all Ray Train
start-up (worker processes, torch import, gloo process group): the baseline above, which
trains nothing, costs {floor:.0f} s. What would cut it further: a warm cluster between runs
(`ray start --head` once, then `--address auto`).
"""
    write_section("quickstart", body)
    print(body)


if __name__ == "__main__":
    main()
