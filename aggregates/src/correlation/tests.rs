use super::*;
use chrono::TimeZone;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, h, m, s).unwrap()
}

fn embed(text: &str) -> Vec<f32> {
    HashedNgramEmbedder::default().embed(text)
}

fn alert(title: &str, service: Option<&str>, fired_at: DateTime<Utc>, kind: EventKind) -> NewAlert {
    NewAlert {
        title: title.to_owned(),
        service: service.map(str::to_owned),
        fired_at,
        kind,
        embedding: embed(title),
        evidence: Vec::new(),
        minor: false,
    }
}

fn incident(title: &str, service: Option<&str>, times: &[DateTime<Utc>]) -> CandidateIncident {
    CandidateIncident {
        title: title.to_owned(),
        primary_service: service.map(str::to_owned),
        affected_services: service.into_iter().map(str::to_owned).collect(),
        alert_times: times.to_vec(),
        correlated_alert_count: times.len() as u32 - 1,
        embedding: embed(title),
        evidence: Vec::new(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// --- fixture-like cases ----------------------------------------------------------------

#[test]
fn same_service_similar_alertnames_150s_apart_correlate_by_service() {
    let config = CorrelationConfig::default();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 2, 10)]);
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 4, 40),
        EventKind::Alert,
    );

    let Match { index, score, .. } = best_match(&new, std::slice::from_ref(&open), &config).expect("correlates");
    assert_eq!(index, 0);
    assert_eq!(score.strategy, Strategy::ServiceMatch);
    assert_eq!(score.service_match, 1.0);
    assert!(close(score.time_window, 0.5), "{score:?}");
    assert!((0.6..0.7).contains(&score.semantic), "{score:?}");
    let (ws, wt, wm) = (DEFAULT_SERVICE_WEIGHT, DEFAULT_TIME_WEIGHT, DEFAULT_SEMANTIC_WEIGHT);
    assert!(close(score.total, ws + wt * 0.5 + wm * score.semantic));
}

#[test]
fn same_service_similar_summaries_150s_apart_correlate() {
    let config = CorrelationConfig::default();
    let open = incident(
        "checkout-api p99 latency above 2s",
        Some("checkout-api"),
        &[at(14, 2, 10)],
    );
    let new = alert(
        "checkout-api 5xx error rate above 5%",
        Some("Checkout-API "),
        at(14, 4, 40),
        EventKind::Alert,
    );
    let score = score(&new, &open, &config);
    assert!(is_candidate(&new, &open, &config));
    assert!(score.correlates());
    assert_eq!(score.strategy, Strategy::ServiceMatch);
    assert_eq!(score.service_match, 1.0);
    assert!(close(score.time_window, 0.5));
    assert!((0.45..0.6).contains(&score.semantic), "{score:?}");
}

#[test]
fn consecutive_failed_deploys_six_minutes_apart_correlate_in_the_deployment_window() {
    let config = CorrelationConfig::default();
    // source_f: builds #1842 and #1843 started at 17:44:51 and 17:51:02 (371 s apart).
    let open = incident(
        "inventory-service deploy to production failed (deploy-production #1842)",
        Some("inventory-service"),
        &[at(17, 44, 51)],
    );
    let new = alert(
        "inventory-service deploy to production failed (deploy-production #1843)",
        Some("inventory-service"),
        at(17, 51, 2),
        EventKind::Deployment,
    );
    let Match { index, score, .. } = best_match(&new, std::slice::from_ref(&open), &config).expect("correlates");
    assert_eq!(index, 0);
    assert_eq!(score.window_secs, 1800);
    assert!(close(score.time_window, 1.0 - 371.0 / 1800.0), "{score:?}");
    assert!(score.semantic > 0.9999, "build numbers are dropped: {score:?}");
    assert_eq!(score.service_match, 1.0);
    assert_eq!(score.strategy, Strategy::ServiceMatch);
    let (ws, wt, wm) = (DEFAULT_SERVICE_WEIGHT, DEFAULT_TIME_WEIGHT, DEFAULT_SEMANTIC_WEIGHT);
    assert!(close(
        score.total,
        ws + wt * (1.0 - 371.0 / 1800.0) + wm * score.semantic
    ));

    // The same gap is out of the 300 s window of an ordinary alert.
    let as_alert = NewAlert {
        kind: EventKind::Alert,
        ..new
    };
    assert!(!is_candidate(&as_alert, &open, &config));
    assert_eq!(best_match(&as_alert, &[open], &config), None);
}

