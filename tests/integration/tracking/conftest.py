"""Fixtures for tracking against real services: `mlflow server` over SQLite or PostgreSQL.

No ``__init__.py`` in this folder on purpose: with one, pytest names it package
``tracking``, which tests/unit/tracking already is, and collection fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _harness import Job, MlflowServer, PostgresCluster, PostgresDatabase


@pytest.fixture(scope="session")
def postgres_db() -> Iterator[PostgresDatabase]:
    """A fresh role and database on Debian's PostgreSQL cluster (started if it was down).

    Skipped only when PostgreSQL is not installed (`make test` installs it).
    """
    cluster = PostgresCluster.find()
    if cluster is None:
        pytest.skip(
            "PostgreSQL binaries not installed (apt-get install postgresql; make test does)"
        )
    cluster.ensure_running()
    db = PostgresDatabase(cluster)
    try:
        db.create()
        yield db
    finally:
        try:
            db.drop()
        finally:
            cluster.stop_if_started_here()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The contract suite runs once per MLflow backend store."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mlflow.db'}"
    return request.getfixturevalue("postgres_db").uri


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[Callable[[str], MlflowServer]]:
    """Makes (unstarted) servers on a free loopback port; every one is SIGKILLed at teardown."""
    made: list[MlflowServer] = []

    def make(backend_uri: str) -> MlflowServer:
        made.append(MlflowServer(backend_uri, tmp_path / f"server{len(made)}"))
        return made[-1]

    yield make
    for server in made:
        server.kill()


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[..., Job]]:
    """Starts ``_job.py`` with ENGAGE_HOME under tmp_path; killed at teardown if still running."""
    jobs: list[Job] = []

    def start(uri: str, experiment: str, *extra: str) -> Job:
        jobs.append(Job.start(tmp_path / "home", uri, experiment, *extra))
        return jobs[-1]

    yield start
    for job in jobs:
        job.kill()
