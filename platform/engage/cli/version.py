"""``engage --version`` and ``engage version``: the installed distribution's version."""

from __future__ import annotations

from importlib import metadata

import typer

from engage.cli.console import out

DISTRIBUTION = "engage-ml"


def version_text() -> str:
    """``"engage X.Y.Z"``, from the installed distribution's metadata.

    A source tree that was never installed falls back to ``engage.__version__``.
    """
    try:
        number = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        import engage

        number = engage.__version__
    return f"engage {number}"


def version_callback(value: bool) -> None:
    """Eager ``--version`` option: print the version and stop before any command runs.

    Raises
    ------
    typer.Exit
        With code 0 whenever the option is given.
    """
    if value:
        out.print(version_text(), markup=False)
        raise typer.Exit(0)


def version() -> None:
    """Print engage's version."""
    out.print(version_text(), markup=False)
