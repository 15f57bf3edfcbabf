"""The rule catalogue: meta tests that keep it honest, and the generated files in deploy/."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from engage.errors import EngageError
from engage.monitor import promexport
from engage.monitor.rule_scenarios import ALL_RULES, SCENARIOS
from engage.monitor.rules import RULES, AlertRule, get_rule, rule_names, series_names
from engage.monitor.series import labels_of

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy" / "prometheus"
FIX = f"regenerate and commit it: {promexport.REGENERATE}"


def _committed_rules() -> dict[str, dict]:
    document = yaml.safe_load((DEPLOY / "rules.yml").read_text())
    return {entry["alert"]: entry for group in document["groups"] for entry in group["rules"]}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_is_documented_and_has_a_positive_threshold_and_for(rule: AlertRule) -> None:
    assert re.fullmatch(r"Engage(?:[A-Z][a-z0-9]*|NaN)+", rule.name)
    assert rule.severity in ("critical", "warning", "info")
    assert rule.summary.strip()
    assert rule.description.strip()
    assert rule.description.rstrip().endswith(".")
    assert rule.for_seconds > 0
    assert all(value > 0 for value in rule.params.values())
    per_job = any(name.endswith("_threshold_seconds") for name in rule.series)
    assert rule.params or per_job or rule.name == "EngageLossNaN"  # NaN needs no threshold


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_is_in_the_committed_rule_file_as_defined(rule: AlertRule) -> None:
    entry = _committed_rules().get(rule.name)

    assert entry == promexport.rule_entry(rule), f"deploy/prometheus/rules.yml is stale; {FIX}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_a_rule_reads_exactly_the_series_its_expression_names(rule: AlertRule) -> None:
    named = set(re.findall(r"engage_[a-z_]+", rule.expr))

    assert named == set(rule.series) | ({"engage_stage"} & named)
    assert named <= series_names()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_templates_render_and_a_value_prints_as_go_prints_it(rule: AlertRule) -> None:
    labels = labels_of({"job": "quickstart", "run_id": "abc"})

    text = rule.render(rule.summary, labels, 1.5) + rule.render(rule.description, labels, 1.5)

    assert "{{" not in text
    assert "quickstart" in text
    assert rule.render('{{ $value | printf "%.2f" }}', labels, math.inf) == "+Inf"
    assert rule.render('{{ $value | printf "%.2f" }}', labels, math.nan) == "NaN"


def test_an_unsupported_template_part_is_refused() -> None:
    with pytest.raises(ValueError, match="humanize"):
        RULES[0].render("{{ $value | humanize }}", (), 1.0)


def test_an_unknown_rule_name_lists_the_valid_ones() -> None:
    with pytest.raises(EngageError) as caught:
        get_rule("EngageJobStaled")

    assert "EngageJobStalled" in (caught.value.hint or "")


def test_every_rule_has_a_scenario_where_it_fires_and_one_where_it_must_not() -> None:
    fires = {e.rule for s in SCENARIOS for e in s.expect if e.alerts}
    quiet = {e.rule for s in SCENARIOS for e in s.expect if not e.alerts}

    assert set(rule_names()) == set(ALL_RULES) == fires == quiet


@pytest.mark.parametrize("name", ["rules.yml", "rules_test.yml"])
def test_the_committed_files_equal_a_fresh_render(name: str) -> None:
    fresh = promexport.render_rules() if name == "rules.yml" else promexport.render_tests()

    committed = (DEPLOY / name).read_text()

    assert committed == fresh, f"deploy/prometheus/{name} differs from engage's rules; {FIX}"


def test_every_spec_field_an_alert_tells_the_user_to_change_exists() -> None:
    # EngageDataBound once said "Raise data.num_workers", a field no spec has (issue 13).
    import re

    from pydantic import BaseModel

    from engage.monitor.rules import RULES
    from engage.spec.models import PipelineSpec

    def exists(dotted: str) -> bool:
        model: type[BaseModel] | None = PipelineSpec
        for part in dotted.split("."):
            fields = getattr(model, "model_fields", {})
            if part not in fields:
                return False
            annotation = fields[part].annotation
            candidates = [annotation, *getattr(annotation, "__args__", ())]
            model = next(
                (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
            )
        return True

    sections = "|".join(PipelineSpec.model_fields)
    named = {
        field
        for rule in RULES
        for field in re.findall(rf"\b(?:{sections})\.[a-z_.]*[a-z_]", rule.description)
    }
    assert "train.batch_size" in named  # the check reads what the data-bound advice names
    missing = sorted(f for f in named if not exists(f))
    assert missing == [], missing
