//! Probes the compiler, as `autocfg` users do, for what the crate uses where it exists but does
//! not need: `cfg(ranklocal_diagnostic)` when `#[diagnostic::on_unimplemented]` is there (Rust
//! 1.78), so the `SyncValue` and `rank_local!` notes show on compilers that have it while the
//! crate still builds on its `rust-version`, 1.65; and `cfg(ranklocal_do_not_recommend)` when
//! `#[diagnostic::do_not_recommend]` is (Rust 1.85), so that those notes also show for a struct
//! that holds a `Cell` (without it the compiler reports the field's own `Sync` error, std's).
//! Also sets `cfg(ranklocal_loom)` for a loom build (below).

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let minor = minor();
    if minor.map_or(false, |m| m >= 78) {
        println!("cargo:rustc-cfg=ranklocal_diagnostic");
    }
    if minor.map_or(false, |m| m >= 85) {
        println!("cargo:rustc-cfg=ranklocal_do_not_recommend");
    }
    // The crate builds on loom's primitives only with both `--cfg loom` (which RUSTFLAGS gives
    // every crate of the build) and its `loom` feature (which brings loom in): the sources test
    // `cfg(ranklocal_loom)`, so that `--cfg loom` alone fails with the one error src/lib.rs
    // states, not with every use of the missing crate.
    if env::var_os("CARGO_CFG_LOOM").is_some() && env::var_os("CARGO_FEATURE_LOOM").is_some() {
        println!("cargo:rustc-cfg=ranklocal_loom");
    }
}

/// The minor version of the `rustc` cargo builds with (`rustc 1.NN.P ...`), if it can be read.
fn minor() -> Option<u32> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let version = String::from_utf8(out.stdout).ok()?;
    let mut parts = version.split_whitespace().nth(1)?.split('.');
    if parts.next()? != "1" {
        return None;
    }
    parts.next()?.parse().ok()
}
