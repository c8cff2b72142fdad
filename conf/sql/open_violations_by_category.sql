-- open_violations_by_category: how many violations are open right now, per category and severity?
-- Columns: category, severity, open_count (open violation rows), ledgers (distinct ledgers among them; a
--   cluster-level finding such as BOOKIE_LOST, ledger_id -1, is of no ledger),
--   oldest_first_seen (earliest first detection among them).
-- Order: most severe first, then the largest open_count, then category.
-- @param min_severity VARCHAR info  only severities at least this one (info, warning or critical)
SELECT
    category,
    severity,
    count(*) AS open_count,
    count(DISTINCT ledger_id) FILTER (WHERE ledger_id >= 0) AS ledgers,
    min(first_seen) AS oldest_first_seen
FROM open_violations
WHERE resolved_at IS NULL
  AND (CASE severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END)
      >= (CASE lower(getvariable('min_severity')) WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END)
GROUP BY category, severity
ORDER BY (CASE severity WHEN 'critical' THEN 2 WHEN 'warning' THEN 1 ELSE 0 END) DESC, open_count DESC, category
