-- A new firing of an alert whose incident is resolved or merged opens a new incident, linked to
-- the earlier one (`IncidentOpened.previous_incident_id`). No foreign key, as for
-- `merged_into_incident_id`: the projection may apply the events of the two in any order.
ALTER TABLE incidents ADD COLUMN previous_incident_id uuid;
