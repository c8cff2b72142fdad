-- checker_health: is the checker running and keeping up?
-- One row, from the checker_runs rows of one source (`source` parameter) finished at or before `now`; no row when
--   there is none.
-- Columns: last_run_id, last_batch_id, last_batch_at (finished_at of the latest batch),
--   seconds_since_last_batch, last_duration_ms, last_lag_records (events behind the latest batch; null = unknown),
--   batches_per_minute (batches finished in the last 10 minutes / 10),
--   events_last_hour, checks_last_hour (ledgers checked), violations_last_hour (batches finished in the last hour).
-- @param source VARCHAR stream  which writer: stream (the streaming job) or scan
WITH runs AS (
    SELECT * FROM checker_runs WHERE source = getvariable('source') AND finished_at <= getvariable('now')
)
SELECT
    arg_max(run_id, (finished_at, batch_id)) AS last_run_id,
    arg_max(batch_id, (finished_at, batch_id)) AS last_batch_id,
    max(finished_at) AS last_batch_at,
    round(epoch(getvariable('now') - max(finished_at)), 3) AS seconds_since_last_batch,
    arg_max(duration_ms, (finished_at, batch_id)) AS last_duration_ms,
    arg_max_null(lag_records, (finished_at, batch_id)) AS last_lag_records,
    count(*) FILTER (WHERE finished_at > getvariable('now') - INTERVAL 10 MINUTE) / 10.0 AS batches_per_minute,
    coalesce(sum(events) FILTER (WHERE finished_at > getvariable('now') - INTERVAL 1 HOUR), 0) AS events_last_hour,
    coalesce(sum(ledgers_checked) FILTER (WHERE finished_at > getvariable('now') - INTERVAL 1 HOUR), 0)
        AS checks_last_hour,
    coalesce(sum(violations) FILTER (WHERE finished_at > getvariable('now') - INTERVAL 1 HOUR), 0)
        AS violations_last_hour
FROM runs
HAVING count(*) > 0
