//! What one record costs on the data path: a histogram record (bucket from bits, two relaxed fetch_adds),
//! a counter increment, a labelled counter increment. `cargo bench -p pgmux-metrics --bench record`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pgmux_metrics::{CounterFamily, Histogram, Label};

pgmux_metrics::label_enum! {
    enum Reason: "reason" {
        A => "a",
        B => "b",
        C => "c",
    }
}

/// Latencies spread over four decades, so the bucket index is not the same each time.
fn latencies() -> Vec<u64> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..4096)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            10 + (s % 100_000) / (1 + s % 97)
        })
        .collect()
}

fn record(c: &mut Criterion) {
    let values = latencies();
    let h = Histogram::new();
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(values.len() as u64));
    g.bench_function("histogram", |b| {
        b.iter(|| {
            for &v in &values {
                h.record(black_box(v));
            }
        })
    });
    let counter = pgmux_metrics::Counter::new();
    g.bench_function("counter", |b| {
        b.iter(|| {
            for _ in 0..values.len() {
                black_box(&counter).inc();
            }
        })
    });
    let family = CounterFamily::<Reason>::new();
    g.bench_function("counter_family", |b| {
        b.iter(|| {
            for (i, _) in values.iter().enumerate() {
                black_box(&family).inc(Reason::ALL[i % 3]);
            }
        })
    });
    g.finish();
    black_box(h.snapshot().count());
}

criterion_group!(benches, record);
criterion_main!(benches);
