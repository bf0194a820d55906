//! What an alert names, found without a model: typed entities (addresses, DNS names, hosts,
//! Kubernetes objects, versions, commits...) from its labels and free text, and the terms its
//! text is made of, in which the names of other services are looked for.
//!
//! One pass over the text, character by character: no regular expression, so no input can make
//! it backtrack, and the work is linear in the text (which is cut at [`MAX_TEXT_BYTES`]).

use serde::{Deserialize, Serialize};

use crate::correlation::account::account_key;
use crate::signatures;

/// What kind of thing an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    Ip,
    /// An address with a port: `10.1.2.3:6379`, `db.example.internal:5432`.
    Endpoint,
    Dns,
    Host,
    /// Hosts of one fleet: a host name without its index (`k8s-fra1c-node` of
    /// `k8s-fra1c-node-14`), or a name pattern (`k8s-fra1c-*`).
    HostGroup,
    Cluster,
    Namespace,
    Pod,
    Node,
    Zone,
    Region,
    Service,
    Deployment,
    Database,
    Queue,
    Version,
    Commit,
    Certificate,
    /// The team that owns the alerting service (`team`, `owner` labels), as a slug.
    Team,
    /// The account of the monitoring tool that sent the alert ([`crate::correlation::account`]).
    Account,
}

