//! Automatic root cause analysis with the built-in analyst: an ingested alert ends analysed.

use reqwest::Method;
use serde_json::{json, Value};

use crate::{
    helpers::{eventually, spawn_app},
    ingestion::{fixture, post_alert},
};

#[tokio::test]
async fn an_alert_after_a_failed_deploy_is_analysed_end_to_end() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    // A failed deploy of inventory-service (17:44:51 + 3 min), then its error rate alert at 18:05.
    post_alert(&app, &user, "/api/source_f/deployment", &fixture("source_f", "firing")).await;
    let mut alert = fixture("source_a", "firing");
    let element = &mut alert["alerts"][0];
    element["fingerprint"] = json!("1a2b3c4d5e6f7081");
    element["labels"] = json!({ "alertname": "InventoryServiceHighErrorRate", "service": "inventory-service",
        "namespace": "inventory", "severity": "critical", "environment": "production" });
    element["annotations"] = json!({ "summary": "inventory-service 5xx rate above 5%",
        "description": "5xx rate of inventory-service has been above 5% for 5 minutes (current 12.4%)." });
    element["startsAt"] = json!("2026-11-20T18:05:00Z");
    let placed = post_alert(&app, &user, "/api/source_a/alerts", &alert).await;
    let id = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    assert_eq!(
        placed["alerts"][0]["correlated"], false,
        "13 minutes after the deploy: an incident of its own"
    );

    let incident = eventually("the analysis to complete", || async {
        let body: Value = app
            .send_as(&user, Method::GET, &format!("/api/incidents/{id}"), None)
            .await
            .json()
            .await
            .unwrap();
        (body["incident"]["auroraStatus"] == "complete").then(|| body["incident"].clone())
    })
    .await;
    let thoughts = incident["streamingThoughts"].as_array().unwrap();
    assert!(thoughts.len() >= 3, "{thoughts:?}");
    assert_eq!(thoughts[0]["type"], "analysis");
    assert_eq!(thoughts.last().unwrap()["type"], "conclusion");
    assert!(thoughts[1]["content"]
        .as_str()
        .unwrap()
        .contains("failed at 17:47:55 UTC (17 min 4 s before the first alert)"));
    let suggestions = incident["suggestions"].as_array().unwrap();
    assert!(suggestions
        .iter()
        .any(|s| s["title"] == "Set INVENTORY_DB_POOL_SIZE for inventory-service"));
    let rollback = suggestions.iter().find(|s| s["type"] == "mitigation").unwrap();
    assert_eq!(rollback["risk"], "high");
    let summary = incident["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Most likely cause: the failed deployment"),
        "{summary}"
    );
    assert!(summary.contains("built-in analyst"));
    let session = &incident["chatSessions"][0];
    assert_eq!(incident["chatSessionId"], session["id"]);
    assert_eq!(session["messages"].as_array().unwrap().last().unwrap()["text"], summary);

    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE unique_key = $1")
        .bind(format!("rca:incident:{id}"))
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(jobs, 1, "one RCA job per incident");

    eprintln!("RCA transcript for incident {id}:");
    for thought in thoughts {
        eprintln!(
            "[{}] {}",
            thought["type"].as_str().unwrap(),
            thought["content"].as_str().unwrap()
        );
    }
    for suggestion in suggestions {
        eprintln!(
            "suggestion ({}, {}): {} {}",
            suggestion["type"], suggestion["risk"], suggestion["title"], suggestion["command"]
        );
    }
    eprintln!("summary:\n{summary}");
}
