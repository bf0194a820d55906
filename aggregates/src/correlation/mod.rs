//! Correlation scoring: does a new alert belong to an incident that is already open?
//!
//! Pure rules, no I/O. The caller loads the open incidents of the alert's user (for example those
//! with an alert inside [`CorrelationConfig::window_for`] of the new alert's fired-at time), turns
//! them into [`CandidateIncident`]s and asks [`best_match`] which one, if any, the alert joins. The
//! returned [`Score`] is stored verbatim as the correlated alert's `correlation_details`.
//!
//! Three sub-scores, each in `0..=1`, are combined by a weighted sum:
//! - `service_match`: how the alert's service relates to the incident's ([`relation`]): the same
//!   service, one naming the other, shared specific entities ([`evidence`]) or sibling names;
//! - `time_window`: `1 - |Δt| / window`, where `Δt` is measured to the incident's nearest alert;
//! - `semantic`: cosine similarity of the title embeddings (see [`HashedNgramEmbedder`]).

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use account::AccountFit;
use relation::Relation;

pub mod account;
mod config;
mod embedding;
pub mod evidence;
pub mod relation;
pub mod topology;

pub use config::{
    ConfigError, CorrelationConfig, Weights, DEFAULT_ALERT_WINDOW_SECS, DEFAULT_DEPLOYMENT_WINDOW_SECS,
    DEFAULT_MAX_ALERTS_PER_INCIDENT, DEFAULT_SEMANTIC_WEIGHT, DEFAULT_SERVICE_WEIGHT, DEFAULT_THRESHOLD,
    DEFAULT_TIME_WEIGHT,
};
pub use embedding::{cosine, Embedder, HashedNgramEmbedder, DEFAULT_EMBEDDING_DIMENSIONS, STOPWORDS, STOPWORD_WEIGHT};

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// What kind of event the new alert is; it picks the time window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A monitoring, paging or log alert.
    Alert,
    /// A CI build or deploy notification.
    Deployment,
}

impl EventKind {
    /// `"alert"` or `"deployment"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alert => "alert",
            Self::Deployment => "deployment",
        }
    }
}

/// The alert to place.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlert {
    pub title: String,
    pub service: Option<String>,
    pub fired_at: DateTime<Utc>,
    pub kind: EventKind,
    /// Embedding of `title`, made by the same [`Embedder`] as the candidates' embeddings.
    pub embedding: Vec<f32>,
    /// The keys of its [`evidence::Evidence`], sorted.
    pub evidence: Vec<String>,
    /// A warning or less ([`is_minor_severity`]): the only open incident takes it only with
    /// some evidence or a shared context (see [`relation::Relation::or_sole_candidate`]).
    pub minor: bool,
}

/// Severities (normalized, lowercase) for which the sender does not page: a warning, an
/// informational notice, a low priority (P3 and below), or Splunk's 1 to 3.
#[rustfmt::skip]
const MINOR_SEVERITIES: &[&str] = &[
    "warning", "warn", "info", "low", "minor", "notice", "debug", "p3", "p4", "p5", "sev3", "sev4", "sev5",
    "1", "2", "3",
];

/// Whether the alert's severity is one of [`MINOR_SEVERITIES`]; an alert without one is serious.
pub fn is_minor_severity(severity: Option<&str>) -> bool {
    severity.is_some_and(|severity| MINOR_SEVERITIES.contains(&severity.trim().to_ascii_lowercase().as_str()))
}

/// An open incident the alert may join.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateIncident {
    pub title: String,
    pub primary_service: Option<String>,
    /// Services of the alerts already correlated.
    pub affected_services: Vec<String>,
    /// Fired-at times of the incident's alerts (its first alert included). An incident with no
    /// time at all is never a candidate.
    pub alert_times: Vec<DateTime<Utc>>,
    /// Alerts correlated so far; at [`CorrelationConfig::max_alerts_per_incident`] the incident
    /// takes no more.
    pub correlated_alert_count: u32,
    /// Embedding of `title`.
    pub embedding: Vec<f32>,
    /// The keys of its alerts' evidence, sorted.
    pub evidence: Vec<String>,
}

