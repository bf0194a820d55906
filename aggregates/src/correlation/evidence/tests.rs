use super::*;

fn entities(text: &str) -> Vec<(EntityKind, String)> {
    Evidence::extract([], [text])
        .entities
        .into_iter()
        .map(|e| (e.kind, e.value))
        .collect()
}

fn has(text: &str, kind: EntityKind, value: &str) -> bool {
    entities(text).contains(&(kind, value.to_owned()))
}

#[test]
fn addresses_in_log_lines() {
    let line = "GET /balance failed: dial tcp 10.12.8.40:6379: i/o timeout (pool exhausted)";
    assert!(has(line, EntityKind::Ip, "10.12.8.40"));
    assert!(has(line, EntityKind::Endpoint, "10.12.8.40:6379"));
    let dns = "JedisConnectionException: Failed to connect to any host resolved for DNS name subcache.cellora.internal";
    assert!(has(dns, EntityKind::Dns, "subcache.cellora.internal"));
    let peer = "peer=fare-quote.pricing.svc.cluster.local:9090 peer_version=5.8.0";
    assert!(has(peer, EntityKind::Dns, "fare-quote.pricing.svc.cluster.local"));
    assert!(has(
        peer,
        EntityKind::Endpoint,
        "fare-quote.pricing.svc.cluster.local:9090"
    ));
    assert!(has(peer, EntityKind::Version, "5.8.0"));
    assert!(has(
        "insert failed on ch-events-03:9000: Code 243",
        EntityKind::Host,
        "ch-events-03"
    ));
}

#[test]
fn owning_teams_are_context_keys() {
    let evidence = Evidence::extract([("teams", "Core Banking, Payments"), ("namespace", "ledger")], []);
    let keys = evidence.sorted_keys();
    for key in ["ctx:team=core-banking", "ctx:team=payments", "ctx:namespace=ledger"] {
        assert!(keys.contains(&key.to_owned()), "{key} in {keys:?}");
    }
    let from_label = Evidence::extract([("team", "core-banking")], []);
    assert!(from_label.sorted_keys().contains(&"ctx:team=core-banking".to_owned()));
}

#[test]
fn an_account_is_its_own_key_and_not_a_context() {
    let evidence = Evidence::extract([("team", "core")], []).with_account(Some("Acme"));
    let keys = evidence.sorted_keys();
    assert!(keys.contains(&"acct:acme".to_owned()), "{keys:?}");
    assert!(!keys.iter().any(|key| key.starts_with("ctx:acc")), "{keys:?}");
}

#[test]
fn a_capitalised_word_after_a_host_word_is_prose() {
    assert!(!has(
        "escalation: Payments - Primary On-Call",
        EntityKind::Host,
        "on-call"
    ));
    assert!(has("failover: primary db-7 lost", EntityKind::Host, "db-7"));
}

#[test]
fn url_hosts() {
    let text = "POST https://api.payvault.example/v2/authorizations -> 503";
    assert!(has(text, EntityKind::Dns, "api.payvault.example"));
    assert!(has(
        "Get \"https://user@10.77.3.19:443/jwks\"",
        EntityKind::Endpoint,
        "10.77.3.19:443"
    ));
}

#[test]
fn markdown_link_targets_are_navigation_not_evidence() {
    let body = "Top error: 502 from geo.mapgrid.example. [[Monitor Status](https://app.monitor.example.com/m/1)]";
    assert!(has(body, EntityKind::Dns, "geo.mapgrid.example"));
    assert!(!has(body, EntityKind::Dns, "app.monitor.example.com"));
    assert!(!has(
        "unclosed [link](https://a.example.com",
        EntityKind::Dns,
        "a.example.com"
    ));
}

#[test]
fn near_misses_are_not_addresses() {
    for text in [
        "java.net.UnknownHostException raised",
        "trace.http.request.errors is above",
        "config ratelimit-partners.yaml loaded",
        "read /var/log/containers/app.log",
        "version 1.2 of the client",
        "300.1.2.3 is not an address",
        "at 09:00:02Z",
    ] {
        let found: Vec<_> = entities(text)
            .into_iter()
            .filter(|(kind, _)| {
                matches!(
                    kind,
                    EntityKind::Ip | EntityKind::Dns | EntityKind::Endpoint | EntityKind::Version
                )
            })
            .collect();
        assert!(found.is_empty(), "{text}: {found:?}");
    }
}

