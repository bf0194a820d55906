//! Automatic root cause analysis: a reactor on the incident event tail enqueues one RCA job per
//! opened incident, and the job runs the analyst and records what it found through the
//! aggregates (thoughts, suggestions, summary, analysis status, the RCA chat session).

use async_trait::async_trait;
use chrono::{Duration, Utc};
use cqrs_es::AggregateError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use uuid::Uuid;
use vigil_aggregates::{
    chat_session::{ChatSessionCommand, Message, SessionStatus},
    incident::{AnalysisStatus, IncidentCommand},
    incident_analysis::{
        AnalysisCommand, Citation, Suggestion as DomainSuggestion, SuggestionKind, ThoughtKind as DomainThoughtKind,
    },
    ledger::{AlertRecord, Conclusion},
};
use vigil_projections::incidents as read;

use super::{
    analyst::{self, AlertFact, DeploymentFact, EarlierIncident, IncidentFacts, PastIncident, ThoughtKind},
    rca_model,
};
use crate::{
    event_store::{execute, Actor},
    ingest::{
        parsers::{self, Source},
        service::alert_evidence,
    },
    jobs::{JobContext, JobFailure, JobHandler, JobReactor, NewJob},
    metrics::AnalysisOutcome,
    state::AppState,
};

pub use crate::jobs::kinds::RCA_JOB;
/// How far around an incident the analysis looks at the user's other alerts.
const NEARBY_WINDOW: Duration = Duration::minutes(15);
/// The most of them it reads (the oldest first).
const MAX_NEARBY_ALERTS: i64 = 200;
const ACTOR: Actor<'static> = Actor::System("analysis");
/// The summary of an analysis that failed for good (its cause is logged).
const ANALYSIS_FAILED: &str = "The automatic analysis could not be completed. The alert and its correlated alerts are \
                               listed here; ask about the incident in its chat to investigate further.";

#[derive(Debug, Serialize, Deserialize)]
struct RcaPayload {
    incident_id: Uuid,
    user_id: String,
}

/// IncidentOpened → an RCA job, keyed by incident so it is enqueued once however often the
/// event is read. It runs `settle` after the incident opened (at once for an event older than
/// that, as on a replay).
pub fn rca_reactor(db: sqlx::PgPool, settle: std::time::Duration) -> JobReactor {
    let settle = Duration::from_std(settle).unwrap_or_default();
    JobReactor {
        name: "reactor_rca",
        db,
        event_type: "IncidentOpened",
        jobs: Box::new(move |event| {
            let opened = &event.payload_value()["IncidentOpened"];
            let payload = json!({ "incident_id": event.aggregate_id, "user_id": opened["user_id"] });
            let job = NewJob::new(RCA_JOB, payload).unique_key(format!("rca:incident:{}", event.aggregate_id));
            vec![job.run_at(event.recorded_at + settle)]
        }),
    }
}

pub struct RcaHandler {
    pub state: AppState,
}

#[async_trait]
impl JobHandler for RcaHandler {
    fn kind(&self) -> &'static str {
        RCA_JOB
    }

    async fn run(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let started = std::time::Instant::now();
        let result = self.run_once(job).await;
        let outcome = match &result {
            Ok(result) if result.get("skipped").is_some() => AnalysisOutcome::Skipped,
            Ok(_) => AnalysisOutcome::Completed,
            Err(JobFailure::Retryable(_)) if !job.is_last_attempt() => AnalysisOutcome::Retried,
            Err(JobFailure::Cancelled(_)) => AnalysisOutcome::Cancelled,
            Err(_) => AnalysisOutcome::Failed,
        };
        self.state.metrics.analysis.observe(outcome, started.elapsed());
        result
    }
}

impl RcaHandler {
    async fn run_once(&self, job: &JobContext) -> Result<Value, JobFailure> {
        let payload: RcaPayload = job.payload_as()?;
        match self.analyse(job, &payload).await {
            Ok(result) => Ok(result),
            Err(failure) => {
                if job.is_last_attempt() {
                    // The cause is for the operators' log; the incident's summary is for its users.
                    tracing::error!(error = %failure, incident_id = %payload.incident_id, "the analysis failed for good");
                    let _ = self
                        .finish(&payload, AnalysisStatus::Error, ANALYSIS_FAILED.into(), None)
                        .await;
                }
                Err(failure)
            }
        }
    }

