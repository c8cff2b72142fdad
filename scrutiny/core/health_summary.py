"""The fsck-style health summary of a cluster: counts, the worst ledgers, and a HEALTHY / UNHEALTHY status.

Pure: callers hand in the open violations (from the ``open_violations`` table for ``scrutiny report``, from the
verdicts for a one-shot scan) and the figures they know; nothing here reads files or clocks (times are epoch
milliseconds, passed in). :func:`summarize` builds a :class:`HealthSummary`, :func:`render` lays it out for people
(its last line is exactly ``Status: HEALTHY`` or ``Status: UNHEALTHY``, or ``Status: INTERRUPTED`` for a scan stopped
before its end), :func:`as_json_dict` gives the same content as the JSON contract of docs/report.md, and
:func:`exit_code` is 0 when healthy, 1 otherwise, and 2 when interrupted.

The status is UNHEALTHY when some open violation has a severity at or above the threshold (``--fail-on``; default
:data:`DEFAULT_FAIL_ON`, critical, as fsck reports CORRUPT for missing blocks but stays HEALTHY with under-replicated
ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.utc_text import format_duration_ms, format_utc_ms
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, DATA_LOSS_CATEGORIES, Category, Severity, is_data_loss

DEFAULT_FAIL_ON: Final = Severity.CRITICAL
DEFAULT_WORST: Final = 10
#: The window of "batches in the last N minutes".
RECENT_WINDOW_MS: Final = 10 * 60_000
#: A streaming checker with no batch for this long looks stalled (it runs a batch at least every watcher tick).
DEFAULT_STALL_AFTER_MS: Final = 5 * 60_000
HEALTHY: Final = "HEALTHY"
UNHEALTHY: Final = "UNHEALTHY"
INTERRUPTED: Final = "INTERRUPTED"
#: The exit code of an incomplete summary (as for errors: the health is not known).
EXIT_INTERRUPTED: Final = 2
_DETAILS_WIDTH: Final = 100
_SEVERITIES_WORST_FIRST: Final = (Severity.CRITICAL, Severity.WARNING, Severity.INFO)


class HealthSummaryError(ScrutinyError, ValueError):
    """A violation row that cannot be summarized (unknown category or severity, missing field); names the field."""


@dataclass(frozen=True, slots=True)
class OpenViolation:
    """One open violation, as ``open_violations`` holds it (``first_seen_ms``: epoch milliseconds, UTC)."""

    ledger_id: int
    category: Category
    severity: Severity
    first_seen_ms: int
    bookie: str | None = None
    segment_first_entry: int | None = None
    entry_count: int | None = None
    pulsar_topic: str | None = None
    details: str | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[str, object]) -> OpenViolation:
        """From a dict with the ``open_violations`` column names, ``first_seen`` given as epoch ms."""
        try:
            category = Category(str(row["category"]))
        except (KeyError, ValueError):
            raise HealthSummaryError(f"violation field 'category': unknown value {row.get('category')!r}") from None
        try:
            severity = Severity(str(row["severity"]))
        except (KeyError, ValueError):
            raise HealthSummaryError(f"violation field 'severity': unknown value {row.get('severity')!r}") from None
        return cls(
            ledger_id=_int(row, "ledger_id"),
            category=category,
            severity=severity,
            first_seen_ms=_int(row, "first_seen"),
            bookie=_optional_str(row.get("bookie")),
            segment_first_entry=_optional_int(row, "segment_first_entry"),
            entry_count=_optional_int(row, "entry_count"),
            pulsar_topic=_optional_str(row.get("pulsar_topic")),
            details=_optional_str(row.get("details")),
        )


def _int(row: Mapping[str, object], name: str) -> int:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise HealthSummaryError(f"violation field {name!r}: expected an integer, got {value!r}")
    return value


def _optional_int(row: Mapping[str, object], name: str) -> int | None:
    return None if row.get(name) is None else _int(row, name)


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class CheckerFigures:
    """The streaming checker's own health, from ``checker_runs``; times in epoch ms.

    ``last_batch_ms`` is when the last batch finished (None: no batch recorded), ``batches_recent`` how many
    finished within :data:`RECENT_WINDOW_MS` of the summary's ``now_ms``.
    """

    last_batch_ms: int | None = None
    last_batch_id: int | None = None
    last_batch_source: str | None = None
    lag_records: int | None = None
    batches_recent: int = 0
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS
    #: Records of the topic the checker skipped (``rejected_events``), and when the last one was.
    rejected_events: int = 0
    last_rejected_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Figures:
    """What the caller knows besides the violations; every field optional (None: not known, not shown)."""

    ledgers_checked: int | None = None
    seconds_taken: float | None = None
    now_ms: int | None = None
    checker: CheckerFigures | None = None
    #: Why the figures are incomplete (a scan stopped before its end); the status is then INTERRUPTED.
    interrupted: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerFindings:
    """One affected ledger: its worst severity, whether it lost data, entries affected, and its findings.

    ``entries_affected`` is the largest ``entry_count`` of its findings (they overlap: an entry with no copy is in
    the ``NO_REPLICA`` row and in a ``MISSING_REPLICA`` row per bookie, so a sum would count it several times).
    """

    ledger_id: int
    worst_severity: Severity
    data_loss: bool
    entries_affected: int | None
    first_seen_ms: int
    pulsar_topic: str | None
    findings: tuple[OpenViolation, ...]


@dataclass(frozen=True, slots=True)
class HealthSummary:
    """The summary; build it with :func:`summarize`. ``counts`` is keyed by (category, severity), non-zero only."""

    fail_on: Severity
    open_violations: int
    ledgers_affected: int
    counts: Mapping[tuple[Category, Severity], int]
    worst: tuple[LedgerFindings, ...]
    figures: Figures = field(default_factory=Figures)
    warnings: tuple[str, ...] = ()
    #: Ledgers with at least one finding that means data loss (:func:`~scrutiny.core.vocabulary.is_data_loss`).
    data_loss_ledgers: int = 0
    #: Cluster-level findings (``BOOKIE_LOST``, ``AUTORECOVERY_DISABLED``, ``NO_AUDITOR``), worst first: counted, but of
    #: no ledger.
    cluster: tuple[OpenViolation, ...] = ()

    @property
    def by_severity(self) -> dict[Severity, int]:
        """Open violations per severity, all three severities present (worst first)."""
        totals = dict.fromkeys(_SEVERITIES_WORST_FIRST, 0)
        for (_, severity), count in self.counts.items():
            totals[severity] += count
        return totals

    @property
    def healthy(self) -> bool:
        """True when no open violation is at or above ``fail_on``."""
        return not any(n for severity, n in self.by_severity.items() if severity.rank >= self.fail_on.rank)

    @property
    def status(self) -> str:
        """``HEALTHY`` or ``UNHEALTHY``; ``INTERRUPTED`` when the figures are incomplete, whatever was found."""
        if self.figures.interrupted is not None:
            return INTERRUPTED
        return HEALTHY if self.healthy else UNHEALTHY


def summarize(
    violations: Iterable[OpenViolation],
    figures: Figures | None = None,
    *,
    fail_on: Severity = DEFAULT_FAIL_ON,
    worst: int = DEFAULT_WORST,
) -> HealthSummary:
    """The summary of ``violations`` (all open), keeping the ``worst`` worst ledgers (0: none; negative: error)."""
    if worst < 0:
        raise HealthSummaryError(f"the number of worst ledgers must not be negative, got {worst}")
    figures = figures or Figures()
    rows = tuple(violations)
    counts: dict[tuple[Category, Severity], int] = {}
    by_ledger: dict[int, list[OpenViolation]] = {}
    cluster: list[OpenViolation] = []
    for row in rows:
        counts[(row.category, row.severity)] = counts.get((row.category, row.severity), 0) + 1
        if row.ledger_id == CLUSTER_LEDGER_ID:
            cluster.append(row)
        else:
            by_ledger.setdefault(row.ledger_id, []).append(row)
    ledgers = sorted((_ledger_findings(i, found) for i, found in by_ledger.items()), key=_ledger_rank)
    return HealthSummary(
        fail_on=fail_on,
        open_violations=len(rows),
        ledgers_affected=len(by_ledger),
        counts=dict(sorted(counts.items(), key=lambda item: _count_rank(*item[0]))),
        worst=tuple(ledgers[:worst]),
        figures=figures,
        warnings=_warnings(figures),
        data_loss_ledgers=sum(1 for found in ledgers if found.data_loss),
        cluster=tuple(sorted(cluster, key=_finding_rank)),
    )


def _count_rank(category: Category, severity: Severity) -> tuple[int, bool, str]:
    return (-severity.rank, category not in DATA_LOSS_CATEGORIES, category.value)


def _finding_rank(row: OpenViolation) -> tuple[int, bool, str, str, int]:
    return (
        -row.severity.rank,
        not is_data_loss(row.category, row.severity),
        row.category.value,
        row.bookie or "",
        -1 if row.segment_first_entry is None else row.segment_first_entry,
    )


def _ledger_findings(ledger_id: int, rows: list[OpenViolation]) -> LedgerFindings:
    counted = [r.entry_count for r in rows if r.entry_count is not None]
    topics = sorted({r.pulsar_topic for r in rows if r.pulsar_topic})
    return LedgerFindings(
        ledger_id=ledger_id,
        worst_severity=max((r.severity for r in rows), key=lambda s: s.rank),
        data_loss=any(is_data_loss(r.category, r.severity) for r in rows),
        entries_affected=max(counted) if counted else None,
        first_seen_ms=min(r.first_seen_ms for r in rows),
        pulsar_topic=topics[0] if topics else None,
        findings=tuple(sorted(rows, key=_finding_rank)),
    )


def _ledger_rank(ledger: LedgerFindings) -> tuple[int, bool, int, int, int]:
    """Worst severity, then data loss, then most entries affected, then oldest first seen (then ledger id)."""
    entries = ledger.entries_affected if ledger.entries_affected is not None else -1
    return (-ledger.worst_severity.rank, not ledger.data_loss, -entries, ledger.first_seen_ms, ledger.ledger_id)


def _warnings(figures: Figures) -> tuple[str, ...]:
    incomplete = () if figures.interrupted is None else (f"incomplete: {figures.interrupted}",)
    return incomplete + _checker_warnings(figures)


def _checker_warnings(figures: Figures) -> tuple[str, ...]:
    checker = figures.checker
    if checker is None:
        return ()
    if checker.last_batch_ms is None:
        return ("no checker batch recorded yet: the checker has not run, or not finished a batch",)
    rejected: tuple[str, ...] = ()
    if checker.rejected_events:
        rejected = (
            f"{checker.rejected_events} record(s) of the topic could not be used and were skipped"
            " (table rejected_events)",
        )
    idle_ms = stalled_for_ms(figures)
    if idle_ms is None:
        return rejected
    return (f"no batch for {format_duration_ms(idle_ms)}: the streaming checker looks stalled", *rejected)


def stalled_for_ms(figures: Figures) -> int | None:
    """How long the streaming checker has written no batch, when that is at least its ``stall_after_ms``; else None.

    Only a last batch of the ``stream`` source can look stalled (a scan writes one batch and stops).
    """
    checker = figures.checker
    if checker is None or checker.last_batch_ms is None or figures.now_ms is None:
        return None
    if checker.last_batch_source != "stream":
        return None
    idle_ms = figures.now_ms - checker.last_batch_ms
    return idle_ms if idle_ms >= checker.stall_after_ms else None


def exit_code(summary: HealthSummary) -> int:
    """0 when healthy, 1 when some open violation is at or above the threshold, 2 when interrupted."""
    if summary.figures.interrupted is not None:
        return EXIT_INTERRUPTED
    return 0 if summary.healthy else 1


# ----------------------------------------------------------------------------------------------- text layout


def render(summary: HealthSummary) -> str:
    """The summary for people, aligned like fsck's; the last line is exactly ``Status: <status>``."""
    sections = [
        _overview_lines(summary),
        category_table(summary),
        _cluster_lines(summary),
        _worst_lines(summary),
        [f"WARNING: {_one_line(text)}" for text in summary.warnings],
    ]
    lines: list[str] = []
    for section in sections:
        if section:
            lines.extend([*section, ""])
    lines.append(f"Status: {summary.status}")
    return "\n".join(lines)