impl CandidateIncident {
    /// Its primary service, then the affected ones.
    fn services(&self) -> Vec<&str> {
        self.primary_service
            .as_deref()
            .into_iter()
            .chain(self.affected_services.iter().map(String::as_str))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Scores
// ---------------------------------------------------------------------------------------------

/// The sub-score that contributed most, stored as the correlated alert's `correlation_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    ServiceMatch,
    TimeWindow,
    Semantic,
}

impl Strategy {
    /// `"service_match"`, `"time_window"` or `"semantic"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ServiceMatch => "service_match",
            Self::TimeWindow => "time_window",
            Self::Semantic => "semantic",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every number behind one correlation decision; stored as `correlation_details`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Weighted sum of the sub-scores, in `0..=1`.
    pub total: f64,
    pub time_window: f64,
    pub service_match: f64,
    pub semantic: f64,
    pub strategy: Strategy,
    /// The normalized weights used.
    pub weights: Weights,
    /// The threshold used: the alert correlates when `total >= threshold`.
    pub threshold: f64,
    /// The time window used, in seconds (it depends on the alert's kind).
    pub window_secs: i64,
    /// What `service_match` rests on.
    pub relation: Relation,
}

impl Score {
    /// Whether the total reaches the threshold (eligibility is [`is_candidate`]'s business).
    pub fn correlates(&self) -> bool {
        self.total >= self.threshold
    }

