//! Plans of the key lookups behind the API's reads and the projections' version checks.
//!
//! A pooled connection keeps the generic plan PostgreSQL makes for a statement (at its sixth
//! execution) from the statistics of that moment, until the table is next analyzed. On a new
//! database that moment comes while the tables are empty, and a plan that took another index then
//! (or a scan) read every row of the user, or of the table, on every call as the table grew: a
//! storm of chat-session creates for one user slowed to 37 ms each within seconds. Each statement
//! here is prepared by the function the service calls, on empty tables, and its generic plan must
//! probe the primary key (the incident list: read the first entries of the user's range of its
//! index, in order, without a sort).

use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;
use vigil_projections::{
    chat_sessions::{self, ChatSessionsReadModel},
    connections::ConnectionsReadModel,
    incident_analysis::IncidentAnalysisReadModel,
    incidents::{self, IncidentsReadModel},
    ReadModel,
};

use crate::helpers::{eventually, spawn_app_without_workers};

#[tokio::test]
async fn key_lookups_stay_primary_key_probes_when_planned_on_empty_tables() {
    let app = spawn_app_without_workers().await;
    // One connection, so that every statement the calls below prepare is on the one explained.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*app.db.connect_options()).clone())
        .await
        .unwrap();
    let id = Uuid::new_v4();
    let ids = [id.to_string()];
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert!(chat_sessions::find_active(&pool, "someone", id)
        .await
        .unwrap()
        .is_none());
    assert!(incidents::find_incident(&pool, "someone", id).await.unwrap().is_none());
    assert!(incidents::opening_payload(&pool, "someone", 1).await.unwrap().is_none());
    assert!(incidents::list_incidents(&pool, "someone").await.unwrap().is_empty());
    let mut conn = pool.acquire().await.unwrap();
    assert!(ChatSessionsReadModel
        .versions(&mut conn, &ids)
        .await
        .unwrap()
        .is_empty());
    assert!(IncidentsReadModel.versions(&mut conn, &ids).await.unwrap().is_empty());
    assert!(IncidentAnalysisReadModel
        .versions(&mut conn, &ids)
        .await
        .unwrap()
        .is_empty());
    assert!(ConnectionsReadModel
        .versions(&mut conn, &["cloud_a:1"])
        .await
        .unwrap()
        .is_empty());

    let off_key = generic_plans_off_key(
        &mut conn,
        id,
        &[
            (
                "FROM chat_sessions WHERE id = $1",
                "chat_sessions",
                &["chat_sessions_pkey"][..],
            ),
            (
                "merged_into_incident_id\n         WHERE i.id = $1",
                "incidents",
                &["incidents_pkey"],
            ),
            (
                "FROM source_alerts WHERE id = $1",
                "source_alerts",
                &["source_alerts_pkey"],
            ),
            (
                "(SELECT version FROM chat_sessions WHERE",
                "chat_sessions",
                &["chat_sessions_pkey"],
            ),
            ("(SELECT version FROM incidents WHERE", "incidents", &["incidents_pkey"]),
            (
                "(SELECT version FROM incident_analyses WHERE",
                "incident_analyses",
                &["incident_analyses_pkey"],
            ),
            (
                "(SELECT version FROM user_connections WHERE",
                "user_connections",
                &["user_connections_pkey"],
            ),
            (
                "ORDER BY i.started_at DESC, i.id LIMIT $2",
                "incidents",
                &["incidents_user_started", "incidents_pkey"],
            ),
        ],
    )
    .await;
    assert!(off_key.is_empty(), "{}", off_key.join("\n\n"));
}

