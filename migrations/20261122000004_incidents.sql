-- Every alert notification received, deduplicated: a redelivery (same source, key, state and
-- fired-at time) is the same row. `id` is the incident's `source_alert_id`.
CREATE TABLE source_alerts
(
    id            bigserial PRIMARY KEY,
    user_id       varchar(255) NOT NULL,
    source_type   varchar(20)  NOT NULL,
    alert_key     text         NOT NULL,
    group_key     text         NOT NULL,
    alert_state   varchar(50)  NOT NULL,
    resolved      boolean      NOT NULL,
    kind          varchar(20)  NOT NULL,
    -- The spec's source_a record columns (filled for every source where the payload has them).
    alert_uid     text,
    alert_title   text         NOT NULL,
    rule_name     text,
    rule_url      text,
    dashboard_url text,
    panel_url     text,
    alert_service text,
    alert_environment text,
    alert_severity varchar(20),
    fired_at      timestamptz  NOT NULL,
    payload       jsonb        NOT NULL,
    received_at   timestamptz  NOT NULL DEFAULT now(),
    created_at    timestamptz  NOT NULL DEFAULT now(),
    -- Where ingestion put it.
    incident_id   uuid,
    correlated    boolean      NOT NULL DEFAULT false,
    CONSTRAINT source_alerts_delivery UNIQUE (user_id, source_type, alert_key, alert_state, fired_at)
);
CREATE INDEX source_alerts_group ON source_alerts (user_id, source_type, group_key, id DESC);

-- Read model of the Incident aggregate.
CREATE TABLE incidents
(
    id                       uuid PRIMARY KEY,
    user_id                  varchar(255) NOT NULL,
    source_type              varchar(20)  NOT NULL,
    source_alert_id          bigint       NOT NULL,
    status                   varchar(20)  NOT NULL DEFAULT 'investigating',
    severity                 varchar(20),
    alert_title              text,
    alert_service            text,
    alert_environment        text,
    alert_source_url         text,
    alert_metadata           jsonb        NOT NULL DEFAULT '{}',
    aurora_status            varchar(20)  NOT NULL DEFAULT 'idle',
    aurora_summary           text,
    aurora_chat_session_id   uuid,
    rca_task_id              varchar(255),
    started_at               timestamptz  NOT NULL,
    last_alert_at            timestamptz  NOT NULL,
    analyzed_at              timestamptz,
    slack_message_ts         varchar(50),
    active_tab               varchar(10)  NOT NULL DEFAULT 'thoughts',
    created_at               timestamptz  NOT NULL,
    updated_at               timestamptz  NOT NULL,
    merged_into_incident_id  uuid REFERENCES incidents (id) ON DELETE SET NULL,
    correlated_alert_count   integer      NOT NULL DEFAULT 0,
    affected_services        text[]       NOT NULL DEFAULT '{}',
    version                  bigint       NOT NULL,
    CONSTRAINT incidents_source_alert UNIQUE (source_type, source_alert_id, user_id)
);
CREATE INDEX incidents_user_started ON incidents (user_id, started_at DESC);
CREATE INDEX incidents_open_recent ON incidents (user_id, last_alert_at DESC) WHERE status = 'investigating';

CREATE TABLE correlated_alerts
(
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id              varchar(1000) NOT NULL,
    incident_id          uuid          NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    source_type          varchar(20)   NOT NULL,
    source_alert_id      bigint        NOT NULL,
    alert_title          text,
    alert_service        text,
    alert_severity       varchar(20),
    correlation_strategy text          NOT NULL,
    correlation_score    double precision NOT NULL CHECK (correlation_score BETWEEN 0 AND 1),
    correlation_details  jsonb         NOT NULL DEFAULT '{}',
    alert_metadata       jsonb         NOT NULL DEFAULT '{}',
    fired_at             timestamptz,
    received_at          timestamptz   NOT NULL DEFAULT now(),
    CONSTRAINT correlated_alerts_once UNIQUE (incident_id, source_type, source_alert_id)
);

-- Products of the analysis (written by root cause analysis).
CREATE TABLE incident_thoughts
(
    id           bigserial PRIMARY KEY,
    incident_id  uuid        NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    timestamp    timestamptz NOT NULL,
    content      text        NOT NULL,
    thought_type varchar(20),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX incident_thoughts_incident ON incident_thoughts (incident_id, timestamp, id);

CREATE TABLE incident_suggestions
(
    id                  bigserial PRIMARY KEY,
    incident_id         uuid        NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    title               text        NOT NULL,
    description         text,
    type                varchar(20),
    risk                varchar(20),
    command             text,
    file_path           text,
    original_content    text,
    suggested_content   text,
    user_edited_content text,
    repository          text,
    pr_url              text,
    pr_number           integer,
    created_branch      text,
    applied_at          timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX incident_suggestions_incident ON incident_suggestions (incident_id, id);

CREATE TABLE incident_citations
(
    id           bigserial PRIMARY KEY,
    incident_id  uuid        NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    citation_key varchar(10) NOT NULL,
    tool_name    varchar(255),
    command      text,
    output       text        NOT NULL,
    executed_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT incident_citations_key UNIQUE (incident_id, citation_key)
);

-- The default vector store: embeddings kept in PostgreSQL, compared in process.
CREATE TABLE embeddings
(
    owner_kind varchar(20) NOT NULL,
    owner_id   text        NOT NULL,
    user_id    varchar(255) NOT NULL,
    content    text        NOT NULL,
    vector     real[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_kind, owner_id)
);
CREATE INDEX embeddings_user ON embeddings (user_id, owner_kind);

-- Per-user tokens for tools that cannot set headers; only a SHA-256 digest is kept.
CREATE TABLE ingestion_tokens
(
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      varchar(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         varchar(255) NOT NULL,
    token_sha256 bytea        NOT NULL UNIQUE,
    token_prefix varchar(16)  NOT NULL,
    created_at   timestamptz  NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX ingestion_tokens_user ON ingestion_tokens (user_id);
