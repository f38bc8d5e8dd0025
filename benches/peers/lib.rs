//! Empty: the package exists for its `peers` example (see Cargo.toml).
