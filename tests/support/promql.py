"""PromQL as the monitoring tests read it: the selectors of an expression, the metrics the components export."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import promql_parser
from prometheus_client import CollectorRegistry

from scrutiny.agent.server import AgentMetrics
from scrutiny.paths import PROJECT_ROOT
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.watcher.metrics import WatcherMetrics

PROMETHEUS_BIN = PROJECT_ROOT / ".tools" / "prometheus" / "usr" / "bin"
#: Debian's promtool, extracted by scripts/setup.
PROMTOOL = PROMETHEUS_BIN / "promtool"
#: What Prometheus itself adds to every target.
PROMETHEUS_OWN = frozenset({"up", "ALERTS", "scrape_duration_seconds", "scrape_samples_scraped"})
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


def selectors(expression: str) -> Iterator[promql_parser.VectorSelector]:
    """Every vector selector of ``expression`` (a syntax error raises)."""
    pending: list[object] = [promql_parser.parse(expression)]
    while pending:
        node = pending.pop()
        if isinstance(node, promql_parser.VectorSelector):
            yield node
            continue
        for name in ("lhs", "rhs", "expr", "param", "vector_selector"):
            child = getattr(node, name, None)
            if child is not None:
                pending.append(child)
        pending.extend(getattr(node, "args", None) or [])


def matcher_values(selector: promql_parser.VectorSelector, label: str) -> set[str]:
    """The values an equality or regular-expression matcher of ``label`` names (alternatives split)."""
    values: set[str] = set()
    for matcher in selector.matchers.matchers:
        if matcher.name == label and str(matcher.op) in ("MatchOp.Equal", "MatchOp.Re"):
            values.update(matcher.value.split("|"))
    return values


def exported_metrics() -> frozenset[str]:
    """The names of every series the checker, the watcher and the agent can export (suffixes included)."""
    names: set[str] = set()
    for registry in (JobMetrics().registry, WatcherMetrics().registry, AgentMetrics().registry):
        names |= _family_names(registry)
    return frozenset(names)


def _family_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run Debian's promtool (missing: a clear failure that says how to get it)."""
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: run scripts/setup (it extracts Debian's prometheus package)"
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=120, check=False)