impl EntityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ip => "ip",
            Self::Endpoint => "endpoint",
            Self::Dns => "dns",
            Self::Host => "host",
            Self::HostGroup => "hostgroup",
            Self::Cluster => "cluster",
            Self::Namespace => "namespace",
            Self::Pod => "pod",
            Self::Node => "node",
            Self::Zone => "zone",
            Self::Region => "region",
            Self::Service => "service",
            Self::Deployment => "deployment",
            Self::Database => "database",
            Self::Queue => "queue",
            Self::Version => "version",
            Self::Commit => "commit",
            Self::Certificate => "certificate",
            Self::Team => "team",
            Self::Account => "account",
        }
    }

    /// Whether two alerts naming the same one were raised in one context (one owning team, one
    /// namespace): not a shared cause, but enough to let a warning join the only open incident.
    pub fn is_context(self) -> bool {
        matches!(self, Self::Team | Self::Namespace)
    }

    /// Whether two alerts naming the same one say they share a cause: an address or a host
    /// does; a cluster, a zone or a version number alone is shared by much that is unrelated.
    pub fn is_specific(self) -> bool {
        matches!(
            self,
            Self::Ip
                | Self::Endpoint
                | Self::Dns
                | Self::Host
                | Self::HostGroup
                | Self::Node
                | Self::Database
                | Self::Queue
                | Self::Commit
                | Self::Certificate
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entity {
    pub kind: EntityKind,
    pub value: String,
}

impl Entity {
    /// `kind=value`: how the entity is compared and kept with an incident's evidence.
    pub fn key(&self) -> String {
        format!("{}={}", self.kind.as_str(), self.value)
    }
}

/// Label keys that name an entity of a kind (lowercase; the first matching key wins). Values of
/// other labels are still read as text.
#[rustfmt::skip]
pub const LABEL_KINDS: &[(&str, EntityKind)] = &[
    ("host", EntityKind::Host), ("hostname", EntityKind::Host), ("server", EntityKind::Host),
    ("node", EntityKind::Node), ("nodename", EntityKind::Node), ("node_name", EntityKind::Node),
    ("kubernetes_node", EntityKind::Node), ("kube_node", EntityKind::Node),
    ("pod", EntityKind::Pod), ("pod_name", EntityKind::Pod), ("kube_pod", EntityKind::Pod),
    ("namespace", EntityKind::Namespace), ("kube_namespace", EntityKind::Namespace),
    ("cluster", EntityKind::Cluster), ("cluster_name", EntityKind::Cluster), ("kube_cluster_name", EntityKind::Cluster),
    ("zone", EntityKind::Zone), ("availability_zone", EntityKind::Zone), ("availability-zone", EntityKind::Zone),
    ("topology.kubernetes.io/zone", EntityKind::Zone), ("region", EntityKind::Region),
    ("topology.kubernetes.io/region", EntityKind::Region),
    ("service", EntityKind::Service), ("app", EntityKind::Service), ("application", EntityKind::Service),
    ("deployment", EntityKind::Deployment), ("kube_deployment", EntityKind::Deployment),
    ("database", EntityKind::Database), ("db", EntityKind::Database), ("datname", EntityKind::Database),
    ("queue", EntityKind::Queue), ("topic", EntityKind::Queue),
    ("version", EntityKind::Version), ("commit", EntityKind::Commit), ("sha", EntityKind::Commit),
    ("certificate", EntityKind::Certificate), ("cert", EntityKind::Certificate),
    ("team", EntityKind::Team), ("teams", EntityKind::Team), ("owner", EntityKind::Team),
    ("squad", EntityKind::Team),
];

/// Words after which the next name is a host (`on host db-7`, `broker kafka-2`).
const HOST_CONTEXT: &[&str] = &[
    "host", "hostname", "node", "server", "broker", "replica", "primary", "leader", "hosts", "nodes", "servers",
    "brokers", "replicas",
];
/// Words after which a name is a zone (`zone=fra1-c`, `az us-east-1b`).
const ZONE_CONTEXT: &[&str] = &["zone", "az", "availability_zone"];
/// Words after which a hex string is a commit (`sha=5e1d9c7`, `commit 3c1e9f27`).
const COMMIT_CONTEXT: &[&str] = &["sha", "commit", "revision", "rev", "git_sha", "git_commit"];
/// Last labels that make a dotted name a DNS name rather than a file, a package or a metric.
/// Any two-letter label (a country) counts too.
#[rustfmt::skip]
const DNS_SUFFIXES: &[&str] = &[
    "com", "net", "org", "io", "dev", "app", "cloud", "ai", "co", "biz", "info", "tech", "online", "site",
    "internal", "local", "lan", "corp", "home", "intra", "private", "example", "test", "invalid", "localhost",
];
/// Words too common in alert text to be worth keeping as terms.
#[rustfmt::skip]
const STOP_TERMS: &[&str] = &[
    "the", "and", "for", "with", "from", "that", "this", "are", "was", "has", "have", "been", "not", "but", "all",
    "any", "per", "than", "over", "into", "after", "before", "last", "more", "most", "less", "only", "its",
];

/// Free text read per field; longer text is cut (at a character boundary).
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Entities kept per alert.
pub const MAX_ENTITIES: usize = 64;
/// Terms kept per alert.
pub const MAX_TERMS: usize = 192;
/// Longest term or entity value kept (a longer one says nothing a shorter one would not).
const MAX_NAME_CHARS: usize = 128;

/// What one alert names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entities: Vec<Entity>,
    /// Lowercase words and hyphenated names of its text (`subscriber-api`, `evt-kafka-2` and its
    /// parts), in the order first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<String>,
    /// The failure kinds its text shows ([`crate::signatures`] ids), in catalog order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

impl Evidence {
    /// Entities of `labels` (by [`LABEL_KINDS`]) and of every label value and text, and the
    /// terms of the texts. Deterministic: the same input gives the same output, in order.
    pub fn extract<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut found = Collector::default();
        for (key, value) in labels {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            let key = key.to_ascii_lowercase();
            match LABEL_KINDS.iter().find(|(name, _)| *name == key) {
                // A paging tool lists display names ("Core Banking, Payments"); labels use slugs.
                Some(&(_, EntityKind::Team)) => {
                    for team in value.split(',').map(slug).filter(|team| !team.is_empty()) {
                        found.entity(EntityKind::Team, &team);
                    }
                }
                Some(&(_, kind)) => found.entity(kind, value),
                None => {}
            }
            found.scan(value, false);
        }
        for text in texts {
            found.scan(text, true);
            for signature in signatures::matching(cut(text, MAX_TEXT_BYTES)) {
                if !found.failures.contains(&signature.id) {
                    found.failures.push(signature.id);
                }
            }
        }
        found.finish()
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty() && self.terms.is_empty() && self.failures.is_empty()
    }

    /// The keys an incident keeps of this evidence: its specific entities (`kind=value`), its
    /// context entities (`ctx:kind=value`), its account (`acct:name`), its distinctive failure
    /// kinds (`f:id`) and its terms (`t:term`).
    pub fn keys(&self) -> impl Iterator<Item = String> + '_ {
        let distinctive = self
            .failures
            .iter()
            .filter(|id| signatures::by_id(id).is_some_and(|s| s.distinctive))
            .map(|id| failure_key(id));
        self.entities
            .iter()
            .filter_map(|entity| match entity.kind {
                EntityKind::Account => Some(account_key(&entity.value)),
                kind if kind.is_specific() => Some(entity.key()),
                kind if kind.is_context() => Some(context_key(&entity.key())),
                _ => None,
            })
            .chain(distinctive)
            .chain(self.terms.iter().map(|term| term_key(term)))
    }

    /// Adds the account of the tool that sent the alert, which its parser read from the
    /// tool's link or organisation, lowercase; kept beyond the entity cap.
    pub fn with_account(mut self, account: Option<&str>) -> Self {
        if let Some(account) = account.map(str::trim).filter(|account| !account.is_empty()) {
            self.entities.push(Entity {
                kind: EntityKind::Account,
                value: account.to_lowercase(),
            });
        }
        self
    }
}