#[test]
fn different_service_hours_apart_is_not_a_candidate() {
    let config = CorrelationConfig::default();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 2, 10)]);
    let new = alert(
        "Disk /var/lib/postgresql space running out on payments-db-01",
        Some("payments-db-01"),
        at(17, 2, 10),
        EventKind::Alert,
    );
    assert!(!is_candidate(&new, &open, &config));
    assert_eq!(best_match(&new, std::slice::from_ref(&open), &config), None);
    let score = score(&new, &open, &config);
    assert_eq!(score.time_window, 0.0);
    assert_eq!(score.service_match, 0.0);
    assert!(score.semantic < 0.3, "{score:?}");
    // Even as a deployment (1800 s window) three hours is too far.
    let as_deploy = NewAlert {
        kind: EventKind::Deployment,
        ..new
    };
    assert!(!is_candidate(&as_deploy, &open, &config));
}

#[test]
fn different_service_60s_apart_with_dissimilar_title_stays_below_threshold() {
    let config = CorrelationConfig::default();
    let open = incident(
        "Disk /var/lib/postgresql space running out on payments-db-01",
        Some("payments-db-01"),
        &[at(11, 4, 0)],
    );
    let new = alert(
        "auth-service - login error spike",
        Some("auth-service"),
        at(11, 5, 0),
        EventKind::Alert,
    );
    assert!(is_candidate(&new, &open, &config));
    let s = score(&new, &open, &config);
    assert_eq!(s.service_match, 0.0);
    assert!(close(s.time_window, 0.8));
    assert!(s.semantic < 0.3, "{s:?}");
    assert!(s.total < 0.6, "{s:?}");
    assert_eq!(s.strategy, Strategy::TimeWindow);
    // With another incident open in the window, nothing points at this one.
    let other = incident("ledger-writer crash loop", Some("ledger-writer"), &[at(11, 3, 0)]);
    assert_eq!(best_match(&new, &[open.clone(), other], &config), None);
    // As the only open incident it takes a serious alert that came soon after, and says why;
    // a warning with nothing in common stays apart.
    let found = best_match(&new, std::slice::from_ref(&open), &config).expect("the sole candidate");
    assert_eq!(found.score.relation.kind, relation::RelationKind::SoleCandidate);
    assert!(!found.score.relation.is_direct());
    let warning = NewAlert {
        minor: true,
        ..new.clone()
    };
    assert_eq!(best_match(&warning, std::slice::from_ref(&open), &config), None);
    // Unless it was raised by the incident's own team.
    let team = vec![evidence::context_key("team=payments")];
    let same_team = NewAlert {
        evidence: team.clone(),
        ..warning
    };
    let owned = CandidateIncident { evidence: team, ..open };
    let found = best_match(&same_team, &[owned], &config).expect("the team's incident");
    assert_eq!(found.score.relation.shared_context, ["ctx:team=payments"]);

    // A partly shared service name ("api") is not enough either.
    let open = incident(
        "payments-api: elevated HTTP 5xx rate",
        Some("payments-api"),
        &[at(11, 4, 0)],
    );
    let new = alert(
        "CheckoutApiHighLatency",
        Some("checkout-api"),
        at(11, 5, 0),
        EventKind::Alert,
    );
    let s = score(&new, &open, &config);
    assert_eq!(s.service_match, 0.0, "api is a generic part");
    assert!(s.total < 0.6, "{s:?}");
}

#[test]
fn warnings_and_low_priorities_are_minor() {
    for minor in ["warning", "Warn", "info", "P4", "low", "3"] {
        assert!(is_minor_severity(Some(minor)), "{minor}");
    }
    for serious in ["critical", "p1", "P2", "high", "5", "availability"] {
        assert!(!is_minor_severity(Some(serious)), "{serious}");
    }
    assert!(
        !is_minor_severity(None),
        "an alert that says nothing is taken as serious"
    );
}

// --- cap, window edges, order --------------------------------------------------------

