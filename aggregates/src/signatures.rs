//! The catalog of error signatures: phrases that alert text carries when a known kind of failure
//! happens, what that kind of failure implicates, and how much one match says. It is data (one
//! row per signature in [`CATALOG`]), read by correlation (alerts showing the same distinctive
//! failure belong together) and by the analysis (what failed, and where to look).
//!
//! Phrases are matched as lowercase literals, all at once (Aho-Corasick): linear in the text,
//! with nothing to backtrack.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde::Serialize;

/// What a failure kind points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Implicates {
    /// Something the alerting service calls (named in the text: an address, a host, a name).
    Dependency,
    /// The alerting component itself (its memory, its pods).
    Component,
    /// The host or node it runs on.
    Host,
    /// The network between components (a zone, a link).
    Network,
    /// A database the component uses.
    Database,
    /// A change: a deploy, a migration, a configuration push.
    Change,
    /// The capacity of the component against its load.
    Capacity,
}

/// One row of the catalog.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Signature {
    /// Stable name of the failure kind, e.g. `dns_failure`.
    pub id: &'static str,
    /// What people call it.
    pub name: &'static str,
    /// Lowercase phrases; any one of them in the text is a match.
    pub phrases: &'static [&'static str],
    pub implicates: Implicates,
    /// How strongly one match says this failure happened, in `0..=1`.
    pub confidence: f64,
    /// Rare enough that two alerts showing it at once likely share a cause (a DNS failure, a
    /// lost quorum), unlike a timeout or a 5xx, which every outage shows.
    pub distinctive: bool,
}

