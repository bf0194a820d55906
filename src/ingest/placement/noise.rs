//! What placement keeps track of for noise controls (`docs/noise.md`): the groups of grouping
//! rules (the alerts each holds until enough arrive, and the incident it opened), and the alert
//! keys that flap.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{types::Json, PgConnection};
use uuid::Uuid;
use vigil_aggregates::incident::AlertInfo;

/// `(user, rule, group)`: one group of a rule (`rule_groups`).
pub(super) type GroupKey = (String, Uuid, String);

/// An alert a rule's group holds: what its incident's event will record of it, and when it
/// arrived (it counts for the rule's window from then).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct HeldAlert {
    pub(super) alert: AlertInfo,
    pub(super) at: DateTime<Utc>,
}

#[derive(Debug, Default)]
pub(super) struct RuleGroup {
    /// The incident the group opened last, and its read row's version as the batch read it.
    pub(super) incident_id: Option<Uuid>,
    pub(super) version: Option<i64>,
    /// How many more alerts that incident takes (0 once it takes no more, or none is open).
    pub(super) room: i64,
    pub(super) held: Vec<HeldAlert>,
    /// Changed by the batch: written with it.
    pub(super) changed: bool,
}

impl RuleGroup {
    /// The open incident the group's alerts join, if it has room for one more.
    pub(super) fn open_incident(&self) -> Option<Uuid> {
        self.incident_id.filter(|_| self.room > 0)
    }

    /// Holds `alert` (arrived `at`), forgetting those held longer than `window`; returns the
    /// alerts held, oldest first, once there are `threshold` of them (the group then holds none).
    pub(super) fn hold(
        &mut self,
        alert: AlertInfo,
        at: DateTime<Utc>,
        window: Duration,
        threshold: u32,
    ) -> Option<Vec<HeldAlert>> {
        self.changed = true;
        self.held.retain(|held| held.at > at - window);
        self.held.push(HeldAlert { alert, at });
        (self.held.len() >= threshold as usize).then(|| std::mem::take(&mut self.held))
    }

    /// The group opened `incident_id` with `alerts` in it (its opening one and the correlated).
    pub(super) fn opened(&mut self, incident_id: Uuid, alerts: usize, max_correlated: i64) {
        self.incident_id = Some(incident_id);
        self.room = max_correlated - (alerts as i64 - 1);
        self.changed = true;
    }

    /// One more alert joined the group's incident.
    pub(super) fn joined(&mut self) {
        self.room -= 1;
    }
}

/// The groups `keys` name as stored, with the room their incidents have (one round trip, taken
/// only by batches with alerts a rule matches). Read after the batch's lookup, this is still
/// what its write follows on from: the users' cursors guard both.
pub(super) async fn read_groups(
    conn: &mut PgConnection,
    keys: &[GroupKey],
    max_correlated: i32,
) -> sqlx::Result<HashMap<GroupKey, RuleGroup>> {
    type Row = (
        String,
        Uuid,
        String,
        Option<Uuid>,
        Option<i64>,
        Json<Vec<HeldAlert>>,
        i64,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT k.user_id, k.rule_id, k.group_value, g.incident_id,
                (SELECT i.version FROM incidents i WHERE i.id = g.incident_id), g.held,
                COALESCE((SELECT $4 - i.correlated_alert_count FROM incidents i
                          WHERE i.id = g.incident_id AND i.status = 'investigating' AND i.takes_alerts), 0)::bigint
         FROM unnest($1::text[], $2::uuid[], $3::text[]) AS k(user_id, rule_id, group_value)
         CROSS JOIN LATERAL (
             SELECT g.incident_id, g.held FROM rule_groups g
             WHERE g.user_id = k.user_id AND g.rule_id = k.rule_id AND g.group_value = k.group_value
         ) g",
    )
    .bind(keys.iter().map(|k| k.0.as_str()).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.1).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.2.as_str()).collect::<Vec<_>>())
    .bind(max_correlated)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(user_id, rule_id, group, incident_id, version, held, room)| {
            let group_state = RuleGroup {
                incident_id,
                version,
                room: room.max(0),
                held: held.0,
                changed: false,
            };
            ((user_id, rule_id, group), group_state)
        })
        .collect())
}

/// The read-row versions of the groups' incidents (what the fast path checks its rows follow).
pub(super) fn versions_seen(groups: &HashMap<GroupKey, RuleGroup>) -> impl Iterator<Item = (String, i64)> + '_ {
    groups
        .values()
        .filter_map(|group| Some((group.incident_id?.to_string(), group.version?)))
}

/// The groups a batch changed, as `write_batch` binds them (`user, rule, group, incident, held`).
pub(super) fn changed_groups(groups: &HashMap<GroupKey, RuleGroup>) -> Vec<(&GroupKey, Option<Uuid>, String)> {
    groups
        .iter()
        .filter(|(_, group)| group.changed)
        .map(|(key, group)| {
            let held = serde_json::to_string(&group.held).unwrap_or_else(|_| "[]".to_owned());
            (key, group.incident_id, held)
        })
        .collect()
}

