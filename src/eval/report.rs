//! What an evaluation found, and how it is printed.

use std::{fmt, time::Duration};

use serde_json::Value;
use uuid::Uuid;

use super::{
    scenario::Scenario,
    score::{by_category, names_cause, PairCounts, Quality},
    Mode,
};

/// The incident an event ended in, once its analysis finished.
#[derive(Debug, Clone)]
pub struct IncidentOutcome {
    pub id: Uuid,
    /// The analysis completed (an error or a time-out scores 0).
    pub analysed: bool,
    /// The summary and the conclusion thoughts: what the RCA rule reads.
    pub analysis_text: String,
}

impl IncidentOutcome {
    pub fn from_detail(id: Uuid, detail: &Value, analysed: bool) -> Self {
        let conclusions = detail["streamingThoughts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|thought| thought["type"] == "conclusion")
            .filter_map(|thought| thought["content"].as_str());
        let analysis_text = std::iter::once(detail["summary"].as_str().unwrap_or_default())
            .chain(conclusions)
            .collect::<Vec<_>>()
            .join("\n");
        Self {
            id,
            analysed,
            analysis_text,
        }
    }
}

/// One scenario's scores in one mode.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    pub id: String,
    pub category: String,
    /// Each scored (non-deployment) event: its true label and the incident it ended in.
    pub events: Vec<(String, Option<Uuid>)>,
    pub grouping: Quality,
    /// Distinct incidents the scenario's alerts ended in.
    pub incidents: usize,
    pub rca_hit: bool,
    pub analysis_text: String,
    /// Per event, in order: where it came from, its true label and the incident it ended in
    /// (`A`, `B`, ... in order of first appearance), for `--verbose`.
    pub placements: Vec<String>,
}

