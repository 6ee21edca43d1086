//! Configuration text, read one way everywhere: every variable (and every flag that stands for
//! one) goes through [`Vars`], a lookup in which a value is trimmed and a blank one is unset, and
//! through the one parser of its type — [`parse_bool`] for every boolean, [`parse_duration`] for
//! every duration. A bad value is a [`ConfigError`] naming the variable, the value and what is
//! wrong with it.
//!
//! Nothing here reads the environment: a lookup stands for it (`crate::app::settings` passes the
//! process's, tests a map).

use std::fmt::Display;

use chrono::Duration;

use crate::domain::time::{SANE_YEARS, sane_duration};

/// A bad configuration value: which variable, what value, what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration {variable}={value:?}: {message}")]
pub struct ConfigError {
    pub variable: String,
    pub value: String,
    pub message: String,
}

impl ConfigError {
    /// `variable`'s `value` is bad: `problem` says why.
    pub fn new(variable: &str, value: &str, problem: impl Display) -> ConfigError {
        ConfigError {
            variable: variable.to_string(),
            value: value.to_string(),
            message: problem.to_string(),
        }
    }
}

/// The words that mean true, in any case.
pub const TRUE_WORDS: &[&str] = &["true", "1", "yes", "on"];
/// The words that mean false, in any case.
pub const FALSE_WORDS: &[&str] = &["false", "0", "no", "off"];

/// Text that is not a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a boolean (true or false, 1 or 0, yes or no, on or off)")]
pub struct NotABool(pub String);

/// The one boolean parser: `true`, `1`, `yes`, `on` and `false`, `0`, `no`, `off`, in any case,
/// around spaces ignored.
pub fn parse_bool(s: &str) -> Result<bool, NotABool> {
    let word = s.trim().to_ascii_lowercase();
    if TRUE_WORDS.contains(&word.as_str()) {
        Ok(true)
    } else if FALSE_WORDS.contains(&word.as_str()) {
        Ok(false)
    } else {
        Err(NotABool(s.trim().to_string()))
    }
}

/// Text that is not a duration forewarn takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadDuration {
    #[error("`{0}` is not a duration (e.g. 90s, 15m, 1h, 1h30m)")]
    NotADuration(String),
    #[error("`{0}` is longer than {SANE_YEARS} years, the longest duration taken")]
    TooLong(String),
}

/// The one duration parser: `90`, `90s`, `15m`, `1h`, `1h30m`, `2d`, at most 10 years
/// ([`crate::domain::time::SANE_YEARS`]), so that a time plus a configured duration cannot
/// overflow. An error names the value.
pub fn parse_duration(s: &str) -> Result<Duration, BadDuration> {
    let s = s.trim();
    let err = || BadDuration::NotADuration(s.to_string());
    let too_long = || BadDuration::TooLong(s.to_string());
    if s.is_empty() {
        return Err(err());
    }
    let total: i64 = if let Ok(secs) = s.parse::<i64>() {
        secs
    } else {
        let mut total: i64 = 0;
        let mut number = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let n: i64 = number.parse().map_err(|_| err())?;
            number.clear();
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => return Err(err()),
            };
            total = n
                .checked_mul(unit)
                .and_then(|x| total.checked_add(x))
                .ok_or_else(too_long)?;
        }
        if !number.is_empty() {
            return Err(err());
        }
        total
    };
    if total < 0 {
        return Err(err());
    }
    // `try_seconds` refuses what a `Duration` cannot hold (more than i64::MAX milliseconds),
    // where `Duration::seconds` would panic.
    let d = Duration::try_seconds(total).ok_or_else(too_long)?;
    sane_duration(d).map_err(|_| too_long())
}

/// [`parse_duration`], as a `std` duration (what timers take).
pub fn parse_std_duration(s: &str) -> Result<std::time::Duration, BadDuration> {
    // Never negative, so always a `std` duration.
    parse_duration(s).map(|d| d.to_std().unwrap_or_default())
}

