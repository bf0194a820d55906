//! Each source's parser on its firing fixture, beside a baseline measured in the same run:
//! decoding the same JSON text into a `serde_json::Value` (what every request pays before any
//! parser runs). Ratios read as "normalizing costs N × the JSON decode".

use chrono::Utc;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::Value;
use vigil::ingest::parsers::{parse, Source};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("parsers");
    for source in Source::ALL {
        let path = format!(
            "{}/tests/fixtures/alerts/{}/firing.json",
            env!("CARGO_MANIFEST_DIR"),
            source.as_str()
        );
        let text = std::fs::read_to_string(path).expect("fixture");
        let payload: Value = serde_json::from_str(&text).expect("fixture is JSON");
        group.bench_function(format!("{}/baseline_json_decode", source.as_str()), |b| {
            b.iter(|| serde_json::from_str::<Value>(black_box(&text)).unwrap())
        });
        group.bench_function(format!("{}/parse", source.as_str()), |b| {
            b.iter(|| parse(source, black_box(&payload), Utc::now()).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
