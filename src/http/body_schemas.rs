//! Request body schemas that utoipa's derive cannot express, written into the served document as
//! JSON Schema (2020-12, the dialect of OpenAPI 3.1).
//!
//! The nine ingestion payloads say what `ingest::parsers` accepts: every field a parser reads, with the
//! JSON types its reader takes (`parsers/value/`), and what it requires. Fields no parser reads
//! are free. A body the schema allows is accepted, and one it refuses is a 400, so client
//! generators and fuzzers see the real contract.
//!
//! Written as JSON rather than with utoipa's builders: the readers take type lists (`"string"`,
//! `"number"` or an array of them), which utoipa's schema objects cannot hold with `items`.

use serde_json::{json, Value};

use crate::ingest::parsers::Source;

/// Characters Rust's `str::trim` removes (Unicode White_Space), which is what makes a field blank.
/// Spelled out because a regex's `\s` differs from it from one engine to another.
const SPACE: &str = r"[\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";
const NOT_SPACE: &str = r"[^\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// Adds a `SourceXPayload` schema per source to the document's components and makes it the
/// request body of the source's endpoint; says that an incident PATCH sets at least one field.
pub fn document(openapi: &mut Value) {
    // A PATCH whose fields are all absent or null is "no valid fields to update" (400, spec).
    if let Some(patch) = openapi.pointer_mut("/components/schemas/IncidentPatch") {
        patch["anyOf"] = ["status", "auroraStatus", "summary", "activeTab"]
            .map(|field| json!({ "required": [field], "properties": { field: { "type": "string" } } }))
            .into();
    }
    for source in Source::ALL {
        let name = format!("{}Payload", pascal(source.as_str()));
        openapi["components"]["schemas"][&name] = payload(source);
        openapi["paths"][source.endpoint()]["post"]["requestBody"]["content"]["application/json"]["schema"] =
            json!({ "$ref": format!("#/components/schemas/{name}") });
    }
}

