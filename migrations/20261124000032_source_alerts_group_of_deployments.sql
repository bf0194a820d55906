-- An alert's group is its key (parsers/mod.rs, `NormalizedAlert::group_key`), so the key index
-- finds a recovery's alert; only deployments, whose group is their service and environment, need
-- an index by group. The full one cost every alert an index entry. Root cause analysis reads a
-- user's deployments through this one too.
DROP INDEX source_alerts_group;
CREATE INDEX source_alerts_deployment_group ON source_alerts (user_id, source_type, group_key, id DESC)
    WHERE kind = 'deployment';
