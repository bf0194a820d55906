-- How far an online rebuild (`vigil replay --online`) has come, per projection: written by the
-- rebuild every second and deleted when it ends, read by every instance's /metrics (a row not
-- written for a while is a rebuild that died, and is not reported).
CREATE TABLE projection_rebuilds
(
    projection   text PRIMARY KEY,
    events_done  bigint      NOT NULL,
    events_total bigint      NOT NULL,
    updated_at   timestamptz NOT NULL
);
