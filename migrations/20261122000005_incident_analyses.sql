-- Version of each IncidentAnalysis stream that incident_thoughts, incident_citations and
-- incident_suggestions reflect.
CREATE TABLE incident_analyses
(
    incident_id uuid PRIMARY KEY,
    version     bigint NOT NULL
);
