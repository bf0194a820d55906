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

use relation::Relation;

mod embedding;
pub mod evidence;
pub mod relation;
pub mod topology;

pub use embedding::{cosine, Embedder, HashedNgramEmbedder, DEFAULT_EMBEDDING_DIMENSIONS, STOPWORDS, STOPWORD_WEIGHT};

/// Time window for ordinary alerts.
pub const DEFAULT_ALERT_WINDOW_SECS: i64 = 300;
/// Time window for deployment events: consecutive failed deploys of one service within half an
/// hour belong together (real gaps between builds are 6–8 minutes).
pub const DEFAULT_DEPLOYMENT_WINDOW_SECS: i64 = 1800;
/// Default weight of the service (relation) sub-score: with the threshold, a relation of 0.86 or
/// more joins anywhere in the window, and time and titles alone never do.
pub const DEFAULT_SERVICE_WEIGHT: f64 = 0.7;
/// Default weight of the time sub-score.
pub const DEFAULT_TIME_WEIGHT: f64 = 0.2;
/// Default weight of the semantic sub-score.
pub const DEFAULT_SEMANTIC_WEIGHT: f64 = 0.1;
/// An alert correlates when its total score is at least this.
pub const DEFAULT_THRESHOLD: f64 = 0.6;
/// An incident holding this many correlated alerts takes no more.
pub const DEFAULT_MAX_ALERTS_PER_INCIDENT: u32 = 50;

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

