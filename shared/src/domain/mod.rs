//! The pure core: what events say, what is known and configured, what to do, and what the pool
//! table holds. Nothing here does I/O or imports from outside `domain/` (a test in
//! `shared/tests/architecture.rs` checks it).

pub mod admission;
pub mod audit;
pub mod budget;
pub mod clusters;
pub mod config;
pub mod cordon_record;
pub mod event;
pub mod expander;
pub mod facts;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod fold;
pub mod inbound;
pub mod keys;
pub mod names;
pub mod plan;
pub mod policy;
pub mod pool;
pub mod preflight;
pub mod priorities;
pub mod report;
pub mod retry;
#[cfg(test)]
mod robustness;
pub mod stats;
pub mod status;
pub mod surge;
pub mod sweep;
pub mod time;
pub mod traffic;
pub mod wayback;
