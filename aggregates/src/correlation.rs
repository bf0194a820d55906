//! Correlation scoring: does a new alert belong to an incident that is already open?
//!
//! Pure rules, no I/O. The caller loads the open incidents of the alert's user (for example those
//! with an alert inside [`CorrelationConfig::window_for`] of the new alert's fired-at time), turns
//! them into [`CandidateIncident`]s and asks [`best_match`] which one, if any, the alert joins. The
//! returned [`Score`] is stored verbatim as the correlated alert's `correlation_details`.
//!
//! Three sub-scores, each in `0..=1`, are combined by a weighted sum:
//! - `time_window`: `1 - |Δt| / window`, where `Δt` is measured to the incident's nearest alert;
//! - `service_match`: 1 for the same service, else the best token overlap of service names;
//! - `semantic`: cosine similarity of the title embeddings (see [`HashedNgramEmbedder`]).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Time window for ordinary alerts.
pub const DEFAULT_ALERT_WINDOW_SECS: i64 = 300;
/// Time window for deployment events: consecutive failed deploys of one service within half an
/// hour belong together (real gaps between builds are 6–8 minutes).
pub const DEFAULT_DEPLOYMENT_WINDOW_SECS: i64 = 1800;
/// Default weight of the service sub-score.
pub const DEFAULT_SERVICE_WEIGHT: f64 = 0.5;
/// Default weight of the time sub-score.
pub const DEFAULT_TIME_WEIGHT: f64 = 0.3;
/// Default weight of the semantic sub-score.
pub const DEFAULT_SEMANTIC_WEIGHT: f64 = 0.2;
/// An alert correlates when its total score is at least this.
pub const DEFAULT_THRESHOLD: f64 = 0.6;
/// An incident holding this many correlated alerts takes no more.
pub const DEFAULT_MAX_ALERTS_PER_INCIDENT: u32 = 50;
/// Length of the vectors of [`HashedNgramEmbedder::default`].
pub const DEFAULT_EMBEDDING_DIMENSIONS: usize = 256;

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
    /// service 0.5, time 0.3, semantic 0.2 (they already sum to 1).
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

