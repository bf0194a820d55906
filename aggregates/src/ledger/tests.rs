use chrono::TimeZone;

use super::quotes::excerpt;
use super::*;

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 9, 0, 0).unwrap() + Duration::seconds(seconds)
}

fn alert(service: &str, text: &str, seconds: i64) -> AlertRecord {
    AlertRecord::new(
        Some(service.into()),
        format!("{service} alert"),
        vec![("detail".into(), text.into())],
        Evidence::extract([("service", service)], [text]),
        at(seconds),
    )
}

#[test]
fn the_dependency_named_by_its_callers_and_failing_itself_is_confirmed() {
    let alerts = [
        alert("selfcare-web", "GET /account 502 (upstream subscriber-api)", 0),
        alert(
            "subcache",
            "redis_up == 0 on 10.12.8.40:6379; host does not answer ping; sentinel quorum 2",
            45,
        ),
        alert(
            "subscriber-api",
            "GET /balance failed: dial tcp 10.12.8.40:6379: i/o timeout",
            90,
        ),
        alert(
            "usage-api",
            "JedisConnectionException: Failed to connect to subcache.cellora.internal",
            150,
        ),
    ];
    let ledger = build(&alerts, &[]);
    let leader = ledger.leading().expect("a cause");
    assert_eq!(leader.component, "subcache", "{ledger:#?}");
    assert_eq!(leader.verdict, Verdict::Confirmed);
    assert!(leader.named_by.contains(&"usage-api".to_owned()));
    assert!(ledger.ruled_out.iter().all(|r| r.subject != "subcache"));
}

#[test]
fn a_change_of_the_failing_service_before_its_failures_leads() {
    let alerts = [alert(
        "ledger-writer",
        "pod is in CrashLoopBackOff after the rollout",
        60,
    )];
    let change = ChangeRecord {
        service: Some("ledger-writer".into()),
        title: "ledger-writer deploy".into(),
        message: Some("Deployed ledger-writer 3.2.0".into()),
        version: Some("3.2.0".into()),
        commit: None,
        failed: true,
        at: at(0),
    };
    let ledger = build(&alerts, &[change]);
    let leader = ledger.leading().unwrap();
    assert_eq!(
        (leader.component.as_str(), leader.kind),
        ("ledger-writer", CauseKind::Change)
    );
    assert!(leader.support.iter().any(|f| f.excerpt.contains("3.2.0")));
}

#[test]
fn nearby_alerts_are_reasoned_from_when_evidence_leads_to_them() {
    let incident = [alert(
        "hotel-web",
        "POST /book/confirm 502: failed calls to reservation-api",
        0,
    )];
    let nearby = [
        alert(
            "reservation-api",
            "payment step failed: PAYMENT_PROVIDER_UNAVAILABLE from payment-orchestrator",
            160,
        ),
        alert(
            "payment-orchestrator",
            "POST https://api.payvault.example/v2/authorizations -> 503",
            50,
        ),
        alert(
            "payvault",
            "Synthetic check failed 5 of 5: HTTP 503 from api.payvault.example; quorum of regions lost",
            110,
        ),
        alert(
            "backup-01",
            "disk /srv/backups is 88% full, no space left on device soon",
            170,
        ),
    ];
    let ledger = build_with_context(&incident, &nearby, &[]);
    assert_eq!(ledger.leading().unwrap().component, "payvault", "{ledger:#?}");
    assert!(ledger.ruled_out.iter().any(|r| r.subject == "backup-01"));
}

#[test]
fn a_failure_shared_with_another_incident_is_a_lead_not_a_path_into_it() {
    let incident = [
        alert("smtp-relay-02", "No free inodes on /var/spool/postfix", 0),
        alert(
            "mail-send-api",
            "send failed: smtp-relay-02:25 refused the connection",
            60,
        ),
    ];
    // Another incident of the same minutes: a disk fills, and its caller names it. The
    // shared kind of failure reaches the disk's alert, not what its callers say of it.
    let nearby = [
        alert("ch-events-03", "No free inodes on /var/lib/clickhouse, disk full", 30),
        alert(
            "events-writer",
            "insert into ch-events-03 failed: no space left on device",
            90,
        ),
    ];
    let ledger = build_with_context(&incident, &nearby, &[]);
    assert_eq!(ledger.leading().unwrap().component, "smtp-relay-02", "{ledger:#?}");
    let other = ledger
        .hypotheses
        .iter()
        .find(|h| h.component == "ch-events-03")
        .unwrap();
    assert!(other.named_by.is_empty(), "{other:#?}");
}

