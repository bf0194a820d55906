//! A user's service topology as correlation reads it: aliases → the service they name, addresses
//! → the service that owns them, and dependency edges (declared, or learned with a confidence).
//!
//! It relates an alert's service to an incident's when the topology says they are one service
//! (an alias), a direct dependency or dependent (an edge, either way), or when one side names an
//! address the other side's service owns. [`Topology::strengthen`] is the one hook into
//! [`super::best_match`]: it keeps the relation the evidence found unless the topology's is
//! stronger. An empty topology changes nothing.

use std::collections::HashMap;

use super::relation::{name_parts, Relation, RelationKind, MENTION_SCORE};
use crate::topology::{Address, Catalog};

/// A declared dependency, as strong as one service naming the other.
pub const DEPENDENCY_SCORE: f64 = MENTION_SCORE;
/// An alert naming an address the other side's service owns.
pub const OWNED_ADDRESS_SCORE: f64 = MENTION_SCORE;

/// What a learned edge rests on: the user's merges of incidents of the two services, their
/// splits of one from the other, and alerts of one naming the other (or an address it owns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Support {
    pub merges: u32,
    pub splits: u32,
    pub mentions: u32,
}

impl Support {
    /// `s / (s + 2·splits + 1)` with `s = merges + mentions / 2`: a merge counts as a label,
    /// a mention half (it may be a caller naming what it saw fail), a split twice against, and
    /// one pseudo-count keeps a single observation from reaching certainty (one merge: 0.5, two:
    /// 0.67; one merge and one split: 0.25; four mentions: 0.67).
    pub fn confidence(&self) -> f64 {
        let support = f64::from(self.merges) + f64::from(self.mentions) / 2.0;
        support / (support + 2.0 * f64::from(self.splits) + 1.0)
    }
}

/// What one observation says of a pair of services.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// The user merged an incident of one into an incident of the other.
    Merge,
    /// The user split an alert of one off an incident of the other.
    Split,
    /// An alert of `from` named `to` (or an address `to` owns).
    Mention,
}

/// `count` observations of one kind between two services (by the names the alerts gave).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub from: String,
    pub to: String,
    pub kind: Observed,
    pub count: u32,
}

/// A dependency edge: `from` depends on `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub declared: bool,
    /// 1 for a declared edge, [`Support::confidence`] for a learned one.
    pub confidence: f64,
    /// What was learned of the pair (declared edges show it too).
    pub support: Support,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// Name key ([`service_key`]) of every service and alias → the service's name.
    names: HashMap<String, String>,
    /// Evidence key of an owned address → the owner's name.
    owners: HashMap<String, String>,
    /// The owner's name → the evidence keys of its addresses.
    owned: HashMap<String, Vec<String>>,
    edges: Vec<Edge>,
    /// (name, name), both ways → index in `edges`.
    pairs: HashMap<(String, String), usize>,
}

/// How a service name is compared: its lowercase alphanumeric parts (`Ledger_DB` = `ledger-db`),
/// as correlation compares names.
pub fn service_key(name: &str) -> String {
    name_parts(name).join("-")
}

impl Topology {
    /// The declared catalog and what was learned: observations are grouped by pair of services
    /// (aliases resolved), a pair the catalog declares keeps its declared edge, and a learned
    /// edge points the way mentions mostly went.
    pub fn new(catalog: &Catalog, observations: &[Observation]) -> Self {
        let mut topology = Self::default();
        for service in catalog.services() {
            for name in std::iter::once(&service.name).chain(&service.aliases) {
                topology.names.insert(service_key(name), service.name.clone());
            }
            for address in &service.addresses {
                for key in Address::parse(address).map(|a| a.evidence_keys()).unwrap_or_default() {
                    topology.owners.insert(key.clone(), service.name.clone());
                    topology.owned.entry(service.name.clone()).or_default().push(key);
                }
            }
        }
        for (from, to) in catalog.edges() {
            topology.add(from.to_owned(), to.to_owned(), true);
        }
        // Per pair: the support, and mentions each way (to orient a learned edge).
        let mut learned: Vec<((String, String), Support, i64)> = Vec::new();
        for observation in observations {
            let (from, to) = (
                topology.canonical(&observation.from),
                topology.canonical(&observation.to),
            );
            if from == to {
                continue;
            }
            let forward = from < to;
            let pair = if forward { (from, to) } else { (to, from) };
            let at = match learned.iter().position(|(p, ..)| *p == pair) {
                Some(at) => at,
                None => {
                    learned.push((pair, Support::default(), 0));
                    learned.len() - 1
                }
            };
            let (_, support, lean) = &mut learned[at];
            match observation.kind {
                Observed::Merge => support.merges += observation.count,
                Observed::Split => support.splits += observation.count,
                Observed::Mention => {
                    support.mentions += observation.count;
                    let count = i64::from(observation.count);
                    *lean += if forward { count } else { -count };
                }
            }
        }
        for ((a, b), support, lean) in learned {
            let index = match topology.pairs.get(&(a.clone(), b.clone())) {
                Some(&index) => index,
                None if lean < 0 => topology.add(b, a, false),
                None => topology.add(a, b, false),
            };
            let edge = &mut topology.edges[index];
            edge.support = support;
            if !edge.declared {
                edge.confidence = support.confidence();
            }
        }
        topology
    }

