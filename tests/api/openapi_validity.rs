//! The served OpenAPI document is valid OpenAPI 3.1, as `openapi-spec-validator` (the Python
//! reference validator client generators' users rely on) judges it, and the ingestion payload
//! schemas say what the endpoints accept. No Rust crate validates 3.1 in full (unique operation
//! ids, resolvable references, the 3.1 meta-schema), so the tests run the Python tool, and its
//! `jsonschema` dependency, from a virtual environment of their own under the cargo target
//! directory.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{helpers::spawn_app, ingestion::fixture};

/// Pinned so that a new release cannot change the verdict unannounced; the venv is named after
/// it, so changing it here makes a new one.
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

#[tokio::test]
async fn served_document_is_valid_openapi_3_1() {
    let app = spawn_app().await;
    let response = app.get("/api/openapi.json").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));

    // Said here too, with the offending id, because client generators need it most.
    let mut seen = HashSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has an operationId"));
            assert!(
                seen.insert(id.to_owned()),
                "operationId {id} ({method} {path}) is used twice"
            );
        }
    }

    let file = TempFile::with(&text);
    let output = python(vec![
        "-m".into(),
        "openapi_spec_validator".into(),
        "--schema".into(),
        "3.1".into(),
        "--validation-errors".into(),
        "all".into(),
        file.path_text(),
    ])
    .await;
    assert!(
        output.status.success(),
        "openapi-spec-validator rejects the document:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// For real notifications (the fixtures) and for the edge cases of the parsers' readers, the
/// documented payload schema and the endpoint agree: valid exactly when accepted (202).
#[tokio::test]
async fn ingestion_payload_schemas_accept_what_the_endpoints_accept() {
    let app = spawn_app().await;
    let document: Value = app.get("/api/openapi.json").await.json().await.unwrap();
    let mut cases: Vec<(&str, Value)> = Vec::new();
    for source in ["a", "b", "c", "d", "e", "f", "g", "h", "i"] {
        for name in ["firing", "related", "resolved"] {
            cases.push((source, fixture(&format!("source_{source}"), name)));
        }
    }
    cases.extend([
        ("a", json!({ "alerts": [] })),
        ("a", json!({ "alerts": [{ "labels": { "alertname": "HighCPU" } }] })),
        ("a", json!({ "alerts": [{ "fingerprint": " ", "labels": {} }] })),
        ("a", json!({ "alerts": [{ "fingerprint": "f1", "startsAt": 0.5 }] })),
        ("a", json!({ "alerts": [{ "fingerprint": "f1", "startsAt": "0" }] })),
        ("b", json!({ "event": { "event_type": "service.updated" } })),
        ("b", json!({ "event": { "data": { "type": "incident" } } })),
        ("b", json!({ "event": { "data": { "type": "ping" } } })),
        ("b", json!({ "event": { "data": { "type": ["incident"] } } })),
        ("c", json!({ "host": "web-1", "alarm": "cpu" })),
        ("c", json!({ "node_id": " ", "host": ["web-1"], "name": "cpu" })),
        ("c", json!({ "node_id": "n1", "name": "cpu", "alarm": {} })),
        (
            "c",
            json!({ "alert": { "name": "cpu" }, "node": { "hostname": "web-1" } }),
        ),
        ("f", json!({ "job_name": "deploy", "build_number": " 12 " })),
        ("f", json!({ "job_name": "deploy", "build_number": "twelve" })),
        (
            "f",
            json!({ "job_name": "deploy", "build_number": 12, "duration_ms": 2_592_000_001_i64 }),
        ),
        ("h", json!({ "ProblemID": ["P-1"], "PID": "1" })),
        ("h", json!({ "ProblemID": ["P-1"] })),
    ]);

    let file = TempFile::with(&document.to_string());
    let mut args = vec!["-c".to_owned(), VALIDATE_PAYLOADS.to_owned(), file.path_text()];
    let mut accepted = Vec::new();
    for (source, payload) in &cases {
        let path = format!("/api/source_{source}/{}", endpoint_leaf(source));
        let response = app.send_as("schema-check", Method::POST, &path, Some(payload)).await;
        let status = response.status().as_u16();
        assert!(status == 202 || status == 400, "{path} {payload}: {status}");
        accepted.push(status == 202);
        args.push(format!("Source{}Payload", source.to_uppercase()));
        args.push(payload.to_string());
    }
    let output = python(args).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let valid: Vec<bool> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(valid.len(), cases.len());
    for ((source, payload), (valid, accepted)) in cases.iter().zip(valid.into_iter().zip(accepted)) {
        assert_eq!(
            valid, accepted,
            "source_{source} {payload}: schema-valid {valid}, accepted {accepted}"
        );
    }
}

/// Prints, as a JSON list, whether each payload (argv: document, then schema name and payload
/// pairs) is valid against the named component schema, formats included.
const VALIDATE_PAYLOADS: &str = r#"
import json, sys
from jsonschema import Draft202012Validator, FormatChecker
schemas = json.load(open(sys.argv[1]))["components"]["schemas"]
pairs = zip(sys.argv[2::2], sys.argv[3::2])
print(json.dumps([Draft202012Validator(schemas[name], format_checker=FormatChecker()).is_valid(json.loads(payload))
                  for name, payload in pairs]))
"#;

fn endpoint_leaf(source: &str) -> &'static str {
    match source {
        "a" | "c" | "e" => "alerts",
        "b" | "d" | "i" => "webhook",
        "f" | "g" => "deployment",
        _ => "problems",
    }
}

/// The venv's interpreter run with `args`, off the async runtime.
async fn python(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(validator_venv().join("bin/python"))
            .args(&args)
            .output()
            .expect("the venv's python runs")
    })
    .await
    .unwrap()
}

/// The venv holding the validator, made on first use. Test processes run at once (nextest runs
/// each test in its own), so each builds in a directory of its own and renames it into place
/// only when complete: the first rename wins, and the others use the winner's. (The venv's
/// scripts name their interpreter by its old path; `bin/python` itself works from anywhere.)
fn validator_venv() -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let version = VALIDATOR.rsplit('=').next().unwrap();
    let venv = base.join(format!("openapi-venv-{version}"));
    if venv.exists() {
        return venv;
    }
    let building = base.join(format!("openapi-venv-building-{}", Uuid::new_v4().simple()));
    run(Command::new("python3").arg("-m").arg("venv").arg(&building));
    run(Command::new(building.join("bin/pip")).args(["install", "--quiet", "--disable-pip-version-check", VALIDATOR]));
    if let Err(error) = std::fs::rename(&building, &venv) {
        std::fs::remove_dir_all(&building).ok();
        assert!(venv.exists(), "moving the validator venv into place: {error}");
    }
    venv
}

fn run(command: &mut Command) {
    let output = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A file in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn with(text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("vigil-openapi-{}.json", Uuid::new_v4().simple()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    fn path_text(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}
