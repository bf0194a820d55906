-- The projection tail reads events in (transaction_id, global_position) order and only those
-- written by transactions older than the oldest still open one (pg_snapshot_xmin), so no event
-- can later appear behind its checkpoint: a bigserial value alone may become visible after a
-- larger one, a transaction id below xmin never can.
ALTER TABLE events ADD COLUMN transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_tail_order ON events (transaction_id, global_position);

-- Wake tails (in every instance) as soon as events are committed.
CREATE FUNCTION notify_events_appended() RETURNS trigger LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM pg_notify('vigil_events', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER events_appended AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION notify_events_appended();

-- How far each event consumer (projection or reactor) has read.
CREATE TABLE event_consumer_checkpoints
(
    name            text PRIMARY KEY,
    transaction_id  xid8        NOT NULL DEFAULT '0',
    global_position bigint      NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Read model of the ChatSession aggregate; `version` is the last event sequence it reflects.
CREATE TABLE chat_sessions
(
    id            uuid PRIMARY KEY,
    user_id       varchar(1000) NOT NULL,
    title         varchar(255)  NOT NULL,
    messages      jsonb         NOT NULL DEFAULT '[]',
    ui_state      jsonb         NOT NULL DEFAULT '{}',
    status        varchar(20)   NOT NULL DEFAULT 'active',
    is_active     boolean       NOT NULL DEFAULT true,
    incident_id   uuid,
    message_count integer       NOT NULL DEFAULT 0,
    created_at    timestamptz   NOT NULL,
    updated_at    timestamptz   NOT NULL,
    version       bigint        NOT NULL
);
CREATE INDEX chat_sessions_user_recent ON chat_sessions (user_id, updated_at DESC) WHERE is_active;
CREATE INDEX chat_sessions_incident ON chat_sessions (incident_id) WHERE incident_id IS NOT NULL;