#[test]
fn an_incident_at_the_cap_is_never_chosen() {
    let config = CorrelationConfig::default();
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 4, 40),
        EventKind::Alert,
    );
    let mut full = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 4, 30)]);
    full.correlated_alert_count = 50;
    let mut almost = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 2, 10)]);
    almost.correlated_alert_count = 49;

    assert!(!is_candidate(&new, &full, &config));
    assert!(score(&new, &full, &config).correlates(), "it would score well");
    assert_eq!(best_match(&new, std::slice::from_ref(&full), &config), None);
    assert!(is_candidate(&new, &almost, &config));
    let index = best_match(&new, &[full, almost], &config).expect("the other one").index;
    assert_eq!(index, 1);
}

#[test]
fn window_edges() {
    let config = CorrelationConfig::default();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 0, 0)]);
    let mut new = alert(
        "CheckoutApiHighLatency",
        Some("checkout-api"),
        at(14, 5, 0),
        EventKind::Alert,
    );

    // Exactly at the window: still a candidate, time score 0.
    assert!(is_candidate(&new, &open, &config));
    assert_eq!(time_window_score(&new, &open, &config), 0.0);
    let s = score(&new, &open, &config);
    assert!(close(
        s.total,
        DEFAULT_SERVICE_WEIGHT + DEFAULT_SEMANTIC_WEIGHT * s.semantic
    ));

    // Just inside.
    new.fired_at = at(14, 4, 59);
    assert!(close(time_window_score(&new, &open, &config), 1.0 / 300.0));
    new.fired_at = at(14, 5, 0) - Duration::milliseconds(1);
    assert!(is_candidate(&new, &open, &config));
    assert!(close(time_window_score(&new, &open, &config), 0.001 / 300.0));

    // Just outside: not a candidate, even with a perfect service and title.
    new.fired_at = at(14, 5, 0) + Duration::milliseconds(1);
    assert!(!is_candidate(&new, &open, &config));
    assert_eq!(time_window_score(&new, &open, &config), 0.0);
    assert_eq!(best_match(&new, std::slice::from_ref(&open), &config), None);

    // Same instant: full time score.
    new.fired_at = at(14, 0, 0);
    assert_eq!(time_window_score(&new, &open, &config), 1.0);

    // Deployment edge at 1800 s.
    new.kind = EventKind::Deployment;
    new.fired_at = at(14, 30, 0);
    assert!(is_candidate(&new, &open, &config));
    assert_eq!(time_window_score(&new, &open, &config), 0.0);
    new.fired_at = at(14, 30, 1);
    assert!(!is_candidate(&new, &open, &config));
}

#[test]
fn out_of_order_alert_fired_before_the_incident_correlates() {
    let config = CorrelationConfig::default();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 4, 40)]);
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 2, 40),
        EventKind::Alert,
    );
    let s = best_match(&new, &[open], &config).expect("correlates").score;
    assert!(close(s.time_window, 0.6));
}

#[test]
fn time_is_measured_to_the_nearest_alert_of_the_incident() {
    let config = CorrelationConfig::default();
    let times = [at(14, 0, 0), at(14, 10, 0), at(14, 3, 20)];
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &times);
    let new = alert(
        "CheckoutApiHighLatency",
        Some("checkout-api"),
        at(14, 12, 0),
        EventKind::Alert,
    );
    assert_eq!(nearest_alert_time(new.fired_at, &times), Some(at(14, 10, 0)));
    assert!(close(time_window_score(&new, &open, &config), 1.0 - 120.0 / 300.0));
    // Equidistant times: the later one.
    assert_eq!(
        nearest_alert_time(at(14, 5, 0), &[at(14, 4, 0), at(14, 6, 0)]),
        Some(at(14, 6, 0))
    );
    assert_eq!(nearest_alert_time(at(14, 5, 0), &[]), None);
    let empty = CandidateIncident {
        alert_times: vec![],
        ..open
    };
    assert!(!is_candidate(&new, &empty, &config));
    assert_eq!(time_window_score(&new, &empty, &config), 0.0);
}

// --- weights, strategy, config --------------------------------------------------------

