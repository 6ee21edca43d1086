//! `forewarn key rotate`: a new continuation key, the current one kept as the previous (see
//! `forewarn::domain::keys::KeyRing`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use forewarn::app::settings::Settings;
use forewarn::app::wiring;
use forewarn::domain::keys::KeyRing;
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
    /// with the previous key is over: what the dropped key signed is refused. With the pool
    /// table, the key rotates in its secret (the key secret setting: the stack's).
    Rotate(RotateArgs),
}

#[derive(Args, Debug)]
struct RotateArgs {
    /// Rotate (writes the key's secret, or the embedded store). Without it: what it would do.
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
    let (choice, mode) = (
        args.store.choice(&settings),
        crate::mode(args.execute, true),
    );
    let store = wiring::store(&choice, mode, None, settings.aws, clock).await?;
    let at = store.location();
    let now = |keys: &KeyRing| match &keys.previous {
        None => format!("key {} is current", keys.current.id()),
        Some(p) => format!(
            "key {} is current, key {} still accepted",
            keys.current.id(),
            p.id()
        ),
    };
    let said = if !args.execute {
        let keys = store.reread_continuation_keys().await;
        match keys.with_context(|| format!("reading the continuation key of {at}"))? {
            None => "no continuation key yet; --execute creates key 1".to_string(),
            Some(keys) => {
                let (id, next) = (keys.current.id(), keys.current.id().saturating_add(1));
                let dropped = (keys.previous.as_ref()).map(|p| p.id());
                let dropped = dropped.map(|p| format!(" and no longer accepts key {p}"));
                let dropped = dropped.unwrap_or_default();
                let then = format!("--execute makes key {next} current, keeps key {id} accepted");
                format!("{}; {then}{dropped}", now(&keys))
            }
        }
    } else {
        let keys = store.rotate_continuation_key().await;
        now(&keys.with_context(|| format!("rotating the continuation key of {at}"))?)
    };
    writeln!(std::io::stdout().lock(), "{at}: {said}")?;
    Ok(ExitCode::SUCCESS)
}
