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

fn incident_id() -> Uuid {
    Uuid::from_u128(1)
}

fn alert(source_alert_id: i64, service: &str) -> AlertInfo {
    AlertInfo {
        source_type: "source_a".into(),
        source_alert_id,
        alert_key: format!("key-{source_alert_id}"),
        title: format!("alert {source_alert_id}"),
        service: Some(service.into()),
        environment: Some("production".into()),
        severity: Some("critical".into()),
        fired_at: at(2),
        source_url: None,
        metadata: json!({}),
        evidence: Default::default(),
    }
}

fn opened() -> IncidentEvent {
    IncidentEvent::IncidentOpened {
        incident_id: incident_id(),
        user_id: OWNER.into(),
        alert: alert(1, "checkout-api"),
        at: at(2),
        split_from: None,
        previous_incident_id: None,
    }
}

fn correlation() -> Correlation {
    Correlation {
        strategy: "service_match".into(),
        score: 0.8,
        details: json!({ "service_match": 1.0 }),
    }
}

fn correlated(source_alert_id: i64) -> IncidentEvent {
    IncidentEvent::AlertCorrelated {
        alert: alert(source_alert_id, "checkout-api"),
        correlation: correlation(),
        filled: false,
        at: at(4),
    }
}

/// The correlated alert that fills its incident.
fn filling(source_alert_id: i64) -> IncidentEvent {
    let mut event = correlated(source_alert_id);
    if let IncidentEvent::AlertCorrelated { filled, .. } = &mut event {
        *filled = true;
    }
    event
}

fn patch(status: Option<IncidentStatus>) -> IncidentCommand {
    IncidentCommand::Patch {
        user_id: OWNER.into(),
        status,
        analysis_status: None,
        summary: None,
        active_tab: None,
        at: at(10),
    }
}

/// The owner merging the incident into `target` at `second`.
fn merge_into(target: Uuid, second: u32) -> IncidentCommand {
    IncidentCommand::MergeInto {
        user_id: OWNER.into(),
        target_incident_id: target,
        at: at(second),
    }
}

fn merged_into(target: Uuid, second: u32) -> IncidentEvent {
    IncidentEvent::MergedInto {
        target_incident_id: target,
        at: at(second),
    }
}

fn status_changed(status: IncidentStatus, analyzed_at: Option<DateTime<Utc>>) -> IncidentEvent {
    IncidentEvent::StatusChanged {
        status,
        analyzed_at,
        at: at(10),
    }
}

#[test]
fn open_from_an_alert() {
    Given::with(())
        .given_no_previous_events()
        .when(IncidentCommand::Open {
            incident_id: incident_id(),
            user_id: OWNER.into(),
            alert: alert(1, "checkout-api"),
            previous_incident_id: None,
            at: at(2),
        })
        .then_expect_events(vec![opened()]);
}

#[test]
fn open_twice_is_refused() {
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Open {
            incident_id: incident_id(),
            user_id: OWNER.into(),
            alert: alert(2, "x"),
            previous_incident_id: None,
            at: at(3),
        })
        .then_expect_error(IncidentError::AlreadyExists);
}

#[test]
fn correlate_an_alert() {
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(2, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(4),
        })
        .then_expect_events(vec![correlated(2)]);
}

#[test]
fn an_alert_bridging_other_incidents_records_them() {
    let other = Uuid::from_u128(7);
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(2, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: vec![other],
            at: at(4),
        })
        .then_expect_events(vec![
            correlated(2),
            IncidentEvent::AlertBridged {
                source_alert_id: 2,
                incident_ids: vec![other],
                at: at(4),
            },
        ]);
}

#[test]
fn a_finished_analysis_records_its_verdict() {
    let conclusion = crate::ledger::Conclusion {
        verdict: crate::ledger::Verdict::Confirmed,
        component: Some("subcache".into()),
        kind: Some(crate::ledger::CauseKind::Dependency),
        failure: Some("cluster quorum or replicas lost".into()),
        evidence: Vec::new(),
        named_by: vec!["usage-api".into()],
        ruled_out: Vec::new(),
        unlinked: Vec::new(),
        model: None,
    };
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::FinishAnalysis {
            user_id: OWNER.into(),
            status: AnalysisStatus::Complete,
            summary: "subcache is down.".into(),
            conclusion: Some(conclusion.clone()),
            at: at(20),
        })
        .then_expect_events(vec![
            IncidentEvent::AnalysisStatusChanged {
                status: AnalysisStatus::Complete,
                analyzed_at: Some(at(20)),
                at: at(20),
            },
            summary_written("subcache is down.", 20),
            IncidentEvent::VerdictRecorded { conclusion, at: at(20) },
        ]);
}

