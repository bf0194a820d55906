CREATE TABLE users
(
    id            varchar(255) PRIMARY KEY DEFAULT gen_random_uuid()::text,
    email         varchar(255) NOT NULL,
    password_hash varchar(255) NOT NULL,
    name          varchar(255),
    created_at    timestamptz  NOT NULL DEFAULT now(),
    updated_at    timestamptz  NOT NULL DEFAULT now()
);

-- E-mail addresses are unique regardless of case.
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

-- Login sessions behind the session cookie. Only a SHA-256 digest of the cookie's token is kept,
-- so a copy of this table cannot be replayed as cookies.
CREATE TABLE login_sessions
(
    token_sha256 bytea PRIMARY KEY,
    user_id      varchar(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz  NOT NULL DEFAULT now(),
    expires_at   timestamptz  NOT NULL
);

CREATE INDEX login_sessions_user_id ON login_sessions (user_id);
CREATE INDEX login_sessions_expires_at ON login_sessions (expires_at);
