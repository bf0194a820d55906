//! source_b: paging tool, v3 webhook. The envelope is `event`; the incident is `event.data`.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{account, AlertKind, NormalizedAlert, ParseError, RawPayload, Source};
use super::{tags::present_labels, time::EpochUnit, value::Obj, vocabulary::normalize_severity};

/// `None` for an event that changes no alert: one about something other than an incident (the
/// subscription's `pagey.ping`, a service updated), or an incident event whose data is something
/// attached to the incident rather than the incident itself (a note, a responder, a status update,
/// custom field values).
pub(super) fn parse(payload: &Value, received_at: DateTime<Utc>) -> Result<Option<NormalizedAlert>, ParseError> {
    let root = Obj::root(payload)?;
    let event = root.require_object("event")?;
    let event_type = event.word("event_type")?.map(|word| word.to_lowercase());
    let resource_type = event.word("resource_type")?.map(|word| word.to_lowercase());
    let about_an_incident = resource_type.as_deref().is_none_or(|resource| resource == "incident")
        && event_type.as_deref().is_none_or(|kind| kind.starts_with("incident."));
    if !about_an_incident {
        return Ok(None);
    }
    let incident = event.require_object("data")?;
    // A word of a fixed vocabulary, like the event's: a number or a list there is malformed.
    let data_type = incident.word("type")?.map(|word| word.to_lowercase());
    let attached = incident.get("id").is_none() && incident.object("incident")?.is_some();
    if attached || data_type.as_deref().is_some_and(|kind| kind != "incident") {
        return Ok(None);
    }
    let key = incident.require_id("id")?;
    let status = incident.word("status")?.map(|word| word.to_lowercase());
    let resolved = event_type.as_deref() == Some("incident.resolved") || status.as_deref() == Some("resolved");
    let title = match incident.first_text(&["title", "summary"])? {
        Some(title) => title,
        None => untitled(&incident, &key)?,
    };

    let link = incident.text("html_url")?;
    Ok(Some(NormalizedAlert {
        source: Source::SourceB,
        kind: AlertKind::Alert,
        group_key: key.clone(),
        key,
        title,
        detail: incident.text("description")?,
        service: incident.object_or_empty("service")?.first_text(&["summary", "name"])?,
        environment: None,
        severity: severity(&incident)?,
        fired_at: incident
            .time("created_at", EpochUnit::Seconds)?
            .or(event.time("occurred_at", EpochUnit::Seconds)?)
            .unwrap_or(received_at),
        resolved,
        state: event_type.or(status).unwrap_or_else(|| "incident.triggered".to_owned()),
        account: account::subdomain(link.as_deref()),
        source_url: link,
        dashboard_url: None,
        panel_url: None,
        rule_name: None,
        labels: labels(&incident)?,
        free_text: Vec::new(),
        raw: RawPayload::Whole,
    }))
}

fn untitled(incident: &Obj<'_>, key: &str) -> Result<String, ParseError> {
    Ok(match incident.text("number")? {
        Some(number) => format!("Incident #{number}"),
        None => format!("Incident {key}"),
    })
}

/// `priority.name` (P1..P5) as the sender names it, else `urgency` (high → critical, low → warning).
fn severity(incident: &Obj<'_>) -> Result<Option<String>, ParseError> {
    let priority = incident.object_or_empty("priority")?.first_text(&["name", "summary"])?;
    let urgency = incident.text("urgency")?;
    if priority.is_some() {
        return Ok(priority);
    }
    Ok(urgency.and_then(|urgency| match urgency.to_lowercase().as_str() {
        "high" => Some("critical".to_owned()),
        "low" => Some("warning".to_owned()),
        _ => normalize_severity(&urgency),
    }))
}

fn labels(incident: &Obj<'_>) -> Result<Map<String, Value>, ParseError> {
    let summary_of = |name: &str| incident.object_or_empty(name)?.text("summary");
    let mut teams = Vec::new();
    for team in incident.objects("teams")? {
        teams.extend(team.text("summary")?);
    }
    Ok(present_labels([
        ("incident_number", incident.text("number")?),
        ("incident_key", incident.text("incident_key")?),
        ("urgency", incident.text("urgency")?),
        ("priority", summary_of("priority")?),
        ("escalation_policy", summary_of("escalation_policy")?),
        ("teams", (!teams.is_empty()).then(|| teams.join(","))),
    ]))
}

#[cfg(test)]
mod tests {
    use super::super::RawPayload;
    use serde_json::json;

