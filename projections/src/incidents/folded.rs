//! A run of an incident's events folded into one update of its row, so that a replay (or a tail
//! catching up) writes thousands of incidents' histories in a few statements instead of one per
//! event. Every column an event sets is last-write-wins, but `analyzed_at` (first one kept),
//! `takes_alerts` (only ever cleared) and the alerts joined (counts add up, services and evidence
//! are sorted sets); so folding a run and applying it event by event leave the same row.

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::{
    incident::{Incident, IncidentEvent},
    ledger::Conclusion,
};

use super::{write_rows, AlertsJoined, RowWrites};
use crate::ProjectionError;

/// The columns a run of events sets, as its last event leaves them.
pub(super) struct FoldedRun<'a> {
    joined: AlertsJoined<'a>,
    status: Option<&'static str>,
    analysis_status: Option<&'static str>,
    analyzed_at: Option<DateTime<Utc>>,
    verdict: Option<&'a Conclusion>,
    summary: Option<&'a str>,
    active_tab: Option<&'static str>,
    merged_into: Option<Uuid>,
    chat_session: Option<Uuid>,
}

impl<'a> FoldedRun<'a> {
    /// `None` for a run that cannot be folded (it opens an incident, which [`RowWrites`] does,
    /// or splits an alert off, which reads the incident's history up to it).
    pub(super) fn of(run: &[&'a EventEnvelope<Incident>]) -> Option<Self> {
        use IncidentEvent as E;
        let last = run.last()?;
        let mut fold = Self {
            joined: AlertsJoined::new(last, Vec::new(), false),
            status: None,
            analysis_status: None,
            analyzed_at: None,
            verdict: None,
            summary: None,
            active_tab: None,
            merged_into: None,
            chat_session: None,
        };
        for event in run {
            match &event.payload {
                E::IncidentOpened { .. } | E::AlertSplitOff { .. } => return None,
                E::AlertCorrelated { alert, filled, .. } => {
                    fold.joined.alerts.push(alert);
                    fold.joined.filled |= *filled;
                }
                E::IncidentAbsorbed { alerts, .. } => fold.joined.alerts.extend(alerts),
                E::StatusChanged {
                    status, analyzed_at, ..
                } => {
                    fold.status = Some(status.as_str());
                    fold.analyzed_at = fold.analyzed_at.or(*analyzed_at);
                }
                E::AnalysisStatusChanged {
                    status, analyzed_at, ..
                } => {
                    fold.analysis_status = Some(status.as_str());
                    fold.analyzed_at = fold.analyzed_at.or(*analyzed_at);
                }
                E::VerdictRecorded { conclusion, .. } => fold.verdict = Some(conclusion),
                E::SummaryWritten { summary, .. } => fold.summary = Some(summary),
                E::ActiveTabChanged { tab, .. } => fold.active_tab = Some(tab.as_str()),
                E::MergedInto { target_incident_id, .. } => {
                    fold.status = Some("merged");
                    fold.merged_into = Some(*target_incident_id);
                }
                E::ChatSessionLinked { session_id, .. } => fold.chat_session = Some(*session_id),
                E::AlertResolved { .. }
                | E::ResolutionRequested { .. }
                | E::IncidentTouched { .. }
                | E::AlertBridged { .. } => {}
            }
        }
        Some(fold)
    }
}

/// Writes folded runs of existing incidents: the alerts they joined in one statement (as
/// placement does), then every other column, the last event's time and version in one more.
pub(super) async fn write_folded(conn: &mut PgConnection, runs: &[FoldedRun<'_>]) -> Result<(), ProjectionError> {
    if runs.is_empty() {
        return Ok(());
    }
    let mut joins = RowWrites {
        openings: Vec::new(),
        joined: Vec::new(),
    };
    for run in runs
        .iter()
        .filter(|run| !run.joined.alerts.is_empty() || run.joined.filled)
    {
        joins.joined.push(AlertsJoined {
            alerts: run.joined.alerts.clone(),
            ..run.joined
        });
    }
    write_rows(conn, &joins).await?;
    sqlx::query(
        "UPDATE incidents SET
             status = COALESCE(u.status, incidents.status),
             aurora_status = COALESCE(u.analysis_status, incidents.aurora_status),
             analyzed_at = COALESCE(incidents.analyzed_at, u.analyzed_at),
             analysis_verdict = COALESCE(u.verdict, incidents.analysis_verdict),
             aurora_summary = COALESCE(u.summary, incidents.aurora_summary),
             active_tab = COALESCE(u.active_tab, incidents.active_tab),
             merged_into_incident_id = COALESCE(u.merged_into, incidents.merged_into_incident_id),
             takes_alerts = incidents.takes_alerts AND u.merged_into IS NULL,
             aurora_chat_session_id = COALESCE(u.chat_session, incidents.aurora_chat_session_id),
             updated_at = u.at, version = u.version
         FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::text[], $5::text[], $6::timestamptz[],
                     $7::jsonb[], $8::text[], $9::text[], $10::uuid[], $11::uuid[])
             AS u(id, at, version, status, analysis_status, analyzed_at, verdict, summary, active_tab,
                  merged_into, chat_session)
         WHERE incidents.id = u.id",
    )
    .bind(runs.iter().map(|run| run.joined.incident_id).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.joined.at).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.joined.version).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.status).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.analysis_status).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.analyzed_at).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.verdict.map(Json)).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.summary).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.active_tab).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.merged_into).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.chat_session).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}
