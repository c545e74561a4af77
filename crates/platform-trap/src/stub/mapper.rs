//! Mapper commands: what the holder has the stub's mapper thread do to the guest's address
//! space (map, unmap, protect guest memory; attach, map and detach shared windows), each
//! argument checked before it is sent.

use super::*;

impl StubProcess {
    pub(super) fn check_range(gva: u64, len: u64) -> Result<(), TrapError> {
        if (gva | len) & 0xfff != 0 || len == 0 {
            return Err(TrapError::Invalid("unaligned or empty range"));
        }
        match gva.checked_add(len) {
            Some(end) if end <= USER_END => Ok(()),
            _ => Err(TrapError::Invalid("range beyond USER_END")),
        }
    }

    pub(super) fn check_prot(prot: i32) -> Result<(), TrapError> {
        if prot & !(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
            return Err(TrapError::Invalid("protection bits"));
        }
        Ok(())
    }

    /// The checks of a map of the guest memfd: range, protection bits, aligned offset.
    pub(super) fn check_map(gva: u64, len: u64, offset: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        if offset & 0xfff != 0 {
            return Err(TrapError::Invalid("unaligned offset"));
        }
        Ok(())
    }

    /// Maps `len` bytes of the guest memfd from `offset` at `gva` in the stub
    /// (`mmap(MAP_SHARED|MAP_FIXED)`, replacing whatever was there) with `prot`
    /// (`PROT_READ|PROT_WRITE|PROT_EXEC` bits).
    ///
    /// # Errors
    /// [`TrapError::Invalid`] for an unaligned range or one reaching `USER_END`;
    /// [`TrapError::Mapper`] if the stub's `mmap` failed.
    pub fn map(&self, gva: u64, len: u64, offset: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_map(gva, len, offset, prot)?;
        // Success of a MAP_FIXED mmap means mapped at `gva`.
        self.shared
            .command(OP_MAP, [gva, len, prot as u64, offset, 0])
            .map(drop)
    }

    /// [`StubProcess::map`] for each `(gva, len, offset, prot)` of `maps`, in order, with one
    /// mapper command per [`BATCH_MAX`] of them.
    ///
    /// # Errors
    /// As [`StubProcess::map`] (entries before a failed one are mapped).
    pub fn map_many(&self, maps: &[(u64, u64, u64, i32)]) -> Result<(), TrapError> {
        for &(gva, len, offset, prot) in maps {
            Self::check_map(gva, len, offset, prot)?;
        }
        for chunk in maps.chunks(BATCH_MAX as usize) {
            if let [(gva, len, offset, prot)] = *chunk {
                self.map(gva, len, offset, prot)?;
                continue;
            }
            let sh = &self.shared;
            sh.alive()?;
            let mut seq = sh.mapper.lock().unwrap_or_else(|e| e.into_inner());
            for (i, &(gva, len, offset, prot)) in chunk.iter().enumerate() {
                let at = CTRL_FD_CMD + CMD_BATCH + BATCH_ENTRY * i as u64;
                sh.ctrl.write_u64(at, gva);
                sh.ctrl.write_u64(at + 8, len);
                sh.ctrl.write_u64(at + 16, prot as u64);
                sh.ctrl.write_u64(at + 24, offset);
            }
            sh.command_locked(&mut seq, OP_MAP_BATCH, [chunk.len() as u64, 0, 0, 0, 0])?;
        }
        Ok(())
    }

