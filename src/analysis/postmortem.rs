//! Postmortems: a reactor turns each `ResolutionRequested` (an incident becoming resolved, not
//! one already resolved) into a postmortem job, and the job writes the incident's markdown
//! postmortem from its events, alerts, analysis and RCA conversation, one per incident.

use std::fmt::Write as _;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;
use vigil_projections::{
    chat_sessions as sessions,
    incidents::{self as read, CorrelatedAlertRow, IncidentRow, SuggestionRow, ThoughtRow},
};

use crate::{
    jobs::{JobContext, JobFailure, JobHandler, JobReactor, NewJob},
    state::AppState,
};

pub use crate::jobs::kinds::POSTMORTEM_JOB;

/// The unique key of the postmortem job of one resolution (the event's sequence tells
/// resolutions apart; rereading the event enqueues nothing new).
pub fn job_key(incident_id: &str, sequence: i64) -> String {
    format!("postmortem:incident:{incident_id}:{sequence}")
}

/// ResolutionRequested → a postmortem job, one per resolution.
pub fn postmortem_reactor(db: sqlx::PgPool) -> JobReactor {
    JobReactor {
        name: "reactor_postmortem",
        db,
        event_type: "ResolutionRequested",
        jobs: Box::new(|event| {
            vec![
                NewJob::new(POSTMORTEM_JOB, json!({ "incident_id": event.aggregate_id }))
                    .unique_key(job_key(&event.aggregate_id, event.sequence)),
            ]
        }),
    }
}

#[derive(Deserialize)]
struct PostmortemPayload {
    incident_id: Uuid,
}

pub struct PostmortemHandler {
    pub state: AppState,
}

#[async_trait]
impl JobHandler for PostmortemHandler {
    fn kind(&self) -> &'static str {
        POSTMORTEM_JOB
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let PostmortemPayload { incident_id } = job.payload_as()?;
        let db = &self.state.db;
        let owner: Option<String> = sqlx::query_scalar("SELECT user_id FROM incidents WHERE id = $1")
            .bind(incident_id)
            .fetch_optional(db)
            .await?;
        let Some(user_id) = owner else {
            return Err(JobFailure::retryable("the incident is not projected yet"));
        };
        let Some(incident) = read::find_incident(db, &user_id, incident_id).await? else {
            return Err(JobFailure::retryable("the incident is not projected yet"));
        };
        let history: Vec<(String, DateTime<Utc>, Value)> = sqlx::query_as(
            "SELECT event_type, recorded_at, payload FROM events
             WHERE aggregate_type = 'Incident' AND aggregate_id = $1 ORDER BY sequence",
        )
        .bind(incident_id.to_string())
        .fetch_all(db)
        .await?;
        let conversation = match incident.aurora_chat_session_id {
            Some(session_id) => sessions::find_active(db, &user_id, session_id)
                .await?
                .map(|row| row.messages.0.len())
                .unwrap_or_default(),
            None => 0,
        };
        let record = Record {
            correlated: read::correlated_alerts(db, incident_id).await?,
            thoughts: read::thoughts(db, incident_id).await?,
            suggestions: read::suggestions(db, incident_id).await?,
            history,
            conversation_messages: conversation,
            incident,
        };
        let title = record.title();
        let content = write(&record);
        sqlx::query(
            "INSERT INTO postmortems (incident_id, user_id, title, content, generated_at) VALUES ($1, $2, $3, $4, now())
             ON CONFLICT (incident_id) DO UPDATE
             SET title = EXCLUDED.title, content = EXCLUDED.content, generated_at = EXCLUDED.generated_at",
        )
        .bind(incident_id)
        .bind(&user_id)
        .bind(&title)
        .bind(&content)
        .execute(db)
        .await?;
        Ok(json!({ "incident_id": incident_id, "characters": content.chars().count() }))
    }
}

/// What a postmortem is written from.
pub struct Record {
    pub incident: IncidentRow,
    pub correlated: Vec<CorrelatedAlertRow>,
    pub thoughts: Vec<ThoughtRow>,
    pub suggestions: Vec<SuggestionRow>,
    /// `(event type, recorded at, payload)` in order.
    pub history: Vec<(String, DateTime<Utc>, Value)>,
    pub conversation_messages: usize,
}

