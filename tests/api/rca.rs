//! Automatic root cause analysis: with the built-in analyst an ingested alert ends analysed; with
//! a configured model (a real OpenAI-compatible server on loopback) the model writes the summary
//! and every call leaves a usage row. The model's verdict gate: `rca_gate.rs`.

use reqwest::Method;
use serde_json::{json, Value};
use vigil_llm::fake::{FakeOpenAi, Reply};

use crate::{
    helpers::{eventually, spawn_app, spawn_app_with, TestApp},
    incidents::detail,
    ingestion::{fixture, post_alert},
};

async fn analysed_incident(app: &TestApp, user: &str) -> Value {
    let placed = post_alert(app, user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let id = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    let incident = eventually("the analysis to complete", || async {
        let body: Value = app
            .send_as(user, Method::GET, &format!("/api/incidents/{id}"), None)
            .await
            .json()
            .await
            .unwrap();
        (body["incident"]["auroraStatus"] == "complete").then(|| body["incident"].clone())
    })
    .await;
    // "null until analysed": the analysis completing stamps it.
    assert!(incident["analyzedAt"].is_string(), "{incident}");
    incident
}

/// The service with `model` as `gpt-4o-mini`, priced at 0.15 / 0.6 USD per million tokens in / out.
pub(crate) async fn app_with_priced_model(model: &FakeOpenAi) -> TestApp {
    let base_url = model.base_url().to_owned();
    spawn_app_with(move |config| {
        config.llm_base_url = Some(base_url);
        config.llm_model = "gpt-4o-mini".into();
        config.llm_prices = Some("gpt-4o-mini=0.15/0.6".into());
    })
    .await
}

/// The service with `model` as its language model.
async fn app_with_model(model: &FakeOpenAi) -> TestApp {
    let base_url = model.base_url().to_owned();
    spawn_app_with(move |config| config.llm_base_url = Some(base_url)).await
}

#[tokio::test]
async fn a_configured_model_writes_the_summary_and_its_usage_is_recorded() {
    let model = FakeOpenAi::start().await;
    let answer = "Most likely cause: the checkout-api database pool is exhausted. Raise the pool size.";
    model.push(Reply::text(answer).usage(1200, 300));
    let app = app_with_priced_model(&model).await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;
    // An answer without a verdict block cites nothing: the gate sets it aside.
    assert_eq!(incident["verdict"]["model"]["rule"], "no_verdict", "{incident}");
    assert!(!incident["summary"].as_str().unwrap().contains(answer));
    let sent = model.requests();
    assert_eq!(sent.len(), 1, "one model call per analysis");
    let prompt = sent[0]["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("Findings:") && prompt.contains("Hypothesis ledger"),
        "{prompt}"
    );
    assert_eq!(sent[0]["stream"], true);

    let (user_id, request_type, session_id, error): (String, String, Option<String>, Option<String>) =
        sqlx::query_as("SELECT user_id, request_type, session_id, error_message FROM llm_usage")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!((user_id.as_str(), request_type.as_str()), (user.as_str(), "rca"));
    assert_eq!(session_id.as_deref(), incident["chatSessionId"].as_str());
    assert_eq!(error, None);
    let tokens: (i32, i32, i32) = sqlx::query_as("SELECT input_tokens, output_tokens, total_tokens FROM llm_usage")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(tokens, (1200, 300, 1500), "total_tokens is generated");
    let costs: (bool, bool, bool) = sqlx::query_as(
        "SELECT estimated_cost = 0.00036, surcharge_amount = 0.000108, total_cost_with_surcharge = 0.000468
         FROM llm_usage",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(costs, (true, true, true), "cost 0.00036, surcharge 30 %, generated");
}
#[tokio::test]
async fn when_the_model_fails_the_built_in_summary_stands_and_the_failure_is_recorded() {
    let model = FakeOpenAi::start().await;
    for _ in 0..3 {
        model.push(Reply::status(500));
    }
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;
    assert!(incident["summary"].as_str().unwrap().contains("built-in analyst"));
    let (tokens, error): (i32, Option<String>) = sqlx::query_as("SELECT total_tokens, error_message FROM llm_usage")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(tokens, 0);
    assert!(error.is_some_and(|error| error.contains("500")));
}

#[tokio::test]
async fn a_stream_without_a_usage_report_is_recorded_with_estimated_tokens() {
    let model = FakeOpenAi::start().await;
    let answer = "Most likely cause: the checkout-api database pool is exhausted.";
    model.push(Reply::raw_events([
        json!({ "choices": [{ "index": 0, "delta": { "content": answer } }] }).to_string(),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }).to_string(),
        "[DONE]".to_owned(),
    ]));
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;
    assert_eq!(
        incident["verdict"]["model"]["rule"], "no_verdict",
        "the answer was read: {incident}"
    );
    let (input, output, estimated): (i32, i32, Option<bool>) = sqlx::query_as(
        "SELECT input_tokens, output_tokens, (request_metadata->>'tokens_estimated')::bool FROM llm_usage",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(input > 0 && output > 0, "{input} {output}");
    assert_eq!(estimated, Some(true));
}

#[tokio::test]
async fn the_last_round_offers_no_tools_so_the_model_writes_its_summary() {
    let model = FakeOpenAi::start().await;
    for _ in 0..3 {
        model.push(Reply::tool_call("search_incidents", json!({ "query": "checkout" })));
    }
    let answer = "Three searches [1][2][3] found no earlier checkout incident.";
    model.push(Reply::text(format!(
        "{answer}\n```json\n{{\"verdict\": \"INCONCLUSIVE\", \"evidence\": [\"1\", \"2\", \"3\"]}}\n```"
    )));
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;
    assert_eq!(incident["summary"], answer);
    assert_eq!(incident["citations"].as_array().unwrap().len(), 3);
    let sent = model.requests();
    assert_eq!(sent.len(), 4);
    assert!(sent[..3].iter().all(|request| request["tools"].is_array()));
    assert!(sent[3].get("tools").is_none(), "{}", sent[3]);
}

#[tokio::test]
async fn the_model_checks_facts_with_tools_and_its_summary_cites_them() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::status(429).retry_after(1));
    model.push(Reply::tool_call("search_incidents", json!({ "query": "checkout" })));
    let answer = "The checkout-api pool is exhausted [1]; no earlier incident matches.";
    model.push(Reply::text(format!(
        "{answer}\n```json\n{{\"verdict\": \"INCONCLUSIVE\", \"component\": null, \"evidence\": [\"[1]\"]}}\n```"
    )));
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;

    assert_eq!(incident["summary"], answer);
    let citations = incident["citations"].as_array().unwrap();
    assert_eq!(citations.len(), 1, "{citations:?}");
    assert_eq!(citations[0]["key"], "1");
    assert_eq!(
        citations[0]["toolName"].as_str().or(citations[0]["tool_name"].as_str()),
        Some("search_incidents")
    );
    assert!(
        citations[0]["output"].as_str().unwrap().contains("\"title\""),
        "the tool ran: {}",
        citations[0]["output"]
    );
    let sent = model.requests();
    assert_eq!(sent.len(), 3, "the 429 was retried, then the tool round");
    assert!(sent[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|tool| tool["function"]["name"] != "cloud_cli"));
    let tool_message = sent[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(tool_message["content"].as_str().unwrap().starts_with("[1] "));
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM llm_usage WHERE request_type = 'rca' AND error_message IS NULL")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(rows, 2, "one usage row per model call");
}

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
    let rollback = suggestions
        .iter()
        .find(|s| s["title"].as_str().unwrap().starts_with("Roll inventory-service back"))
        .unwrap();
    assert_eq!(rollback["type"], "fix", "the detail shows a mitigation as a fix");
    assert!(suggestions
        .iter()
        .all(|s| s["type"] == "diagnostic" || s["type"] == "fix"));
    assert_eq!(rollback["risk"], "high");
    let summary = incident["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Verdict: LIKELY. Root cause: inventory-service, a failed change"),
        "{summary}"
    );
    assert!(summary.contains("built-in analyst"));
    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "LIKELY", "{verdict}");
    assert_eq!(verdict["component"], "inventory-service");
    assert_eq!(verdict["kind"], "change");
    assert!(verdict["evidence"][0]["excerpt"]
        .as_str()
        .unwrap()
        .contains("INVENTORY_DB_POOL_SIZE"));
    let session = &incident["chatSessions"][0];
    assert_eq!(incident["chatSessionId"], session["id"]);
    assert_eq!(session["messages"].as_array().unwrap().last().unwrap()["text"], summary);
    assert_eq!(
        session["status"], "completed",
        "the analysis, the session's workflow, has finished"
    );

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

