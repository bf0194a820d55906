//! The correlation settings: time windows per kind of event, the weights of the sub-scores, the
//! threshold and the per-incident cap, validated once when the service starts.

use std::fmt;

use chrono::Duration;
use serde::{Deserialize, Serialize};

use super::EventKind;

/// Time window for ordinary alerts.
pub const DEFAULT_ALERT_WINDOW_SECS: i64 = 300;
/// Time window for deployment events: consecutive failed deploys of one service within half an
/// hour belong together (real gaps between builds are 6–8 minutes).
pub const DEFAULT_DEPLOYMENT_WINDOW_SECS: i64 = 1800;
/// Default weight of the service (relation) sub-score: with the threshold, a relation of 0.86 or
/// more joins anywhere in the window, and time and titles alone never do (the only open incident
/// is a relation of its own, `relation::SOLE_CANDIDATE_SCORE`).
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
