-- under_replication_age: which ledgers are stuck under-replicated, and for how long?
-- Open UNDER_REPLICATION_STUCK violations; the age counts from Scrutiny's first detection (the under-replication
--   mark itself is older, by at least the stuck threshold).
-- Columns: ledger_id, bookie, pulsar_topic, first_seen, last_seen,
--   age_hours (hours from first_seen to the `now` parameter, 2 decimals), details.
-- Order: oldest first.
SELECT
    ledger_id,
    bookie,
    pulsar_topic,
    first_seen,
    last_seen,
    round(epoch(getvariable('now') - first_seen) / 3600.0, 2) AS age_hours,
    details
FROM open_violations
WHERE resolved_at IS NULL AND category = 'UNDER_REPLICATION_STUCK'
ORDER BY first_seen, ledger_id, bookie NULLS FIRST
