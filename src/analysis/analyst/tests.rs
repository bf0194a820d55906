//! The built-in analyst on incidents of each kind: what it suspects, concludes and suggests.

use chrono::{DateTime, TimeZone, Utc};
use vigil_aggregates::ledger::AlertRecord;

use super::*;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, h, m, s).unwrap()
}

fn inventory_alert() -> IncidentFacts {
    IncidentFacts {
        title: "InventoryServiceHighErrorRate".into(),
        service: Some("inventory-service".into()),
        environment: Some("production".into()),
        severity: Some("critical".into()),
        source_type: "source_a".into(),
        started_at: at(17, 52, 0),
        detail: Some("5xx rate of inventory-service above 5% for 5 minutes".into()),
        namespace: Some("inventory".into()),
        correlated: vec![],
        deployments: vec![DeploymentFact {
            title: "inventory-service deploy to production failed (deploy-production #1842)".into(),
            service: Some("inventory-service".into()),
            environment: Some("production".into()),
            failed: true,
            at: at(17, 47, 55),
            message: Some("Stage 'helm upgrade' failed: CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE".into()),
            version: Some("2026.11.20-1".into()),
            commit: Some("9f2c4e1a7b3d5f60812c4a9e0d7b6f3a2c1e8d45".into()),
            url: None,
        }],
        similar: vec![],
        earlier: None,
        alerts: vec![AlertRecord::new(
            Some("inventory-service".into()),
            "InventoryServiceHighErrorRate".into(),
            vec![(
                "detail".into(),
                "5xx rate of inventory-service above 5% for 5 minutes".into(),
            )],
            Default::default(),
            at(17, 52, 0),
        )],
        nearby: vec![],
    }
}

#[test]
fn a_failed_deploy_of_the_same_service_is_the_lead() {
    let analysis = analyze(&inventory_alert());
    let hypothesis = &analysis.thoughts[1];
    assert_eq!(hypothesis.kind, ThoughtKind::Hypothesis);
    assert!(
        hypothesis
            .content
            .contains("failed at 17:47:55 UTC (4 min 5 s before the first alert)"),
        "{}",
        hypothesis.content
    );
    assert!(hypothesis.content.contains("INVENTORY_DB_POOL_SIZE"));
    let fix = analysis
        .suggestions
        .iter()
        .find(|s| s.kind == "fix")
        .expect("a fix for the missing variable");
    assert_eq!(fix.title, "Set INVENTORY_DB_POOL_SIZE for inventory-service");
    let rollback = analysis.suggestions.iter().find(|s| s.kind == "mitigation").unwrap();
    assert_eq!(
        rollback.command.as_deref(),
        Some("kubectl -n inventory rollout undo deployment/inventory-service")
    );
    assert_eq!(rollback.risk, Risk::High, "a rollback is never proposed as safe");
    assert!(
        analysis
            .summary
            .contains("Root cause: inventory-service, a failed change"),
        "{}",
        analysis.summary
    );
    assert!(analysis.summary.contains("built-in analyst"));
    let kinds: Vec<_> = analysis.thoughts.iter().map(|t| t.kind).collect();
    assert_eq!(kinds.first(), Some(&ThoughtKind::Analysis));
    assert_eq!(kinds.last(), Some(&ThoughtKind::Conclusion));
    assert!(kinds.contains(&ThoughtKind::Evidence));
}

#[test]
fn an_upstream_named_in_the_alert_is_followed() {
    let mut facts = inventory_alert();
    facts.service = Some("checkout-api".into());
    facts.title = "CheckoutApiHighLatency".into();
    facts.detail = Some(
        "p99 latency of checkout-api above 2s. Upstream inventory-service calls account for most of the time.".into(),
    );
    let analysis = analyze(&facts);
    assert!(
        analysis.thoughts[1]
            .content
            .starts_with("inventory-service is named in the alert"),
        "{}",
        analysis.thoughts[1].content
    );
    assert!(
        analysis.summary.contains("Root cause: inventory-service"),
        "{}",
        analysis.summary
    );
}

#[test]
fn without_a_release_it_says_so_and_points_at_the_named_upstream() {
    let mut facts = inventory_alert();
    facts.deployments.clear();
    facts.service = Some("checkout-api".into());
    facts.title = "CheckoutApiHighLatency".into();
    facts.detail = Some("p99 latency above 2s. Upstream payments-api calls account for most of the time.".into());
    let analysis = analyze(&facts);
    assert!(analysis.thoughts[1]
        .content
        .starts_with("No deployment of checkout-api is on record"));
    assert!(analysis.thoughts[1].content.contains("points at payments-api"));
    assert!(analysis.summary.contains("look first at payments-api"));
    assert!(
        analysis.suggestions.iter().all(|s| s.kind != "mitigation"),
        "no rollback without a release"
    );
    assert!(analysis
        .suggestions
        .iter()
        .filter(|s| s.kind == "diagnostic")
        .all(|s| s.risk == Risk::Safe));
}