/// The tails read events in (transaction, position) order through the tail index, a range from
/// the checkpoint on. Ordered by the `transaction_id::text::bigint` alias instead, each batch sorted
/// every remaining event of the type, which made a replay quadratic in the store's size.
#[tokio::test]
async fn a_replay_and_a_catch_up_read_events_by_index_without_sorting() {
    let app = spawn_app_without_workers().await;
    // Four connections: the replay holds its consumer's lock on one, reads on another and moves
    // its checkpoint on a third, and the projection writes on the fourth.
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with((*app.db.connect_options()).clone())
        .await
        .unwrap();
    let user = app.new_user().await.id;
    app.create_session(&user, &serde_json::json!({ "title": "replayed" }))
        .await;
    let projector = std::sync::Arc::new(vigil_projections::Projector::new(pool.clone(), ChatSessionsReadModel));
    vigil_projections::replay(&pool, projector.clone()).await.unwrap();
    // A tail that finds a read row missing fetches its events (a replay reads them whole). The
    // app's own tail of the projection is held off meanwhile (it holds no lock while it waits
    // for a round), or it could catch up first and leave this one nothing to fetch.
    let mut held = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('event-consumer/chat_sessions', 0))")
        .execute(&mut *held)
        .await
        .unwrap();
    sqlx::query("TRUNCATE chat_sessions").execute(&mut *held).await.unwrap();
    sqlx::query("DELETE FROM event_consumer_checkpoints WHERE name = 'chat_sessions'")
        .execute(&mut *held)
        .await
        .unwrap();
    let tail = vigil_projections::Tail::new(pool.clone(), projector);
    let catching_up = tokio::spawn(async move { tail.catch_up().await });
    // Its lock request queues behind ours, and is granted the moment ours is let go.
    eventually("the catch-up waits for the projection's lock", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND NOT granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
    held.commit().await.unwrap();
    catching_up.await.unwrap().unwrap();
    let statements = [
        (
            "FROM event_consumer_checkpoints WHERE name = $2), 0))",
            "events",
            &["events_tail_by_type"][..],
        ),
        ("DESC LIMIT 1", "events", &["events_tail_by_type"]),
        // A replay's reads, each after the batch before.
        ("> ($2::bigint::text::xid8, $3)", "events", &["events_tail_by_type"]),
        // The events a batch's read rows miss, by the store's key.
        ("AS wanted(id, first, last)", "events", &["events_pkey"]),
    ];
    let mut off_key = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..4 {
        connections.push(pool.acquire().await.unwrap());
    }
    for (statement, table, indexes) in statements {
        let mut found = false;
        for conn in &mut connections {
            if prepared_statements(conn)
                .await
                .iter()
                .any(|(_, text, _)| text.contains(statement))
            {
                found = true;
                off_key.extend(generic_plans_off_key(conn, Uuid::new_v4(), &[(statement, table, indexes)]).await);
            }
        }
        assert!(found, "the replay prepared no statement containing {statement:?}");
    }
    assert!(off_key.is_empty(), "{}", off_key.join("\n\n"));
}

async fn prepared_statements(conn: &mut sqlx::PgConnection) -> Vec<(String, String, Vec<String>)> {
    sqlx::query_as("SELECT name, statement, parameter_types::text[] FROM pg_prepared_statements")
        .fetch_all(conn)
        .await
        .unwrap()
}

/// Each statement (found by a fragment of its text among those prepared on `conn`) with a table and
/// the indexes its scans of that table may use: the generic plan of each must scan the table only
/// through those, and never sort.
async fn generic_plans_off_key(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    statements: &[(&str, &str, &[&str])],
) -> Vec<String> {
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let prepared = prepared_statements(&mut *conn).await;
    let argument = |parameter_type: &str| match parameter_type {
        "uuid" => format!("'{id}'"),
        "uuid[]" => format!("'{{{id}}}'"),
        "text" | "character varying" => "'someone'".to_owned(),
        "text[]" => "'{cloud_a:1}'".to_owned(),
        "bigint" => "1".to_owned(),
        "bigint[]" => "'{1}'".to_owned(),
        other => panic!("no argument for a parameter of type {other}"),
    };
    let mut off_key = Vec::new();
    for &(statement, table, indexes) in statements {
        let (name, _, parameter_types) = prepared
            .iter()
            .find(|(_, text, _)| text.contains(statement))
            .unwrap_or_else(|| panic!("no prepared statement contains {statement:?}: {prepared:#?}"));
        let arguments: Vec<String> = parameter_types.iter().map(|t| argument(t)).collect();
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}({})", arguments.join(", ")))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let nodes: Vec<&str> = plan.iter().map(|line| line.trim().trim_start_matches("->  ")).collect();
        let scans: Vec<&&str> = nodes
            .iter()
            .filter(|node| node.contains(" Scan ") && node.contains(&format!(" on {table} ")))
            .collect();
        let by_key = !scans.is_empty()
            && scans.iter().all(|scan| {
                indexes.iter().any(|index| {
                    scan.contains(&format!("Scan using {index} "))
                        || scan.contains(&format!("Scan Backward using {index} "))
                })
            })
            && !nodes
                .iter()
                .any(|node| node.starts_with("Sort ") || node.contains(" Sort "));
        if !by_key {
            off_key.push(format!(
                "{statement:?}, not probes of {indexes:?}:\n{}",
                plan.join("\n")
            ));
        }
    }
    off_key
}
