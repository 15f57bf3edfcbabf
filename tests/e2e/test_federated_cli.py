"""The federated pipeline from the CLI as a user runs it: keys, then a run under attack that
registers the final global model and ends with the per-client verdict table.

One run, not a clean one and an attacked one: a federated job without attacks runs in
tests/integration/test_federated_ray.py (stragglers and dropouts on Ray actors), and each
CLI run here costs a Ray cluster and a minute of the suite. ``engage fl keys`` runs in this
process (tests/e2e/_inprocess.py: what it decides and writes, without an interpreter's
start-up), its key files checked before the run, which is a real ``engage`` process.
"""

from __future__ import annotations

import re
import sqlite3
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _inprocess import engage_in_process

pytestmark = pytest.mark.e2e

Engage = Callable[..., subprocess.CompletedProcess]
SPEC = "pipelines/federated-smart-home.yaml"
SMALL = [
    "--set", "data.source.households=4",
    "--set", "data.source.days=3",
    "--set", "data.stride=15",
    "--set", "federated.rounds=2",
    "--set", "federated.clients_per_round=4",
    "--set", "federated.min_clients=2",
    "--set", "monitor.evaluate_every_seconds=1",
]  # fmt: skip
ATTACKS = (
    "federated.attacks={seed: 1, clients: {kind: boosting, fraction: 0.25}, "
    "in_transit: [{kind: bit_flip, probability: 0.3}, {kind: replay, probability: 0.3}]}"
)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_keys_then_an_attacked_run_that_registers_its_global_model(
    run_engage: Engage, engage_env: dict[str, str], tmp_path: Path
) -> None:
    keys = engage_in_process(
        "fl", "keys", SPEC, "--set", "data.source.households=4", cwd=tmp_path, env=engage_env
    )
    assert keys.returncode == 0, keys.stdout + keys.stderr
    key_files = sorted((tmp_path / ".engage" / "fl" / "keys").glob("*.hmac"))
    assert len(key_files) == 4
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in key_files)

    register = "tracking.registration={model_name: fl-occupancy}"
    attacked = run_engage("run", SPEC, *SMALL, "--set", ATTACKS, "--set", register, timeout=600)
    out = _flat(attacked.stdout + attacked.stderr)
    assert attacked.returncode == 0, out
    assert "Traceback" not in out
    assert "per-client verdicts" in out
    assert "round 2/2" in out
    assert "test_accuracy" in out
    attacked_out = _flat(attacked.stdout)
    assert re.search(r"h0\d boosting .* (flagged|quarantined)", attacked_out), attacked_out
    assert "rejected (" in attacked_out  # in-transit tampering, rejected with reasons
    assert "fl-occupancy" in attacked_out
    with sqlite3.connect(tmp_path / ".engage" / "mlflow.db") as db:
        rounds = db.execute("SELECT COUNT(*) FROM runs WHERE name LIKE 'round-%'").fetchone()[0]
        keys_logged = {r[0] for r in db.execute("SELECT DISTINCT key FROM metrics")}
        versions = db.execute(
            "SELECT v.version, r.name FROM model_versions v JOIN runs r ON v.run_id = r.run_uuid "
            "WHERE v.name = 'fl-occupancy'"
        ).fetchall()
    assert rounds == 2  # a child run per round
    assert {"fl_round", "fl_rejected_updates", "val_accuracy", "test_accuracy"} <= keys_logged
    assert "served_test_accuracy" in keys_logged
    # the final global model, registered from the run (not from a round's child run)
    assert len(versions) == 1, versions
    assert not versions[0][1].startswith("round-"), versions
    assert any(k.startswith("fl_client_score.h0") for k in keys_logged)
