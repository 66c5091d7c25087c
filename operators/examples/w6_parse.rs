//! The W6 baselines (workloads spec): one thread that only reads the W6 events file line by
//! line and parses each line, into Tidemark's event type (with one [`EventParser`], what the
//! `file` source parses with) and into `serde_json::Value`. `scripts/bench w6` runs it beside the job
//! and reports the job's events/s as ratios to these.
//!
//! ```text
//! cargo run --release -p tidemark-operators --example w6_parse -- events.jsonl
//! ```
//!
//! Prints one line per baseline:
//! `baseline=event lines=… seconds=… lines_per_s=…` and the same with `baseline=serde_json_value`.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::process::ExitCode;
use std::time::Instant;

use tidemark_operators::event_json::EventParser;

/// Reads `path` line by line, calling `parse` on each line without its newline; returns the
/// number of lines and the seconds taken.
fn read_lines(
    path: &str,
    mut parse: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<(u64, f64), String> {
    let file = File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::with_capacity(256);
    let mut lines = 0u64;
    let start = Instant::now();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        if n == 0 {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.is_empty() {
            continue;
        }
        lines += 1;
        parse(text).map_err(|e| format!("{path}:{lines}: {e}"))?;
    }
    Ok((lines, start.elapsed().as_secs_f64()))
}

/// Parses one line, keeping the result from being optimised away.
type Parse = Box<dyn FnMut(&[u8]) -> Result<(), String>>;

fn run(path: &str) -> Result<(), String> {
    let mut parser = EventParser::new();
    let baselines: [(&str, Parse); 2] = [
        (
            "event",
            Box::new(move |line| {
                let v = parser.parse(line).map_err(|e| e.to_string())?;
                black_box(&v);
                Ok(())
            }),
        ),
        (
            "serde_json_value",
            Box::new(|line| {
                let v: serde_json::Value =
                    serde_json::from_slice(line).map_err(|e| e.to_string())?;
                black_box(&v);
                Ok(())
            }),
        ),
    ];
    for (name, parse) in baselines {
        let (lines, seconds) = read_lines(path, parse)?;
        println!(
            "baseline={name} lines={lines} seconds={seconds:.3} lines_per_s={:.0}",
            lines as f64 / seconds
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        eprintln!("usage: w6_parse EVENTS_FILE   (the W6 input, made by gen_w6.py)");
        return ExitCode::from(2);
    };
    match run(path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("w6_parse: {e}");
            ExitCode::FAILURE
        }
    }
}