    async fn analyse(&self, job: &JobContext, payload: &RcaPayload) -> Result<Value, JobFailure> {
        let state = &self.state;
        let Some(incident) = read::find_incident(&state.db, &payload.user_id, payload.incident_id).await? else {
            return Err(JobFailure::retryable("the incident is not projected yet"));
        };
        if incident.aurora_status == AnalysisStatus::Complete.as_str() {
            return Ok(json!({ "skipped": "already analysed" }));
        }
        let title = incident.alert_title.clone().unwrap_or_default();
        let session_id = match incident.aurora_chat_session_id {
            Some(session_id) => session_id,
            None => self.open_session(payload, &title).await?,
        };
        self.mark_running(payload).await?;
        job.checkpoint().await?;

        let facts = self.facts(&incident).await?;
        let mut analysis = analyst::analyze(&facts);
        let mut citations = Vec::new();
        let mut conclusion = analysis.ledger.conclusion();
        if let Some(model) = &state.model {
            let subject = rca_model::Subject {
                user_id: &payload.user_id,
                incident_id: payload.incident_id,
                session_id,
                title: &title,
            };
            // The model's verdict, as the gate let it through, replaces the built-in one.
            if let Some(review) = rca_model::review(state, model, &subject, &mut analysis).await {
                citations = review.citations;
                conclusion = review.conclusion;
            }
        }
        let already_recorded: Option<i64> =
            sqlx::query_scalar("SELECT version FROM incident_analyses WHERE incident_id = $1")
                .bind(payload.incident_id)
                .fetch_optional(&state.db)
                .await?;
        if already_recorded.is_none() {
            self.record(payload.incident_id, &analysis, &citations, job).await?;
        }
        // The summary message goes into the session before the incident says `complete`, so that
        // whoever sees `complete` also finds the answer; a retried job does not post it twice. A
        // session the user deleted meanwhile gets nothing: the analysis completes without it.
        let session = vigil_projections::chat_sessions::find_active(&state.db, &payload.user_id, session_id).await?;
        let deleted = session.is_none();
        let idle = session
            .as_ref()
            .is_some_and(|row| row.status == SessionStatus::Active.as_str());
        let posted = session.is_some_and(|row| row.messages.last().is_some_and(|m| m.text == analysis.summary));
        if !posted && !deleted {
            let append = ChatSessionCommand::AppendMessage {
                user_id: payload.user_id.clone(),
                message: Message::assistant(analysis.summary.clone()),
                at: Utc::now(),
            };
            execute(&state.events.chat_sessions, &session_id.to_string(), append, ACTOR)
                .await
                .map_err(retryable)?;
        }
        // The analysis is the session's workflow: it has finished (spec: active → completed). A
        // session the user is chatting in meanwhile is left to that turn.
        if idle {
            let complete = ChatSessionCommand::Complete {
                user_id: payload.user_id.clone(),
                at: Utc::now(),
            };
            match execute(&state.events.chat_sessions, &session_id.to_string(), complete, ACTOR).await {
                Ok(()) | Err(AggregateError::UserError(_)) => {}
                Err(error) => return Err(retryable(error)),
            }
        }
        self.finish(
            payload,
            AnalysisStatus::Complete,
            analysis.summary.clone(),
            Some(conclusion),
        )
        .await?;
        Ok(
            json!({ "thoughts": analysis.thoughts.len(), "suggestions": analysis.suggestions.len(), "chat_session_id": session_id }),
        )
    }

    async fn open_session(&self, payload: &RcaPayload, title: &str) -> Result<Uuid, JobFailure> {
        let session_id = Uuid::new_v4();
        let create = ChatSessionCommand::Create {
            session_id,
            user_id: payload.user_id.clone(),
            title: Some(format!("Root cause analysis: {title}").chars().take(255).collect()),
            messages: vec![Message::user(format!("Analyse the incident \"{title}\"."))],
            ui_state: Map::new(),
            incident_id: Some(payload.incident_id),
            at: Utc::now(),
        };
        execute(&self.state.events.chat_sessions, &session_id.to_string(), create, ACTOR)
            .await
            .map_err(retryable)?;
        let link = IncidentCommand::LinkChatSession {
            user_id: payload.user_id.clone(),
            session_id,
            at: Utc::now(),
        };
        execute(
            &self.state.events.incidents,
            &payload.incident_id.to_string(),
            link,
            ACTOR,
        )
        .await
        .map_err(retryable)?;
        Ok(session_id)
    }

    async fn mark_running(&self, payload: &RcaPayload) -> Result<(), JobFailure> {
        let command = IncidentCommand::Patch {
            user_id: payload.user_id.clone(),
            status: None,
            analysis_status: Some(AnalysisStatus::Running),
            summary: None,
            active_tab: None,
            at: Utc::now(),
        };
        self.execute(payload, command).await
    }

