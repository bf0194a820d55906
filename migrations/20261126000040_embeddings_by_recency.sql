-- A nearest-neighbour search compares a user's most recent entries only (`NEAREST_AMONG`): this
-- index reads them in that order, where the user's index read all of them and sorted.
CREATE INDEX embeddings_user_recent ON embeddings (user_id, owner_kind, created_at DESC);
DROP INDEX embeddings_user;
