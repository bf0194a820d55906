-- Durable job queue: root-cause-analysis runs, postmortems, chat answers, cloud setup tasks.
-- Workers claim rows with FOR UPDATE SKIP LOCKED and hold them under a lease (locked_until) that
-- they keep extending while the job runs; a job whose lease expired (its worker died) is claimed
-- again by another worker.
--
-- States: available -> running -> completed | retryable | discarded | cancelled
--         retryable -> running (once run_at has passed); available/retryable -> cancelled
--         completed/discarded/cancelled -> available only through an explicit requeue.
CREATE TABLE jobs
(
    id               bigserial PRIMARY KEY,
    kind             text        NOT NULL CHECK (kind <> ''),
    unique_key       text,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    state            text        NOT NULL DEFAULT 'available'
        CHECK (state IN ('available', 'running', 'retryable', 'completed', 'discarded', 'cancelled')),
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    run_at           timestamptz NOT NULL DEFAULT now(),
    -- The worker that claimed the job last; kept after the job ends, for diagnosis.
    locked_by        text,
    -- The lease: while it lies in the future no other worker may take the job.
    locked_until     timestamptz,
    heartbeat_at     timestamptz,
    last_error       text,
    -- One {"attempt": n, "at": timestamp, "error": text} per failed attempt, oldest first.
    errors           jsonb       NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(errors) = 'array'),
    -- Free-form progress of the current attempt, e.g. {"step": 3, "total_steps": 7}.
    progress         jsonb,
    result           jsonb,
    cancel_requested boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CONSTRAINT jobs_attempt_in_range CHECK (attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT jobs_running_holds_lease CHECK (state <> 'running' OR (locked_by IS NOT NULL AND locked_until IS NOT NULL)),
    CONSTRAINT jobs_finished_at_when_finished
        CHECK ((finished_at IS NOT NULL) = (state IN ('completed', 'discarded', 'cancelled')))
);

-- A unique key stays taken for the job's whole life, completion included: enqueueing the same
-- key again (e.g. a second RCA for one incident) returns the existing job, whether it is still
-- pending, running or already completed. Only a cancelled or discarded job frees its key for a
-- new job; a completed one runs again only when requeued explicitly.
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state NOT IN ('cancelled', 'discarded');

-- Lookups by key must also find cancelled and discarded jobs, which the unique index leaves out.
CREATE INDEX jobs_by_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL;

-- Claiming: due available/retryable jobs and running jobs whose lease may have expired.
CREATE INDEX jobs_claimable ON jobs (state, run_at, id) WHERE state IN ('available', 'retryable', 'running');

-- Wake listening workers as soon as a job can run (sent on commit, deduplicated per kind and
-- transaction). Jobs scheduled for later and retries after a backoff are found by polling.
CREATE FUNCTION jobs_notify_available() RETURNS trigger LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM pg_notify('jobs_available', NEW.kind);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_available
    AFTER INSERT OR UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.state IN ('available', 'retryable') AND NEW.run_at <= now())
EXECUTE FUNCTION jobs_notify_available();

-- Workers, for health checks: a worker is live while its heartbeat is recent. A worker that
-- stops cleanly deletes its row; a crashed one leaves a row whose heartbeat goes stale.
CREATE TABLE job_workers
(
    worker_id    text PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          bigint      NOT NULL,
    kinds        text[]      NOT NULL,
    concurrency  integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_workers_heartbeat ON job_workers (heartbeat_at);
