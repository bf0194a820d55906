//! The nine ingestion sources, named where every layer can use them (a metric's label, a rate
//! limit's budget, a parser).

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// The nine ingestion sources; `as_str()` gives `"source_a"`..`"source_i"`, `FromStr`/`from_token` parses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    SourceA,
    SourceB,
    SourceC,
    SourceD,
    SourceE,
    SourceF,
    SourceG,
    SourceH,
    SourceI,
}

impl Source {
    pub const ALL: [Source; 9] = [
        Source::SourceA,
        Source::SourceB,
        Source::SourceC,
        Source::SourceD,
        Source::SourceE,
        Source::SourceF,
        Source::SourceG,
        Source::SourceH,
        Source::SourceI,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Source::SourceA => "source_a",
            Source::SourceB => "source_b",
            Source::SourceC => "source_c",
            Source::SourceD => "source_d",
            Source::SourceE => "source_e",
            Source::SourceF => "source_f",
            Source::SourceG => "source_g",
            Source::SourceH => "source_h",
            Source::SourceI => "source_i",
        }
    }

    /// The source named by a URL path token such as `"source_a"` (ASCII case-insensitive).
    pub fn from_token(token: &str) -> Option<Source> {
        let token = token.trim();
        Source::ALL
            .into_iter()
            .find(|source| source.as_str().eq_ignore_ascii_case(token))
    }

    /// Whether this source reports alerts or deployments.
    /// The ingestion endpoint of the source (the HTTP routes are declared with the same paths).
    pub const fn endpoint(self) -> &'static str {
        match self {
            Source::SourceA => "/api/source_a/alerts",
            Source::SourceB => "/api/source_b/webhook",
            Source::SourceC => "/api/source_c/alerts",
            Source::SourceD => "/api/source_d/webhook",
            Source::SourceE => "/api/source_e/alerts",
            Source::SourceF => "/api/source_f/deployment",
            Source::SourceG => "/api/source_g/deployment",
            Source::SourceH => "/api/source_h/problems",
            Source::SourceI => "/api/source_i/webhook",
        }
    }

    pub const fn kind(self) -> AlertKind {
        match self {
            Source::SourceF | Source::SourceG => AlertKind::Deployment,
            _ => AlertKind::Alert,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Source {
    type Err = UnknownSource;

    fn from_str(token: &str) -> Result<Self, Self::Err> {
        Source::from_token(token).ok_or_else(|| UnknownSource(token.to_owned()))
    }
}

/// A source token that names none of the nine sources.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown alert source `{0}`; expected one of source_a, source_b, ... source_i")]
pub struct UnknownSource(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    Alert,
    Deployment,
}

impl AlertKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            AlertKind::Alert => "alert",
            AlertKind::Deployment => "deployment",
        }
    }
}
