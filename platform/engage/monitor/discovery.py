"""Prometheus file-based service discovery: one JSON file per running job.

A Prometheus whose ``file_sd_configs`` point at the folder picks new jobs up without a
restart (see deploy/prometheus/prometheus.yml). Files are written atomically (write, then
rename) so Prometheus never reads half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def targets_dir(home: Path) -> Path:
    """The folder of discovery files under the engage home (``<home>/prometheus/targets``)."""
    return home / "prometheus" / "targets"


def target_file(home: Path, job: str, run_id: str) -> Path:
    """The discovery file of one run of ``job``."""
    return targets_dir(home) / f"{job}-{run_id}.json"


def register_target(
    home: Path, job: str, run_id: str, address: str, labels: dict[str, str]
) -> Path:
    """Advertise ``address`` (host:port) with the job's labels; returns the file written."""
    path = target_file(home, job, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = [{"targets": [address], "labels": {"job": job, "run_id": run_id, **labels}}]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry, indent=2))
    os.replace(tmp, path)
    return path


def unregister_target(home: Path, job: str, run_id: str) -> None:
    """Remove the run's discovery file, so Prometheus stops scraping it; no error if it is gone."""
    target_file(home, job, run_id).unlink(missing_ok=True)


def list_targets(home: Path) -> list[dict]:
    """Every advertised target: ``{"address", "job", "run_id", ...labels}``."""
    out = []
    folder = targets_dir(home)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entries = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now
        for entry in entries:
            for address in entry.get("targets", []):
                out.append({"address": address, **entry.get("labels", {})})
    return out
