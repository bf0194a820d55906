//! Placement's two statements: the read of everything a batch decides from, and the write of
//! everything it decided (deliveries, events, read rows and inbox entries), each one round trip.

use std::{collections::HashMap, sync::LazyLock};

use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, DomainEvent, EventEnvelope};
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::{incident::Incident, received_alert::ReceivedAlert};
use vigil_projections::{
    alert_inbox::InboxWrites,
    incidents::{RowWrites, UserCandidateRow},
};

use super::{
    noise::{FlapRow, GroupKey},
    Abort, Item, PlacementError, Plan, SERIALIZATION_FAILURE,
};
use crate::ingest::parsers::NormalizedAlert;

/// `(user, from, to)`: where a user's correlation candidates are looked for.
pub(super) type CandidateWindow<'a> = (&'a str, DateTime<Utc>, DateTime<Utc>);

/// What one round trip finds for a batch (see [`look_up`]).
pub(super) struct Found {
    /// One per item: its delivery's row if recorded before, or the id reserved for it.
    pub(super) deliveries: Vec<DeliveryRow>,
    /// Item index → the open incident already holding an alert with the item's key (firing items).
    pub(super) key_holders: Vec<(usize, Uuid)>,
    /// Item index → the incident of the newest earlier delivery of the item's key, whatever its
    /// status (firing items): what a new incident the item opens follows on from.
    pub(super) earlier: Vec<(usize, Uuid)>,
    /// Item index → the incident of the newest unresolved alert of the item's group (recoveries),
    /// with its read row's version.
    pub(super) group_incidents: Vec<(usize, Uuid, Option<i64>)>,
    pub(super) candidates: Vec<UserCandidateRow>,
    /// Each user's `ingestion_cursors.placed` as read (0 for a user never placed).
    pub(super) cursors: Vec<(String, i64)>,
    /// `(user, silence generation)` of the users who have or had silences.
    pub(super) silences: Vec<(String, i64)>,
    /// `(user, grouping rule generation)` of the users who have or had grouping rules.
    pub(super) rules: Vec<(String, i64)>,
    /// The flapping facts of the items whose key flaps or recovered lately (alerts, not changes).
    pub(super) flaps: Vec<FlapRow>,
}

impl Found {
    /// The read-row versions of every incident the batch may append to, as this transaction
    /// read them (under the users' locks, before appending): see `Projector::project_appended_in`.
    pub(super) fn versions_seen(&self) -> HashMap<String, i64> {
        let candidates = self
            .candidates
            .iter()
            .map(|row| (row.candidate.id, row.candidate.version));
        let groups = self
            .group_incidents
            .iter()
            .filter_map(|&(_, incident_id, version)| Some((incident_id, version?)));
        let flapping = self
            .flaps
            .iter()
            .filter_map(|&(_, incident_id, version, ..)| Some((incident_id?, version?)));
        candidates
            .chain(groups)
            .chain(flapping)
            .map(|(incident_id, version)| (incident_id.to_string(), version))
            .collect()
    }
}

#[derive(serde::Deserialize)]
pub(super) struct DeliveryRow {
    pub(super) id: i64,
    /// Whether an earlier notification recorded this delivery (`id` is then its row's).
    pub(super) recorded: bool,
    pub(super) incident_id: Option<Uuid>,
    pub(super) correlated: bool,
}

