-- The tables of the secrets crate (vigil-secrets), owned by the service's migrations from here
-- on. `IF NOT EXISTS` keeps them compatible with the crate's own `migrate()`, which the crate's
-- tests still use.

-- Credentials of the embedded secrets store (used when no Vault is configured).
-- ciphertext = AES-256-GCM(key, nonce, plaintext JSON, associated data = name).
CREATE TABLE IF NOT EXISTS embedded_secrets (
    name       text PRIMARY KEY,
    nonce      bytea NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext bytea NOT NULL,
    key_id     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Nonces of OAuth `state` values already used; a second insert of the same nonce is a replay.
CREATE TABLE IF NOT EXISTS oauth_state_nonces (
    nonce      text PRIMARY KEY,
    used_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS oauth_state_nonces_expires_at ON oauth_state_nonces (expires_at);