    use super::super::test_support::{
        assert_error, assert_rejects_non_objects, fixture, parse_fixture, parse_one, received_at, utc, with, without,
        Fixture,
    };
    use super::super::Source;

    const SOURCE: Source = Source::SourceB;

    #[test]
    fn firing_incident() {
        let alert = parse_fixture(SOURCE, Fixture::Firing);
        assert_eq!(alert.key, "Q2T8NZK4LX7W1R");
        assert_eq!(alert.group_key, "Q2T8NZK4LX7W1R");
        assert_eq!(
            alert.title,
            "payments-api: elevated HTTP 5xx rate on POST /v1/charges (7.9%)"
        );
        assert_eq!(alert.service.as_deref(), Some("payments-api"));
        assert_eq!(
            alert.severity.as_deref(),
            Some("P1"),
            "the priority as named, not lower-cased"
        );
        assert_eq!(alert.fired_at, utc("2026-11-20T09:14:27Z"));
        assert!(!alert.resolved);
        assert_eq!(alert.state, "incident.triggered");
        assert_eq!(
            alert.source_url.as_deref(),
            Some("https://acme.pager.example.com/incidents/Q2T8NZK4LX7W1R")
        );
        assert_eq!(alert.labels.get("teams"), Some(&json!("Payments")));
        assert_eq!(alert.labels.get("incident_number"), Some(&json!("4817")));
        assert_eq!(alert.raw, RawPayload::Whole);
    }

    #[test]
    fn events_that_change_no_alert_report_none() {
        let ping = json!({"event": {"id": "01BZ", "event_type": "pagey.ping", "resource_type": "pagey",
            "occurred_at": "2026-11-20T09:00:00Z", "agent": null, "client": null,
            "data": {"message": "Hello from your friend Pagey!", "type": "ping"}}});
        let service_updated = json!({"event": {"event_type": "service.updated", "resource_type": "service",
            "data": {"id": "PSV7Q2K", "type": "service", "summary": "payments-api"}}});
        let annotated = json!({"event": {"event_type": "incident.annotated", "resource_type": "incident",
            "data": {"incident": {"id": "Q2T8NZK4LX7W1R", "type": "incident_reference"}, "id": "P8VSMS9",
                     "content": "Looking into it", "type": "incident_note"}}});
        let responder_added = json!({"event": {"event_type": "incident.responder.added", "resource_type": "incident",
            "data": {"incident": {"id": "Q2T8NZK4LX7W1R", "type": "incident_reference"},
                     "user": {"id": "PUSER01", "type": "user_reference"}, "type": "incident_responder"}}});
        let untyped = json!({"event": {"event_type": "incident.custom_field_values.updated",
            "data": {"incident": {"id": "Q2T8NZK4LX7W1R"}, "custom_fields": []}}});
        for payload in [ping, service_updated, annotated, responder_added, untyped] {
            let alerts = super::super::parse(SOURCE, &payload, received_at()).expect("accepted");
            assert!(alerts.is_empty(), "{payload}: {alerts:?}");
        }
        let acknowledged = with(
            fixture(SOURCE, Fixture::Firing),
            "/event/event_type",
            json!("incident.acknowledged"),
        );
        assert_eq!(parse_one(SOURCE, &acknowledged).key, "Q2T8NZK4LX7W1R");
    }