/// In one statement (one round trip), what placement decides from: for each item, its delivery's
/// row if an earlier notification recorded it, else a fresh id from the table's sequence; the
/// open incidents holding the items' occurrences (key and fired-at time); the incidents the items'
/// keys last went to; the incidents of the recoveries' groups; every user's correlation
/// candidates; every user's cursor; the generations of the users' silences and grouping rules;
/// the flapping facts of the items' keys (within `flapping_window`). The reads share the statement's snapshot, and the batch's
/// write requires the cursors to be where that snapshot found them: so whatever the batch decides
/// from these reads, no batch of these users has been placed since, which is what makes the
/// deliveries' deduplication safe without inserting first.
/// Lookups run for every item, recorded before or not; placement uses those of the fresh ones.
/// The results come back as JSON columns of one row.
///
/// Every lookup is a lateral key lookup, so that its plan stays an index scan whatever the
/// tables' statistics said when the (generic) plan was made: a join against the unnested items
/// was planned, on a young table, as a scan of the whole table, and kept as it grew.
pub(super) async fn look_up(
    conn: &mut PgConnection,
    items: &[Item<'_>],
    windows: &[CandidateWindow<'_>],
    max_correlated: i32,
    flapping_window: chrono::Duration,
) -> sqlx::Result<Found> {
    type Lookups = (
        Json<Vec<DeliveryRow>>,
        Json<Vec<(usize, Uuid)>>,
        Json<Vec<(usize, Uuid)>>,
        Json<Vec<(usize, Uuid, Option<i64>)>>,
        Json<Vec<UserCandidateRow>>,
        Json<Vec<(String, i64)>>,
        Json<Vec<(String, i64)>>,
        Json<Vec<(String, i64)>>,
        Json<Vec<FlapRow>>,
    );
    let users: Vec<&str> = items
        .iter()
        .map(|item| item.user_id)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let (deliveries, key_holders, earlier, group_incidents, candidates, cursors, silences, rules, flaps): Lookups =
        sqlx::query_as(
        "WITH items AS (
             SELECT (ordinality - 1)::int AS index, user_id, source_type, alert_key, group_key, alert_state,
                    fired_at, resolved, kind
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::bool[],
                         $12::text[])
                 WITH ORDINALITY AS q(user_id, source_type, alert_key, group_key, alert_state, fired_at, resolved,
                                      kind, ordinality)
         ), probed AS (
             -- Whether the item's key was ever received: in an alert storm it almost never was,
             -- and the lookups by key below are then skipped.
             SELECT q.*, seen.id IS NOT NULL AS seen
             FROM items q LEFT JOIN LATERAL (
                 SELECT s.id FROM source_alerts s
                 WHERE s.user_id = q.user_id AND s.source_type = q.source_type AND s.alert_key = q.alert_key
                 LIMIT 1
             ) seen ON true
         )
         SELECT
             (SELECT COALESCE(json_agg(json_build_object(
                         'id', COALESCE(d.id, nextval('source_alerts_id_seq')), 'recorded', d.id IS NOT NULL,
                         'incident_id', d.incident_id, 'correlated', COALESCE(d.correlated, false))
                     ORDER BY q.index), '[]')
              FROM probed q LEFT JOIN LATERAL (
                  SELECT s.id, s.incident_id, s.correlated FROM source_alerts s
                  WHERE q.seen AND s.user_id = q.user_id AND s.source_type = q.source_type
                    AND s.alert_key = q.alert_key AND s.alert_state = q.alert_state AND s.fired_at = q.fired_at
                  LIMIT 1
              ) d ON true),
             (SELECT COALESCE(json_agg(json_build_array(q.index, s.incident_id)), '[]')
              FROM probed q CROSS JOIN LATERAL (
                  SELECT s.incident_id FROM source_alerts s
                  WHERE q.seen AND s.user_id = q.user_id AND s.source_type = q.source_type
                    AND s.alert_key = q.alert_key AND s.fired_at = q.fired_at AND NOT s.resolved
                    AND s.incident_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM incidents i
                                WHERE i.id = s.incident_id AND i.status IN ('investigating', 'analyzed'))
                  ORDER BY s.id DESC LIMIT 1
              ) s
              WHERE NOT q.resolved),
             (SELECT COALESCE(json_agg(json_build_array(q.index, s.incident_id)), '[]')
              FROM probed q CROSS JOIN LATERAL (
                  SELECT s.incident_id FROM source_alerts s
                  WHERE q.seen AND s.user_id = q.user_id AND s.source_type = q.source_type
                    AND s.alert_key = q.alert_key AND s.incident_id IS NOT NULL
                  ORDER BY s.id DESC LIMIT 1
              ) s
              WHERE NOT q.resolved),
             -- A recovery's group: an alert's is its key (so the key index finds it); a
             -- deployment's is its service and environment (an index of deployments alone), and
             -- a success resolves only a failure that came before it.
             (SELECT COALESCE(json_agg(json_build_array(q.index, s.incident_id,
                                                        (SELECT i.version FROM incidents i WHERE i.id = s.incident_id))),
                              '[]')
              FROM items q CROSS JOIN LATERAL (
                  SELECT newest.incident_id FROM (
                      (SELECT s.id, s.incident_id FROM source_alerts s
                       WHERE q.kind <> 'deployment' AND s.user_id = q.user_id AND s.source_type = q.source_type
                         AND s.alert_key = q.group_key AND NOT s.resolved AND s.incident_id IS NOT NULL
                       ORDER BY s.id DESC LIMIT 1)
                      UNION ALL
                      (SELECT s.id, s.incident_id FROM source_alerts s
                       WHERE q.kind = 'deployment' AND s.kind = 'deployment' AND s.user_id = q.user_id
                         AND s.source_type = q.source_type AND s.group_key = q.group_key
                         AND NOT s.resolved AND s.incident_id IS NOT NULL AND s.fired_at <= q.fired_at
                       ORDER BY s.id DESC LIMIT 1)
                  ) newest
                  ORDER BY newest.id DESC LIMIT 1
              ) s
              WHERE q.resolved),
             (SELECT COALESCE(json_agg(json_build_object(
                         'user_id', w.user_id, 'id', c.id, 'alert_title', c.alert_title,
                         'alert_service', c.alert_service, 'affected_services', c.affected_services,
                         'started_at', c.started_at, 'last_alert_at', c.last_alert_at,
                         'correlated_alert_count', c.correlated_alert_count, 'version', c.version,
                         'evidence', c.evidence)), '[]')
              FROM unnest($8::text[], $9::timestamptz[], $10::timestamptz[]) AS w(user_id, from_at, to_at)
              CROSS JOIN LATERAL (
                  SELECT i.id, i.alert_title, i.alert_service, i.affected_services, i.started_at, i.last_alert_at,
                         i.correlated_alert_count, i.version, i.evidence
                  FROM incidents i
                  WHERE i.user_id = w.user_id AND i.status = 'investigating' AND i.takes_alerts
                    AND i.last_alert_at >= w.from_at AND i.started_at <= w.to_at
                    AND i.correlated_alert_count < $11
                  ORDER BY i.last_alert_at DESC
                  LIMIT 200
              ) c),
             (SELECT COALESCE(json_agg(json_build_array(u.user_id, COALESCE(c.placed, 0))), '[]')
              FROM unnest($13::text[]) AS u(user_id)
              LEFT JOIN ingestion_cursors c ON c.user_id = u.user_id),
             (SELECT COALESCE(json_agg(json_build_array(g.user_id, g.generation)), '[]')
              FROM silence_generations g WHERE g.user_id = ANY($13)),
             (SELECT COALESCE(json_agg(json_build_array(g.user_id, g.generation)), '[]')
              FROM grouping_rule_generations g WHERE g.user_id = ANY($13)),
             -- A key's flapping: the incident it flaps in, when it was last delivered, and (for a
             -- recovery) how many of its latest deliveries are recoveries within the window.
             (SELECT COALESCE(json_agg(json_build_array(q.index, f.incident_id,
                         (SELECT i.version FROM incidents i WHERE i.id = f.incident_id),
                         (SELECT s.received_at FROM source_alerts s
                          WHERE f.incident_id IS NOT NULL AND s.user_id = q.user_id
                            AND s.source_type = q.source_type AND s.alert_key = q.alert_key
                          ORDER BY s.id DESC LIMIT 1),
                         f.recoveries)), '[]')
              FROM probed q CROSS JOIN LATERAL (
                  SELECT (SELECT k.incident_id FROM flapping_keys k
                          WHERE k.user_id = q.user_id AND k.source_type = q.source_type
                            AND k.alert_key = q.alert_key) AS incident_id,
                         CASE WHEN q.resolved THEN (
                             SELECT count(*) FROM (
                                 SELECT s.resolved, s.received_at FROM source_alerts s
                                 WHERE s.user_id = q.user_id AND s.source_type = q.source_type
                                   AND s.alert_key = q.alert_key
                                 ORDER BY s.id DESC LIMIT 64) latest
                             WHERE latest.resolved AND latest.received_at > now() - make_interval(secs => $14))
                         ELSE 0 END AS recoveries
              ) f
              WHERE q.seen AND q.kind = 'alert' AND (f.incident_id IS NOT NULL OR f.recoveries > 0))",
    )
    .bind(items.iter().map(|item| item.user_id).collect::<Vec<_>>())
    .bind(items.iter().map(|item| item.alert.source.as_str()).collect::<Vec<_>>())
    .bind(items.iter().map(|item| item.alert.key.as_str()).collect::<Vec<_>>())
    .bind(
        items
            .iter()
            .map(|item| item.alert.group_key.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(items.iter().map(|item| item.alert.state.as_str()).collect::<Vec<_>>())
    .bind(items.iter().map(|item| item.alert.fired_at).collect::<Vec<_>>())
    .bind(items.iter().map(|item| item.alert.resolved).collect::<Vec<_>>())
    .bind(windows.iter().map(|w| w.0).collect::<Vec<_>>())
    .bind(windows.iter().map(|w| w.1).collect::<Vec<_>>())
    .bind(windows.iter().map(|w| w.2).collect::<Vec<_>>())
    .bind(max_correlated)
    .bind(items.iter().map(|item| item.alert.kind.as_str()).collect::<Vec<_>>())
    .bind(&users)
    .bind(flapping_window.num_milliseconds() as f64 / 1000.0)
    .fetch_one(conn)
    .await?;
    if deliveries.0.len() != items.len() {
        return Err(sqlx::Error::Protocol("the delivery lookup lost items".into()));
    }
    Ok(Found {
        deliveries: deliveries.0,
        key_holders: key_holders.0,
        earlier: earlier.0,
        group_incidents: group_incidents.0,
        candidates: candidates.0,
        cursors: cursors.0,
        silences: silences.0,
        rules: rules.0,
        flaps: flaps.0,
    })
}

/// What `write_batch` writes besides the deliveries: the events, the users' cursors moved on (as
/// the batch read them), the incidents' read rows, the inbox entries and the grouping rules'
/// groups the batch changed.
pub(super) struct Writes<'w> {
    pub(super) events: &'w [EventRow<'w>],
    pub(super) cursors: &'w [(String, i64)],
    pub(super) rows: &'w RowWrites<'w>,
    pub(super) inbox: &'w InboxWrites,
    pub(super) groups: &'w [(&'w GroupKey, Option<Uuid>, String)],
}

