"""One exception root for engage, with a subclass per domain.

Each class has a one-line ``headline`` and an ``exit_code``; the CLI prints the headline
and the message and exits with the code. Errors must pickle, because they cross Ray
actors: every subclass keeps its whole state in ``args``.
"""

from __future__ import annotations


class EngageError(Exception):
    """Root of every error engage raises on purpose."""

    headline = "engage failed"
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class SpecError(EngageError):
    """A pipeline spec (or an override of it) is invalid."""

    headline = "invalid pipeline spec"
    exit_code = 2


class DataError(EngageError):
    """Input data is missing, malformed or too small for the spec."""

    headline = "invalid input data"
    exit_code = 3


class ClusterError(EngageError):
    """The Ray cluster cannot be reached or cannot run the job."""

    headline = "Ray cluster unavailable"
    exit_code = 4


class TrackingError(EngageError):
    """The MLflow tracking store or model registry refused an operation."""

    headline = "tracking failed"
    exit_code = 5


class TrainingError(EngageError):
    """Training failed (a worker died, the loss became NaN, a checkpoint is missing)."""

    headline = "training failed"
    exit_code = 6


class ExportError(EngageError):
    """A model could not be exported, or an exported file does not match torch's outputs."""

    headline = "model export failed"
    exit_code = 7


class DriftDetected(EngageError):
    """`engage drift check` found drift or a data-quality failure (a verdict, not a fault)."""

    headline = "drift detected"
    exit_code = 8


class DriftCheckError(EngageError):
    """A drift detector failed or gave no verdict (NaN p-value): never read as "no drift"."""

    headline = "drift check failed: no verdict"
    exit_code = 9


class FederatedError(EngageError):
    """A federated job cannot go on: missing or unsafe keys, too few clients for a round,
    an unknown aggregator or bad aggregator parameters."""

    headline = "federated job failed"
    exit_code = 10


class DeployError(EngageError):
    """Serving a model failed: its port is taken, its head did not start, it did not answer.

    When the deploy stage of a pipeline run fails, the run itself has FINISHED and its model
    stays registered: ``run_result`` holds the run's result (the CLI prints its summary);
    it is None for ``engage deploy`` and for a failure found before anything ran.
    """

    headline = "serving failed"
    exit_code = 11

    def __init__(self, message: str, hint: str | None = None, run_result: object = None) -> None:
        super().__init__(message, hint)
        self.args = (message, hint, run_result)
        self.run_result = run_result