def field_line(label: str, value: str) -> str:
    """One ``label: value`` line of the summary's aligned block (values in one column, at least a space apart)."""
    return f" {label + ':':<27} {value}"


def _overview_lines(summary: HealthSummary) -> list[str]:
    figures = summary.figures
    lines = [f"Scrutiny health summary (fail on: {summary.fail_on.value} and worse)"]
    if figures.ledgers_checked is not None:
        lines.append(field_line("Ledgers checked", str(figures.ledgers_checked)))
    lines.append(field_line("Ledgers with violations", str(summary.ledgers_affected)))
    lines.append(field_line("Ledgers with data loss", str(summary.data_loss_ledgers)))
    lines.append(field_line("Open violations", str(summary.open_violations)))
    lines.extend(field_line(f"  {severity.value}", str(n)) for severity, n in summary.by_severity.items())
    lines.extend(_checker_lines(figures))
    if figures.seconds_taken is not None:
        lines.append(field_line("Time taken", f"{figures.seconds_taken:.3f} s"))
    return lines


def _checker_lines(figures: Figures) -> list[str]:
    checker = figures.checker
    if checker is None:
        return []
    if checker.last_batch_ms is None:
        return [field_line("Last batch", "none")]
    when = format_utc_ms(checker.last_batch_ms)
    if figures.now_ms is not None:
        when += f" ({format_duration_ms(figures.now_ms - checker.last_batch_ms)} ago)"
    lines = [field_line("Last batch", f"{checker.last_batch_id} of {checker.last_batch_source}, finished {when}")]
    lag = "unknown" if checker.lag_records is None else f"{checker.lag_records} records"
    lines.append(field_line("Lag", lag))
    lines.append(field_line(f"Batches, last {RECENT_WINDOW_MS // 60_000} min", str(checker.batches_recent)))
    if checker.rejected_events:
        last = "" if checker.last_rejected_ms is None else f", last {format_utc_ms(checker.last_rejected_ms)}"
        lines.append(field_line("Rejected records", f"{checker.rejected_events}{last}"))
    return lines


