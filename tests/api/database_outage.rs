//! A real database outage: a private PostgreSQL cluster (started by scripts/ensure-postgres.sh,
//! as `make test` starts one) is stopped under the running app and started again. A stopped
//! server refuses connections, which sqlx retries until the pool's acquire timeout (5 s): only
//! the first request should wait that out; the database's circuit answers the next ones at once.

use std::{path::PathBuf, time::Duration};

use serde_json::Value;
use tokio::process::Command;
use uuid::Uuid;

use crate::helpers::{assert_error, eventually, spawn_app_on};

/// A PostgreSQL cluster of the test's own, in a temporary directory; stopped and removed when
/// dropped.
struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
    pg_ctl: PathBuf,
    as_root: bool,
}

impl PrivatePostgres {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("vigil-pg-{}", Uuid::new_v4().simple()));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-postgres.sh");
        let started = Command::new(&script)
            .arg("postgres")
            // Nothing answers on port 1: the script starts a private cluster in VIGIL_PG_DIR.
            .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres")
            .env("VIGIL_PG_DIR", &dir)
            .output()
            .await
            .expect("scripts/ensure-postgres.sh runs");
        assert!(
            started.status.success(),
            "a private cluster starts: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        let port = std::fs::read_to_string(dir.join("vigil_port"))
            .expect("the script records its port")
            .trim()
            .parse()
            .expect("a port number");
        let uid = Command::new("id").arg("-u").output().await.expect("id runs").stdout;
        Self {
            dir,
            port,
            pg_ctl: pg_ctl(),
            as_root: String::from_utf8_lossy(&uid).trim() == "0",
        }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `pg_ctl` on the cluster (as the `postgres` user when root, as the script does).
    fn pg_ctl(&self, args: &[&str]) -> std::process::Command {
        let mut command = if self.as_root {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&self.pg_ctl);
            command
        } else {
            std::process::Command::new(&self.pg_ctl)
        };
        command.arg("-D").arg(&self.dir).args(args);
        command
    }

    /// An immediate shutdown, as a crash or a killed server would end it.
    async fn stop(&self) {
        let status = Command::from(self.pg_ctl(&["stop", "-m", "immediate", "-w"]))
            .output()
            .await
            .expect("pg_ctl runs");
        assert!(status.status.success(), "the cluster stops: {status:?}");
    }

    /// Starts the cluster again on its port.
    async fn restart(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let status =
            Command::from(self.pg_ctl(&["-l", log.to_str().unwrap(), "-w", "-t", "60", "-o", &options, "start"]))
                .output()
                .await
                .expect("pg_ctl runs");
        assert!(status.status.success(), "the cluster starts again: {status:?}");
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest installed PostgreSQL's `pg_ctl`, as the script finds it, else the one on `PATH`.
fn pg_ctl() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let pg_ctl = entry.path().join("bin/pg_ctl");
            pg_ctl.exists().then_some((version, pg_ctl))
        })
        .collect();
    versions.sort();
    versions.pop().map_or_else(|| PathBuf::from("pg_ctl"), |(_, path)| path)
}

/// Answers must come within this while the circuit is open: well under the pool's 5 s wait.
const AT_ONCE: Duration = Duration::from_secs(2);
/// The first request during the outage waits out the pool (5 s), then answers.
const AFTER_THE_POOL_WAIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn once_the_database_is_seen_down_requests_answer_503_at_once_until_it_is_back() {
    let postgres = PrivatePostgres::start().await;
    let app = spawn_app_on(&postgres.url(), true, |_| {}).await;
    let user = app.new_user().await.id;
    let incidents = || {
        app.client
            .get(app.url("/api/incidents"))
            .header("X-User-ID", &user)
            .send()
    };
    assert_eq!(incidents().await.unwrap().status(), 200);

    postgres.stop().await;
    let first = tokio::time::timeout(AFTER_THE_POOL_WAIT, incidents())
        .await
        .expect("the first request answers once the pool gives up")
        .unwrap();
    assert_error(first, 503, "service_unavailable").await;
    eventually("the circuit to open", || async {
        app.state.database_circuit.is_open().then_some(())
    })
    .await;

    for _ in 0..3 {
        let later = tokio::time::timeout(AT_ONCE, incidents())
            .await
            .expect("a request answers at once while the database is down")
            .unwrap();
        assert_eq!(later.headers()["retry-after"], "5");
        assert_error(later, 503, "service_unavailable").await;
    }
    let readiness = tokio::time::timeout(AT_ONCE, app.get("/health/readiness"))
        .await
        .expect("readiness answers at once");
    assert_eq!(readiness.status(), 503);
    let body: Value = readiness.json().await.unwrap();
    assert_eq!(body["checks"]["database"]["status"], "unhealthy", "{body}");
    // An unknown path is still unknown, and the service's own document is still served.
    assert_error(app.get("/api/no-such-thing").await, 404, "not_found").await;
    assert_eq!(app.get("/api/openapi.json").await.status(), 200);
    // Ingestion keeps its own path: refused with a 503 its sender retries, nothing accepted.
    let alert: Value = serde_json::from_str(include_str!("../fixtures/alerts/source_a/firing.json")).expect("fixture");
    let post_alert = || {
        app.client
            .post(app.url("/api/source_a/alerts"))
            .header("X-User-ID", &user)
            .json(&alert)
            .send()
    };
    let refused = tokio::time::timeout(AFTER_THE_POOL_WAIT, post_alert())
        .await
        .expect("ingestion answers")
        .unwrap();
    assert_error(refused, 503, "service_unavailable").await;

    postgres.restart().await;
    eventually("the service to serve again", || async {
        let response = incidents().await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
    assert!(!app.state.database_circuit.is_open(), "the probe closed the circuit");
    let ready = app.get("/health/readiness").await;
    assert_eq!(ready.status(), 200, "ready again");
    let accepted = post_alert().await.unwrap();
    assert_eq!(accepted.status(), 202, "the retried alert is accepted");
    let accepted: Value = accepted.json().await.unwrap();
    let incident = accepted["alerts"][0]["incident_id"]
        .as_str()
        .expect("placed in an incident");
    let stored = app
        .client
        .get(app.url(&format!("/api/incidents/{incident}")))
        .header("X-User-ID", &user)
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 200, "its incident is stored");
}
