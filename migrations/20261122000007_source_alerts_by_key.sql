-- Placement asks, for each new alert, for the newest earlier alert with the same key; without
-- this index that lookup walks the primary key backwards through every alert ever received.
CREATE INDEX source_alerts_key ON source_alerts (user_id, source_type, alert_key, id DESC);
