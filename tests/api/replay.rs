//! `vigil replay` rebuilds every read table exactly as the live service wrote it, and a replay
//! that dies half-way leaves nothing that the next one does not rebuild.

use std::sync::Arc;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{json, Value};
use vigil::event_store::{execute, Actor};
use vigil_aggregates::{
    connection::{connection_id, ConnectionCommand, Provider},
    incident_analysis::{AnalysisCommand, Citation},
};
use vigil_projections::{checksums, EventConsumer, ProjectionError, StoredEvent, TableChecksum};

use crate::{
    correlation::{alert_of, post},
    grouping_rules::{disk_rule, grouping_rule},
    helpers::{eventually, spawn_app, TestApp},
    incidents::detail,
    ingestion::post_alert,
    noise_controls::cycle as flap_cycle,
    silences::{silence, silence_of_service},
};

/// Incidents that alerts opened and joined, analysed by the built-in analyst (thoughts,
/// citations, suggestions, verdicts, incident chat sessions), one merged into another, an alert
/// split off, a declared topology, silences, grouping rules, a flapping alert, a chat session of the user's own:
/// every read table has rows.
pub(crate) async fn a_day_of_work(app: &TestApp) {
    for _ in 0..2 {
        let user = app.new_user().await.id;
        let redis = "dial tcp 10.9.8.7:6379: i/o timeout";
        let incident = post(app, &user, &alert_of("orders-api", redis, 0)).await;
        post(app, &user, &alert_of("billing-sync", "redis 10.9.8.7:6379 refused", 60)).await;
        post(app, &user, &alert_of("orders-api", redis, 90)).await;
        let disk = post(app, &user, &alert_of("backup-host", "disk /srv is 97% full", 4000)).await;
        let tls = post(app, &user, &alert_of("edge-proxy", "certificate expired", 9000)).await;
        let merged = app
            .send_as(
                &user,
                Method::POST,
                &format!("/api/incidents/{tls}/merge-alert"),
                Some(&json!({ "sourceIncidentId": disk })),
            )
            .await;
        assert_eq!(merged.status(), 200);
        let billing = detail(app, &user, &incident).await["correlatedAlerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|alert| alert["alertService"] == "billing-sync")
            .expect("billing-sync joined")["id"]
            .clone();
        let split = app
            .send_as(
                &user,
                Method::POST,
                &format!("/api/incidents/{incident}/split"),
                Some(&json!({ "alertId": billing })),
            )
            .await;
        assert_eq!(split.status(), 201);
        let topology = json!({ "services": [
            { "name": "orders-api", "dependsOn": ["redis-main"] },
            { "name": "redis-main", "addresses": ["10.9.8.7:6379"] },
        ]});
        let declared = app.send_as(&user, Method::PUT, "/api/topology", Some(&topology)).await;
        assert_eq!(declared.status(), 200);
        // A maintenance window silencing an alert, and a silence expired.
        silence(app, &user, &silence_of_service("batch-jobs")).await;
        let silenced = post_alert(
            app,
            &user,
            "/api/source_a/alerts",
            &alert_of("batch-jobs", "export failed", 9500),
        )
        .await;
        assert_eq!(silenced["alerts"][0]["incident_id"], Value::Null);
        let ended = silence(app, &user, &silence_of_service("reports")).await;
        let expired = app
            .send_as(&user, Method::DELETE, &format!("/api/silences/{ended}"), None)
            .await;
        assert_eq!(expired.status(), 204);
        // A grouping rule kept, and one deleted.
        grouping_rule(app, &user, &disk_rule("disk storms")).await;
        let dropped = grouping_rule(app, &user, &disk_rule("retired")).await;
        let deleted = app
            .send_as(
                &user,
                Method::DELETE,
                &format!("/api/grouping-rules/{}", dropped["id"].as_str().unwrap()),
                None,
            )
            .await;
        assert_eq!(deleted.status(), 204);
        // An alert that flaps, and a later cycle recorded on its incident.
        for n in 0..5 {
            post_alert(app, &user, "/api/source_a/alerts", &flap_cycle(n, false)).await;
            post_alert(app, &user, "/api/source_a/alerts", &flap_cycle(n, true)).await;
        }
        app.create_session(&user, &json!({ "title": "capacity planning" }))
            .await;
        // A cloud account connected (its setup talks to the provider; the events are what count).
        let account = ConnectionCommand::Connect {
            user_id: user.clone(),
            provider: Provider::CloudB,
            account_id: "sub-42".into(),
            account_name: Some("production".into()),
            secret_ref: "vault:connections/42".into(),
            at: chrono::Utc::now(),
        };
        let connection = connection_id(&user, Provider::CloudB, "sub-42");
        execute(&app.state.events.connections, &connection, account, Actor::User(&user))
            .await
            .unwrap();
        // The built-in analyst cites nothing; a model's analysis does.
        let citation = Citation {
            key: "1".into(),
            tool_name: Some("kubectl".into()),
            command: Some("kubectl get pods".into()),
            output: "orders-api-7d9 CrashLoopBackOff".into(),
            executed_at: None,
        };
        let command = AnalysisCommand::RecordCitation {
            incident_id: incident.parse().unwrap(),
            citation,
            at: chrono::Utc::now(),
        };
        execute(
            &app.state.events.analyses,
            &incident,
            command,
            Actor::System("analysis"),
        )
        .await
        .unwrap();
    }
    eventually("every analysis has ended", || async {
        let (open, queued): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM incidents
                     WHERE status <> 'merged' AND aurora_status NOT IN ('complete', 'error')),
                    (SELECT count(*) FROM jobs WHERE state IN ('available', 'retryable', 'running'))",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        (open == 0 && queued == 0).then_some(())
    })
    .await;
}

