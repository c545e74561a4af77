//! The torpor runtime as a library: everything the `torpor` command does, for the command
//! itself (`main.rs` only parses and dispatches), the benchmarks (`crates/bench`, the
//! `torpor-bench` command) and the fuzz targets (`fuzz/`).
//!
//! | Module | Job |
//! |---|---|
//! | [`cli`] | the command line's syntax |
//! | [`run`], [`demo`] | `torpor run`, `torpor demo`: one sandbox in the foreground |
//! | [`daemon`] | the holder: builds a sandbox, serves its control socket, runs its task |
//! | [`control`], [`verbs`], [`overview`] | the control socket and the verbs that use it |
//! | [`keepalive`] | the keep-alive policy (hibernate after an idle time, memory floor) |
//! | [`dormancy`] | dormant sandboxes: a holder's exec into `torpor-dormant` and its wake in place |
//! | [`snapshot`] | checkpoint, restore and clone |
//! | [`fork`] | `torpor fork`: a new instance of a live sandbox, from its fork image |
//! | [`oci`], [`console`] | the OCI runtime command line (podman, containerd) and its terminal |
//! | [`statedir`], [`ready`], [`janitor`] | state directories, readiness pipes, clean-up |
//! | [`broker`], [`fdpass`] | the file broker of a root holder, descriptor passing |
//! | [`confine`], [`cowroot`], [`treecopy`], [`netns`], [`user`] | confinement, the copy-on-write root and copies of its layers, network namespaces, `--user` |
//! | [`platforms`], [`procfs`], [`units`], [`logging`] | platform choice, host /proc, units, logs |
//! | [`program`] | the program a command line names in a root (PATH search) |

pub mod attach;
pub mod broker;
pub mod cli;
pub mod confine;
pub mod console;
pub mod control;
pub mod cowroot;
pub mod daemon;
pub mod demo;
pub mod dormancy;
pub mod fdpass;
pub mod fork;
pub mod janitor;
pub mod keepalive;
pub mod logging;
pub mod netns;
pub mod oci;
pub mod overview;
pub mod platforms;
pub mod procfs;
pub mod program;
pub mod ready;
pub mod run;
pub mod snapshot;
pub mod statedir;
pub mod treecopy;
pub mod units;
pub mod user;
pub mod verbs;
