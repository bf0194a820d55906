//! The answer when no model is configured: what the user's incidents say about the question.

use serde_json::{json, Value};
use uuid::Uuid;

use super::{tools::Tool, Turn};
use crate::text::shortened;

impl Turn<'_> {
    /// The answer when no model is configured: what the user's incidents say about the question.
    pub(super) async fn builtin(&mut self, question: &str) {
        self.say(
            "No language model is configured on this server, so the built-in assistant answers: it searches \
             your incidents for the words of your question. ",
        );
        let call_id = format!("builtin_{}", Uuid::new_v4().simple());
        let output = self
            .run_tool(&call_id, Tool::SearchIncidents.name(), &json!({ "query": question }))
            .await;
        let found: Vec<Value> = serde_json::from_str(&output).unwrap_or_default();
        if found.is_empty() {
            self.say(&format!(
                "None of your incidents matches \"{}\". Ask about a service or an alert title, or configure \
                 LLM_BASE_URL for full answers.",
                shortened(question, 80)
            ));
            return;
        }
        self.say(&format!("I found {} matching incidents, newest first.\n", found.len()));
        for incident in found.iter().take(10) {
            self.say(&format!("\n- {}.", describe_incident(incident)));
        }
    }

    /// The built-in answer to a question about one incident: what its record says.
    pub(super) fn builtin_about_incident(&mut self, incident_json: &str) {
        let Ok(incident) = serde_json::from_str::<Value>(incident_json) else {
            self.say("No language model is configured, and the incident could not be read.");
            return;
        };
        self.say(&format!(
            "No language model is configured on this server, so the built-in assistant answers from the incident's \
             record: {}. ",
            describe_incident(&incident)
        ));
        match incident["summary"].as_str().filter(|summary| !summary.is_empty()) {
            Some(summary) => self.say(&format!("The analysis says: {summary}")),
            None => self.say("Its analysis has not written a summary yet."),
        }
    }
}

/// One line about an incident, from the JSON the incident tools return.
fn describe_incident(incident: &Value) -> String {
    let text = |key: &str| incident[key].as_str().unwrap_or("unknown").to_owned();
    format!(
        "\"{}\" ({}; severity {}; service {}; started {}; {} correlated alerts)",
        text("title"),
        text("status"),
        text("severity"),
        text("service"),
        text("started_at"),
        incident["correlated_alert_count"].as_i64().unwrap_or(0),
    )
}
