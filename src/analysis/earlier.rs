//! The incident an alert fired in before. A new firing of an alert whose incident is resolved or
//! merged opens a new incident linked to that one (`previous_incident_id`); the analysis of the
//! new incident is told about it, as a fact: that the alert has come back, and how the earlier
//! incident ended.

use chrono::{DateTime, Utc};
use sqlx::{types::Json, PgPool};
use uuid::Uuid;
use vigil_aggregates::incident::{Incident, IncidentEvent};
use vigil_projections::incidents as read;

#[derive(Clone, Debug, PartialEq)]
pub struct EarlierIncident {
    pub id: Uuid,
    pub title: String,
    /// Its status now: `resolved`, `merged`, or still open (`investigating`, `analyzed`).
    pub status: String,
    pub started_at: DateTime<Utc>,
    /// When it was last resolved, if it is resolved.
    pub resolved_at: Option<DateTime<Utc>>,
    pub merged_into: Option<Uuid>,
    pub summary: Option<String>,
}

impl EarlierIncident {
    /// `id`, the user's incident, as it stands now; `None` when it is not the user's (or gone).
    pub async fn read(db: &PgPool, user_id: &str, id: Uuid) -> sqlx::Result<Option<Self>> {
        let Some(row) = read::find_incident(db, user_id, id).await? else {
            return Ok(None);
        };
        let resolved_at = if row.status == "resolved" {
            // The row keeps no resolution time: the newest resolution's event has it.
            let resolution: Option<Json<IncidentEvent>> = sqlx::query_scalar(
                "SELECT payload FROM events
                 WHERE aggregate_type = $1 AND aggregate_id = $2 AND event_type = 'ResolutionRequested'
                 ORDER BY sequence DESC LIMIT 1",
            )
            .bind(<Incident as cqrs_es::Aggregate>::TYPE)
            .bind(id.to_string())
            .fetch_optional(db)
            .await?;
            resolution.map(|event| event.0.at())
        } else {
            None
        };
        Ok(Some(Self {
            id,
            title: row.alert_title.unwrap_or_default(),
            status: row.status,
            started_at: row.started_at,
            resolved_at,
            merged_into: row.merged_into_incident_id,
            summary: row.aurora_summary,
        }))
    }

    /// The fact in words, for the analysis's evidence and summary.
    pub fn sentence(&self) -> String {
        let ended = match (self.status.as_str(), self.resolved_at, self.merged_into) {
            ("resolved", Some(at), _) => format!("resolved at {}", at.format("%Y-%m-%d %H:%M UTC")),
            ("resolved", None, _) => "resolved".to_owned(),
            (_, _, Some(target)) => format!("merged into incident {target}"),
            (status, ..) => format!("still {status}"),
        };
        let summary = self
            .summary
            .as_deref()
            .map(|s| format!(" Its summary: {}", first_sentence(s)))
            .unwrap_or_default();
        format!(
            "This alert fired before, in incident {} (\"{}\", started {}), {ended}: it has come back.{summary}",
            self.id,
            self.title,
            self.started_at.format("%Y-%m-%d %H:%M UTC"),
        )
    }
}

fn first_sentence(text: &str) -> &str {
    text.split_inclusive(". ").next().unwrap_or(text).trim()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn earlier(status: &str) -> EarlierIncident {
        EarlierIncident {
            id: Uuid::from_u128(1),
            title: "checkout-api 5xx".into(),
            status: status.into(),
            started_at: Utc.with_ymd_and_hms(2026, 11, 20, 14, 2, 0).unwrap(),
            resolved_at: None,
            merged_into: None,
            summary: None,
        }
    }

    #[test]
    fn the_sentence_says_how_the_earlier_incident_ended() {
        let mut resolved = earlier("resolved");
        resolved.resolved_at = Some(Utc.with_ymd_and_hms(2026, 11, 20, 15, 30, 0).unwrap());
        resolved.summary = Some("The pool was exhausted. Raised it.".into());
        assert_eq!(
            resolved.sentence(),
            format!(
                "This alert fired before, in incident {} (\"checkout-api 5xx\", started 2026-11-20 14:02 UTC), \
                 resolved at 2026-11-20 15:30 UTC: it has come back. Its summary: The pool was exhausted.",
                Uuid::from_u128(1)
            )
        );
        let mut merged = earlier("merged");
        merged.merged_into = Some(Uuid::from_u128(9));
        assert!(merged
            .sentence()
            .contains(&format!("merged into incident {}:", Uuid::from_u128(9))));
        assert!(earlier("investigating").sentence().contains("still investigating:"));
    }
}
