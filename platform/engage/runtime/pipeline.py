"""The centralised pipeline, job kind ``"pipeline"``: data -> train -> evaluate -> register.

:class:`PipelineJob` supplies the stages of a spec without a kind section to the job
template (:class:`engage.runtime.job.Job`): Ray Train on the prepared windows, the test
evaluation, the ONNX/TorchScript export, the model's registration behind the spec's gate
and, when asked, its deployment. :func:`run_pipeline` runs any spec as the kind it asks
for (:mod:`engage.runtime.kinds`); it is the entry point the CLI, tests and benchmarks use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engage.data import PreparedData
from engage.runtime import stages
from engage.runtime.context import JobContext, Observer
from engage.runtime.deploy import Deployment, deploy
from engage.runtime.job import Job, PipelineResult
from engage.runtime.kinds import JOB_KINDS, run_job
from engage.runtime.options import RunOptions
from engage.runtime.session import resolve_address
from engage.spec import LoadedSpec
from engage.spec.models import DeploySpec
from engage.tracking.registry import Registration

if TYPE_CHECKING:  # torch loads with the trainer: only the train stage imports it
    from engage.train.trainer import TrainOutcome

__all__ = ["PipelineJob", "PipelineResult", "RunOptions", "run_pipeline"]


@JOB_KINDS.register()
class PipelineJob(Job[PreparedData, "TrainOutcome"]):
    """The centralised pipeline: one model trained with Ray Train on all the data."""

    name = "pipeline"
    trains_from_stream = True

    def __init__(
        self, loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
    ) -> None:
        super().__init__(loaded, options, observer)
        self._model: Any = None

    def prepares_on_cluster(self) -> bool:
        """True when the spec sets ``data.resources``: the data stage is then a Ray task."""
        return self.loaded.spec.data.resources is not None

    def data_detail(self) -> str:
        """Where the data stage runs when it runs on the cluster ("" in the driver)."""
        resources = self.loaded.spec.data.resources
        return "" if resources is None else f"in a Ray task reserving {resources}"

    def prepare(self) -> PreparedData:
        """Load, check, window and split the data (:func:`stages.prepare_data`), in a Ray
        task reserving ``data.resources`` when the spec sets them."""
        if self.prepares_on_cluster():
            return stages.prepare_data_on_cluster(self.loaded, streamed=self.trains_from_stream)
        return stages.prepare_data(self.loaded, streamed=self.trains_from_stream)

    def preflight(self) -> None:
        """A deploy after training needs its port free: say so before training, not after.

        Checked for the engage-managed serving head only: on a cluster of your own
        (--address / RAY_ADDRESS) Serve listens on its head node, not necessarily here.

        Raises
        ------
        DeployError
            ``deploy.port`` is held by a process other than engage's serving head.
        """
        deploy_spec = self.loaded.spec.deploy
        if not deploy_spec.after_training or resolve_address(self.options.address):
            return
        from engage.serve.ports import check_serving_port

        check_serving_port(
            self.options.home,
            deploy_spec.host,
            deploy_spec.port,
            hint=f"serve on another port with `--set deploy.port=N` (N: a free port), or stop "
            f"the process listening on {deploy_spec.port}",
        )

    def train(self, ctx: JobContext[PreparedData]) -> TrainOutcome:
        """Ray Train workers on the prepared windows; their events reach the job's bus."""
        assert ctx.session is not None  # the template enters Ray before training
        return stages.train(self.loaded, ctx.data, ctx.run, ctx.bus, self.options, ctx.session.info)

    def evaluate(self, ctx: JobContext[PreparedData], trained: TrainOutcome) -> dict[str, float]:
        """Test-split metrics of the final model (kept for :meth:`register`)."""
        self._model, metrics = stages.evaluate(self.loaded, ctx.data, trained, ctx.reporter)
        return metrics

    def register(self, ctx: JobContext[PreparedData], metrics: dict[str, float]) -> stages.Logged:
        """Export copies if the spec asks, then log the model and register it behind the gate."""
        if self.loaded.spec.export.formats:
            with ctx.stage("export"):
                stages.export_model(self.loaded, ctx.data, ctx.run, self._model)
        with ctx.stage("register"):
            return stages.log_and_register(self.loaded, ctx.data, ctx.run, self._model, metrics)

    def serve_after(self) -> DeploySpec | None:
        """The spec's deploy section when ``deploy.after_training`` is set, else None."""
        deploy_spec = self.loaded.spec.deploy
        return deploy_spec if deploy_spec.after_training else None

    def deploy(
        self, ctx: JobContext[PreparedData], registration: Registration
    ) -> Deployment | None:
        """Serve the registered version when ``deploy.after_training`` is set."""
        if not self.loaded.spec.deploy.after_training:
            return None
        detail = f"serving {registration.name} version {registration.version}"
        with ctx.stage("deploy", detail):
            return deploy(self.loaded, ctx.data, registration, self.options)


def run_pipeline(
    loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
) -> PipelineResult:
    """Run every stage of ``loaded`` as the job kind its spec asks for.

    The spool opens first, so a read-only or full disk fails the job before any work; the
    data is checked before a Ray session or an MLflow run exists.

    Raises
    ------
    EngageError
        A subclass for bad input (spec, data, cluster) or a failed stage.
    """
    return run_job(loaded, options, observer)
