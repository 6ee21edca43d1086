//! Reading an event's fields into serde types, with errors that name them (their JSON path), and
//! the times in them checked against the time of receipt.

use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{DecodeError, EventKind, Origin, is_instance_id, parse_time};
use crate::domain::time::within_sane_range;

/// What an event's `detail` is read into: its kind (a detail may turn out unsupported), its
/// instances and its [`super::Detail`].
pub(crate) type Parsed = (EventKind, Vec<String>, super::Detail);

/// A detail forewarn does not handle, and `why`.
pub(crate) fn unsupported(why: String) -> Parsed {
    (
        EventKind::Unsupported,
        Vec::new(),
        super::Detail::Unsupported { why },
    )
}

/// Text that is not blank (kept as written).
#[derive(Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Text(pub(crate) String);

impl TryFrom<String> for Text {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Text, &'static str> {
        if s.trim().is_empty() {
            Err("must not be empty")
        } else {
            Ok(Text(s))
        }
    }
}

/// An EC2 instance id; surrounding whitespace is trimmed.
#[derive(Deserialize)]
#[serde(try_from = "Text")]
pub(crate) struct InstanceId(pub(crate) String);

impl TryFrom<Text> for InstanceId {
    type Error = String;
    fn try_from(Text(s): Text) -> Result<InstanceId, String> {
        let id = s.trim();
        if is_instance_id(id) {
            Ok(InstanceId(id.to_string()))
        } else {
            Err(format!(
                "`{id}` is not an EC2 instance id (i-0123456789abcdef0)"
            ))
        }
    }
}

/// A `T` read from an object (a mapping) alone: serde reads a struct from an array too, by
/// position.
pub(crate) struct Obj<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Obj<T>, D::Error> {
        struct Map<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Map<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(Map(PhantomData))
    }
}

/// Reads fields with errors that name the record and the field.
pub(crate) struct Fields<'a> {
    pub(crate) origin: &'a Origin,
    /// What times are checked against (see [`within_sane_range`]).
    pub(crate) now: DateTime<Utc>,
}

impl Fields<'_> {
    pub(crate) fn err(&self, field: &str, message: impl Into<String>) -> DecodeError {
        DecodeError::new(self.origin, Some(field), message)
    }

    /// `v` read as a `T`; an error names its field under `prefix` (`detail`, or `""` for the
    /// top), `$` for `v` itself.
    pub(crate) fn read<'v, T: Deserialize<'v>>(
        &self,
        v: &'v Value,
        prefix: &str,
    ) -> Result<T, DecodeError> {
        serde_path_to_error::deserialize(v).map_err(|e| {
            let (path, message) = plain(e, prefix, ["null", "an array", "an object"]);
            self.err(if path.is_empty() { "$" } else { &path }, message)
        })
    }

    /// An optional time, within 10 years of now.
    pub(crate) fn time(
        &self,
        raw: Option<&str>,
        path: &str,
    ) -> Result<Option<DateTime<Utc>>, DecodeError> {
        raw.map(|s| {
            let t = parse_time(s).ok_or_else(|| {
                self.err(path, format!("`{s}` is not an RFC 3339 or RFC 1123 time"))
            })?;
            within_sane_range(t, self.now).map_err(|m| self.err(path, m.to_string()))
        })
        .transpose()
    }

    /// The event time (`raw`, of field `key`). An empty one falls back to `received` (which
    /// must be within 10 years of now too); an unsupported event without one is dated at the
    /// epoch.
    pub(crate) fn event_time(
        &self,
        raw: Option<&str>,
        key: &str,
        kind: EventKind,
        received: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, DecodeError> {
        if raw.is_some_and(|s| s.trim().is_empty()) {
            return within_sane_range(received, self.now)
                .map_err(|m| self.err(key, format!("empty, and the time it falls back to, {m}")));
        }
        match self.time(raw, key)? {
            Some(t) => Ok(t),
            None if kind == EventKind::Unsupported => Ok(DateTime::<Utc>::UNIX_EPOCH),
            None => Err(self.err(key, "missing")),
        }
    }
}

/// The field a serde error names, under `prefix` (its path, a missing field's name included),
/// and its message in plain words (`words`: what null, a sequence and a map are called):
/// `expected a string, found a number`, `missing`, `unknown field (known: a, b)`.
pub(crate) fn plain<E: fmt::Display>(
    e: serde_path_to_error::Error<E>,
    prefix: &str,
    words: [&str; 3],
) -> (String, String) {
    let at = e.path().to_string();
    let mut path: Vec<&str> = [prefix, &at]
        .into_iter()
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let message = e.into_inner().to_string();
    let word = |w: &str| match w {
        "integer" | "floating" | "f64" => "a number".to_string(),
        "boolean" => "a boolean".to_string(),
        "string" | "string or map" => "a string".to_string(),
        "unit" => words[0].to_string(),
        "sequence" | "a sequence" => words[1].to_string(),
        "map" | "a map" => words[2].to_string(),
        "u32" => "a whole number".to_string(),
        other => other.to_string(),
    };
    let missing = (message.strip_prefix("missing field `")).and_then(|m| m.strip_suffix('`'));
    // An unknown field, or a name that is none of an enum's (`unknown variant`).
    let unknown = ["field", "variant"].into_iter().find_map(|what| {
        let m = message.strip_prefix(&format!("unknown {what} `"))?;
        let (given, known) = m.split_once("`, expected ")?;
        let known = known.trim_start_matches("one of ").replace("` or `", ", ");
        Some((what, given, known.replace('`', "")))
    });
    let invalid =
        (message.strip_prefix("invalid type: ")).and_then(|m| m.rsplit_once(", expected "));
    let message = match (missing, unknown, invalid) {
        (Some(name), _, _) => {
            path.push(name);
            "missing".to_string()
        }
        (_, Some(("field", _, known)), _) => format!("unknown field (known: {known})"),
        (_, Some((_, given, known)), _) => format!("`{given}` is not one of {known}"),
        (_, _, Some((found, expected))) => {
            let found = found.split([' ', '`']).next().unwrap_or_default();
            format!("expected {}, found {}", word(expected), word(found))
        }
        _ => message.clone(),
    };
    (path.join("."), message)
}
