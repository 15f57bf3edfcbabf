"""MLflow on PostgreSQL, checked in PostgreSQL itself.

The outage contract runs over this store in test_outage.py (``backend_uri[postgresql]``);
here the rows are read straight from the database, so "exactly once" does not depend on
how the REST API presents them.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_drained_points_are_rows_in_postgresql_exactly_once(
    postgres_db, mlflow_server, start_job
) -> None:
    server = mlflow_server(postgres_db.uri)
    server.start()
    job = start_job(server.url, "pg-rows", "--metrics", "2", "--steps", "300", "--seconds", "1")

    summary = job.finish()

    rows = postgres_db.query(
        "SELECT key, step, COUNT(*) FROM metrics WHERE run_uuid = %s GROUP BY key, step",
        (summary["run_id"],),
    )
    assert sorted((key, step) for key, step, _ in rows) == [
        (f"m{k}", s) for k in range(2) for s in range(300)
    ]
    assert {n for _, _, n in rows} == {1}
    ((status,),) = postgres_db.query(
        "SELECT status FROM runs WHERE run_uuid = %s", (summary["run_id"],)
    )
    assert status == "FINISHED"
    ((local_id,),) = postgres_db.query(
        "SELECT value FROM tags WHERE run_uuid = %s AND key = 'engage.local_run_id'",
        (summary["run_id"],),
    )
    assert local_id == summary["local_id"]
