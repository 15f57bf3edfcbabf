"""Meta tests on the exit-code table: every error has a code, every code is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from engage.cli import console, exit_codes
from engage.cli.exit_codes import EXIT_CODES
from engage.errors import DataError, EngageError

README = Path(__file__).resolve().parents[3] / "README.md"


def _all_subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_all_subclasses(sub)]
    return found


ERRORS = [EngageError, *_all_subclasses(EngageError)]


def test_the_error_tree_is_not_empty() -> None:
    assert len(ERRORS) >= 6


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_every_error_has_a_listed_exit_code_and_a_headline(cls: type[EngageError]) -> None:
    assert cls.exit_code in EXIT_CODES
    assert cls.headline.strip()
    assert "\n" not in cls.headline


def test_codes_are_distinct() -> None:
    """A dict silently merges equal keys: count the codes instead of trusting len(EXIT_CODES)."""
    own = [c.exit_code for c in ERRORS if "exit_code" in vars(c)]
    codes = [*own, exit_codes.OK, exit_codes.INTERNAL, exit_codes.INTERRUPTED]

    assert len(set(codes)) == len(codes)
    assert set(codes) == set(EXIT_CODES)


@pytest.mark.parametrize("code", sorted(EXIT_CODES))
def test_every_code_has_a_description(code: int) -> None:
    assert EXIT_CODES[code].strip()


@pytest.mark.parametrize("code", sorted(EXIT_CODES))
def test_every_code_is_in_the_readme_table(code: int) -> None:
    text = README.read_text(encoding="utf-8") if README.exists() else ""

    assert re.search(rf"^\|\s*`?{code}`?\s*\|", text, re.MULTILINE), (
        f"exit code {code} ({EXIT_CODES[code]}) is missing from README.md's exit code table"
    )


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch):
    """``console.guarded`` without touching the test process's SIGTERM handler."""
    monkeypatch.setattr(console.signal, "signal", lambda *args: None)
    return console.guarded


def test_cli_maps_an_engage_error_to_its_code_and_headline(guarded, capsys) -> None:
    def body() -> None:
        raise DataError("data.csv: column 'x' has NaN at row 3", hint="fill it")

    with pytest.raises(typer.Exit) as caught:
        guarded(body)

    err = capsys.readouterr().err
    assert caught.value.exit_code == DataError.exit_code
    assert "error: invalid input data" in err
    assert "column 'x' has NaN at row 3" in err
    assert "hint: fill it" in err
    assert "Traceback" not in err


def test_cli_reports_anything_else_as_internal_with_a_traceback(guarded, capsys) -> None:
    def body() -> None:
        raise ZeroDivisionError("boom")

    with pytest.raises(typer.Exit) as caught:
        guarded(body)

    err = capsys.readouterr().err
    assert caught.value.exit_code == exit_codes.INTERNAL
    assert "internal error" in err
    assert "Traceback" in err
    assert "ZeroDivisionError: boom" in err


def test_cli_reports_an_interrupt_as_130(guarded) -> None:
    def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as caught:
        guarded(body)

    assert caught.value.exit_code == exit_codes.INTERRUPTED
