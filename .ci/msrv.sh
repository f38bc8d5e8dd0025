#!/usr/bin/env bash
# The crate on its rust-version (1.65): builds the library with every feature and runs its unit and
# integration tests with Rust 1.65, against .ci/msrv/Cargo.lock, a lockfile resolved for 1.65.
#
# It works on a copy of the package alone (no [workspace]: the benches' crates need newer
# compilers, and the workspace's Cargo.lock is a version 4 lockfile cargo 1.65 cannot read), with
# the dependencies vendored by the current cargo (cargo 1.65 reads crates.io only through the git
# index; the vendored copy needs no index at all).
#
# Usage: bash .ci/msrv.sh            build and test on 1.65
#        bash .ci/msrv.sh --update   re-resolve .ci/msrv/Cargo.lock (newest versions that declare
#                                    Rust 1.65 or older; cargo 1.84 or newer), then build and test
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
work=$root/target/msrv-copy
rm -rf "$work/src" "$work/tests"
mkdir -p "$work/papers" "$work/.cargo"
cp -r build.rs src tests README.md "$work/"
cp papers/design.md "$work/papers/"
# the package's manifest without the [workspace] table (the last one in the file)
awk '/^\[workspace\]$/ { exit } { print }' Cargo.toml >"$work/Cargo.toml"
# an empty [workspace] of its own: the copy lives under target/, inside the real workspace's
# directory, and cargo would otherwise take it for an unlisted member of that workspace and stop
printf '\n[workspace]\n' >>"$work/Cargo.toml"
cd "$work"
if [ "${1:-}" = "--update" ]; then
    rm -f Cargo.lock
    CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo generate-lockfile
    sed -i 's/^version = 4$/version = 3/' Cargo.lock # cargo 1.65 reads version 3
    cp Cargo.lock "$root/.ci/msrv/Cargo.lock"
else
    cp "$root/.ci/msrv/Cargo.lock" Cargo.lock
fi
rm -f .cargo/config.toml
cargo vendor --locked --versioned-dirs vendor >.cargo/config.toml.new
mv .cargo/config.toml.new .cargo/config.toml
rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1 || true
cargo +"$msrv" --version
cargo +"$msrv" build --lib --all-features --offline --locked
cargo +"$msrv" build --lib --offline --locked
cargo +"$msrv" test --lib --tests --offline --locked
