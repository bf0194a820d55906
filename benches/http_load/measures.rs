//! What `http_load` measures besides its own requests: the pgbench baseline, and placement's
//! own account of its batches.

use std::time::Duration;

pub fn pgbench_inserts_per_second(db_url: &reqwest::Url, clients: usize, duration: Duration) -> Result<f64, String> {
    // The same transport as the service's: without TLS where the service goes without (`vigil::db::pool`).
    let mut db_url = db_url.clone();
    if vigil::db::plain_on_loopback(db_url.as_str(), std::env::var_os("PGSSLMODE").is_some()) {
        db_url.query_pairs_mut().append_pair("sslmode", "disable");
    }
    let dir = std::env::temp_dir().join(format!("vigil-pgbench-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let script = dir.join("insert.sql");
    std::fs::write(
        &script,
        "INSERT INTO pgbench_baseline (payload) VALUES ('{\"status\": \"firing\", \"service\": \"checkout-api\"}');\n",
    )
    .map_err(|e| e.to_string())?;
    let psql = std::process::Command::new("psql")
        .arg(db_url.as_str())
        .args(["-q", "-c", "CREATE TABLE IF NOT EXISTS pgbench_baseline (id bigserial PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if !psql.status.success() {
        return Err(String::from_utf8_lossy(&psql.stderr).into_owned());
    }
    let output = std::process::Command::new("pgbench")
        .args([
            "-n",
            "-j",
            "2",
            "-c",
            &clients.to_string(),
            "-T",
            &duration.as_secs().to_string(),
            "-f",
        ])
        .arg(&script)
        .arg(db_url.as_str())
        .output()
        .map_err(|e| format!("pgbench: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| {
            format!(
                "no tps in pgbench output: {text} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

/// Placement's own account of its batches (`ingest_placement_*` in `/metrics`): totals, so that
/// a scenario's share is the difference of two scrapes.
pub struct PlacementTotals {
    batches: f64,
    alerts: f64,
    /// Per phase, in order: (name, seconds in all).
    phases: Vec<(String, f64)>,
}

impl PlacementTotals {
    pub async fn scrape(client: &reqwest::Client, base: &str) -> Self {
        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |series: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_default()
        };
        Self {
            batches: value("ingest_placement_batch_alerts_count"),
            alerts: value("ingest_placement_batch_alerts_sum"),
            phases: vigil::metrics::PlacementPhase::ALL
                .iter()
                .map(|phase| {
                    let phase = phase.as_str();
                    let series = format!(r#"ingest_placement_phase_seconds_sum{{phase="{phase}"}}"#);
                    (phase.to_owned(), value(&series))
                })
                .collect(),
        }
    }

    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            batches: self.batches - earlier.batches,
            alerts: self.alerts - earlier.alerts,
            phases: self
                .phases
                .iter()
                .zip(&earlier.phases)
                .map(|((phase, now), (_, then))| (phase.clone(), now - then))
                .collect(),
        }
    }

    pub fn report(&self) {
        if self.batches == 0.0 {
            return;
        }
        let per_batch: Vec<String> = self
            .phases
            .iter()
            .map(|(phase, seconds)| format!("{phase} {:.0}", seconds / self.batches * 1e6))
            .collect();
        println!(
            "{:>20}  {:.0} batches, {:.1} alerts each; µs per batch: {}",
            "placement:",
            self.batches,
            self.alerts / self.batches,
            per_batch.join(", ")
        );
    }
}
