//! The noise-control scenarios of `http_load`: each tenant's silences or grouping rule, and the
//! check that a storm during a maintenance window opened nothing and left an inbox entry per alert.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

/// The silences or grouping rule each tenant of a scenario has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Noise {
    None,
    /// 100 active silences, each of another service and alert name: matching is all they cost.
    NoneMatching,
    /// 99 of those and one matching every service of the storm: a maintenance window.
    OneMatching,
    /// A grouping rule over every service of the storm: each service's alerts open an incident
    /// once 5 have arrived within 10 minutes, and the later ones join it.
    Grouped,
}

impl Noise {
    pub async fn create(self, client: &reqwest::Client, base: &str, user_id: &str) {
        let count = match self {
            Self::None => return,
            Self::Grouped => {
                let rule = json!({
                    "name": "open after 5 per service",
                    "matchers": [{ "name": "service", "value": "service-.*", "isRegex": true }],
                    "threshold": 5,
                    "windowSeconds": 600,
                    "groupBy": ["service"],
                });
                let created = client
                    .post(format!("{base}/api/grouping-rules"))
                    .header("X-User-ID", user_id)
                    .json(&rule)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(created.status(), 201, "grouping rule created");
                return;
            }
            Self::NoneMatching => 100,
            Self::OneMatching => 99,
        };
        let ends_at = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
        let mut bodies: Vec<Value> = (0..count)
            .map(|k| {
                json!({ "matchers": [
                    { "name": "service", "value": format!("batch-{k}") },
                    { "name": "alertname", "value": format!("Nightly.*{k}"), "isRegex": true },
                ], "endsAt": ends_at })
            })
            .collect();
        if self == Self::OneMatching {
            bodies.push(
                json!({ "matchers": [{ "name": "service", "value": "service-.*", "isRegex": true }],
                                "endsAt": ends_at, "comment": "maintenance" }),
            );
        }
        for body in bodies {
            let created = client
                .post(format!("{base}/api/silences"))
                .header("X-User-ID", user_id)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(created.status(), 201, "silence created");
        }
    }
}

/// After a maintenance-window storm: its tenants have no incident, so no analysis, and the inbox
/// lists every alert accepted, silenced.
pub async fn check_silenced(db_url: &reqwest::Url, users: &[String], accepted: u64) {
    let mut db = PgConnection::connect(db_url.as_str())
        .await
        .expect("bench database reachable");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (incidents, listed, silenced): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM incidents WHERE user_id = ANY($1)),
                    (SELECT count(*) FROM alert_inbox WHERE user_id = ANY($1)),
                    (SELECT count(*) FROM alert_inbox WHERE user_id = ANY($1) AND fate = 'silenced')",
        )
        .bind(users)
        .fetch_one(&mut db)
        .await
        .unwrap();
        if listed as u64 >= accepted || Instant::now() > deadline {
            println!(
                "{:>20}  {accepted} alerts accepted: {incidents} incidents (so as many analyses), \
                 {listed} in the inbox, {silenced} of them silenced",
                "silenced check:"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// After a storm under grouping rules: how many incidents its tenants have, and how many of their
/// alerts each fate took (`held` ones still waiting for their group's fifth).
pub async fn check_grouped(db_url: &reqwest::Url, users: &[String]) {
    let mut db = PgConnection::connect(db_url.as_str())
        .await
        .expect("bench database reachable");
    let (incidents, fates): (i64, String) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM incidents WHERE user_id = ANY($1)),
                (SELECT COALESCE(string_agg(fate || ' ' || n, ', ' ORDER BY fate), '') FROM (
                     SELECT fate, count(*) AS n FROM alert_inbox WHERE user_id = ANY($1) GROUP BY fate) f)",
    )
    .bind(users)
    .fetch_one(&mut db)
    .await
    .unwrap();
    println!("{:>20}  {incidents} incidents; inbox: {fates}", "grouped check:");
}