#[test]
fn correlating_a_held_alert_again_is_a_no_op() {
    Given::with(())
        .given(vec![opened(), correlated(2)])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(2, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(5),
        })
        .then_expect_events(vec![]);
}

#[test]
fn an_incident_merged_away_takes_no_alerts_even_when_patched_back_to_investigating() {
    Given::with(())
        .given(vec![
            opened(),
            merged_into(Uuid::from_u128(2), 20),
            status_changed(IncidentStatus::Investigating, None),
        ])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(2, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(21),
        })
        .then_expect_error(IncidentError::NotCorrelatable("it is merged into another incident"));
}

#[test]
fn only_investigating_incidents_take_alerts() {
    Given::with(())
        .given(vec![opened(), status_changed(IncidentStatus::Analyzed, Some(at(10)))])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(3, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(11),
        })
        .then_expect_error(IncidentError::NotCorrelatable("it is no longer investigating"));
}

#[test]
fn an_incident_takes_at_most_fifty_correlated_alerts() {
    let mut history = vec![opened()];
    history.extend((2..=50).map(correlated));
    Given::with(())
        .given(history.clone())
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(51, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(4),
        })
        .then_expect_events(vec![filling(51)]);
    history.push(filling(51));
    Given::with(())
        .given(history)
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(52, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(5),
        })
        .then_expect_error(IncidentError::NotCorrelatable(
            "it holds the most correlated alerts allowed",
        ));
}

#[test]
fn the_filling_alert_says_so_and_the_flag_is_left_out_of_other_events() {
    let mut history = vec![opened()];
    history.extend((2..=49).map(correlated));
    Given::with(())
        .given(history)
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(50, "checkout-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(4),
        })
        .then_expect_events(vec![correlated(50)]);
    let stored = serde_json::to_value(correlated(2)).unwrap();
    assert!(stored["AlertCorrelated"].get("filled").is_none(), "{stored}");
    let stored = serde_json::to_value(filling(2)).unwrap();
    assert_eq!(stored["AlertCorrelated"]["filled"], true);
    let earlier: IncidentEvent = serde_json::from_value(json!({ "AlertCorrelated": {
        "alert": serde_json::to_value(alert(2, "checkout-api")).unwrap(),
        "correlation": serde_json::to_value(correlation()).unwrap(),
        "at": at(4),
    }}))
    .unwrap();
    assert_eq!(
        earlier,
        correlated(2),
        "events stored before the flag read as not filling"
    );
}

#[test]
fn a_correlation_score_outside_zero_to_one_is_refused() {
    let mut correlation = correlation();
    correlation.score = 1.5;
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(2, "x"),
            correlation,
            max_correlated_alerts: 50,
            bridges: Vec::new(),
            at: at(4),
        })
        .then_expect_error_message("correlation score must be within 0.0 and 1.0");
}

#[test]
fn resolve_an_alert() {
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::ResolveAlert {
            user_id: OWNER.into(),
            source_type: "source_a".into(),
            alert_key: "key-1".into(),
            source_alert_id: 9,
            at: at(40),
        })
        .then_expect_events(vec![IncidentEvent::AlertResolved {
            source_type: "source_a".into(),
            alert_key: "key-1".into(),
            source_alert_id: 9,
            at: at(40),
        }]);
}

#[test]
fn analyzed_stamps_analyzed_at_once() {
    Given::with(())
        .given(vec![opened()])
        .when(patch(Some(IncidentStatus::Analyzed)))
        .then_expect_events(vec![status_changed(IncidentStatus::Analyzed, Some(at(10)))]);
    Given::with(())
        .given(vec![
            opened(),
            IncidentEvent::StatusChanged {
                status: IncidentStatus::Analyzed,
                analyzed_at: Some(at(5)),
                at: at(5),
            },
        ])
        .when(patch(Some(IncidentStatus::Investigating)))
        .then_expect_events(vec![status_changed(IncidentStatus::Investigating, None)]);
    Given::with(())
        .given(vec![
            opened(),
            IncidentEvent::StatusChanged {
                status: IncidentStatus::Analyzed,
                analyzed_at: Some(at(5)),
                at: at(5),
            },
            IncidentEvent::StatusChanged {
                status: IncidentStatus::Investigating,
                analyzed_at: None,
                at: at(6),
            },
        ])
        .when(patch(Some(IncidentStatus::Analyzed)))
        .then_expect_events(vec![status_changed(IncidentStatus::Analyzed, None)]);
}