/// Whether a normalized severity says the sender does not page for it: a warning, an
/// informational notice, a low priority (P3 and below), or Splunk's 1 to 3.
pub fn is_minor_severity(severity: Option<&str>) -> bool {
    severity.is_some_and(|severity| {
        matches!(
            severity.trim().to_ascii_lowercase().as_str(),
            "warning"
                | "warn"
                | "info"
                | "low"
                | "minor"
                | "notice"
                | "debug"
                | "p3"
                | "p4"
                | "p5"
                | "sev3"
                | "sev4"
                | "sev5"
                | "1"
                | "2"
                | "3"
        )
    })
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
// Configuration
// ---------------------------------------------------------------------------------------------

/// Why a configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigError {
    /// A weight was negative, NaN or infinite.
    InvalidWeight { name: &'static str, value: f64 },
    /// All weights were zero (or their sum overflowed).
    ZeroWeightSum,
    /// A time window was zero or negative.
    NonPositiveWindow { kind: EventKind },
    /// The threshold was not a number in `0..=1`.
    InvalidThreshold(f64),
    /// The per-incident alert cap was zero.
    ZeroAlertCap,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidWeight { name, value } => {
                write!(
                    f,
                    "correlation weight {name} must be a finite non-negative number, got {value}"
                )
            }
            Self::ZeroWeightSum => write!(f, "correlation weights must not all be zero"),
            Self::NonPositiveWindow { kind } => write!(f, "correlation window for {} must be positive", kind.as_str()),
            Self::InvalidThreshold(value) => write!(f, "correlation threshold must be in 0..=1, got {value}"),
            Self::ZeroAlertCap => write!(f, "maximum alerts per incident must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Weights of the three sub-scores, always non-negative and summing to 1 (they are normalized
/// by their sum on construction). Serialized with the sub-scores' names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawWeights")]
pub struct Weights {
    service_match: f64,
    time_window: f64,
    semantic: f64,
}

#[derive(Deserialize)]
struct RawWeights {
    service_match: f64,
    time_window: f64,
    semantic: f64,
}

impl TryFrom<RawWeights> for Weights {
    type Error = ConfigError;

    fn try_from(raw: RawWeights) -> Result<Self, Self::Error> {
        Self::new(raw.service_match, raw.time_window, raw.semantic)
    }
}

impl Weights {
    /// Checks that every weight is finite and non-negative and that not all are zero, then
    /// divides each by their sum, so `Weights::new(1.0, 1.0, 2.0)` holds 0.25, 0.25 and 0.5.
    pub fn new(service_match: f64, time_window: f64, semantic: f64) -> Result<Self, ConfigError> {
        for (name, value) in [
            ("service_match", service_match),
            ("time_window", time_window),
            ("semantic", semantic),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(ConfigError::InvalidWeight { name, value });
            }
        }
        let sum = service_match + time_window + semantic;
        if !(sum.is_finite() && sum > 0.0) {
            return Err(ConfigError::ZeroWeightSum);
        }
        // Weights that already sum to 1 are kept as given: dividing by a sum that is 1 up to
        // rounding would change their last bits, and a stored score would not read back equal.
        let sum = if (sum - 1.0).abs() < 1e-12 { 1.0 } else { sum };
        // `abs` turns a -0.0 weight into 0.0 so it serializes as 0.
        Ok(Self {
            service_match: (service_match / sum).abs(),
            time_window: (time_window / sum).abs(),
            semantic: (semantic / sum).abs(),
        })
    }

    pub fn service_match(&self) -> f64 {
        self.service_match
    }

    pub fn time_window(&self) -> f64 {
        self.time_window
    }

    pub fn semantic(&self) -> f64 {
        self.semantic
    }
}

impl Default for Weights {
    /// service 0.7, time 0.2, semantic 0.1 (they already sum to 1).
    fn default() -> Self {
        Self {
            service_match: DEFAULT_SERVICE_WEIGHT,
            time_window: DEFAULT_TIME_WEIGHT,
            semantic: DEFAULT_SEMANTIC_WEIGHT,
        }
    }
}

/// The knobs of correlation. Built only through [`CorrelationConfig::new`] or `Default`, so a
/// value of this type is always valid.
#[derive(Debug, Clone, PartialEq)]
pub struct CorrelationConfig {
    alert_window: Duration,
    deployment_window: Duration,
    weights: Weights,
    threshold: f64,
    max_alerts_per_incident: u32,
}

impl Default for CorrelationConfig {
    /// Windows 300 s (alerts) and 1800 s (deployments), weights 0.5/0.3/0.2, threshold 0.6, at
    /// most 50 correlated alerts per incident.
    fn default() -> Self {
        Self {
            alert_window: Duration::seconds(DEFAULT_ALERT_WINDOW_SECS),
            deployment_window: Duration::seconds(DEFAULT_DEPLOYMENT_WINDOW_SECS),
            weights: Weights::default(),
            threshold: DEFAULT_THRESHOLD,
            max_alerts_per_incident: DEFAULT_MAX_ALERTS_PER_INCIDENT,
        }
    }
}

impl CorrelationConfig {
    /// Windows must be positive, the threshold in `0..=1`, the cap at least 1.
    pub fn new(
        alert_window: Duration,
        deployment_window: Duration,
        weights: Weights,
        threshold: f64,
        max_alerts_per_incident: u32,
    ) -> Result<Self, ConfigError> {
        if alert_window <= Duration::zero() {
            return Err(ConfigError::NonPositiveWindow { kind: EventKind::Alert });
        }
        if deployment_window <= Duration::zero() {
            return Err(ConfigError::NonPositiveWindow {
                kind: EventKind::Deployment,
            });
        }
        if !(0.0..=1.0).contains(&threshold) {
            return Err(ConfigError::InvalidThreshold(threshold));
        }
        if max_alerts_per_incident == 0 {
            return Err(ConfigError::ZeroAlertCap);
        }
        Ok(Self {
            alert_window,
            deployment_window,
            weights,
            threshold,
            max_alerts_per_incident,
        })
    }

    /// The window in which an incident's nearest alert must lie for a new event of this kind.
    pub fn window_for(&self, kind: EventKind) -> Duration {
        match kind {
            EventKind::Alert => self.alert_window,
            EventKind::Deployment => self.deployment_window,
        }
    }

    pub fn alert_window(&self) -> Duration {
        self.alert_window
    }

    pub fn deployment_window(&self) -> Duration {
        self.deployment_window
    }

    pub fn weights(&self) -> Weights {
        self.weights
    }

    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    pub fn max_alerts_per_incident(&self) -> u32 {
        self.max_alerts_per_incident
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
                "service_match": self.weights.service_match,
                "time_window": self.weights.time_window,
                "semantic": self.weights.semantic,
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
    candidate.correlated_alert_count < config.max_alerts_per_incident
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
    let w = config.weights;
    let contributions = [
        (Strategy::ServiceMatch, w.service_match * service_match),
        (Strategy::TimeWindow, w.time_window * time_window),
        (Strategy::Semantic, w.semantic * semantic),
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
        threshold: config.threshold,
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
        .filter(|(_, c)| c.correlated_alert_count < config.max_alerts_per_incident)
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
    let sole_candidate = eligible.len() == 1 && alert.kind == EventKind::Alert;
    let mut ranked: Vec<(usize, DateTime<Utc>, Score)> = Vec::new();
    for (index, nearest, common) in &eligible {
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
        let relation = if sole_candidate {
            relation.or_sole_candidate(common, alert.minor)
        } else {
            relation
        };
        let score = score_with(alert, &candidates[*index], config, Some(*nearest), relation);
        if score.correlates() {
            ranked.push((*index, *nearest, score));
        }
    }
    // Best first; candidates are visited by increasing index, and the sort is stable.
    ranked.sort_by(|a, b| b.2.total.total_cmp(&a.2.total).then_with(|| b.1.cmp(&a.1)));
    let mut ranked = ranked.into_iter();
    let (index, _, score) = ranked.next()?;
    let others: Vec<(usize, DateTime<Utc>, Score)> = ranked.collect();
    let strong = |score: &Score| score.relation.is_direct() && score.relation.score >= BRIDGE_RELATION;
    let bridges = if strong(&score) {
        others
            .iter()
            .filter(|(_, _, other)| strong(other))
            .map(|(index, _, other)| (*index, other.total))
            .collect()
    } else {
        Vec::new()
    };
    Some(Match {
        index,
        score,
        runner_up: others.first().map(|(index, _, score)| (*index, score.total)),
        bridges,
    })
}

#[cfg(test)]
mod tests {
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
}
