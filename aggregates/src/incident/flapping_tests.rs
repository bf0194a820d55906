//! A flapping alert key: found once per key, and its later cycles recorded whatever the
//! incident's status.

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::DomainEvent;
use serde_json::json;
use uuid::Uuid;

use super::*;

fn at(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 14, minute, 0).unwrap()
}

fn opened() -> Incident {
    let mut incident = Incident::default();
    incident.apply_event(&IncidentEvent::IncidentOpened {
        incident_id: Uuid::from_u128(1),
        user_id: "owner".into(),
        alert: AlertInfo {
            source_type: "source_a".into(),
            source_alert_id: 7,
            alert_key: "flappy".into(),
            title: "health check failing".into(),
            service: Some("edge-proxy".into()),
            environment: None,
            severity: None,
            fired_at: at(1),
            source_url: None,
            metadata: json!({}),
            evidence: Default::default(),
        },
        at: at(1),
        split_from: None,
        previous_incident_id: None,
    });
    incident
}

fn mark(user_id: &str) -> IncidentCommand {
    IncidentCommand::MarkFlapping {
        user_id: user_id.into(),
        source_type: "source_a".into(),
        alert_key: "flappy".into(),
        recoveries: 4,
        window_seconds: 1800,
        at: at(9),
    }
}

fn cycle(resolved: bool) -> IncidentCommand {
    IncidentCommand::RecordFlap {
        user_id: "owner".into(),
        source_type: "source_a".into(),
        alert_key: "flappy".into(),
        source_alert_id: 12,
        resolved,
        fired_at: at(10),
        at: at(10),
    }
}

#[test]
fn a_key_is_found_flapping_once() {
    let mut incident = opened();
    let events = incident.decide(mark("owner")).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type(), "FlappingDetected");
    incident.apply_event(&events[0]);
    assert_eq!(incident.decide(mark("owner")).unwrap(), vec![]);
    assert_eq!(incident.decide(mark("someone else")), Err(IncidentError::NotFound));
}

#[test]
fn cycles_of_a_flapping_key_are_recorded_even_once_resolved() {
    let mut incident = opened();
    assert!(
        matches!(incident.decide(cycle(false)), Err(IncidentError::Invalid(_))),
        "a key not found flapping records no cycle"
    );
    let found = incident.decide(mark("owner")).unwrap();
    incident.apply_event(&found[0]);
    incident.apply_event(&IncidentEvent::StatusChanged {
        status: IncidentStatus::Resolved,
        analyzed_at: None,
        at: at(9),
    });
    for resolved in [false, true] {
        let events = incident.decide(cycle(resolved)).unwrap();
        assert_eq!(events.len(), 1);
        assert!(matches!(events[0], IncidentEvent::FlapRecorded { resolved: r, .. } if r == resolved));
    }
}
