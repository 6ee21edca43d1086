//! The string forms of the domain's enums are derived (`strum`); this parses one back, with an
//! error that lists the names accepted.

use strum::VariantArray;

/// A name that is none of a type's: "`s` is not `what` (the names)".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not {what} ({})", .names.join(", "))]
pub struct UnknownName {
    /// The name given.
    pub given: String,
    /// What it should have named (`an action`).
    pub what: &'static str,
    /// The names taken.
    pub names: Vec<&'static str>,
}

/// The variant of `T` named `s` (its `strum` name), or "`s` is not `what` (the names)".
pub fn parse_name<T>(s: &str, what: &'static str) -> Result<T, UnknownName>
where
    T: VariantArray + Copy + Into<&'static str>,
{
    let name = |v: &T| -> &'static str { (*v).into() };
    T::VARIANTS
        .iter()
        .find(|v| name(v) == s)
        .copied()
        .ok_or_else(|| UnknownName {
            given: s.to_string(),
            what,
            names: T::VARIANTS.iter().map(name).collect(),
        })
}

/// FNV-1a, 64 bits, of `bytes`: a hash stable across builds and platforms (unlike std's
/// hasher), for the names and ids derived from text.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Gives `$ty`, an enum deriving `strum::IntoStaticStr` and `strum::VariantArray`, an `as_str`
/// (its `strum` name) and a `FromStr` through [`parse_name`] that calls it `$what` in its errors;
/// with `trim`, the input is trimmed first.
macro_rules! string_forms {
    ($ty:ty, $what:literal $(, $trim:ident)?) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::domain::names::UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::domain::names::parse_name(s $(.$trim())?, $what)
            }
        }
    };
}
pub(crate) use string_forms;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
    #[strum(serialize_all = "kebab-case")]
    enum Kind {
        Spot,
        OnDemand,
    }

    #[test]
    fn parses_a_name_or_lists_the_names() {
        assert_eq!(
            parse_name::<Kind>("on-demand", "a kind"),
            Ok(Kind::OnDemand)
        );
        assert_eq!(
            parse_name::<Kind>("Spot", "a kind")
                .unwrap_err()
                .to_string(),
            "`Spot` is not a kind (spot, on-demand)"
        );
    }
}