impl ScenarioResult {
    /// `ended_in`: per event of the scenario, the incident it ended in.
    pub fn score(scenario: &Scenario, ended_in: &[Option<&IncidentOutcome>]) -> Self {
        let events: Vec<(String, Option<Uuid>)> = scenario
            .events
            .iter()
            .zip(ended_in)
            .filter(|(event, _)| !event.is_deployment())
            .map(|(event, outcome)| (event.incident.clone(), outcome.map(|o| o.id)))
            .collect();
        let mut incidents: Vec<Uuid> = events.iter().filter_map(|(_, id)| *id).collect();
        incidents.sort();
        incidents.dedup();
        let analysed = scenario.first_main_alert().and_then(|index| ended_in[index]);
        let analysis_text = analysed.map(|o| o.analysis_text.clone()).unwrap_or_default();
        let mut seen: Vec<Uuid> = Vec::new();
        let placements = scenario
            .events
            .iter()
            .zip(ended_in)
            .map(|(event, outcome)| {
                let letter = outcome.map_or_else(
                    || "-".to_owned(),
                    |o| {
                        let index = seen.iter().position(|id| *id == o.id).unwrap_or_else(|| {
                            seen.push(o.id);
                            seen.len() - 1
                        });
                        char::from(b'A' + (index % 26) as u8).to_string()
                    },
                );
                format!("{:>5}s {} {} -> {letter}", event.offset_s, event.source, event.incident)
            })
            .collect();
        Self {
            id: scenario.id.clone(),
            category: scenario.root_cause.category.clone(),
            grouping: PairCounts::of(&events).quality(),
            incidents: incidents.len(),
            rca_hit: analysed.is_some_and(|o| o.analysed && names_cause(scenario, &o.analysis_text)),
            analysis_text,
            events,
            placements,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ModeReport {
    pub mode: Mode,
    pub results: Vec<ScenarioResult>,
    pub elapsed: Duration,
}

impl ModeReport {
    /// The mean of the scenarios' grouping scores.
    pub fn grouping_macro(&self) -> Quality {
        Quality::mean(&self.results.iter().map(|r| r.grouping).collect::<Vec<_>>())
    }

    /// Over every pair of events of every scenario, labelled (scenario, incident): in storm
    /// mode this counts the pairs of different scenarios that were put together.
    pub fn grouping_pooled(&self) -> Quality {
        let events: Vec<((&str, &str), Option<Uuid>)> = self
            .results
            .iter()
            .flat_map(|r| {
                r.events
                    .iter()
                    .map(move |(label, id)| ((r.id.as_str(), label.as_str()), *id))
            })
            .collect();
        PairCounts::of(&events).quality()
    }

    /// Incidents that hold events of more than one true incident, with their labels
    /// (`scenario/label`), in the order first seen.
    pub fn mixed_incidents(&self) -> Vec<(Uuid, Vec<String>)> {
        let mut labels: Vec<(Uuid, Vec<String>)> = Vec::new();
        for r in &self.results {
            for (label, incident) in &r.events {
                let Some(incident) = incident else { continue };
                let label = format!("{}/{label}", r.id);
                match labels.iter_mut().find(|(id, _)| id == incident) {
                    Some((_, found)) if !found.contains(&label) => found.push(label),
                    Some(_) => {}
                    None => labels.push((*incident, vec![label])),
                }
            }
        }
        labels.retain(|(_, found)| found.len() > 1);
        labels
    }

    /// The share of scenarios whose cause the analysis named.
    pub fn rca_score(&self) -> f64 {
        let hits = self.results.iter().filter(|r| r.rca_hit).count();
        hits as f64 / self.results.len().max(1) as f64
    }
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub modes: Vec<ModeReport>,
    /// Print each scenario's analysis text too.
    pub verbose: bool,
}

impl Report {
    pub fn mode(&self, mode: Mode) -> Option<&ModeReport> {
        self.modes.iter().find(|m| m.mode == mode)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for mode in &self.modes {
            writeln!(f, "== mode: {:?} ({:.1} s)", mode.mode, mode.elapsed.as_secs_f64())?;
            writeln!(
                f,
                "{:<44} {:<20} {:>5} {:>5} {:>5} {:>4} {:>4}",
                "scenario", "category", "P", "R", "F1", "inc", "rca"
            )?;
            for r in &mode.results {
                writeln!(
                    f,
                    "{:<44} {:<20} {:>5.2} {:>5.2} {:>5.2} {:>4} {:>4}",
                    r.id,
                    r.category,
                    r.grouping.precision,
                    r.grouping.recall,
                    r.grouping.f1,
                    r.incidents,
                    if r.rca_hit { "yes" } else { "no" }
                )?;
                if self.verbose {
                    for placement in &r.placements {
                        writeln!(f, "    = {placement}")?;
                    }
                    for line in r.analysis_text.lines() {
                        writeln!(f, "    | {line}")?;
                    }
                }
            }
            let (m, p) = (mode.grouping_macro(), mode.grouping_pooled());
            writeln!(
                f,
                "grouping, macro:  precision {:.3}  recall {:.3}  F1 {:.3}",
                m.precision, m.recall, m.f1
            )?;
            writeln!(
                f,
                "grouping, pooled: precision {:.3}  recall {:.3}  F1 {:.3}",
                p.precision, p.recall, p.f1
            )?;
            let mixed = mode.mixed_incidents();
            writeln!(f, "incidents mixing true incidents: {}", mixed.len())?;
            if self.verbose {
                for (id, labels) in &mixed {
                    writeln!(f, "  {id}: {}", labels.join(", "))?;
                }
            }
            writeln!(f, "rca by category:")?;
            for (category, (hits, total)) in by_category(mode.results.iter().map(|r| (r.category.as_str(), r.rca_hit)))
            {
                writeln!(
                    f,
                    "  {category:<28} {hits:>3}/{total:<3} {:.2}",
                    hits as f64 / total as f64
                )?;
            }
        }
        Ok(())
    }
}
