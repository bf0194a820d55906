-- The cqrs-es / postgres-es event store. postgres-es names the columns of its INSERT, so the two
-- extra columns are filled by defaults: `global_position` orders every event of every aggregate
-- for the projection tail and replay; `recorded_at` is when the store accepted it.
CREATE TABLE events
(
    aggregate_type  text                         NOT NULL,
    aggregate_id    text                         NOT NULL,
    sequence        bigint CHECK (sequence >= 0) NOT NULL,
    event_type      text                         NOT NULL,
    event_version   text                         NOT NULL,
    payload         json                         NOT NULL,
    metadata        json                         NOT NULL,
    global_position bigserial                    NOT NULL UNIQUE,
    recorded_at     timestamptz                  NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id, sequence)
);
