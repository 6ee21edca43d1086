//! No code: this crate only turns on dependency features (see its Cargo.toml), so that the
//! Lambda functions' build in scripts/test.sh resolves the same features as the workspace's tests
//! and reuses their build of every dependency.
