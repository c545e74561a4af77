//! The dormant process (`torpor-dormant`, issue 30; design in `docs/design/dormant.md`): what
//! a dormant sandbox is while nothing asks for it. One thread, no VM, no guest memory, holding
//! only what the outside world sees: the sandbox's control socket and the descriptors it
//! watches (published listening sockets, kept connections). It answers the read-only control
//! verbs (`state`, `stats`) from the status file written when the sandbox went dormant, and
//! on anything else (a connection or data on a watched descriptor, any other verb) it ends by
//! `execve` of its wake command, which inherits every descriptor (the waiting connection
//! still in its listener's queue, the waiting request still unread in its control connection).
//!
//! The program is freestanding on purpose: no C library, no allocator, static buffers, its
//! host calls made directly ([`sys`]). A dormant sandbox's host memory is this process's
//! private pages and page tables, one of them per sandbox: the full `torpor` binary costs
//! about 0.8 MiB of private pages once started (most of it relocations), a small Rust program
//! on the C library about 136 KiB (the loader's, the library's and its own relocated data, a
//! heap), this one a few pages (see the design).

#![no_std]

pub mod args;
pub mod json;
pub mod reclaim;
pub mod serve;
pub mod sys;
