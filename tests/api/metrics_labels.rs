//! No metric may carry a per-user, per-incident or per-session label: such a label makes a
//! series per user (unbounded cardinality), and writes who did what into the monitoring system.
//! The exposition after several users' work is checked by name and by value.

use std::collections::{BTreeMap, BTreeSet};

use futures::SinkExt;
use reqwest::Method;
use serde_json::json;
use tokio_tungstenite::{connect_async, tungstenite::Message};

use crate::{
    helpers::spawn_app,
    ingestion::{fixture, post_alert},
    metrics::{scrape, Exposition},
};

/// Label names that would identify a user, a tenant or one piece of their data.
const DENIED_LABELS: &[&str] = &[
    "user_id",
    "user",
    "userid",
    "email",
    "tenant",
    "tenant_id",
    "incident_id",
    "incident",
    "session_id",
    "session",
    "chat_session_id",
    "alert_id",
    "alert_key",
    "fingerprint",
    "job_id",
    "request_id",
    "trace_id",
    "token",
    "id",
];
/// The most values one label of one family may take in a short run (the routes of the HTTP
/// API are the widest set).
const MOST_VALUES: usize = 64;

/// Why `metrics` would leak identities or grow without bound: one line per finding.
fn label_findings(metrics: &Exposition, identities: &[String]) -> Vec<String> {
    let mut findings = Vec::new();
    let mut values: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for sample in &metrics.samples {
        for (label, value) in &sample.labels {
            if DENIED_LABELS.contains(&label.to_ascii_lowercase().as_str()) {
                findings.push(format!("{}: label {label} names a user or their data", sample.name));
            }
            if holds_uuid(value) {
                findings.push(format!("{}: {label}=\"{value}\" holds a UUID", sample.name));
            }
            if let Some(identity) = identities.iter().find(|identity| value.contains(identity.as_str())) {
                findings.push(format!("{}: {label}=\"{value}\" holds {identity}", sample.name));
            }
            if label != "le" {
                values
                    .entry((family_of(metrics, &sample.name), label.clone()))
                    .or_default()
                    .insert(value.clone());
            }
        }
    }
    for ((family, label), values) in values {
        if values.len() > MOST_VALUES {
            findings.push(format!("{family}: label {label} takes {} values", values.len()));
        }
    }
    findings
}

/// Whether `value` is or holds a UUID (a raw path with an id in it, say).
fn holds_uuid(value: &str) -> bool {
    let bytes = value.as_bytes();
    uuid::Uuid::parse_str(value).is_ok()
        || bytes
            .windows(36)
            .any(|window| std::str::from_utf8(window).is_ok_and(|text| uuid::Uuid::parse_str(text).is_ok()))
}

/// The family a sample belongs to (a histogram's `_bucket`, `_sum` and `_count` are its own).
fn family_of(metrics: &Exposition, sample: &str) -> String {
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|suffix| sample.strip_suffix(suffix))
        .find(|family| metrics.types.contains_key(*family))
        .unwrap_or(sample)
        .to_owned()
}

#[test]
fn the_check_finds_identities_uuids_and_unbounded_labels() {
    let mut text = String::from(
        "# TYPE bad_total counter\n\
         bad_total{user_id=\"u-1\"} 1\n\
         bad_total{route=\"/api/incidents/8b0c1f3e-54a4-4c1e-9a43-9d2f1c3b7a10\"} 1\n\
         bad_total{who=\"someone@example.com\"} 1\n",
    );
    for n in 0..=MOST_VALUES {
        text.push_str(&format!("wide_total{{path=\"/p{n}\"}} 1\n"));
    }
    let findings = label_findings(&Exposition::parse(&text), &["someone@example.com".to_owned()]);
    assert_eq!(findings.len(), 4, "{findings:#?}");
    assert!(findings[0].contains("label user_id"), "{findings:#?}");
    assert!(findings[1].contains("holds a UUID"), "{findings:#?}");
    assert!(findings[2].contains("holds someone@example.com"), "{findings:#?}");
    assert!(
        findings[3].contains("wide_total: label path takes 65 values"),
        "{findings:#?}"
    );
    let clean = "# TYPE ok_seconds histogram\nok_seconds_bucket{route=\"/api/incidents/{id}\",le=\"0.1\"} 1\n";
    assert!(label_findings(&Exposition::parse(clean), &[]).is_empty());
}

#[tokio::test]
async fn no_metric_is_labelled_by_user_incident_or_session() {
    let app = spawn_app().await;
    let mut identities = Vec::new();
    for n in 0..3 {
        let user = app.new_user().await;
        let mut alert = fixture("source_a", "firing");
        alert["alerts"][0]["fingerprint"] = json!(format!("labels-{n}"));
        alert["alerts"][0]["labels"]["service"] = json!(format!("service-{n}"));
        let placed = post_alert(&app, &user.id, "/api/source_a/alerts", &alert).await;
        let incident = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
        let path = format!("/api/incidents/{incident}");
        assert_eq!(app.send_as(&user.id, Method::GET, &path, None).await.status(), 200);
        let session = app.create_session(&user.id, &json!({})).await;
        let (mut socket, _) = connect_async(format!("ws://{}/", app.ws_addr)).await.unwrap();
        socket
            .send(Message::text(json!({ "type": "init", "user_id": user.id }).to_string()))
            .await
            .unwrap();
        identities.extend([user.id, user.email, incident]);
        identities.push(session["id"].as_str().unwrap().to_owned());
    }
    let metrics = scrape(&app).await;
    assert!(metrics.samples.len() > 100, "a full exposition: {}", metrics.text);
    let findings = label_findings(&metrics, &identities);
    assert!(findings.is_empty(), "{findings:#?}");
}
