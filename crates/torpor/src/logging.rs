//! The runtime's own log: `TORPOR_LOG` filters it (default `warn`, `--debug` gives `debug`);
//! it goes to standard error, or to `--log FILE`; `--log-format json` writes one object per
//! line with `level`, `msg` and `time`, as runc does, which is what containerd's shim reads.

use std::fmt;
use std::path::Path;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::GlobalArgs;

/// Where log lines go when there is no `--log` file: standard error, or the holder's original
/// standard error once a terminal has replaced it (the application's terminal is no place for
/// the runtime's log).
static LOG_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

/// Keeps the runtime's log on the current standard error after fds 0-2 are replaced.
pub fn keep_stderr() {
    // SAFETY: F_DUPFD_CLOEXEC on fd 2 returns a new fd owned by the log from here on.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
    if fd >= 0 {
        LOG_FD.store(fd, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A writer to [`LOG_FD`].
struct StderrLog;

impl std::io::Write for StderrLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let fd = LOG_FD.load(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: writing from a valid buffer to a descriptor the log owns.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One JSON object per event.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut msg = String::new();
        ctx.format_fields(Writer::new(&mut msg), event)?;
        writeln!(
            writer,
            "{}",
            json_line(event.metadata().level().as_str(), &msg)
        )
    }
}

/// `{"level":…,"msg":…,"time":…}`.
fn json_line(level: &str, msg: &str) -> String {
    serde_json::json!({
        "level": level.to_ascii_lowercase(),
        "msg": msg,
        "time": crate::oci::state::rfc3339_now(),
    })
    .to_string()
}

/// Sets up the log from the global flags.
pub fn init(g: &GlobalArgs) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TORPOR_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if g.debug { "debug" } else { "warn" })
    });
    let file = g.log.as_deref().and_then(open);
    let json = g.log_format == "json";
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match (file, json) {
        (Some(f), true) => builder
            .event_format(JsonLines)
            .with_writer(std::sync::Mutex::new(f))
            .init(),
        (Some(f), false) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(f))
            .init(),
        (None, true) => builder
            .event_format(JsonLines)
            .with_writer(|| StderrLog)
            .init(),
        (None, false) => builder
            .with_writer(|| StderrLog)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}

fn open(p: &Path) -> Option<std::fs::File> {
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
    {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("torpor: cannot open log {}: {e}", p.display());
            None
        }
    }
}

/// Reports a failed command: on standard error, and in the `--log` file as an `error` line
/// (engines show the last error of the log).
pub fn report_error(g: &GlobalArgs, msg: &str) {
    eprintln!("torpor: {msg}");
    if let Some(mut f) = g.log.as_deref().and_then(open) {
        use std::io::Write;
        let line = if g.log_format == "json" {
            json_line("error", msg)
        } else {
            format!("level=error msg={msg:?}")
        };
        let _ = writeln!(f, "{line}");
    }
}

/// [`report_error`] with the global flags this process was started with.
pub fn report_error_global(msg: &str) {
    report_error(&crate::cli::global(), msg);
}
