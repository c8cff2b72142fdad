"""The shipped Prometheus rules: valid for promtool, unit-tested alert by alert, complete, and about real metrics.

promtool is Debian's (``prometheus`` package, extracted by scripts/setup into .tools/prometheus).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scrutiny.core.vocabulary import FIXED_SEVERITY, Category, Severity
from scrutiny.paths import PROJECT_ROOT
from tests.support.promql import PROMETHEUS_OWN, exported_metrics, matcher_values, promtool, selectors

RULES_DIR = PROJECT_ROOT / "conf" / "monitoring" / "prometheus"
ALERTS = RULES_DIR / "scrutiny_alerts.yml"
RECORDING = RULES_DIR / "scrutiny_rules.yml"
UNIT_TESTS = Path(__file__).with_name("scrutiny_alerts_test.yml")
RUNBOOK = PROJECT_ROOT / "docs" / "runbook.md"
#: Findings that need no alert of their own: a detail of the quorum findings, and the informational ones.
NO_ALERT_OF_THEIR_OWN = {Category.MISSING_REPLICA} | {c for c, s in FIXED_SEVERITY.items() if s is Severity.INFO}


def rules(path: Path) -> list[dict[str, Any]]:
    document = yaml.safe_load(path.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return rules(ALERTS)


def test_promtool_accepts_both_rule_files() -> None:
    checked = promtool("check", "rules", str(ALERTS), str(RECORDING))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    tested = promtool("test", "rules", str(UNIT_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_silent_and_a_firing_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in test["alert_rule_test"]:
            cases.setdefault(check["alertname"], set()).add(bool(check.get("exp_alerts")))
    assert {a["alert"]: {False, True} for a in alerts()} == cases


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: str(a["alert"]))
def test_every_alert_says_how_bad_what_and_where_to_read_on(alert: dict[str, Any]) -> None:
    assert alert["alert"].startswith("Scrutiny") and alert["labels"]["severity"] in ("critical", "warning")
    annotations = alert["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"} and all(annotations.values())
    assert annotations["runbook_url"] == f"docs/runbook.md#{alert['alert'].lower()}"
    assert "for" in alert, "every alert states how long it waits"


def test_every_runbook_link_lands_on_a_section() -> None:
    headings = {_slug(line[3:]) for line in RUNBOOK.read_text().splitlines() if line.startswith("## ")}
    assert {a["annotations"]["runbook_url"].split("#", 1)[1] for a in alerts()} <= headings


def test_the_rules_name_only_metrics_the_components_export() -> None:
    recorded = {r["record"] for r in rules(RECORDING)}
    assert all(re.fullmatch(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+", name) for name in recorded), "level:metric:operations"
    known = exported_metrics() | PROMETHEUS_OWN | recorded
    for rule in [*rules(RECORDING), *alerts()]:
        names = {s.name for s in selectors(rule["expr"]) if s.name}
        assert names and names <= known, f"{rule.get('alert') or rule['record']}: {sorted(names - known)}"


def test_every_finding_a_person_must_act_on_has_an_alert() -> None:
    named: set[str] = set()
    for alert in alerts():
        for selector in selectors(alert["expr"]):
            named |= matcher_values(selector, "category")
    assert named <= {c.value for c in Category}
    assert {c.value for c in Category} - named == {c.value for c in NO_ALERT_OF_THEIR_OWN}


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (lower case, punctuation dropped, spaces as hyphens)."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")
