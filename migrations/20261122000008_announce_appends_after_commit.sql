-- Appends are announced by the writers after they commit (vigil_projections::announce_appends):
-- a NOTIFY inside the appending transaction makes PostgreSQL commit those transactions one at a
-- time, holding a global lock across each WAL flush, which serialized every writer.
DROP TRIGGER events_appended ON events;
DROP FUNCTION notify_events_appended();
