//! The command-line reference, `docs/reference/cli.md`: made from the command's clap definition
//! by `clap-markdown`, so that the page says what `forewarn --help` says. The test fails when the
//! page is not the one the code makes: `FOREWARN_BLESS=1 cargo test -p forewarn-cli --bin
//! forewarn reference` writes it anew.

use clap::CommandFactory;

/// The page `docs/reference/cli.md`.
fn cli_page() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("Command-line reference".to_string())
        .show_footer(false);
    let help = clap_markdown::help_markdown_command_custom(&super::Cli::command(), &options);
    format!(
        "<!-- Generated from the clap definition of the `forewarn` command (cli/src/): run\n     \
         `FOREWARN_BLESS=1 cargo test -p forewarn-cli --bin forewarn reference` to write this \
         page. -->\n\n{help}"
    )
}

#[test]
fn the_cli_page_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference/cli.md");
    let bless = "cargo test -p forewarn-cli --bin forewarn reference";
    if let Err(e) = forewarn::app::reference::check_generated_page(path, &cli_page(), bless) {
        panic!("{e}");
    }
}