def category_table(summary: HealthSummary) -> list[str]:
    """The open violations per category and severity as aligned lines (none when there are none)."""
    if not summary.counts:
        return []
    categories = sorted({c for c, _ in summary.counts}, key=lambda c: _category_order(summary, c))
    width = max(len(c.value) for c in categories) + 2
    header = f" {'category':<{width}}" + "".join(f"{s.value:>10}" for s in _SEVERITIES_WORST_FIRST) + f"{'total':>8}"
    lines = ["Open violations by category:", header]
    for category in categories:
        cells = [summary.counts.get((category, s), 0) for s in _SEVERITIES_WORST_FIRST]
        lines.append(f" {category.value:<{width}}" + "".join(f"{n:>10}" for n in cells) + f"{sum(cells):>8}")
    return lines


def _category_order(summary: HealthSummary, category: Category) -> tuple[int, bool, str]:
    worst = max(s.rank for c, s in summary.counts if c is category)
    return (-worst, category not in DATA_LOSS_CATEGORIES, category.value)


def _cluster_lines(summary: HealthSummary) -> list[str]:
    if not summary.cluster:
        return []
    width = max(len(f.category.value) for f in summary.cluster)
    lines = ["Cluster findings:"]
    for finding in summary.cluster:
        label = f"{finding.category.value:<{width}}  {finding.severity.value:<8}"
        lines.append(f" {label}  {_where(finding)}, first seen {format_utc_ms(finding.first_seen_ms)}".rstrip())
    return lines


