//! The model's verdict gate, through the HTTP API: a model (the fake OpenAI-compatible server)
//! is given the ledger and answers with a verdict block; the incident detail's `verdict` shows
//! what the gate let through, and why.

use serde_json::{json, Value};
use vigil_llm::fake::{FakeOpenAi, Reply};

use crate::{
    helpers::{eventually, spawn_app_with, TestApp},
    incidents::detail,
    ingestion::{fixture, post_alert},
};

/// The service with `model` as its language model.
async fn app_with_model(model: &FakeOpenAi) -> TestApp {
    let base_url = model.base_url().to_owned();
    spawn_app_with(move |config| config.llm_base_url = Some(base_url)).await
}

/// The incident once its analysis completed.
async fn analysed(app: &TestApp, user: &str, id: &str) -> Value {
    eventually("the analysis to complete", || async {
        let incident = detail(app, user, id).await;
        (incident["auroraStatus"] == "complete").then_some(incident)
    })
    .await
}

/// An incident whose ledger finds a failed deploy of inventory-service LIKELY: the deploy
/// failed (`CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE`) 17 minutes before its error
/// rate alert. The change's evidence is the ledger's first, `E1`. The deployment opens an
/// incident of its own, analysed first, so that `replies` go to the alert's analysis.
async fn failed_deploy_incident(app: &TestApp, user: &str, model: &FakeOpenAi, replies: Vec<Reply>) -> String {
    let deployed = post_alert(app, user, "/api/source_f/deployment", &fixture("source_f", "firing")).await;
    analysed(app, user, deployed["alerts"][0]["incident_id"].as_str().unwrap()).await;
    for reply in replies {
        model.push(reply);
    }
    let mut alert = fixture("source_a", "firing");
    let element = &mut alert["alerts"][0];
    element["fingerprint"] = json!("1a2b3c4d5e6f7081");
    element["labels"] = json!({ "alertname": "InventoryServiceHighErrorRate", "service": "inventory-service",
        "namespace": "inventory", "severity": "critical", "environment": "production" });
    element["annotations"] = json!({ "summary": "inventory-service 5xx rate above 5%",
        "description": "5xx rate of inventory-service has been above 5% for 5 minutes (current 12.4%)." });
    element["startsAt"] = json!("2026-11-20T18:05:00Z");
    let placed = post_alert(app, user, "/api/source_a/alerts", &alert).await;
    placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned()
}

/// An incident whose one alert (p99 latency of checkout-api) shows no failure: the ledger
/// establishes nothing and holds no evidence.
async fn latency_incident(app: &TestApp, user: &str) -> String {
    let placed = post_alert(app, user, "/api/source_a/alerts", &fixture("source_a", "firing")).await;
    placed["alerts"][0]["incident_id"].as_str().unwrap().to_owned()
}

fn answer(prose: &str, block: Value) -> String {
    format!("{prose}\n\n```json\n{block}\n```")
}

