-- Jobs take turns by tenant: a claim prefers the waiting job of the tenant with the fewest jobs
-- running and, among those, the one served least recently, where it took the oldest job of all.
-- One user's backlog (an alert storm opens thousands of incidents, each an analysis) no longer
-- delays every other user's jobs until it drains.
--
-- A job's tenant is the user its payload names (`user_id`); jobs that name none share the
-- tenant ''.
ALTER TABLE jobs ADD COLUMN tenant text GENERATED ALWAYS AS (COALESCE(payload ->> 'user_id', '')) STORED;

-- The tenants with waiting jobs (a skip scan reads one entry per tenant) and each one's oldest.
CREATE INDEX jobs_waiting_by_tenant ON jobs (tenant, run_at, id) WHERE state IN ('available', 'retryable');
-- How many jobs each tenant has running.
CREATE INDEX jobs_running_by_tenant ON jobs (tenant) WHERE state = 'running';

-- When each tenant last had a job claimed (the turn order among tenants with as many running).
CREATE TABLE job_tenants
(
    tenant          text PRIMARY KEY,
    last_claimed_at timestamptz NOT NULL
);
