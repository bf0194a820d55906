-- Credentials of the embedded secrets store (used when no Vault is configured).
-- ciphertext = AES-256-GCM(key, nonce, plaintext JSON, associated data = name).
CREATE TABLE IF NOT EXISTS embedded_secrets (
    name       text PRIMARY KEY,
    nonce      bytea NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext bytea NOT NULL,
    key_id     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
