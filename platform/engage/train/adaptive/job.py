"""The adaptive-sampling job, kind ``"adaptive"``: simulate where the model is weakest.

:class:`AdaptiveJob` supplies the stages of a spec with an ``adaptive`` section to the job
template (:class:`engage.runtime.job.Job`), which opens the run, starts the monitor, wires
the sinks and ends the run as for every kind; it declares ``needs_cluster = False``, so the
template starts no Ray session for it (everything runs in this process). Its data stage
simulates the broad held-out test set (a Latin hypercube of scenarios over the whole space,
the run's dataset). Its train stage runs :func:`engage.train.adaptive.loop.run_rounds`; each
round is a child MLflow run with the scenarios chosen (``round.json``: parameters, unit
points, seeds, first simulated days (above 0 for a scenario continued from an earlier
round), with ``span_hours`` each span's start minute, acquisition scores, and the
candidates probed, whose windows are trained on too), the round's data fingerprint (tag
and dataset digest) and its test metrics, and the
job's run gets each round's metrics with the round as step (``adaptive_samples``,
``test_accuracy`` ...), so MLflow plots accuracy against the round. The data section gives
features, target, task, window, stride and horizon; its ``source`` is not read (each round
simulates its own scenarios). No model is registered: the job's product is which data to
simulate and what it buys. Importing this module registers the kind
(:mod:`engage.runtime.kinds` imports it by name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engage.data.fingerprint import DatasetFingerprint, table_digest
from engage.data.simulator import COLUMNS, Scenario
from engage.runtime.context import JobContext, Observer
from engage.runtime.job import Job
from engage.runtime.kinds import JOB_KINDS
from engage.runtime.options import RunOptions
from engage.spec import LoadedSpec
from engage.spec.models import AdaptiveSpec
from engage.train.adaptive.ensemble import Ensemble
from engage.train.adaptive.loop import HeldOut, RoundResult, held_out_points, run_rounds
from engage.train.adaptive.world import simulate_frames, windows_of


@dataclass(frozen=True)
class AdaptiveData:
    """The data stage's product: the held-out test set, as a table and as windows."""

    frame: pd.DataFrame
    fingerprint: DatasetFingerprint
    held_out: HeldOut