/// 1.0 when `alert_service` equals (trimmed, case-insensitively) the primary service or any
/// affected service; otherwise the best [`token_overlap`] with those services; 0 when either
/// side has no (non-blank) service.
pub fn service_match_score(alert_service: Option<&str>, primary: Option<&str>, affected: &[String]) -> f64 {
    let Some(service) = alert_service.map(str::trim).filter(|s| !s.is_empty()) else {
        return 0.0;
    };
    let incident_services = || {
        primary
            .into_iter()
            .chain(affected.iter().map(String::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    if incident_services().any(|other| eq_ignore_case(service, other)) {
        return 1.0;
    }
    let service = lowercase(service);
    let tokens = service_tokens(&service);
    incident_services()
        .map(|other| jaccard(&tokens, &service_tokens(&lowercase(other))))
        .fold(0.0, f64::max)
}

/// Jaccard index of the lowercase alphanumeric tokens of two service names:
/// "payments-api" vs "payments-db-01" is |{payments}| / |{payments, api, db, 01}| = 0.25.
pub fn token_overlap(a: &str, b: &str) -> f64 {
    jaccard(&service_tokens(&lowercase(a)), &service_tokens(&lowercase(b)))
}

fn eq_ignore_case(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        a.eq_ignore_ascii_case(b)
    } else {
        a.chars()
            .flat_map(char::to_lowercase)
            .eq(b.chars().flat_map(char::to_lowercase))
    }
}

/// The lowercase form, borrowed when the text has no upper-case letter.
fn lowercase(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_uppercase) {
        Cow::Owned(text.to_lowercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// Tokens of a lowercase service name split on non-alphanumeric characters, sorted, deduplicated.
fn service_tokens(lower: &str) -> Vec<&str> {
    let mut tokens: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens
}

/// Jaccard index of two sorted, deduplicated token lists; 0 when both are empty.
fn jaccard(a: &[&str], b: &[&str]) -> f64 {
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - common;
    if union == 0 {
        0.0
    } else {
        common as f64 / union as f64
    }
}

/// Cosine of the two embeddings clamped to `0..=1` (0 for vectors that cannot be compared).
pub fn semantic_score(a: &[f32], b: &[f32]) -> f64 {
    f64::from(cosine(a, b)).clamp(0.0, 1.0)
}

/// The sub-scores, total and strategy of `alert` against `candidate`. This does not check
/// eligibility (window, cap): see [`is_candidate`] and [`best_match`].
pub fn score(alert: &NewAlert, candidate: &CandidateIncident, config: &CorrelationConfig) -> Score {
    let nearest = nearest_alert_time(alert.fired_at, &candidate.alert_times);
    score_with_nearest(alert, candidate, config, nearest)
}

fn score_with_nearest(
    alert: &NewAlert,
    candidate: &CandidateIncident,
    config: &CorrelationConfig,
    nearest: Option<DateTime<Utc>>,
) -> Score {
    let window = config.window_for(alert.kind);
    let time_window = nearest.map_or(0.0, |t| time_score(alert.fired_at, t, window));
    let service_match = service_match_score(
        alert.service.as_deref(),
        candidate.primary_service.as_deref(),
        &candidate.affected_services,
    );
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
    }
}

/// The candidate the alert joins, with its score: the highest total among candidates that pass
/// [`is_candidate`] and reach the threshold. Ties go to the candidate whose nearest alert time is
/// the most recent, then to the lowest index. `None` opens a new incident.
pub fn best_match(
    alert: &NewAlert,
    candidates: &[CandidateIncident],
    config: &CorrelationConfig,
) -> Option<(usize, Score)> {
    let window = config.window_for(alert.kind);
    let mut best: Option<(usize, DateTime<Utc>, Score)> = None;
    for (index, candidate) in candidates.iter().enumerate() {
        if candidate.correlated_alert_count >= config.max_alerts_per_incident {
            continue;
        }
        let Some(nearest) = nearest_alert_time(alert.fired_at, &candidate.alert_times) else {
            continue;
        };
        if alert.fired_at.signed_duration_since(nearest).abs() > window {
            continue;
        }
        let score = score_with_nearest(alert, candidate, config, Some(nearest));
        if !score.correlates() {
            continue;
        }
        // Candidates are visited by increasing index, so only a strictly better one replaces.
        let better = match &best {
            None => true,
            Some((_, best_nearest, best_score)) => score
                .total
                .total_cmp(&best_score.total)
                .then_with(|| nearest.cmp(best_nearest))
                .is_gt(),
        };
        if better {
            best = Some((index, nearest, score));
        }
    }
    best.map(|(index, _, score)| (index, score))
}

// ---------------------------------------------------------------------------------------------
// Embedding
// ---------------------------------------------------------------------------------------------

/// Turns text into a fixed-length vector; similar texts give vectors with a high [`cosine`].
pub trait Embedder {
    fn embed(&self, text: &str) -> Vec<f32>;
    fn dimensions(&self) -> usize;
}

/// Feature-hashing embedder for alert titles: no model, no state, the same vector for the same
/// text on every run and machine.
///
/// The text is cut at whitespace and non-alphanumeric characters and at camelCase boundaries
/// ("CheckoutAPIHighLatency" gives checkout, api, high, latency), lowercased, and rid of numbers
/// and ids (pure digits, hex ids of 8 or more characters, UUID-like chunks), so "deploy #1842"
/// and "deploy #1843" embed the same. Each word gives itself and the character trigrams of
/// `<word>` as features; each feature is hashed (FNV-1a 64 with a final mix) to a bucket and a
/// sign, weighted `1 + ln(tf)`, with the words of [`STOPWORDS`] counting only
/// [`STOPWORD_WEIGHT`]; the vector is L2-normalized (all zeros when no word is left).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashedNgramEmbedder {
    dimensions: usize,
}

/// Words that say little about *what* broke, so they count [`STOPWORD_WEIGHT`] instead of 1.
///
/// Two groups: English function words, which carry no topic; and alert-template boilerplate
/// (alert, firing, triggered, critical, warning, high, low, above, below, over, threshold), which
/// templates put into titles whatever broke and which speaks of severity, state or comparison.
/// Without it "HighMemory" and "HighErrorRate" on different services would look alike. They are
/// down-weighted, not dropped, so a title made of them still has a vector. Symptom words
/// (error, latency, disk, memory, failed...) are deliberately NOT here: they are what the
/// semantic score is meant to compare.
#[rustfmt::skip]
pub const STOPWORDS: &[&str] = &[
    // English function words.
    "a", "an", "and", "are", "as", "at", "be", "been", "by", "for", "from", "has", "in", "is", "it", "of", "on", "or",
    "the", "to", "was", "with",
    // Alert-template boilerplate: severity, state, comparison.
    "alert", "alerts", "alarm", "firing", "triggered", "critical", "warning", "high", "low", "above", "below", "over",
    "threshold",
];

/// What one occurrence of a stopword (and each of its trigrams) counts for.
pub const STOPWORD_WEIGHT: f64 = 0.25;

impl HashedNgramEmbedder {
    /// # Panics
    /// When `dimensions` is 0.
    pub const fn new(dimensions: usize) -> Self {
        assert!(dimensions > 0, "an embedding needs at least one dimension");
        Self { dimensions }
    }
}

impl Default for HashedNgramEmbedder {
    fn default() -> Self {
        Self::new(DEFAULT_EMBEDDING_DIMENSIONS)
    }
}

impl Embedder for HashedNgramEmbedder {
    fn embed(&self, text: &str) -> Vec<f32> {
        // (feature hash, weight of one occurrence); sorted by hash below so that buckets are
        // summed in an order that depends on the text only. Entries with equal hashes may be
        // permuted by the unstable sort, but their weights (1 and 0.25) add up exactly in f64
        // in any order.
        let mut features: Vec<(u64, f64)> = Vec::with_capacity(text.len() * 2);
        let mut padded: Vec<char> = Vec::with_capacity(32);
        for_each_word(text, |word| {
            let weight = if STOPWORDS.contains(&word) {
                STOPWORD_WEIGHT
            } else {
                1.0
            };
            features.push((hash_word(word), weight));
            padded.clear();
            padded.push('<');
            padded.extend(word.chars());
            padded.push('>');
            for trigram in padded.windows(3) {
                features.push((hash_trigram(trigram), weight));
            }
        });
        features.sort_unstable_by_key(|f| f.0);

        let mut vector = vec![0.0f64; self.dimensions];
        let mut i = 0;
        while i < features.len() {
            let hash = features[i].0;
            let mut tf = 0.0;
            while i < features.len() && features[i].0 == hash {
                tf += features[i].1;
                i += 1;
            }
            // Sublinear tf, continuous at 1: a lone stopword keeps its reduced weight.
            let weight = if tf >= 1.0 { 1.0 + ln(tf) } else { tf };
            let bucket = (hash % self.dimensions as u64) as usize;
            vector[bucket] += if hash >> 63 == 1 { -weight } else { weight };
        }
        let norm = vector.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            vector.iter_mut().for_each(|v| *v /= norm);
        }
        vector.into_iter().map(|v| v as f32).collect()
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }
}

/// Cosine similarity in `-1..=1`; 0 when the lengths differ or either vector is empty, zero or
/// not finite. Sums in f64, in index order, so it is deterministic.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut norm_a, mut norm_b) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        norm_a += x * x;
        norm_b += y * y;
    }
    let cos = dot / (norm_a.sqrt() * norm_b.sqrt());
    if cos.is_finite() {
        cos.clamp(-1.0, 1.0) as f32
    } else {
        0.0
    }
}

