//! Title generation against a baseline of the least any title function must do: copying the
//! first user message's text.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use vigil_aggregates::chat_session::{generate_title, Message, Sender};

fn conversation(first_user_text: &str) -> Vec<Message> {
    let mut messages = vec![Message::assistant("Hello! What can I look into for you?")];
    messages.push(Message::user(first_user_text));
    messages.extend((0..50).map(|n| Message::assistant(format!("step {n} of the investigation"))));
    messages
}

fn bench(c: &mut Criterion) {
    let short = conversation("Why is checkout slow?");
    let long = conversation(
        "Our checkout-api p99 latency doubled right after the 14:00 deploy of inventory-service; \
         can you compare the two releases, check the payments-api upstream and tell me what changed?",
    );
    let mut group = c.benchmark_group("title");
    for (name, messages) in [("short", &short), ("long", &long)] {
        group.bench_function(format!("baseline_copy_{name}"), |b| {
            b.iter(|| {
                black_box(messages)
                    .iter()
                    .find(|m| m.sender == Sender::User)
                    .map(|m| m.text.clone())
            })
        });
        group.bench_function(format!("generate_title_{name}"), |b| {
            b.iter(|| generate_title(black_box(messages)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
