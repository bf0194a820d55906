//! What the metrics cost one alert (issue #31: at most 3% of ingestion): the request's counter
//! and latency histogram, and its share of a placement batch's (the phase clock, the alerts
//! counted by source and fate, the batch observed). The baseline is one alert's JSON parse,
//! the least any ingestion does with it.

use std::time::Instant;

use axum::http::StatusCode;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vigil::metrics::{AlertTally, Fate, Metrics, PhaseClock, PlacementPhase};
use vigil_aggregates::source::Source;

/// A batch's size under an alert storm (`ingest_placement_batch_alerts`, benches/README.md).
const BATCH_ALERTS: usize = 15;

fn bench(c: &mut Criterion) {
    let metrics = Metrics::new();
    let placement = metrics.placement();
    let payload =
        std::fs::read_to_string("../shared/fixtures/alerts/source_a/firing.json").expect("the source_a sample payload");
    let mut group = c.benchmark_group("metrics");
    group.bench_function("baseline_parse_one_alert", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&payload)).unwrap())
    });
    group.bench_function("request_observed", |b| {
        b.iter(|| {
            metrics.observe(
                "POST",
                black_box("/api/source_a/alerts"),
                StatusCode::ACCEPTED,
                Instant::now(),
            )
        })
    });
    group.bench_function("placement_batch_of_15_observed", |b| {
        b.iter(|| {
            let mut clock = PhaseClock::start();
            let mut tally = AlertTally::default();
            for phase in [PlacementPhase::Lookup, PlacementPhase::Decide, PlacementPhase::Record] {
                clock.lap(phase);
            }
            for _ in 0..BATCH_ALERTS {
                tally.count(black_box(Source::SourceA), Fate::Opened);
            }
            tally.appended(BATCH_ALERTS, 0);
            placement.observe_batch(BATCH_ALERTS, &clock, &tally);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