#[test]
fn a_caller_naming_the_components_domain_word_supports_it() {
    let alerts = [
        alert(
            "basket-api",
            "POST /v2/baskets/items 500: flag promo_v2=on (flag revision 88, rollout 100%)",
            0,
        ),
        alert("basketly-web", "basket update failures 5.2%", 90),
    ];
    let ledger = build(&alerts, &[]);
    let leader = ledger.leading().expect("the configuration change leads");
    assert_eq!(leader.component, "basket-api");
    assert_eq!(leader.named_by, ["basketly-web"]);
    assert_eq!(leader.verdict, Verdict::Confirmed);
}

#[test]
fn the_longest_quote_of_a_failure_is_kept() {
    let alert = AlertRecord::new(
        Some("iam-core".into()),
        "KubeDeploymentReplicasUnavailable".into(),
        vec![
            ("alertname".into(), "KubeDeploymentReplicasUnavailable".into()),
            (
                "description".into(),
                "iam-core has 0 of 3 replicas available: all pods were evicted".into(),
            ),
        ],
        Evidence::extract([("service", "iam-core")], ["iam-core has 0 of 3 replicas available"]),
        at(0),
    );
    let found = findings(0, &alert);
    let unavailable = found
        .iter()
        .find(|f| f.signature.as_deref() == Some("pods_unavailable"))
        .unwrap();
    assert_eq!(unavailable.field, "description");
    assert!(unavailable.excerpt.contains("evicted"), "{unavailable:?}");
}

#[test]
fn without_a_failure_anywhere_nothing_is_established() {
    let alerts = [alert(
        "pattern-api",
        "p99 latency is 1.94 s; request and error rates are normal",
        0,
    )];
    let ledger = build(&alerts, &[]);
    assert_eq!(ledger.verdict(), Verdict::Inconclusive);
    assert!(ledger.leading().is_none());
}

#[test]
fn failures_nothing_leads_to_are_leads_only_when_nothing_is_established() {
    let vague = [alert("upload-api", "photo upload failure rate 31%", 0)];
    let nearby = [
        alert(
            "obj-store",
            "MinIO cluster lost write quorum: 2 of 4 drives offline",
            80,
        ),
        alert("feed-api", "broken image rate above 2%", 140),
    ];
    let ledger = build_with_context(&vague, &nearby, &[]);
    assert_eq!(ledger.verdict(), Verdict::Inconclusive);
    let unlinked: Vec<&str> = ledger.unlinked.iter().map(|u| u.component.as_str()).collect();
    assert_eq!(unlinked, ["obj-store"], "{ledger:#?}");
    assert!(!ledger.ruled_out.iter().any(|r| r.subject == "obj-store"));
    assert!(ledger.ruled_out.iter().any(|r| r.subject == "feed-api"));
    assert_eq!(ledger.conclusion().unlinked.len(), 1);

    let failing = [alert("upload-api", "OOMKilled: container exceeded its memory limit", 0)];
    let ledger = build_with_context(&failing, &nearby, &[]);
    assert!(ledger.unlinked.is_empty(), "an established cause needs no leads");
    assert!(ledger.ruled_out.iter().any(|r| r.subject == "obj-store"));
}

#[test]
fn a_zone_named_by_alerts_with_packet_loss_is_the_network_cause() {
    let alerts = [
        alert("k8s-fra1c-node-14", "inbound_packets_dropped ratio 7.9% on ens5", 0),
        alert(
            "gps-ingest",
            "6 of 18 pods slow, all in topology.kubernetes.io/zone=fra1-c; TCP retransmission 9%",
            50,
        ),
    ];
    let ledger = build(&alerts, &[]);
    assert_eq!(ledger.leading().unwrap().component, "fra1-c", "{ledger:#?}");
}

#[test]
fn excerpts_quote_around_the_phrase_within_bounds() {
    let text = format!("{} OOMKilled {}", "a".repeat(200), "é".repeat(200));
    let found = signatures::matches(&text);
    let quoted = excerpt(&text, found[0].1.clone());
    assert!(quoted.contains("OOMKilled") && quoted.starts_with('…') && quoted.ends_with('…'));
}