#[test]
fn weights_are_normalized_and_checked() {
    let w = Weights::new(1.0, 1.0, 2.0).unwrap();
    assert_eq!((w.service_match(), w.time_window(), w.semantic()), (0.25, 0.25, 0.5));
    let d = Weights::new(0.5, 0.3, 0.2).unwrap();
    assert!(close(d.service_match(), 0.5) && close(d.time_window(), 0.3) && close(d.semantic(), 0.2));
    assert_eq!(Weights::new(5.0, 0.0, 0.0).unwrap().service_match(), 1.0);
    assert_eq!(
        Weights::new(-0.1, 0.5, 0.6),
        Err(ConfigError::InvalidWeight {
            name: "service_match",
            value: -0.1
        })
    );
    assert!(matches!(
        Weights::new(0.5, f64::NAN, 0.2),
        Err(ConfigError::InvalidWeight {
            name: "time_window",
            ..
        })
    ));
    assert_eq!(Weights::new(0.0, 0.0, 0.0), Err(ConfigError::ZeroWeightSum));
    assert_eq!(Weights::new(f64::MAX, f64::MAX, 0.0), Err(ConfigError::ZeroWeightSum));
    // Deserializing goes through the same checks.
    let w: Weights = serde_json::from_str(r#"{"service_match":2,"time_window":1,"semantic":1}"#).unwrap();
    assert_eq!(w.service_match(), 0.5);
    assert!(serde_json::from_str::<Weights>(r#"{"service_match":-1,"time_window":1,"semantic":1}"#).is_err());
}

#[test]
fn normalized_weights_are_the_ones_scored_and_recorded() {
    let weights = Weights::new(2.0, 1.0, 1.0).unwrap();
    let config = CorrelationConfig::new(Duration::seconds(300), Duration::seconds(1800), weights, 0.6, 50).unwrap();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 2, 10)]);
    let new = alert(
        "CheckoutApiHighLatency",
        Some("checkout-api"),
        at(14, 4, 40),
        EventKind::Alert,
    );
    let s = score(&new, &open, &config);
    assert!(s.semantic > 0.9999);
    assert!(close(s.total, 0.5 * 1.0 + 0.25 * 0.5 + 0.25 * s.semantic));
    assert_eq!(s.weights, weights);
}

#[test]
fn strategy_is_the_largest_weighted_contribution_with_ties_in_fixed_order() {
    let config = CorrelationConfig::default();
    let t0 = at(12, 0, 0);
    let base = incident("zzz", Some("checkout-api"), &[t0]);

    // Different service, same instant, orthogonal titles: time dominates.
    let mut new = alert("qqq", Some("search-x"), t0, EventKind::Alert);
    new.embedding = vec![0.0; 256];
    assert_eq!(score(&new, &base, &config).strategy, Strategy::TimeWindow);

    // No service, identical title far in the window: semantic (0.1 * 1) beats time (0.2 * 0.25).
    let mut new = alert("zzz", None, t0 + Duration::seconds(225), EventKind::Alert);
    let s = score(&new, &base, &config);
    assert_eq!((s.service_match, s.strategy), (0.0, Strategy::Semantic));
    assert!(s.total < 0.6, "no service can never reach 0.6 with default weights");

    // Tie between time (0.3 * 1.0) and semantic (weights 0.3 / 0.3): time wins.
    let w = Weights::new(0.4, 0.3, 0.3).unwrap();
    let tied = CorrelationConfig::new(Duration::seconds(300), Duration::seconds(1800), w, 0.6, 50).unwrap();
    new.fired_at = t0;
    let s = score(&new, &base, &tied);
    assert!(close(
        s.weights.time_window() * s.time_window,
        s.weights.semantic() * s.semantic
    ));
    assert_eq!(s.strategy, Strategy::TimeWindow);

    // Tie between service and time (0.5 * 1 vs 0.5 * 1): service wins; all zero: service.
    let w = Weights::new(0.5, 0.5, 0.0).unwrap();
    let tied = CorrelationConfig::new(Duration::seconds(300), Duration::seconds(1800), w, 0.6, 50).unwrap();
    let new = alert("qqq", Some("checkout-api"), t0, EventKind::Alert);
    assert_eq!(score(&new, &base, &tied).strategy, Strategy::ServiceMatch);
    let far = alert("qqq", None, t0 + Duration::hours(2), EventKind::Alert);
    let s = score(&far, &base, &tied);
    assert_eq!((s.total, s.strategy), (0.0, Strategy::ServiceMatch));
}