    /// Unmaps `[gva, gva + len)` in the stub.
    ///
    /// # Errors
    /// As [`StubProcess::map`].
    pub fn unmap(&self, gva: u64, len: u64) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        self.shared.command(OP_UNMAP, [gva, len, 0, 0, 0]).map(drop)
    }

    /// Changes the protection of `[gva, gva + len)` in the stub.
    ///
    /// # Errors
    /// As [`StubProcess::map`].
    pub fn protect(&self, gva: u64, len: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        self.shared
            .command(OP_PROTECT, [gva, len, prot as u64, 0, 0])
            .map(drop)
    }

    /// Attaches a shared window to the stub: sends `fd` (a file the guest maps shared: a
    /// regular file, the memfd of a shared anonymous or SysV object, a library's file) to the
    /// stub, which keeps it in a free slot of the kind asked for until
    /// [`StubProcess::detach_window`]. Map ranges of it with [`StubProcess::map_window`].
    ///
    /// A read-only slot is never mapped with `PROT_WRITE` (the holder and the stub's filter
    /// both refuse it). If `fd` is open for writing, a read-only slot gets a read-only reopening
    /// of it (`/proc/self/fd`) when this process may open that, so that the kernel also refuses
    /// a later `mprotect(PROT_WRITE)` of its mappings; otherwise `fd` itself, and then only the
    /// caller keeps [`StubProcess::protect`] (which knows nothing of windows) from making such
    /// a mapping writable. Pass `O_RDONLY` descriptors for read-only windows where possible.
    ///
    /// # Errors
    /// [`TrapError::TooManyWindows`] if every slot of the kind is attached (480 of each, fewer
    /// if the stub's `RLIMIT_NOFILE` is below 1024); [`TrapError::Invalid`] for a writable
    /// slot of a descriptor not open for writing; [`TrapError::Mapper`] if the stub could not
    /// take it; [`TrapError::Host`] if sending it fails; [`TrapError::StubDied`].
    pub fn attach_window(
        &self,
        fd: BorrowedFd<'_>,
        writable: bool,
    ) -> Result<WindowSlot, TrapError> {
        let sh = &self.shared;
        sh.alive()?;
        // SAFETY: F_GETFL on a borrowed, open descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(host("fcntl(F_GETFL) of a window")(
                std::io::Error::last_os_error(),
            ));
        }
        let mode = flags & libc::O_ACCMODE;
        if writable && mode != libc::O_RDWR {
            return Err(TrapError::Invalid(
                "a writable window needs a descriptor open for reading and writing",
            ));
        }
        let reopened = if !writable && mode != libc::O_RDONLY {
            reopen_read_only(fd)
        } else {
            None
        };
        let send = reopened.as_ref().map_or(fd, |f| f.as_fd());
        let slot = sh
            .windows()
            .take(writable, sh.nofile.load(Ordering::Relaxed))
            .ok_or(TrapError::TooManyWindows)?;
        match sh.send_window(send, u64::from(slot.0)) {
            Ok(_) => Ok(slot),
            Err(e) => {
                // The dup3 failed (the slot's descriptor is unchanged, free), or the stub is
                // dead.
                sh.windows().release(slot);
                Err(e)
            }
        }
    }

    /// Detaches a window: the stub closes the slot's descriptor and the slot is free for the
    /// next [`StubProcess::attach_window`]. Mappings made from it stay (they hold the file);
    /// unmap or replace them as needed.
    ///
    /// # Errors
    /// [`TrapError::Invalid`] if `slot` is not attached; [`TrapError::Mapper`] if the stub's
    /// `close` failed (the slot is freed anyway: the next attach replaces its descriptor);
    /// [`TrapError::StubDied`].
    pub fn detach_window(&self, slot: WindowSlot) -> Result<(), TrapError> {
        let sh = &self.shared;
        sh.check_attached(slot)?;
        // Freed only once closed: an attach cannot take the slot before this close ran.
        let r = sh.command(OP_CLOSE_WINDOW, [u64::from(slot.0), 0, 0, 0, 0]);
        sh.windows().release(slot);
        r.map(drop)
    }

    /// Maps `len` bytes of the window in `slot` from `file_offset` at `gva` in the stub
    /// (`mmap(MAP_SHARED|MAP_FIXED)`, replacing whatever was there) with `prot`
    /// (`PROT_READ|PROT_WRITE|PROT_EXEC` bits; no `PROT_WRITE` for a read-only slot).
    ///
    /// # Errors
    /// [`TrapError::Invalid`] for an unaligned range or offset, one reaching `USER_END`, a slot
    /// that is not attached, or `PROT_WRITE` on a read-only slot; [`TrapError::Mapper`] if the
    /// stub's `mmap` failed (e.g. `EACCES`, `ENODEV`).
    pub fn map_window(
        &self,
        slot: WindowSlot,
        gva: u64,
        len: u64,
        file_offset: u64,
        prot: i32,
    ) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        if file_offset & 0xfff != 0 {
            return Err(TrapError::Invalid("unaligned offset"));
        }
        if prot & libc::PROT_WRITE != 0 && !slot.is_writable() {
            return Err(TrapError::Invalid("PROT_WRITE on a read-only window"));
        }
        self.shared.check_attached(slot)?;
        self.map_window_unchecked(slot, gva, len, file_offset, prot)
    }

    /// The mapper command of [`StubProcess::map_window`], without the holder's checks (tests
    /// use it to show that the stub's filter refuses what the holder would).
    pub(super) fn map_window_unchecked(
        &self,
        slot: WindowSlot,
        gva: u64,
        len: u64,
        file_offset: u64,
        prot: i32,
    ) -> Result<(), TrapError> {
        self.shared
            .command(
                OP_MAP_WINDOW,
                [gva, len, prot as u64, file_offset, u64::from(slot.0)],
            )
            .map(drop)
    }
}

/// A read-only open file of the same file as `fd`, through `/proc/self/fd` (`None` if this
/// process cannot open it, or what it opened is not the same file).
pub(super) fn reopen_read_only(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: a NUL-terminated path.
    let r = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
    };
    if r < 0 {
        tracing::debug!(
            err = %std::io::Error::last_os_error(),
            "trap: a read-only window keeps its writable descriptor"
        );
        return None;
    }
    // SAFETY: a new descriptor we own.
    let new = unsafe { OwnedFd::from_raw_fd(r) };
    let id = |f: BorrowedFd<'_>| {
        // SAFETY: a zeroed stat for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and stat buffer.
        (unsafe { libc::fstat(f.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    match (id(fd), id(new.as_fd())) {
        (Some(a), Some(b)) if a == b => Some(new),
        _ => None,
    }
}
