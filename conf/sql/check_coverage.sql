-- check_coverage: what share of the closed ledgers was verified within the last `hours` hours?
-- A ledger is closed when its latest check (as of `now`) says ledger_state = 'CLOSED'; it is verified when it
--   has a conclusive check (verdict HEALTHY or VIOLATED) in (now - hours, now].
-- Columns: window_hours, closed_ledgers, verified_ledgers, unverified_ledgers,
--   coverage (verified / closed, 0..1, 4 decimals; null when there is no closed ledger), oldest_verification
--   (the earliest latest-conclusive-check time among closed ledgers; null when none was ever verified).
-- @param hours DOUBLE 24  the window, in hours
WITH checks AS (
    SELECT * FROM ledger_checks WHERE checked_at <= getvariable('now')
),
per_ledger AS (
    SELECT
        ledger_id,
        arg_max_null(ledger_state, checked_at) AS state,
        max(checked_at) FILTER (WHERE verdict IN ('HEALTHY', 'VIOLATED')) AS last_verified
    FROM checks
    GROUP BY ledger_id
),
closed AS (
    SELECT
        *,
        coalesce(last_verified > getvariable('now') - to_microseconds(CAST(getvariable('hours') * 3600e6 AS BIGINT)),
                 false) AS verified
    FROM per_ledger
    WHERE state = 'CLOSED'
)
SELECT
    getvariable('hours') AS window_hours,
    count(*) AS closed_ledgers,
    count(*) FILTER (WHERE verified) AS verified_ledgers,
    count(*) FILTER (WHERE NOT verified) AS unverified_ledgers,
    round(count(*) FILTER (WHERE verified) / nullif(count(*), 0), 4) AS coverage,
    min(last_verified) AS oldest_verification
FROM closed