#[test]
fn config_defaults_and_validation() {
    let c = CorrelationConfig::default();
    assert_eq!(c.window_for(EventKind::Alert), Duration::seconds(300));
    assert_eq!(c.window_for(EventKind::Deployment), Duration::seconds(1800));
    assert_eq!((c.threshold(), c.max_alerts_per_incident()), (0.6, 50));
    assert_eq!(c.weights(), Weights::default());
    let (a, d, w) = (Duration::seconds(300), Duration::seconds(1800), Weights::default());
    assert_eq!(
        CorrelationConfig::new(Duration::zero(), d, w, 0.6, 50),
        Err(ConfigError::NonPositiveWindow { kind: EventKind::Alert })
    );
    assert_eq!(
        CorrelationConfig::new(a, Duration::seconds(-1), w, 0.6, 50),
        Err(ConfigError::NonPositiveWindow {
            kind: EventKind::Deployment
        })
    );
    assert_eq!(
        CorrelationConfig::new(a, d, w, 1.5, 50),
        Err(ConfigError::InvalidThreshold(1.5))
    );
    assert!(CorrelationConfig::new(a, d, w, f64::NAN, 50).is_err());
    assert_eq!(CorrelationConfig::new(a, d, w, 0.6, 0), Err(ConfigError::ZeroAlertCap));
    assert_eq!(CorrelationConfig::new(a, d, w, 0.6, 50), Ok(c));
    assert_eq!(
        ConfigError::NonPositiveWindow {
            kind: EventKind::Deployment
        }
        .to_string(),
        "correlation window for deployment must be positive"
    );
    assert_eq!(
        ConfigError::InvalidThreshold(1.5).to_string(),
        "correlation threshold must be in 0..=1, got 1.5"
    );
}

// --- service match ---------------------------------------------------------------------

fn service_match(alert_service: Option<&str>, primary: Option<&str>, affected: &[&str]) -> f64 {
    let mut open = incident("t", primary, &[at(14, 0, 0)]);
    open.affected_services = affected.iter().map(|s| (*s).to_owned()).collect();
    score(
        &alert("t", alert_service, at(14, 0, 0), EventKind::Alert),
        &open,
        &CorrelationConfig::default(),
    )
    .service_match
}

#[test]
fn service_match_is_the_relation_of_the_services() {
    assert_eq!(service_match(Some(" Checkout-API "), Some("checkout-api"), &[]), 1.0);
    assert_eq!(
        service_match(
            Some("CHECKOUT-API"),
            Some("payments-api"),
            &["cart-service", "checkout-api"]
        ),
        1.0
    );
    assert_eq!(
        service_match(Some("payments-api"), Some("payments-db-01"), &[]),
        relation::SIBLING_SCORE
    );
    assert_eq!(service_match(Some("payments-api"), Some("cart-service"), &[]), 0.0);
    assert_eq!(service_match(None, Some("checkout-api"), &[]), 0.0);
    assert_eq!(service_match(Some("checkout-api"), None, &[]), 0.0);
    assert_eq!(service_match(Some("  "), Some("checkout-api"), &[]), 0.0);
    assert_eq!(service_match(Some("checkout-api"), None, &["checkout-api"]), 1.0);
}

#[test]
fn an_entity_named_by_several_open_incidents_decides_less() {
    let config = CorrelationConfig::default();
    let mut new = alert("redis timeouts", Some("billing"), at(14, 1, 0), EventKind::Alert);
    new.evidence = vec!["endpoint=10.1.2.3:6379".to_owned()];
    let mut one = incident("orders failing", Some("orders"), &[at(14, 0, 0)]);
    one.evidence = new.evidence.clone();
    let found = best_match(&new, std::slice::from_ref(&one), &config).expect("one incident names it");
    assert_eq!(found.score.relation.kind, relation::RelationKind::SharedEvidence);
    assert_eq!(found.score.relation.shared_entities, ["endpoint=10.1.2.3:6379"]);

    let mut other = incident("cart failing", Some("cart"), &[at(14, 0, 30)]);
    other.evidence = new.evidence.clone();
    assert!(
        best_match(&new, &[one, other], &config).is_none(),
        "two incidents name it: it tells them apart no more"
    );
}

