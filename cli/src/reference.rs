//! The command-line reference, `docs/reference/cli.md`: made from the command's clap definition
//! by `clap-markdown`, so that the page says what `forewarn --help` says. The test fails when the
//! page is not the one the code makes: `UPDATE_EXPECT=1 cargo test -p forewarn-cli --bin
//! forewarn reference` writes it anew.

/// The page `docs/reference/cli.md`.
fn cli_page() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("Command-line reference".to_string())
        .show_footer(false);
    let help = clap_markdown::help_markdown_command_custom(&super::command(), &options);
    format!(
        "<!-- Generated from the clap definition of the `forewarn` command (cli/src/): run\n     \
         `UPDATE_EXPECT=1 cargo test -p forewarn-cli --bin forewarn reference` to write this \
         page. -->\n\n{help}"
    )
}

#[test]
fn the_cli_page_is_current() {
    expect_test::expect_file!["../../docs/reference/cli.md"].assert_eq(&cli_page());
}
