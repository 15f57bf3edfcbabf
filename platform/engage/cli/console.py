"""The CLI's consoles and its one guard: exceptions become a headline and an exit code.

Every ``engage`` command runs its body through :func:`guarded`, so the mapping from
exceptions to exit codes (``engage.cli.exit_codes``) and the way errors are printed live in
one place. Subcommands import ``out`` and ``guarded`` from here, never from ``cli/main.py``.
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from engage.cli import exit_codes
from engage.errors import EngageError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def guarded(fn: Callable[[], None]) -> None:
    """Run a command body and exit with the code its outcome maps to.

    Parameters
    ----------
    fn
        The command's body, called with no arguments.

    Raises
    ------
    typer.Exit
        Always: code 0 on success, the error's ``exit_code`` for an ``EngageError`` (headline,
        message and hint on stderr), 130 on Ctrl-C or SIGTERM, 70 with the traceback for
        anything else (a bug in engage).
    """
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # MLflow logs schema migrations at INFO on every new store; users need none of it.
    # (MLflow sets its level when first imported, so say it through its variable.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    try:
        fn()
        code = exit_codes.OK
    except EngageError as exc:
        print_error(exc)
        code = exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: stopped cleanly; the MLflow run is marked KILLED")
        code = exit_codes.INTERRUPTED
    except Exception:
        err.print(
            "[bold red]internal error[/] (a bug in engage; please report it with this traceback):"
        )
        err.print(traceback.format_exc(), markup=False)
        code = exit_codes.INTERNAL
    raise typer.Exit(code)


def print_error(exc: EngageError) -> None:
    """Print an engage error on stderr: the headline, the message, and the hint if any."""
    err.print(f"[bold red]error:[/] {exc.headline}")
    err.print(exc.message, markup=False)
    if exc.hint:
        err.print(f"hint: {exc.hint}", markup=False)