fn pascal(token: &str) -> String {
    token
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn payload(source: Source) -> Value {
    match source {
        Source::SourceA => source_a(),
        Source::SourceB => source_b(),
        Source::SourceC => source_c(),
        Source::SourceD => object(
            json!({
                "alert_id": id(), "tags": tags(), "scope": text(), "alert_transition": word(),
                "alert_type": word(), "title": text(), "event_title": text(), "body": text(),
                "date_happened": time(), "last_updated": time(), "link": text(),
            }),
            &["alert_id"],
        ),
        Source::SourceE => object(
            json!({
                "search_name": id(), "app": text(), "alert_status": text(), "severity": text(),
                "trigger_time": time(), "results_link": text(),
                "result": optional_object(json!({
                    "alert_status": text(), "_raw": text(), "service": text(), "host": text(), "_time": time(),
                })),
            }),
            &["search_name"],
        ),
        Source::SourceF => source_f(),
        Source::SourceG => object(
            json!({
                "pipeline": object(
                    json!({ "run_id": id(), "name": text(), "status": word(), "url": text() }),
                    &["run_id"],
                ),
                "application": text(), "environment": text(), "message": text(),
                "finished_at": time(), "started_at": time(), "triggered_by": text(), "failed_stage": text(),
                "commit": optional_object(json!({ "branch": text(), "sha": text(), "repo_url": text() })),
            }),
            &["pipeline"],
        ),
        Source::SourceH => with_first_id(
            object(
                json!({
                    "PID": alternative_id(), "ProblemID": text(), "Tags": tags(), "ImpactedEntity": text(),
                    "ProblemTitle": text(), "State": word(), "ProblemSeverity": text(), "StartTime": time(),
                    "ProblemURL": text(), "ProblemImpact": text(), "ProblemDetailsText": text(),
                    "ImpactedEntities": objects(json!({ "type": text(), "name": text() })),
                }),
                &[],
            ),
            &["PID", "ProblemID"],
        ),
        Source::SourceI => object(
            json!({
                "incident": object(
                    json!({
                        "id": id(), "title": text(), "description": text(), "status": word(),
                        "severity": text(), "start": time(),
                        "alerts": objects(json!({
                            "condition_name": text(), "description": text(), "service": text(),
                            "link": text(), "id": text(),
                        })),
                        "incident_tags": objects(json!({ "tag_id": text(), "tag_value": label_values() })),
                    }),
                    &["id"],
                ),
            }),
            &["incident"],
        ),
    }
}

/// Alertmanager: `alerts[]`, each keyed by its `fingerprint`, or by its labels when it has none.
fn source_a() -> Value {
    let labels = ["alertname", "service", "job", "environment", "env", "severity"]
        .map(|name| (name.to_owned(), text()))
        .into_iter()
        .collect::<serde_json::Map<_, _>>();
    let mut alert = object(
        json!({
            "fingerprint": id_or_null(),
            "labels": optional_object(Value::Object(labels)),
            "annotations": optional_object(json!({ "summary": text(), "description": text() })),
            "status": word(), "startsAt": time(),
            "generatorURL": text(), "dashboardURL": text(), "panelURL": text(),
        }),
        &[],
    );
    alert["anyOf"] = json!([
        { "required": ["fingerprint"], "properties": { "fingerprint": id() } },
        { "required": ["labels"], "properties": { "labels": { "type": "object", "minProperties": 1 } } },
    ]);
    object(
        json!({
            "alerts": { "type": "array", "minItems": 1, "items": alert },
            "status": word(),
        }),
        &["alerts"],
    )
}

/// A paging tool's webhook. Events about something other than an incident are accepted and
/// ignored, as is an incident's data of another type or an attachment naming its incident; only
/// the fields read in each case are typed in it.
fn source_b() -> Value {
    let incident = object(
        json!({
            "type": word(), "id": id(), "status": word(), "title": text(), "summary": text(),
            "number": text(), "description": text(), "urgency": text(), "created_at": time(),
            "html_url": text(), "incident_key": text(),
            "service": optional_object(json!({ "summary": text(), "name": text() })),
            "priority": optional_object(json!({ "name": text(), "summary": text() })),
            "escalation_policy": optional_object(json!({ "summary": text() })),
            "teams": objects(json!({ "summary": text() })),
        }),
        &["id"],
    );
    let attachment = object(
        json!({ "type": word(), "id": { "type": "null" }, "incident": { "type": "object" } }),
        &["incident"],
    );
    let other_type = object(
        json!({ "type": {
            "type": "string", "pattern": format!("^{SPACE}*(?!{}{SPACE}*$){NOT_SPACE}", any_case("incident")),
        } }),
        &["type"],
    );
    let mut event = object(json!({ "event_type": word(), "resource_type": word() }), &[]);
    event["anyOf"] = json!([
        { "required": ["data"], "properties": { "data": incident, "occurred_at": time() } },
        { "required": ["data"], "properties": { "data": attachment } },
        { "required": ["data"], "properties": { "data": other_type } },
        { "required": ["event_type"], "properties": { "event_type": {
            "type": "string", "pattern": format!(r"^{SPACE}*(?!{}\.){NOT_SPACE}", any_case("incident")),
        } } },
        { "required": ["resource_type"], "properties": { "resource_type": {
            "type": "string", "pattern": format!("^{SPACE}*(?!{}{SPACE}*$){NOT_SPACE}", any_case("incident")),
        } } },
    ]);
    object(json!({ "event": event }), &["event"])
}

/// A host monitor: a flat alarm, or (when `alert` is an object) a nested one with its `node`.
fn source_c() -> Value {
    let mut flat = json!({
        "node_id": alternative_id(), "host": text(), "name": alternative_id(), "alarm": alternative_id(),
        "status": word(), "info": text(), "message": text(),
    });
    for label in [
        "context",
        "family",
        "class",
        "type",
        "component",
        "space",
        "room",
        "units",
    ] {
        flat[label] = label_values();
    }
    // Read as a label and as text: text's types.
    flat["chart"] = text();
    let flat = with_first_id(
        with_first_id(
            json!({ "properties": flat.as_object().cloned().unwrap_or_default() }),
            &["node_id", "host"],
        ),
        &["name", "alarm"],
    );
    let nested_alert = object(
        json!({
            "name": id(),
            "chart": { "anyOf": [
                { "type": ["string", "number"] },
                optional_object(json!({ "name": text(), "context": text(), "family": text() })),
            ] },
            "state": optional_object(json!({ "status": word() })),
            "status": word(),
            "rendered": optional_object(json!({ "summary": text(), "info": text() })),
            "classification": text(), "type": text(), "component": text(),
        }),
        &["name"],
    );
    let node = with_first_id(
        object(json!({ "id": alternative_id(), "hostname": text() }), &[]),
        &["id", "hostname"],
    );
    let nested = json!({
        "required": ["alert", "node"],
        "properties": {
            "alert": nested_alert, "node": node,
            "space": optional_object(json!({ "name": text() })),
            "room": optional_object(json!({ "name": text() })),
        },
    });
    json!({
        "type": "object",
        "properties": { "when": time(), "alert_url": text(), "alert": { "type": ["object", "null"] } },
        "anyOf": [
            { "allOf": [{ "properties": { "alert": { "type": "null" } } }, flat] },
            nested,
        ],
    })
}

/// A CI server's build: `job_name` and `build_number` say which build it is.
fn source_f() -> Value {
    object(
        json!({
            "job_name": id(),
            "build_number": { "anyOf": [
                { "type": "integer", "minimum": i64::MIN, "maximum": i64::MAX },
                { "type": "string", "pattern": format!("^{SPACE}*[+-]?[0-9]{{1,18}}{SPACE}*$") },
            ] },
            "service": text(), "environment": text(), "result": word(), "phase": word(), "message": text(),
            "timestamp": time(),
            "duration_ms": { "anyOf": [
                { "type": "integer", "minimum": 0, "maximum": 2_592_000_000_i64 },
                // 0 to 2592000000 (30 days).
                { "type": "string", "pattern": format!(
                    "^{SPACE}*([0-9]{{0,9}}|[01][0-9]{{9}}|2[0-4][0-9]{{8}}|25[0-8][0-9]{{7}}|259[01][0-9]{{6}}|2592000000){SPACE}*$"
                ) },
                { "type": "null" },
            ] },
            "build_url": text(), "deployer": text(), "version": text(),
            "git": optional_object(json!({ "branch": text(), "commit_sha": text(), "repository": text() })),
        }),
        &["job_name", "build_number"],
    )
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// An object that may be absent or `null` (read as empty).
fn optional_object(properties: Value) -> Value {
    json!({ "type": ["object", "null"], "properties": properties })
}

/// An array of objects; its `null` elements are skipped.
fn objects(properties: Value) -> Value {
    json!({ "type": ["array", "null"], "items": { "type": ["object", "null"], "properties": properties } })
}

/// `Obj::require_first_id`: at least one of `names` is set (not null, not blank), and the first
/// set one is an id; the ones after it are not read for it.
fn with_first_id(mut schema: Value, names: &[&str]) -> Value {
    let unset = json!({ "anyOf": [{ "type": "null" }, { "type": "string", "pattern": format!("^{SPACE}*$") }] });
    let choices: Vec<Value> = (0..names.len())
        .map(|chosen| {
            let mut properties = serde_json::Map::new();
            for earlier in &names[..chosen] {
                properties.insert((*earlier).to_owned(), unset.clone());
            }
            properties.insert(names[chosen].to_owned(), id());
            json!({ "required": [names[chosen]], "properties": properties })
        })
        .collect();
    let choice = json!({ "anyOf": choices });
    match schema.get_mut("allOf").and_then(Value::as_array_mut) {
        Some(all) => all.push(choice),
        None => schema["allOf"] = json!([choice]),
    }
    schema
}

/// `Obj::require_id`: a string that is not blank, or a number.
fn id() -> Value {
    json!({ "type": ["string", "number"], "pattern": NOT_SPACE })
}

/// A field read as an id when set: its JSON type, whether or not it is set.
fn id_or_null() -> Value {
    json!({ "type": ["string", "number", "null"] })
}

/// One of alternative ids (`with_first_id` says which must be what).
fn alternative_id() -> Value {
    json!({ "description": "an id (a non-blank string or a number) when it is the first of its alternatives set" })
}

/// `Obj::text`: a string or a number, or a list of them (its first value).
fn text() -> Value {
    json!({ "type": ["string", "number", "array", "null"], "items": { "type": ["string", "number", "null"] } })
}

/// `Obj::label_values`: like text, booleans too.
fn label_values() -> Value {
    json!({
        "type": ["string", "number", "boolean", "array", "null"],
        "items": { "type": ["string", "number", "boolean", "null"] },
    })
}

/// `Obj::tags`: a comma-separated string, or a list of strings and numbers.
fn tags() -> Value {
    json!({ "type": ["string", "array", "null"], "items": { "type": ["string", "number", "null"] } })
}

/// `Obj::word`: a string of a fixed vocabulary (any string reads; a number is malformed).
fn word() -> Value {
    json!({ "type": ["string", "null"] })
}

/// `Obj::time`: an RFC 3339 time, an epoch (number or digits; its magnitude gives the unit), or an
/// unset marker (blank, zero, negative).
fn time() -> Value {
    json!({ "anyOf": [
        { "type": "string", "format": "date-time" },
        // Epochs under a second after 1970 are neither times nor unset markers.
        { "type": "string", "pattern": format!(r"^{SPACE}*(0+(\.0*)?|0*[1-9][0-9]{{0,17}}(\.[0-9]*)?)?{SPACE}*$") },
        { "type": "number", "maximum": 0 },
        { "type": "number", "minimum": 1, "exclusiveMaximum": 9e18 },
        { "type": "null" },
    ] })
}

/// A regex that matches `word` in any ASCII case (JSON Schema regexes have no case flag).
fn any_case(word: &str) -> String {
    word.chars()
        .map(|letter| format!("[{}{}]", letter.to_ascii_uppercase(), letter))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_has_a_named_payload() {
        let mut openapi = json!({ "components": { "schemas": {} }, "paths": {} });
        document(&mut openapi);
        assert_eq!(
            openapi["paths"]["/api/source_f/deployment"]["post"]["requestBody"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/SourceFPayload"
        );
        assert_eq!(
            openapi["components"]["schemas"]["SourceFPayload"]["required"],
            json!(["job_name", "build_number"])
        );
        assert_eq!(any_case("ab"), "[Aa][Bb]");
    }
}
