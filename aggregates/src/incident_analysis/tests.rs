use chrono::{TimeZone, Utc};
use cqrs_es::test::TestFramework;
use uuid::Uuid;

use super::*;

type Given = TestFramework<IncidentAnalysis>;

fn incident() -> Uuid {
    Uuid::from_u128(3)
}

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 14, 5, 0).unwrap()
}

fn citation(key: &str) -> Citation {
    Citation {
        key: key.into(),
        tool_name: Some("kubectl".into()),
        command: Some("kubectl get pods".into()),
        output: "3/6 ready".into(),
        executed_at: Some(at()),
    }
}

fn suggestion(risk: Risk, command: &str) -> Suggestion {
    Suggestion {
        title: "Roll back".into(),
        description: None,
        kind: SuggestionKind::Mitigation,
        risk,
        command: Some(command.into()),
    }
}

#[test]
fn record_a_thought() {
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordThought {
            incident_id: incident(),
            kind: ThoughtKind::Hypothesis,
            content: " A bad deploy. ".into(),
            at: at(),
        })
        .then_expect_events(vec![AnalysisEvent::ThoughtRecorded {
            incident_id: incident(),
            kind: ThoughtKind::Hypothesis,
            content: "A bad deploy.".into(),
            at: at(),
        }]);
}

#[test]
fn an_empty_thought_is_refused() {
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordThought {
            incident_id: incident(),
            kind: ThoughtKind::Analysis,
            content: "  ".into(),
            at: at(),
        })
        .then_expect_error_message("a thought must not be empty");
}

#[test]
fn citation_keys_are_unique_and_short() {
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordCitation {
            incident_id: incident(),
            citation: citation("1"),
            at: at(),
        })
        .then_expect_events(vec![AnalysisEvent::CitationRecorded {
            incident_id: incident(),
            citation: citation("1"),
            at: at(),
        }]);
    Given::with(())
        .given(vec![AnalysisEvent::CitationRecorded {
            incident_id: incident(),
            citation: citation("1"),
            at: at(),
        }])
        .when(AnalysisCommand::RecordCitation {
            incident_id: incident(),
            citation: citation("1"),
            at: at(),
        })
        .then_expect_error(AnalysisError::DuplicateCitation("1".into()));
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordCitation {
            incident_id: incident(),
            citation: citation("12345678901"),
            at: at(),
        })
        .then_expect_error_message("a citation key has 1 to 10 characters");
}

#[test]
fn a_dangerous_command_is_never_proposed_as_safe() {
    let proposed = suggestion(
        Risk::Safe,
        "kubectl -n inventory rollout undo deployment/inventory-service",
    );
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::ProposeSuggestion {
            incident_id: incident(),
            suggestion: proposed,
            at: at(),
        })
        .then_expect_events(vec![AnalysisEvent::SuggestionProposed {
            incident_id: incident(),
            suggestion: suggestion(
                Risk::High,
                "kubectl -n inventory rollout undo deployment/inventory-service",
            ),
            at: at(),
        }]);
}

#[test]
fn a_higher_risk_than_the_command_needs_is_kept() {
    let proposed = suggestion(Risk::High, "kubectl get pods");
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::ProposeSuggestion {
            incident_id: incident(),
            suggestion: proposed.clone(),
            at: at(),
        })
        .then_expect_events(vec![AnalysisEvent::SuggestionProposed {
            incident_id: incident(),
            suggestion: proposed,
            at: at(),
        }]);
}

#[test]
fn next_citation_key_skips_used_ones() {
    let mut analysis = IncidentAnalysis::default();
    assert_eq!(analysis.next_citation_key(), "1");
    analysis.apply(AnalysisEvent::CitationRecorded {
        incident_id: incident(),
        citation: citation("1"),
        at: at(),
    });
    analysis.apply(AnalysisEvent::CitationRecorded {
        incident_id: incident(),
        citation: citation("2"),
        at: at(),
    });
    assert_eq!(analysis.next_citation_key(), "3");
}

#[test]
fn findings_recorded_together_are_decided_in_order() {
    let thought = |content: &str| AnalysisCommand::RecordThought {
        incident_id: incident(),
        kind: ThoughtKind::Analysis,
        content: content.into(),
        at: at(),
    };
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordAll(vec![
            AnalysisCommand::RecordCitation {
                incident_id: incident(),
                citation: citation("1"),
                at: at(),
            },
            thought(" Pods restart since the deploy [1]. "),
            AnalysisCommand::ProposeSuggestion {
                incident_id: incident(),
                suggestion: suggestion(Risk::Safe, "kubectl rollout undo deployment/checkout"),
                at: at(),
            },
        ]))
        .then_expect_events(vec![
            AnalysisEvent::CitationRecorded {
                incident_id: incident(),
                citation: citation("1"),
                at: at(),
            },
            AnalysisEvent::ThoughtRecorded {
                incident_id: incident(),
                kind: ThoughtKind::Analysis,
                content: "Pods restart since the deploy [1].".into(),
                at: at(),
            },
            AnalysisEvent::SuggestionProposed {
                incident_id: incident(),
                suggestion: suggestion(Risk::High, "kubectl rollout undo deployment/checkout"),
                at: at(),
            },
        ]);
}

#[test]
fn findings_recorded_together_are_all_refused_when_one_is() {
    let cite = |key: &str| AnalysisCommand::RecordCitation {
        incident_id: incident(),
        citation: citation(key),
        at: at(),
    };
    // The second `1` is a duplicate only of the first in the same batch.
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordAll(vec![cite("1"), cite("2"), cite("1")]))
        .then_expect_error(AnalysisError::DuplicateCitation("1".into()));
    Given::with(())
        .given_no_previous_events()
        .when(AnalysisCommand::RecordAll(vec![AnalysisCommand::RecordAll(vec![
            cite("1"),
        ])]))
        .then_expect_error_message("findings recorded together are single findings");
}
