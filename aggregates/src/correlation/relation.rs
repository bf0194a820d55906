//! How an alert's service relates to an incident's: the same service, one naming the other (a
//! caller's error text naming its dependency is a learned edge of the topology), a specific
//! entity both name (an address, a DNS name, a host), or sibling names (`claims-api` and
//! `claims-portal`).
//!
//! Shared entities and sibling names count for less when other open incidents share them too:
//! `10.20.4.31:6379` named by one incident says a lot, named by five it says little.

use serde::{Deserialize, Serialize};

use super::account::ACCOUNT_PREFIX;
use super::evidence::{keys_with_prefix, term_key};

/// One service naming the other.
pub const MENTION_SCORE: f64 = 0.9;
/// A specific entity named by both, divided by the open incidents that name it.
pub const SHARED_ENTITY_SCORE: f64 = 0.85;
/// Service names with the same leading part, divided by the open incidents that have one.
pub const SIBLING_SCORE: f64 = 0.85;
/// One side's text naming a distinctive part of the other's service name (`add-to-cart failures`
/// and `cart-redis`), divided by the open incidents with a service of that part.
pub const NAME_PART_SCORE: f64 = 0.75;
/// A distinctive failure kind shown by both (a DNS failure, a lost quorum), divided by the open
/// incidents that show it.
pub const SHARED_FAILURE_SCORE: f64 = 0.4;
/// The most indirect evidence can add up to: below the same service.
pub const MAX_INDIRECT_SCORE: f64 = 0.95;
/// A serious alert of a tenant that has exactly one incident open within the window, with
/// nothing else to relate them: enough with a close time, not with a distant one.
pub const SOLE_CANDIDATE_SCORE: f64 = 0.75;

/// Name parts that say what a service is, not which: stripped before names are compared.
#[rustfmt::skip]
pub const GENERIC_NAME_PARTS: &[&str] = &[
    "api", "svc", "service", "services", "web", "app", "apps", "server", "worker", "workers", "backend",
    "frontend", "bff", "ui", "gateway", "gw", "prod", "production", "staging", "stage", "dev", "main", "core",
    "v1", "v2", "v3", "http", "grpc", "internal", "public", "portal", "site", "db", "node", "host",
];

/// What the relation rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelationKind {
    SameService,
    /// The alert's text names one of the incident's services.
    Mentions,
    /// The incident's alerts name the alert's service.
    MentionedBy,
    /// Shared entities and/or sibling names.
    SharedEvidence,
    /// A dependency the user declared, either way (`correlation::topology`).
    Dependency,
    /// A dependency learned from merges, splits and mentions, weighed by its confidence.
    LearnedDependency,
    /// One side names an address the other side's service owns (declared).
    OwnedAddress,
    /// Nothing shared, but the incident is the only one open within the window (or the only
    /// one of the alert's account) and the alert is serious: what one team sees fail within
    /// minutes is usually one failure.
    SoleCandidate,
    None,
}

/// The relation sub-score and what it rests on (stored in `correlation_details.relation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relation {
    pub score: f64,
    pub kind: RelationKind,
    /// The topology edge, `caller -> dependency`, for a mention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Entity keys (`kind=value`) both name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_entities: Vec<String>,
    /// Open incidents naming the rarest shared entity (this one included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity_incidents: Option<usize>,
    /// The leading name part of sibling services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sibling: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sibling_incidents: Option<usize>,
    /// A name part of one side's service named in the other's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_part: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_part_incidents: Option<usize>,
    /// Distinctive failure kinds both show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_failures: Vec<String>,
    /// Context both were raised in (`ctx:team=…`, `ctx:namespace=…`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_context: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_incidents: Option<usize>,
    /// The account whose only open incident this is, for [`RelationKind::SoleCandidate`] when
    /// other accounts have incidents open too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Distinctive words a warning and the only open incident both use ([`shared_words`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_words: Vec<String>,
}