fn last_thought(incident: &Value) -> String {
    let thoughts = incident["streamingThoughts"].as_array().unwrap();
    thoughts.last().unwrap()["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_model_agreeing_with_the_ledger_and_citing_its_evidence_is_accepted() {
    let model = FakeOpenAi::start().await;
    let prose = "The failed deploy of inventory-service [E1] left its pods crash-looping on a missing \
                 INVENTORY_DB_POOL_SIZE. Roll back, then set the variable.";
    // E7 does not exist: it is dropped.
    let block = json!({ "verdict": "LIKELY", "component": "inventory-service", "evidence": ["[E1]", "E7"] });
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;
    let id = failed_deploy_incident(&app, &user, &model, vec![Reply::text(answer(prose, block))]).await;

    let incident = analysed(&app, &user, &id).await;

    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "LIKELY", "{verdict}");
    assert_eq!(verdict["component"], "inventory-service");
    assert_eq!(verdict["kind"], "change");
    assert!(verdict["evidence"][0]["excerpt"]
        .as_str()
        .unwrap()
        .contains("INVENTORY_DB_POOL_SIZE"));
    let check = &verdict["model"];
    assert_eq!(check["accepted"], true, "{check}");
    assert_eq!(check["rule"], "accepted");
    assert_eq!(check["cited"], json!(["E1"]));
    assert_eq!(
        (&check["ledgerVerdict"], &check["ledgerComponent"]),
        (&json!("LIKELY"), &json!("inventory-service"))
    );
    assert_eq!(
        incident["summary"], prose,
        "the model's summary, its verdict block removed"
    );
    assert!(last_thought(&incident).starts_with(
        "Verdict gate: the model's conclusion (LIKELY: inventory-service), citing E1, is accepted as LIKELY"
    ));

    // The ledger went to the model as structured context, its evidence numbered.
    let request = model.requests().pop().unwrap();
    let prompt = request["messages"][1]["content"].as_str().unwrap().to_owned();
    let ledger = prompt
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap();
    let ledger: Value = serde_json::from_str(ledger).unwrap();
    assert_eq!(
        (&ledger["verdict"], &ledger["component"]),
        (&json!("LIKELY"), &json!("inventory-service"))
    );
    assert_eq!(ledger["hypotheses"][0]["evidence"][0]["id"], "E1");
    let system = request["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.contains("\"evidence\": [\"E1\", \"2\"]"),
        "the answer format: {system}"
    );
}

#[tokio::test]
async fn a_model_inventing_a_cause_and_citing_nothing_is_downgraded() {
    let model = FakeOpenAi::start().await;
    let invented = "Root cause: the payments-db primary ran out of connections after a vacuum.";
    let block = json!({ "verdict": "CONFIRMED", "component": "payments-db", "evidence": [] });
    model.push(Reply::text(answer(invented, block)));
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;
    let id = latency_incident(&app, &user).await;

    let incident = analysed(&app, &user, &id).await;

    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "INCONCLUSIVE", "{verdict}");
    assert!(verdict["component"].is_null());
    let check = &verdict["model"];
    assert_eq!(
        (&check["accepted"], &check["rule"]),
        (&json!(false), &json!("cites_nothing")),
        "{check}"
    );
    assert_eq!(
        (&check["claimedVerdict"], &check["claimedComponent"]),
        (&json!("CONFIRMED"), &json!("payments-db"))
    );
    let summary = incident["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "Verdict: INCONCLUSIVE. The model's conclusion (CONFIRMED: payments-db) was not accepted: it cites no evidence."
        ),
        "{summary}"
    );
    assert!(
        !summary.contains("vacuum"),
        "the invented cause is not the summary: {summary}"
    );
    assert!(
        summary.contains("The cause is not established"),
        "the built-in reading: {summary}"
    );
    assert!(last_thought(&incident).contains("is downgraded to INCONCLUSIVE: it cites no evidence"));
}

#[tokio::test]
async fn a_model_citing_only_an_empty_tool_output_is_downgraded() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::tool_call(
        "recent_deployments",
        json!({ "service": "payments-db" }),
    ));
    let block = json!({ "verdict": "CONFIRMED", "component": "payments-db", "evidence": ["[1]"] });
    model.push(Reply::text(answer(
        "A bad payments-db deploy [1] slowed checkout.",
        block,
    )));
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;
    let id = latency_incident(&app, &user).await;

    let incident = analysed(&app, &user, &id).await;

    assert_eq!(incident["citations"][0]["output"], "[]", "the tool found no rows");
    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "INCONCLUSIVE", "{verdict}");
    let check = &verdict["model"];
    assert_eq!(
        (&check["accepted"], &check["rule"]),
        (&json!(false), &json!("empty_tool_outputs")),
        "{check}"
    );
    assert_eq!(check["cited"], json!(["1"]));
    assert!(
        check["reason"].as_str().unwrap().contains("[1] recent_deployments"),
        "{check}"
    );
}

