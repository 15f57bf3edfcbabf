"""Least exposure for what engage writes under its home: folders 0700, files 0600.

The ground floor (imports nothing else of engage): the spool, the MLflow SQLite store,
the event store and the serving sample store all hold run data and, for a URI with
credentials, what points at them, so no other local user should read them. Every module
that creates such a file calls :func:`private_file` (or :func:`private_dir` for a folder)
before opening it; SQLite then gives its ``-wal`` and ``-shm`` files the same mode.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) with mode 0700 for the folders engage creates.

    A folder that already exists keeps its mode: it may be the user's, shared on purpose.
    Returns ``path``.
    """
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    for folder in missing:
        with contextlib.suppress(OSError):  # parents() get the umask's mode: tighten them too
            folder.chmod(DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Make sure ``path`` exists with mode 0600 before a database opens it; returns it.

    The parent folder is created with :func:`private_dir` when missing. A file engage
    created earlier with a wider mode is tightened (only when this user owns it).
    """
    path = Path(path)
    private_dir(path.parent)
    try:
        # Never open (and close) a file a database may hold open: closing any descriptor of
        # it drops this process's POSIX locks on it, SQLite's included, and another process
        # could then take itself for the last user and delete the WAL under everyone.
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDONLY, FILE_MODE))
    except FileExistsError:
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != FILE_MODE:
            with contextlib.suppress(OSError):  # a read-only mount: the open that follows says so
                path.chmod(FILE_MODE)
    return path