/// A service stopping while an analysis runs hands the job back before it exits (interrupted,
/// due at once), rather than leaving it to wait a minute for its lease to expire.
#[tokio::test]
async fn a_stopping_service_hands_its_running_analysis_back() {
    let model = FakeOpenAi::start().await;
    let slow = "One sentence. ".repeat(60);
    model.set_default_reply(Reply::text(slow).chunk_delay(std::time::Duration::from_millis(500)));
    let app = spawn_app_with(|config| config.run_workers = false).await;
    let mut config = (*app.state.config).clone();
    config.run_workers = true;
    config.llm_base_url = Some(model.base_url().to_owned());
    config.worker_shutdown_grace_secs = 0;
    let stopping = vigil::Application::build_with_pool(config, app.db.clone())
        .await
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(stopping.run_until_stopped(shutdown.clone()));

    let user = app.new_user().await.id;
    post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let state_of_the_analysis = || async {
        sqlx::query_as::<_, (String, Option<String>)>("SELECT state, last_error FROM jobs WHERE kind = 'rca'")
            .fetch_optional(&app.db)
            .await
            .unwrap()
    };
    eventually("the analysis to run", || async {
        let running = state_of_the_analysis().await;
        running.filter(|(state, _)| state == "running").map(|_| ())
    })
    .await;

    shutdown.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(30), serving)
        .await
        .expect("the service stops")
        .unwrap()
        .unwrap();
    let (state, error) = state_of_the_analysis().await.unwrap();
    assert_eq!(state, "retryable", "handed back, due at once");
    assert!(error.unwrap_or_default().starts_with("interrupted"));
}