/// The variables of one lookup, read the one way: a value is trimmed, and a blank one (empty or
/// spaces) is unset.
#[derive(Clone, Copy)]
pub struct Vars<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Vars<'a> {
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Vars<'a> {
        Vars { lookup }
    }

    /// The value of `name`, trimmed; `None` when it is unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// Whether `name` has a value that is not blank.
    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The value of `name` whenever it is set, blank or not: for the lists in which an empty
    /// value means "none" rather than "the default" (`FOREWARN_DELETE_OWNED_ON=`).
    pub fn get_or_blank(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }

    /// `name` read by `parse` (given the trimmed value), or `None` when it is unset or blank; an
    /// error names the variable and its value.
    pub fn parse<T, E: Display>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name)
            .map(|v| parse(&v).map_err(|e| ConfigError::new(name, &v, e)))
            .transpose()
    }

    /// A boolean ([`parse_bool`]), or `None` when unset.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        self.parse(name, parse_bool)
    }

    /// A duration ([`parse_duration`]), or `None` when unset.
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        self.parse(name, parse_duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with<R>(vars: &[(&str, &str)], read: impl FnOnce(Vars) -> R) -> R {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |name: &str| map.get(name).cloned();
        read(Vars::new(&lookup))
    }

    #[test]
    fn blank_is_unset_and_values_are_trimmed() {
        with(&[("A", ""), ("B", "  \t"), ("C", " x ")], |vars| {
            assert_eq!(vars.get("A"), None);
            assert_eq!(vars.get("B"), None);
            assert_eq!(vars.get("C").as_deref(), Some("x"));
            assert_eq!(vars.get("UNSET"), None);
            assert!(!vars.is_set("B"));
            assert!(vars.is_set("C"));
            assert_eq!(vars.boolean("A"), Ok(None));
            assert_eq!(vars.duration("B"), Ok(None));
            // Blank, but set: for the lists whose empty value means none.
            assert_eq!(vars.get_or_blank("A").as_deref(), Some(""));
            assert_eq!(vars.get_or_blank("UNSET"), None);
        });
    }

    #[test]
    fn every_boolean_word_in_any_case() {
        for word in TRUE_WORDS {
            for form in [word.to_string(), word.to_uppercase(), format!(" {word} ")] {
                assert_eq!(parse_bool(&form), Ok(true), "{form}");
            }
        }
        for word in FALSE_WORDS {
            for form in [word.to_string(), word.to_uppercase(), format!(" {word} ")] {
                assert_eq!(parse_bool(&form), Ok(false), "{form}");
            }
        }
        assert_eq!(parse_bool("Yes"), Ok(true));
        assert_eq!(parse_bool("oFF"), Ok(false));
        for bad in ["", "maybe", "y", "n", "2", "truee", "yes please"] {
            assert_eq!(
                parse_bool(bad),
                Err(NotABool(bad.trim().to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_values_name_the_variable_and_the_value() {
        with(
            &[("FLAG", " maybe "), ("WAIT", "soon"), ("LONG", "3654d")],
            |vars| {
                let e = vars.boolean("FLAG").unwrap_err();
                assert_eq!(e.variable, "FLAG");
                assert_eq!(e.value, "maybe");
                assert_eq!(
                    e.to_string(),
                    "configuration FLAG=\"maybe\": `maybe` is not a boolean (true or false, 1 \
                     or 0, yes or no, on or off)"
                );
                let e = vars.duration("WAIT").unwrap_err();
                assert_eq!(
                    e.to_string(),
                    "configuration WAIT=\"soon\": `soon` is not a duration (e.g. 90s, 15m, 1h, \
                     1h30m)"
                );
                let e = vars.duration("LONG").unwrap_err();
                assert_eq!(
                    e.message,
                    "`3654d` is longer than 10 years, the longest duration taken"
                );
            },
        );
    }

    #[test]
    fn parse_reads_set_values_only() {
        with(&[("N", " 42 "), ("BAD", "x")], |vars| {
            assert_eq!(vars.parse("N", str::parse::<u32>), Ok(Some(42)));
            assert_eq!(vars.parse("UNSET", str::parse::<u32>), Ok(None));
            let e = vars.parse("BAD", str::parse::<u32>).unwrap_err();
            assert_eq!((e.variable.as_str(), e.value.as_str()), ("BAD", "x"));
        });
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::seconds(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::minutes(15));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_duration("2d").unwrap(), Duration::days(2));
        for bad in ["", "m", "1x", "-5", "1h30", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("3650d").unwrap(), Duration::days(3650));
        assert_eq!(
            parse_std_duration("3s").unwrap(),
            std::time::Duration::from_secs(3)
        );
    }

    #[test]
    fn huge_durations_are_errors_naming_the_value_not_panics() {
        // Found in review: a whole number of seconds past i64::MAX / 1000 panicked.
        for huge in [
            "9223372036854775807",
            "9223372036854776",
            "9223372036854775807s",
            "106751991167301d",
            "3654d",
            "315619201",
            "1d9223372036854775807s",
        ] {
            let e = parse_duration(huge).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("`{huge}` is longer than 10 years, the longest duration taken")
            );
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_duration_never_panics_and_stays_sane(
                s in prop_oneof![
                    "[0-9]{0,22}",
                    "([0-9]{0,20}[smhd]){0,4}",
                    any::<i64>().prop_map(|n| n.to_string()),
                    ".{0,24}",
                ]
            ) {
                if let Ok(d) = parse_duration(&s) {
                    prop_assert!(d >= Duration::zero());
                    prop_assert!(d <= crate::domain::time::sane_span());
                }
            }
        }
    }
}
