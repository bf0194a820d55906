//! The labelled scenario format (`../shared/scenarios/README.md`): a short sequence of webhook
//! payloads with the ground truth of which belong together and what caused them.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::ingest::parsers::{AlertKind, Source};

#[derive(Debug, Clone, Deserialize)]
pub struct Scenario {
    pub id: String,
    #[serde(default)]
    pub description: String,
    pub root_cause: RootCause,
    pub events: Vec<ScenarioEvent>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RootCause {
    pub category: String,
    /// The component at fault; empty for a scenario whose cause is not established.
    pub service: String,
    pub keywords: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioEvent {
    pub offset_s: i64,
    #[serde(deserialize_with = "source_by_name")]
    pub source: Source,
    /// Which incident the event truly belongs to (`main`, or a noise label).
    pub incident: String,
    pub payload: Value,
}

/// The label of the scenario's own incident.
pub const MAIN: &str = "main";

impl ScenarioEvent {
    /// Deployments are posted (the analysis needs them) but not scored for grouping.
    pub fn is_deployment(&self) -> bool {
        self.source.kind() == AlertKind::Deployment
    }
}

impl Scenario {
    /// The event whose incident the analysis is read from: the first alert of `main`.
    pub fn first_main_alert(&self) -> Option<usize> {
        self.events
            .iter()
            .position(|event| event.incident == MAIN && !event.is_deployment())
    }

    /// Whether the truth is that the cause is not established.
    pub fn is_inconclusive(&self) -> bool {
        self.root_cause.service.trim().is_empty()
    }
}

fn source_by_name<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Source, D::Error> {
    let name = String::deserialize(deserializer)?;
    Source::ALL
        .into_iter()
        .find(|source| source.as_str() == name)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown source `{}`", crate::text::shortened(&name, 40))))
}

/// Every `*.json` file of `dir` (not recursive), in file-name order; events sorted by offset.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<Scenario>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the scenario directory {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        anyhow::bail!("no scenario (*.json) in {}", dir.display());
    }
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let mut scenario: Scenario =
                serde_json::from_str(&text).with_context(|| format!("{} is not a scenario", path.display()))?;
            // Stable: ties keep file order, as the format asks.
            scenario.events.sort_by_key(|event| event.offset_s);
            Ok(scenario)
        })
        .collect()
}