/// The read tables once the tails have applied everything (two readings a moment apart agree).
pub(crate) async fn settled_checksums(app: &TestApp) -> Vec<TableChecksum> {
    let consumers = &app.state.events.consumers;
    let mut last = checksums(&app.db, consumers).await.unwrap();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = checksums(&app.db, consumers).await.unwrap();
        if now == last {
            return now;
        }
        last = now;
    }
}

#[tokio::test]
async fn a_replay_rebuilds_every_read_table_byte_for_byte() {
    let app = spawn_app().await;
    a_day_of_work(&app).await;
    let live = settled_checksums(&app).await;
    for table in &live {
        assert!(table.rows > 0, "the workload leaves rows in {}", table.table);
    }

    app.state.events.replay(&app.db, None).await.unwrap();
    let replayed = checksums(&app.db, &app.state.events.consumers).await.unwrap();
    assert_eq!(replayed, live);
}

/// Hands the first batch to the projection, then fails: a replay that dies half-way.
struct DiesAfterOneBatch {
    inner: Arc<dyn EventConsumer>,
    batches: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl EventConsumer for DiesAfterOneBatch {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn aggregate_type(&self) -> &'static str {
        self.inner.aggregate_type()
    }

    fn payloads(&self) -> vigil_projections::Payloads<'_> {
        self.inner.payloads()
    }

    async fn consume(&self, events: &[StoredEvent]) -> Result<(), ProjectionError> {
        if self.batches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
            return Err(ProjectionError::Stalled {
                consumer: "dies after one batch",
                waited: std::time::Duration::ZERO,
            });
        }
        self.inner.consume(events).await
    }

    async fn reset(&self) -> Result<(), ProjectionError> {
        self.inner.reset().await
    }
}

#[tokio::test]
async fn a_replay_that_dies_half_way_is_made_whole_by_the_next() {
    let app = spawn_app().await;
    a_day_of_work(&app).await;
    let live = settled_checksums(&app).await;

    let mut died = Vec::new();
    for consumer in &app.state.events.consumers {
        let dying = Arc::new(DiesAfterOneBatch {
            inner: consumer.clone(),
            batches: Default::default(),
        });
        if vigil_projections::replay_in_batches(&app.db, dying, 3).await.is_err() {
            died.push(consumer.name());
        }
    }
    // (Those with at most one batch of events were rebuilt whole.)
    for name in ["incidents", "incident_analysis", "chat_sessions"] {
        assert!(died.contains(&name), "the replay of {name} died half-way: {died:?}");
    }

    app.state.events.replay(&app.db, None).await.unwrap();
    let replayed = checksums(&app.db, &app.state.events.consumers).await.unwrap();
    assert_eq!(replayed, live);
}