#[tokio::test]
async fn a_model_contradicting_the_ledger_without_new_evidence_is_downgraded() {
    let model = FakeOpenAi::start().await;
    let block = json!({ "verdict": "CONFIRMED", "component": "payments-db", "evidence": ["E1", "1"] });
    let replies = vec![
        Reply::tool_call("search_incidents", json!({ "query": "inventory" })),
        Reply::text(answer("payments-db is the cause [E1][1].", block)),
    ];
    let app = app_with_model(&model).await;
    let user = app.new_user().await.id;
    let id = failed_deploy_incident(&app, &user, &model, replies).await;

    let incident = analysed(&app, &user, &id).await;

    let output = incident["citations"][0]["output"].as_str().unwrap();
    assert!(
        output.contains("inventory-service"),
        "a real, non-empty result: {output}"
    );
    let verdict = &incident["verdict"];
    assert_eq!(verdict["verdict"], "INCONCLUSIVE", "{verdict}");
    assert!(verdict["component"].is_null());
    let check = &verdict["model"];
    assert_eq!(
        (&check["accepted"], &check["rule"]),
        (&json!(false), &json!("contradicts_ledger")),
        "{check}"
    );
    assert_eq!(
        (&check["ledgerVerdict"], &check["ledgerComponent"]),
        (&json!("LIKELY"), &json!("inventory-service"))
    );
    assert!(
        check["reason"]
            .as_str()
            .unwrap()
            .contains("ledger found LIKELY inventory-service"),
        "{check}"
    );
    let summary = incident["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Verdict: INCONCLUSIVE. The model's conclusion (CONFIRMED: payments-db) was not accepted"),
        "{summary}"
    );
    assert!(
        summary.contains("The built-in analyst's reading follows.\n\nVerdict: LIKELY. Root cause: inventory-service"),
        "{summary}"
    );
}

/// A model that fails, or answers nothing, leaves the built-in verdict as it is, with no gate.
#[tokio::test]
async fn when_the_model_fails_or_answers_nothing_the_built_in_verdict_stands() {
    let model = FakeOpenAi::start().await;
    let app = app_with_model(&model).await;
    for replies in [vec![Reply::status(500); 3], vec![Reply::text("  ")]] {
        let user = app.new_user().await.id;
        let id = failed_deploy_incident(&app, &user, &model, replies.clone()).await;

        let incident = analysed(&app, &user, &id).await;

        let verdict = &incident["verdict"];
        assert_eq!(
            (&verdict["verdict"], &verdict["component"]),
            (&json!("LIKELY"), &json!("inventory-service")),
            "{verdict}"
        );
        assert!(verdict.get("model").is_none(), "no model verdict to gate: {verdict}");
        let summary = incident["summary"].as_str().unwrap();
        assert!(
            summary.starts_with("Verdict: LIKELY. Root cause: inventory-service")
                && summary.contains("built-in analyst"),
            "{summary}"
        );
        assert!(!last_thought(&incident).starts_with("Verdict gate"));
        let asked = model
            .requests()
            .iter()
            .filter(|request| request["messages"][1]["content"].as_str().unwrap().contains(&id))
            .count();
        assert_eq!(asked, replies.len(), "three attempts, or one empty answer");
    }
}

/// The detail's schema documents the gate's record.
#[tokio::test]
async fn the_gates_record_is_documented() {
    let app = crate::helpers::spawn_app().await;
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let schemas = &document["components"]["schemas"];
    assert!(
        schemas["VerdictView"]["properties"]["model"].is_object(),
        "{}",
        schemas["VerdictView"]
    );
    let check = &schemas["ModelCheckView"]["properties"];
    for field in [
        "claimedVerdict",
        "claimedComponent",
        "cited",
        "accepted",
        "rule",
        "reason",
        "ledgerVerdict",
    ] {
        assert!(check[field].is_object(), "{field}: {check}");
    }
}