@JOB_KINDS.register()
class AdaptiveJob(Job[AdaptiveData, "tuple[list[RoundResult], Ensemble]"]):
    """Adaptive sampling of the simulator: rounds of choose, simulate, retrain, test."""

    name = "adaptive"
    # The rounds simulate and train their ensemble in this process and submit no Ray work
    # (a TorchTrainer per member would cost more start-up than the training): no cluster.
    needs_cluster = False

    def __init__(
        self, loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
    ) -> None:
        super().__init__(loaded, options, observer)
        self.rounds: list[RoundResult] = []

    @property
    def adaptive(self) -> AdaptiveSpec:
        """The spec's ``adaptive`` section (the kind runs only specs that have one)."""
        assert self.loaded.spec.adaptive is not None
        return self.loaded.spec.adaptive

    def data_detail(self) -> str:
        """The data stage simulates the held-out scenarios."""
        return f"simulating {self.adaptive.test_scenarios} held-out scenarios"

    def prepare(self) -> AdaptiveData:
        """Check the spec's columns against the simulator, then simulate the test set.

        Raises
        ------
        SpecError
            A feature or the target is not a simulator column, located in the spec.
        """
        data = self.loaded.spec.data
        for field_name, names in (("features", data.features), ("target", [data.target])):
            missing = [n for n in names if n not in COLUMNS or n in ("timestamp", "household")]
            if missing:
                raise self.loaded.error(
                    ("data", field_name),
                    f"got {missing}; the simulator's columns are: "
                    + ", ".join(c for c in COLUMNS if c not in ("timestamp", "household")),
                )
        spec = self.adaptive
        points, seeds = held_out_points(spec)
        frames = simulate_frames(points, households=spec.households, days=spec.days, seeds=seeds)
        frame = pd.concat(frames, ignore_index=True)
        classes = None
        if data.task == "classification":
            classes = tuple(np.sort(frame[data.target].unique()).tolist())
        held_out = HeldOut(windows_of(frames, data, classes), classes)
        fingerprint = DatasetFingerprint(
            name="simulated-held-out",
            source="simulator",
            digest=table_digest(frame),
            rows=len(frame),
            schema={str(c): str(t) for c, t in frame.dtypes.items()},
            params={
                "test_scenarios": spec.test_scenarios,
                "households": spec.households,
                "days": spec.days,
                "seed": spec.seed,
            },
        )
        return AdaptiveData(frame, fingerprint, held_out)

    def opened(self, ctx: JobContext[AdaptiveData]) -> None:
        """Tag the run with the sampler and the budget."""
        spec = self.adaptive
        ctx.run.set_tags(
            {
                "engage.adaptive": "true",
                "engage.adaptive.sampler": spec.sampler
                + (f" ({spec.acquisition})" if spec.sampler == "adaptive" else ""),
                "engage.adaptive.budget": str(spec.budget) if spec.budget else "-",
            }
        )

    def train_detail(self) -> str:
        """The train stage runs the rounds."""
        return f"{self.adaptive.rounds} rounds of {self.adaptive.sampler} sampling"

    def train(self, ctx: JobContext[AdaptiveData]) -> tuple[list[RoundResult], Ensemble]:
        """Every round, each logged to a child run and reported on the job's run."""
        return run_rounds(self.loaded, ctx.data.held_out, lambda r: self._round(ctx, r))

    def evaluate(
        self, ctx: JobContext[AdaptiveData], trained: tuple[list[RoundResult], Ensemble]
    ) -> dict[str, float]:
        """The last round's test metrics, with the samples it took (series the rounds already
        reported at this step are the same values; the run keeps one point per step)."""
        rounds, _ = trained
        last = rounds[-1]
        metrics = {
            **last.metrics,
            "adaptive_rounds": float(len(rounds)),
            "adaptive_samples": float(last.samples),
            "adaptive_probe_samples_total": float(sum(r.probe_samples for r in rounds)),
        }
        ctx.reporter.metrics(metrics, step=len(rounds))
        ctx.reporter.flush()
        return metrics

    def _round(self, ctx: JobContext[AdaptiveData], result: RoundResult) -> None:
        """Log one round to its child run and the job's run, and say so on the display."""
        self.rounds.append(result)
        child = ctx.run.child(
            f"round-{result.round:04d}",
            {
                "engage.adaptive.round": str(result.round),
                "engage.adaptive.data_digest": result.digest,
            },
            self.loaded.base_dir,
        )
        child.log_dict(_round_record(result), "round.json")
        child.log_metric_events(_points(result))
        child.end("FINISHED")
        values = {
            **result.metrics,
            "adaptive_samples": float(result.samples),
            "adaptive_new_samples": float(result.new_samples),
            "adaptive_probe_samples": float(result.probe_samples),
        }
        ctx.reporter.metrics(values, step=result.round)
        ctx.reporter.flush()
        shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items())
        ctx.message(
            "adaptive",
            f"round {result.round}/{self.adaptive.rounds}: +{len(result.points)} "
            + ("spans" if len(result.start_minutes) else "scenarios")
            + (f" and {len(result.probe_points)} probes" if len(result.probe_points) else "")
            + ", "
            f"{result.samples} samples, {shown}",
        )


def _round_record(result: RoundResult) -> dict[str, Any]:
    """What ``round.json`` holds: the chosen scenarios and why."""
    return {
        "round": result.round,
        "scenarios": [Scenario.from_unit(p).as_dict() for p in result.points],
        "unit_points": np.round(result.points, 6).tolist(),
        "probe_unit_points": np.round(result.probe_points, 6).tolist(),
        "seeds": result.seeds.tolist(),
        "first_days": result.first_days.tolist(),
        "start_minutes": result.start_minutes.tolist(),
        "scores": result.scores.tolist(),
        "new_samples": result.new_samples,
        "samples": result.samples,
        "probe_samples": result.probe_samples,
        "rows": result.rows,
        "data_digest": result.digest,
        "metrics": result.metrics,
    }


def _points(result: RoundResult) -> list[Any]:
    """The round's metrics as events for its child run."""
    from engage.events import Event

    values = {**result.metrics, "adaptive_samples": float(result.samples)}
    return [Event("metric", k, float(v), result.round) for k, v in values.items()]
