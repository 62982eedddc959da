//! Engine throughput: simulated SIP messages per wall-clock second for a 60 s run at
//! offered load 4, with win-cont and with no control. Run:
//! `cargo bench -p sluice-sim --bench engine`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_control::{Algorithm, ControlConfig};
use sluice_sim::{run, Scenario};

fn scenario(algorithm: Algorithm) -> Scenario {
    let mut s = Scenario {
        duration_s: 60.0,
        warmup_s: 10.0,
        offered_load: 4.0,
        ..Scenario::default()
    };
    s.re.control = ControlConfig::for_algorithm(algorithm);
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    for (name, algorithm) in [("win-cont", Algorithm::WinCont), ("none", Algorithm::None)] {
        let s = scenario(algorithm);
        let messages = run(&s).messages_simulated;
        g.throughput(Throughput::Elements(messages));
        g.bench_function(format!("load4_60s_{name}"), |b| {
            b.iter(|| std::hint::black_box(run(&s)));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