impl Relation {
    fn of(kind: RelationKind, score: f64) -> Self {
        Self {
            score,
            kind,
            path: None,
            shared_entities: Vec::new(),
            entity_incidents: None,
            sibling: None,
            sibling_incidents: None,
            shared_failures: Vec::new(),
            failure_incidents: None,
            shared_context: Vec::new(),
            name_part: None,
            name_part_incidents: None,
            account: None,
            shared_words: Vec::new(),
        }
    }

    pub fn none() -> Self {
        Self::of(RelationKind::None, 0.0)
    }

    /// The relation to the only open incident: [`SOLE_CANDIDATE_SCORE`] unless the evidence
    /// found a stronger one. A minor alert (a warning) needs some evidence, a shared context,
    /// or a distinctive word both texts use ([`shared_words`]): warnings of other teams fire
    /// all the time. The keys are the alert's and the incident's evidence, sorted.
    pub fn or_sole_candidate(
        self,
        common: &Common<'_>,
        minor: bool,
        alert_keys: &[String],
        incident_keys: &[String],
    ) -> Self {
        if self.score >= SOLE_CANDIDATE_SCORE {
            return self;
        }
        let words = if minor && self.score <= 0.0 && common.context.is_empty() {
            let words = shared_words(alert_keys, incident_keys);
            if words.is_empty() {
                return self;
            }
            words
        } else {
            Vec::new()
        };
        Self {
            kind: RelationKind::SoleCandidate,
            score: SOLE_CANDIDATE_SCORE,
            shared_context: common.context.iter().map(|key| (*key).to_owned()).collect(),
            shared_words: words,
            ..self
        }
    }

    /// Names the account when the relation is the only open incident of it.
    pub fn of_account(mut self, account: Option<&str>) -> Self {
        if self.kind == RelationKind::SoleCandidate {
            self.account = account.map(str::to_owned);
        }
        self
    }

    /// Whether it rests on direct evidence: the same service, one naming the other, or a
    /// specific entity named by at most one other open incident. Domain words, sibling names and
    /// failure kinds only add weight.
    pub fn is_direct(&self) -> bool {
        match self.kind {
            RelationKind::SameService
            | RelationKind::Mentions
            | RelationKind::MentionedBy
            | RelationKind::Dependency
            | RelationKind::OwnedAddress => true,
            RelationKind::LearnedDependency | RelationKind::SoleCandidate => false,
            RelationKind::SharedEvidence => self.entity_incidents.is_some_and(|n| n <= 2),
            RelationKind::None => false,
        }
    }
}

/// What an alert and one incident have in common, before it is weighed against the other open
/// incidents.
#[derive(Debug, Clone, Default)]
pub struct Common<'a> {
    same_service: bool,
    mention: Option<(RelationKind, String)>,
    /// Shared entity keys.
    shared: Vec<&'a str>,
    /// Shared distinctive failure keys.
    failures: Vec<&'a str>,
    /// Shared context keys (`ctx:…`).
    context: Vec<&'a str>,
    sibling: Option<String>,
    /// A distinctive name part of one side's service named in the other's text.
    name_part: Option<String>,
}

impl Common<'_> {
    /// The shared keys, to count the incidents that name each.
    pub fn shared(&self) -> &[&str] {
        &self.shared
    }

    pub fn sibling(&self) -> Option<&str> {
        self.sibling.as_deref()
    }

    pub fn failures(&self) -> &[&str] {
        &self.failures
    }

    pub fn name_part(&self) -> Option<&str> {
        self.name_part.as_deref()
    }
}

/// Words every kind of alert uses: sharing one says nothing of a shared failure.
#[rustfmt::skip]
const ALERT_VOCABULARY: &[&str] = &[
    "above", "below", "threshold", "rate", "ratio", "error", "errors", "failed", "failing", "failure",
    "failures", "fails", "high", "increase", "increased", "drop", "dropped", "time", "times", "minutes",
    "seconds", "hours", "status", "state", "prod", "production", "staging", "check", "checks", "alert",
    "alerts", "warning", "critical", "service", "services", "request", "requests", "response", "latency",
    "timeout", "timeouts", "slow", "degradation", "usage", "utilization", "total", "count", "percent",
    "share", "last", "average", "synthetic", "monitor", "problem", "impact", "open", "triggered",
    "event", "events",
];