#[test]
fn commits_and_hosts_need_their_context() {
    assert!(has("loaded_at=09:00 sha=5e1d9c7 ok", EntityKind::Commit, "5e1d9c7"));
    assert!(!has(
        "trace_id=8b76674a575cf1dc",
        EntityKind::Commit,
        "8b76674a575cf1dc"
    ));
    assert!(has(
        "redis_up == 0 on host subcache-redis-02",
        EntityKind::Host,
        "subcache-redis-02"
    ));
    assert!(!has(
        "failed on subcache-redis-02",
        EntityKind::Host,
        "subcache-redis-02"
    ));
}

#[test]
fn hosts_of_one_fleet_share_a_group() {
    for text in [
        "on host k8s-fra1c-node-14",
        "on host k8s-fra1c-node-09",
        "errors come from nodes k8s-fra1c-*",
    ] {
        assert!(has(text, EntityKind::HostGroup, "k8s-fra1c"), "{text}");
    }
    assert!(
        !has("broker kafka-2", EntityKind::HostGroup, "kafka"),
        "one part is no fleet"
    );
    assert_eq!(host_groups("cart-redis-01"), ["cart-redis"]);
    assert!(host_groups("ip-10-0-34-17").is_empty());
    assert!(host_groups("db-7").is_empty());
    assert!(host_groups("web-node-3").is_empty(), "generic parts only");
}

#[test]
fn zones_are_named_by_their_context() {
    assert!(has(
        "6 of 18 pods are slow, all on nodes in topology.kubernetes.io/zone=fra1-c;",
        EntityKind::Zone,
        "fra1-c"
    ));
    assert!(!has(
        "nodes in topology.kubernetes.io/zone=fra1-c",
        EntityKind::Dns,
        "topology.kubernetes.io"
    ));
    assert!(!has("the ozone layer", EntityKind::Zone, "layer"));
}

#[test]
fn labels_name_entities_by_key() {
    let evidence = Evidence::extract(
        [
            ("namespace", "booking"),
            ("pod", "api-6b8d-w4tzq"),
            ("instance", "10.61.4.23:8080"),
            ("team", "trips"),
        ],
        [],
    );
    let kinds: Vec<_> = evidence.entities.iter().map(|e| (e.kind, e.value.as_str())).collect();
    assert!(kinds.contains(&(EntityKind::Namespace, "booking")));
    assert!(kinds.contains(&(EntityKind::Pod, "api-6b8d-w4tzq")));
    assert!(kinds.contains(&(EntityKind::Endpoint, "10.61.4.23:8080")));
    assert!(evidence.terms.is_empty(), "label values give entities, not terms");
}

#[test]
fn terms_keep_hyphenated_names_and_their_runs() {
    let evidence = Evidence::extract(
        [],
        ["upstream subscriber-api; node evt-kafka-2.quillbase.internal trace_id=8b76674a575cf1dc26"],
    );
    for term in [
        "upstream",
        "subscriber-api",
        "subscriber",
        "evt-kafka",
        "evt-kafka-2",
        "quillbase",
        "internal",
    ] {
        assert!(
            evidence.terms.iter().any(|t| t == term),
            "{term} in {:?}",
            evidence.terms
        );
    }
    assert!(
        !evidence.terms.iter().any(|t| t.contains("8b76674a")),
        "ids are not terms"
    );
}

#[test]
fn extraction_is_deterministic_and_bounded() {
    let text = "10.0.0.1:80 a-b-c host db-1 ".repeat(10_000);
    let first = Evidence::extract([], [text.as_str()]);
    assert_eq!(first, Evidence::extract([], [text.as_str()]));
    assert!(first.entities.len() <= MAX_ENTITIES && first.terms.len() <= MAX_TERMS);
}

#[test]
fn hostile_text_is_read_in_one_pass() {
    // A megabyte of separators, dots and digits: what backtracking engines choke on. The
    // scanner has no backtracking to do; this checks it ends and stays bounded.
    let hostile = format!("{}{}", "1.".repeat(300_000), "a-".repeat(200_000));
    let evidence = Evidence::extract([("host", hostile.as_str())], [hostile.as_str()]);
    assert!(evidence.entities.len() <= MAX_ENTITIES && evidence.terms.len() <= MAX_TERMS);
}
