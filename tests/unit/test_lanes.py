"""``make test`` runs three lanes (tests/lanes.py): every test file is in exactly one of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _lanes() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("lanes", REPO / "tests" / "lanes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.lanes()


def _selects(args: list[str], path: Path) -> bool:
    """Whether pytest given ``args`` (paths and --ignore=PATH) would collect ``path``."""
    rel = path.relative_to(REPO)
    ignored = [Path(a.removeprefix("--ignore=")) for a in args if a.startswith("--ignore=")]
    chosen = [Path(a) for a in args if not a.startswith("-")]
    under = lambda roots: any(rel == r or r in rel.parents for r in roots)  # noqa: E731
    return under(chosen) and not under(ignored)


def test_every_test_file_runs_in_exactly_one_lane() -> None:
    lanes = _lanes()
    files = sorted((REPO / "tests").rglob("test_*.py"))
    assert len(files) > 50
    for path in files:
        owners = [name for name, args in lanes.items() if _selects(args, path)]
        assert len(owners) == 1, f"{path.relative_to(REPO)} runs in {owners or 'no lane'}"


def test_every_path_a_lane_names_exists() -> None:
    for name, args in _lanes().items():
        for arg in args:
            path = REPO / arg.removeprefix("--ignore=")
            assert path.exists(), f"lane {name} names {arg}, which is not there"
