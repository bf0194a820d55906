-- An incident that holds the most correlated alerts allowed stays `investigating` but takes no
-- more: its correlated alert says so (`filled`), and the open-incident index leaves it out, so
-- that placement does not fetch every full incident of an alert storm on each batch.
ALTER TABLE incidents ADD COLUMN takes_alerts boolean NOT NULL DEFAULT true;
DROP INDEX incidents_open_recent;
CREATE INDEX incidents_open_recent ON incidents (user_id, last_alert_at DESC)
    WHERE status = 'investigating' AND takes_alerts;