#[test]
fn deployments_outside_the_window_or_environment_are_ignored() {
    let mut facts = inventory_alert();
    facts.deployments[0].at = at(14, 0, 0);
    assert!(analyze(&facts).thoughts[1].content.starts_with("No deployment"));
    let mut facts = inventory_alert();
    facts.deployments[0].environment = Some("staging".into());
    assert!(analyze(&facts).thoughts[1].content.starts_with("No deployment"));
}

#[test]
fn correlated_alerts_and_past_incidents_become_evidence() {
    let mut facts = inventory_alert();
    facts.correlated.push(AlertFact {
        title: "InventoryServicePodsNotReady".into(),
        service: Some("inventory-service".into()),
        severity: Some("warning".into()),
        fired_at: at(17, 54, 30),
        strategy: "service_match".into(),
        score: 0.83,
    });
    facts.similar.push(PastIncident {
        title: "InventoryServiceHighErrorRate".into(),
        status: "resolved".into(),
        summary: Some("A missing database setting crashed the pods. Rolled back.".into()),
        started_at: at(3, 0, 0),
        similarity: 0.91,
    });
    let analysis = analyze(&facts);
    assert!(
        analysis.thoughts[0]
            .content
            .contains("1 related alert joined within 2 min 30 s"),
        "{}",
        analysis.thoughts[0].content
    );
    let evidence: Vec<_> = analysis
        .thoughts
        .iter()
        .filter(|t| t.kind == ThoughtKind::Evidence)
        .map(|t| t.content.as_str())
        .collect();
    assert!(
        evidence
            .iter()
            .any(|e| e.contains("17:54:30 +2 min 30 s \"InventoryServicePodsNotReady\"")),
        "{evidence:?}"
    );
    assert!(evidence
        .iter()
        .any(|e| e.contains("similarity 0.91") && e.contains("A missing database setting crashed the pods.")));
}

/// The verdict stays the ledger's: the earlier incident is a fact told, not evidence weighed.
#[test]
fn an_earlier_incident_of_the_alert_is_told_and_weighs_nothing() {
    let without = analyze(&inventory_alert());
    let mut facts = inventory_alert();
    facts.earlier = Some(EarlierIncident {
        id: uuid::Uuid::from_u128(7),
        title: "InventoryServiceHighErrorRate".into(),
        status: "resolved".into(),
        started_at: at(3, 0, 0),
        resolved_at: Some(at(4, 15, 0)),
        merged_into: None,
        summary: None,
    });
    let with = analyze(&facts);
    let told = format!(
        "This alert fired before, in incident {} (\"InventoryServiceHighErrorRate\", started 2026-11-20 03:00 \
         UTC), resolved at 2026-11-20 04:15 UTC: it has come back.",
        uuid::Uuid::from_u128(7)
    );
    assert!(with
        .thoughts
        .iter()
        .any(|t| t.kind == ThoughtKind::Evidence && t.content == told));
    assert!(with.summary.contains(&told), "{}", with.summary);
    assert_eq!(with.ledger.conclusion(), without.ledger.conclusion());
    assert_eq!(with.suggestions, without.suggestions);
    assert!(!without.summary.contains("fired before"));
}

#[test]
fn helpers() {
    assert_eq!(
        missing_env_variable("CrashLoopBackOff: missing env INVENTORY_DB_POOL_SIZE)"),
        Some("INVENTORY_DB_POOL_SIZE".into())
    );
    assert_eq!(missing_env_variable("all good"), None);
    assert_eq!(
        upstream_named("Upstream payments-api calls dominate"),
        Some("payments-api".into())
    );
    assert_eq!(human_duration(Duration::seconds(245)), "4 min 5 s");
    assert_eq!(human_duration(Duration::seconds(120)), "2 min");
    assert_eq!(human_duration(Duration::seconds(45)), "45 s");
    assert_eq!(short_commit("9f2c4e1a7b3d5f60812c"), "9f2c4e1a7b3d");
    assert_eq!(
        short_commit("éééééééééééééé"),
        "éééééééééééé",
        "no byte slicing of untrusted text"
    );
}
