"""``engage monitor rules``: render the alert rules for Prometheus (and their promtool tests).

A plain function; ``engage.cli.monitor`` registers it on the ``monitor`` group.
"""

from __future__ import annotations

from pathlib import Path

import typer


def rules_command(output: Path | None, tests: Path | None) -> None:
    """Write the Prometheus rule file to ``output`` (stdout when None) and, with ``tests``,
    the ``promtool test rules`` file whose scenarios prove the rules fire as engage's do."""
    from engage.monitor.promexport import render_rules, write

    if output is None:
        typer.echo(render_rules(), nl=False)
    for path in write(output, tests):
        typer.echo(f"wrote {path}", err=output is None)  # keep stdout a valid rule file
