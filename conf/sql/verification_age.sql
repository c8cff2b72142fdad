-- verification_age: how long ago was each ledger last verified (the streaming checker's latest count, by class)?
-- The newest rows of verification_ages at or before `now`: one per class (the four quarters of
--   checker.reverify_interval, then "late" within checker.check_overdue_grace_seconds, then "overdue"), in order.
-- Columns: age_class, age_from_seconds, age_to_seconds (null: no upper bound), ledgers, overdue,
--   oldest_verification (the oldest last verification counted; null when none), measured_at.
WITH latest AS (
    SELECT "at", batch_id FROM verification_ages
    WHERE "at" <= getvariable('now')
    ORDER BY "at" DESC, batch_id DESC
    LIMIT 1
)
SELECT
    v.age_class,
    v.age_from_seconds,
    v.age_to_seconds,
    v.ledgers,
    v.overdue,
    v.oldest_verification,
    v."at" AS measured_at
FROM verification_ages v
JOIN latest ON v."at" = latest."at" AND v.batch_id = latest.batch_id
ORDER BY v.age_from_seconds