def _worst_lines(summary: HealthSummary) -> list[str]:
    if not summary.worst:
        return []
    lines = [f"Worst ledgers ({len(summary.worst)} of {summary.ledgers_affected}):"]
    category_width = max(len(f.category.value) for ledger in summary.worst for f in ledger.findings)
    for position, ledger in enumerate(summary.worst, start=1):
        lines.append(f" {position}. {_ledger_headline(ledger)}")
        for finding in ledger.findings:
            label = f"{finding.category.value:<{category_width}}  {finding.severity.value:<8}"
            lines.append(f"      {label}  {_where(finding)}".rstrip())
    return lines


def _ledger_headline(ledger: LedgerFindings) -> str:
    parts = [f"ledger {ledger.ledger_id}", ledger.worst_severity.value]
    if ledger.data_loss:
        parts.append("DATA LOSS")
    if ledger.entries_affected is not None:
        parts.append(f"{ledger.entries_affected} entries")
    parts.append(f"first seen {format_utc_ms(ledger.first_seen_ms)}")
    if ledger.pulsar_topic:
        parts.append(f"topic {_one_line(ledger.pulsar_topic)}")
    return ", ".join(parts)


def _where(finding: OpenViolation) -> str:
    parts = []
    if finding.bookie is not None:
        parts.append(f"bookie {_one_line(finding.bookie)}")
    if finding.segment_first_entry is not None:
        parts.append(f"segment {finding.segment_first_entry}")
    if finding.entry_count is not None:
        parts.append(f"{finding.entry_count} entries")
    text = ", ".join(parts)
    if finding.details:
        details = _one_line(finding.details)
        if len(details) > _DETAILS_WIDTH:
            details = details[: _DETAILS_WIDTH - 3] + "..."
        text = f"{text}: {details}" if text else details
    return text


