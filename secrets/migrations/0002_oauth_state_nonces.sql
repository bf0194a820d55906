-- Nonces of OAuth `state` values already used; a second insert of the same nonce is a replay.
-- Rows whose state has expired can be purged: an expired state fails verification anyway.
CREATE TABLE IF NOT EXISTS oauth_state_nonces (
    nonce      text PRIMARY KEY,
    used_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS oauth_state_nonces_expires_at ON oauth_state_nonces (expires_at);