    /// The analysis's status and summary (which leaves a summary written meanwhile in place).
    async fn finish(
        &self,
        payload: &RcaPayload,
        status: AnalysisStatus,
        summary: String,
        conclusion: Option<Conclusion>,
    ) -> Result<(), JobFailure> {
        let command = IncidentCommand::FinishAnalysis {
            user_id: payload.user_id.clone(),
            status,
            summary,
            conclusion,
            at: Utc::now(),
        };
        self.execute(payload, command).await
    }

    async fn execute(&self, payload: &RcaPayload, command: IncidentCommand) -> Result<(), JobFailure> {
        execute(
            &self.state.events.incidents,
            &payload.incident_id.to_string(),
            command,
            ACTOR,
        )
        .await
        .map_err(retryable)
    }

    async fn record(
        &self,
        incident_id: Uuid,
        analysis: &analyst::Analysis,
        citations: &[Citation],
        job: &JobContext,
    ) -> Result<(), JobFailure> {
        let mut findings = Vec::with_capacity(citations.len() + analysis.thoughts.len() + analysis.suggestions.len());
        for citation in citations {
            findings.push(AnalysisCommand::RecordCitation {
                incident_id,
                citation: citation.clone(),
                at: Utc::now(),
            });
        }
        for thought in &analysis.thoughts {
            let kind = match thought.kind {
                ThoughtKind::Analysis => DomainThoughtKind::Analysis,
                ThoughtKind::Hypothesis => DomainThoughtKind::Hypothesis,
                ThoughtKind::Evidence => DomainThoughtKind::Evidence,
                ThoughtKind::Conclusion => DomainThoughtKind::Conclusion,
            };
            findings.push(AnalysisCommand::RecordThought {
                incident_id,
                kind,
                content: thought.content.clone(),
                at: Utc::now(),
            });
        }
        for suggestion in &analysis.suggestions {
            let kind = match suggestion.kind {
                "fix" => SuggestionKind::Fix,
                "mitigation" => SuggestionKind::Mitigation,
                "investigation" => SuggestionKind::Investigation,
                _ => SuggestionKind::Diagnostic,
            };
            findings.push(AnalysisCommand::ProposeSuggestion {
                incident_id,
                suggestion: DomainSuggestion {
                    title: suggestion.title.clone(),
                    description: Some(suggestion.description.clone()),
                    kind,
                    risk: suggestion.risk,
                    command: suggestion.command.clone(),
                },
                at: Utc::now(),
            });
        }
        // The analysis is complete by now: its findings go in one append (and one projection)
        // rather than one per finding, which an alert storm's many new incidents multiply.
        job.checkpoint().await?;
        execute(
            &self.state.events.analyses,
            &incident_id.to_string(),
            AnalysisCommand::RecordAll(findings),
            ACTOR,
        )
        .await
        .map_err(retryable)?;
        Ok(())
    }

    /// What an analysis of the incident reads, as the analyst takes it; `None` for an incident
    /// that is not the user's. For benches/rca.rs, which times this and `analyst::analyze`.
    pub async fn read_facts(&self, user_id: &str, incident_id: Uuid) -> Result<Option<IncidentFacts>, JobFailure> {
        match read::find_incident(&self.state.db, user_id, incident_id).await? {
            Some(incident) => self.facts(&incident).await.map(Some),
            None => Ok(None),
        }
    }

