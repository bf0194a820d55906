//! The incidents' read rows that runs of events write in one statement: new incidents' rows and
//! the alerts that joined existing ones, on their own or inside a writer's statement.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use cqrs_es::EventEnvelope;
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::{AlertInfo, Incident, IncidentEvent};

use super::folded::{Columns, FoldedRun};
use crate::ProjectionError;

/// A new incident's row: its opening event, with the alerts that joined it right after (in the
/// same run) folded in, so that one insert leaves the row as applying them one by one would.
pub(super) struct Opening<'a> {
    pub(super) incident_id: &'a Uuid,
    pub(super) user_id: &'a str,
    pub(super) alert: &'a AlertInfo,
    /// The earlier incident the opening alert's key fired in.
    pub(super) previous_incident_id: Option<Uuid>,
    pub(super) opened_at: DateTime<Utc>,
    pub(super) version: i64,
    pub(super) updated_at: DateTime<Utc>,
    pub(super) joined: Option<AlertsJoined<'a>>,
    /// The other columns the run's later events set (a replay's runs hold whole histories).
    pub(super) columns: Columns<'a>,
}

impl<'a> Opening<'a> {
    /// `None` when `opened` is not an `IncidentOpened` event.
    pub(super) fn new(
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

    pub(super) fn last_alert_at(&self) -> DateTime<Utc> {
        let latest_joined = self.joined.as_ref().and_then(AlertsJoined::latest);
        latest_joined.map_or(self.alert.fired_at, |latest| latest.max(self.alert.fired_at))
    }

    /// The opening alert's service, then the joined ones' (the statement sorts and dedupes them).
    pub(super) fn services(&self) -> Vec<&'a str> {
        let mut services: Vec<&str> = self.alert.service.as_deref().into_iter().collect();
        if let Some(joined) = &self.joined {
            services.extend(joined.services());
        }
        services
    }

    /// The evidence keys of the opening alert and the joined ones (the statement dedupes them).
    pub(super) fn evidence(&self) -> Vec<String> {
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
pub(super) struct AlertsJoined<'a> {
    pub(super) incident_id: Uuid,
    pub(super) version: i64,
    pub(super) at: DateTime<Utc>,
    pub(super) alerts: Vec<&'a AlertInfo>,
    /// One of them filled the incident: it is no longer a correlation candidate.
    pub(super) filled: bool,
}

impl<'a> AlertsJoined<'a> {
    pub(super) fn new(last: &EventEnvelope<Incident>, alerts: Vec<&'a AlertInfo>, filled: bool) -> Self {
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
    pub(super) fn leading<'r>(
        run: &'r [&'a EventEnvelope<Incident>],
    ) -> (Option<Self>, &'r [&'a EventEnvelope<Incident>]) {
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

    pub(super) fn services(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.alerts.iter().filter_map(|alert| alert.service.as_deref())
    }

    pub(super) fn evidence(&self) -> Vec<String> {
        self.alerts.iter().flat_map(|alert| alert.evidence.keys()).collect()
    }

    pub(super) fn latest(&self) -> Option<DateTime<Utc>> {
        self.alerts.iter().map(|alert| alert.fired_at).max()
    }
}

/// Inserts new incidents' rows and folds alerts that joined existing incidents into their counts,
/// services and last alert times, in one statement for any number of incidents. The alerts
/// themselves are read from the incidents' events ([`correlated_alerts`]).
pub(super) async fn write_rows(conn: &mut PgConnection, writes: &RowWrites<'_>) -> Result<(), ProjectionError> {
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
    pub(super) openings: Vec<Opening<'a>>,
    pub(super) joined: Vec<AlertsJoined<'a>>,
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

    pub(super) fn joined(joined: AlertsJoined<'a>) -> Self {
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