/// How a context entity is kept among an incident's evidence keys.
pub fn context_key(entity_key: &str) -> String {
    format!("ctx:{entity_key}")
}

/// `Core Banking` → `core-banking`.
pub fn slug(name: &str) -> String {
    name.split(|c: char| !c.is_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

/// How a failure kind is kept among an incident's evidence keys.
pub fn failure_key(id: &str) -> String {
    format!("f:{id}")
}

impl Evidence {
    /// [`Evidence::keys`] sorted and deduplicated: the form the relation rules look keys up in.
    pub fn sorted_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.keys().collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }
}

/// How a term is kept among an incident's evidence keys.
pub fn term_key(term: &str) -> String {
    format!("t:{term}")
}

/// The keys of a sorted key list that start with `prefix`, without it: one contiguous run.
pub fn keys_with_prefix<'a>(sorted_keys: &'a [String], prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let start = sorted_keys.partition_point(|key| key.as_str() < prefix);
    sorted_keys[start..]
        .iter()
        .map_while(move |key| key.strip_prefix(prefix))
}

#[derive(Default)]
struct Collector {
    failures: Vec<&'static str>,
    entities: Vec<Entity>,
    terms: Vec<String>,
    seen_terms: std::collections::HashSet<String>,
}

impl Collector {
    fn entity(&mut self, kind: EntityKind, value: &str) {
        if self.entities.len() >= MAX_ENTITIES || value.chars().count() > MAX_NAME_CHARS {
            return;
        }
        let value = value.to_lowercase();
        if !self.entities.iter().any(|e| e.kind == kind && e.value == value) {
            self.entities.push(Entity { kind, value });
        }
    }

    fn term(&mut self, term: String) {
        if self.terms.len() < MAX_TERMS && !self.seen_terms.contains(&term) {
            self.seen_terms.insert(term.clone());
            self.terms.push(term);
        }
    }

    /// Reads the entities (and, for free text, the terms) of one text.
    fn scan(&mut self, text: &str, with_terms: bool) {
        let text = without_link_targets(cut(text, MAX_TEXT_BYTES));
        let mut previous_word = String::new();
        for chunk in text.split(|c: char| !is_chunk_char(c)).filter(|c| !c.is_empty()) {
            self.chunk(chunk, &previous_word);
            if with_terms {
                self.terms_of(chunk);
            }
            let last_word = chunk
                .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap_or("");
            previous_word = last_word.to_ascii_lowercase();
        }
    }