    /// The score as the JSON object stored in `correlation_details`.
    pub fn to_details(&self) -> serde_json::Value {
        serde_json::json!({
            "total": self.total,
            "time_window": self.time_window,
            "service_match": self.service_match,
            "semantic": self.semantic,
            "strategy": self.strategy.as_str(),
            "weights": {
                "service_match": self.weights.service_match(),
                "time_window": self.weights.time_window(),
                "semantic": self.weights.semantic(),
            },
            "threshold": self.threshold,
            "window_secs": self.window_secs,
            "relation": self.relation,
        })
    }
}

/// The incident's alert time nearest to `fired_at` (either side: alerts arrive out of order).
/// Of two equally near times the later one is taken. `None` when there is no time.
pub fn nearest_alert_time(fired_at: DateTime<Utc>, alert_times: &[DateTime<Utc>]) -> Option<DateTime<Utc>> {
    alert_times.iter().copied().min_by(|a, b| {
        let da = fired_at.signed_duration_since(*a).abs();
        let db = fired_at.signed_duration_since(*b).abs();
        da.cmp(&db).then_with(|| b.cmp(a))
    })
}

/// Whether the incident may take the alert at all: its nearest alert is within the window of
/// the alert's kind (`|Δt| <= window`, so exactly at the window is still a candidate, with a time
/// score of 0) and it holds fewer correlated alerts than the cap.
pub fn is_candidate(alert: &NewAlert, candidate: &CandidateIncident, config: &CorrelationConfig) -> bool {
    candidate.correlated_alert_count < config.max_alerts_per_incident()
        && nearest_alert_time(alert.fired_at, &candidate.alert_times)
            .is_some_and(|t| alert.fired_at.signed_duration_since(t).abs() <= config.window_for(alert.kind))
}

/// `1 - |Δt| / window` to the incident's nearest alert; 0 at or beyond the window and for an
/// incident without alert times.
pub fn time_window_score(alert: &NewAlert, candidate: &CandidateIncident, config: &CorrelationConfig) -> f64 {
    nearest_alert_time(alert.fired_at, &candidate.alert_times)
        .map_or(0.0, |t| time_score(alert.fired_at, t, config.window_for(alert.kind)))
}

fn time_score(fired_at: DateTime<Utc>, nearest: DateTime<Utc>, window: Duration) -> f64 {
    let delta = fired_at.signed_duration_since(nearest).abs();
    if window <= Duration::zero() || delta >= window {
        return 0.0;
    }
    (1.0 - seconds(delta) / seconds(window)).clamp(0.0, 1.0)
}

fn seconds(d: Duration) -> f64 {
    d.num_seconds() as f64 + f64::from(d.subsec_nanos()) / 1e9
}

/// Cosine of the two embeddings clamped to `0..=1` (0 for vectors that cannot be compared).
pub fn semantic_score(a: &[f32], b: &[f32]) -> f64 {
    f64::from(cosine(a, b)).clamp(0.0, 1.0)
}

/// The sub-scores, total and strategy of `alert` against `candidate` alone (no other open
/// incident shares its evidence). This does not check eligibility (window, cap): see
/// [`is_candidate`] and [`best_match`].
pub fn score(alert: &NewAlert, candidate: &CandidateIncident, config: &CorrelationConfig) -> Score {
    let nearest = nearest_alert_time(alert.fired_at, &candidate.alert_times);
    let services = candidate.services();
    let common = relation::common(
        alert.service.as_deref(),
        &alert.evidence,
        &services,
        &candidate.evidence,
    );
    score_with(
        alert,
        candidate,
        config,
        nearest,
        relation::relation(&common, relation::Sharing::ALONE),
    )
}

fn score_with(
    alert: &NewAlert,
    candidate: &CandidateIncident,
    config: &CorrelationConfig,
    nearest: Option<DateTime<Utc>>,
    relation: Relation,
) -> Score {
    let window = config.window_for(alert.kind);
    let time_window = nearest.map_or(0.0, |t| time_score(alert.fired_at, t, window));
    let service_match = relation.score;
    let semantic = semantic_score(&alert.embedding, &candidate.embedding);
    let w = config.weights();
    let contributions = [
        (Strategy::ServiceMatch, w.service_match() * service_match),
        (Strategy::TimeWindow, w.time_window() * time_window),
        (Strategy::Semantic, w.semantic() * semantic),
    ];
    // Strictly greater only, so ties keep the earlier entry: service_match > time_window > semantic.
    let mut strategy = contributions[0];
    for c in &contributions[1..] {
        if c.1 > strategy.1 {
            strategy = *c;
        }
    }
    let total = contributions.iter().map(|c| c.1).sum::<f64>().clamp(0.0, 1.0);
    Score {
        total,
        time_window,
        service_match,
        semantic,
        strategy: strategy.0,
        weights: w,
        threshold: config.threshold(),
        window_secs: window.num_seconds(),
        relation,
    }
}

/// A direct relation ([`Relation::is_direct`]) at least this strong to two open incidents says
/// they are one: the alert bridges them.
pub const BRIDGE_RELATION: f64 = 0.85;

/// The incident an alert joins, with the score that decided it and the next best candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    pub index: usize,
    pub score: Score,
    /// The best other candidate that reached the threshold: its index and total.
    pub runner_up: Option<(usize, f64)>,
    /// Other candidates the alert relates to as strongly as to this one (see
    /// [`BRIDGE_RELATION`]): their indexes and totals. Empty unless this one's relation is
    /// that strong too.
    pub bridges: Vec<(usize, f64)>,
}

/// The candidate the alert joins: the highest total among candidates that pass [`is_candidate`]
/// and reach the threshold. Shared entities and sibling names are weighed against the other
/// eligible candidates ([`relation::relation`]). Ties go to the candidate whose nearest alert
/// time is the most recent, then to the lowest index. `None` opens a new incident.
pub fn best_match(alert: &NewAlert, candidates: &[CandidateIncident], config: &CorrelationConfig) -> Option<Match> {
    best_match_in(alert, candidates, config, &topology::Topology::default())
}

