-- A merged incident takes no more alerts, whatever status it is PATCHed to afterwards (its alerts
-- are its target's): the projection clears `takes_alerts` when it applies the merge, and the
-- aggregate refuses such a correlation. Rows merged before that are cleared here, so placement
-- never offers one as a candidate that the aggregate would refuse.
UPDATE incidents SET takes_alerts = false WHERE merged_into_incident_id IS NOT NULL AND takes_alerts;
