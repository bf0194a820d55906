//! `incidents`: the read model of the Incident aggregate, and the queries the incident API and
//! the correlator serve from it (the alerts that joined an incident are read from its events).

mod changes;
mod folded;
mod queries;

use std::{collections::HashMap, sync::LazyLock};

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::{AlertInfo, Incident, IncidentEvent};

pub use changes::{linked_changes, LinkedChange};
use folded::{write_folded, Columns, FoldedRun};
pub use queries::*;

use crate::{ProjectionError, ReadModel};

pub struct IncidentsReadModel;

impl ReadModel<Incident> for IncidentsReadModel {
    const NAME: &'static str = "incidents";
    const PROJECTED_BY_WRITERS: bool = true;
    const TABLES: &'static [&'static str] = &["incidents", "flapping_keys"];

    async fn versions(
        &self,
        conn: &mut PgConnection,
        aggregate_ids: &[&str],
    ) -> Result<HashMap<String, i64>, ProjectionError> {
        crate::projector::versions_by_uuid(
            conn,
            "SELECT wanted.id, found.version FROM unnest($1::uuid[]) AS wanted(id)
             CROSS JOIN LATERAL (SELECT version FROM incidents WHERE id = wanted.id LIMIT 1) found",
            aggregate_ids,
        )
        .await
    }

    async fn apply(&self, conn: &mut PgConnection, event: &EventEnvelope<Incident>) -> Result<(), ProjectionError> {
        use IncidentEvent as E;
        let id = Uuid::parse_str(&event.aggregate_id).unwrap_or_default();
        let version = event.sequence as i64;
        let at = event.payload.at();
        let set = |assignments: &str| {
            format!("UPDATE incidents SET {assignments}, updated_at = $2, version = $3 WHERE id = $1")
        };
        let touch = "UPDATE incidents SET updated_at = $2, version = $3 WHERE id = $1";
        match &event.payload {
            E::IncidentOpened { .. } => {
                let writes = RowWrites {
                    openings: Opening::new(event, None, Columns::default()).into_iter().collect(),
                    joined: Vec::new(),
                };
                write_rows(conn, &writes).await?;
            }
            E::AlertCorrelated { alert, filled, .. } => {
                write_rows(conn, &RowWrites::joined(AlertsJoined::new(event, vec![alert], *filled))).await?;
            }
            E::IncidentAbsorbed { alerts, .. } => {
                let joined = AlertsJoined::new(event, alerts.iter().collect(), false);
                write_rows(conn, &RowWrites::joined(joined)).await?;
            }
            E::StatusChanged {
                status, analyzed_at, ..
            } => {
                sqlx::query(&set("status = $4, analyzed_at = COALESCE(analyzed_at, $5)"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .bind(analyzed_at)
                    .execute(conn)
                    .await?;
            }
            E::AnalysisStatusChanged {
                status, analyzed_at, ..
            } => {
                sqlx::query(&set("aurora_status = $4, analyzed_at = COALESCE(analyzed_at, $5)"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(status.as_str())
                    .bind(analyzed_at)
                    .execute(conn)
                    .await?;
            }
            E::VerdictRecorded { conclusion, .. } => {
                sqlx::query(&set("analysis_verdict = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(Json(conclusion))
                    .execute(conn)
                    .await?;
            }
            E::SummaryWritten { summary, .. } => {
                sqlx::query(&set("aurora_summary = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(summary)
                    .execute(conn)
                    .await?;
            }
            E::ActiveTabChanged { tab, .. } => {
                sqlx::query(&set("active_tab = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(tab.as_str())
                    .execute(conn)
                    .await?;
            }
            E::MergedInto { target_incident_id, .. } => {
                // A merged incident takes no more alerts, whatever its status becomes (its alerts
                // are the target's): it leaves the correlation candidates for good.
                sqlx::query(&set(
                    "status = 'merged', merged_into_incident_id = $4, takes_alerts = false",
                ))
                .bind(id)
                .bind(at)
                .bind(version)
                .bind(target_incident_id)
                .execute(conn)
                .await?;
            }
            E::ChatSessionLinked { session_id, .. } => {
                sqlx::query(&set("aurora_chat_session_id = $4"))
                    .bind(id)
                    .bind(at)
                    .bind(version)
                    .bind(session_id)
                    .execute(conn)
                    .await?;
            }
            E::AlertSplitOff { .. } => split_off(conn, event).await?,
            E::FlappingDetected {
                source_type, alert_key, ..
            } => {
                sqlx::query(&format!(
                    "WITH flagged AS ({} RETURNING user_id)
                     INSERT INTO flapping_keys (user_id, source_type, alert_key, incident_id, detected_at)
                     SELECT user_id, $4, $5, $1, $2 FROM flagged
                     ON CONFLICT (user_id, source_type, alert_key)
                         DO UPDATE SET incident_id = EXCLUDED.incident_id, detected_at = EXCLUDED.detected_at",
                    set("flapping = true")
                ))
                .bind(id)
                .bind(at)
                .bind(version)
                .bind(source_type)
                .bind(alert_key)
                .execute(conn)
                .await?;
            }
            E::AlertResolved { .. }
            | E::FlapRecorded { .. }
            | E::ResolutionRequested { .. }
            | E::IncidentTouched { .. }
            | E::AlertBridged { .. } => {
                sqlx::query(touch).bind(id).bind(at).bind(version).execute(conn).await?;
            }
        }
        Ok(())
    }

    /// Runs of correlated alerts and recoveries (an alert storm placed in one batch) are written
    /// together.
    async fn apply_all(
        &self,
        conn: &mut PgConnection,
        events: &[&EventEnvelope<Incident>],
    ) -> Result<(), ProjectionError> {
        self.apply_runs(conn, &[events.to_vec()]).await
    }

    /// Across incidents, in one statement: the rows of new incidents (with the alerts that joined
    /// them in the same run folded in) and the alerts that joined existing ones; then the rest of
    /// each run folded into one update ([`FoldedRun`]), all in two more statements (a run that
    /// splits an alert off goes event by event).
    async fn apply_runs(
        &self,
        conn: &mut PgConnection,
        runs: &[Vec<&EventEnvelope<Incident>>],
    ) -> Result<(), ProjectionError> {
        let (writes, rest) = RowWrites::split(runs);
        write_rows(conn, &writes).await?;
        let mut folded = Vec::new();
        for run in rest {
            match FoldedRun::of(run) {
                Some(fold) => folded.push(fold),
                None => {
                    for event in run {
                        self.apply(conn, event).await?;
                    }
                }
            }
        }
        write_folded(conn, &folded).await
    }

    async fn truncate(&self, conn: &mut PgConnection) -> Result<(), ProjectionError> {
        // CASCADE also empties the analysis tables that reference incidents; a full `vigil
        // replay` rebuilds them after this projection.
        sqlx::query("TRUNCATE incidents, flapping_keys CASCADE")
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// An alert left the incident (a user's split): its count, services, evidence and last alert
/// time are worked out again from the alerts that stay, read from its events up to this one
/// (a split is rare, and the row keeps no list of its alerts' evidence to subtract from). Its
/// severity and title are its opening alert's, which never leaves.
async fn split_off(conn: &mut PgConnection, event: &EventEnvelope<Incident>) -> Result<(), ProjectionError> {
    let id = Uuid::parse_str(&event.aggregate_id).unwrap_or_default();
    let history: Vec<Json<IncidentEvent>> = sqlx::query_scalar(
        "SELECT payload FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence <= $3
         ORDER BY sequence",
    )
    .bind(<Incident as cqrs_es::Aggregate>::TYPE)
    .bind(&event.aggregate_id)
    .bind(event.sequence as i64)
    .fetch_all(&mut *conn)
    .await?;
    let alerts = vigil_aggregates::incident::alerts_in(history.into_iter().map(|event| event.0));
    let services: Vec<&str> = alerts.iter().filter_map(|alert| alert.service.as_deref()).collect();
    let evidence: Vec<String> = alerts.iter().flat_map(|alert| alert.evidence.keys()).collect();
    let last_alert_at = alerts.iter().map(|alert| alert.fired_at).max();
    sqlx::query(
        "UPDATE incidents SET correlated_alert_count = $4,
             affected_services = ARRAY(SELECT DISTINCT unnest($5::text[]) ORDER BY 1),
             evidence = (ARRAY(SELECT DISTINCT k COLLATE \"C\" FROM unnest($6::text[]) AS e(k) ORDER BY 1))[1:4096],
             last_alert_at = COALESCE($7, started_at),
             updated_at = $2, version = $3
         WHERE id = $1",
    )
    .bind(id)
    .bind(event.payload.at())
    .bind(event.sequence as i64)
    .bind(alerts.len().saturating_sub(1) as i32)
    .bind(&services)
    .bind(&evidence)
    .bind(last_alert_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// The incident as it stood at `as_of`: its events recorded up to then, applied by this very
/// projection to a scratch copy of its table (a temporary table shadows the real one inside one
/// transaction, which is rolled back), with the alerts that had joined it by then. `None` when
/// the incident did not exist yet.
pub async fn as_of(
    db: &sqlx::PgPool,
    user_id: &str,
    id: Uuid,
    as_of: chrono::DateTime<chrono::Utc>,
) -> Result<Option<(IncidentRow, Vec<CorrelatedAlertRow>)>, ProjectionError> {
    let mut tx = db.begin().await?;
    crate::projector::project_as_of(&mut tx, &IncidentsReadModel, "incidents", &[id.to_string()], as_of).await?;
    let mut incident = find_incident(&mut *tx, user_id, id).await?;
    if let Some(incident) = &mut incident {
        // The merge target is not in the scratch table; its title never changes, so the live
        // row's is the one it had then.
        if let Some(target) = incident.merged_into_incident_id {
            incident.merged_into_title = sqlx::query_scalar("SELECT alert_title FROM public.incidents WHERE id = $1")
                .bind(target)
                .fetch_optional(&mut *tx)
                .await?
                .flatten();
        }
    }
    let correlated = correlated_alerts_recorded_by(&mut *tx, id, Some(as_of)).await?;
    tx.rollback().await?;
    Ok(incident.map(|incident| (incident, correlated)))
}

/// A new incident's row: its opening event, with the alerts that joined it right after (in the
/// same run) folded in, so that one insert leaves the row as applying them one by one would.
struct Opening<'a> {
    incident_id: &'a Uuid,
    user_id: &'a str,
    alert: &'a AlertInfo,
    /// The earlier incident the opening alert's key fired in.
    previous_incident_id: Option<Uuid>,
    opened_at: DateTime<Utc>,
    version: i64,
    updated_at: DateTime<Utc>,
    joined: Option<AlertsJoined<'a>>,
    /// The other columns the run's later events set (a replay's runs hold whole histories).
    columns: Columns<'a>,
}

impl<'a> Opening<'a> {
    /// `None` when `opened` is not an `IncidentOpened` event.
    fn new(
        opened: &'a EventEnvelope<Incident>,
        joined: Option<AlertsJoined<'a>>,
        columns: Columns<'a>,
    ) -> Option<Self> {
        let IncidentEvent::IncidentOpened {
            incident_id,
            user_id,
            alert,
            at,
            previous_incident_id,
            ..
        } = &opened.payload
        else {
            return None;
        };
        Some(Self {
            incident_id,
            user_id,
            alert,
            previous_incident_id: *previous_incident_id,
            opened_at: *at,
            version: joined.as_ref().map_or(opened.sequence as i64, |joined| joined.version),
            updated_at: joined.as_ref().map_or(*at, |joined| joined.at),
            joined,
            columns,
        })
    }

    fn last_alert_at(&self) -> DateTime<Utc> {
        let latest_joined = self.joined.as_ref().and_then(AlertsJoined::latest);
        latest_joined.map_or(self.alert.fired_at, |latest| latest.max(self.alert.fired_at))
    }

    /// The opening alert's service, then the joined ones' (the statement sorts and dedupes them).
    fn services(&self) -> Vec<&'a str> {
        let mut services: Vec<&str> = self.alert.service.as_deref().into_iter().collect();
        if let Some(joined) = &self.joined {
            services.extend(joined.services());
        }
        services
    }

    /// The evidence keys of the opening alert and the joined ones (the statement dedupes them).
    fn evidence(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.alert.evidence.keys().collect();
        if let Some(joined) = &self.joined {
            keys.extend(joined.evidence());
        }
        keys
    }
}

/// Alerts that joined one incident (possibly none), up to the event at `version`, recorded at
/// `at`: a run of events that each change the row only by an alert joined or by being its latest
/// event, folded into one update.
struct AlertsJoined<'a> {
    incident_id: Uuid,
    version: i64,
    at: DateTime<Utc>,
    alerts: Vec<&'a AlertInfo>,
    /// One of them filled the incident: it is no longer a correlation candidate.
    filled: bool,
}

impl<'a> AlertsJoined<'a> {
    fn new(last: &EventEnvelope<Incident>, alerts: Vec<&'a AlertInfo>, filled: bool) -> Self {
        Self {
            incident_id: Uuid::parse_str(&last.aggregate_id).unwrap_or_default(),
            version: last.sequence as i64,
            at: last.payload.at(),
            alerts,
            filled,
        }
    }

    /// The events that lead `run` and fold into one update (correlated alerts, as in an alert
    /// storm, and the events that only touch the row: an alert resolved, a resolution
    /// requested), and the events after them.
    fn leading<'r>(run: &'r [&'a EventEnvelope<Incident>]) -> (Option<Self>, &'r [&'a EventEnvelope<Incident>]) {
        let folded = run
            .iter()
            .take_while(|event| {
                matches!(
                    event.payload,
                    IncidentEvent::AlertCorrelated { .. }
                        | IncidentEvent::AlertResolved { .. }
                        | IncidentEvent::FlapRecorded { .. }
                        | IncidentEvent::ResolutionRequested { .. }
                        | IncidentEvent::IncidentTouched { .. }
                        | IncidentEvent::AlertBridged { .. }
                )
            })
            .count();
        let (leading, after) = run.split_at(folded);
        let Some(last) = leading.last() else {
            return (None, after);
        };
        let mut filled = false;
        let mut alerts = Vec::with_capacity(leading.len());
        for event in leading {
            if let IncidentEvent::AlertCorrelated {
                alert, filled: fills, ..
            } = &event.payload
            {
                alerts.push(alert);
                filled |= *fills;
            }
        }
        (Some(Self::new(last, alerts, filled)), after)
    }

    fn services(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.alerts.iter().filter_map(|alert| alert.service.as_deref())
    }

    fn evidence(&self) -> Vec<String> {
        self.alerts.iter().flat_map(|alert| alert.evidence.keys()).collect()
    }

    fn latest(&self) -> Option<DateTime<Utc>> {
        self.alerts.iter().map(|alert| alert.fired_at).max()
    }
}

/// Inserts new incidents' rows and folds alerts that joined existing incidents into their counts,
/// services and last alert times, in one statement for any number of incidents. The alerts
/// themselves are read from the incidents' events ([`correlated_alerts`]).
async fn write_rows(conn: &mut PgConnection, writes: &RowWrites<'_>) -> Result<(), ProjectionError> {
    static STATEMENT: LazyLock<String> = LazyLock::new(|| format!("WITH {} SELECT 1", RowWrites::ctes(1)));
    if writes.is_empty() {
        return Ok(());
    }
    writes.bind(sqlx::query(&STATEMENT)).execute(conn).await?;
    Ok(())
}

/// The read rows that runs of incident events write in one statement: new incidents' rows (with
/// the alerts that joined them in the same run folded in) and the alerts that joined existing
/// incidents. A writer that appends the events may put these writes in a statement of its own
/// ([`RowWrites::ctes`]): placement appends a batch's events and writes their rows at once.
pub struct RowWrites<'a> {
    openings: Vec<Opening<'a>>,
    joined: Vec<AlertsJoined<'a>>,
}

impl<'a> RowWrites<'a> {
    /// The row writes that lead each run (an opening, then alerts joined and events that only
    /// touch the row), and per run the events after them, to be applied one by one once the rows
    /// are written.
    pub fn split<'r>(runs: &'r [Vec<&'a EventEnvelope<Incident>>]) -> (Self, Vec<&'r [&'a EventEnvelope<Incident>]>) {
        let mut writes = Self {
            openings: Vec::new(),
            joined: Vec::new(),
        };
        let mut rest = Vec::new();
        for run in runs {
            let (opened, after) = match run.split_first() {
                Some((first, after)) if matches!(first.payload, IncidentEvent::IncidentOpened { .. }) => {
                    (Some(*first), after)
                }
                _ => (None, run.as_slice()),
            };
            let (alerts, after) = AlertsJoined::leading(after);
            match opened {
                // A new incident's whole run folds into its insert when it can.
                Some(opened) => match FoldedRun::of(after) {
                    Some(FoldedRun { mut joined, columns }) => {
                        if let Some(leading) = alerts {
                            joined.filled |= leading.filled;
                            joined.alerts.splice(0..0, leading.alerts);
                        }
                        writes.openings.extend(Opening::new(opened, Some(joined), columns));
                        continue;
                    }
                    None => writes.openings.extend(Opening::new(opened, alerts, Columns::default())),
                },
                None => writes.joined.extend(alerts),
            }
            if !after.is_empty() {
                rest.push(after);
            }
        }
        (writes, rest)
    }

    fn joined(joined: AlertsJoined<'a>) -> Self {
        Self {
            openings: Vec::new(),
            joined: vec![joined],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.openings.is_empty() && self.joined.is_empty()
    }

    /// How many existing incidents' rows the writes update (the rows `joined` returns).
    pub fn updates(&self) -> usize {
        self.joined.len()
    }

    /// How many parameters [`RowWrites::bind`] binds.
    pub const PARAMETERS: usize = 36;

    /// Two common table expressions: `opened` inserts the new incidents' rows, `joined` updates
    /// the existing ones and returns their ids. Their parameters are numbered from `$first`, in
    /// the order [`RowWrites::bind`] binds them.
    pub fn ctes(first: usize) -> String {
        crate::renumbered(ROW_WRITES, first - 1)
    }

    /// Binds the [`RowWrites::PARAMETERS`] parameters of [`RowWrites::ctes`], after those bound before.
    pub fn bind<'q>(
        &'q self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let column = |f: fn(&AlertInfo) -> Option<&str>| -> Vec<Option<&str>> {
            self.openings.iter().map(|o| f(o.alert)).collect()
        };
        query
            .bind(self.openings.iter().map(|o| *o.incident_id).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.user_id).collect::<Vec<_>>())
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.alert.source_type.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.alert.source_alert_id)
                    .collect::<Vec<_>>(),
            )
            .bind(column(|a| a.severity.as_deref()))
            .bind(self.openings.iter().map(|o| o.alert.title.as_str()).collect::<Vec<_>>())
            .bind(column(|a| a.service.as_deref()))
            .bind(column(|a| a.environment.as_deref()))
            .bind(column(|a| a.source_url.as_deref()))
            .bind(
                self.openings
                    .iter()
                    .map(|o| Json(&o.alert.metadata))
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| o.alert.fired_at).collect::<Vec<_>>())
            .bind(self.openings.iter().map(Opening::last_alert_at).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.opened_at).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.updated_at).collect::<Vec<_>>())
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.joined.as_ref().map_or(0, |joined| joined.alerts.len() as i32))
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| Json(o.services())).collect::<Vec<_>>())
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.joined.as_ref().is_some_and(|joined| joined.filled))
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| o.version).collect::<Vec<_>>())
            .bind(self.joined.iter().map(|group| group.incident_id).collect::<Vec<_>>())
            .bind(self.joined.iter().map(|group| group.at).collect::<Vec<_>>())
            .bind(self.joined.iter().map(|group| group.version).collect::<Vec<_>>())
            .bind(
                self.joined
                    .iter()
                    .map(|group| group.alerts.len() as i32)
                    .collect::<Vec<_>>(),
            )
            .bind(
                self.joined
                    .iter()
                    .map(|group| Json(group.services().collect::<Vec<_>>()))
                    .collect::<Vec<_>>(),
            )
            .bind(self.joined.iter().map(AlertsJoined::latest).collect::<Vec<_>>())
            .bind(self.joined.iter().map(|group| group.filled).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| Json(o.evidence())).collect::<Vec<_>>())
            .bind(
                self.joined
                    .iter()
                    .map(|group| Json(group.evidence()))
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| o.previous_incident_id).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.columns.status).collect::<Vec<_>>())
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.columns.analysis_status)
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| o.columns.analyzed_at).collect::<Vec<_>>())
            .bind(
                self.openings
                    .iter()
                    .map(|o| o.columns.verdict.map(Json))
                    .collect::<Vec<_>>(),
            )
            .bind(self.openings.iter().map(|o| o.columns.summary).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.columns.active_tab).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.columns.merged_into).collect::<Vec<_>>())
            .bind(self.openings.iter().map(|o| o.columns.chat_session).collect::<Vec<_>>())
    }
}