    #[test]
    fn related_incident_is_distinct_on_the_same_service() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let related = parse_fixture(SOURCE, Fixture::Related);
        assert_eq!(related.key, "Q0M3VH6YJ8P5DA");
        assert_ne!(related.key, firing.key);
        assert_eq!(related.service, firing.service);
        assert_eq!(related.fired_at, utc("2026-11-20T09:17:02Z"));
        assert!(!related.resolved);
    }

    #[test]
    fn resolved_incident_shares_the_firing_key() {
        let firing = parse_fixture(SOURCE, Fixture::Firing);
        let resolved = parse_fixture(SOURCE, Fixture::Resolved);
        assert_eq!(resolved.key, firing.key);
        assert_eq!(resolved.group_key, firing.group_key);
        assert!(resolved.resolved);
        assert_eq!(resolved.state, "incident.resolved");
        // fired-at is the incident's `created_at`; the 09:52:41 in the README table is `event.occurred_at`.
        assert_eq!(resolved.fired_at, utc("2026-11-20T09:14:27Z"));
    }

    #[test]
    fn acknowledged_is_not_resolved_unless_the_status_says_so() {
        let payload = with(
            fixture(SOURCE, Fixture::Firing),
            "/event/event_type",
            json!("incident.acknowledged"),
        );
        let alert = parse_one(SOURCE, &payload);
        assert_eq!(alert.state, "incident.acknowledged");
        assert!(!alert.resolved);
        let payload = with(payload, "/event/data/status", json!("resolved"));
        assert!(parse_one(SOURCE, &payload).resolved);
    }

    #[test]
    fn numeric_incident_id() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/event/data/id", json!(4817));
        assert_eq!(parse_one(SOURCE, &payload).key, "4817");
    }

    #[test]
    fn severity_falls_back_to_urgency_when_priority_is_null() {
        let payload = with(fixture(SOURCE, Fixture::Firing), "/event/data/priority", json!(null));
        assert_eq!(parse_one(SOURCE, &payload).severity.as_deref(), Some("critical"));
        let payload = with(payload, "/event/data/urgency", json!("low"));
        assert_eq!(parse_one(SOURCE, &payload).severity.as_deref(), Some("warning"));
        let payload = without(payload, "/event/data/urgency");
        assert_eq!(parse_one(SOURCE, &payload).severity, None);
    }

    #[test]
    fn fired_at_falls_back_to_event_time_then_receipt() {
        let payload = without(fixture(SOURCE, Fixture::Firing), "/event/data/created_at");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, utc("2026-11-20T09:14:27.352Z"));
        let payload = without(payload, "/event/occurred_at");
        assert_eq!(parse_one(SOURCE, &payload).fired_at, received_at());
    }

    #[test]
    fn minimal_incident() {
        let alert = parse_one(SOURCE, &json!({"event": {"data": {"id": "Q1", "number": 7}}}));
        assert_eq!(alert.title, "Incident #7");
        assert_eq!(alert.state, "incident.triggered");
        assert_eq!((alert.service, alert.severity, alert.source_url), (None, None, None));
        assert_eq!(alert.fired_at, received_at());
    }

    #[test]
    fn rejects_bodies_without_an_incident_id() {
        assert_rejects_non_objects(SOURCE);
        assert_error(SOURCE, &json!({}), "missing field `event`");
        assert_error(
            SOURCE,
            &json!({"event": []}),
            "field `event` must be an object, not an array",
        );
        assert_error(SOURCE, &json!({"event": {"id": "x"}}), "missing field `event.data`");
        assert_error(
            SOURCE,
            &with(fixture(SOURCE, Fixture::Firing), "/event/data/id", json!({"id": 1})),
            "field `event.data.id` must be a string or a number, not an object",
        );
        assert_error(
            SOURCE,
            &without(fixture(SOURCE, Fixture::Firing), "/event/data/id"),
            "missing field `event.data.id`",
        );
    }

    #[test]
    fn rejects_present_fields_of_the_wrong_type() {
        for (pointer, value, message) in [
            (
                "/event/event_type",
                json!(7),
                "field `event.event_type` must be a string, not a number",
            ),
            (
                "/event/data/type",
                json!(["incident"]),
                "field `event.data.type` must be a string, not an array",
            ),
            (
                "/event/data/created_at",
                json!("yesterday"),
                "field `event.data.created_at` must be an RFC 3339 time or epoch seconds, not \"yesterday\"",
            ),
            (
                "/event/occurred_at",
                json!({}),
                "field `event.occurred_at` must be an RFC 3339 time or epoch seconds, not an object",
            ),
            (
                "/event/data/service",
                json!("payments-api"),
                "field `event.data.service` must be an object, not a string",
            ),
            (
                "/event/data/priority",
                json!("P1"),
                "field `event.data.priority` must be an object, not a string",
            ),
            (
                "/event/data/teams",
                json!({"summary": "Payments"}),
                "field `event.data.teams` must be an array, not an object",
            ),
            (
                "/event/data/teams/0",
                json!("Payments"),
                "field `event.data.teams[0]` must be an object, not a string",
            ),
            (
                "/event/data/title",
                json!({"text": "x"}),
                "field `event.data.title` must be a string or a number, not an object",
            ),
            (
                "/event/event_type",
                json!(["incident.triggered", {}]),
                "field `event.event_type` must be a string, not an array",
            ),
        ] {
            assert_error(SOURCE, &with(fixture(SOURCE, Fixture::Firing), pointer, value), message);
        }
    }
}