    fn chunk(&mut self, chunk: &str, previous_word: &str) {
        if let Some((_, rest)) = chunk.split_once("://") {
            let authority = rest.split('/').next().unwrap_or("");
            let authority = authority.rsplit('@').next().unwrap_or("");
            self.address(authority, true);
            return;
        }
        let mut parts = chunk.split('/').peekable();
        while let Some(part) = parts.next() {
            let part = part.trim_matches(|c: char| matches!(c, '.' | ':' | '-' | '_'));
            if part.is_empty() {
                continue;
            }
            // `topology.kubernetes.io/zone`: a dotted prefix of a label key, not a host.
            if parts.peek().is_some() && !is_ipv4(part) && is_dns_name(part) {
                continue;
            }
            if self.address(part, false) {
                continue;
            }
            if let Some(version) = version(part) {
                self.entity(EntityKind::Version, version);
            } else if COMMIT_CONTEXT.contains(&previous_word) && is_commit(part) {
                self.entity(EntityKind::Commit, part);
            } else if HOST_CONTEXT.contains(&previous_word) && is_host_name(part) && !is_capitalised_word(part) {
                self.entity(EntityKind::Host, part);
            } else if ZONE_CONTEXT.contains(&previous_word) && is_host_name(part) {
                self.entity(EntityKind::Zone, part);
            }
        }
    }

    /// An IP, `host:port` or DNS name; `in_url` accepts a URL's single-label host. Whether it
    /// was one.
    fn address(&mut self, text: &str, in_url: bool) -> bool {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) if is_port(port) => (host, Some(port)),
            _ => (text, None),
        };
        let kind = if is_ipv4(host) {
            EntityKind::Ip
        } else if is_dns_name(host) {
            EntityKind::Dns
        } else if (port.is_some() || in_url) && is_host_name(host) {
            EntityKind::Host
        } else {
            return false;
        };
        self.entity(kind, host);
        if port.is_some() {
            self.entity(EntityKind::Endpoint, text);
        }
        true
    }

    /// Words and hyphenated names, with their runs of two and three parts (`evt-kafka-2` gives
    /// evt, kafka, 2 is dropped, evt-kafka, kafka-2, evt-kafka-2).
    fn terms_of(&mut self, chunk: &str) {
        for piece in chunk.split(['.', '/', ':', '@', '=']) {
            let parts: Vec<String> = piece
                .split(['-', '_'])
                .filter(|p| !p.is_empty() && p.chars().all(char::is_alphanumeric))
                .map(str::to_lowercase)
                .collect();
            for n in 1..=3.min(parts.len()) {
                for run in parts.windows(n) {
                    let term = run.join("-");
                    if is_useful_term(&term) {
                        self.term(term);
                    }
                }
            }
        }
    }

    fn finish(mut self) -> Evidence {
        let hosts: Vec<String> = self
            .entities
            .iter()
            .filter(|e| matches!(e.kind, EntityKind::Host | EntityKind::Node))
            .map(|e| e.value.clone())
            .collect();
        for host in hosts {
            for group in host_groups(&host) {
                self.entity(EntityKind::HostGroup, &group);
            }
        }
        Evidence {
            entities: self.entities,
            terms: self.terms,
            failures: self.failures.into_iter().map(str::to_owned).collect(),
        }
    }
}

/// The text without the targets of its Markdown links (`[Monitor Status](https://...)`): they
/// lead to the alerting tool's own pages, which every alert of that tool links to, and name
/// nothing that broke.
fn without_link_targets(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("](") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        kept.push_str(&rest[..start + 1]);
        let target = &rest[start + 2..];
        match target.find(')') {
            Some(end) => rest = &target[end + 1..],
            None => rest = "",
        }
    }
    kept.push_str(rest);
    std::borrow::Cow::Owned(kept)
}

fn is_chunk_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '/' | '@')
}

fn cut(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn is_port(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && text.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p))
}

