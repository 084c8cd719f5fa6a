//! `--trace` and `--metrics`: what the library reports through the `tracing` and `metrics`
//! facades, made visible to someone running the command. Both are installed before the
//! subcommand runs; the metrics are written once it has returned, whatever it returned.

use crate::args::Global;
use crate::exit::Failure;

/// What `--metrics` writes at the end, when it was given.
#[derive(Debug)]
pub struct Observers {
    #[cfg(feature = "metrics")]
    metrics: Option<metrics_file::MetricsFile>,
}

/// Installs the subscriber and the recorder the global options ask for.
#[cfg_attr(
    not(any(feature = "trace", feature = "metrics")),
    allow(unused_variables)
)]
pub fn start(global: &Global) -> Result<Observers, Failure> {
    #[cfg(feature = "trace")]
    if global.trace {
        trace::to_stderr()?;
    }
    Ok(Observers {
        #[cfg(feature = "metrics")]
        metrics: match &global.metrics {
            Some(path) => Some(metrics_file::MetricsFile::install(path)?),
            None => None,
        },
    })
}

impl Observers {
    /// Writes the metrics, if `--metrics` asked for them.
    pub fn finish(self) -> Result<(), Failure> {
        #[cfg(feature = "metrics")]
        if let Some(m) = self.metrics {
            m.write()?;
        }
        Ok(())
    }
}

#[cfg(feature = "trace")]
mod trace {
    use tracing_subscriber::fmt::format::FmtSpan;

    use crate::exit::{self, Failure};

    /// Every span (on close, with its outcome and elapsed time) and every event of the
    /// library at debug level and above, one line each on stderr. Nothing else in the
    /// command emits through `tracing`.
    pub fn to_stderr() -> Result<(), Failure> {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(FmtSpan::CLOSE)
            // A line that cannot be written (stderr closed, or a pipe whose reader has gone)
            // is dropped. The default reports it with `eprintln!`, which panics on the same
            // stderr, in whichever task emitted the event: the lock's keep-alive included.
            .log_internal_errors(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|e| Failure::new(exit::OS, format!("--trace: {e}")))
    }
}

#[cfg(feature = "metrics")]
mod metrics_file {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

    use crate::exit::{self, Failure};

    /// How often the recorder's histograms are folded into their summaries, so that a long
    /// `run` or `bench` keeps a bounded amount of samples in memory.
    const UPKEEP: Duration = Duration::from_secs(5);

    /// The histograms' buckets, in seconds: a round trip on loopback (100 µs) to a wait for a
    /// held lock (10 s), about three per decade.
    const BUCKETS: &[f64] = &[
        0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
        2.5, 5.0, 10.0,
    ];

    /// The installed recorder and where its rendering goes.
    #[derive(Debug)]
    pub struct MetricsFile {
        handle: PrometheusHandle,
        path: PathBuf,
    }

    impl MetricsFile {
        /// Installs a Prometheus recorder as the process's global one, after checking that
        /// `path`'s directory exists (a typo is better reported before the work than after).
        pub fn install(path: &Path) -> Result<MetricsFile, Failure> {
            if path != Path::new("-") {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                if !dir.is_dir() {
                    return Err(Failure::new(
                        exit::USAGE,
                        format!(
                            "--metrics {}: no directory {}",
                            path.display(),
                            dir.display()
                        ),
                    ));
                }
            }
            // Histograms as Prometheus histograms (exact counts per bucket, which add up across
            // runs and machines), not the exporter's default summaries (quantiles over a
            // rolling window, which do not).
            let recorder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .map_err(|e| Failure::new(exit::OS, format!("--metrics: {e}")))?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|e| Failure::new(exit::OS, format!("--metrics: {e}")))?;
            // `# HELP` and the unit for each of the library's metrics.
            redlock_mux::describe_metrics();
            let upkeep = handle.clone();
            // Dies with the process; it only ever folds samples.
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(UPKEEP);
                    upkeep.run_upkeep();
                })
                .map_err(|e| Failure::new(exit::OS, format!("--metrics: {e}")))?;
            Ok(MetricsFile {
                handle,
                path: path.to_path_buf(),
            })
        }

        /// Writes the rendering: to stdout for `-`, else beside the file and renamed over it,
        /// so that a reader never sees half of it.
        pub fn write(self) -> Result<(), Failure> {
            let text = self.handle.render();
            let fail = |e: std::io::Error| {
                Failure::new(exit::OS, format!("--metrics {}: {e}", self.path.display()))
            };
            if self.path == Path::new("-") {
                return std::io::stdout().write_all(text.as_bytes()).map_err(fail);
            }
            let mut tmp = self.path.clone().into_os_string();
            tmp.push(format!(".{}.tmp", std::process::id()));
            let tmp = PathBuf::from(tmp);
            let written = std::fs::File::create(&tmp)
                .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
                .and_then(|()| std::fs::rename(&tmp, &self.path));
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written.map_err(fail)
        }
    }
}
