//! `torpor-dormant` is freestanding (`src/freestanding.rs`): its own `_start`, no C library,
//! a static executable at a fixed address (no loader, nothing to relocate).

fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo:rustc-link-arg-bin=torpor-dormant={arg}");
    }
}
