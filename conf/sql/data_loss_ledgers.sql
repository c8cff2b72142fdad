-- data_loss_ledgers: which ledgers have lost data right now?
-- Open critical NO_REPLICA, ENTRIES_BEYOND_LAST_ENTRY and METADATA_UNREADABLE violations (the data-loss findings
-- of docs/architecture.md), one row per open violation.
-- Columns: ledger_id, category, bookie (null for ledger-level findings), segment_first_entry (null when not
--   segment-specific), pulsar_topic, first_seen, last_seen, entries_affected (entries concerned at the last
--   detection), details.
-- Order: oldest first detection first, then ledger_id, category, bookie, segment_first_entry.
SELECT
    ledger_id,
    category,
    bookie,
    segment_first_entry,
    pulsar_topic,
    first_seen,
    last_seen,
    entry_count AS entries_affected,
    details
FROM open_violations
WHERE resolved_at IS NULL
  AND severity = 'critical'
  AND category IN ('NO_REPLICA', 'ENTRIES_BEYOND_LAST_ENTRY', 'METADATA_UNREADABLE')
ORDER BY first_seen, ledger_id, category, bookie NULLS FIRST, segment_first_entry NULLS FIRST
