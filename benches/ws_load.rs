//! WebSocket load driver: starts `vigil serve` (the release binary) as a child process on a fresh
//! database with a fake OpenAI-compatible model in this process, opens N sockets, and has every
//! socket ask one question whose answer the model streams in pieces.
//!
//!   cargo bench --bench ws_load                      (DATABASE_URL: a PostgreSQL server)
//!   WS_SOCKETS=1,10,50,200 WS_CHUNKS=7 WS_PIECE_DELAY_MS=20 cargo bench --bench ws_load
//!   VIGIL_BIN=/path/to/other/vigil cargo bench --bench ws_load   (time another build's server)
//!
//! The model answers with WS_CHUNKS sentences (default 7), one content event each, every event
//! WS_PIECE_DELAY_MS (default 20) after the last: each sentence is one chunk on the socket.
//!
//! For each N it reports the sockets held, the server's resident memory (idle, and while every
//! socket streams), and the latency the service adds per chunk. The baseline, measured in the
//! same run with the same concurrency, is the fake model's own stream read directly over HTTP
//! from the URL the service itself calls: added latency per chunk = (median time to the service's
//! END − median time to the model's last byte) / chunks per answer. How far the socket is behind
//! the model is also shown at the first chunk (the model's first content event: saving the
//! question, opening the model call), the last chunk (the model's last content event: what
//! streaming adds) and END (the model's last byte: saving the answer, the usage). Any HTTP answer
//! that is not 2xx stops the run: an error answered at once would time as a fast model.

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

/// Sentences of the answer, cycled through for as many chunks as asked; each is under the
/// 100-character chunk limit, so each is one chunk.
const SENTENCES: [&str; 4] = [
    "The checkout service fails its health checks since the last deploy. ",
    "The error rate rose within two minutes of the release. ",
    "Roll the release back, then compare the two builds' pool settings. ",
    "Watch the error rate for ten minutes after the rollback. ",
];

/// The answer's pieces: `chunks` sentences.
fn answer_pieces(chunks: usize) -> Vec<String> {
    SENTENCES.iter().cycle().take(chunks).map(|s| (*s).to_owned()).collect()
}

/// The body of a 2xx answer; anything else stops the run, saying what was asked and answered.
async fn checked(what: &str, response: reqwest::Response) -> reqwest::Response {
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        panic!("{what}: HTTP {status}, not 2xx: {body}");
    }
    response
}

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

fn start_server(binary: &str, database_url: &str, model_url: &str) -> Server {
    let (http_port, ws_port) = (free_port(), free_port());
    let child = Command::new(binary)
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

/// Whether this much of an SSE body holds a content event with text (the role event's is empty).
fn has_content(body: &str) -> bool {
    body.match_indices(r#""content":""#)
        .any(|(at, pattern)| body[at + pattern.len()..].chars().next().is_some_and(|c| c != '"'))
}

/// One answer's times, in seconds from its request: its first and last text (the socket's first
/// and last chunk; the model's first and last content event), and its end (END; the last byte).
#[derive(Clone, Copy)]
struct Timing {
    first: f64,
    last: f64,
    end: f64,
}

/// Reads the model's stream directly from `url`, `concurrency` at once. Panics on a non-2xx
/// answer or a broken stream.
async fn direct_baseline(url: &str, concurrency: usize) -> Vec<Timing> {
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let started = Instant::now();
                let body = json!({ "model": "gpt-4o-mini", "stream": true, "stream_options": { "include_usage": true },
                    "messages": [{ "role": "user", "content": "q" }] });
                let response = client
                    .post(&url)
                    .json(&body)
                    .send()
                    .await
                    .expect("the fake model answers");
                let mut stream = checked("model baseline", response).await.bytes_stream();
                let (mut first, mut last) = (None, 0.0);
                // The fake writes each event at once, so an event is never split between reads.
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.expect("the fake model's stream reads to its end");
                    if has_content(&String::from_utf8_lossy(&chunk)) {
                        last = started.elapsed().as_secs_f64();
                        first.get_or_insert(last);
                    }
                }
                let end = started.elapsed().as_secs_f64();
                let first = first.expect("the model streamed some text");
                Timing { first, last, end }
            })
        })
        .collect();
    let mut times = Vec::new();
    for task in tasks {
        times.push(task.await.expect("a baseline stream"));
    }
    times
}

