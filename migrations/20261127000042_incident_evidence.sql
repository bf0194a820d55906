-- What an incident's alerts name (correlation by shared entities and mentioned services): the keys
-- of each alert's evidence (`kind=value` for a specific entity, `t:term` for a term of its text),
-- folded in by the incidents projection as alerts join. Incidents projected before this are
-- rebuilt with theirs by `vigil replay --projection incidents` (events recorded before keep none).
ALTER TABLE incidents ADD COLUMN evidence text[] NOT NULL DEFAULT '{}';

-- The changes (deployments) of a user in a time window: an incident's linked changes.
CREATE INDEX source_alerts_deployments_by_time ON source_alerts (user_id, fired_at) WHERE kind = 'deployment';
