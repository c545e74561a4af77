//! The caller's side of `torpor exec` while the process runs: the signals the caller receives
//! are forwarded to it (to its terminal's foreground process group inside the sandbox), and
//! with `-t` and no console socket a new pseudo-terminal is relayed to the caller's own, in raw
//! mode, as `podman exec -it` does: keystrokes go in, output comes out, Ctrl-C and Ctrl-\ become
//! SIGINT and SIGQUIT inside when the process's terminal asks for them (ISIG), and the caller's
//! window size follows into it (SIGWINCH).
//!
//! The process's terminal lives on the host (its replica end is the process's stdio, passed
//! with the request), but no host process has it as its controlling terminal (the holder must
//! never take one), so its line discipline signals nobody: the relay reads the terminal's
//! settings and sends the signal over the exec's connection
//! ([`ExecMessage`](crate::control::ExecMessage)).

use std::io::{BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::control::ExecMessage;

/// The signals an exec's caller forwards to the process (SIGWINCH after copying the window
/// size, when it relays a terminal).
const FORWARDED: [i32; 5] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
];

/// How long output may still come once the process has ended (from processes it left behind
/// that still hold its terminal, or bytes in flight).
const DRAIN: Duration = Duration::from_millis(100);

/// A pseudo-terminal for an exec'd process: its replica goes to the process as descriptors
/// 0-2, its controller stays with the caller.
pub struct Pty {
    /// The caller's end.
    pub controller: OwnedFd,
    /// The process's end.
    pub replica: OwnedFd,
}

impl Pty {
    /// A new pseudo-terminal with the caller's window size (24x80 when the caller has no
    /// terminal).
    ///
    /// # Errors
    /// The host's.
    pub fn open() -> Result<Pty> {
        let (controller, replica) = crate::console::openpty()?;
        let size = window_size(0)
            .or_else(|| window_size(1))
            .unwrap_or(libc::winsize {
                ws_row: 24,
                ws_col: 80,
                ws_xpixel: 0,
                ws_ypixel: 0,
            });
        set_window_size(controller.as_raw_fd(), &size);
        Ok(Pty {
            controller,
            replica,
        })
    }
}