/// Words of three parts or four letters and more (not numbers, not [`ALERT_VOCABULARY`]) that
/// both sorted evidence key lists have among their terms: `evt-88123`, `stock`,
/// `doc-revisions`. At most three, for the explanation.
pub fn shared_words(alert_keys: &[String], incident_keys: &[String]) -> Vec<String> {
    keys_with_prefix(alert_keys, "t:")
        .filter(|word| word.len() >= 4 && word.bytes().any(|b| b.is_ascii_alphabetic()))
        .filter(|word| !ALERT_VOCABULARY.contains(word) && !GENERIC_NAME_PARTS.contains(word))
        .filter(|word| incident_keys.binary_search(&term_key(word)).is_ok())
        .take(3)
        .map(str::to_owned)
        .collect()
}

/// The lowercase parts of a service name: `Fare-Quote_svc` gives fare, quote, svc.
pub fn name_parts(service: &str) -> Vec<String> {
    service
        .split(|c: char| !c.is_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The parts that say which service it is (generic parts dropped).
fn core_parts(parts: &[String]) -> Vec<&str> {
    parts
        .iter()
        .map(String::as_str)
        .filter(|p| !GENERIC_NAME_PARTS.contains(p))
        .collect()
}

/// Whether text with these sorted evidence keys names `service`: its whole name, or its core
/// when that has two parts or more (`fare-quote` for `fare-quote-svc`).
pub fn mentions(evidence: &[String], service: &str) -> bool {
    let parts = name_parts(service);
    let full = parts.join("-");
    let contains = |term: &str| evidence.binary_search(&term_key(term)).is_ok();
    if full.len() >= 4 && !GENERIC_NAME_PARTS.contains(&full.as_str()) && contains(&full) {
        return true;
    }
    let core = core_parts(&parts);
    core.len() >= 2 && core.len() < parts.len() && contains(&core.join("-"))
}

/// The leading part of a service name when it is distinctive (4 characters or more, not
/// generic, not a number): siblings share it.
pub fn leading_part(service: &str) -> Option<String> {
    let first = name_parts(service).into_iter().next()?;
    let distinctive =
        first.len() >= 4 && !GENERIC_NAME_PARTS.contains(&first.as_str()) && !first.bytes().all(|b| b.is_ascii_digit());
    distinctive.then_some(first)
}

/// The part of a service name that names its domain: its distinctive leading part (`cart` of
/// `cart-redis`); later parts say what kind of component it is (`address-check`, `ch-events-03`).
fn distinctive_parts(service: &str) -> impl Iterator<Item = String> {
    leading_part(service)
        .into_iter()
        .filter(|p| !p.bytes().any(|b| b.is_ascii_digit()))
}

/// Whether an incident of `services` with these sorted evidence keys has `part` in its text or
/// among its services' name parts: how common a word is among the open incidents.
pub fn uses_part(services: &[&str], evidence: &[String], part: &str) -> bool {
    names_part(evidence, part)
        || services
            .iter()
            .any(|service| distinctive_parts(service).any(|p| p == part))
}

/// Whether text with these sorted evidence keys has the word `part`, or its plural or singular.
fn names_part(evidence: &[String], part: &str) -> bool {
    let has = |word: &str| evidence.binary_search(&term_key(word)).is_ok();
    has(part)
        || part
            .strip_suffix('s')
            .is_some_and(|singular| singular.len() >= 4 && has(singular))
        || has(&format!("{part}s"))
}

fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    !a.is_empty() && name_parts(a) == name_parts(b)
}

/// What `alert_service` with `alert_evidence` (sorted keys) has in common with an incident of
/// `services` and `evidence` (sorted keys).
pub fn common<'a>(
    alert_service: Option<&str>,
    alert_evidence: &'a [String],
    services: &[&str],
    evidence: &[String],
) -> Common<'a> {
    let mut common = Common::default();
    if let Some(service) = alert_service.filter(|s| !s.trim().is_empty()) {
        if services.iter().any(|other| same_name(service, other)) {
            common.same_service = true;
            return common;
        }
        if mentions(evidence, service) {
            let caller = services.first().copied().unwrap_or_default();
            common.mention = Some((RelationKind::MentionedBy, format!("{caller} -> {service}")));
        } else if let Some(named) = services.iter().find(|other| mentions(alert_evidence, other)) {
            common.mention = Some((RelationKind::Mentions, format!("{service} -> {named}")));
        }
        if let Some(lead) = leading_part(service) {
            if services
                .iter()
                .any(|other| leading_part(other).as_deref() == Some(lead.as_str()))
            {
                common.sibling = Some(lead);
            }
        }
        // A symptom names the backend it depends on by its domain word, not the other way round.
        if common.mention.is_none() && common.sibling.is_none() {
            common.name_part = services
                .iter()
                .flat_map(|other| distinctive_parts(other))
                .find(|part| names_part(alert_evidence, part));
        }
    }
    for key in alert_evidence
        .iter()
        .filter(|key| !key.starts_with("t:") && !key.starts_with(ACCOUNT_PREFIX))
        .filter(|key| evidence.binary_search(key).is_ok())
    {
        if key.starts_with("f:") {
            common.failures.push(key);
        } else if key.starts_with("ctx:") {
            common.context.push(key);
        } else {
            common.shared.push(key);
        }
    }
    common
}