/// `(user, source, key)` of an alert.
pub(super) type AlertKey<'a> = (&'a str, &'a str, &'a str);

/// One item's flapping facts, as placement's lookup finds them (`(item index, incident its key
/// flaps in, that incident's read-row version, the key's latest delivery, its recoveries within
/// the window)`).
pub(super) type FlapRow = (usize, Option<Uuid>, Option<i64>, Option<DateTime<Utc>>, i64);

/// Flapping keys through a batch: an alert key whose recoveries within the window reach
/// `cycles` is flapping in the incident its last recovery resolved, and its later firings and
/// recoveries are recorded there until it has been quiet for the window.
pub(super) struct Flaps<'a> {
    /// Keys flapping now, and the incident each is recorded on.
    flapping: HashMap<AlertKey<'a>, Uuid>,
    /// Recoveries of each key within the window (those stored, then the batch's).
    recoveries: HashMap<AlertKey<'a>, u32>,
    cycles: u32,
}

impl<'a> Flaps<'a> {
    pub(super) fn new(
        rows: &[FlapRow],
        key_of: impl Fn(usize) -> AlertKey<'a>,
        cycles: u32,
        window: Duration,
        now: DateTime<Utc>,
    ) -> Self {
        let mut flaps = Self {
            flapping: HashMap::new(),
            recoveries: HashMap::new(),
            cycles,
        };
        for &(index, incident_id, _, last_at, recoveries) in rows {
            let key = key_of(index);
            if let (Some(incident_id), Some(last_at)) = (incident_id, last_at) {
                if last_at > now - window {
                    flaps.flapping.insert(key, incident_id);
                }
            }
            flaps
                .recoveries
                .insert(key, u32::try_from(recoveries).unwrap_or(u32::MAX));
        }
        flaps
    }

    /// The incident `key`'s cycles are recorded on, while it flaps.
    pub(super) fn flapping_in(&self, key: &AlertKey<'a>) -> Option<Uuid> {
        self.flapping.get(key).copied()
    }

    /// Counts a recovery of `key`; the count when it makes the key flapping (it was not).
    pub(super) fn recovered(&mut self, key: AlertKey<'a>) -> Option<u32> {
        let count = self.recoveries.entry(key).or_default();
        *count += 1;
        (*count >= self.cycles && !self.flapping.contains_key(&key)).then_some(*count)
    }

    pub(super) fn flagged(&mut self, key: AlertKey<'a>, incident_id: Uuid) {
        self.flapping.insert(key, incident_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(id: i64) -> AlertInfo {
        AlertInfo {
            source_type: "source_a".into(),
            source_alert_id: id,
            alert_key: format!("k{id}"),
            title: "disk full".into(),
            service: None,
            environment: None,
            severity: None,
            fired_at: DateTime::UNIX_EPOCH,
            source_url: None,
            metadata: serde_json::Value::Null,
            evidence: Default::default(),
        }
    }

    #[test]
    fn a_group_releases_its_alerts_at_the_threshold_within_the_window() {
        let start = DateTime::UNIX_EPOCH;
        let window = Duration::minutes(10);
        let mut group = RuleGroup::default();
        assert!(group.hold(alert(1), start, window, 3).is_none());
        // The first one has stopped counting when the third arrives.
        assert!(group.hold(alert(2), start + Duration::minutes(8), window, 3).is_none());
        assert!(group.hold(alert(3), start + Duration::minutes(11), window, 3).is_none());
        let released = group.hold(alert(4), start + Duration::minutes(12), window, 3).unwrap();
        let ids: Vec<i64> = released.iter().map(|held| held.alert.source_alert_id).collect();
        assert_eq!(ids, [2, 3, 4]);
        assert!(group.held.is_empty());
        group.opened(Uuid::nil(), released.len(), 50);
        assert_eq!(group.room, 48);
        assert_eq!(group.open_incident(), Some(Uuid::nil()));
    }

    #[test]
    fn a_key_flaps_once_its_recoveries_reach_the_cycles() {
        let now = DateTime::UNIX_EPOCH + Duration::days(1);
        let rows = [(0, None, None, Some(now), 2)];
        let mut flaps = Flaps::new(&rows, |_| ("u", "source_a", "k"), 4, Duration::minutes(30), now);
        assert_eq!(flaps.recovered(("u", "source_a", "k")), None);
        assert_eq!(flaps.recovered(("u", "source_a", "k")), Some(4));
        flaps.flagged(("u", "source_a", "k"), Uuid::nil());
        assert_eq!(flaps.recovered(("u", "source_a", "k")), None);
        assert_eq!(flaps.flapping_in(&("u", "source_a", "k")), Some(Uuid::nil()));
    }

    #[test]
    fn a_quiet_key_no_longer_flaps() {
        let now = DateTime::UNIX_EPOCH + Duration::days(1);
        let rows = [(0, Some(Uuid::nil()), Some(3), Some(now - Duration::minutes(31)), 0)];
        let flaps = Flaps::new(&rows, |_| ("u", "source_a", "k"), 4, Duration::minutes(30), now);
        assert_eq!(flaps.flapping_in(&("u", "source_a", "k")), None);
    }
}
