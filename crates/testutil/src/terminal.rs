//! A pseudo-terminal a test drives as a user at a keyboard: a program started on it as its
//! controlling terminal, keystrokes sent, its output awaited, the window resized.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`Terminal::expect`] waits for a piece of output.
const EXPECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The test's side of a pseudo-terminal (its controller) and everything read from it.
pub struct Terminal {
    controller: OwnedFd,
    replica: OwnedFd,
    seen: Vec<u8>,
    /// Where in `seen` the next [`Terminal::expect`] looks from.
    cursor: usize,
}

impl Terminal {
    /// A new pseudo-terminal of `rows` x `cols`.
    ///
    /// # Panics
    /// When the host has no pseudo-terminals.
    pub fn open(rows: u16, cols: u16) -> Terminal {
        let (mut c, mut r) = (-1, -1);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two descriptors into the locals; the name is not asked for,
        // the settings are the default and the size is read from a live local.
        let rc = unsafe {
            libc::openpty(
                &mut c,
                &mut r,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both are fresh descriptors owned from here on.
        let (controller, replica) = unsafe { (OwnedFd::from_raw_fd(c), OwnedFd::from_raw_fd(r)) };
        Terminal {
            controller,
            replica,
            seen: Vec::new(),
            cursor: 0,
        }
    }

    /// Starts `cmd` with the terminal as its standard streams and controlling terminal (a
    /// session of its own, as a login shell's).
    ///
    /// # Panics
    /// When it cannot start.
    pub fn spawn(&mut self, mut cmd: Command) -> Child {
        let stdio = || Stdio::from(self.replica.try_clone().expect("dup of the terminal"));
        cmd.stdin(stdio()).stdout(stdio()).stderr(stdio());
        // SAFETY: setsid and ioctl are async-signal-safe; the child's fd 0 is the terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().expect("starting a program on the terminal")
    }

    /// Types `keys`.
    ///
    /// # Panics
    /// When the terminal is gone.
    pub fn send(&mut self, keys: &str) {
        // SAFETY: writes from a live buffer of its length.
        let n = unsafe {
            libc::write(
                self.controller.as_raw_fd(),
                keys.as_ptr().cast(),
                keys.len(),
            )
        };
        assert_eq!(n, keys.len() as isize, "typing {keys:?}");
    }

    /// Waits until `text` appears in the output after what the last `expect` matched.
    ///
    /// # Panics
    /// After 30 s without it, with what the terminal showed.
    pub fn expect(&mut self, text: &str, what: &str) {
        let deadline = Instant::now() + EXPECT_TIMEOUT;
        loop {
            if let Some(at) = find(&self.seen[self.cursor..], text.as_bytes()) {
                self.cursor += at + text.len();
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && self.read_some(left),
                "{what}: no {text:?} on the terminal, which showed:\n{}",
                self.seen()
            );
        }
    }

    /// Resizes the window (its foreground process gets SIGWINCH).
    pub fn resize(&self, rows: u16, cols: u16) {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from a live local.
        unsafe { libc::ioctl(self.controller.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    }

    /// Waits up to `timeout` for `child` to exit, reading the terminal meanwhile; its exit
    /// code (`None`: killed by a signal, or still running and then killed).
    pub fn wait(&mut self, child: &mut Child, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.read_some(Duration::from_millis(50));
                return status.code();
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            self.read_some(Duration::from_millis(50));
        }
    }

    /// Everything the terminal showed so far.
    pub fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Reads what is there within `timeout`; false when nothing came (or the terminal ended).
    fn read_some(&mut self, timeout: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.controller.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        if unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) } <= 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: reads at most the buffer's length into it.
        let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return false;
        }
        self.seen.extend_from_slice(&buf[..n as usize]);
        true
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
