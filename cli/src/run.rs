//! `tidemark run`: build the job, serve its metrics, run it to its end (or `--duration`, or a
//! signal), print and write the report, linger, and say how it went.

use crate::args::RunArgs;
use crate::endpoint::MetricsServer;
use crate::error::{JobFailed, RunError, EXIT_OK};
use crate::live::{settings_json, ComponentInfo, LiveJob, QueueShape};
use crate::progress::Progress;
use crate::report::{Report, RunSummary};
use crate::signals;
use crate::{LoadedJob, Loader};
use anyhow::Context as _;
use std::fs::File;
use std::io::Write as _;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tidemark_markers::format_duration;
use tidemark_runtime::{JobHandle, JobOutcome, StartError};

/// How often the wait loop looks at the job, the clock and the signals.
const POLL: Duration = Duration::from_millis(50);

/// Runs the job of `args`; returns the exit code, or an error whose kind sets it.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let mut loader = Loader::new()
        .flags(args.settings.clone())
        .metrics_addr(args.metrics_addr.clone())
        .seed(args.seed);
    for (k, v) in &args.defines {
        loader = loader.define(k, v);
    }
    let LoadedJob {
        job,
        settings,
        graph,
        config,
    } = loader.load_file(&args.job)?;
    let queue = QueueShape {
        channel_capacity: config.channel_capacity,
        batch_size: config.batch_size,
    };

    // Fail before the job starts if the report cannot be written or the address is taken.
    let mut report_file = match &args.report_file {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("cannot create report file {}", path.display()))?,
        ),
        None => None,
    };
    let signals = signals::install()?;

    // Make and wire every subtask first, so the endpoint serves the job's registry before the
    // first record flows; a taken address stops us before any thread runs.
    let prepared = tidemark_runtime::prepare(graph, config).map_err(|e| match e {
        StartError::Graph(e) => anyhow::Error::new(e),
        other => RunError(anyhow::Error::new(other).context("the job could not start")).into(),
    })?;
    let registry = prepared.metrics().clone();
    let components: Vec<ComponentInfo> = job
        .vertices
        .iter()
        .map(|v| ComponentInfo {
            id: v.id.clone(),
            type_name: v.type_name.clone(),
            config: serde_json::Value::Object(v.config.clone()),
        })
        .collect();
    let live = Arc::new(LiveJob::new(
        registry.clone(),
        prepared.plan(),
        settings_json(&settings),
        &components,
        queue,
    ));
    let server = MetricsServer::start(&settings.metrics_addr, live.clone())?;
    let handle = prepared
        .start()
        .map_err(|e| RunError(anyhow::Error::new(e).context("the job could not start")))?;
    let subtasks = handle.plan().subtask_count();
    eprintln!(
        "tidemark: job \"{}\" running ({subtasks} {}); metrics at {}",
        job.name,
        if subtasks == 1 { "thread" } else { "threads" },
        server.url()
    );

    let interrupted = wait(
        &handle,
        &signals,
        args.duration,
        Progress::new(registry.clone()),
    );
    let result = handle.wait();
    let ended = SystemTime::now();
    live.set_outcome(&result.outcome);

    let report = Report::collect(
        &result.metrics,
        &RunSummary {
            outcome: &result.outcome,
            elapsed: result.elapsed,
            ended,
            settings: &settings,
        },
    );
    eprint!("{}", report.table());
    if let (Some(file), Some(path)) = (report_file.as_mut(), &args.report_file) {
        file.write_all(report.to_json().as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write report file {}", path.display()))
            .map_err(RunError)?;
    }

    if !interrupted && !args.linger.is_zero() {
        eprintln!(
            "tidemark: job ended; serving {} for {} more",
            server.url(),
            format_duration(args.linger)
        );
        let until = Instant::now() + args.linger;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match signals.recv_timeout(left.min(POLL)) {
                Ok(_) => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(left.min(POLL)),
            }
        }
    }
    server.shutdown();

    match result.outcome {
        JobOutcome::Failed(failure) => Err(JobFailed {
            job: job.name,
            failure,
        }
        .into()),
        JobOutcome::Finished | JobOutcome::Stopped => Ok(EXIT_OK),
    }
}

/// Waits until the job ends, stopping it when `duration` passes or a signal arrives. Returns
/// whether a signal stopped it.
fn wait(
    handle: &JobHandle,
    signals: &Receiver<&'static str>,
    duration: Option<Duration>,
    mut progress: Option<Progress>,
) -> bool {
    let deadline = duration.map(|d| Instant::now() + d);
    let mut stopping = false;
    let mut interrupted = false;
    while !handle.is_finished() {
        match signals.recv_timeout(POLL) {
            Ok(_) => {
                interrupted = true;
                if !stopping {
                    handle.stop();
                    stopping = true;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL),
        }
        if !stopping && deadline.is_some_and(|d| Instant::now() >= d) {
            handle.stop();
            stopping = true;
        }
        if let Some(p) = progress.as_mut() {
            p.tick();
        }
    }
    if let Some(p) = progress {
        p.finish();
    }
    interrupted
}
