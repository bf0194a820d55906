-- An X-User-ID is honoured without a registered account (the gateway owns the user directory), so a token's owner need not be a row of users.
ALTER TABLE ingestion_tokens DROP CONSTRAINT ingestion_tokens_user_id_fkey;
