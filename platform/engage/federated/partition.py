"""The federated data stage: one non-IID partition per household, split by time.

Each client's rows are windowed and split on their own (train earliest), standardised with
that client's own training statistics, as a real client would. The server keeps the
union of the validation splits to watch the global model's health, and of the test
splits for the final evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engage.data.checks import validate_frame
from engage.data.fingerprint import DatasetFingerprint, fingerprint
from engage.data.sources import describe_origin, key_columns, load_frame
from engage.data.windowing import Normalization, Split, make_splits
from engage.errors import DataError
from engage.federated.wire import CLIENT_ID
from engage.spec import LoadedSpec
from engage.train.builders import ModelShape


@dataclass(frozen=True)
class ClientData:
    """One client's windows: its own train, val and test splits, standardised with its own
    training statistics (``normalization``; None when the spec turns that off)."""

    client: str
    train: Split
    val: Split
    test: Split
    normalization: Normalization | None = None


@dataclass(frozen=True)
class FederatedData:
    """Every client's partition, and what the server needs about the data."""

    clients: tuple[ClientData, ...]
    shape: ModelShape
    task: str
    classes: tuple | None
    frame: object  # the validated table (for the run's dataset record)
    fingerprint: DatasetFingerprint

    @property
    def ids(self) -> list[str]:
        """The client ids, in partition order."""
        return [c.client for c in self.clients]

    def union(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of one split over every client, for the server's evaluation."""
        parts = [getattr(c, split) for c in self.clients]
        return np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts])


def partition(loaded: LoadedSpec) -> FederatedData:
    """Load, check and split the data of ``loaded`` into one partition per household."""
    spec, fed = loaded.spec.data, loaded.spec.federated
    _, group = key_columns(spec)
    if group is None:
        raise loaded.error(
            ("data", "source", "group"),
            "got no group column; expected one naming each client's series (e.g. household)",
        )
    frame = validate_frame(
        load_frame(spec, loaded.base_dir), spec, describe_origin(spec, loaded.base_dir)
    )
    ids = list(dict.fromkeys(frame[group].astype(str)))
    if fed is not None and fed.clients is not None:
        if fed.clients > len(ids):
            raise loaded.error(
                ("federated", "clients"),
                f"got {fed.clients}; expected at most the {len(ids)} households in the data",
            )
        ids = ids[: fed.clients]
    classes = None
    if spec.task == "classification":
        classes = tuple(np.unique(frame[spec.target].to_numpy()).tolist())
    clients = tuple(_client(frame, group, c, loaded, classes) for c in ids)
    _, window, features = clients[0].train.x.shape
    shape = ModelShape(window, features, len(classes) if classes else 1)
    used = frame[frame[group].astype(str).isin(ids)]
    return FederatedData(
        clients, shape, spec.task, classes, used, fingerprint(used, spec, loaded.base_dir)
    )


def _client(
    frame, group: str, client: str, loaded: LoadedSpec, classes: tuple | None
) -> ClientData:
    if not CLIENT_ID.match(client):
        raise DataError(
            f"group value {client!r} cannot be a client id",
            hint="client ids are letters, digits, '_', '.' and '-'",
        )
    part = frame[frame[group].astype(str) == client].reset_index(drop=True)
    try:
        splits, local_classes, norm = make_splits(part, loaded.spec.data)
    except DataError as exc:  # name the household: the same check fails for one client only
        raise DataError(f"household {client}: {exc.message}", hint=exc.hint) from None
    if classes is not None and local_classes != classes:
        raise DataError(
            f"household {client} has classes {local_classes}, the data has {classes}",
            hint="every client needs every class; use more days or another target",
        )
    return ClientData(client, splits["train"], splits["val"], splits["test"], norm)


def pooled_normalization(data: FederatedData) -> Normalization | None:
    """One standardisation for the global model: the clients' feature means and variances
    pooled, weighted by their training windows (what each client shares is its statistics,
    never its rows). None when the clients do not standardise."""
    norms = [c.normalization for c in data.clients]
    if any(n is None for n in norms):
        return None
    w = np.array([len(c.train.y) for c in data.clients], dtype=np.float64)
    w = w / w.sum()
    means = np.stack([n.mean for n in norms]).astype(np.float64)
    second = np.stack([n.std.astype(np.float64) ** 2 + n.mean**2 for n in norms])
    mean = w @ means
    std = np.sqrt(np.maximum(w @ second - mean**2, 0.0))
    std[std == 0] = 1.0
    return Normalization(mean=mean.astype(np.float32), std=std.astype(np.float32))


def raw_windows(client: ClientData, split: str) -> np.ndarray:
    """A client's windows of ``split`` as they came from the sensors (not standardised)."""
    x = getattr(client, split).x
    norm = client.normalization
    return x if norm is None else (x * norm.std + norm.mean).astype(np.float32)
