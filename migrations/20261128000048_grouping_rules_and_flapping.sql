-- Open-after-N grouping rules (issue 30), projected from the GroupingRule aggregate. A rule never
-- changes once created; a deleted one is kept in history. As with silences, placement reads each
-- user's generation (how many times their rules changed) with every batch, and reads and compiles
-- the rules themselves only when it moved.
CREATE TABLE grouping_rules
(
    id          uuid PRIMARY KEY,
    user_id     varchar(255) NOT NULL,
    definition  jsonb        NOT NULL,
    created_by  varchar(255) NOT NULL,
    created_at  timestamptz  NOT NULL,
    deleted_at  timestamptz,
    deleted_by  varchar(255),
    version     bigint       NOT NULL
);
CREATE INDEX grouping_rules_by_user ON grouping_rules (user_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE grouping_rule_generations
(
    user_id    varchar(255) PRIMARY KEY,
    generation bigint       NOT NULL
);

-- Placement's own state of each group of a rule (like `source_alerts`, written by placement in the
-- statement that places a batch, never by a projection): the alerts held so far (each with what
-- its incident's event will record of it, and when it arrived) and the incident the group opened.
-- `group_value` is the JSON array of the rule's group-by values.
CREATE TABLE rule_groups
(
    user_id     varchar(255) NOT NULL,
    rule_id     uuid         NOT NULL,
    group_value text         NOT NULL,
    incident_id uuid,
    held        jsonb        NOT NULL,
    updated_at  timestamptz  NOT NULL,
    PRIMARY KEY (user_id, rule_id, group_value)
);

-- Flapping (issue 30): an alert key that fired and recovered too often within the window. The
-- incident shows `flapping`; `flapping_keys` names, per key, the incident its later cycles are
-- recorded on (both projected from `FlappingDetected`).
ALTER TABLE incidents ADD COLUMN flapping boolean NOT NULL DEFAULT false;
CREATE TABLE flapping_keys
(
    user_id     varchar(255) NOT NULL,
    source_type varchar(20)  NOT NULL,
    alert_key   text         NOT NULL,
    incident_id uuid         NOT NULL,
    detected_at timestamptz  NOT NULL,
    PRIMARY KEY (user_id, source_type, alert_key)
);

-- Held alerts in the inbox: the rule holding them, and when each stops counting (past it, the
-- inbox shows it expired).
ALTER TABLE alert_inbox ADD COLUMN rule_id uuid, ADD COLUMN held_until timestamptz;
