"""The alert rules: promtool's own check and unit tests (tests/chart/alerts/), and that
every alert has a case where it fires with its labels and one where it stays quiet.
(tests/chart/test_promql.py evaluates every expression on a real Prometheus.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mol_testkit.prometheus import promtool_check_rules, promtool_test_rules

from .conftest import CHART

RULES = CHART / "files" / "prometheus" / "mol-alerts.rules.yaml"
UNIT_TESTS = sorted((Path(__file__).parent / "alerts").glob("*.test.yaml"))


def _alerts() -> set[str]:
    rules = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def _cases() -> list[dict[str, Any]]:
    return [case for path in UNIT_TESTS for test in yaml.safe_load(path.read_text())["tests"]
            for case in test.get("alert_rule_test", [])]


def test_alert_rules_pass_promtool() -> None:
    promtool_check_rules(RULES)


def test_alert_unit_tests_pass_promtool() -> None:
    assert UNIT_TESTS
    for path in UNIT_TESTS:
        tested = yaml.safe_load(path.read_text())["rule_files"]
        assert [(path.parent / f).resolve() for f in tested] == [RULES.resolve()], path
    promtool_test_rules(*UNIT_TESTS)


def test_every_alert_fires_in_a_case_and_stays_quiet_in_another() -> None:
    fires = {c["alertname"] for c in _cases() if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in _cases() if not c.get("exp_alerts")}
    assert _alerts() - fires == set(), "alerts no unit test makes fire"
    assert _alerts() - quiet == set(), "alerts no unit test shows quiet"
    # A firing case names the labels its alert groups by, not only the severity.
    for case in _cases():
        for alert in case.get("exp_alerts", []):
            assert set(alert["exp_labels"]) - {"severity"}, case["alertname"]
            assert alert["exp_annotations"]["summary"], case["alertname"]


def test_each_component_has_a_down_and_a_not_scraped_alert() -> None:
    rules = {r["alert"]: " ".join(str(r["expr"]).split())
             for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    for job in ("mol-catalog", "mol-operator", "mol-router"):
        assert job in rules["MoLComponentDown"]
        assert any(expr == f'absent(up{{job="{job}"}})' for expr in rules.values()), job
