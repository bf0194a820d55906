-- Service topology (issue 27): each user's declared catalog, projected from the Topology
-- aggregate (one stream per user, named by the user id), and what the incidents' events say of
-- edges between services, one row per observation so that an event read twice counts once and a
-- replay rebuilds the table row for row. Counts and confidences are worked out when read.
CREATE TABLE topology_catalogs
(
    user_id     varchar(255) PRIMARY KEY,
    catalog     jsonb        NOT NULL,
    version     bigint       NOT NULL,
    declared_at timestamptz  NOT NULL
);

CREATE TABLE topology_evidence
(
    user_id      varchar(255) NOT NULL,
    incident_id  uuid         NOT NULL,
    sequence     bigint       NOT NULL,
    from_service text         NOT NULL,
    to_service   text         NOT NULL,
    -- merge (a user merged incidents of the two), split (a user split one off the other);
    -- mention (an alert of from_service naming to_service) is read but not yet written.
    kind         varchar(10)  NOT NULL,
    PRIMARY KEY (incident_id, sequence, from_service, to_service, kind)
);
CREATE INDEX topology_evidence_by_user ON topology_evidence (user_id);

-- The learned topology's tail reads merges and splits: the reactions index holds every event
-- type a consumer reads by type (both are rare: the index stays small).
DROP INDEX events_tail_reactions;
CREATE INDEX events_tail_reactions ON events (aggregate_type, transaction_id, global_position)
    WHERE event_type IN ('IncidentOpened', 'ResolutionRequested', 'AlertBridged', 'IncidentAbsorbed', 'AlertSplitOff');