fn is_ipv4(text: &str) -> bool {
    let mut count = 0;
    for octet in text.split('.') {
        count += 1;
        if octet.is_empty()
            || octet.len() > 3
            || !octet.bytes().all(|b| b.is_ascii_digit())
            || octet.parse::<u16>().map_or(true, |v| v > 255)
        {
            return false;
        }
    }
    count == 4
}

/// At least two labels of letters, digits and hyphens, lowercase as written (so
/// `java.net.UnknownHostException` is a class, not a host), the last a known suffix or two
/// letters.
fn is_dns_name(text: &str) -> bool {
    if text.len() > 253 || !text.contains('.') || text.chars().any(|c| c.is_uppercase()) {
        return false;
    }
    let labels: Vec<&str> = text.split('.').collect();
    let valid = |label: &&str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let last = labels[labels.len() - 1];
    labels.iter().all(valid)
        && !labels.iter().all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        && (DNS_SUFFIXES.contains(&last) || (last.len() == 2 && last.bytes().all(|b| b.is_ascii_lowercase())))
}

/// `On-Call` after `Primary`: prose, not a host, which has a digit or is lowercase.
fn is_capitalised_word(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_uppercase()) && !text.bytes().any(|b| b.is_ascii_digit())
}

/// A single-label host name with a letter and a digit or hyphen (`db-7`, `chat-gw-07`).
fn is_host_name(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && text.bytes().any(|b| b.is_ascii_alphabetic())
        && text.bytes().any(|b| b.is_ascii_digit() || b == b'-')
}

/// The fleets a host name says it belongs to: the name without its trailing index, and that
/// name's shorter hyphen prefixes, each of at least two parts with a distinctive one (a part with
/// three letters that is not a generic word): `k8s-fra1c-node-14` gives `k8s-fra1c-node` and
/// `k8s-fra1c`; `ip-10-0-34-17` and `db-7` give nothing.
fn host_groups(host: &str) -> Vec<String> {
    let mut parts: Vec<&str> = host.split('-').collect();
    while parts.last().is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        parts.pop();
    }
    let distinctive = |part: &str| {
        part.bytes().filter(u8::is_ascii_alphabetic).count() >= 3
            && !super::relation::GENERIC_NAME_PARTS.contains(&part)
    };
    let mut groups = Vec::new();
    for len in (2..=parts.len()).rev().take(MAX_HOST_GROUPS) {
        let prefix = &parts[..len];
        if prefix.iter().any(|p| distinctive(p)) {
            groups.push(prefix.join("-"));
        }
    }
    groups
}

/// Fleet names kept per host: a deep name's shortest prefixes say little.
const MAX_HOST_GROUPS: usize = 3;

/// `1.2.3`, `v1.2`, `5.8.0-rc1`: the version part, or `None`.
fn version(text: &str) -> Option<&str> {
    let (numbers, has_v) = match text.strip_prefix(['v', 'V']) {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let core = numbers.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()));
    (numeric && (parts.len() == 3 || (has_v && parts.len() == 2))).then_some(text)
}

/// 7 to 40 hex digits with a letter and a digit.
fn is_commit(text: &str) -> bool {
    (7..=40).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_hexdigit())
        && text.bytes().any(|b| b.is_ascii_digit())
        && text.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Long enough to name something, not a number, an id or a common word.
fn is_useful_term(term: &str) -> bool {
    let letters = term.bytes().filter(u8::is_ascii_alphabetic).count();
    term.len() >= 3
        && term.chars().count() <= MAX_NAME_CHARS
        && letters > 0
        && !STOP_TERMS.contains(&term)
        && !looks_like_id(term)
}

/// Hex runs of 8 or more with a digit (trace ids, hashes), or a part that is mostly digits.
fn looks_like_id(term: &str) -> bool {
    term.split('-').any(|part| {
        let hex_id =
            part.len() >= 8 && part.bytes().all(|b| b.is_ascii_hexdigit()) && part.bytes().any(|b| b.is_ascii_digit());
        let digits = part.bytes().filter(u8::is_ascii_digit).count();
        hex_id || (part.len() >= 6 && digits * 2 > part.len())
    })
}

#[cfg(test)]
mod tests;