/// Calls `f` with each lowercase word of `text` that survives the number and id filter.
fn for_each_word(text: &str, mut f: impl FnMut(&str)) {
    let mut parts: Vec<&str> = Vec::new();
    let mut lower = String::new();
    for chunk in text.split_whitespace() {
        if is_id_chunk(chunk) {
            continue;
        }
        for token in chunk.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()) {
            if is_number_or_id(token) {
                continue;
            }
            parts.clear();
            split_camel_case(token, &mut parts);
            for part in &parts {
                lower.clear();
                lower.extend(part.chars().flat_map(char::to_lowercase));
                if !is_number_or_id(&lower) {
                    f(&lower);
                }
            }
        }
    }
}

/// A whitespace chunk that is an id as a whole, e.g. a UUID: only hex digits and dashes (after
/// trimming punctuation), at least 8 hex digits, at least one decimal digit.
fn is_id_chunk(chunk: &str) -> bool {
    let chunk = chunk.trim_matches(|c: char| !c.is_alphanumeric());
    chunk.contains('-')
        && chunk.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && chunk.chars().filter(char::is_ascii_hexdigit).count() >= 8
        && chunk.chars().any(|c| c.is_ascii_digit())
}

/// Pure digits, or a hex id: 8 or more hex digits with at least one decimal digit (the digit
/// rule keeps words such as "deadbeef" or "acceded", which are rare anyway).
fn is_number_or_id(token: &str) -> bool {
    let all_digits = token.chars().all(|c| c.is_ascii_digit());
    let hex_id =
        token.len() >= 8 && token.chars().all(|c| c.is_ascii_hexdigit()) && token.chars().any(|c| c.is_ascii_digit());
    all_digits || hex_id
}

