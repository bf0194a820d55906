use super::*;
use crate::ledger::CauseKind;

fn finding(source: &str, excerpt: &str) -> Finding {
    Finding {
        alert: Some(0),
        source: source.into(),
        field: "detail".into(),
        excerpt: excerpt.into(),
        signature: Some("crash_loop".into()),
    }
}

/// A failed deploy of inventory-service is LIKELY (E1, E2); inventory-db's lock waits are
/// INCONCLUSIVE (E3).
fn ledger() -> Ledger {
    Ledger {
        hypotheses: vec![
            Hypothesis {
                component: "inventory-service".into(),
                kind: CauseKind::Change,
                failure: "a failed change".into(),
                support: vec![
                    finding("inventory-service deploy", "helm upgrade failed"),
                    finding(
                        "inventory-service",
                        "CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE",
                    ),
                ],
                named_by: vec!["storefront".into()],
                score: 1.5,
                verdict: Verdict::Likely,
            },
            Hypothesis {
                component: "inventory-db".into(),
                kind: CauseKind::Database,
                failure: "lock waits and deadlocks".into(),
                support: vec![finding("inventory-db", "lock wait timeout exceeded")],
                named_by: Vec::new(),
                score: 0.5,
                verdict: Verdict::Inconclusive,
            },
        ],
        ruled_out: vec![RuledOut {
            subject: "inventory-db".into(),
            reason: "weaker evidence".into(),
        }],
        unlinked: Vec::new(),
    }
}

fn answer(verdict: Verdict, component: Option<&str>, evidence: &[Reference]) -> ModelAnswer {
    ModelAnswer {
        verdict: Some(verdict),
        component: component.map(str::to_owned),
        evidence: evidence.to_vec(),
    }
}

fn tool(key: usize, output: &str) -> ToolOutput<'_> {
    ToolOutput {
        key,
        tool: "search_incidents",
        output,
        news: output,
    }
}

fn check(conclusion: &Conclusion) -> &ModelCheck {
    conclusion.model.as_ref().expect("the gate's record")
}

use Reference::{Ledger as E, Tool as T};

#[test]
fn a_model_agreeing_with_the_ledger_and_citing_its_evidence_is_accepted() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let conclusion = gate(
        &context,
        Some(&answer(Verdict::Likely, Some("Inventory Service"), &[E(2), E(1)])),
        &[],
    );
    assert_eq!(conclusion.verdict, Verdict::Likely);
    assert_eq!(
        conclusion.component.as_deref(),
        Some("inventory-service"),
        "spelled as the ledger does"
    );
    assert_eq!(conclusion.kind, Some(CauseKind::Change));
    assert_eq!(conclusion.evidence.len(), 2);
    assert!(conclusion.evidence[0].excerpt.contains("INVENTORY_DB_POOL_SIZE"));
    let check = check(&conclusion);
    assert!(check.accepted && check.rule == GateRule::Accepted, "{check:?}");
    assert_eq!(check.cited, ["E2", "E1"]);
    assert_eq!(
        (check.ledger_verdict, check.ledger_component.as_deref()),
        (Verdict::Likely, Some("inventory-service"))
    );
}

#[test]
fn a_verdict_is_never_stronger_than_its_evidence_allows() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let claim = answer(Verdict::Confirmed, Some("inventory-service"), &[E(1)]);
    let weakened = gate(&context, Some(&claim), &[]);
    assert_eq!(
        weakened.verdict,
        Verdict::Likely,
        "the ledger's LIKELY, no new line of evidence"
    );
    assert!(
        check(&weakened).reason.contains("weakened from CONFIRMED to LIKELY"),
        "{:?}",
        weakened.model
    );

    let output = r#"[{"title": "inventory-service pods CrashLoopBackOff since 17:48"}]"#;
    let claim = answer(Verdict::Confirmed, Some("inventory-service"), &[E(1), T(1)]);
    let confirmed = gate(&context, Some(&claim), &[tool(1, output)]);
    assert_eq!(
        confirmed.verdict,
        Verdict::Confirmed,
        "two lines: the ledger's and a tool output naming it"
    );
    assert_eq!(confirmed.evidence.last().unwrap().field, "output [1]");
}

