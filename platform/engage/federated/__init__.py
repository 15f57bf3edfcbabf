"""Federated learning on Ray: clients, server, aggregators, signed updates, attacks, scoring.

A spec with a ``federated`` section runs here instead of Ray Train: one client per
household partition, a server running rounds, every update signed and verified before it
is scored for anomalies and aggregated.
"""

from engage.errors import FederatedError
from engage.federated.keys import KeyStore
from engage.federated.verify import Reason, UpdateVerdict, UpdateVerifier
from engage.federated.wire import Schema

__all__ = ["FederatedError", "KeyStore", "Reason", "Schema", "UpdateVerdict", "UpdateVerifier"]