/// Blocks the signals the caller forwards and returns a descriptor that reads them. Call it
/// while the process has one thread (the mask is per thread).
///
/// # Errors
/// The host's.
pub fn forwarded_signals() -> Result<OwnedFd> {
    // SAFETY: a zeroed sigset_t filled by sigemptyset/sigaddset; the mask applies to this
    // (only) thread; signalfd returns a new descriptor owned here.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error()).context("blocking signals");
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("signalfd");
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Waits for the end of the process whose exec answered on `conn` (its pid already read),
/// forwarding the signals read from `signals`; with `controller`, relays that terminal to the
/// caller's standard streams. Returns the process's exit status.
///
/// # Errors
/// The connection to the holder broke, or the caller's streams failed.
pub fn run(
    mut conn: BufReader<UnixStream>,
    signals: &OwnedFd,
    controller: Option<OwnedFd>,
) -> Result<u8> {
    let mut relay = controller.map(Relay::new).transpose()?;
    loop {
        // The end may have come with the pid's answer, in the same read.
        if !conn.buffer().is_empty() {
            return finish(&mut conn, relay.as_mut());
        }
        let mut polled = vec![
            pollfd(conn.get_ref().as_raw_fd(), libc::POLLIN),
            pollfd(signals.as_raw_fd(), libc::POLLIN),
        ];
        if let Some(r) = &relay {
            r.interest(&mut polled);
        }
        poll(&mut polled, -1)?;
        if polled[1].revents != 0 {
            for sig in read_signals(signals) {
                if sig == libc::SIGWINCH {
                    if let Some(r) = &relay {
                        r.copy_window_size();
                    }
                }
                send_signal(conn.get_ref(), sig);
            }
        }
        if let Some(r) = &mut relay {
            for sig in r.serve(&polled[2..])? {
                send_signal(conn.get_ref(), sig);
            }
        }
        if polled[0].revents != 0 {
            return finish(&mut conn, relay.as_mut());
        }
    }
}

/// Reads the process's end from `conn`, copies what its terminal still holds, and returns
/// its exit status.
fn finish(conn: &mut BufReader<UnixStream>, relay: Option<&mut Relay>) -> Result<u8> {
    let end = crate::control::read_answer(conn);
    if let Some(r) = relay {
        r.drain();
    }
    let end = end?;
    Ok(end["exit"].as_i64().unwrap_or(137) as u8)
}

fn send_signal(conn: &UnixStream, signal: i32) {
    if let Ok(mut line) = serde_json::to_string(&ExecMessage { signal }) {
        line.push('\n');
        // A holder that has gone answers the wait with EOF; nothing to do here.
        let _ = (&*conn).write_all(line.as_bytes());
    }
}

/// A terminal relayed between the caller's standard streams and a pty's controller.
struct Relay {
    controller: OwnedFd,
    /// The caller's terminal settings, put back when the relay ends.
    saved: Option<libc::termios>,
    /// Keystrokes the process's terminal has not taken yet (its input queue is full).
    pending: Vec<u8>,
    stdin_open: bool,
    /// The process's terminal is still open (its replica has holders).
    output_open: bool,
}

impl Relay {
    fn new(controller: OwnedFd) -> Result<Relay> {
        set_nonblocking(controller.as_raw_fd())?;
        Ok(Relay {
            controller,
            saved: make_raw(0),
            pending: Vec::new(),
            stdin_open: true,
            output_open: true,
        })
    }

    /// Adds the relay's descriptors to a poll set, in the order [`Relay::serve`] reads them:
    /// standard input (or nothing, while keystrokes wait), then the controller.
    fn interest(&self, polled: &mut Vec<libc::pollfd>) {
        let reading = self.stdin_open && self.pending.is_empty();
        polled.push(pollfd(if reading { 0 } else { -1 }, libc::POLLIN));
        let mut events = 0;
        if self.output_open {
            events |= libc::POLLIN;
        }
        if !self.pending.is_empty() {
            events |= libc::POLLOUT;
        }
        polled.push(pollfd(
            if events != 0 {
                self.controller.as_raw_fd()
            } else {
                -1
            },
            events,
        ));
    }

    /// Moves what `polled` (from [`Relay::interest`]) says is ready; returns the signals the
    /// keystrokes stand for.
    fn serve(&mut self, polled: &[libc::pollfd]) -> Result<Vec<i32>> {
        let mut signals = Vec::new();
        if polled[0].revents != 0 {
            let mut buf = [0u8; 4096];
            match read(0, &mut buf) {
                Ok(0) | Err(_) => {
                    // The caller's input ended: the process reads end of file, as it would
                    // from its own terminal's EOF character.
                    self.stdin_open = false;
                    if let Some(t) = terminal_settings(self.controller.as_raw_fd()) {
                        if t.c_cc[libc::VEOF] != 0 {
                            self.pending.push(t.c_cc[libc::VEOF]);
                        }
                    }
                }
                Ok(n) => {
                    signals = keystroke_signals(self.controller.as_raw_fd(), &buf[..n]);
                    self.pending.extend_from_slice(&buf[..n]);
                }
            }
        }
        if !self.pending.is_empty() {
            match write(self.controller.as_raw_fd(), &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => self.pending.clear(),
            }
        }
        if polled[1].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            self.copy_output()?;
        }
        Ok(signals)
    }

    /// Copies what the process wrote to the caller's standard output; notes the terminal's
    /// end (EIO once no process holds its replica).
    fn copy_output(&mut self) -> Result<()> {
        let mut buf = [0u8; 16384];
        loop {
            match read(self.controller.as_raw_fd(), &mut buf) {
                Ok(0) => {
                    self.output_open = false;
                    return Ok(());
                }
                Ok(n) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&buf[..n])
                        .context("writing to standard output")?;
                    out.flush().context("writing to standard output")?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(_) => {
                    self.output_open = false;
                    return Ok(());
                }
            }
        }
    }

    /// Copies the output still coming for a short while after the process's end.
    fn drain(&mut self) {
        while self.output_open {
            let mut p = [pollfd(self.controller.as_raw_fd(), libc::POLLIN)];
            match poll(&mut p, DRAIN.as_millis() as i32) {
                Ok(n) if n > 0 => {
                    if self.copy_output().is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    fn copy_window_size(&self) {
        if let Some(size) = window_size(0).or_else(|| window_size(1)) {
            set_window_size(self.controller.as_raw_fd(), &size);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            // SAFETY: tcsetattr with settings tcgetattr filled in for the same descriptor.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}

/// The signals a terminal with settings `t` raises for `keys`: with ISIG, its interrupt
/// character is SIGINT and its quit character SIGQUIT (suspend is not: the sandbox has no
/// job control).
fn signals_of(t: &libc::termios, keys: &[u8]) -> Vec<i32> {
    if t.c_lflag & libc::ISIG == 0 {
        return Vec::new();
    }
    let (intr, quit) = (t.c_cc[libc::VINTR], t.c_cc[libc::VQUIT]);
    keys.iter()
        .filter_map(|&k| match k {
            // 0 is _POSIX_VDISABLE: the character is off.
            0 => None,
            k if k == intr => Some(libc::SIGINT),
            k if k == quit => Some(libc::SIGQUIT),
            _ => None,
        })
        .collect()
}

/// [`signals_of`] with the settings of the terminal whose controller is `controller` (a
/// pty's controller reports its replica's settings).
fn keystroke_signals(controller: RawFd, keys: &[u8]) -> Vec<i32> {
    terminal_settings(controller).map_or_else(Vec::new, |t| signals_of(&t, keys))
}

fn terminal_settings(fd: RawFd) -> Option<libc::termios> {
    // SAFETY: tcgetattr fills the zeroed structure, which lives on this stack.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        (libc::tcgetattr(fd, &mut t) == 0).then_some(t)
    }
}

/// Puts the terminal on `fd` in raw mode; returns its settings before, or `None` when `fd` is
/// not a terminal.
fn make_raw(fd: RawFd) -> Option<libc::termios> {
    let saved = terminal_settings(fd)?;
    let mut raw = saved;
    // SAFETY: cfmakeraw edits the local copy; tcsetattr reads it.
    unsafe {
        libc::cfmakeraw(&mut raw);
        libc::tcsetattr(fd, libc::TCSANOW, &raw);
    }
    Some(saved)
}

fn window_size(fd: RawFd) -> Option<libc::winsize> {
    // SAFETY: TIOCGWINSZ fills one winsize, which lives on this stack.
    unsafe {
        let mut w: libc::winsize = std::mem::zeroed();
        (libc::ioctl(fd, libc::TIOCGWINSZ, &mut w) == 0 && w.ws_row > 0).then_some(w)
    }
}

fn set_window_size(fd: RawFd, size: &libc::winsize) {
    // SAFETY: TIOCSWINSZ reads one winsize.
    unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, size) };
}

fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor owned by the caller.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()).context("making the terminal non-blocking")
    }
}

