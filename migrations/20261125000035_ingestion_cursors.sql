-- Placement decides a batch from one read and writes it in one statement, without a transaction
-- or locks around the two (two round trips where there were five). What makes that safe across
-- instances is this counter: each user's moves by one with every batch that places alerts of the
-- user, and a batch's write requires it to be where the batch's read found it. A batch another
-- writer overtook writes nothing and is placed again (`placement_conflict`).
CREATE TABLE ingestion_cursors
(
    user_id varchar(255) PRIMARY KEY,
    placed  bigint       NOT NULL
);

-- Aborts the statement that calls it, and with it every write the statement made, as a
-- serialization failure; placement reads one as "another writer got there first".
CREATE FUNCTION placement_conflict(reason text) RETURNS boolean
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = reason;
END
$$;