/// The signatures, checked in order; every matching one is reported.
#[rustfmt::skip]
pub const CATALOG: &[Signature] = &[
    Signature { id: "connection_refused", name: "connection refused by a dependency", phrases: &["connection refused", "econnrefused", "connect: connection refused", "no route to host", "host does not answer", "could not be established", "failed to connect to"], implicates: Implicates::Dependency, confidence: 0.7, distinctive: false },
    Signature { id: "dependency_timeout", name: "timeouts calling a dependency", phrases: &["i/o timeout", "timed out", "deadline exceeded", "connection timeout", "connect timeout", "read timeout", "statement timeout", "upstream connect error"], implicates: Implicates::Dependency, confidence: 0.5, distinctive: false },
    Signature { id: "dns_failure", name: "DNS resolution failures", phrases: &["no such host", "name resolution", "unknownhostexception", "eai_again", "nxdomain", "servfail", "could not resolve host", "dial tcp: lookup", "getaddrinfo", "coredns"], implicates: Implicates::Dependency, confidence: 0.8, distinctive: true },
    Signature { id: "provider_5xx", name: "errors from an external provider", phrases: &["503 service unavailable", "502 bad gateway", "504 gateway timeout", "service unavailable", "bad gateway", "provider_unavailable", "provider unavailable", "vendor status", "http 502", "http 503", "http 504"], implicates: Implicates::Dependency, confidence: 0.6, distinctive: false },
    Signature { id: "pool_exhausted", name: "connection or thread pool exhaustion", phrases: &["pool exhausted", "connection is not available", "too many connections", "remaining connection slots", "no available connections", "pool timeout", "rejectedexecutionexception", "thread pool", "connections usable", "pool size"], implicates: Implicates::Component, confidence: 0.7, distinctive: false },
    Signature { id: "out_of_memory", name: "out of memory", phrases: &["oomkilled", "out of memory", "oom-kill", "oom killer", "outofmemoryerror", "cannot allocate memory", "oom command not allowed", "maxmemory", "memory alarm", "memory resources exhausted", "memory limit"], implicates: Implicates::Component, confidence: 0.85, distinctive: true },
    Signature { id: "disk_full", name: "disk full", phrases: &["no space left on device", "disk full", "not enough space", "not_enough_space", "diskpressure", "disk pressure", "disk_space_usage", "out_of_disk_space", "enospc", "runs out of space"], implicates: Implicates::Host, confidence: 0.85, distinctive: true },
    Signature { id: "inode_exhaustion", name: "inodes exhausted", phrases: &["inode", "no free inodes"], implicates: Implicates::Host, confidence: 0.85, distinctive: true },
    Signature { id: "file_descriptors", name: "file descriptors exhausted", phrases: &["too many open files", "file descriptors", "emfile", "open files limit", "accept4: too many"], implicates: Implicates::Component, confidence: 0.85, distinctive: true },
    Signature { id: "certificate_expired", name: "certificate expired or invalid", phrases: &["x509", "certificate has expired", "certificate expired", "certificate verify failed", "tls handshake", "ssl handshake", "cert expired", "expired certificate", "certificate is not valid", "handshake failure"], implicates: Implicates::Dependency, confidence: 0.9, distinctive: true },
    Signature { id: "credential_expired", name: "expired or rejected credentials", phrases: &["invalid_client", "client secret", "secret has expired", "api key expired", "invalid api key", "token expired", "key expired", "key_expired", "credentials expired", "expired_token", "invalid_token", "unauthenticated", "401 unauthorized"], implicates: Implicates::Dependency, confidence: 0.75, distinctive: true },
    Signature { id: "lock_contention", name: "lock waits and deadlocks", phrases: &["lock wait timeout", "deadlock", "idle in transaction", "waiting for a lock", "blocked on lock", "accessexclusivelock", "access exclusive lock", "lock timeout", "could not obtain lock", "vacuum full"], implicates: Implicates::Database, confidence: 0.85, distinctive: true },
    Signature { id: "replication_lag", name: "replication lag", phrases: &["replication lag", "replica lag", "replay lag", "seconds_behind_master", "replication delay", "behind the primary", "recovery conflict"], implicates: Implicates::Database, confidence: 0.85, distinctive: true },
    Signature { id: "failover", name: "database failover", phrases: &["failover", "leader changed", "leader change", "read-only transaction", "promoted to primary", "new primary"], implicates: Implicates::Database, confidence: 0.8, distinctive: true },
    Signature { id: "packet_loss", name: "packet loss", phrases: &["packet loss", "packets dropped", "dropped packets", "packet drops", "packets_dropped", "retransmission", "retransmits", "retransmit"], implicates: Implicates::Network, confidence: 0.85, distinctive: true },
    Signature { id: "autoscaler_max", name: "autoscaler at its maximum", phrases: &["maxed out", "at max replicas", "maximum replicas", "max replicas", "hpamaxedout", "unable to scale", "reached its maximum", "at its maximum"], implicates: Implicates::Capacity, confidence: 0.8, distinctive: true },
    Signature { id: "cpu_throttling", name: "CPU throttling or saturation", phrases: &["cpu throttling", "cfs_throttled", "throttled cpu", "cpu saturation", "cpu_usage", "cpu utilization"], implicates: Implicates::Component, confidence: 0.6, distinctive: false },
    Signature { id: "pods_unavailable", name: "no replica able to run", phrases: &["evicted", "replicas available", "no available replicas", "replicasunavailable", "unschedulable", "insufficient cpu", "insufficient memory", "failedscheduling"], implicates: Implicates::Component, confidence: 0.85, distinctive: true },
    Signature { id: "crash_loop", name: "crash loop", phrases: &["crashloopbackoff", "back-off restarting", "crash loop", "crashlooping", "exited with code", "segmentation fault", "restarted"], implicates: Implicates::Component, confidence: 0.8, distinctive: true },
    Signature { id: "config_changed", name: "a configuration change", phrases: &["feature flag", "flag revision", "config reload", "configuration reload", "config=", "loaded_at", "config sync", "config rollout", "rollout 100%", "ttl changed", "record changed"], implicates: Implicates::Change, confidence: 0.7, distinctive: true },
    Signature { id: "bad_config", name: "bad configuration", phrases: &["unknown field", "unknown key", "invalid configuration", "failed to parse config", "unrecognized option", "configuration error", "config error", "invalid config"], implicates: Implicates::Change, confidence: 0.8, distinctive: true },
    Signature { id: "failed_rollout", name: "failed or unstable rollout", phrases: &["rollout failed", "progress deadline exceeded", "imagepullbackoff", "errimagepull", "readiness probe failed", "liveness probe failed", "rolled back", "rollback"], implicates: Implicates::Change, confidence: 0.8, distinctive: true },
    Signature { id: "schema_mismatch", name: "schema does not match the code", phrases: &["undefinedcolumn", "undefined column", "no such column", "unknown column", "column does not exist", "relation does not exist", "missing column"], implicates: Implicates::Change, confidence: 0.85, distinctive: true },
    Signature { id: "protocol_mismatch", name: "incompatible wire format", phrases: &["failed to unmarshal", "wire-format", "cannot parse invalid", "cannot deserialize", "incompatible schema", "unexpected end of json"], implicates: Implicates::Change, confidence: 0.8, distinctive: true },
    Signature { id: "rate_limited", name: "rate limited", phrases: &["429", "too many requests", "rate limit", "ratelimit", "over_limit", "throttling"], implicates: Implicates::Capacity, confidence: 0.6, distinctive: false },
    Signature { id: "quorum_lost", name: "cluster quorum or replicas lost", phrases: &["quorum", "not_enough_replicas", "not enough replicas", "brokers offline", "under-replicated", "under replicated", "broker processes"], implicates: Implicates::Dependency, confidence: 0.85, distinctive: true },
];

