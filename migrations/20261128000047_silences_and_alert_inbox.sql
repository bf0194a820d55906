-- Silences and maintenance windows (issue 30), projected from the Silence aggregate. A silence
-- never changes once created; it is only expired, which keeps it in history. `ends_at` is null
-- for a weekly window that recurs until expired; ingestion keeps each user's silences that may
-- apply (not expired, not ended) compiled in memory.
CREATE TABLE silences
(
    id          uuid PRIMARY KEY,
    user_id     varchar(255) NOT NULL,
    definition  jsonb        NOT NULL,
    created_by  varchar(255) NOT NULL,
    created_at  timestamptz  NOT NULL,
    starts_at   timestamptz  NOT NULL,
    ends_at     timestamptz,
    expired_at  timestamptz,
    expired_by  varchar(255),
    version     bigint       NOT NULL
);
CREATE INDEX silences_by_user ON silences (user_id, created_at DESC, id DESC);
CREATE INDEX silences_in_force ON silences (user_id) WHERE expired_at IS NULL;

-- How many times each user's silences changed (created or expired), also projected: placement
-- reads this one number per user with every batch and reads the silences themselves only when it
-- moved, so that 100 silences cost a batch no more than none.
CREATE TABLE silence_generations
(
    user_id    varchar(255) PRIMARY KEY,
    generation bigint       NOT NULL
);

-- The alert inbox: every alert received, with what became of it, newest first. Projected from
-- the incidents' events (opened, joined, resolved) and the received alerts' own events
-- (silenced, unmatched, updated, deduplicated); `id` is the delivery's id (`source_alerts.id`,
-- the incidents' `sourceAlertId`), or a redelivery's own. `recorded_by` says which of the two
-- wrote the row: an incident's event wins over a received alert's (a recovery recorded
-- unmatched, then resolving an incident when delivered again), whichever is applied first.
CREATE TABLE alert_inbox
(
    id          bigint       NOT NULL,
    recorded_by varchar(10)  NOT NULL,
    user_id     varchar(255) NOT NULL,
    source_type varchar(20)  NOT NULL,
    title       text         NOT NULL,
    service     text,
    severity    varchar(20),
    fired_at    timestamptz  NOT NULL,
    received_at timestamptz  NOT NULL,
    fate        varchar(20)  NOT NULL,
    incident_id uuid,
    score       double precision,
    silence_ids uuid[],
    redelivery_of bigint,
    -- Ids are unique on their own (one sequence); keyed by user first, the one index serves the
    -- pages of a user's inbox too, and each alert placed writes one index entry, not two.
    PRIMARY KEY (user_id, id)
);
