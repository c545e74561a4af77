//! `#!` line parsing, differential: torpor's `parse_shebang` must give what Linux's
//! `load_script` (fs/binfmt_script.c, 5.1 and later) gives for the same first 256 bytes,
//! except one deliberate leniency of torpor: carriage returns at the end of the line are
//! trimmed with the spaces and tabs (so CRLF scripts run).

/// Linux's BINPRM_BUF_SIZE.
const BUF: usize = 256;

fn spacetab(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// A port of Linux's `load_script` parsing: `(interpreter, optional argument)` as the C
/// strings Linux would pass, or None for -ENOEXEC (not a script, or a truncated interpreter).
pub fn linux_model(head: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    // bprm->buf: the first 256 bytes, NUL-padded.
    let mut buf = [0u8; BUF];
    let n = head.len().min(BUF);
    buf[..n].copy_from_slice(&head[..n]);
    if buf[0] != b'#' || buf[1] != b'!' {
        return None;
    }
    let buf_end = BUF - 1;
    let next_non_spacetab = |first: usize, last: usize| (first..=last).find(|&i| !spacetab(buf[i]));
    let next_terminator =
        |first: usize, last: usize| (first..=last).find(|&i| spacetab(buf[i]) || buf[i] == 0);
    // strnchr stops at the first NUL.
    let newline = buf
        .iter()
        .take_while(|&&c| c != 0)
        .position(|&c| c == b'\n');
    let mut i_end = match newline {
        Some(i) => i,
        None => {
            let first = next_non_spacetab(2, buf_end)?;
            next_terminator(first, buf_end)?;
            buf_end
        }
    };
    // torpor's leniency: '\r' is trimmed too.
    while spacetab(buf[i_end - 1]) || buf[i_end - 1] == b'\r' {
        i_end -= 1;
    }
    let i_name = next_non_spacetab(2, i_end)?;
    if i_name == i_end {
        return None;
    }
    let i_sep = next_terminator(i_name, i_end);
    let i_arg = match i_sep {
        Some(s) if buf[s] != 0 => next_non_spacetab(s, i_end),
        _ => None,
    };
    // The strings are NUL-terminated at i_end and at i_sep (when there is an argument).
    let cstr = |from: usize, to: usize| -> Vec<u8> {
        buf[from..to]
            .iter()
            .take_while(|&&c| c != 0)
            .copied()
            .collect()
    };
    let name_end = match (i_arg, i_sep) {
        (Some(_), Some(s)) => s,
        _ => i_end,
    };
    Some((cstr(i_name, name_end), i_arg.map(|a| cstr(a, i_end))))
}

/// The harness.
pub fn run(data: &[u8]) {
    let head = &data[..data.len().min(BUF)];
    let got = kernel::syscalls::parse_shebang(head);
    let want = linux_model(head);
    assert_eq!(got, want, "#! line {:?}", String::from_utf8_lossy(head));
    if let Some((interp, arg)) = got {
        assert!(!interp.iter().any(|&c| spacetab(c) || c == 0 || c == b'\n'));
        if let Some(a) = arg {
            assert!(!a.iter().any(|&c| c == 0 || c == b'\n'));
        }
    }
}
