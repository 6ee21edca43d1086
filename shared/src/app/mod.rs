//! The application: the pipeline that takes records through facts, plans, actions and the pool
//! store; the Lambda handler and the sweeper built on it; telemetry; the settings read from the
//! environment and the wiring that builds the services from them.

pub mod audit;
pub mod blocks;
pub mod fleet;
pub mod handler;
pub mod leaving;
pub mod pipeline;
pub mod policy;
pub mod preflight;
pub mod priorities;
#[cfg(test)]
mod reference;
pub mod settings;
pub mod sweeper;
pub mod telemetry;
pub mod upkeep;
pub mod wayback;
pub mod wiring;
