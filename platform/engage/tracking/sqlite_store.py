"""The local SQLite MLflow store's file: created from an empty copy, and forgotten by MLflow.

A new local MLflow store starts as a copy of an empty one, not from MLflow's migrations.

MLflow creates a SQLite store by running every Alembic migration since its first schema:
3-10 s on a 2-core machine, paid by each new engage home (a first ``engage run``, every
notebook, every test's temporary home). The schema those migrations produce depends only on
the MLflow version, so engage builds it once per version in the user's cache folder
(``$XDG_CACHE_HOME/engage``, else ``~/.cache/engage``) and copies it into a home that has no
store yet. The template holds no experiment: MLflow creates its ``Default`` experiment, whose
artifact location depends on where the store is opened, when it first opens the copy.

After ``engage sync --repair`` replaces a store's file, :func:`forget_store` drops the
engines MLflow cached for it.

Anything that goes wrong here (a read-only cache, a template from an interrupted build)
leaves the store to MLflow, which creates it as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from engage.paths import FILE_MODE


def cache_dir() -> Path:
    """engage's folder in the user's cache (``$XDG_CACHE_HOME/engage`` or ``~/.cache/engage``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "engage"


def seed_sqlite_store(path: Path) -> bool:
    """Create the SQLite file ``path`` as an empty, migrated MLflow store; True if it did.

    Nothing happens (False) when ``path`` already exists, even empty: another process may be
    creating its tables. The file appears atomically (a hard link of a finished copy), with
    mode 0600, so a concurrent opener sees either no file or the whole schema.
    """
    path = Path(path)
    if path.exists():
        return False
    template = schema_template()
    if template is None:
        return False
    tmp = path.with_name(f".{path.name}.seed-{os.getpid()}")
    try:
        shutil.copyfile(template, tmp)
        tmp.chmod(FILE_MODE)
        os.link(tmp, path)
        return True
    except OSError:  # lost the race to another creator, or a read-only folder
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def schema_template() -> Path | None:
    """The cached empty store for the installed MLflow, built on first use; None if it cannot be."""
    try:
        mlflow_version = version("mlflow")
    except PackageNotFoundError:
        return None
    template = cache_dir() / f"mlflow-{mlflow_version}-empty.db"
    if template.is_file():
        return template
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp = template.with_name(f".{template.name}.build-{os.getpid()}")
        _build(tmp)
        os.replace(tmp, template)  # several builders at once: the last one wins, all equal
    except Exception:
        with contextlib.suppress(NameError, OSError):
            tmp.unlink()
        return None
    return template


def _build(file: Path) -> None:
    """Let MLflow create its schema in ``file``, then drop the ``Default`` experiment it adds."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{file}"
    MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments(max_results=1)
    forget_store(uri)  # MLflow keeps the engine open for the process's life otherwise
    with contextlib.closing(sqlite3.connect(file)) as db:
        with db:
            db.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            db.execute("DELETE FROM experiments WHERE experiment_id = 0")
        db.execute("VACUUM")


def forget_store(uri: str) -> None:
    """Drop MLflow's cached SQLAlchemy engines for ``uri`` in this process.

    MLflow's SQL stores keep one engine per database URI for the process's life; after
    engine replaced the file behind a ``sqlite:///`` URI (``engage sync --repair``), a
    cached engine would go on using the old file.
    """
    import importlib

    for name in (
        "mlflow.store.tracking.sqlalchemy_store",
        "mlflow.store.model_registry.sqlalchemy_store",
        "mlflow.store.jobs.sqlalchemy_store",
    ):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for store_class in vars(module).values():
            engines = getattr(store_class, "_engine_map", None)
            if isinstance(engines, dict) and (engine := engines.pop(uri, None)) is not None:
                engine.dispose()
