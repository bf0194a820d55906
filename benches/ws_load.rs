//! WebSocket load driver: starts `vigil serve` (the release binary) as a child process on a fresh
//! database with a fake OpenAI-compatible model in this process, opens N sockets, and has every
//! socket ask one question whose answer the model streams in pieces.
//!
//!   cargo bench --bench ws_load                      (DATABASE_URL: a PostgreSQL server)
//!   WS_SOCKETS=1000,2000 WS_PIECE_DELAY_MS=20 cargo bench --bench ws_load
//!
//! For each N it reports the sockets held, the server's resident memory (idle, and while every
//! socket streams), and the latency the service adds per chunk. The baseline, measured in the
//! same run with the same concurrency, is the fake model's own stream read directly over HTTP:
//! added latency per chunk = (median time to the service's END − median time to the model's last
//! byte) / chunks per answer.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    str::FromStr,
    time::{Duration, Instant},
};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sqlx::{postgres::PgConnectOptions, Connection, PgConnection};
use tokio_tungstenite::{connect_async, tungstenite::Message};
use vigil_llm::fake::{FakeOpenAi, Reply};

const ANSWER: &str = "The checkout service fails its health checks since the last deploy. \
    The error rate rose within two minutes of the release. \
    Roll the release back, then compare the two builds' connection pool settings. \
    Watch the error rate for ten minutes after the rollback.";

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

