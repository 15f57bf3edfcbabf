"""``engage init DIR``: scaffold a project that ``engage run engage.yaml`` trains from inside DIR.

The project holds a spec, a model module with a registered builder (named in the spec's
``model.module``), a sample CSV from engage's synthetic generator, a README and a notebook.
The text files are templates packaged under ``engage/resources/project``; the CSV is
generated here, so it always matches the generator the installed engage ships.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from engage.cli.console import guarded, out

SPEC_FILE = "engage.yaml"
DATA_FILE = Path("data") / "sample.csv"
# template name -> file written in the project (a leading dot would hide it from package data)
TEMPLATES = {
    "engage.yaml": SPEC_FILE,
    "my_model.py": "my_model.py",
    "README.md": "README.md",
    "notebook.ipynb": "notebook.ipynb",
    "gitignore": ".gitignore",
}
# Two households, three days, one reading every 15 minutes: 576 rows, both classes in
# every split, small enough to train in seconds.
_SAMPLE = {"households": 2, "days": 3, "seed": 7, "every_minutes": 15}


def init(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="Folder for the project; created if missing.")
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Write into a non-empty DIR, replacing same-named files."),
    ] = False,
) -> None:
    """Create a project in DIR: a spec, your model module, a sample CSV, a notebook, a README."""
    refusal = why_not_init(directory, force)
    if refusal:
        raise typer.BadParameter(refusal, param_hint="DIR")

    def _body() -> None:
        written = scaffold(directory)
        out.print(f"[green]✓[/] created a project in {directory}")
        for path in written:
            out.print(f"  {path.relative_to(directory)}", markup=False)
        out.print("[bold]Try next[/]")
        out.print(f"  cd {directory}", markup=False)
        out.print(f"  engage run {SPEC_FILE}      # trains in about a minute", markup=False)
        out.print("  then edit my_model.py, or point data.source.path at your CSV", markup=False)

    guarded(_body)


def why_not_init(directory: Path, force: bool) -> str | None:
    """Why ``directory`` cannot take a project, or None when it can.

    A missing or empty folder is fine; a non-empty one only with ``force``; a file never.
    """
    if directory.exists() and not directory.is_dir():
        return f"{directory} is a file, not a folder; choose another DIR"
    if not force and directory.is_dir() and any(directory.iterdir()):
        return (
            f"{directory} is not empty; choose a new or empty folder, or pass --force to "
            "write the project's files into it (same-named files are replaced)"
        )
    return None


def project_name(directory: Path) -> str:
    """A spec ``name`` made from the folder's name: letters, digits, ``_ . -`` only."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", directory.resolve().name).lstrip("_.-")[:100]
    return name or "my-project"


def scaffold(directory: Path) -> list[Path]:
    """Write the project's files into ``directory`` (created if missing); returns their paths.

    Raises
    ------
    OSError
        If a file cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    rows = write_sample_csv(directory / DATA_FILE)
    values = {"project": project_name(directory), "rows": str(rows)}
    templates = resources.files("engage") / "resources" / "project"
    written = []
    for template, target in TEMPLATES.items():
        text = (templates / template).read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        path = directory / target
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return [*written, directory / DATA_FILE]


def write_sample_csv(path: Path) -> int:
    """Write a few hundred rows of the synthetic smart-home data to ``path``; returns the count."""
    from engage.data.synthetic import generate_smart_living

    s = _SAMPLE
    frame = generate_smart_living(s["households"], s["days"], s["seed"], "2026-01-05", 1.0)
    sample = frame.groupby("household", sort=True).nth(slice(None, None, s["every_minutes"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    sample.to_csv(path, index=False)
    return len(sample)