#[tokio::test]
async fn an_analysis_whose_session_the_user_deletes_meanwhile_still_completes() {
    let model = FakeOpenAi::start().await;
    let summary = "Pool exhausted. ".repeat(8);
    model.set_default_reply(Reply::text(summary.clone()).chunk_delay(std::time::Duration::from_millis(300)));
    let base_url = model.base_url().to_owned();
    let app = spawn_app_with(move |config| {
        config.llm_base_url = Some(base_url);
        config.rate_limit_per_minute = 10_000; // the test polls the incident while the model writes
    })
    .await;
    let user = app.new_user().await.id;
    let placed = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let id = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    let incident = || detail(&app, &user, &id);
    let session_id = eventually("the analysis to run with its session", || async {
        let incident = incident().await;
        let running = incident["auroraStatus"] == "running";
        running
            .then(|| incident["chatSessionId"].as_str().map(str::to_owned))
            .flatten()
    })
    .await;

    let deleted = app
        .send_as(&user, Method::DELETE, &format!("/chat_api/sessions/{session_id}"), None)
        .await;
    assert_eq!(deleted.status(), 200);

    let analysed = eventually("the analysis to end", || async {
        let incident = incident().await;
        (incident["auroraStatus"] != "running").then_some(incident)
    })
    .await;
    assert_eq!(analysed["auroraStatus"], "complete", "{analysed}");
    assert_eq!(
        analysed["verdict"]["model"]["rule"], "no_verdict",
        "the model's answer was read, and gated: {analysed}"
    );
    assert_eq!(
        app.send_as(&user, Method::GET, &format!("/chat_api/sessions/{session_id}"), None)
            .await
            .status(),
        404,
        "the deleted session stays deleted"
    );
}

