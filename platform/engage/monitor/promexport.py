"""Render the rule catalogue for Prometheus: rules.yml and its promtool unit tests.

Both files in deploy/prometheus/ are generated from :mod:`engage.monitor.rules` and
:mod:`engage.monitor.rule_scenarios` and committed; a unit test fails when they differ
from a fresh render. Regenerate with::

    engage monitor rules --output deploy/prometheus/rules.yml --tests deploy/prometheus/rules_test.yml
    python -m engage.monitor.promexport      # the same, from the repository root
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from engage.monitor.rule_scenarios import SCENARIOS, Scenario
from engage.monitor.rules import RULES, AlertRule, get_rule

REGENERATE = (
    "engage monitor rules --output deploy/prometheus/rules.yml "
    "--tests deploy/prometheus/rules_test.yml  (or: python -m engage.monitor.promexport)"
)
_HEADER = f"# GENERATED from {{source}} - do not edit by hand.\n# Regenerate: {REGENERATE}\n"
RULES_FILE = Path("deploy/prometheus/rules.yml")
TESTS_FILE = Path("deploy/prometheus/rules_test.yml")


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings, so each expression reads as written."""


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(document: dict, source: str) -> str:
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return _HEADER.format(source=source) + body


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole != seconds:
        raise ValueError(f"durations must be whole seconds, got {seconds}")
    return f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"


def rule_entry(rule: AlertRule) -> dict:
    """One alert rule as a Prometheus rule-file entry (``for`` as whole minutes or seconds).

    Raises
    ------
    ValueError
        If the rule's ``for_seconds`` is not a whole number of seconds.
    """
    return {
        "alert": rule.name,
        "expr": rule.expr,
        "for": _duration(rule.for_seconds),
        "labels": {"severity": rule.severity},
        "annotations": {"summary": rule.summary, "description": rule.description},
    }


def render_rules(rules: Sequence[AlertRule] = RULES) -> str:
    """The Prometheus rule file (one group, ``engage``)."""
    document = {"groups": [{"name": "engage", "rules": [rule_entry(r) for r in rules]}]}
    return _dump(document, "engage/monitor/rules.py")


def _sample(value: float | None) -> str:
    if value is None:
        return "_"
    return "NaN" if math.isnan(value) else repr(float(value))


def _labels(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _test_entry(scenario: Scenario) -> dict:
    checks = []
    for expect in scenario.expect:
        rule = get_rule(expect.rule)
        alerts = [
            {
                "exp_labels": {"severity": rule.severity, **dict(labels)},
                "exp_annotations": {
                    "summary": rule.render(rule.summary, labels, value),
                    "description": rule.render(rule.description, labels, value),
                },
            }
            for labels, value in expect.alerts
        ]
        checks.append(
            {"eval_time": _duration(expect.at), "alertname": rule.name, "exp_alerts": alerts}
        )
    return {
        "name": scenario.name,
        "interval": _duration(scenario.interval_s),
        "input_series": [
            {"series": _labels(s.name, dict(s.labels)), "values": " ".join(map(_sample, s.values))}
            for s in scenario.series
        ],
        "alert_rule_test": checks,
    }


def render_tests(rule_file: str = "rules.yml", scenarios: Sequence[Scenario] = SCENARIOS) -> str:
    """The ``promtool test rules`` file; ``rule_file`` is relative to where it is written.

    Raises
    ------
    ValueError
        If the scenarios do not all use the same evaluation interval.
    """
    intervals = {s.interval_s for s in scenarios}
    if len(intervals) != 1:
        raise ValueError("every scenario must use one evaluation interval")
    document = {
        "rule_files": [rule_file],
        "evaluation_interval": _duration(intervals.pop()),
        "tests": [_test_entry(s) for s in scenarios],
    }
    return _dump(document, "engage/monitor/rule_scenarios.py")


def write(output: Path | None, tests: Path | None) -> list[Path]:
    """Write the rule file and/or the test file; returns the paths written."""
    written = []
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(render_rules())
        written.append(output)
    if tests is not None:
        rule_file = output if output is not None else tests.with_name("rules.yml")
        relative = Path(os.path.relpath(Path(rule_file).resolve(), tests.resolve().parent))
        tests.parent.mkdir(parents=True, exist_ok=True)
        tests.write_text(render_tests(relative.as_posix()))
        written.append(tests)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    """Command line ``python -m engage.monitor.promexport``: write the rule file and its
    promtool tests (``--output``, ``--tests``) and print each path written.
    """
    parser = argparse.ArgumentParser(prog="python -m engage.monitor.promexport")
    parser.add_argument("--output", type=Path, default=RULES_FILE)
    parser.add_argument("--tests", type=Path, default=TESTS_FILE)
    args = parser.parse_args(argv)
    for path in write(args.output, args.tests):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
