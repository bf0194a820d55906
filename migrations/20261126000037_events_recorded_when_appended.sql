-- `now()` is when the appending transaction began. A writer that began before another's append
-- of the same stream and appended after it (it waited for the aggregate, or retried on the
-- conflict) then recorded an earlier time for a later event, and `?as_of=` folded a history no
-- one ever saw. Appends of one stream are serialized, so the clock read at the append itself
-- grows along the sequence.
ALTER TABLE events ALTER COLUMN recorded_at SET DEFAULT clock_timestamp();
