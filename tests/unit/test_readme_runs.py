"""The README cannot drift from the CLI: its marked blocks are run or checked.

A fenced block is marked by the HTML comment on the line just before it:

- ``<!-- runnable -->`` before a ``bash`` block: every line is a cheap ``engage`` command
  (``--help``, ``--version``) and runs, in a scratch folder, with exit 0.
- ``<!-- checked -->`` before a ``bash`` block: commands that train, serve or need a
  cluster are not run; an ``engage`` line's subcommand and every ``--flag`` must exist
  (asked of the CLI itself, as ``engage SUB --help`` shows them), the spec files it names
  must exist, a ``make`` target must be in the Makefile and a ``curl -d`` body must be JSON.
- ``<!-- runnable: request -->`` before a ``json`` block: a request body, which the
  serving app's own parser must accept for the quickstart model (its window and features).

Every ``json`` block is parsed, marked or not, and every ``bash`` block must be marked.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ENGAGE = Path(sys.executable).with_name("engage")
MARKER = re.compile(r"^<!-- (runnable|checked|runnable: request) -->$")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its marker (or None), language, text and line."""

    marker: str | None
    lang: str
    text: str
    line: int

    def commands(self) -> list[str]:
        """The block's command lines, continuation lines joined, comments left in."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        return [c for c in (line.strip() for line in joined.splitlines()) if c]


def _blocks() -> list[Block]:
    lines = README.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = lines.index("```", i + 1)
        marked = MARKER.match(lines[i - 1]) if i else None
        text = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(marked.group(1) if marked else None, fence.group(1), text, i + 1))
        i = end + 1
    return blocks


BLOCKS = _blocks()


def _where(block: Block) -> str:
    return f"README.md:{block.line}"


def _of(marker: str, lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.marker == marker and b.lang == lang]


# -- the CLI, asked of itself ---------------------------------------------------------------
def _cli() -> Any:
    """The ``engage`` click command (typer ships its own click: duck-typed below)."""
    from engage.cli.main import app

    return typer.main.get_command(app)


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _resolve(words: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command ``engage WORDS...`` names, and its path."""
    command, path = _cli(), []
    for word in words:
        if not _is_group(command) or word not in command.commands:
            break
        command = command.commands[word]
        path.append(word)
    return command, path


def _flags(command: Any) -> set[str]:
    opts = {"--help"}
    for param in command.params:
        opts.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return opts


def _check_engage(tokens: list[str], raw: str, where: str) -> None:
    command, path = _resolve(tokens[1:])
    rest = tokens[1 + len(path) :]
    if _is_group(command) and not (rest and rest[0].startswith("-")):
        names = ", ".join(sorted(command.commands))
        pytest.fail(
            f"{where}: `{raw}`: no subcommand {' '.join(rest[:1])!r} of "
            f"`engage {' '.join(path)}`; valid: {names}"
        )
    unknown = sorted(set(FLAG.findall(raw)) - _flags(command))
    assert not unknown, f"{where}: `{raw}`: `engage {' '.join(path)}` has no {', '.join(unknown)}"
    for token in rest:
        if token.endswith((".yaml", ".yml")) and not token.startswith("-"):
            assert (ROOT / token).is_file(), f"{where}: `{raw}` names {token}, which is missing"


def _check_make(tokens: list[str], raw: str, where: str) -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in (t for t in tokens[1:] if not t.startswith("-") and "=" not in t):
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), (
            f"{where}: `{raw}`: the Makefile has no target {target}"
        )


def _check_curl(tokens: list[str], raw: str, where: str) -> None:
    for flag, value in itertools.pairwise(tokens):
        if flag in ("-d", "--data", "--data-raw") and not value.startswith("@"):
            try:
                json.loads(value)
            except ValueError as exc:
                pytest.fail(f"{where}: `{raw}`: the body is not JSON ({exc})")


CHECKS = {"engage": _check_engage, "make": _check_make, "curl": _check_curl}


# -- the tests -----------------------------------------------------------------------------
def test_every_bash_block_is_marked_runnable_or_checked():
    unmarked = [_where(b) for b in BLOCKS if b.lang in ("bash", "sh") and b.marker is None]

    assert not unmarked, (
        f"{', '.join(unmarked)}: put <!-- runnable --> (cheap engage commands, run) or "
        "<!-- checked --> (commands checked against the CLI, not run) on the line before"
    )


def test_the_readme_marks_blocks_of_each_kind():
    assert _of("runnable", "bash")
    assert _of("checked", "bash")
    assert _of("runnable: request", "json")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=_where)
def test_every_json_block_is_valid_json(block):
    try:
        json.loads(block.text)
    except ValueError as exc:
        pytest.fail(f"{_where(block)}: not valid JSON: {exc}")


@pytest.mark.parametrize("block", _of("runnable: request", "json"), ids=_where)
def test_request_bodies_are_accepted_for_the_quickstart_model(block):
    from engage.serve.scoring import parse_invocation
    from engage.serve.validation import InputSpec, RequestError, parse_predict

    data = yaml.safe_load((ROOT / "pipelines" / "quickstart.yaml").read_text())["data"]
    spec = InputSpec(int(data["window"]), len(data["features"]))
    body = block.text.encode()
    parsers = [lambda: parse_invocation(body, spec, tuple(data["features"]))]
    if set(json.loads(body)) <= {"inputs", "request_ids"}:  # /predict's own format too
        parsers.append(lambda: parse_predict(body, spec))
    for parse in parsers:
        try:
            assert len(parse().inputs) >= 1
        except RequestError as exc:
            pytest.fail(f"{_where(block)}: the server would answer {exc.status}: {exc.message}")


@pytest.mark.parametrize("block", _of("checked", "bash"), ids=_where)
def test_checked_commands_name_real_subcommands_flags_and_files(block):
    for raw in block.commands():
        tokens = shlex.split(raw, comments=True)
        if tokens and tokens[0] in CHECKS:
            CHECKS[tokens[0]](tokens, raw, _where(block))


@pytest.mark.parametrize("block", _of("runnable", "bash"), ids=_where)
def test_runnable_commands_run(block, tmp_path):
    env = {**os.environ, "ENGAGE_HOME": str(tmp_path / ".engage"), "COLUMNS": "120"}
    for raw in block.commands():
        tokens = shlex.split(raw, comments=True)
        assert tokens[0] == "engage", f"{_where(block)}: `{raw}`: runnable blocks run engage only"
        done = subprocess.run(
            [str(ENGAGE), *tokens[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (
            f"{_where(block)}: `{raw}` exited {done.returncode}: {done.stderr}"
        )
        assert done.stdout.strip(), f"{_where(block)}: `{raw}` printed nothing"


def test_the_checks_catch_a_made_up_subcommand_and_flag():
    with pytest.raises(pytest.fail.Exception, match="no subcommand"):
        _check_engage(["engage", "models", "frobnicate"], "engage models frobnicate", "here")
    with pytest.raises(AssertionError, match="has no --colour"):
        _check_engage(["engage", "deploy", "m", "--colour"], "engage deploy m --colour", "here")
    _check_engage(["engage", "deploy", "m", "--port", "8000"], "engage deploy m --port 8000", "")