/// One event as `write_batch` appends it.
pub(super) struct EventRow<'a> {
    aggregate_type: &'static str,
    aggregate_id: &'a str,
    sequence: i64,
    event_type: String,
    event_version: String,
    payload: String,
    metadata: String,
}

impl<'a> EventRow<'a> {
    /// The incidents' events, then the received alerts'.
    pub(super) fn all(
        streams: &'a [(String, Vec<EventEnvelope<Incident>>)],
        received: &'a [EventEnvelope<ReceivedAlert>],
    ) -> Result<Vec<Self>, Abort> {
        streams
            .iter()
            .flat_map(|(aggregate_id, events)| events.iter().map(move |event| Self::of(aggregate_id, event)))
            .chain(received.iter().map(|event| Self::of(&event.aggregate_id, event)))
            .collect::<Result<_, serde_json::Error>>()
            .map_err(|error| Abort::Failed(PlacementError::Serialization(error.to_string())))
    }

    fn of<A: Aggregate>(aggregate_id: &'a str, event: &EventEnvelope<A>) -> Result<Self, serde_json::Error> {
        Ok(Self {
            aggregate_type: A::TYPE,
            aggregate_id,
            sequence: event.sequence as i64,
            event_type: event.payload.event_type(),
            event_version: event.payload.event_version(),
            // Straight to text: postgres-es goes through a `serde_json::Value` first, which
            // stores the same JSON after an allocation per field.
            payload: serde_json::to_string(&event.payload)?,
            metadata: serde_json::to_string(&event.metadata)?,
        })
    }
}

