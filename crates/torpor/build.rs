//! Builds the program that `torpor demo` runs: `demo/hello.c`, compiled with
//! `cc -static -O2` into `$OUT_DIR/demo`, which `src/` embeds with
//! `include_bytes!(concat!(env!("OUT_DIR"), "/demo"))`.
//!
//! Needs a C compiler and a static C library (Debian: `gcc libc6-dev`). `CC`
//! overrides the compiler.

use std::env;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("demo");
    let src = manifest.join("demo").join("hello.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");

    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let result = Command::new(&cc)
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "torpor build: `{cc} -static -O2` failed to compile the demo program {}:\n{}\n\
             A static C library is needed: on Debian/Ubuntu, `apt-get install gcc libc6-dev`.",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "torpor build: C compiler `{cc}` not found; it is needed to build the demo program \
             {}. On Debian/Ubuntu: `apt-get install gcc libc6-dev` (or set CC).",
            src.display()
        ),
        Err(e) => panic!("torpor build: could not run `{cc}`: {e}"),
    }
}
