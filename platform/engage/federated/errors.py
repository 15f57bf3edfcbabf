"""The federated package's error: one headline, raised for bad keys and impossible rounds."""

from __future__ import annotations

from engage.errors import EngageError


class FederatedError(EngageError):
    """A federated job cannot go on: missing or unsafe keys, too few clients for a round."""

    headline = "federated job failed"  # exit code 1, inherited: "engage error not covered"
