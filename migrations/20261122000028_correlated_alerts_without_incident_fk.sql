-- correlated_alerts is a read table the incident projection writes together with its incident's
-- row; the foreign key re-checked that per inserted row (a trigger, a query and a row lock on
-- the incident) on ingestion's hottest path. Replays truncate both tables together.
ALTER TABLE correlated_alerts DROP CONSTRAINT correlated_alerts_incident_id_fkey;
