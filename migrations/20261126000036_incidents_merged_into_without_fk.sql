-- incidents is a read table rebuilt from the events; the projection applies each incident's
-- events in turn, so replaying an incident merged into one opened after it writes the link
-- before its target's row exists. The Incident aggregate already refuses a merge into an
-- incident that does not exist; the read side need not (and cannot, in that order) re-check it.
ALTER TABLE incidents DROP CONSTRAINT incidents_merged_into_incident_id_fkey;