/// Splits "CheckoutAPIHighLatency" into "Checkout", "API", "High", "Latency": a word starts at
/// an upper-case letter after a lower-case one, and at the last upper-case letter of a run of
/// capitals or after a digit when a lower-case letter follows ("HTTPServer", "5XXRate").
/// Letter-digit boundaries alone do not split, so "p99", "5xx" and "http2" stay whole.
fn split_camel_case<'a>(token: &'a str, out: &mut Vec<&'a str>) {
    let mut start = 0;
    let mut chars = token.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((index, c)) = chars.next() {
        if let Some(p) = prev {
            let next_is_lower = chars.peek().is_some_and(|&(_, n)| n.is_lowercase());
            let boundary =
                c.is_uppercase() && (p.is_lowercase() || ((p.is_uppercase() || p.is_numeric()) && next_is_lower));
            if boundary {
                out.push(&token[start..index]);
                start = index;
            }
        }
        prev = Some(c);
    }
    out.push(&token[start..]);
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Namespaces so that the word "api" and the trigram "api" are different features.
const WORD_FEATURE: u8 = b'w';
const TRIGRAM_FEATURE: u8 = b't';

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// MurmurHash3's 64-bit finalizer: FNV-1a's low bits (the bucket) and top bit (the sign) are
/// poorly mixed for short inputs; this spreads every input bit over all output bits.
fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn hash_word(word: &str) -> u64 {
    mix64(fnv1a(fnv1a(FNV_OFFSET_BASIS, &[WORD_FEATURE]), word.as_bytes()))
}

fn hash_trigram(chars: &[char]) -> u64 {
    let mut hash = fnv1a(FNV_OFFSET_BASIS, &[TRIGRAM_FEATURE]);
    let mut buf = [0u8; 4];
    for c in chars {
        hash = fnv1a(hash, c.encode_utf8(&mut buf).as_bytes());
    }
    mix64(hash)
}