#[test]
fn resolving_requests_a_postmortem_once() {
    Given::with(())
        .given(vec![opened()])
        .when(patch(Some(IncidentStatus::Resolved)))
        .then_expect_events(vec![
            status_changed(IncidentStatus::Resolved, Some(at(10))),
            IncidentEvent::ResolutionRequested { at: at(10) },
        ]);
    Given::with(())
        .given(vec![
            opened(),
            status_changed(IncidentStatus::Resolved, Some(at(10))),
            IncidentEvent::ResolutionRequested { at: at(10) },
        ])
        .when(patch(Some(IncidentStatus::Resolved)))
        .then_expect_events(vec![IncidentEvent::IncidentTouched { at: at(10) }]);
}

#[test]
fn patch_merged_and_investigating_only_change_status() {
    Given::with(())
        .given(vec![opened()])
        .when(patch(Some(IncidentStatus::Merged)))
        .then_expect_events(vec![status_changed(IncidentStatus::Merged, None)]);
}

#[test]
fn patch_the_other_fields() {
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Patch {
            user_id: OWNER.into(),
            status: None,
            analysis_status: Some(AnalysisStatus::Running),
            summary: Some("Latency from payments-api [1]".into()),
            active_tab: Some(ActiveTab::Chat),
            at: at(10),
        })
        .then_expect_events(vec![
            IncidentEvent::AnalysisStatusChanged {
                status: AnalysisStatus::Running,
                analyzed_at: None,
                at: at(10),
            },
            IncidentEvent::SummaryWritten {
                summary: "Latency from payments-api [1]".into(),
                at: at(10),
            },
            IncidentEvent::ActiveTabChanged {
                tab: ActiveTab::Chat,
                at: at(10),
            },
        ]);
}

#[test]
fn patch_with_unchanged_values_touches() {
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Patch {
            user_id: OWNER.into(),
            status: Some(IncidentStatus::Investigating),
            analysis_status: Some(AnalysisStatus::Idle),
            summary: None,
            active_tab: Some(ActiveTab::Thoughts),
            at: at(10),
        })
        .then_expect_events(vec![IncidentEvent::IncidentTouched { at: at(10) }]);
}

#[test]
fn patch_refusals() {
    Given::with(())
        .given(vec![opened()])
        .when(patch(None))
        .then_expect_error_message("no valid fields to update");
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Patch {
            user_id: OWNER.into(),
            status: None,
            analysis_status: None,
            summary: Some("x".repeat(MAX_SUMMARY_CHARS + 1)),
            active_tab: None,
            at: at(10),
        })
        .then_expect_error_message("summary must be at most 10000 characters");
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Patch {
            user_id: "intruder".into(),
            status: Some(IncidentStatus::Resolved),
            analysis_status: None,
            summary: None,
            active_tab: None,
            at: at(10),
        })
        .then_expect_error(IncidentError::NotFound);
    Given::with(())
        .given_no_previous_events()
        .when(patch(Some(IncidentStatus::Analyzed)))
        .then_expect_error(IncidentError::NotFound);
}

#[test]
fn merge_into_another_incident() {
    let target = Uuid::from_u128(2);
    Given::with(())
        .given(vec![opened()])
        .when(merge_into(target, 20))
        .then_expect_events(vec![merged_into(target, 20)]);
}

#[test]
fn merge_refusals() {
    Given::with(())
        .given(vec![opened()])
        .when(merge_into(incident_id(), 20))
        .then_expect_error_message("an incident cannot be merged into itself");
    Given::with(())
        .given(vec![opened(), merged_into(Uuid::from_u128(2), 20)])
        .when(merge_into(Uuid::from_u128(3), 21))
        .then_expect_error(IncidentError::AlreadyMerged);
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::MergeInto {
            user_id: "intruder".into(),
            target_incident_id: Uuid::from_u128(2),
            at: at(20),
        })
        .then_expect_error(IncidentError::NotFound);
}

