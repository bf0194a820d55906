-- The incident list orders by `started_at DESC, id`. With only `(user_id, started_at DESC)` the
-- order needs a sort, and a plan made while the table was young sorted every incident of the
-- user for the 100 it returns (kept as the table grew). With the id in the index the list is the
-- first 100 entries of the user's range, whatever the statistics say.
DROP INDEX incidents_user_started;
CREATE INDEX incidents_user_started ON incidents (user_id, started_at DESC, id);
