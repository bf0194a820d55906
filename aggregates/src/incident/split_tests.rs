//! Splitting a correlated alert off into an incident of its own: both sides' rules.

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;
use serde_json::json;
use uuid::Uuid;

use super::*;

type Given = TestFramework<Incident>;

const OWNER: &str = "owner";

fn at(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 14, minute, 0).unwrap()
}

fn alert(source_alert_id: i64, service: &str) -> AlertInfo {
    AlertInfo {
        source_type: "source_a".into(),
        source_alert_id,
        alert_key: format!("key-{source_alert_id}"),
        title: format!("alert {source_alert_id}"),
        service: Some(service.into()),
        environment: None,
        severity: Some("warning".into()),
        fired_at: at(2),
        source_url: None,
        metadata: json!({}),
        evidence: Default::default(),
    }
}

fn opened() -> IncidentEvent {
    IncidentEvent::IncidentOpened {
        incident_id: Uuid::from_u128(1),
        user_id: OWNER.into(),
        alert: alert(1, "checkout-api"),
        at: at(2),
        split_from: None,
        previous_incident_id: None,
    }
}

fn correlated(source_alert_id: i64, service: &str) -> IncidentEvent {
    IncidentEvent::AlertCorrelated {
        alert: alert(source_alert_id, service),
        correlation: Correlation {
            strategy: "service_match".into(),
            score: 0.7,
            details: json!({}),
        },
        filled: false,
        at: at(3),
    }
}

fn split_off(source_alert_id: i64, service: &str, user_id: &str) -> IncidentCommand {
    IncidentCommand::SplitOff {
        user_id: user_id.into(),
        alert: alert(source_alert_id, service),
        new_incident_id: Uuid::from_u128(9),
        remaining_services: vec!["checkout-api".into()],
        at: at(10),
    }
}

fn split_event(source_alert_id: i64, service: &str) -> IncidentEvent {
    IncidentEvent::AlertSplitOff {
        source_type: "source_a".into(),
        source_alert_id,
        service: Some(service.into()),
        new_incident_id: Uuid::from_u128(9),
        remaining_services: vec!["checkout-api".into()],
        at: at(10),
    }
}

#[test]
fn a_correlated_alert_splits_off() {
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db")])
        .when(split_off(2, "ledger-db", OWNER))
        .then_expect_events(vec![split_event(2, "ledger-db")]);
}

#[test]
fn an_absorbed_alert_splits_off_too() {
    let absorbed = IncidentEvent::IncidentAbsorbed {
        source_incident_id: Uuid::from_u128(5),
        alerts: vec![alert(7, "ledger-db")],
        at: at(5),
    };
    Given::with(())
        .given(vec![opened(), absorbed])
        .when(split_off(7, "ledger-db", OWNER))
        .then_expect_events(vec![split_event(7, "ledger-db")]);
}

#[test]
fn split_refusals() {
    // The opening alert, which is also an incident's only alert.
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db")])
        .when(split_off(1, "checkout-api", OWNER))
        .then_expect_error(IncidentError::CannotSplit(
            "the alert that opened the incident stays with it; split the other alerts off instead",
        ));
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db")])
        .when(split_off(3, "ledger-db", OWNER))
        .then_expect_error(IncidentError::AlertNotFound);
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db")])
        .when(split_off(2, "ledger-db", "someone else"))
        .then_expect_error(IncidentError::NotFound);
    Given::with(())
        .given(vec![
            opened(),
            correlated(2, "ledger-db"),
            IncidentEvent::MergedInto {
                target_incident_id: Uuid::from_u128(4),
                at: at(6),
            },
        ])
        .when(split_off(2, "ledger-db", OWNER))
        .then_expect_error(IncidentError::AlreadyMerged);
}

#[test]
fn an_alert_split_off_is_no_longer_held_and_may_join_again() {
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db"), split_event(2, "ledger-db")])
        .when(split_off(2, "ledger-db", OWNER))
        .then_expect_error(IncidentError::AlertNotFound);
    // Merged back later, it is absorbed again.
    Given::with(())
        .given(vec![opened(), correlated(2, "ledger-db"), split_event(2, "ledger-db")])
        .when(IncidentCommand::Absorb {
            user_id: OWNER.into(),
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(2, "ledger-db")],
            at: at(20),
        })
        .then_expect_events(vec![IncidentEvent::IncidentAbsorbed {
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(2, "ledger-db")],
            at: at(20),
        }]);
}

#[test]
fn the_alerts_of_a_history_leave_out_those_split_off() {
    let history = vec![
        opened(),
        correlated(2, "ledger-db"),
        correlated(3, "checkout-api"),
        split_event(2, "ledger-db"),
    ];
    let ids: Vec<i64> = alerts_in(history).iter().map(|a| a.source_alert_id).collect();
    assert_eq!(ids, [1, 3]);
}

#[test]
fn the_new_incident_opens_with_the_alert_and_names_its_source() {
    Given::with(())
        .given_no_previous_events()
        .when(IncidentCommand::OpenSplit {
            incident_id: Uuid::from_u128(9),
            user_id: OWNER.into(),
            alert: alert(2, "ledger-db"),
            source_incident_id: Uuid::from_u128(1),
            at: at(10),
        })
        .then_expect_events(vec![IncidentEvent::IncidentOpened {
            incident_id: Uuid::from_u128(9),
            user_id: OWNER.into(),
            alert: alert(2, "ledger-db"),
            at: at(10),
            split_from: Some(Uuid::from_u128(1)),
            previous_incident_id: None,
        }]);
}