    /// Adds an edge (declared ones at confidence 1); its index.
    fn add(&mut self, from: String, to: String, declared: bool) -> usize {
        let index = self.edges.len();
        self.pairs.insert((to.clone(), from.clone()), index);
        self.pairs.insert((from.clone(), to.clone()), index);
        self.edges.push(Edge {
            from,
            to,
            declared,
            confidence: if declared { 1.0 } else { 0.0 },
            support: Support::default(),
        });
        index
    }

    /// Every edge once: the declared ones in declaration order, then the learned ones.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.owners.is_empty() && self.edges.iter().all(|e| e.confidence <= 0.0)
    }

    /// The declared name `name` (or an alias of it) stands for; its [`service_key`] otherwise.
    pub fn canonical(&self, name: &str) -> String {
        let key = service_key(name);
        self.names.get(&key).cloned().unwrap_or(key)
    }

    /// `current` (what the evidence says of the alert and the incident), or the topology's
    /// relation when that is stronger. `evidence` and `incident_evidence` are sorted keys.
    pub fn strengthen(
        &self,
        current: Relation,
        service: Option<&str>,
        evidence: &[String],
        incident_services: &[&str],
        incident_evidence: &[String],
    ) -> Relation {
        if self.is_empty() {
            return current;
        }
        match self.relate(service, evidence, incident_services, incident_evidence) {
            Some(found) if found.score > current.score => found,
            _ => current,
        }
    }

    fn relate(
        &self,
        service: Option<&str>,
        evidence: &[String],
        incident_services: &[&str],
        incident_evidence: &[String],
    ) -> Option<Relation> {
        let mut best: Option<Relation> = None;
        let mut offer = |score: f64, kind: RelationKind, path: String| {
            if best.as_ref().is_none_or(|b| score > b.score) {
                best = Some(Relation {
                    score,
                    kind,
                    path: Some(path),
                    ..Relation::none()
                });
            }
        };
        let own = service.filter(|s| !s.trim().is_empty()).map(|s| self.canonical(s));
        let theirs: Vec<String> = incident_services.iter().map(|s| self.canonical(s)).collect();
        if let Some(own) = &own {
            for (raw, other) in incident_services.iter().zip(&theirs) {
                if other == own {
                    offer(
                        1.0,
                        RelationKind::SameService,
                        format!("{} = {raw} (alias)", service.unwrap_or_default()),
                    );
                } else if let Some(edge) = self.pairs.get(&(own.clone(), other.clone())).map(|&i| &self.edges[i]) {
                    if edge.confidence <= 0.0 {
                        continue;
                    }
                    let (kind, score, how) = if edge.declared {
                        (RelationKind::Dependency, DEPENDENCY_SCORE, "declared".to_owned())
                    } else {
                        let how = format!("learned, confidence {:.2}", edge.confidence);
                        (RelationKind::LearnedDependency, DEPENDENCY_SCORE * edge.confidence, how)
                    };
                    offer(score, kind, format!("{} -> {} ({how})", edge.from, edge.to));
                }
            }
        }
        // An address the alert names whose owner is one of the incident's services.
        for key in evidence {
            if let Some(owner) = self.owners.get(key).filter(|owner| theirs.contains(owner)) {
                if own.as_ref() != Some(owner) {
                    let from = service.unwrap_or("alert");
                    offer(
                        OWNED_ADDRESS_SCORE,
                        RelationKind::OwnedAddress,
                        format!("{from} -> {owner} ({key})"),
                    );
                }
            }
        }
        // An address the incident names that the alert's service owns.
        if let Some(own) = &own {
            for key in self.owned.get(own).into_iter().flatten() {
                if incident_evidence.binary_search(key).is_ok() {
                    let from = incident_services.first().copied().unwrap_or("incident");
                    offer(
                        OWNED_ADDRESS_SCORE,
                        RelationKind::OwnedAddress,
                        format!("{from} -> {own} ({key})"),
                    );
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::DeclaredService;

    fn catalog() -> Catalog {
        Catalog::new(vec![
            DeclaredService {
                name: "checkout-api".into(),
                depends_on: vec!["ledger-db".into()],
                ..Default::default()
            },
            DeclaredService {
                name: "ledger-db".into(),
                addresses: vec!["10.0.0.9:5432".into()],
                aliases: vec!["pg-ledger".into()],
                ..Default::default()
            },
        ])
        .unwrap()
    }

    fn relate(topology: &Topology, service: &str, evidence: &[&str], incident: &[&str]) -> Relation {
        let mut evidence: Vec<String> = evidence.iter().map(|k| (*k).to_owned()).collect();
        evidence.sort();
        topology.strengthen(Relation::none(), Some(service), &evidence, incident, &[])
    }

    #[test]
    fn a_declared_dependency_relates_both_ways() {
        let topology = Topology::new(&catalog(), &[]);
        let down = relate(&topology, "ledger-db", &[], &["checkout-api"]);
        assert_eq!((down.kind, down.score), (RelationKind::Dependency, DEPENDENCY_SCORE));
        assert_eq!(down.path.as_deref(), Some("checkout-api -> ledger-db (declared)"));
        let up = relate(&topology, "Checkout_API", &[], &["ledger-db"]);
        assert_eq!(up.kind, RelationKind::Dependency);
        assert!(up.is_direct());
    }

    #[test]
    fn an_alias_is_the_same_service_and_an_owned_address_relates() {
        let topology = Topology::new(&catalog(), &[]);
        assert_eq!(
            relate(&topology, "pg-ledger", &[], &["ledger-db"]).kind,
            RelationKind::SameService
        );
        let named = relate(&topology, "billing", &["endpoint=10.0.0.9:5432"], &["ledger-db"]);
        assert_eq!(named.kind, RelationKind::OwnedAddress);
        assert_eq!(
            named.path.as_deref(),
            Some("billing -> ledger-db (endpoint=10.0.0.9:5432)")
        );
        let incident_names_it = topology.strengthen(
            Relation::none(),
            Some("ledger-db"),
            &[],
            &["billing"],
            &["endpoint=10.0.0.9:5432".to_owned()],
        );
        assert_eq!(incident_names_it.kind, RelationKind::OwnedAddress);
    }

    #[test]
    fn learned_edges_weigh_by_their_confidence_and_never_replace_a_stronger_relation() {
        let observed = |from: &str, to: &str, kind, count| Observation {
            from: from.into(),
            to: to.into(),
            kind,
            count,
        };
        let topology = Topology::new(
            &Catalog::default(),
            &[
                observed("orders", "stock-cache", Observed::Merge, 1),
                observed("Stock_Cache", "orders", Observed::Merge, 1),
                observed("orders", "billing", Observed::Merge, 1),
                observed("billing", "orders", Observed::Split, 1),
                observed("billing", "orders", Observed::Split, 1),
            ],
        );
        let edges: Vec<(&str, &str, f64)> = topology
            .edges()
            .iter()
            .map(|e| (e.from.as_str(), e.to.as_str(), e.confidence))
            .collect();
        assert_eq!(edges.len(), 2);
        assert_eq!(edges[1].2, 1.0 / 6.0, "one merge and two splits");
        let relation = relate(&topology, "stock-cache", &[], &["orders"]);
        assert_eq!(relation.kind, RelationKind::LearnedDependency);
        assert!((relation.score - DEPENDENCY_SCORE * 2.0 / 3.0).abs() < 1e-9);
        assert!(!relation.is_direct());
        let same = Relation {
            score: 1.0,
            kind: RelationKind::SameService,
            ..Relation::none()
        };
        let kept = topology.strengthen(same.clone(), Some("stock-cache"), &[], &["orders"], &[]);
        assert_eq!(kept, same);
        assert_eq!(
            relate(&topology, "unrelated", &[], &["orders"]).kind,
            RelationKind::None
        );
    }

    #[test]
    fn confidence_grows_with_support_and_falls_with_splits() {
        let c = |merges, splits, mentions| {
            Support {
                merges,
                splits,
                mentions,
            }
            .confidence()
        };
        assert_eq!(c(0, 0, 0), 0.0);
        assert_eq!(c(1, 0, 0), 0.5);
        assert_eq!(c(1, 1, 0), 0.25);
        assert!(c(4, 0, 0) > c(2, 0, 0) && c(2, 0, 0) > c(0, 0, 2));
        assert!(c(3, 0, 0) < 1.0);
    }

    #[test]
    fn an_empty_topology_changes_nothing() {
        let topology = Topology::default();
        assert!(topology.is_empty());
        assert_eq!(relate(&topology, "a", &["ip=10.0.0.1"], &["b"]), Relation::none());
    }
}
