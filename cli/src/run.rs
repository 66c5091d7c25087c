//! `tidemark run`: build the job, serve its metrics, run it to its end (or `--duration`, or a
//! signal), print and write the report, linger, and say how it went.

use crate::args::RunArgs;
use crate::build::{build_graph, job_config};
use crate::endpoint::{EndpointError, MetricsServer};
use crate::error::{JobFailed, RunError, EXIT_OK};
use crate::jobfile::JobFile;
use crate::progress::Progress;
use crate::report::{Report, RunSummary};
use crate::settings::{resolve, FileSettings};
use crate::signals;
use anyhow::Context as _;
use std::fs::File;
use std::io::Write as _;
use std::net::{TcpListener, ToSocketAddrs};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};
use tidemark_markers::format_duration;
use tidemark_runtime::{JobHandle, JobOutcome, StartError};

/// How often the wait loop looks at the job, the clock and the signals.
const POLL: Duration = Duration::from_millis(50);

/// Runs the job of `args`; returns the exit code, or an error whose kind sets it.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let job = JobFile::load(&args.job)?;
    let settings = resolve(
        &FileSettings::of(&job),
        &args.settings,
        args.metrics_addr.as_deref(),
        &args.defines,
    )?;
    let graph = build_graph(&job, settings.parallelism)?;
    let config = job_config(&settings, args.seed);

    // Fail before the job starts if the report cannot be written or the address is taken.
    let mut report_file = match &args.report_file {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("cannot create report file {}", path.display()))?,
        ),
        None => None,
    };
    check_bindable(&settings.metrics_addr)?;
    let signals = signals::install()?;

    let handle = tidemark_runtime::start(graph, config).map_err(|e| match e {
        StartError::Graph(e) => anyhow::Error::new(e),
        other => RunError(anyhow::Error::new(other).context("the job could not start")).into(),
    })?;
    let registry = handle.metrics().clone();
    let server = match MetricsServer::start(&settings.metrics_addr, registry.clone()) {
        Ok(server) => server,
        Err(e) => {
            handle.stop();
            handle.wait();
            return Err(e.into());
        }
    };
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

/// Fails early, before the job starts, when the metrics address cannot be bound.
///
/// The endpoint needs the job's registry, which exists only once the job has started; checking
/// the address first keeps a taken port from starting (and at once stopping) the job.
fn check_bindable(addr: &str) -> Result<(), EndpointError> {
    let invalid = |reason: String| EndpointError::InvalidAddress {
        addr: addr.to_owned(),
        reason,
    };
    let candidates: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| invalid(os_reason(&e)))?
        .collect();
    let mut last = None;
    for candidate in candidates {
        match TcpListener::bind(candidate) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(error) => EndpointError::Bind {
            addr: addr.to_owned(),
            reason: os_reason(&error),
            error,
        },
        None => invalid("it resolves to no address".to_owned()),
    })
}

/// An I/O error's message without the ` (os error N)` suffix.
fn os_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}
