//! An incident opened by a new firing of an alert whose earlier incident is resolved or merged:
//! the link to that incident, and events recorded before the link was kept.

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use serde_json::json;
use uuid::Uuid;

use super::*;

type Given = TestFramework<Incident>;

fn at(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 14, minute, 0).unwrap()
}

fn alert() -> AlertInfo {
    AlertInfo {
        source_type: "source_a".into(),
        source_alert_id: 7,
        alert_key: "key-7".into(),
        title: "checkout-api 5xx".into(),
        service: Some("checkout-api".into()),
        environment: None,
        severity: Some("critical".into()),
        fired_at: at(2),
        source_url: None,
        metadata: json!({}),
        evidence: Default::default(),
    }
}

fn open(incident_id: Uuid, previous_incident_id: Option<Uuid>) -> IncidentCommand {
    IncidentCommand::Open {
        incident_id,
        user_id: "owner".into(),
        alert: alert(),
        previous_incident_id,
        at: at(2),
    }
}

#[test]
fn a_new_firing_opens_an_incident_naming_the_earlier_one() {
    let (id, earlier) = (Uuid::from_u128(2), Uuid::from_u128(1));
    Given::with(())
        .given_no_previous_events()
        .when(open(id, Some(earlier)))
        .then_expect_events(vec![IncidentEvent::IncidentOpened {
            incident_id: id,
            user_id: "owner".into(),
            alert: alert(),
            at: at(2),
            split_from: None,
            previous_incident_id: Some(earlier),
        }]);
}

#[test]
fn an_incident_cannot_follow_itself() {
    let id = Uuid::from_u128(2);
    Given::with(())
        .given_no_previous_events()
        .when(open(id, Some(id)))
        .then_expect_error(IncidentError::Invalid("an incident cannot follow itself".into()));
}

/// Events are stored for good: an `IncidentOpened` recorded before the link was kept reads as
/// one without a link, and one without a link is written as it was then.
#[test]
fn an_opening_recorded_without_the_link_reads_and_writes_as_before() {
    let stored = json!({ "IncidentOpened": {
        "incident_id": Uuid::from_u128(2), "user_id": "owner", "alert": alert(), "at": at(2),
    }});
    let event: IncidentEvent = serde_json::from_value(stored.clone()).unwrap();
    let IncidentEvent::IncidentOpened {
        previous_incident_id, ..
    } = &event
    else {
        panic!("{event:?}");
    };
    assert_eq!(*previous_incident_id, None);
    assert_eq!(serde_json::to_value(&event).unwrap(), stored);

    let linked = IncidentEvent::IncidentOpened {
        incident_id: Uuid::from_u128(2),
        user_id: "owner".into(),
        alert: alert(),
        at: at(2),
        split_from: None,
        previous_incident_id: Some(Uuid::from_u128(1)),
    };
    let written = serde_json::to_value(&linked).unwrap();
    assert_eq!(
        written["IncidentOpened"]["previous_incident_id"],
        json!(Uuid::from_u128(1))
    );
    assert_eq!(serde_json::from_value::<IncidentEvent>(written).unwrap(), linked);
}
