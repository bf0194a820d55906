//! A run of an incident's events folded into one write of its row (the insert of a new incident,
//! or one update), so that a replay (or a tail catching up) writes thousands of incidents'
//! histories in a few statements instead of one per event. Every column an event sets is last-write-wins, but `analyzed_at` (first one kept),
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

use super::rows::{write_rows, AlertsJoined, RowWrites};
use crate::ProjectionError;

/// The columns other than the alerts that a run of events sets, as its last event leaves them
/// (`None`: the run leaves the column as it was).
#[derive(Default)]
pub(super) struct Columns<'a> {
    pub(super) status: Option<&'static str>,
    pub(super) analysis_status: Option<&'static str>,
    pub(super) analyzed_at: Option<DateTime<Utc>>,
    pub(super) verdict: Option<&'a Conclusion>,
    pub(super) summary: Option<&'a str>,
    pub(super) active_tab: Option<&'static str>,
    pub(super) merged_into: Option<Uuid>,
    pub(super) chat_session: Option<Uuid>,
}

/// A run of an existing incident's events, folded.
pub(super) struct FoldedRun<'a> {
    pub(super) joined: AlertsJoined<'a>,
    pub(super) columns: Columns<'a>,
}

impl<'a> FoldedRun<'a> {
    /// `None` for a run that cannot be folded (it opens an incident, which [`RowWrites`] does,
    /// splits an alert off, which reads the incident's history up to it, or finds a key
    /// flapping, which writes `flapping_keys` too).
    pub(super) fn of(run: &[&'a EventEnvelope<Incident>]) -> Option<Self> {
        use IncidentEvent as E;
        let last = run.last()?;
        let mut fold = Self {
            joined: AlertsJoined::new(last, Vec::new(), false),
            columns: Columns::default(),
        };
        let (joined, columns) = (&mut fold.joined, &mut fold.columns);
        for event in run {
            match &event.payload {
                E::IncidentOpened { .. } | E::AlertSplitOff { .. } | E::FlappingDetected { .. } => return None,
                E::AlertCorrelated { alert, filled, .. } => {
                    joined.alerts.push(alert);
                    joined.filled |= *filled;
                }
                E::IncidentAbsorbed { alerts, .. } => joined.alerts.extend(alerts),
                E::StatusChanged {
                    status, analyzed_at, ..
                } => {
                    columns.status = Some(status.as_str());
                    columns.analyzed_at = columns.analyzed_at.or(*analyzed_at);
                }
                E::AnalysisStatusChanged {
                    status, analyzed_at, ..
                } => {
                    columns.analysis_status = Some(status.as_str());
                    columns.analyzed_at = columns.analyzed_at.or(*analyzed_at);
                }
                E::VerdictRecorded { conclusion, .. } => columns.verdict = Some(conclusion),
                E::SummaryWritten { summary, .. } => columns.summary = Some(summary),
                E::ActiveTabChanged { tab, .. } => columns.active_tab = Some(tab.as_str()),
                E::MergedInto { target_incident_id, .. } => {
                    columns.status = Some("merged");
                    columns.merged_into = Some(*target_incident_id);
                }
                E::ChatSessionLinked { session_id, .. } => columns.chat_session = Some(*session_id),
                E::AlertResolved { .. }
                | E::FlapRecorded { .. }
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
    .bind(runs.iter().map(|run| run.columns.status).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.analysis_status).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.analyzed_at).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.verdict.map(Json)).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.summary).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.active_tab).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.merged_into).collect::<Vec<_>>())
    .bind(runs.iter().map(|run| run.columns.chat_session).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}
