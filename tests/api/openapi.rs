use serde_json::Value;

use crate::helpers::spawn_app;

#[tokio::test]
async fn openapi_document_lists_every_endpoint() {
    let app = spawn_app().await;
    let response = app.get("/api/openapi.json").await;
    assert_eq!(response.status(), 200);
    let document: Value = response.json().await.unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = document["paths"].as_object().unwrap();
    for (path, method) in [
        ("/api/auth/register", "post"),
        ("/api/auth/login", "post"),
        ("/api/auth/logout", "post"),
        ("/api/auth/change-password", "post"),
        ("/health", "get"),
        ("/health/liveness", "get"),
        ("/health/readiness", "get"),
        ("/metrics", "get"),
        ("/api/openapi.json", "get"),
        ("/chat_api/sessions", "get"),
        ("/chat_api/sessions", "post"),
        ("/chat_api/sessions/{session_id}", "get"),
        ("/chat_api/sessions/{session_id}", "put"),
        ("/chat_api/sessions/{session_id}", "delete"),
        ("/chat_api/sessions/bulk-delete", "delete"),
        ("/api/incidents", "get"),
        ("/api/incidents/{incident_id}", "get"),
        ("/api/incidents/{incident_id}", "patch"),
        ("/api/incidents/{target_incident_id}/merge-alert", "post"),
        ("/api/incidents/{incident_id}/events", "get"),
        ("/api/incidents/{incident_id}/split", "post"),
        ("/api/topology", "get"),
        ("/api/topology", "put"),
        ("/api/source_a/alerts", "post"),
        ("/api/source_b/webhook", "post"),
        ("/api/source_c/alerts", "post"),
        ("/api/source_d/webhook", "post"),
        ("/api/source_e/alerts", "post"),
        ("/api/source_f/deployment", "post"),
        ("/api/source_g/deployment", "post"),
        ("/api/source_h/problems", "post"),
        ("/api/source_i/webhook", "post"),
        ("/api/ingestion-tokens", "get"),
        ("/api/ingestion-tokens", "post"),
        ("/api/ingestion-tokens/{token_id}", "delete"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} documented"
        );
    }
}

/// What the spec requires of the detail's arrays and the PATCH body is what the document says,
/// and every operation the rate limiter counts documents its 429.
#[tokio::test]
async fn openapi_document_follows_the_spec_tables() {
    let app = spawn_app().await;
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let schemas = &document["components"]["schemas"];
    let required =
        |schema: &str| -> Vec<String> { serde_json::from_value(schemas[schema]["required"].clone()).unwrap() };
    for (schema, fields) in [
        ("CitationView", ["id", "key", "toolName", "createdAt"].as_slice()),
        (
            "CorrelatedAlertView",
            [
                "id",
                "sourceType",
                "alertTitle",
                "correlationStrategy",
                "correlationScore",
                "receivedAt",
            ]
            .as_slice(),
        ),
    ] {
        let mut listed = required(schema);
        listed.sort();
        let mut expected: Vec<String> = fields.iter().map(|field| field.to_string()).collect();
        expected.sort();
        assert_eq!(listed, expected, "{schema}");
    }
    // An addition: the incident a new firing of a resolved or merged incident's alert follows.
    // The detail flattens the list's fields in: its own are one part of an `allOf`.
    let detail = &schemas["IncidentDetail"];
    let own = detail["allOf"]
        .as_array()
        .into_iter()
        .flatten()
        .chain([detail])
        .find(|part| part["properties"].get("previousIncidentId").is_some())
        .unwrap_or_else(|| panic!("no previousIncidentId in {detail}"));
    let own_required = own["required"].as_array().unwrap();
    assert!(own_required.contains(&"previousIncidentId".into()), "{own}");
    let link = own["properties"]["previousIncidentId"].to_string();
    assert!(link.contains("uuid") && link.contains("null"), "{link}");
    let patch = &document["paths"]["/api/incidents/{incident_id}"]["patch"];
    let body = &patch["requestBody"]["content"]["application/json"]["schema"]["$ref"];
    assert_eq!(body, "#/components/schemas/IncidentPatch");
    let status = schemas["IncidentPatch"]["properties"]["status"].to_string();
    assert!(status.contains("PatchedStatus"), "{status}");
    assert_eq!(
        schemas["PatchedStatus"]["enum"],
        serde_json::json!(["investigating", "analyzed", "merged", "resolved"])
    );

    assert_eq!(
        schemas["ThoughtType"]["enum"],
        serde_json::json!(["analysis", "hypothesis", "evidence", "conclusion"])
    );
    assert_eq!(
        schemas["SuggestionRisk"]["enum"],
        serde_json::json!(["safe", "medium", "high"])
    );
    let mut checks: Vec<String> = serde_json::from_value(schemas["HealthChecks"]["required"].clone()).unwrap();
    checks.sort();
    assert_eq!(
        checks,
        ["cache", "chatbot_websocket", "database", "task_queue", "vector_store"]
    );

    let responses = |path: &str, method: &str| document["paths"][path][method]["responses"].clone();
    for (path, method) in [
        ("/api/incidents/{incident_id}", "patch"),
        ("/chat_api/sessions/{session_id}", "put"),
        ("/api/source_a/alerts", "post"),
        ("/cloud_b/status", "get"),
    ] {
        assert!(
            responses(path, method).get("429").is_some(),
            "{method} {path} documents 429"
        );
    }
    for (path, method) in [("/health", "get"), ("/metrics", "get"), ("/api/openapi.json", "get")] {
        assert!(
            responses(path, method).get("429").is_none(),
            "{method} {path} is exempt"
        );
    }
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status() {
    let app = spawn_app().await;
    app.get("/health/liveness").await;
    app.get("/api/nowhere").await;
    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(
        text.contains(r#"http_requests_total{method="GET",route="/health/liveness",status="200"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"route="unmatched",status="404""#), "{text}");
    assert!(text.contains("http_request_duration_seconds_bucket"));
}

/// Same-named request types of different endpoints (a provider's `LoginRequest` and the users'
/// one, say) must not share one schema in the document: the last one registered would describe
/// them all.
#[tokio::test]
async fn each_body_is_documented_with_its_own_fields() {
    let app = spawn_app().await;
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let properties = |path: &str| -> Vec<String> {
        let reference = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} has a request body schema"))
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let mut names: Vec<String> = document["components"]["schemas"][&reference]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{reference} has properties"))
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    };
    assert_eq!(properties("/api/auth/login"), ["email", "password"]);
    assert_eq!(properties("/cloud_a/login"), ["userId"]);
    assert_eq!(properties("/login"), ["userId"]);
    assert!(properties("/cloud_c/login").contains(&"tenantId".to_owned()));
    assert!(properties("/cloud_d_api/cloud_d/connect").contains(&"accessKey".to_owned()));
    assert!(properties("/cloud_e_api/cloud_e/connect").contains(&"clientId".to_owned()));
}