struct Server {
    child: Child,
    http: String,
    ws: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(database_url: &str, model_url: &str) -> Server {
    let (http_port, ws_port) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .arg("serve")
        .env("DATABASE_URL", database_url)
        .env("HTTP_PORT", http_port.to_string())
        .env("WS_PORT", ws_port.to_string())
        .env("BIND_ADDRESS", "127.0.0.1")
        .env("LLM_BASE_URL", model_url)
        .env("WS_MESSAGES_PER_MINUTE", "1000")
        .env("RATE_LIMIT_PER_MINUTE", "1000000")
        .env("CHAT_RATE_LIMIT_PER_MINUTE", "1000000")
        .env("BCRYPT_COST", "4")
        .env("RUN_WORKERS", "false")
        .env("RUST_LOG", "warn")
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .spawn()
        .expect("the vigil binary starts");
    Server {
        child,
        http: format!("http://127.0.0.1:{http_port}"),
        ws: format!("ws://127.0.0.1:{ws_port}/"),
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(socket: &mut Socket) -> Option<Value> {
    loop {
        match socket.next().await? {
            Ok(Message::Text(text)) => return serde_json::from_str(&text).ok(),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// Reads the model's stream directly, `concurrency` at once: seconds to the last byte, each.
async fn direct_baseline(model: &FakeOpenAi, concurrency: usize) -> Vec<f64> {
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", model.base_url().trim_end_matches('/'));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let body =
                    json!({ "model": "gpt-4o-mini", "stream": true, "messages": [{ "role": "user", "content": "q" }] });
                let response = client.post(&url).json(&body).send().await.ok()?;
                let mut stream = response.bytes_stream();
                while let Some(chunk) = stream.next().await {
                    chunk.ok()?;
                }
                Some(started.elapsed().as_secs_f64())
            })
        })
        .collect();
    let mut times = Vec::new();
    for task in tasks {
        if let Ok(Some(seconds)) = task.await {
            times.push(seconds);
        }
    }
    times
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let counts: Vec<usize> = std::env::var("WS_SOCKETS")
        .unwrap_or_else(|_| "1000,2000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let piece_delay = Duration::from_millis(env_or("WS_PIECE_DELAY_MS", 20));
    let server_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let admin = PgConnectOptions::from_str(&server_url)
        .expect("DATABASE_URL parses")
        .database("postgres");
    let name = format!("vigil_wsbench_{}", uuid::Uuid::new_v4().simple());
    let mut admin_conn = PgConnection::connect_with(&admin).await.expect("PostgreSQL reachable");
    sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
        .execute(&mut admin_conn)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&server_url).unwrap();
    url.set_path(&format!("/{name}"));

    let model = FakeOpenAi::start().await;
    model.set_default_reply(Reply::text(ANSWER).chunk_delay(piece_delay));
    let server = start_server(url.as_str(), model.base_url());
    let client = reqwest::Client::new();
    let ready = Instant::now();
    while client
        .get(format!("{}/health/liveness", server.http))
        .send()
        .await
        .is_err()
    {
        assert!(ready.elapsed() < Duration::from_secs(60), "the server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let user: Value = client
        .post(format!("{}/api/auth/register", server.http))
        .json(&json!({ "email": "ws-load@example.com", "password": "load test password" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let user_id = user["id"].as_str().unwrap().to_owned();
    let chunks_per_answer = {
        let mut chunker = vigil_llm::SentenceChunker::new();
        chunker.push(ANSWER).len() + chunker.finish().len()
    };
    let pid = server.child.id();
    println!(
        "ws_load: release server (pid {pid}), model pieces every {} ms, {chunks_per_answer} chunks per answer; \
         baseline RSS {} KiB",
        piece_delay.as_millis(),
        rss_kib(pid)
    );

    for count in counts {
        let mut sessions = Vec::with_capacity(count);
        for _ in 0..count {
            let session: Value = client
                .post(format!("{}/chat_api/sessions", server.http))
                .header("X-User-ID", &user_id)
                .json(&json!({ "title": "load" }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let id = session["id"]
                .as_str()
                .unwrap_or_else(|| panic!("session not created: {session}"));
            sessions.push(id.to_owned());
        }
        let rss_before = rss_kib(pid);
        let mut sockets = Vec::with_capacity(count);
        for _ in 0..count {
            let Ok((mut socket, _)) = connect_async(&server.ws).await else {
                continue;
            };
            let init = json!({ "type": "init", "user_id": user_id }).to_string();
            if socket.send(Message::text(init)).await.is_err() {
                continue;
            }
            if next_json(&mut socket)
                .await
                .is_some_and(|m| m["data"]["status"] == "START")
            {
                sockets.push(socket);
            }
        }
        let held = sockets.len();
        let rss_idle = rss_kib(pid);

        let mut baseline = direct_baseline(&model, held).await;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sampler = {
            let peak = peak.clone();
            tokio::spawn(async move {
                loop {
                    peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let tasks: Vec<_> = sockets
            .into_iter()
            .zip(sessions.iter().cloned())
            .map(|(mut socket, session_id)| {
                let user_id = user_id.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let query =
                        json!({ "query": "Why is checkout down?", "user_id": user_id, "session_id": session_id });
                    socket.send(Message::text(query.to_string())).await.ok()?;
                    let mut chunks = 0usize;
                    while let Some(message) = next_json(&mut socket).await {
                        if message["type"] == "message" && message["data"]["is_chunk"] == true {
                            chunks += 1;
                        }
                        if message["type"] == "status" && message["data"]["status"] == "END" {
                            let complete = message["data"]["isComplete"] == true;
                            return complete.then(|| (started.elapsed().as_secs_f64(), chunks));
                        }
                    }
                    None
                })
            })
            .collect();
        let mut times = Vec::new();
        let mut failed = 0;
        for task in tasks {
            match task.await {
                Ok(Some((seconds, _chunks))) => times.push(seconds),
                _ => failed += 1,
            }
        }
        sampler.abort();
        let (service, direct) = (median(&mut times), median(&mut baseline));
        let added_ms = (service - direct) * 1000.0 / chunks_per_answer as f64;
        println!(
            "{count:>5} sockets: held {held}, answered {} ({failed} failed); RSS idle {} KiB (+{:.1} KiB/socket), \
             streaming peak {} KiB; median answer {:.0} ms vs model alone {:.0} ms at the same concurrency \
             → added {:.1} ms per chunk (ratio {:.2}×)",
            times.len(),
            rss_idle,
            (rss_idle.saturating_sub(rss_before)) as f64 / held.max(1) as f64,
            peak.load(std::sync::atomic::Ordering::Relaxed),
            service * 1000.0,
            direct * 1000.0,
            added_ms,
            service / direct,
        );
    }
    drop(server);
    let _ = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
        .execute(&mut admin_conn)
        .await;
}
