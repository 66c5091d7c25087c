use serde_json::json;
use std::time::Instant;
use tidemark_operators::{build, BuildEnv, Built, ComponentKind};
use tidemark_runtime::{Output, PollContext, Record, SubtaskContext};

fn main() {
    let env = BuildEnv::default();
    let ctx = SubtaskContext {
        job_name: "x".into(),
        vertex_id: "v".into(),
        subtask: 0,
        parallelism: 1,
        seed: 1,
    };
    let Built::Source(gen) = build(
        ComponentKind::Source,
        "generator",
        json!({"keys": 1024}),
        &env,
    )
    .unwrap() else {
        panic!()
    };
    let mut s = gen(&ctx).unwrap();
    let mut out = Output::with_capacity(1024);
    let n = 200_000u64;
    let t = Instant::now();
    let mut total = 0u64;
    for i in 0..n {
        out.clear();
        s.poll(
            &PollContext {
                now_nanos: i as i64,
                max_records: 1024,
            },
            &mut out,
        )
        .unwrap();
        total += out.len() as u64;
    }
    let e = t.elapsed().as_secs_f64();
    println!("generator: {:.0} M rec/s", total as f64 / e / 1e6);
    let batch: Vec<Record> = out.records().to_vec();
    for (name, cfg, kind) in [
        ("map", json!({"scale": 2, "offset": 1}), "map"),
        ("reduce", json!({"aggregate": "sum"}), "reduce"),
        ("filter", json!({"keep": 0.5}), "filter"),
    ] {
        let Built::Operator(f) = build(ComponentKind::Operator, kind, cfg, &env).unwrap() else {
            panic!()
        };
        let mut op = f(&ctx).unwrap();
        let mut o = Output::with_capacity(1024);
        let t = Instant::now();
        for _ in 0..n {
            o.clear();
            op.process_batch(&batch, &mut o).unwrap();
        }
        let e = t.elapsed().as_secs_f64();
        println!("{name}: {:.0} M rec/s", (n * 1024) as f64 / e / 1e6);
    }
    let Built::Source(gen) = build(
        ComponentKind::Source,
        "generator",
        json!({"keys": 1024, "key_distribution": "zipf"}),
        &env,
    )
    .unwrap() else {
        panic!()
    };
    let mut s = gen(&ctx).unwrap();
    let t = Instant::now();
    let mut total = 0u64;
    for i in 0..20_000 {
        out.clear();
        s.poll(
            &PollContext {
                now_nanos: i as i64,
                max_records: 1024,
            },
            &mut out,
        )
        .unwrap();
        total += out.len() as u64;
    }
    println!(
        "zipf generator: {:.0} M rec/s",
        total as f64 / t.elapsed().as_secs_f64() / 1e6
    );
}
