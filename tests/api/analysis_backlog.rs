//! A burst of new incidents leaves a backlog of analyses; every one of them ends, none skipped
//! or lost, however the worker defers them while placement is busy.

use std::time::Duration;

use serde_json::json;

use crate::{helpers::spawn_app, ingestion::post_alert};

/// Each its own service, hours from the others: an incident each.
fn new_incident_alert(n: i64) -> serde_json::Value {
    let fired = chrono::DateTime::from_timestamp(1_795_000_000 + n * 7_200, 0).unwrap();
    json!({
        "status": "firing",
        "alerts": [{
            "status": "firing",
            "fingerprint": format!("burst-{n}"),
            "labels": { "alertname": "HighLatency", "service": format!("service-{n}"), "severity": "critical" },
            "annotations": { "summary": format!("service-{n} p99 latency above 2s") },
            "startsAt": fired.to_rfc3339(),
            "endsAt": "0001-01-01T00:00:00Z"
        }]
    })
}

#[tokio::test]
async fn every_incident_of_a_burst_ends_with_its_analysis_complete_and_once() {
    const INCIDENTS: i64 = 32;
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let posts = (0..INCIDENTS).map(|n| {
        let (app, user) = (&app, &user);
        async move { post_alert(app, user, "/api/source_a/alerts", &new_incident_alert(n)).await }
    });
    futures::future::join_all(posts).await;

    // A bound on the wait, not a timing: the analyses have no deadline of their own.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let (incidents, complete, errors) = loop {
        let counts: (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*), count(*) FILTER (WHERE aurora_status = 'complete'),
                    count(*) FILTER (WHERE aurora_status = 'error')
             FROM incidents WHERE user_id = $1",
        )
        .bind(&user)
        .fetch_one(&app.db)
        .await
        .unwrap();
        if counts.1 + counts.2 == counts.0 || tokio::time::Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(incidents, INCIDENTS);
    assert_eq!((complete, errors), (INCIDENTS, 0), "every analysis completes");
    let (jobs, completed): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM jobs
         WHERE kind = 'rca' AND payload->>'user_id' = $1",
    )
    .bind(&user)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(
        (jobs, completed),
        (INCIDENTS, INCIDENTS),
        "one analysis job per incident, each completed"
    );
}