/// The medians of each of the timings' fields.
fn medians(timings: &[Timing]) -> Timing {
    let of = |field: fn(&Timing) -> f64| median(&mut timings.iter().map(field).collect::<Vec<_>>());
    Timing {
        first: of(|t| t.first),
        last: of(|t| t.last),
        end: of(|t| t.end),
    }
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
    let pieces = answer_pieces(env_or("WS_CHUNKS", 7));
    let binary = std::env::var("VIGIL_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vigil").to_owned());
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
    model.set_default_reply(Reply::text_in_pieces(pieces.clone()).chunk_delay(piece_delay));
    // What the service calls with LLM_BASE_URL set to the fake's base URL (vigil_llm adds `/v1`).
    let model_url = format!("{}/v1/chat/completions", model.base_url().trim_end_matches('/'));
    let server = start_server(&binary, url.as_str(), model.base_url());
    let client = reqwest::Client::new();
    let ready = Instant::now();
    loop {
        match client.get(format!("{}/health/liveness", server.http)).send().await {
            Ok(response) => {
                checked("liveness", response).await;
                break;
            }
            Err(_) => {
                assert!(ready.elapsed() < Duration::from_secs(60), "the server did not start");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let register = client
        .post(format!("{}/api/auth/register", server.http))
        .json(&json!({ "email": "ws-load@example.com", "password": "load test password" }))
        .send()
        .await
        .unwrap();
    let user: Value = checked("register", register).await.json().await.unwrap();
    let user_id = user["id"].as_str().unwrap().to_owned();
    let chunks_per_answer = {
        let mut chunker = vigil_llm::SentenceChunker::new();
        let pushed: usize = pieces.iter().map(|piece| chunker.push(piece).len()).sum();
        pushed + chunker.finish().len()
    };
    let pid = server.child.id();
    println!(
        "ws_load: server {binary} (pid {pid}); the model streams {} pieces {} ms apart, {chunks_per_answer} chunks \
         per answer; baseline RSS {} KiB",
        pieces.len(),
        piece_delay.as_millis(),
        rss_kib(pid)
    );

    for count in counts {
        let mut sessions = Vec::with_capacity(count);
        for _ in 0..count {
            let response = client
                .post(format!("{}/chat_api/sessions", server.http))
                .header("X-User-ID", &user_id)
                .json(&json!({ "title": "load" }))
                .send()
                .await
                .unwrap();
            let session: Value = checked("create session", response).await.json().await.unwrap();
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

        let baseline = direct_baseline(&model_url, held).await;
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
                    let (mut chunks, mut first, mut last) = (0usize, None, 0.0);
                    while let Some(message) = next_json(&mut socket).await {
                        if message["type"] == "message" && message["data"]["is_chunk"] == true {
                            chunks += 1;
                            last = started.elapsed().as_secs_f64();
                            first.get_or_insert(last);
                        }
                        if message["type"] == "status" && message["data"]["status"] == "END" {
                            let complete = message["data"]["isComplete"] == true && chunks == chunks_per_answer;
                            let end = started.elapsed().as_secs_f64();
                            return first.filter(|_| complete).map(|first| Timing { first, last, end });
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
                Ok(Some(timing)) => times.push(timing),
                _ => failed += 1,
            }
        }
        sampler.abort();
        let (service, direct) = (medians(&times), medians(&baseline));
        let added_ms = (service.end - direct.end) * 1000.0 / chunks_per_answer as f64;
        println!(
            "{count:>5} sockets: held {held}, answered {} ({failed} failed); RSS idle {} KiB (+{:.1} KiB/socket), \
             streaming peak {} KiB; median answer {:.0} ms vs model alone {:.0} ms at the same concurrency \
             → added {:.1} ms per chunk (ratio {:.2}×); behind the model: first chunk +{:.1} ms, last chunk \
             +{:.1} ms, END +{:.1} ms (medians)",
            times.len(),
            rss_idle,
            (rss_idle.saturating_sub(rss_before)) as f64 / held.max(1) as f64,
            peak.load(std::sync::atomic::Ordering::Relaxed),
            service.end * 1000.0,
            direct.end * 1000.0,
            added_ms,
            service.end / direct.end,
            (service.first - direct.first) * 1000.0,
            (service.last - direct.last) * 1000.0,
            (service.end - direct.end) * 1000.0,
        );
    }
    drop(server);
    let _ = sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
        .execute(&mut admin_conn)
        .await;
}
