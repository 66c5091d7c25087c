//! Where time goes inside a chain, with the real binary: per-vertex busy time on `/metrics`,
//! the summary table's headline (marker p99 beside record e2e p99 and lag, the chained mark)
//! and its last line, `bottleneck: <vertex> (busy N%)`.

mod common;

use common::{scrape, Proc, TempDir};

/// generator → map → delay 30 µs → discard, all chained in one task: `slow` takes far more than
/// 90 % of the task's time on any machine (30 µs of sleep per record against well under a
/// microsecond of work in each other vertex).
const CHAINED_JOB: &str = r#"
name: chained-test
latency:
  interval: 10ms
sources:
  gen:
    type: generator
    count: 40000
    keys: 16
operators:
  work:
    type: map
    input: gen
    scale: 2
  slow:
    type: delay
    input: work
    per_record: 30us
sinks:
  out:
    type: discard
    input: slow
"#;

#[test]
fn the_summary_table_names_the_slow_vertex_of_a_chain_and_shows_lag_and_e2e_beside_markers() {
    let dir = TempDir::new("chain-bottleneck");
    let job = dir.write("job.yaml", CHAINED_JOB);
    let mut proc = Proc::spawn(
        dir.path(),
        [
            "run".as_ref(),
            job.as_os_str(),
            "--summary".as_ref(),
            "--metrics-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--linger".as_ref(),
            "60s".as_ref(),
            "--report-file".as_ref(),
            dir.join("report.json").as_os_str(),
        ],
    );
    let addr = proc.wait_lingering();

    // /metrics: the per-vertex busy series name `slow`, and the four vertices add up to the
    // task's busy time within the spec's 10 %.
    let m = scrape(addr);
    let busy = |id: &str| {
        m.value(
            "tidemark_operator_busy_seconds_total",
            &[("operator_id", id), ("operator_subtask_index", "0")],
        )
        .unwrap_or_else(|| panic!("no busy series for {id}:\n{}", m.body))
    };
    let vertices: Vec<(&str, f64)> = ["gen", "work", "slow", "out"]
        .iter()
        .map(|&id| (id, busy(id)))
        .collect();
    let task = m
        .value(
            "tidemark_task_busy_seconds_total",
            &[("task", "gen+work+slow+out"), ("subtask_index", "0")],
        )
        .unwrap_or_else(|| panic!("no task busy series:\n{}", m.body));
    let busiest = vertices.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    assert_eq!(busiest.0, "slow", "{vertices:?}");
    let sum: f64 = vertices.iter().map(|v| v.1).sum();
    assert!(
        (0.9..=1.1).contains(&(sum / task)),
        "vertices {sum} s, task {task} s: {vertices:?}"
    );
    proc.end_lingering();

    // The table: the headline puts marker p99 (marked chained), record e2e p99 and the source
    // lag side by side, and the last line names the bottleneck.
    let stderr = proc.stderr();
    let lines: Vec<&str> = stderr.lines().collect();
    // The table's last line (the lingering and the SIGTERM that ended it are said after it).
    let last = lines
        .iter()
        .rev()
        .find(|l| !l.starts_with("tidemark: ") && !l.is_empty())
        .unwrap();
    let percent = last
        .strip_prefix("bottleneck: slow (busy ")
        .and_then(|rest| rest.strip_suffix("%)"))
        .unwrap_or_else(|| panic!("last line {last:?}, not the bottleneck:\n{stderr}"));
    let percent: f64 = percent
        .parse()
        .unwrap_or_else(|_| panic!("{percent:?} is not a number"));
    assert!((0.0..=100.0).contains(&percent), "{last}");
    let headline = lines
        .iter()
        .find(|l| l.trim_start().starts_with("at sinks:"))
        .unwrap_or_else(|| panic!("no headline:\n{stderr}"));
    assert!(
        headline.contains("marker p99 ")
            && headline.contains("(chained: no queue between these vertices)")
            && headline.contains("record e2e p99 ")
            && headline.contains("source lag gen 0 records"),
        "{headline}"
    );
    // Every vertex row has its busy percentage.
    for id in ["gen", "work", "slow", "out"] {
        let row = lines
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{stderr}"));
        assert!(row.contains('%'), "{row}");
    }

    // The report file says the same.
    let report: serde_json::Value = serde_json::from_str(&dir.read("report.json")).unwrap();
    assert_eq!(report["bottleneck"]["vertex"], "slow", "{report}");
    let slow = report["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "slow")
        .unwrap();
    assert_eq!(slow["task"], "gen+work+slow+out");
    assert_eq!(slow["chained"], true);
    assert_eq!(report["bottleneck"]["busy_ratio"], slow["busy_ratio"]);
    let sink_rows: Vec<&serde_json::Value> = report["latency"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["operator_kind"] == "sink")
        .collect();
    assert!(!sink_rows.is_empty(), "{report}");
    assert!(sink_rows.iter().all(|l| l["chained"] == true), "{report}");
}

/// Two inputs into one window: a generator whose watermark follows the wall clock, and standard
/// input, whose watermark moves only when the test writes a line.
const TWO_INPUT_JOB: &str = r#"
name: holder-test
sources:
  clock:
    type: generator
    rate: 1000
    keys: 4
    watermarks:
      interval: 20ms
  typed:
    type: stdin
    watermarks:
      interval: 20ms
operators:
  win:
    type: window
    input: [clock, typed]
    time: event
    size: 1s
    aggregate: count
sinks:
  out:
    type: discard
    input: win
"#;

/// The inputs `tidemark_watermark_holder_info` names for `win` (value 1).
fn holders(m: &common::Metrics) -> Vec<String> {
    m.samples("tidemark_watermark_holder_info")
        .filter(|s| s.labels.get("operator_id") == Some("win"))
        .filter(|s| common::scalar(&s.value) == Some(1.0))
        .map(|s| s.labels.get("input").unwrap_or("?").to_owned())
        .collect()
}

fn watermark(m: &common::Metrics, vertex: &str) -> Option<f64> {
    m.value(
        "tidemark_watermark_seconds",
        &[("operator_id", vertex), ("operator_subtask_index", "0")],
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Starts [`TWO_INPUT_JOB`] in a new directory; returns it, the process, its standard input and
/// its metrics address.
fn two_inputs(
    label: &str,
) -> (
    TempDir,
    Proc,
    std::process::ChildStdin,
    std::net::SocketAddr,
) {
    let dir = TempDir::new(label);
    let job = dir.write("job.yaml", TWO_INPUT_JOB);
    let (mut proc, stdin) = Proc::spawn_with_stdin(
        dir.path(),
        [
            "run".as_ref(),
            job.as_os_str(),
            "--metrics-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
        ],
    );
    let addr = proc.metrics_addr();
    (dir, proc, stdin, addr)
}

#[test]
fn the_input_holding_a_watermark_back_is_named_from_the_start_and_when_it_stops() {
    use std::io::Write as _;
    let (dir, mut proc, mut stdin, addr) = two_inputs("watermark-holder");

    // 1. From the first scrape on, one input is named (before any watermark both hold `win`
    //    back). Once `clock`'s first watermark reached `win`, `typed`, which has sent nothing, is
    //    the one, and `win` has no watermark at all.
    let first = scrape(addr);
    assert_eq!(holders(&first).len(), 1, "{}", first.body);
    let m = common::scrape_until(addr, "typed named as the holder", |m| {
        holders(m) == ["typed"]
    });
    assert!(watermark(&m, "clock").is_some(), "{}", m.body);
    assert_eq!(watermark(&m, "win"), None, "{}", m.body);

    // 2. `typed` sends one event an hour ahead: now `clock` holds `win` back.
    let ahead = now_ms() + 3_600_000;
    writeln!(stdin, r#"{{"key": 1, "timestamp": {ahead}}}"#).unwrap();
    stdin.flush().unwrap();
    let m = common::scrape_until(addr, "clock named as the holder", |m| {
        holders(m) == ["clock"]
    });
    let win = watermark(&m, "win").expect("win has a watermark once both inputs sent one");
    assert!(
        win < ahead as f64 / 1e3,
        "win {win} is clock's, not typed's"
    );

    // 3. Only promtool-clean series, holder included.
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let path = dir.write("metrics.txt", &m.body);
        let out = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&path).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(stdin);
    proc.terminate();
    proc.wait();
}

#[test]
fn an_input_that_stops_is_named_while_the_other_goes_on() {
    use std::io::Write as _;
    let (_dir, mut proc, mut stdin, addr) = two_inputs("watermark-holder-stops");
    // `typed` sends events stamped now, then stops; `clock` goes on.
    let mut last = 0;
    for _ in 0..5 {
        last = now_ms();
        writeln!(stdin, r#"{{"key": 1, "timestamp": {last}}}"#).unwrap();
        stdin.flush().unwrap();
    }
    let typed_watermark = last as f64 / 1e3;
    // Once `clock` is past `typed`, `typed` is the one named, and `win` waits at `typed`'s
    // watermark however far `clock` goes.
    let m = common::scrape_until(addr, "clock past typed", |m| {
        watermark(m, "clock").is_some_and(|c| c > typed_watermark)
            && watermark(m, "typed").is_some()
    });
    let m = if holders(&m) == ["typed"] {
        m
    } else {
        common::scrape_until(addr, "typed named", |m| holders(m) == ["typed"])
    };
    let typed = watermark(&m, "typed").unwrap();
    // Seconds since the epoch as an f64 carry ~0.24 µs of rounding: compare to within 1 µs (the
    // watermark is the last event's time minus 1 ns).
    assert!(
        typed <= typed_watermark + 1e-6,
        "typed {typed}, last event {typed_watermark}"
    );
    let win = watermark(&m, "win").expect("both inputs sent a watermark");
    assert!(win <= typed, "win {win} is held at typed's {typed}");
    drop(stdin);
    proc.terminate();
    proc.wait();
}
