-- The alerts that joined an incident are read from its own events (AlertCorrelated,
-- IncidentAbsorbed: `correlated_alerts` in projections/src/incidents/queries.rs), which the
-- event store's primary key finds at once; an incident holds a bounded number of them. The
-- table cost ingestion a row, two index entries and ~1 KB of WAL for every correlated alert.
DROP TABLE correlated_alerts;