/// Writes a batch in one statement, which commits on its own when no transaction is open: moves
/// its users' cursors on (each must be where the batch's read found it), records the new
/// deliveries, each with where it went, appends the events as postgres-es would (same columns,
/// same JSON), and writes `rows`, the incidents' read rows. The events are marked `projected`:
/// their rows are written here, or (the careful path) by this transaction before it commits.
/// Another writer's batch of these users placed meanwhile, a sequence taken, a read row moved or
/// (though the cursors should rule it out) a delivery recorded meanwhile is a conflict, and the
/// statement writes nothing.
pub(super) async fn write_batch(
    conn: &mut PgConnection,
    items: &[Item<'_>],
    plan: &Plan,
    writes: &Writes<'_>,
) -> Result<(), Abort> {
    let Writes {
        events,
        cursors,
        rows,
        inbox,
        groups,
    } = writes;
    let placements = &plan.placements;
    // Recoveries adopted by the incident that now holds their alert, and held alerts released
    // into the incident their group opened: each delivery's row takes its incident.
    let adoptions: Vec<(i64, Uuid)> = plan.adoptions.iter().chain(&plan.released).copied().collect();
    const GROUPS: usize = 33 + RowWrites::PARAMETERS + InboxWrites::PARAMETERS;
    static STATEMENT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH bumped AS (
                 INSERT INTO ingestion_cursors (user_id, placed)
                 SELECT user_id, seen + 1 FROM unnest($28::text[], $29::bigint[]) AS c(user_id, seen)
                 ON CONFLICT (user_id) DO UPDATE SET placed = EXCLUDED.placed
                     WHERE ingestion_cursors.placed = EXCLUDED.placed - 1
                 RETURNING 1
             ), recorded AS (
                 INSERT INTO source_alerts (id, user_id, source_type, alert_key, group_key, alert_state, resolved, kind,
                     alert_uid, alert_title, rule_name, rule_url, dashboard_url, panel_url, alert_service,
                     alert_environment, alert_severity, fired_at, payload, incident_id, correlated)
                 SELECT id, user_id, source_type, alert_key, group_key, alert_state, resolved, kind, alert_key,
                     alert_title, rule_name, rule_url, dashboard_url, panel_url, alert_service, alert_environment,
                     alert_severity, fired_at, payload::json, incident_id, correlated
                 FROM unnest($8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[],
                     $14::bool[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[],
                     $21::text[], $22::text[], $23::text[], $24::timestamptz[], $25::text[], $26::uuid[], $27::bool[])
                     AS a(id, user_id, source_type, alert_key, group_key, alert_state, resolved, kind, alert_title,
                          rule_name, rule_url, dashboard_url, panel_url, alert_service, alert_environment,
                          alert_severity, fired_at, payload, incident_id, correlated)
             ), appended AS (
                 INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload,
                     metadata, projected)
                 SELECT aggregate_type, aggregate_id, sequence, event_type, event_version, payload::json,
                     metadata::json, true
                 FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
                     AS e(aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
             ), adopted AS (
                 UPDATE source_alerts s SET incident_id = a.incident_id
                 FROM unnest($31::bigint[], $32::uuid[]) AS a(id, incident_id)
                 WHERE s.id = a.id AND s.incident_id IS NULL
                 RETURNING 1
             ), grouped AS (
                 INSERT INTO rule_groups (user_id, rule_id, group_value, incident_id, held, updated_at)
                 SELECT user_id, rule_id, group_value, incident_id, held::jsonb, now()
                 FROM unnest(${g}::text[], ${g1}::uuid[], ${g2}::text[], ${g3}::uuid[], ${g4}::text[])
                     AS g(user_id, rule_id, group_value, incident_id, held)
                 ON CONFLICT (user_id, rule_id, group_value) DO UPDATE
                     SET incident_id = EXCLUDED.incident_id, held = EXCLUDED.held, updated_at = EXCLUDED.updated_at
             ), {rows}, {inbox}
             SELECT CASE
                 WHEN (SELECT count(*) FROM bumped) <> cardinality($28::text[])
                     THEN placement_conflict('alerts of these users were placed since the batch read them')
                 WHEN (SELECT count(*) FROM adopted) <> cardinality($31::bigint[])
                     THEN placement_conflict('a recovery was placed since the batch read it')
                 WHEN (SELECT count(*) FROM joined) <> $30
                     THEN placement_conflict('an incident''s read row was written since the batch read it')
             END",
            rows = RowWrites::ctes(33),
            inbox = InboxWrites::cte(33 + RowWrites::PARAMETERS),
            g = GROUPS,
            g1 = GROUPS + 1,
            g2 = GROUPS + 2,
            g3 = GROUPS + 3,
            g4 = GROUPS + 4,
        )
    });
    if events.is_empty() && placements.is_empty() && adoptions.is_empty() {
        return Ok(());
    }
    let alerts: Vec<&Item> = placements.iter().map(|&(index, ..)| &items[index]).collect();
    let text = |f: fn(&NormalizedAlert) -> &str| -> Vec<&str> { alerts.iter().map(|item| f(item.alert)).collect() };
    let optional = |f: fn(&NormalizedAlert) -> Option<&str>| -> Vec<Option<&str>> {
        alerts.iter().map(|item| f(item.alert)).collect()
    };
    let query = sqlx::query(&STATEMENT)
        .bind(events.iter().map(|e| e.aggregate_type).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.aggregate_id).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.sequence).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.event_version.as_str()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.payload.as_str()).collect::<Vec<_>>())
        .bind(events.iter().map(|e| e.metadata.as_str()).collect::<Vec<_>>())
        .bind(placements.iter().map(|&(_, alert_id, _)| alert_id).collect::<Vec<_>>())
        .bind(alerts.iter().map(|item| item.user_id).collect::<Vec<_>>())
        .bind(text(|a| a.source.as_str()))
        .bind(text(|a| a.key.as_str()))
        .bind(text(|a| a.group_key.as_str()))
        .bind(text(|a| a.state.as_str()))
        .bind(alerts.iter().map(|item| item.alert.resolved).collect::<Vec<_>>())
        .bind(text(|a| a.kind.as_str()))
        .bind(text(|a| a.title.as_str()))
        .bind(optional(|a| a.rule_name.as_deref()))
        .bind(optional(|a| a.source_url.as_deref()))
        .bind(optional(|a| a.dashboard_url.as_deref()))
        .bind(optional(|a| a.panel_url.as_deref()))
        .bind(optional(|a| a.service.as_deref()))
        .bind(optional(|a| a.environment.as_deref()))
        .bind(
            alerts
                .iter()
                .map(|item| {
                    item.alert
                        .severity
                        .as_deref()
                        .map(|s| s.chars().take(20).collect::<String>())
                })
                .collect::<Vec<_>>(),
        )
        .bind(alerts.iter().map(|item| item.alert.fired_at).collect::<Vec<_>>())
        .bind(alerts.iter().map(|item| &*item.prepared.raw_json).collect::<Vec<_>>())
        .bind(
            placements
                .iter()
                .map(|&(.., placed)| placed.map(|(id, _)| id))
                .collect::<Vec<_>>(),
        )
        .bind(
            placements
                .iter()
                .map(|&(.., placed)| placed.is_some_and(|(_, correlated)| correlated))
                .collect::<Vec<_>>(),
        )
        .bind(cursors.iter().map(|(user_id, _)| user_id.as_str()).collect::<Vec<_>>())
        .bind(cursors.iter().map(|&(_, placed)| placed).collect::<Vec<_>>())
        .bind(rows.updates() as i64)
        .bind(adoptions.iter().map(|&(id, _)| id).collect::<Vec<_>>())
        .bind(
            adoptions
                .iter()
                .map(|&(_, incident_id)| incident_id)
                .collect::<Vec<_>>(),
        );
    let query = inbox
        .bind(rows.bind(query))
        .bind(groups.iter().map(|(key, ..)| key.0.as_str()).collect::<Vec<_>>())
        .bind(groups.iter().map(|(key, ..)| key.1).collect::<Vec<_>>())
        .bind(groups.iter().map(|(key, ..)| key.2.as_str()).collect::<Vec<_>>())
        .bind(
            groups
                .iter()
                .map(|&(_, incident_id, _)| incident_id)
                .collect::<Vec<_>>(),
        )
        .bind(groups.iter().map(|(.., held)| held.as_str()).collect::<Vec<_>>());
    match query.execute(conn).await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(error))
            if error.is_unique_violation() || error.code().as_deref() == Some(SERIALIZATION_FAILURE) =>
        {
            Err(Abort::Conflict)
        }
        Err(error) => Err(error.into()),
    }
}