/// `merged` set by PATCH names no target: the incident is not merged into anything yet, so it
/// can still be merged (as source or target). One PATCHed back to `investigating` after a merge
/// is still merged into its target, which holds its alerts.
#[test]
fn a_status_of_merged_without_a_target_does_not_refuse_a_merge_and_patching_a_merge_away_does_not_undo_it() {
    let marked_merged = vec![opened(), status_changed(IncidentStatus::Merged, None)];
    Given::with(())
        .given(marked_merged.clone())
        .when(merge_into(Uuid::from_u128(2), 20))
        .then_expect_events(vec![merged_into(Uuid::from_u128(2), 20)]);
    Given::with(())
        .given(marked_merged)
        .when(IncidentCommand::Absorb {
            user_id: OWNER.into(),
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(7, "payments-api")],
            at: at(20),
        })
        .then_expect_events(vec![IncidentEvent::IncidentAbsorbed {
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(7, "payments-api")],
            at: at(20),
        }]);
    Given::with(())
        .given(vec![
            opened(),
            merged_into(Uuid::from_u128(2), 20),
            status_changed(IncidentStatus::Investigating, None),
        ])
        .when(merge_into(Uuid::from_u128(3), 21))
        .then_expect_error(IncidentError::AlreadyMerged);
    Given::with(())
        .given(vec![
            opened(),
            merged_into(Uuid::from_u128(2), 20),
            status_changed(IncidentStatus::Investigating, None),
        ])
        .when(IncidentCommand::Absorb {
            user_id: OWNER.into(),
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(7, "payments-api")],
            at: at(21),
        })
        .then_expect_error(IncidentError::AlreadyMerged);
}

#[test]
fn absorb_the_source_alerts_it_does_not_hold() {
    let source = Uuid::from_u128(9);
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Absorb {
            user_id: OWNER.into(),
            source_incident_id: source,
            alerts: vec![alert(1, "checkout-api"), alert(7, "payments-api")],
            at: at(20),
        })
        .then_expect_events(vec![IncidentEvent::IncidentAbsorbed {
            source_incident_id: source,
            alerts: vec![alert(7, "payments-api")],
            at: at(20),
        }]);
}

#[test]
fn an_absorbed_alert_is_held_afterwards() {
    let source = Uuid::from_u128(9);
    Given::with(())
        .given(vec![
            opened(),
            IncidentEvent::IncidentAbsorbed {
                source_incident_id: source,
                alerts: vec![alert(7, "payments-api")],
                at: at(20),
            },
        ])
        .when(IncidentCommand::CorrelateAlert {
            user_id: OWNER.into(),
            alert: alert(7, "payments-api"),
            correlation: correlation(),
            max_correlated_alerts: DEFAULT_MAX_CORRELATED_ALERTS,
            bridges: Vec::new(),
            at: at(21),
        })
        .then_expect_events(vec![]);
}

#[test]
fn the_alerts_of_a_history_are_its_opening_correlated_and_absorbed_ones_in_order() {
    let history = vec![
        opened(),
        correlated(2),
        IncidentEvent::AlertResolved {
            source_type: "source_a".into(),
            alert_key: "key-2".into(),
            source_alert_id: 3,
            at: at(6),
        },
        IncidentEvent::IncidentAbsorbed {
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![alert(7, "payments-api"), alert(8, "payments-api")],
            at: at(20),
        },
        merged_into(Uuid::from_u128(10), 30),
    ];
    let ids: Vec<i64> = alerts_in(history).iter().map(|alert| alert.source_alert_id).collect();
    assert_eq!(ids, [1, 2, 7, 8]);
}

#[test]
fn a_merged_incident_absorbs_nothing() {
    Given::with(())
        .given(vec![opened(), merged_into(Uuid::from_u128(2), 20)])
        .when(IncidentCommand::Absorb {
            user_id: OWNER.into(),
            source_incident_id: Uuid::from_u128(9),
            alerts: vec![],
            at: at(21),
        })
        .then_expect_error(IncidentError::AlreadyMerged);
}

#[test]
fn link_the_analysis_chat_session() {
    let session = Uuid::from_u128(5);
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::LinkChatSession {
            user_id: OWNER.into(),
            session_id: session,
            at: at(3),
        })
        .then_expect_events(vec![IncidentEvent::ChatSessionLinked {
            session_id: session,
            at: at(3),
        }]);
}

#[test]
fn wire_names_round_trip() {
    for status in IncidentStatus::ALL {
        assert_eq!(IncidentStatus::parse(status.as_str()), Some(*status));
        assert_eq!(serde_json::to_value(status).unwrap(), json!(status.as_str()));
    }
    for status in AnalysisStatus::ALL {
        assert_eq!(AnalysisStatus::parse(status.as_str()), Some(*status));
    }
    assert_eq!(ActiveTab::parse("chat"), Some(ActiveTab::Chat));
    assert_eq!(
        IncidentStatus::parse("Resolved"),
        None,
        "values are case-sensitive, as the spec lists them"
    );
}

