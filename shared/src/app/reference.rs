//! The configuration page of the docs site, `docs/reference/configuration.md`, made from the
//! settings' declaration ([`Variables`]): each variable's name, default and doc, in the order
//! declared. A test fails when the page is not the one this module makes:
//! `UPDATE_EXPECT=1 cargo test -p forewarn-shared --lib reference` writes it anew.

use std::fmt::Write;

use clap::CommandFactory;

use crate::app::settings::{FUNCTIONS, PLATFORM, Variables};

const HEADER: &str = "\
# Configuration

<!-- Generated from the declaration of shared/src/app/settings.rs: edit the doc comments there,
     then run `UPDATE_EXPECT=1 cargo test -p forewarn-shared --lib reference` to write this page. -->

forewarn is configured by environment variables: the stack sets them on the Lambda functions
(see [deploy](../deploy.md)), and the `forewarn` command reads the same ones, its flags
winning where given. Every variable is declared once, in `shared/src/app/settings.rs`.
";

const VALUES: &str = "\
## Values

A variable set blank (empty, or spaces) counts as unset, and takes its default; a list of
event kinds names none with `none`. A boolean takes `true`, `1`, `yes`, `on` and `false`, `0`,
`no`, `off`, in any case. A duration is a whole number of seconds or `90s`, `15m`, `1h30m`, `2d`,
at most 10 years. A bad value stops the function or the command with a message naming the
variable and the value (the webhook URL's host only: the URL is a secret). A retired variable
stops them too, naming its new home: see [Upgrade](../how-to/upgrade.md#retired-variables).
";

/// The page `docs/reference/configuration.md`.
pub fn configuration_page() -> String {
    let command = Variables::command();
    let mut page = String::from(HEADER);
    for (title, heading) in [
        ("## Variables", None),
        (
            &*format!("## {FUNCTIONS}\n\nThe command has flags for these."),
            Some(FUNCTIONS),
        ),
    ] {
        page.push_str(&format!(
            "\n{title}\n\n| variable | default | meaning |\n|---|---|---|\n"
        ));
        for arg in command
            .get_arguments()
            .filter(|a| a.get_help_heading() == heading)
        {
            let name = arg
                .get_env()
                .map(|e| e.to_string_lossy())
                .unwrap_or_default();
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|d| format!("`{}`", d.to_string_lossy()))
                .collect();
            let default = if default.is_empty() {
                "unset".into()
            } else {
                default.join(" ")
            };
            let meaning = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string().replace('\n', " "))
                .unwrap_or_default();
            let _ = writeln!(page, "| `{name}` | {default} | {meaning} |");
        }
    }
    page.push('\n');
    page.push_str(VALUES);
    page.push_str(
        "\n## The platform's variables\n\nforewarn reads these too; the AWS SDK and kube read \
         the rest of their own (`AWS_REGION`, `AWS_PROFILE`, `AWS_ENDPOINT_URL`, ...).\n\n\
         | variable | what forewarn makes of it |\n|---|---|\n",
    );
    for (name, meaning) in PLATFORM {
        let _ = writeln!(page, "| `{name}` | {meaning} |");
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/reference/configuration.md is the page this module makes.
    #[test]
    fn the_configuration_page_is_current() {
        expect_test::expect_file!["../../../docs/reference/configuration.md"]
            .assert_eq(&configuration_page());
    }
}