static MATCHER: LazyLock<(AhoCorasick, Vec<usize>)> = LazyLock::new(|| {
    let (phrases, owners): (Vec<&str>, Vec<usize>) = CATALOG
        .iter()
        .enumerate()
        .flat_map(|(index, signature)| signature.phrases.iter().map(move |phrase| (*phrase, index)))
        .unzip();
    let matcher = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::Standard)
        .build(phrases)
        .expect("the catalog's phrases build an automaton");
    (matcher, owners)
});

/// The signatures whose phrases occur in `text`, in catalog order, each once.
pub fn matching(text: &str) -> Vec<&'static Signature> {
    matches(text).into_iter().map(|(signature, _)| signature).collect()
}

/// Like [`matching`], with the byte range of each signature's first phrase in `text`.
pub fn matches(text: &str) -> Vec<(&'static Signature, std::ops::Range<usize>)> {
    let (matcher, owners) = &*MATCHER;
    let mut found: Vec<Option<std::ops::Range<usize>>> = vec![None; CATALOG.len()];
    for hit in matcher.find_overlapping_iter(text) {
        let slot = &mut found[owners[hit.pattern().as_usize()]];
        if slot.as_ref().is_none_or(|range| hit.start() < range.start) {
            *slot = Some(hit.range());
        }
    }
    CATALOG
        .iter()
        .zip(found)
        .filter_map(|(signature, range)| Some((signature, range?)))
        .collect()
}

