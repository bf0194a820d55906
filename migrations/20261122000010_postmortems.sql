-- One postmortem per incident, written by the postmortem job when the incident is resolved. Not
-- a projection (it is a job's product), so it has no foreign key that an incidents replay
-- (TRUNCATE ... CASCADE) would follow.
CREATE TABLE postmortems
(
    incident_id  uuid PRIMARY KEY,
    user_id      varchar(255) NOT NULL,
    title        text         NOT NULL,
    content      text         NOT NULL,
    generated_at timestamptz  NOT NULL DEFAULT now()
);
CREATE INDEX postmortems_by_user ON postmortems (user_id, generated_at DESC);
