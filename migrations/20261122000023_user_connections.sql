-- Read model of the Connection aggregate (spec: Connection). One row per user, provider and
-- account; `id` is the aggregate id, `version` the last event sequence the row reflects.
CREATE TABLE user_connections
(
    id           text PRIMARY KEY,
    user_id      varchar(255) NOT NULL,
    provider     varchar(50)  NOT NULL,
    account_id   varchar(255) NOT NULL,
    account_name varchar(255),
    status       varchar(20)  NOT NULL CHECK (status IN ('connected', 'not_connected', 'pending', 'error')),
    created_at   timestamptz  NOT NULL,
    updated_at   timestamptz  NOT NULL,
    version      bigint       NOT NULL,
    CONSTRAINT user_connections_account UNIQUE (user_id, provider, account_id)
);
