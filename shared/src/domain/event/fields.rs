//! Reading an event's fields with errors that name them (their JSON path), and the times in
//! them checked against the time of receipt.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{DecodeError, EventKind, Origin, is_instance_id, parse_time};
use crate::domain::time::within_sane_range;

/// What an event's `detail` is read into: its kind (a detail may turn out unsupported), its
/// instances and its [`super::Detail`].
pub(crate) type Parsed = (EventKind, Vec<String>, super::Detail);

/// What a JSON value is, for messages (`a string`, `an object`, ...).
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field access with errors that name the field.
pub(crate) struct Fields<'a> {
    pub(crate) origin: &'a Origin,
    /// What times are checked against (see [`within_sane_range`]).
    pub(crate) now: DateTime<Utc>,
}

impl<'a> Fields<'a> {
    pub(crate) fn err(&self, field: &str, message: impl Into<String>) -> DecodeError {
        DecodeError {
            origin: self.origin.clone(),
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// An optional string: absent or null is `None`, any other non-string is an error.
    pub(crate) fn opt_str<'v>(
        &self,
        v: &'v Value,
        key: &str,
        path: &str,
    ) -> Result<Option<&'v str>, DecodeError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(
                path,
                format!("expected a string, found {}", json_type(other)),
            )),
        }
    }

    pub(crate) fn req_str<'v>(
        &self,
        v: &'v Value,
        key: &str,
        path: &str,
    ) -> Result<&'v str, DecodeError> {
        match self.opt_str(v, key, path)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(self.err(path, "must not be empty")),
            None => Err(self.err(path, "missing")),
        }
    }

    /// An instance id; surrounding whitespace is trimmed.
    pub(crate) fn instance_id(
        &self,
        v: &Value,
        key: &str,
        path: &str,
    ) -> Result<String, DecodeError> {
        let id = self.req_str(v, key, path)?.trim();
        if is_instance_id(id) {
            Ok(id.to_string())
        } else {
            Err(self.err(
                path,
                format!("`{id}` is not an EC2 instance id (i-0123456789abcdef0)"),
            ))
        }
    }

    /// An optional time, within 10 years of now.
    pub(crate) fn time(
        &self,
        v: &Value,
        key: &str,
        path: &str,
    ) -> Result<Option<DateTime<Utc>>, DecodeError> {
        match self.opt_str(v, key, path)? {
            None => Ok(None),
            Some(s) => {
                let t = parse_time(s).ok_or_else(|| {
                    self.err(path, format!("`{s}` is not an RFC 3339 or RFC 1123 time"))
                })?;
                within_sane_range(t, self.now)
                    .map(Some)
                    .map_err(|m| self.err(path, m.to_string()))
            }
        }
    }

    /// An optional time where an empty string means absent (there is a fallback).
    pub(crate) fn time_or_empty(
        &self,
        v: &Value,
        key: &str,
        path: &str,
    ) -> Result<Option<DateTime<Utc>>, DecodeError> {
        match self.opt_str(v, key, path)? {
            Some(s) if s.trim().is_empty() => Ok(None),
            _ => self.time(v, key, path),
        }
    }

    /// The event time (field `key`). An empty one falls back to `received` (which must be within
    /// 10 years of now too); an unsupported event without one is dated at the epoch.
    pub(crate) fn event_time(
        &self,
        v: &Value,
        key: &str,
        kind: EventKind,
        received: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, DecodeError> {
        if self
            .opt_str(v, key, key)?
            .is_some_and(|s| s.trim().is_empty())
        {
            return within_sane_range(received, self.now)
                .map_err(|m| self.err(key, format!("empty, and the time it falls back to, {m}")));
        }
        match self.time(v, key, key)? {
            Some(t) => Ok(t),
            None if kind == EventKind::Unsupported => Ok(DateTime::<Utc>::UNIX_EPOCH),
            None => Err(self.err(key, "missing")),
        }
    }
}