fn analysis_status(status: AnalysisStatus, minute: u32) -> IncidentEvent {
    IncidentEvent::AnalysisStatusChanged {
        status,
        analyzed_at: None,
        at: at(minute),
    }
}

/// The analysis completing on an incident not analysed before: it stamps `analyzed_at`.
fn analysis_completed(minute: u32) -> IncidentEvent {
    IncidentEvent::AnalysisStatusChanged {
        status: AnalysisStatus::Complete,
        analyzed_at: Some(at(minute)),
        at: at(minute),
    }
}

fn summary_written(summary: &str, minute: u32) -> IncidentEvent {
    IncidentEvent::SummaryWritten {
        summary: summary.into(),
        at: at(minute),
    }
}

fn finish_analysis(summary: &str) -> IncidentCommand {
    IncidentCommand::FinishAnalysis {
        user_id: OWNER.into(),
        status: AnalysisStatus::Complete,
        summary: summary.into(),
        conclusion: None,
        at: at(20),
    }
}

#[test]
fn a_finished_analysis_writes_its_summary() {
    Given::with(())
        .given(vec![opened(), analysis_status(AnalysisStatus::Running, 3)])
        .when(finish_analysis("Disk full on db-1."))
        .then_expect_events(vec![analysis_completed(20), summary_written("Disk full on db-1.", 20)]);
}

#[test]
fn a_finished_analysis_keeps_a_summary_written_while_it_ran() {
    Given::with(())
        .given(vec![
            opened(),
            analysis_status(AnalysisStatus::Running, 3),
            summary_written("Operator: the disk filled up.", 5),
        ])
        .when(finish_analysis("Disk full on db-1."))
        .then_expect_events(vec![analysis_completed(20)]);
}

#[test]
fn a_new_analysis_may_replace_a_summary_written_before_it_started() {
    Given::with(())
        .given(vec![
            opened(),
            analysis_status(AnalysisStatus::Running, 3),
            summary_written("Operator: the disk filled up.", 5),
            analysis_status(AnalysisStatus::Complete, 8),
            analysis_status(AnalysisStatus::Running, 12),
        ])
        .when(finish_analysis("Disk full on db-1."))
        .then_expect_events(vec![analysis_completed(20), summary_written("Disk full on db-1.", 20)]);
}

#[test]
fn a_finished_analysis_summary_is_cut_to_the_limit() {
    let long = "x".repeat(MAX_SUMMARY_CHARS + 5);
    Given::with(())
        .given(vec![opened(), analysis_status(AnalysisStatus::Running, 3)])
        .when(finish_analysis(&long))
        .then_expect_events(vec![
            analysis_completed(20),
            summary_written(&"x".repeat(MAX_SUMMARY_CHARS), 20),
        ]);
}

/// analyzed_at is stamped once: by the analysis completing, or by a status it had before; a
/// PATCHed analysis status stamps nothing (the caller may not set analyzed_at).
#[test]
fn analyzed_at_is_stamped_once_and_never_by_a_patched_analysis_status() {
    Given::with(())
        .given(vec![
            opened(),
            analysis_status(AnalysisStatus::Running, 3),
            status_changed(IncidentStatus::Analyzed, Some(at(5))),
        ])
        .when(finish_analysis("Disk full on db-1."))
        .then_expect_events(vec![
            analysis_status(AnalysisStatus::Complete, 20),
            summary_written("Disk full on db-1.", 20),
        ]);
    Given::with(())
        .given(vec![
            opened(),
            analysis_status(AnalysisStatus::Running, 3),
            analysis_completed(8),
        ])
        .when(IncidentCommand::FinishAnalysis {
            user_id: OWNER.into(),
            status: AnalysisStatus::Error,
            summary: "Disk full on db-1.".into(),
            conclusion: None,
            at: at(20),
        })
        .then_expect_events(vec![
            analysis_status(AnalysisStatus::Error, 20),
            summary_written("Disk full on db-1.", 20),
        ]);
    Given::with(())
        .given(vec![opened()])
        .when(IncidentCommand::Patch {
            user_id: OWNER.into(),
            status: None,
            analysis_status: Some(AnalysisStatus::Complete),
            summary: None,
            active_tab: None,
            at: at(10),
        })
        .then_expect_events(vec![analysis_status(AnalysisStatus::Complete, 10)]);
}
