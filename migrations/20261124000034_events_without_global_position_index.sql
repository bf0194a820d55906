-- Every read by position goes through the tail indexes (type, transaction, position), and the
-- projection fetches the events its read rows miss by the primary key: the unique index on
-- `global_position` only cost every appended event an index entry. The bigserial still numbers
-- the events (one sequence, so no two share a position).
ALTER TABLE events DROP CONSTRAINT events_global_position_key;