/// The signature of this id.
pub fn by_id(id: &str) -> Option<&'static Signature> {
    CATALOG.iter().find(|signature| signature.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(text: &str) -> Vec<&'static str> {
        matching(text).into_iter().map(|s| s.id).collect()
    }

    /// Each signature: texts that must match it, and near misses that must not.
    #[rustfmt::skip]
    const CASES: &[(&str, &[&str], &[&str])] = &[
        ("connection_refused", &["dial tcp 10.9.4.13:9000: connect: connection refused", "ECONNREFUSED 127.0.0.1:5432"], &["the request was refused by policy"]),
        ("dependency_timeout", &["dial tcp 10.12.8.40:6379: i/o timeout", "context deadline exceeded"], &["timeout configured to 30s"]),
        ("dns_failure", &["java.net.UnknownHostException: redis.internal: Temporary failure in name resolution", "getaddrinfo EAI_AGAIN media.internal", "dial tcp: lookup db.internal on 10.0.0.10:53"], &["Failed to connect to any host resolved for DNS name subcache.internal"]),
        ("provider_5xx", &["POST https://api.psp.example/v2 -> 503 Service Unavailable", "502 Bad Gateway from geo.example", "check failed 6 of 6 runs: HTTP 502 or timeout after 10 s"], &["HTTP 500 internal error"]),
        ("pool_exhausted", &["HikariPool-1 - Connection is not available, request timed out", "pool exhausted: 0 of 64 connections usable"], &["the pool is healthy"]),
        ("out_of_memory", &["container was OOMKilled 4 times", "OOM command not allowed when used memory > 'maxmemory'"], &["memory usage is 40%"]),
        ("disk_full", &["Cannot reserve 1.00 MiB, not enough space (NOT_ENOUGH_SPACE)", "write failed: No space left on device"], &["disk latency is high"]),
        ("inode_exhaustion", &["No free inodes on /var/spool", "inode usage 100%"], &["node is ready"]),
        ("file_descriptors", &["accept4: too many open files", "file descriptors at 99% of the limit"], &["opened the file"]),
        ("certificate_expired", &["x509: certificate has expired or is not yet valid", "TLS handshake failed"], &["The TLS certificate for status.example expires in 14 days"]),
        ("credential_expired", &["401 invalid_client: client secret expired", "token issuer rejected: invalid_token", r#"401 {"code":"key_expired","message":"API key expired"}"#], &["token refreshed successfully", "the key expires in 30 days"]),
        ("lock_contention", &["148 queries have been waiting for a lock", "VACUUM FULL holds an AccessExclusiveLock", "deadlock detected"], &["lockfile created"]),
        ("replication_lag", &["Replay lag on catalog-pg-replica-2 is 842s", "replication lag above 60s"], &["lag of the consumer group"]),
        ("failover", &["leader changed: pg-1 -> pg-2 (failover)", "cannot execute UPDATE in a read-only transaction"], &["leader election finished, no change"]),
        ("packet_loss", &["inbound_packets_dropped ratio 7.9%", "TCP retransmission rate is 9%"], &["packets received normally"]),
        ("autoscaler_max", &["HPA has been running at max replicas for 15 minutes", "KubeHpaMaxedOut"], &["scaled to 4 replicas"]),
        ("cpu_throttling", &["CPU throttling on 6 of 6 pods", "cfs_throttled_seconds rising"], &["cpu limit set to 2"]),
        ("pods_unavailable", &["Deployment identity/iam-core has 0 of 3 replicas available; all 3 pods were evicted", "0/5 nodes are available: 3 Insufficient cpu"], &["all replicas are ready"]),
        ("crash_loop", &["pod is in CrashLoopBackOff", "Back-off restarting failed container"], &["container started"]),
        ("config_changed", &["flag promo_v2=on (flag revision 88, rollout 100%)", "config=ratelimit.yaml loaded_at=09:00:02Z"], &["configured limits"]),
        ("bad_config", &["failed to parse config: unknown field `pool_szie`", "invalid configuration for route"], &["configuration reloaded"]),
        ("failed_rollout", &["Deployment exceeded its progress deadline (progress deadline exceeded)", "ImagePullBackOff"], &["rollout complete"]),
        ("schema_mismatch", &["ERROR: column \"tier\" does not exist (UndefinedColumn)"], &["column added"]),
        ("protocol_mismatch", &["grpc: failed to unmarshal the received message: proto: cannot parse invalid wire-format data"], &["message parsed"]),
        ("rate_limited", &["POST /bid (HTTP 429)", "ratelimit descriptor OVER_LIMIT"], &["limits are fine"]),
        ("quorum_lost", &["Write quorum lost for erasure set 1", "NOT_ENOUGH_REPLICAS"], &["all replicas in sync"]),
    ];

    #[test]
    fn every_signature_matches_its_examples_and_not_its_near_misses() {
        assert_eq!(CASES.len(), CATALOG.len(), "every signature has cases");
        for (id, hits, misses) in CASES {
            assert!(by_id(id).is_some(), "{id} is in the catalog");
            for text in *hits {
                assert!(ids(text).contains(id), "{id} should match {text:?}: {:?}", ids(text));
            }
            for text in *misses {
                assert!(!ids(text).contains(id), "{id} should not match {text:?}");
            }
        }
    }

    #[test]
    fn ids_are_unique_and_phrases_lowercase() {
        for (i, signature) in CATALOG.iter().enumerate() {
            assert!(
                CATALOG[..i].iter().all(|other| other.id != signature.id),
                "{} twice",
                signature.id
            );
            assert!(
                signature.phrases.iter().all(|p| *p == p.to_lowercase()),
                "{}",
                signature.id
            );
            assert!((0.0..=1.0).contains(&signature.confidence));
        }
    }

    #[test]
    fn a_megabyte_of_hostile_text_is_matched_in_one_pass() {
        let hostile = "time".repeat(100_000) + &"d".repeat(300_000) + &"x509".repeat(100_000);
        assert_eq!(ids(&hostile), ["certificate_expired"]);
    }
}