/// Natural logarithm from IEEE-754 basic operations only (which are exactly rounded everywhere),
/// unlike `f64::ln`, whose last bit depends on the platform's libm. For finite `x >= 1`; error
/// below 1e-15 relative.
fn ln(x: f64) -> f64 {
    debug_assert!(x.is_finite() && x >= 1.0);
    let bits = x.to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // x = m * 2^exponent with m in [1, 2), moved to [sqrt(1/2), sqrt(2)).
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.172, so s^2 <= 0.0295.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut power = s;
    let mut series = 0.0;
    for k in 0..12 {
        series += power / f64::from(2 * k + 1);
        power *= s2;
    }
    exponent as f64 * std::f64::consts::LN_2 + 2.0 * series
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

        let (index, score) = best_match(&new, std::slice::from_ref(&open), &config).expect("correlates");
        assert_eq!(index, 0);
        assert_eq!(score.strategy, Strategy::ServiceMatch);
        assert_eq!(score.service_match, 1.0);
        assert!(close(score.time_window, 0.5), "{score:?}");
        assert!((0.6..0.7).contains(&score.semantic), "{score:?}");
        assert!(close(score.total, 0.5 + 0.3 * 0.5 + 0.2 * score.semantic));
        assert!(score.total >= 0.65);
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
        let (index, score) = best_match(&new, std::slice::from_ref(&open), &config).expect("correlates");
        assert_eq!(index, 0);
        assert_eq!(score.window_secs, 1800);
        assert!(close(score.time_window, 1.0 - 371.0 / 1800.0), "{score:?}");
        assert!(score.semantic > 0.9999, "build numbers are dropped: {score:?}");
        assert_eq!(score.service_match, 1.0);
        assert_eq!(score.strategy, Strategy::ServiceMatch);
        assert!(close(
            score.total,
            0.5 + 0.3 * (1.0 - 371.0 / 1800.0) + 0.2 * score.semantic
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
        assert_eq!(best_match(&new, &[open], &config), None);

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
        assert!(close(s.service_match, 1.0 / 3.0));
        assert!(s.total < 0.6, "{s:?}");
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
        let (index, _) = best_match(&new, &[full, almost], &config).expect("the other one");
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
        assert!(close(s.total, 0.5 + 0.2 * s.semantic));

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
        let (_, s) = best_match(&new, &[open], &config).expect("correlates");
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
        let mut new = alert("qqq", Some("search-api-x"), t0, EventKind::Alert);
        new.embedding = vec![0.0; 256];
        assert_eq!(score(&new, &base, &config).strategy, Strategy::TimeWindow);

        // No service, identical title far in the window: semantic (0.2 * 1) beats time (0.3 * 0.5).
        let mut new = alert("zzz", None, t0 + Duration::seconds(150), EventKind::Alert);
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

    #[test]
    fn service_token_overlap() {
        assert_eq!(token_overlap("payments-api", "payments-db-01"), 0.25);
        assert_eq!(token_overlap("Payments_API", "payments.api"), 1.0);
        assert_eq!(token_overlap("---", "---"), 0.0);
        assert_eq!(
            service_match_score(Some("payments-api"), Some("payments-db-01"), &[]),
            0.25
        );
        assert_eq!(
            service_match_score(Some(" Checkout-API "), Some("checkout-api"), &[]),
            1.0
        );
        let affected = vec!["cart-service".to_owned(), "checkout-api".to_owned()];
        assert_eq!(
            service_match_score(Some("CHECKOUT-API"), Some("payments-api"), &affected),
            1.0
        );
        // Best overlap across the primary and the affected services.
        let affected = vec!["payments-db-01".to_owned(), "payments-api-canary".to_owned()];
        assert!(close(
            service_match_score(Some("payments-api"), Some("cart-service"), &affected),
            2.0 / 3.0
        ));
        assert_eq!(service_match_score(None, Some("checkout-api"), &[]), 0.0);
        assert_eq!(service_match_score(Some("checkout-api"), None, &[]), 0.0);
        assert_eq!(service_match_score(Some("  "), Some("checkout-api"), &[]), 0.0);
        assert_eq!(
            service_match_score(Some("checkout-api"), Some(" "), &[String::new()]),
            0.0
        );
        assert_eq!(
            service_match_score(Some("checkout-api"), None, &["checkout-api".to_owned()]),
            1.0
        );
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
        let (index, s) = best_match(&new, &[older.clone(), other, newer.clone()], &config).unwrap();
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
        assert_eq!(best_match(&new, &candidates, &config).map(|m| m.0), Some(1));
        let candidates = [after.clone(), before.clone()];
        assert_eq!(best_match(&new, &candidates, &config).map(|m| m.0), Some(0));

        // Identical candidates: the lowest index.
        let candidates = [before.clone(), before.clone(), before];
        assert_eq!(best_match(&new, &candidates, &config).map(|m| m.0), Some(0));

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
        assert_eq!(json["weights"]["service_match"], 0.5);
        assert_eq!(json["weights"]["time_window"], 0.3);
        assert_eq!(json["weights"]["semantic"], 0.2);
        assert!(json["semantic"].is_f64() && json["total"].is_f64());
        let back: Score = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        assert_eq!(Strategy::TimeWindow.to_string(), "time_window");
    }

    // --- embedding -------------------------------------------------------------------------

    fn sim(a: &str, b: &str) -> f32 {
        cosine(&embed(a), &embed(b))
    }

    #[test]
    fn words_are_split_lowercased_and_rid_of_numbers_and_ids() {
        let words = |text: &str| {
            let mut out = Vec::new();
            for_each_word(text, |w| out.push(w.to_owned()));
            out
        };
        assert_eq!(words("CheckoutApiHighLatency"), ["checkout", "api", "high", "latency"]);
        assert_eq!(words("CheckoutAPIHighLatency"), ["checkout", "api", "high", "latency"]);
        assert_eq!(
            words("HTTPServer 5XXRate p99 http2"),
            ["http", "server", "5xx", "rate", "p99", "http2"]
        );
        assert_eq!(
            words("inventory-service deploy (deploy-production #1842)"),
            ["inventory", "service", "deploy", "deploy", "production"]
        );
        assert_eq!(
            words("pod 550e8400-e29b-41d4-a716-446655440000 crashed, sha 3f2a9c1d7e"),
            ["pod", "crashed", "sha"]
        );
        assert_eq!(
            words("deadbeef cafe01 Ünïcode_Straße"),
            ["deadbeef", "cafe01", "ünïcode", "straße"]
        );
        assert!(words("  #1842 ... 2026-11-20 ").is_empty());
    }

    #[test]
    fn embedding_is_pinned() {
        // Computed once; a change here changes every stored embedding: re-embed before shipping.
        let v = embed("checkout-api p99 latency above 2s");
        assert_eq!(v.len(), 256);
        let nonzero: Vec<(usize, f32)> = v.iter().copied().enumerate().filter(|x| x.1 != 0.0).take(4).collect();
        assert_eq!(nonzero, PINNED_FIRST_NONZERO);
        assert_eq!(sim("CheckoutApiHighLatency", "CheckoutApiHighErrorRate"), PINNED_COSINE);
        let norm: f64 = v.iter().map(|x| f64::from(*x).powi(2)).sum();
        assert!((norm - 1.0).abs() < 1e-6);
    }

    const PINNED_FIRST_NONZERO: [(usize, f32); 4] = [
        (15, -0.045360923),
        (38, 0.18144369),
        (58, -0.18144369),
        (72, -0.18144369),
    ];
    const PINNED_COSINE: f32 = 0.6552823;

    #[test]
    fn embedding_similarities() {
        assert!((sim("checkout-api p99 latency above 2s", "checkout-api p99 latency above 2s") - 1.0).abs() < 1e-6);
        assert_eq!(embed("deploy #1842"), embed("deploy #1843"));
        assert_eq!(embed("CheckoutApiHighLatency"), embed("checkout api high latency"));
        assert!(sim("CheckoutAPIHighLatency", "checkout-api high latency") > 0.8);
        assert!(sim("PaymentsApiElevated5xxRate", "payments api elevated 5xx rate") > 0.8);

        let unrelated = [
            (
                "checkout-api p99 latency above 2s",
                "Disk /var/lib/postgresql space running out on payments-db-01",
            ),
            ("CheckoutApiHighLatency", "notifications queue backlog high"),
            (
                "auth-service - login error spike",
                "inventory-service deploy to production failed",
            ),
            ("Response time degradation", "notifications consumer lag high"),
        ];
        for (a, b) in unrelated {
            assert!(sim(a, b) < 0.3, "{a} / {b}: {}", sim(a, b));
        }
        let related = [
            ("notifications queue backlog high", "notifications consumer lag high"),
            (
                "payments-api: elevated HTTP 5xx rate on POST /v1/charges",
                "payments-api: elevated HTTP 5xx rate on POST /v1/refunds",
            ),
            (
                "auth-service - HTTP 5xx error spike",
                "auth-service - login error spike",
            ),
        ];
        for (a, b) in related {
            assert!(sim(a, b) > 0.4, "{a} / {b}: {}", sim(a, b));
        }
    }

    #[test]
    fn embedding_edge_cases() {
        let zero = embed("#1842 -- 2026-11-20");
        assert!(zero.iter().all(|x| *x == 0.0));
        assert_eq!(cosine(&zero, &zero), 0.0);
        assert_eq!(semantic_score(&zero, &embed("deploy")), 0.0);
        let small = HashedNgramEmbedder::new(16);
        assert_eq!(small.dimensions(), 16);
        assert_eq!(small.embed("checkout latency").len(), 16);
        assert_eq!(
            cosine(&small.embed("checkout"), &embed("checkout")),
            0.0,
            "length mismatch"
        );
        assert_eq!(cosine(&[], &[]), 0.0);
        assert_eq!(cosine(&[1.0, 0.0], &[-1.0, 0.0]), -1.0);
        assert_eq!(semantic_score(&[1.0, 0.0], &[-1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[f32::NAN, 1.0], &[1.0, 1.0]), 0.0);
        // Only stopwords: still a vector.
        assert!(embed("high alert").iter().any(|x| *x != 0.0));
    }

    #[test]
    #[should_panic(expected = "at least one dimension")]
    fn zero_dimensions_panic() {
        let _ = HashedNgramEmbedder::new(0);
    }

    #[test]
    fn portable_ln_matches_std() {
        for x in [
            1.0,
            1.25,
            1.5,
            std::f64::consts::SQRT_2,
            2.0,
            2.75,
            3.0,
            10.0,
            1234.5,
            1e300,
        ] {
            assert!(
                (ln(x) - x.ln()).abs() <= 1e-15 * x.ln().max(1.0),
                "{x}: {} vs {}",
                ln(x),
                x.ln()
            );
        }
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn feature_hash_is_fnv1a_64() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
        assert_ne!(hash_word("api"), hash_trigram(&['a', 'p', 'i']));
    }
}