def _one_line(text: str) -> str:
    """Whitespace (newlines included) collapsed, so no value can break the layout or fake the status line."""
    return " ".join(text.split())


# ----------------------------------------------------------------------------------------------- JSON contract


def as_json_dict(summary: HealthSummary) -> dict[str, object]:
    """The summary as the JSON document of docs/report.md (times as RFC 3339 UTC text)."""
    figures = summary.figures
    by_category: dict[str, dict[str, int]] = {}
    for (category, severity), count in summary.counts.items():
        by_category.setdefault(category.value, {s.value: 0 for s in _SEVERITIES_WORST_FIRST})[severity.value] = count
    return {
        "status": summary.status,
        "fail_on": summary.fail_on.value,
        "ledgers_checked": figures.ledgers_checked,
        "ledgers_affected": summary.ledgers_affected,
        "data_loss_ledgers": summary.data_loss_ledgers,
        "open_violations": summary.open_violations,
        "by_severity": {s.value: n for s, n in summary.by_severity.items()},
        "by_category": by_category,
        "worst_ledgers": [_ledger_json(ledger) for ledger in summary.worst],
        "cluster_findings": [_finding_json(f) for f in summary.cluster],
        "checker": _checker_json(figures),
        "seconds_taken": figures.seconds_taken,
        "generated_at": None if figures.now_ms is None else format_utc_ms(figures.now_ms),
        "warnings": list(summary.warnings),
    }


def _ledger_json(ledger: LedgerFindings) -> dict[str, object]:
    return {
        "ledger_id": ledger.ledger_id,
        "worst_severity": ledger.worst_severity.value,
        "data_loss": ledger.data_loss,
        "entries_affected": ledger.entries_affected,
        "first_seen": format_utc_ms(ledger.first_seen_ms),
        "pulsar_topic": ledger.pulsar_topic,
        "findings": [_finding_json(f) for f in ledger.findings],
    }


def _finding_json(finding: OpenViolation) -> dict[str, object]:
    return {
        "category": finding.category.value,
        "severity": finding.severity.value,
        "bookie": finding.bookie,
        "segment_first_entry": finding.segment_first_entry,
        "entry_count": finding.entry_count,
        "first_seen": format_utc_ms(finding.first_seen_ms),
        "details": finding.details,
    }


def _checker_json(figures: Figures) -> dict[str, object] | None:
    checker = figures.checker
    if checker is None:
        return None
    last = checker.last_batch_ms
    return {
        "last_batch_id": checker.last_batch_id,
        "last_batch_source": checker.last_batch_source,
        "last_batch_at": None if last is None else format_utc_ms(last),
        "last_batch_age_seconds": None if last is None or figures.now_ms is None else (figures.now_ms - last) / 1000,
        "lag_records": checker.lag_records,
        "batches_last_10_minutes": checker.batches_recent,
        "stalled": stalled_for_ms(figures) is not None,
        "rejected_events": checker.rejected_events,
    }