    /// What the analyst may reason from: the incident, its correlated alerts, the changes
    /// linked to it, similar past incidents of the same user, and the incident its alert fired
    /// in before.
    async fn facts(&self, incident: &read::IncidentRow) -> Result<IncidentFacts, JobFailure> {
        let db = &self.state.db;
        let metadata = &incident.alert_metadata.0;
        let correlated_rows = read::correlated_alerts(db, incident.id).await?;
        let mut alert_ids = vec![incident.source_alert_id];
        alert_ids.extend(correlated_rows.iter().map(|a| a.source_alert_id));
        let correlated = correlated_rows
            .into_iter()
            .map(|alert| AlertFact {
                title: alert.alert_title.unwrap_or_default(),
                service: alert.alert_service,
                severity: alert.alert_severity,
                fired_at: alert.fired_at.unwrap_or(alert.received_at),
                strategy: alert.correlation_strategy,
                score: alert.correlation_score,
            })
            .collect();
        let window = Duration::seconds(self.state.config.deployment_correlation_window_secs);
        let text = |value: &Value, paths: &[&str]| {
            paths
                .iter()
                .find_map(|path| value.pointer(path)?.as_str().map(str::to_owned))
        };
        let deployments = read::linked_changes(db, incident.id, window)
            .await?
            .into_iter()
            .map(|change| DeploymentFact {
                message: text(&change.payload, &["/message"]),
                version: text(&change.payload, &["/version"]),
                commit: text(&change.payload, &["/git/commit_sha", "/commit/sha"]),
                url: text(&change.payload, &["/build_url", "/pipeline/url"]),
                title: change.title,
                service: change.service,
                environment: change.environment,
                failed: !change.succeeded,
                at: change.at,
            })
            .collect();
        let alerts = alert_records(db, &incident.user_id, &alert_ids).await?;
        // The user's other alerts of the same minutes, grouped elsewhere or not at all: the
        // ledger follows the evidence into them.
        let nearby_ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM source_alerts
             WHERE user_id = $1 AND kind = 'alert' AND NOT resolved AND fired_at BETWEEN $2 AND $3
               AND NOT (id = ANY($4))
             ORDER BY fired_at LIMIT $5",
        )
        .bind(&incident.user_id)
        .bind(incident.started_at - NEARBY_WINDOW)
        .bind(incident.last_alert_at + NEARBY_WINDOW)
        .bind(&alert_ids)
        .bind(MAX_NEARBY_ALERTS)
        .fetch_all(db)
        .await?;
        let nearby = alert_records(db, &incident.user_id, &nearby_ids).await?;
        let title = incident.alert_title.clone().unwrap_or_default();
        let similar = self
            .state
            .vectors
            .nearest_incidents(db, &incident.user_id, &title, 5)
            .await?
            .into_iter()
            .filter(|(past, similarity)| past.id != incident.id && *similarity >= 0.5)
            .map(|(past, similarity)| PastIncident {
                similarity,
                title: past.alert_title.unwrap_or_default(),
                status: past.status,
                summary: past.aurora_summary,
                started_at: past.started_at,
            })
            .collect();
        let earlier = match incident.previous_incident_id {
            Some(id) => EarlierIncident::read(db, &incident.user_id, id).await?,
            None => None,
        };
        Ok(IncidentFacts {
            title,
            service: incident.alert_service.clone(),
            environment: incident.alert_environment.clone(),
            severity: incident.severity.clone(),
            source_type: incident.source_type.clone(),
            started_at: incident.started_at,
            detail: metadata.get("detail").and_then(Value::as_str).map(str::to_owned),
            namespace: metadata
                .pointer("/labels/namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            correlated,
            deployments,
            similar,
            alerts,
            nearby,
            earlier,
        })
    }
}

/// What each alert says, read again from the payload it was received with (its title, detail
/// and free text, and the evidence in them), in the order of `ids`.
async fn alert_records(db: &sqlx::PgPool, user_id: &str, ids: &[i64]) -> Result<Vec<AlertRecord>, JobFailure> {
    #[derive(sqlx::FromRow)]
    struct Received {
        id: i64,
        source_type: String,
        alert_key: String,
        fired_at: chrono::DateTime<Utc>,
        payload: sqlx::types::Json<Value>,
    }
    let rows: Vec<Received> = sqlx::query_as(
        "SELECT id, source_type, alert_key, fired_at, payload FROM source_alerts WHERE user_id = $1 AND id = ANY($2)",
    )
    .bind(user_id)
    .bind(ids)
    .fetch_all(db)
    .await?;
    let records = ids.iter().filter_map(|id| {
        let row = rows.iter().find(|row| row.id == *id)?;
        let source: Source = row.source_type.parse().ok()?;
        let parsed = parsers::parse(source, &row.payload.0, row.fired_at).ok()?;
        let alert = parsed.iter().find(|a| a.key == row.alert_key).or(parsed.first())?;
        let texts = std::iter::once(("title", Some(&alert.title)))
            .chain([("detail", alert.detail.as_ref())])
            .chain(alert.free_text.iter().map(|text| ("description", Some(text))))
            .filter_map(|(field, text)| Some((field.to_owned(), text?.clone())))
            .collect();
        Some(AlertRecord::new(
            alert.service.clone(),
            alert.title.clone(),
            texts,
            alert_evidence(alert),
            row.fired_at,
        ))
    });
    Ok(records.collect())
}

fn retryable(error: impl std::fmt::Display) -> JobFailure {
    JobFailure::retryable(error.to_string())
}
