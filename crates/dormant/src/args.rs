//! The command line: `torpor-dormant --status FILE --control FD [--watch FD]... [--exec-fd FD]
//! [--reclaim FD] -- WAKE...`.

use core::ffi::CStr;

use crate::sys::Fd;

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Options<'a> {
    /// The status file: a JSON object with the answers to `state` and `stats`
    /// (`{"state": …, "stats": …}`).
    pub status: &'a CStr,
    /// The control socket's listener (inherited).
    pub control: Fd,
    /// Descriptors whose readiness wakes the sandbox (inherited).
    pub watch: &'a [Fd],
    /// The wake command's executable as an open descriptor (`execveat` with an empty path:
    /// the only exec a confined holder's seccomp filter allows); `WAKE[0]` is then only its
    /// name. Without it, `WAKE[0]` is looked up in `PATH`.
    pub exec_fd: Option<Fd>,
    /// The sandbox's cgroup memory reclaim file, open for writing (inherited; see
    /// [`crate::reclaim`]): written once at the start.
    pub reclaim: Option<Fd>,
    /// Where the wake command starts among the arguments; `--woken-by FD` is appended to it.
    pub wake: usize,
}

/// What a bad command line lacks or has wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageError<'a> {
    /// What is wrong.
    pub what: &'static str,
    /// The argument it is about, if one.
    pub arg: Option<&'a [u8]>,
}

/// The usage line every error ends with.
pub const USAGE: &str =
    "usage: torpor-dormant --status FILE --control FD [--watch FD]... [--exec-fd FD] [--reclaim FD] -- WAKE...";

fn usage(what: &'static str) -> UsageError<'static> {
    UsageError { what, arg: None }
}

/// A descriptor number: a non-negative decimal.
fn descriptor(v: Option<&CStr>) -> Option<Fd> {
    let s = core::str::from_utf8(v?.to_bytes()).ok()?;
    s.parse::<Fd>().ok().filter(|&n| n >= 0)
}

impl<'a> Options<'a> {
    /// Parses the arguments after the program name; the `--watch` descriptors go into
    /// `watch`, which bounds their number.
    ///
    /// # Errors
    /// A missing or malformed option, too many `--watch`, or no wake command.
    pub fn parse<I>(args: I, watch: &'a mut [Fd]) -> Result<Options<'a>, UsageError<'a>>
    where
        I: IntoIterator<Item = &'a CStr>,
    {
        let (mut status, mut control, mut watched, mut exec_fd) = (None, None, 0, None);
        let mut reclaim = None;
        let mut it = args.into_iter();
        let mut at = 0;
        let mut next = |it: &mut I::IntoIter| {
            at += 1;
            it.next()
        };
        loop {
            let Some(a) = next(&mut it) else {
                return Err(usage("no wake command after --"));
            };
            match a.to_bytes() {
                b"--status" => {
                    status = Some(next(&mut it).ok_or(usage("--status needs a file"))?);
                }
                b"--control" => {
                    control = Some(
                        descriptor(next(&mut it))
                            .ok_or(usage("--control needs a descriptor number"))?,
                    );
                }
                b"--watch" => {
                    let fd = descriptor(next(&mut it))
                        .ok_or(usage("--watch needs a descriptor number"))?;
                    *watch
                        .get_mut(watched)
                        .ok_or(usage("too many --watch descriptors"))? = fd;
                    watched += 1;
                }
                b"--exec-fd" => {
                    exec_fd = Some(
                        descriptor(next(&mut it))
                            .ok_or(usage("--exec-fd needs a descriptor number"))?,
                    );
                }
                b"--reclaim" => {
                    reclaim = Some(
                        descriptor(next(&mut it))
                            .ok_or(usage("--reclaim needs a descriptor number"))?,
                    );
                }
                b"--" => break,
                other => {
                    return Err(UsageError {
                        what: "unknown argument",
                        arg: Some(other),
                    })
                }
            }
        }
        if it.next().is_none() {
            return Err(usage("no wake command after --"));
        }
        Ok(Options {
            status: status.ok_or(usage("--status is required"))?,
            control: control.ok_or(usage("--control is required"))?,
            watch: &watch[..watched],
            exec_fd,
            reclaim,
            wake: at,
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::ffi::CString;
    use std::vec::Vec;

    use super::*;

    fn parse(s: &str, f: impl FnOnce(Result<Options<'_>, UsageError<'_>>)) {
        let owned: Vec<CString> = s
            .split_whitespace()
            .map(|a| CString::new(a).unwrap())
            .collect();
        let mut watch = [0; 4];
        f(Options::parse(
            owned.iter().map(|c| c.as_c_str()),
            &mut watch,
        ));
    }

    #[test]
    fn the_command_line_is_checked() {
        parse(
            "--status s.json --control 3 --watch 4 --watch 5 -- w -x",
            |o| {
                let o = o.unwrap();
                assert_eq!(o.status.to_bytes(), b"s.json");
                assert_eq!(o.control, 3);
                assert_eq!(o.watch, &[4, 5]);
                assert_eq!(o.wake, 9);
                assert_eq!(o.exec_fd, None);
                assert_eq!(o.reclaim, None);
            },
        );
        parse("--status s --control 3 --exec-fd 9 -- w", |o| {
            let o = o.unwrap();
            assert_eq!(o.exec_fd, Some(9));
            assert_eq!(o.wake, 7);
        });
        parse("--status s --control 3 --reclaim 7 -- w", |o| {
            assert_eq!(o.unwrap().reclaim, Some(7));
        });
        let err = |s: &str, what: &str| {
            parse(s, |o| {
                assert_eq!(o.map(|_| ()).unwrap_err().what, what, "{s}")
            })
        };
        err(
            "--status s --control 3 --exec-fd -- w",
            "--exec-fd needs a descriptor number",
        );
        err(
            "--status s --control 3 --reclaim x -- w",
            "--reclaim needs a descriptor number",
        );
        err("--status s --control 3", "no wake command after --");
        err("--status s --control 3 --", "no wake command after --");
        err(
            "--status s --control x -- w",
            "--control needs a descriptor number",
        );
        err("--control 3 -- w", "--status is required");
        err("--status s -- w", "--control is required");
        err("--status", "--status needs a file");
        err("--status s --control 3 --bogus -- w", "unknown argument");
        err(
            "--status s --control -1 -- w",
            "--control needs a descriptor number",
        );
        err(
            "--status s --control 3 --watch 1 --watch 2 --watch 3 --watch 4 --watch 5 -- w",
            "too many --watch descriptors",
        );
        parse("--status s --control 3 --bogus -- w", |o| {
            assert_eq!(o.unwrap_err().arg, Some(&b"--bogus"[..]))
        });
    }
}
