"""The tuning job, kind ``"tuning"``: Ray Tune over spec fields, then the best retrained.

:class:`TuningJob` is the centralised pipeline (:class:`~engage.runtime.pipeline.PipelineJob`)
with a search in front of its train stage. The search space (every range end and choice
must be a valid ``--set`` of the spec) and the metric are checked when the spec loads, so
``engage validate`` reports them too. Its train stage runs the trials (stage ``tune``:
each one worker in its own Ray Tune actor, reporting every epoch, ASHA stopping poor
ones; each trial an MLflow child run and a monitored job), logs the trial table and best
configuration to the run,
then retrains the best configuration with the normal Ray Train stage (stage
``retrain``); evaluation, export, registration behind the gate and the optional deploy
are the pipeline's, on that best spec. ``stage_train_seconds`` holds both inner stages.
Importing this module registers the kind (:mod:`engage.runtime.kinds` imports it by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engage.data import PreparedData
from engage.runtime import stages
from engage.runtime.context import JobContext, Observer
from engage.runtime.kinds import JOB_KINDS
from engage.runtime.options import RunOptions
from engage.runtime.pipeline import PipelineJob
from engage.spec import LoadedSpec
from engage.spec.models import TuneSpec
from engage.train.tuning.runner import SearchOutcome, run_search
from engage.train.tuning.search import (
    describe,
    objective,
    touches_data,
    trial_overrides,
    trial_spec,
)
from engage.train.tuning.trial import trial_data
from engage.train.tuning.trials import TrialBook, dumps

if TYPE_CHECKING:
    from engage.train.trainer import TrainOutcome


@JOB_KINDS.register()
class TuningJob(PipelineJob):
    """Hyperparameter search on Ray Tune, then the pipeline's stages on the best spec."""

    name = "tuning"
    trains_from_stream = False  # its trials take the training arrays in memory

    def __init__(
        self, loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
    ) -> None:
        super().__init__(loaded, options, observer)
        self.metric, self.mode = "val_loss", "min"
        self.outcome: SearchOutcome | None = None
        self.summary: dict[str, float] = {}  # the search's tune_* metrics

    @property
    def tune(self) -> TuneSpec:
        """The spec's ``tune`` section (the kind runs only specs that have one)."""
        assert self.loaded.spec.tune is not None
        return self.loaded.spec.tune

    def prepare(self) -> PreparedData:
        """Load, check, window and split the data; the search space and metric were
        checked when the spec loaded (:func:`engage.spec.checks.check_tune`).

        Raises
        ------
        DataError
            The data is missing, malformed or too small.
        """
        self.metric, self.mode = objective(self.loaded)
        return super().prepare()

    def opened(self, ctx: JobContext[PreparedData]) -> None:
        """Tag the run as a tuning job, with what it compares and how many trials."""
        ctx.run.set_tags(
            {
                "engage.tune": "true",
                "engage.tune.metric": f"{self.metric} ({self.mode})",
                "engage.tune.num_samples": str(self.tune.num_samples),
                "engage.tune.space": ", ".join(sorted(self.tune.space)),
            }
        )

    def train_detail(self) -> str:
        """The train stage searches, then retrains the best configuration."""
        t = self.tune
        return (
            f"{t.num_samples} trials ({t.searcher}, scheduler {t.scheduler}), "
            "then the best retrained with Ray Train"
        )

    def train(self, ctx: JobContext[PreparedData]) -> TrainOutcome:
        """Run the trials, log what they found, and retrain the best configuration."""
        book = self._book(ctx)
        with ctx.stage("tune", f"{self.tune.num_samples} trials on {self.metric}"):
            self.outcome = run_search(
                self.loaded,
                trial_data(ctx.data),
                book,
                storage=self.options.home / "ray_results",
                name=f"{self.loaded.spec.name}-tune-{ctx.run.local_id[:8]}",
            )
        self._log_search(ctx, book, self.outcome)
        best = self.outcome.best
        self.loaded = trial_spec(self.loaded, best.config)
        if touches_data(best.config):
            ctx.data = stages.prepare_data(self.loaded, streamed=self.trains_from_stream)
        with ctx.stage("retrain", f"retraining trial {best.number}'s configuration"):
            return super().train(ctx)

    def evaluate(self, ctx: JobContext[PreparedData], trained: TrainOutcome) -> dict[str, float]:
        """The retrained model's test metrics, with the search's ``tune_*`` figures."""
        return {**super().evaluate(ctx, trained), **self.summary}

    def _book(self, ctx: JobContext[PreparedData]) -> TrialBook:
        """The driver's book of this job's trials."""
        spec = self.loaded.spec
        epochs = spec.train.epochs

        def epochs_of(config: Mapping[str, Any]) -> int:
            """The epochs a trial's configuration trains."""
            return int(config.get("train.epochs", epochs))

        return TrialBook(
            ctx.run,
            spec.name,
            self.metric,
            self.mode,
            self.tune.num_samples,
            epochs_of,
            ctx.bus.send,
            monitor=ctx.monitor,
            store=ctx.store.store if ctx.store is not None else None,
            where=self.loaded.base_dir,
        )

    def _log_search(
        self, ctx: JobContext[PreparedData], book: TrialBook, outcome: SearchOutcome
    ) -> None:
        """The trial table, the best configuration and the search's totals, on the job's run."""
        best = outcome.best
        overrides = " ".join(trial_overrides(best.config))
        ctx.run.log_text(dumps(book.rows()), "tune/trials.json")
        ctx.run.log_dict(
            {
                "trial": best.number,
                "run_id": best.run.run_id,
                "config": best.config,
                "overrides": overrides,
                self.metric: best.value,
            },
            "tune/best.json",
        )
        ctx.run.set_tags(
            {"engage.tune.best_trial": str(best.number), "engage.tune.best_overrides": overrides}
        )
        self.summary = {**book.summary(), "tune_seconds": outcome.seconds}
        ctx.reporter.metrics(self.summary)
        ctx.reporter.flush()
        ctx.message(
            "tune",
            f"best: trial {best.number} with {self.metric} {best.value:.4f} "
            f"({describe(best.config)}); retraining it with Ray Train",
        )