/// Where a CLI is configured the analysis may run diagnostic commands, read-only ones only (no one
/// is there to confirm a change); a NUL in the model's text is dropped rather than failing the
/// analysis on every attempt.
#[tokio::test]
async fn the_analysis_runs_read_only_diagnostic_commands_and_survives_a_nul() {
    let cli_dir = std::env::temp_dir().join(format!("vigil-rca-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&cli_dir).unwrap();
    let kubectl = cli_dir.join("kubectl");
    std::fs::write(&kubectl, "#!/bin/sh\necho \"kubectl ran: $*\"\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let model = FakeOpenAi::start().await;
    model.push(Reply::tool_call(
        "cloud_cli",
        json!({ "command": "kubectl get pods -n shop" }),
    ));
    model.push(Reply::tool_call(
        "cloud_cli",
        json!({ "command": "kubectl delete pod checkout-1 -n shop" }),
    ));
    model.push(Reply::text(
        "Pods are crash-looping [1].\u{0} Restart them by hand.\n```json\n{\"verdict\": \"INCONCLUSIVE\", \"evidence\": [\"1\"]}\n```",
    ));
    let base_url = model.base_url().to_owned();
    let app = spawn_app_with(move |config| {
        config.llm_base_url = Some(base_url);
        config.agent_cli_dir = Some(cli_dir);
    })
    .await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;

    assert_eq!(incident["summary"], "Pods are crash-looping [1]. Restart them by hand.");
    let outputs: Vec<&str> = incident["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|citation| citation["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(outputs[0].contains("kubectl ran: get pods -n shop"), "{outputs:?}");
    assert!(
        outputs[1].starts_with("error: an automatic analysis only reads"),
        "{outputs:?}"
    );
    assert!(model.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|tool| tool["function"]["name"] == "cloud_cli"));
}

/// A model that trickles its answer (each chunk well within the client's idle timeout) cannot
/// hold an analysis `running` for ever: past `RCA_MODEL_TIMEOUT_SECS` the built-in summary stands.
#[tokio::test]
async fn a_trickling_model_runs_out_of_time_and_the_built_in_summary_stands() {
    let model = FakeOpenAi::start().await;
    let slow = "This answer arrives one small piece at a time, far too slowly to wait for.";
    model.push(Reply::text(slow).chunk_delay(std::time::Duration::from_millis(400)));
    let base_url = model.base_url().to_owned();
    let app = spawn_app_with(move |config| {
        config.llm_base_url = Some(base_url);
        config.rca_model_timeout_secs = 1;
    })
    .await;
    let user = app.new_user().await.id;

    let incident = analysed_incident(&app, &user).await;

    let summary = incident["summary"].as_str().unwrap();
    assert!(!summary.is_empty() && summary != slow, "{summary}");
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn an_analysis_waits_for_its_incident_to_settle() {
    let app = spawn_app_with(|config| config.rca_settle_secs = 120).await;
    let user = app.new_user().await.id;
    let placed = post_alert(&app, &user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    let id = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();
    let wait: f64 = eventually("the analysis job to be queued", || async {
        sqlx::query_scalar::<_, f64>(
            "SELECT extract(epoch FROM j.run_at - e.recorded_at)::float8 FROM jobs j
             JOIN events e ON e.aggregate_id = j.payload->>'incident_id' AND e.event_type = 'IncidentOpened'
             WHERE j.kind = 'rca' AND j.payload->>'incident_id' = $1",
        )
        .bind(&id)
        .fetch_optional(&app.db)
        .await
        .unwrap()
    })
    .await;
    assert!(
        (119.0..=121.0).contains(&wait),
        "the job runs {wait} s after the incident opened"
    );
    assert_eq!(
        detail(&app, &user, &id).await["auroraStatus"],
        "idle",
        "not analysed before then"
    );
}

#[tokio::test]
async fn an_alert_showing_no_failure_gets_an_inconclusive_verdict() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let incident = analysed_incident(&app, &user).await;
    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "INCONCLUSIVE", "{verdict}");
    assert!(verdict["component"].is_null());
    assert!(incident["summary"]
        .as_str()
        .unwrap()
        .contains("The cause is not established"));
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let schema = &document["components"]["schemas"]["VerdictView"];
    assert!(schema["properties"]["ruledOut"].is_object(), "{schema}");
}

#[tokio::test]
async fn a_failure_nothing_links_is_named_as_a_lead_when_the_cause_is_not_established() {
    let app = spawn_app().await;
    let user = app.new_user().await.id;
    let storage = json!({"status": "firing", "alerts": [{
        "status": "firing",
        "labels": {"alertname": "BlobStoreWriteQuorumLost", "service": "blob-store", "instance": "10.9.4.11:9000"},
        "annotations": {"description": "MinIO cluster lost write quorum: 2 of 4 drives offline"},
        // Four minutes before the analysed alert: in the same minutes, too far for the only
        // open incident to take an alert that names nothing of it.
        "startsAt": "2026-11-20T13:58:10Z",
        "fingerprint": "a1b2c3d4e5f60718"
    }]});
    let placed = post_alert(&app, &user, "/api/source_a/alerts", &storage).await;
    let storage_incident = placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned();

    let incident = analysed_incident(&app, &user).await;
    assert_ne!(incident["id"], storage_incident, "nothing links the two alerts");
    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "INCONCLUSIVE", "{verdict}");
    assert_eq!(verdict["unlinked"][0]["component"], "blob-store", "{verdict}");
    assert!(
        verdict["unlinked"][0]["evidence"]["excerpt"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("quorum"),
        "{verdict}"
    );
    let ruled_out = verdict["ruledOut"].as_array().unwrap();
    assert!(
        !ruled_out.iter().any(|r| r["subject"] == "blob-store"),
        "a lead is not ruled out"
    );
    let summary = incident["summary"].as_str().unwrap();
    assert!(summary.contains("The cause is not established"), "{summary}");
    assert!(summary.contains("blob-store showed a failure of its own"), "{summary}");
}
