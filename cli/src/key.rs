//! `forewarn key rotate`: a new continuation key, the current one kept as the previous (see
//! `forewarn::domain::keys::KeyRing`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use forewarn::app::settings::Settings;
use forewarn::app::wiring;
use forewarn::domain::config::Mode;
use forewarn::ports::Clock;

use crate::StoreArgs;

#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(subcommand)]
    command: KeyCommand,
}

#[derive(Subcommand, Debug)]
enum KeyCommand {
    /// Rotate the continuation key: a new current key signs from now on; the current one stays
    /// accepted as the previous (drains in flight and cordon records signed with it still
    /// verify); the previous one is no longer accepted.
    ///
    /// Without --execute nothing is changed: it says which key would become which. Running
    /// processes take the new key within 5 minutes, or at once when they meet its id. Rotate
    /// again only once every drain (its timeout) and every cordon record signed
    /// with the previous key is over: what the dropped key signed is refused. With
    /// the key secret setting (the stack's secret), the key rotates there, and the pool table's
    /// older key item, if any, is erased.
    Rotate(RotateArgs),
}

#[derive(Args, Debug)]
struct RotateArgs {
    /// Rotate (writes the key's secret, the table or the embedded store). Without it: what it
    /// would do.
    #[arg(long)]
    execute: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(
    args: KeyArgs,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<ExitCode> {
    let KeyCommand::Rotate(args) = args.command;
    let choice = args.store.choice(&settings);
    let mode = if args.execute {
        Mode::Act
    } else {
        Mode::DryRun
    };
    let store = wiring::store(&choice, mode, None, settings.aws, clock).await?;
    let mut out = std::io::stdout().lock();
    if !args.execute {
        let keys = store
            .reread_continuation_keys()
            .await
            .with_context(|| format!("reading the continuation key of {}", store.location()))?;
        match keys {
            None => writeln!(
                out,
                "{}: no continuation key yet; --execute creates key 1",
                store.location()
            )?,
            Some(keys) => writeln!(
                out,
                "{}: the current key is {}{}; --execute makes key {} current, keeps key {} \
                 accepted{}",
                store.location(),
                keys.current.id(),
                keys.previous
                    .as_ref()
                    .map(|p| format!(" (key {} is also accepted)", p.id()))
                    .unwrap_or_default(),
                keys.current.id().saturating_add(1),
                keys.current.id(),
                keys.previous
                    .as_ref()
                    .map(|p| format!(" and no longer accepts key {}", p.id()))
                    .unwrap_or_default(),
            )?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let keys = store
        .rotate_continuation_key()
        .await
        .with_context(|| format!("rotating the continuation key of {}", store.location()))?;
    writeln!(
        out,
        "{}: key {} is current{}",
        store.location(),
        keys.current.id(),
        keys.previous
            .as_ref()
            .map(|p| format!(", key {} still accepted", p.id()))
            .unwrap_or_default(),
    )?;
    Ok(ExitCode::SUCCESS)
}