#[test]
fn an_answer_without_a_verdict_block_is_downgraded_and_the_ledger_is_remembered() {
    let ledger = ledger();
    let conclusion = gate(&LedgerContext::new(&ledger), None, &[]);
    assert_eq!(
        (conclusion.verdict, conclusion.component.as_deref()),
        (Verdict::Inconclusive, None)
    );
    let check = check(&conclusion);
    assert_eq!((check.accepted, check.rule), (false, GateRule::NoVerdict));
    assert_eq!(check.ledger_component.as_deref(), Some("inventory-service"));
    assert_eq!(conclusion.ruled_out, ledger.ruled_out, "what was ruled out still is");
}

#[test]
fn a_model_citing_nothing_is_downgraded_even_when_it_agrees() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    for cited in [vec![], vec![E(9), T(4)]] {
        let conclusion = gate(
            &context,
            Some(&answer(Verdict::Likely, Some("inventory-service"), &cited)),
            &[tool(1, "[1]")],
        );
        assert_eq!(conclusion.verdict, Verdict::Inconclusive);
        assert_eq!(check(&conclusion).rule, GateRule::CitesNothing, "{cited:?}");
    }
}

#[test]
fn a_model_citing_only_empty_tool_outputs_is_downgraded() {
    let ledger = Ledger {
        hypotheses: Vec::new(),
        ruled_out: Vec::new(),
        unlinked: Vec::new(),
    };
    let context = LedgerContext::new(&ledger);
    let cli_failed = r#"{"exit_code": 1, "stdout": "", "stderr": "AccessDenied"}"#;
    let tools = [
        tool(1, "[]"),
        tool(2, "error: no incident 42 among the user's incidents"),
        tool(3, cli_failed),
    ];
    let claim = answer(Verdict::Confirmed, Some("redis"), &[T(1), T(2), T(3)]);
    let conclusion = gate(&context, Some(&claim), &tools);
    assert_eq!(conclusion.verdict, Verdict::Inconclusive);
    let check = check(&conclusion);
    assert_eq!(check.rule, GateRule::EmptyToolOutputs);
    assert_eq!(check.cited, ["1", "2", "3"]);
}

#[test]
fn a_model_contradicting_the_ledger_without_new_evidence_is_downgraded() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let unrelated = r#"[{"title": "storefront p99 latency"}]"#;
    let claim = answer(Verdict::Confirmed, Some("payments-db"), &[E(1), T(1)]);
    let conclusion = gate(&context, Some(&claim), &[tool(1, unrelated)]);
    assert_eq!(conclusion.verdict, Verdict::Inconclusive);
    let check = check(&conclusion);
    assert_eq!(check.rule, GateRule::ContradictsLedger);
    assert!(check.reason.contains("LIKELY inventory-service"), "{}", check.reason);

    // The ledger's INCONCLUSIVE hypothesis is no support for a LIKELY either.
    let claim = answer(Verdict::Likely, Some("inventory-db"), &[E(3)]);
    let conclusion = gate(&context, Some(&claim), &[]);
    assert_eq!(check_of(&conclusion), (false, GateRule::ContradictsLedger));
}

fn check_of(conclusion: &Conclusion) -> (bool, GateRule) {
    let check = check(conclusion);
    (check.accepted, check.rule)
}

#[test]
fn a_model_contradicting_the_ledger_with_a_tool_output_naming_its_component_is_accepted_as_likely() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let output =
        r#"{"exit_code": 0, "stdout": "payments_db: connections 500/500 (max_connections reached)", "stderr": ""}"#;
    let claim = answer(Verdict::Confirmed, Some("payments-db"), &[T(2)]);
    let conclusion = gate(&context, Some(&claim), &[tool(1, "[]"), tool(2, output)]);
    assert_eq!(check_of(&conclusion), (true, GateRule::Accepted));
    assert_eq!(conclusion.verdict, Verdict::Likely, "one line of evidence");
    assert_eq!(conclusion.component.as_deref(), Some("payments-db"));
    assert_eq!(conclusion.kind, None, "not a hypothesis of the ledger");
    assert_eq!(conclusion.ruled_out[0].subject, "inventory-service");
}

#[test]
fn a_model_inventing_a_cause_the_ledger_never_considered_is_downgraded() {
    let ledger = Ledger {
        hypotheses: Vec::new(),
        ruled_out: Vec::new(),
        unlinked: Vec::new(),
    };
    let context = LedgerContext::new(&ledger);
    let output = r#"[{"title": "checkout-api p99 latency above 2s"}]"#;
    let claim = answer(Verdict::Confirmed, Some("checkout-db"), &[T(1)]);
    let conclusion = gate(&context, Some(&claim), &[tool(1, output)]);
    assert_eq!(check_of(&conclusion), (false, GateRule::ContradictsLedger));
    assert!(check(&conclusion).reason.contains("found no support"));
}

