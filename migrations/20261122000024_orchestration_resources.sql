-- Orchestration resources the agent's inventory tool finds in users' clusters
-- (spec: Orchestration resource records), upserted on their natural keys.
CREATE TABLE orchestration_pods
(
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace    text        NOT NULL,
    pod_name     text        NOT NULL,
    status       varchar(50) NOT NULL,
    project_id   text        NOT NULL,
    cluster_name text        NOT NULL,
    user_id      varchar(255) NOT NULL,
    provider     varchar(50),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orchestration_pods_key UNIQUE (pod_name, namespace, project_id, cluster_name, user_id)
);

CREATE TABLE orchestration_nodes
(
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_name    text        NOT NULL,
    status       varchar(50) NOT NULL,
    project_id   text        NOT NULL,
    cluster_name text        NOT NULL,
    user_id      varchar(255) NOT NULL,
    provider     varchar(50),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orchestration_nodes_key UNIQUE (node_name, project_id, cluster_name, user_id)
);
