//! Correlation scoring and title embedding, each beside a baseline measured in the same run, so
//! results read as ratios:
//! - scoring one alert against 50 open incidents vs computing only the time sub-score for them;
//! - embedding a typical title vs lowercasing it and splitting it into words;
//! - extracting the evidence of a typical alert (labels, a log line) vs lowercasing and splitting
//!   the same text.

use chrono::{DateTime, Duration, TimeZone, Utc};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vigil_aggregates::correlation::{
    best_match, evidence::Evidence, score, time_window_score, CandidateIncident, CorrelationConfig, Embedder,
    EventKind, HashedNgramEmbedder, NewAlert,
};

const SERVICES: [&str; 10] = [
    "checkout-api",
    "payments-api",
    "payments-db-01",
    "cart-service",
    "auth-service",
    "inventory-service",
    "orders-api",
    "search-api",
    "notifications-worker",
    "gateway",
];

const TITLES: [&str; 10] = [
    "CheckoutApiHighLatency",
    "payments-api: elevated HTTP 5xx rate on POST /v1/charges (7.9%)",
    "Disk /var/lib/postgresql space running out on payments-db-01",
    "[Triggered on {env:prod}] cart-service error rate above 5%",
    "auth-service - HTTP 5xx error spike",
    "inventory-service deploy to production failed (deploy-production #1842)",
    "orders-api-deploy-production FAILED",
    "Response time degradation",
    "notifications queue backlog high",
    "gateway upstream connect timeouts",
];

const TYPICAL_TITLE: &str = "checkout-api p99 latency above 2s on POST /v1/checkout (CheckoutApiHighLatency)";

const TYPICAL_LABELS: [(&str, &str); 6] = [
    ("cluster", "prod-us-east-2"),
    ("namespace", "booking"),
    ("pod", "checkout-api-6b8d9f7c54-w4tzq"),
    ("instance", "10.61.4.23:8080"),
    ("service", "checkout-api"),
    ("team", "payments"),
];

const TYPICAL_LOG_LINE: &str =
    "2026-12-02T09:02:51.677Z ERROR [checkout-api] PriceItinerary failed itinerary=ITN-8841207: rpc \
     error: code = Unavailable desc = dial tcp 10.61.9.14:9090: connect: connection refused \
     peer=fare-quote.pricing.svc.cluster.local:9090 peer_version=5.8.0 trace_id=ff78fd1d7b8777d49cc1de8c70f7ea56";

/// The sorted evidence keys of an incident of `service` calling `dependency`.
fn evidence_of(service: &str, dependency: &str, i: usize) -> Vec<String> {
    let text = format!("{service} calls to {dependency} failed: dial tcp 10.0.{i}.7:5432 timeout");
    Evidence::extract([("service", service)], [text.as_str()]).sorted_keys()
}

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 20, 14, 0, 0).unwrap()
}

/// 50 open incidents with 1 to 5 alerts each, spread over the ten minutes around the alert.
fn candidates(embedder: &HashedNgramEmbedder) -> Vec<CandidateIncident> {
    (0..50)
        .map(|i| {
            let service = SERVICES[i % SERVICES.len()];
            let title = TITLES[(i * 7) % TITLES.len()];
            let first = base() - Duration::seconds(300) + Duration::seconds(12 * i as i64);
            let alerts = 1 + i % 5;
            CandidateIncident {
                title: title.to_owned(),
                primary_service: Some(service.to_owned()),
                affected_services: (0..alerts)
                    .map(|k| SERVICES[(i + k) % SERVICES.len()].to_owned())
                    .collect(),
                alert_times: (0..alerts).map(|k| first + Duration::seconds(40 * k as i64)).collect(),
                correlated_alert_count: alerts as u32 - 1,
                embedding: embedder.embed(title),
                evidence: evidence_of(service, SERVICES[(i + 3) % SERVICES.len()], i),
            }
        })
        .collect()
}

fn bench_score(c: &mut Criterion) {
    let embedder = HashedNgramEmbedder::default();
    let config = CorrelationConfig::default();
    let candidates = candidates(&embedder);
    let alert = NewAlert {
        title: "CheckoutApiHighErrorRate".to_owned(),
        service: Some("checkout-api".to_owned()),
        fired_at: base(),
        kind: EventKind::Alert,
        embedding: embedder.embed("CheckoutApiHighErrorRate"),
        evidence: evidence_of("checkout-api", "payments-db-01", 7),
        minor: false,
    };
    let mut group = c.benchmark_group("score_50_candidates");
    group.bench_function("baseline_time_only", |b| {
        b.iter(|| {
            black_box(&candidates)
                .iter()
                .map(|candidate| time_window_score(black_box(&alert), candidate, &config))
                .sum::<f64>()
        })
    });
    group.bench_function("score", |b| {
        b.iter(|| {
            black_box(&candidates)
                .iter()
                .map(|candidate| score(black_box(&alert), candidate, &config).total)
                .sum::<f64>()
        })
    });
    group.bench_function("best_match", |b| {
        b.iter(|| best_match(black_box(&alert), black_box(&candidates), &config))
    });
    group.finish();
}

fn bench_embed(c: &mut Criterion) {
    let embedder = HashedNgramEmbedder::default();
    let mut group = c.benchmark_group("embed_title");
    group.bench_function("baseline_lowercase_split", |b| {
        b.iter(|| {
            black_box(TYPICAL_TITLE)
                .to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect::<Vec<String>>()
        })
    });
    group.bench_function("embed", |b| b.iter(|| embedder.embed(black_box(TYPICAL_TITLE))));
    group.finish();
}

fn bench_evidence(c: &mut Criterion) {
    let mut group = c.benchmark_group("extract_evidence");
    group.bench_function("baseline_lowercase_split", |b| {
        b.iter(|| {
            TYPICAL_LABELS
                .iter()
                .map(|(_, value)| *value)
                .chain([TYPICAL_TITLE, TYPICAL_LOG_LINE])
                .flat_map(|text| {
                    black_box(text)
                        .to_lowercase()
                        .split(|c: char| !c.is_alphanumeric())
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .filter(|w| !w.is_empty())
                .collect::<Vec<String>>()
        })
    });
    group.bench_function("extract", |b| {
        b.iter(|| Evidence::extract(black_box(TYPICAL_LABELS), [TYPICAL_TITLE, TYPICAL_LOG_LINE]))
    });
    group.finish();
}

criterion_group!(benches, bench_score, bench_embed, bench_evidence);
criterion_main!(benches);