#[test]
fn an_alert_related_strongly_to_two_incidents_bridges_them() {
    let config = CorrelationConfig::default();
    let mut new = alert("cache errors", Some("subscriber-api"), at(14, 1, 30), EventKind::Alert);
    new.evidence = vec!["endpoint=10.12.8.40:6379".to_owned(), "t:subscriber-api".to_owned()];
    let mut caller = incident("error rate above 5%", Some("selfcare-web"), &[at(14, 0, 0)]);
    caller.evidence = vec!["t:subscriber-api".to_owned(), "t:upstream".to_owned()];
    let mut cache = incident("redis unreachable", Some("subcache"), &[at(14, 0, 45)]);
    cache.evidence = vec!["endpoint=10.12.8.40:6379".to_owned()];
    let unrelated = incident("disk full", Some("backup-01"), &[at(14, 1, 0)]);
    let found = best_match(&new, &[caller, cache, unrelated], &config).expect("correlates");
    assert_eq!(found.index, 0, "mentioned by the caller");
    assert_eq!(
        found.bridges.iter().map(|b| b.0).collect::<Vec<_>>(),
        [1],
        "shares the endpoint"
    );
}

#[test]
fn the_runner_up_is_reported() {
    let config = CorrelationConfig::default();
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 4, 0),
        EventKind::Alert,
    );
    let a = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 1, 0)]);
    let b = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 3, 0)]);
    let found = best_match(&new, &[a, b], &config).expect("correlates");
    assert_eq!(found.index, 1);
    assert_eq!(found.runner_up.map(|(index, _)| index), Some(0));
}

// --- best_match ------------------------------------------------------------------------

#[test]
fn best_match_takes_the_highest_total() {
    let config = CorrelationConfig::default();
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 4, 40),
        EventKind::Alert,
    );
    let older = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 1, 0)]);
    let newer = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 4, 0)]);
    let other = incident("CheckoutApiHighLatency", Some("cart-service"), &[at(14, 4, 40)]);
    let Match { index, score: s, .. } = best_match(&new, &[older.clone(), other, newer.clone()], &config).unwrap();
    assert_eq!(index, 2);
    assert_eq!(s, score(&new, &newer, &config));
    assert_eq!(best_match(&new, &[], &config), None);
}

#[test]
fn best_match_ties_go_to_the_most_recent_nearest_alert_then_the_lowest_index() {
    let config = CorrelationConfig::default();
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 5, 0),
        EventKind::Alert,
    );
    // 60 s before and 60 s after: equal totals.
    let before = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 4, 0)]);
    let after = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 6, 0)]);
    assert_eq!(score(&new, &before, &config).total, score(&new, &after, &config).total);
    let candidates = [before.clone(), after.clone()];
    assert_eq!(best_match(&new, &candidates, &config).map(|m| m.index), Some(1));
    let candidates = [after.clone(), before.clone()];
    assert_eq!(best_match(&new, &candidates, &config).map(|m| m.index), Some(0));

    // Identical candidates: the lowest index.
    let candidates = [before.clone(), before.clone(), before];
    assert_eq!(best_match(&new, &candidates, &config).map(|m| m.index), Some(0));

    // Deterministic across calls.
    let candidates = [after.clone(), after];
    assert_eq!(
        best_match(&new, &candidates, &config),
        best_match(&new, &candidates, &config)
    );
}

// --- Score as stored JSON -------------------------------------------------------------

#[test]
fn score_serializes_every_sub_score() {
    let config = CorrelationConfig::default();
    let open = incident("CheckoutApiHighLatency", Some("checkout-api"), &[at(14, 2, 10)]);
    let new = alert(
        "CheckoutApiHighErrorRate",
        Some("checkout-api"),
        at(14, 4, 40),
        EventKind::Alert,
    );
    let s = score(&new, &open, &config);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json, s.to_details());
    assert_eq!(json["strategy"], "service_match");
    assert_eq!(json["service_match"], 1.0);
    assert_eq!(json["time_window"], 0.5);
    assert_eq!(json["threshold"], 0.6);
    assert_eq!(json["window_secs"], 300);
    assert_eq!(json["weights"]["service_match"], DEFAULT_SERVICE_WEIGHT);
    assert_eq!(json["weights"]["time_window"], DEFAULT_TIME_WEIGHT);
    assert_eq!(json["weights"]["semantic"], DEFAULT_SEMANTIC_WEIGHT);
    assert_eq!(json["relation"]["kind"], "same_service");
    assert!(json["semantic"].is_f64() && json["total"].is_f64());
    let back: Score = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
    assert_eq!(Strategy::TimeWindow.to_string(), "time_window");
}
