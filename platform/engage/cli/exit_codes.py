"""Every exit code the engage CLI uses, in one table (a test checks each is documented)."""

from __future__ import annotations

from engage.errors import (
    ClusterError,
    DataError,
    DeployError,
    DriftCheckError,
    DriftDetected,
    EngageError,
    ExportError,
    FederatedError,
    SpecError,
    TrackingError,
    TrainingError,
)

OK = 0
INTERNAL = 70
INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    OK: "success",
    EngageError.exit_code: "engage error not covered below",
    SpecError.exit_code: "invalid pipeline spec or --set override",
    DataError.exit_code: "invalid input data (missing columns, NaN, too few rows)",
    ClusterError.exit_code: "Ray cluster unreachable or too small for the job",
    TrackingError.exit_code: "MLflow tracking store or registry refused an operation",
    TrainingError.exit_code: "training failed (worker error, NaN loss)",
    ExportError.exit_code: "model export failed, or an exported file differs from torch above tolerance",
    DriftDetected.exit_code: "engage drift check / performance: drift, a data-quality failure, or performance decay",
    DriftCheckError.exit_code: "engage drift check / performance: a detector failed or gave no verdict (NaN p-value, too few labels)",
    FederatedError.exit_code: "federated job failed (missing or unsafe client keys, too few clients for a round, unknown aggregator)",
    DeployError.exit_code: "serving failed (port in use, serving head did not start, no answer); a run's registered model is kept",
    INTERNAL: "internal error: a bug in engage; the traceback is printed, please report it",
    INTERRUPTED: "interrupted (Ctrl-C or SIGTERM); the MLflow run is marked KILLED",
}
