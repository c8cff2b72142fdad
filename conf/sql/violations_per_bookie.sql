-- violations_per_bookie: how many open violations name each bookie?
-- Ledger-level violations (no bookie) are not counted.
-- Columns: bookie, open_count, ledgers (distinct; a cluster-level finding, ledger_id -1, is of no ledger), critical,
--   warning, info (open_count by severity),
--   entries (sum of entry_count), oldest_first_seen.
-- Order: most critical first, then the largest open_count, then bookie.
SELECT
    bookie,
    count(*) AS open_count,
    count(DISTINCT ledger_id) FILTER (WHERE ledger_id >= 0) AS ledgers,
    count(*) FILTER (WHERE severity = 'critical') AS critical,
    count(*) FILTER (WHERE severity = 'warning') AS warning,
    count(*) FILTER (WHERE severity = 'info') AS info,
    coalesce(sum(entry_count), 0) AS entries,
    min(first_seen) AS oldest_first_seen
FROM open_violations
WHERE resolved_at IS NULL AND bookie IS NOT NULL
GROUP BY bookie
ORDER BY critical DESC, open_count DESC, bookie