/// How many open incidents (this one included, so at least 1) share each kind of evidence.
#[derive(Debug, Clone, Copy)]
pub struct Sharing {
    /// Name the rarest shared entity.
    pub entity: usize,
    /// Have a sibling service.
    pub sibling: usize,
    /// Show the rarest shared failure kind.
    pub failure: usize,
    /// Have a service with the named part.
    pub name_part: usize,
}

impl Sharing {
    /// Nothing shared with any other open incident.
    pub const ALONE: Self = Self {
        entity: 1,
        sibling: 1,
        failure: 1,
        name_part: 1,
    };
}

/// Weighs what is in common against how many open incidents share it.
pub fn relation(common: &Common<'_>, sharing: Sharing) -> Relation {
    if common.same_service {
        return Relation::of(RelationKind::SameService, 1.0);
    }
    if let Some((kind, path)) = &common.mention {
        let mut relation = Relation::of(*kind, MENTION_SCORE);
        relation.path = Some(path.clone());
        relation.shared_entities = common.shared.iter().map(|k| (*k).to_owned()).collect();
        return relation;
    }
    let mut relation = Relation::none();
    let mut score = 0.0;
    if !common.shared.is_empty() {
        let n = sharing.entity.max(1);
        score += SHARED_ENTITY_SCORE / n as f64;
        relation.shared_entities = common.shared.iter().map(|k| (*k).to_owned()).collect();
        relation.entity_incidents = Some(n);
    }
    if let Some(lead) = &common.sibling {
        let n = sharing.sibling.max(1);
        score += SIBLING_SCORE / n as f64;
        relation.sibling = Some(lead.clone());
        relation.sibling_incidents = Some(n);
    }
    if let Some(part) = &common.name_part {
        let n = sharing.name_part.max(1);
        score += NAME_PART_SCORE / n as f64;
        relation.name_part = Some(part.clone());
        relation.name_part_incidents = Some(n);
    }
    if !common.failures.is_empty() {
        let n = sharing.failure.max(1);
        score += SHARED_FAILURE_SCORE / n as f64;
        relation.shared_failures = common
            .failures
            .iter()
            .map(|k| k.trim_start_matches("f:").to_owned())
            .collect();
        relation.failure_incidents = Some(n);
    }
    if score > 0.0 {
        relation.kind = RelationKind::SharedEvidence;
        relation.score = score.min(MAX_INDIRECT_SCORE);
    }
    relation
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(terms: &[&str], entities: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = terms
            .iter()
            .map(|t| term_key(t))
            .chain(entities.iter().map(|e| (*e).to_owned()))
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn a_name_is_mentioned_whole_or_by_a_core_of_two_parts() {
        assert!(mentions(&keys(&["upstream", "subscriber-api"], &[]), "subscriber-api"));
        assert!(mentions(&keys(&["fare-quote", "pricing"], &[]), "fare-quote-svc"));
        assert!(mentions(&keys(&["subcache"], &[]), "subcache"));
        // A single core part is a word, not a name: "docs" does not name docs-api.
        assert!(!mentions(&keys(&["docs", "usage"], &[]), "docs-api"));
        assert!(!mentions(&keys(&["api"], &[]), "api"));
    }

    #[test]
    fn siblings_share_a_distinctive_leading_part() {
        assert_eq!(leading_part("claims-api").as_deref(), Some("claims"));
        assert_eq!(leading_part("api-gateway"), None);
        assert_eq!(leading_part("hr-portal"), None, "too short");
    }

    #[test]
    fn the_same_service_is_the_strongest_relation() {
        let c = common(Some("Checkout-API"), &[], &["checkout-api"], &[]);
        assert_eq!(relation(&c, Sharing::ALONE).kind, RelationKind::SameService);
        assert_eq!(relation(&c, Sharing::ALONE).score, 1.0);
    }

    #[test]
    fn a_dependency_named_by_the_incident_is_an_edge() {
        let incident = keys(&["dial", "ledger-db"], &[]);
        let c = common(Some("ledger-db"), &[], &["payments-api"], &incident);
        let r = relation(&c, Sharing::ALONE);
        assert_eq!((r.kind, r.score), (RelationKind::MentionedBy, MENTION_SCORE));
        assert_eq!(r.path.as_deref(), Some("payments-api -> ledger-db"));
    }

    #[test]
    fn shared_entities_weigh_less_when_other_incidents_name_them() {
        let alert = keys(&[], &["endpoint=10.1.2.3:6379"]);
        let incident = keys(&["x"], &["endpoint=10.1.2.3:6379", "ip=10.1.2.3"]);
        let c = common(Some("billing"), &alert, &["orders"], &incident);
        assert_eq!(c.shared(), ["endpoint=10.1.2.3:6379"]);
        assert_eq!(relation(&c, Sharing::ALONE).score, SHARED_ENTITY_SCORE);
        assert_eq!(
            relation(
                &c,
                Sharing {
                    entity: 4,
                    ..Sharing::ALONE
                }
            )
            .score,
            SHARED_ENTITY_SCORE / 4.0
        );
    }

    #[test]
    fn a_symptom_naming_a_backend_by_its_domain_word_is_a_weaker_relation() {
        let alert = keys(&["add-to-cart", "cart", "failures"], &[]);
        let c = common(Some("storefront"), &alert, &["cart-redis"], &[]);
        assert_eq!(c.name_part(), Some("cart"));
        assert_eq!(relation(&c, Sharing::ALONE).score, NAME_PART_SCORE);
        let plural = keys(&["permit", "checkout"], &[]);
        assert_eq!(
            common(Some("trailpass-web"), &plural, &["permits-api"], &[]).name_part(),
            Some("permits")
        );
        let generic = keys(&["portal", "api"], &[]);
        assert_eq!(
            common(Some("hr-portal"), &generic, &["loan-portal"], &[]).name_part(),
            None
        );
    }

    #[test]
    fn shared_words_skip_alert_vocabulary_numbers_and_short_words() {
        let alert = keys(
            &["evt-88123", "stock", "failing", "threshold", "2026", "lag", "orders"],
            &[],
        );
        let incident = keys(&["evt-88123", "stock", "failing", "threshold", "2026", "lag"], &[]);
        assert_eq!(shared_words(&alert, &incident), ["evt-88123", "stock"]);
        assert!(shared_words(&keys(&["failing", "above"], &[]), &keys(&["failing", "above"], &[])).is_empty());
    }

    #[test]
    fn shared_terms_alone_are_no_relation() {
        let alert = keys(&["timeout", "redis"], &[]);
        let c = common(Some("billing"), &alert, &["orders"], &alert);
        assert_eq!(relation(&c, Sharing::ALONE).kind, RelationKind::None);
    }
}