#[test]
fn citations_that_do_not_concern_the_claimed_component_do_not_support_it() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let claim = answer(Verdict::Likely, Some("inventory-service"), &[E(3)]);
    let conclusion = gate(&context, Some(&claim), &[]);
    assert_eq!(check_of(&conclusion), (false, GateRule::Unsupported));
}

#[test]
fn an_inconclusive_answer_that_cites_evidence_is_accepted_and_a_verdict_needs_a_component() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let conclusion = gate(&context, Some(&answer(Verdict::Inconclusive, Some("x"), &[E(1)])), &[]);
    assert_eq!(check_of(&conclusion), (true, GateRule::Accepted));
    assert_eq!(
        (conclusion.verdict, conclusion.component),
        (Verdict::Inconclusive, None)
    );
    let conclusion = gate(&context, Some(&answer(Verdict::Likely, None, &[E(1)])), &[]);
    assert_eq!(check_of(&conclusion), (false, GateRule::NoComponent));
}

#[test]
fn empty_outputs_are_empty_rows_errors_and_silent_or_failed_commands() {
    for empty in [
        "",
        "  ",
        "[]",
        "{}",
        "null",
        "\"\"",
        "error: timed out",
        "Error: x",
        r#"{"exit_code":0,"stdout":" \n","stderr":""}"#,
    ] {
        assert!(is_empty_output(empty), "{empty:?}");
    }
    for full in [
        "[{}]",
        "kubectl ran: get pods",
        r#"{"title": "x"}"#,
        r#"{"exit_code":0,"stdout":"pod-1 Running"}"#,
    ] {
        assert!(!is_empty_output(full), "{full:?}");
    }
}

#[test]
fn a_component_is_named_by_its_name_parts_in_order() {
    assert!(names("pool of Inventory_Service exhausted", "inventory-service"));
    assert!(!names("inventory is fine; service restarted", "inventory-service"));
    assert!(!names("redistribution", "redis"));
    assert!(!names("anything", "--"));
}

#[test]
fn the_context_numbers_the_evidence_the_model_may_cite() {
    let ledger = ledger();
    let context = LedgerContext::new(&ledger);
    let json = context.to_json();
    assert_eq!(json["verdict"], "LIKELY");
    assert_eq!(json["component"], "inventory-service");
    assert_eq!(json["hypotheses"][0]["evidence"][1]["id"], "E2");
    assert_eq!(json["hypotheses"][1]["evidence"][0]["id"], "E3");
    assert_eq!(json["hypotheses"][1]["verdict"], "INCONCLUSIVE");
    assert!(context.item(0).is_none() && context.item(4).is_none());
    assert_eq!(context.item(3).unwrap().0.component, "inventory-db");
}

#[test]
fn what_a_tool_says_of_the_analysed_incident_itself_is_not_new_evidence() {
    let this = "5a1c0de0-0000-4000-8000-000000000001";
    let listing =
        format!(r#"[{{"id": "{this}", "title": "checkout-db down"}}, {{"id": "x", "title": "search slow"}}]"#);
    assert_eq!(
        news_in(&listing, r#"{"query": "db"}"#, this),
        r#"[{"id":"x","title":"search slow"}]"#
    );
    let own = format!(r#"{{"id": "{this}", "service": "checkout-db"}}"#);
    assert_eq!(news_in(&own, "{}", this), "");
    assert_eq!(news_in("[1]", &format!(r#"{{"incident_id": "{this}"}}"#), this), "");
    assert_eq!(news_in("pod-1 Running", "{}", this), "pod-1 Running");
    assert_eq!(news_in(&listing[..60], "{}", this), "", "a listing cut short");

    // So a model cannot pass the ledger's own alert off as new evidence.
    let ledger = Ledger {
        hypotheses: Vec::new(),
        ruled_out: Vec::new(),
        unlinked: Vec::new(),
    };
    let news = news_in(&own, "{}", this);
    let restated = ToolOutput {
        key: 1,
        tool: "get_incident",
        output: &own,
        news: &news,
    };
    let claim = answer(Verdict::Likely, Some("checkout-db"), &[T(1)]);
    let conclusion = gate(&LedgerContext::new(&ledger), Some(&claim), &[restated]);
    assert_eq!(check_of(&conclusion), (false, GateRule::ContradictsLedger));
}