/// [`best_match`] in a user's service topology: an alias, a dependency (declared or learned) or
/// an owned address relates services as [`topology::Topology::strengthen`] says.
pub fn best_match_in(
    alert: &NewAlert,
    candidates: &[CandidateIncident],
    config: &CorrelationConfig,
    topology: &topology::Topology,
) -> Option<Match> {
    let window = config.window_for(alert.kind);
    let eligible: Vec<(usize, DateTime<Utc>, relation::Common<'_>)> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.correlated_alert_count < config.max_alerts_per_incident())
        .filter_map(|(index, candidate)| {
            let nearest = nearest_alert_time(alert.fired_at, &candidate.alert_times)?;
            if alert.fired_at.signed_duration_since(nearest).abs() > window {
                return None;
            }
            let services = candidate.services();
            let common = relation::common(
                alert.service.as_deref(),
                &alert.evidence,
                &services,
                &candidate.evidence,
            );
            Some((index, nearest, common))
        })
        .collect();
    // How many eligible candidates share each entity key, failure key and sibling name.
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (_, _, common) in &eligible {
        let keys = common
            .shared()
            .iter()
            .chain(common.failures())
            .copied()
            .chain(common.sibling())
            .chain(common.name_part());
        for key in keys {
            *counts.entry(key).or_default() += 1;
        }
    }
    // A name part counts every open incident that uses the word, in its text or its services'
    // names: a common word ("status", "events") identifies none of them.
    for (_, _, common) in &eligible {
        if let Some(part) = common.name_part() {
            if let Some(count) = counts.get_mut(part) {
                *count = eligible
                    .iter()
                    .filter(|(index, _, _)| {
                        let candidate = &candidates[*index];
                        relation::uses_part(&candidate.services(), &candidate.evidence, part)
                    })
                    .count()
                    .max(*count);
            }
        }
    }
    let rarest = |keys: &[&str]| keys.iter().map(|key| counts[key]).min().unwrap_or(1);
    let fits: Vec<AccountFit> = eligible
        .iter()
        .map(|(index, _, _)| account::fit(&alert.evidence, &candidates[*index].evidence))
        .collect();
    let of_same_account = fits.iter().filter(|fit| **fit == AccountFit::Same).count();
    let alert_account = account::of(&alert.evidence);
    let mut ranked: Vec<(usize, DateTime<Utc>, Score, bool)> = Vec::new();
    for ((index, nearest, common), fit) in eligible.iter().zip(&fits) {
        let sharing = relation::Sharing {
            entity: rarest(common.shared()),
            sibling: common.sibling().map_or(1, |lead| counts[lead]),
            failure: rarest(common.failures()),
            name_part: common.name_part().map_or(1, |part| counts[part]),
        };
        let relation = relation::relation(common, sharing);
        let relation = match &candidates[*index] {
            _ if topology.is_empty() => relation,
            candidate => topology.strengthen(
                relation,
                alert.service.as_deref(),
                &alert.evidence,
                &candidate.services(),
                &candidate.evidence,
            ),
        };
        // Another organisation's incident takes the alert only on direct evidence.
        let foreign = *fit == AccountFit::Foreign;
        let relation = if foreign && !relation.is_direct() {
            Relation::none()
        } else {
            relation
        };
        let only_open = eligible.len() == 1 && !foreign;
        let only_of_account = *fit == AccountFit::Same && of_same_account == 1;
        let relation = if alert.kind == EventKind::Alert && (only_open || only_of_account) {
            relation
                .or_sole_candidate(common, alert.minor, &alert.evidence, &candidates[*index].evidence)
                // The account is named when other accounts have incidents open too.
                .of_account(if only_open { None } else { alert_account })
        } else {
            relation
        };
        let score = score_with(alert, &candidates[*index], config, Some(*nearest), relation);
        if score.correlates() {
            ranked.push((*index, *nearest, score, foreign));
        }
    }
    // Best first; candidates are visited by increasing index, and the sort is stable.
    ranked.sort_by(|a, b| b.2.total.total_cmp(&a.2.total).then_with(|| b.1.cmp(&a.1)));
    let mut ranked = ranked.into_iter();
    let (index, _, score, foreign) = ranked.next()?;
    let others: Vec<(usize, DateTime<Utc>, Score, bool)> = ranked.collect();
    // Incidents of two organisations are never merged into one.
    let strong = |score: &Score, foreign: bool| {
        !foreign && score.relation.is_direct() && score.relation.score >= BRIDGE_RELATION
    };
    let bridges = if strong(&score, foreign) {
        others
            .iter()
            .filter(|(_, _, other, foreign)| strong(other, *foreign))
            .map(|(index, _, other, _)| (*index, other.total))
            .collect()
    } else {
        Vec::new()
    };
    Some(Match {
        index,
        score,
        runner_up: others.first().map(|(index, _, score, _)| (*index, score.total)),
        bridges,
    })
}

#[cfg(test)]
mod tests;