impl Record {
    fn title(&self) -> String {
        self.incident
            .alert_title
            .clone()
            .unwrap_or_else(|| "Untitled incident".into())
    }

    fn resolved_at(&self) -> Option<DateTime<Utc>> {
        self.history
            .iter()
            .rev()
            .find(|(kind, _, _)| kind == "ResolutionRequested")
            .map(|(_, at, _)| *at)
    }
}

/// The markdown postmortem: Summary, Timeline, Root Cause, Impact, Resolution, Action Items,
/// Lessons Learned, each from the record's own data.
pub fn write(record: &Record) -> String {
    let incident = &record.incident;
    let title = record.title();
    let service = incident.alert_service.as_deref().unwrap_or("an unnamed service");
    let started = incident.started_at;
    let resolved = record.resolved_at();
    let duration = resolved.map(|end| humanize(end - started));
    let mut md = String::new();
    let _ = writeln!(md, "# Postmortem: {title}\n");

    let _ = writeln!(md, "## Summary\n");
    let _ = write!(
        md,
        "{} alert on {service} ({}) fired at {} UTC",
        incident.source_type,
        incident.severity.as_deref().unwrap_or("severity unknown"),
        started.format("%Y-%m-%d %H:%M:%S")
    );
    match (&resolved, &duration) {
        (Some(end), Some(duration)) => {
            let _ = writeln!(
                md,
                "; the incident was resolved at {} UTC, {duration} later.",
                end.format("%H:%M:%S")
            );
        }
        _ => {
            let _ = writeln!(md, ".");
        }
    }
    let _ = writeln!(
        md,
        "{} correlated alert(s) joined it; affected services: {}.\n",
        incident.correlated_alert_count,
        list_or(&incident.affected_services, service)
    );

    let _ = writeln!(md, "## Timeline\n");
    for (kind, recorded_at, payload) in &record.history {
        // An alert's own time, not when it reached the service, places it in the story.
        let at = payload[kind.as_str()]["alert"]["fired_at"]
            .as_str()
            .and_then(|fired| DateTime::parse_from_rfc3339(fired).ok())
            .map_or(*recorded_at, |fired| fired.with_timezone(&Utc));
        let _ = writeln!(
            md,
            "- {} UTC: {}",
            at.format("%Y-%m-%d %H:%M:%S"),
            describe(kind, payload)
        );
    }
    let _ = writeln!(md);

    let _ = writeln!(md, "## Root Cause\n");
    match incident
        .aurora_summary
        .as_deref()
        .filter(|summary| !summary.trim().is_empty())
    {
        Some(summary) => {
            let _ = writeln!(md, "{}\n", summary.trim());
        }
        None => {
            let _ = writeln!(md, "No root cause analysis was recorded for this incident.\n");
        }
    }
    for thought in record
        .thoughts
        .iter()
        .filter(|t| t.thought_type.as_deref() == Some("hypothesis"))
    {
        let _ = writeln!(md, "- Hypothesis: {}", thought.content);
    }
    let _ = writeln!(md);

    let _ = writeln!(md, "## Impact\n");
    let _ = writeln!(md, "- Services: {}", list_or(&incident.affected_services, service));
    if let Some(environment) = &incident.alert_environment {
        let _ = writeln!(md, "- Environment: {environment}");
    }
    let _ = writeln!(
        md,
        "- Duration: {}",
        duration.as_deref().unwrap_or("unknown (not resolved)")
    );
    let _ = writeln!(
        md,
        "- Alerts: {} (1 opening, {} correlated)",
        incident.correlated_alert_count + 1,
        incident.correlated_alert_count
    );
    for alert in &record.correlated {
        let _ = writeln!(
            md,
            "  - {} on {} ({}, {} {:.2})",
            alert.alert_title.as_deref().unwrap_or("untitled alert"),
            alert.alert_service.as_deref().unwrap_or("unknown service"),
            alert.source_type,
            alert.correlation_strategy,
            alert.correlation_score
        );
    }
    let _ = writeln!(md);

    let _ = writeln!(md, "## Resolution\n");
    let recoveries = record
        .history
        .iter()
        .filter(|(kind, _, _)| kind == "AlertResolved")
        .count();
    let _ = writeln!(
        md,
        "Marked resolved{}; {recoveries} recovery notification(s) arrived from the monitoring source. \
         {} message(s) were exchanged in the incident's analysis conversation.\n",
        resolved
            .map(|at| format!(" at {} UTC", at.format("%Y-%m-%d %H:%M:%S")))
            .unwrap_or_default(),
        record.conversation_messages
    );

    let _ = writeln!(md, "## Action Items\n");
    if record.suggestions.is_empty() {
        let _ = writeln!(
            md,
            "- [ ] Review monitoring for {service}: no follow-up was proposed during the incident."
        );
    }
    for suggestion in &record.suggestions {
        let _ = write!(
            md,
            "- [ ] {} ({}, {} risk)",
            suggestion.title,
            suggestion.kind.as_deref().unwrap_or("action"),
            suggestion.risk.as_deref().unwrap_or("unknown")
        );
        match &suggestion.command {
            Some(command) => {
                let _ = writeln!(md, ": `{command}`");
            }
            None => {
                let _ = writeln!(md);
            }
        }
    }
    let _ = writeln!(md);

    let _ = writeln!(md, "## Lessons Learned\n");
    let time_to_analysis = record
        .history
        .iter()
        .find(|(kind, _, payload)| kind == "AnalysisStatusChanged" && payload[kind.as_str()]["status"] == "complete")
        .map(|(_, at, _)| humanize(*at - started));
    let _ = writeln!(
        md,
        "- Detection: the first alert came from {}; {} related alert(s) were grouped instead of paging separately.",
        incident.source_type, incident.correlated_alert_count
    );
    if let Some(elapsed) = time_to_analysis {
        let _ = writeln!(
            md,
            "- The root cause analysis was complete {elapsed} after the first alert."
        );
    }
    if record.history.iter().any(|(kind, _, _)| kind == "IncidentAbsorbed") {
        let _ = writeln!(
            md,
            "- Another incident had to be merged in by hand: correlation missed it."
        );
    }
    let _ = writeln!(
        md,
        "- Written by vigil from the incident's recorded events; edit it with what only the responders know."
    );
    md
}