/// The signals waiting on a signalfd.
fn read_signals(fd: &OwnedFd) -> Vec<i32> {
    let mut out = Vec::new();
    loop {
        // SAFETY: a zeroed signalfd_siginfo, plain data, filled by read.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into `info`.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        if n != size as isize {
            return out;
        }
        out.push(info.ssi_signo as i32);
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// poll(2), retried on EINTR; the number of ready descriptors.
fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize> {
    loop {
        // SAFETY: `fds` is a live slice of pollfd of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("poll");
        }
    }
}

fn read(fd: RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn write(fd: RawFd, buf: &[u8]) -> std::io::Result<usize> {
    // SAFETY: writes at most `buf.len()` bytes from `buf`.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(isig: bool) -> libc::termios {
        // SAFETY: plain data.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        t.c_cc[libc::VINTR] = 3;
        t.c_cc[libc::VQUIT] = 0x1c;
        if isig {
            t.c_lflag |= libc::ISIG;
        }
        t
    }

    #[test]
    fn ctrl_c_and_ctrl_backslash_are_signals_only_with_isig() {
        assert_eq!(
            signals_of(&settings(true), b"ls\x03\x1cx"),
            vec![libc::SIGINT, libc::SIGQUIT]
        );
        assert!(signals_of(&settings(false), b"\x03\x1c").is_empty());
        // A disabled character (0) matches no NUL byte.
        let mut t = settings(true);
        t.c_cc[libc::VINTR] = 0;
        assert!(signals_of(&t, b"\0").is_empty());
    }

    #[test]
    fn a_pty_carries_keystrokes_and_reports_its_replica_settings() {
        let pty = Pty::open().unwrap();
        // The replica starts in canonical mode with ISIG: Ctrl-C is an interrupt.
        assert_eq!(
            keystroke_signals(pty.controller.as_raw_fd(), b"\x03"),
            vec![libc::SIGINT]
        );
        write(pty.controller.as_raw_fd(), b"hi\n").unwrap();
        let mut buf = [0u8; 8];
        let n = read(pty.replica.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi\n");
        assert!(window_size(pty.replica.as_raw_fd()).is_some_and(|w| w.ws_col > 0));
    }
}
