-- detection_latency: how long after a ledger's close did its verdict come, over the last `hours` hours?
-- Percentiles of ledger_checks.latency_ms over the checks with checked_at in (now - hours, now]; checks without a
--   latency (open ledgers) are left out.
-- Columns: window_hours, checks (with a latency), p50_ms, p90_ms, p99_ms (discrete percentiles: values that
--   occurred), max_ms; the figures are null when there is no such check.
-- @param hours DOUBLE 24  the window, in hours
SELECT
    getvariable('hours') AS window_hours,
    count(latency_ms) AS checks,
    quantile_disc(latency_ms, 0.5) AS p50_ms,
    quantile_disc(latency_ms, 0.9) AS p90_ms,
    quantile_disc(latency_ms, 0.99) AS p99_ms,
    max(latency_ms) AS max_ms
FROM ledger_checks
WHERE latency_ms IS NOT NULL
  AND checked_at <= getvariable('now')
  AND checked_at > getvariable('now') - to_microseconds(CAST(getvariable('hours') * 3600e6 AS BIGINT))