fn describe(kind: &str, payload: &Value) -> String {
    let event = &payload[kind];
    let text = |field: &str| event[field].as_str().unwrap_or_default().to_owned();
    match kind {
        "IncidentOpened" => format!(
            "incident opened by \"{}\"",
            event["alert"]["title"].as_str().unwrap_or("an alert")
        ),
        "AlertCorrelated" => format!(
            "alert \"{}\" correlated ({})",
            event["alert"]["title"].as_str().unwrap_or("untitled"),
            event["correlation"]["strategy"].as_str().unwrap_or("unknown")
        ),
        "AlertResolved" => format!("recovery notification for {}", text("alert_key")),
        "StatusChanged" => format!("status set to {}", text("status")),
        "AnalysisStatusChanged" => format!("analysis {}", text("status")),
        "SummaryWritten" => "analysis summary written".into(),
        "ResolutionRequested" => "resolution recorded; postmortem requested".into(),
        "IncidentAbsorbed" => format!("incident {} merged in", text("source_incident_id")),
        "MergedInto" => format!("merged into incident {}", text("target_incident_id")),
        "ChatSessionLinked" => "analysis conversation opened".into(),
        "ActiveTabChanged" => format!("view switched to {}", text("tab")),
        "IncidentTouched" => "incident updated".into(),
        "AlertBridged" => "the alert also relates to other open incidents; they are merged".into(),
        "VerdictRecorded" => format!(
            "analysis verdict: {}",
            event["conclusion"]["verdict"].as_str().unwrap_or("recorded")
        ),
        other => other.to_owned(),
    }
}

fn list_or(values: &[String], fallback: &str) -> String {
    if values.is_empty() {
        fallback.to_owned()
    } else {
        values.join(", ")
    }
}

fn humanize(duration: chrono::Duration) -> String {
    let seconds = duration.num_seconds().max(0);
    match (seconds / 3600, (seconds % 3600) / 60, seconds % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}
