-- Token records (spec: Token record): one per user and provider. Credentials live in the
-- secrets store; a row keeps only the reference to them (`secret_ref`) and what is not secret.
CREATE TABLE user_tokens
(
    id                integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id           varchar(255) NOT NULL,
    provider          varchar(50)  NOT NULL,
    -- Non-secret details of the connection (role ARN, network name, project, public SSH key...).
    token_data        jsonb,
    secret_ref        varchar(512),
    tenant_id         varchar(255),
    client_id         varchar(255),
    -- In the spec's record; secrets never go into plain columns, so it stays empty.
    client_secret     varchar(255) CHECK (client_secret IS NULL),
    subscription_name varchar(255),
    subscription_id   varchar(255),
    email             varchar(255),
    "timestamp"       timestamptz  NOT NULL DEFAULT now(),
    last_activity     timestamptz  NOT NULL DEFAULT now(),
    session_data      jsonb,
    is_active         boolean      NOT NULL DEFAULT true,
    CONSTRAINT user_tokens_user_provider UNIQUE (user_id, provider)
);