/// [`RowWrites::ctes`], its parameters numbered from `$1`.
const ROW_WRITES: &str = "opened AS (
        INSERT INTO incidents (id, user_id, source_type, source_alert_id, severity, alert_title, alert_service,
            alert_environment, alert_source_url, alert_metadata, started_at, last_alert_at, created_at, updated_at,
            correlated_alert_count, affected_services, takes_alerts, version, evidence, previous_incident_id,
            status, aurora_status, analyzed_at, analysis_verdict, aurora_summary, active_tab, merged_into_incident_id,
            aurora_chat_session_id)
        SELECT id, user_id, source_type, source_alert_id, severity, alert_title, alert_service, alert_environment,
            alert_source_url, alert_metadata, fired_at, last_alert_at, opened_at, updated_at, joined,
            ARRAY(SELECT DISTINCT unnest(ARRAY(SELECT jsonb_array_elements_text(services))) ORDER BY 1),
            NOT filled AND merged_into IS NULL, version,
            (ARRAY(SELECT DISTINCT k COLLATE \"C\" FROM jsonb_array_elements_text(evidence) AS e(k) ORDER BY 1))[1:4096],
            previous_incident_id,
            -- The columns' defaults where the run set nothing.
            COALESCE(status, 'investigating'), COALESCE(analysis_status, 'idle'), analyzed_at, verdict, summary,
            COALESCE(active_tab, 'thoughts'), merged_into, chat_session
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
                $8::text[], $9::text[], $10::jsonb[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[],
                $14::timestamptz[], $15::int[], $16::jsonb[], $17::bool[], $18::bigint[], $26::jsonb[], $28::uuid[],
                $29::text[], $30::text[], $31::timestamptz[], $32::jsonb[], $33::text[], $34::text[], $35::uuid[],
                $36::uuid[])
            AS o(id, user_id, source_type, source_alert_id, severity, alert_title, alert_service, alert_environment,
                 alert_source_url, alert_metadata, fired_at, last_alert_at, opened_at, updated_at, joined, services,
                 filled, version, evidence, previous_incident_id, status, analysis_status, analyzed_at, verdict,
                 summary, active_tab, merged_into, chat_session)
    ), joined AS (
        UPDATE incidents SET
            correlated_alert_count = correlated_alert_count + u.joined,
            affected_services = ARRAY(
                SELECT DISTINCT unnest(affected_services || ARRAY(SELECT jsonb_array_elements_text(u.services)))
                ORDER BY 1),
            last_alert_at = GREATEST(last_alert_at, COALESCE(u.latest, last_alert_at)),
            takes_alerts = takes_alerts AND NOT u.filled,
            evidence = CASE WHEN jsonb_array_length(u.evidence) = 0 THEN incidents.evidence ELSE
                (ARRAY(SELECT DISTINCT k COLLATE \"C\"
                       FROM unnest(incidents.evidence || ARRAY(SELECT jsonb_array_elements_text(u.evidence))) AS e(k)
                       ORDER BY 1))[1:4096] END,
            updated_at = u.at, version = u.version
        FROM unnest($19::uuid[], $20::timestamptz[], $21::bigint[], $22::int[], $23::jsonb[], $24::timestamptz[],
                $25::bool[], $27::jsonb[])
            AS u(id, at, version, joined, services, latest, filled, evidence)
        WHERE incidents.id = u.id
        RETURNING incidents.id
    )";
