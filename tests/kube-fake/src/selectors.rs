//! Label and field selectors, with the semantics of `k8s.io/apimachinery/pkg/labels`
//! and `.../pkg/fields`.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector, SelectorExt};
use serde_json::Value;

use crate::resources::ResourceDef;

/// A label selector: kube's [`Selector`], parsed from the `labelSelector` query (with the
/// API server's errors) or read from a `metav1.LabelSelector` object. Every expression must hold
/// (comma means AND). The set-based `>` and `<` of the query are not kube's, and are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Selector);

/// A label value, or the name part of a key: empty, or at most 63 of `[A-Za-z0-9-_.]`,
/// alphanumeric at both ends.
fn valid_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// A label key: a name, after an optional DNS subdomain prefix and `/`.
fn valid_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    !name.is_empty()
        && valid_value(name)
        && prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        })
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    format!("unable to parse requirement: unexpected ')' in {s:?}")
                })?;
            }
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!(
            "unable to parse requirement: unclosed '(' in {s:?}"
        ));
    }
    terms.push(&s[start..]);
    Ok(terms)
}

/// One term of the query (`k=v`, `k==v`, `k!=v`, `k in (…)`, `k notin (…)`, `k`, `!k`) as
/// kube's [`Expression`], its key and values checked.
fn parse_expression(term: &str) -> Result<Expression, String> {
    let term = term.trim();
    let bad = |why: &str| format!("unable to parse requirement: {why}: {term:?}");
    if term.is_empty() {
        return Err(bad("found '', expected: identifier"));
    }
    let key = |k: &str| k.trim().to_string();
    let expression = if let Some(k) = term.strip_prefix('!') {
        Expression::DoesNotExist(key(k))
    } else if let Some(open) = term.find('(') {
        let inner = term[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| bad("expected ')' at the end"))?;
        let values: BTreeSet<String> = inner.split(',').map(key).collect();
        if values.iter().all(String::is_empty) {
            return Err(bad(
                "for 'in', 'notin' operators, values set can't be empty",
            ));
        }
        match term[..open].trim().rsplit_once(char::is_whitespace) {
            Some((k, "in")) => Expression::In(key(k), values),
            Some((k, "notin")) => Expression::NotIn(key(k), values),
            _ => return Err(bad("expected 'in' or 'notin'")),
        }
    } else if let Some((k, v)) = term.split_once("!=") {
        Expression::NotEqual(key(k), key(v))
    } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        Expression::Equal(key(k), key(v))
    } else {
        Expression::Exists(key(term))
    };
    let (k, values): (&String, Vec<&String>) = match &expression {
        Expression::In(k, vs) | Expression::NotIn(k, vs) => (k, vs.iter().collect()),
        Expression::Equal(k, v) | Expression::NotEqual(k, v) => (k, vec![v]),
        Expression::Exists(k) | Expression::DoesNotExist(k) => (k, vec![]),
    };
    if !valid_key(k) {
        return Err(bad("invalid label key"));
    }
    if let Some(v) = values.into_iter().find(|v| !valid_value(v)) {
        return Err(bad(&format!("invalid label value {v:?}")));
    }
    Ok(expression)
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        split_terms(s)?
            .into_iter()
            .map(parse_expression)
            .collect::<Result<Selector, _>>()
            .map(Self)
    }

    /// Converts a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`); an `In` or
    /// `NotIn` without values is refused, as the API server refuses it.
    pub fn from_object(selector: &Value) -> Result<Self, String> {
        let expressions = selector.get("matchExpressions").and_then(Value::as_array);
        if expressions.into_iter().flatten().any(|e| {
            matches!(e["operator"].as_str(), Some("In" | "NotIn"))
                && string_list(e.get("values")).is_empty()
        }) {
            return Err("for 'in', 'notin' operators, values set can't be empty".into());
        }
        let object: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(selector.clone()).map_err(|e| e.to_string())?;
        Selector::try_from(object)
            .map(Self)
            .map_err(|e| e.to_string())
    }

    /// An empty selector selects everything (and, on a PDB, nothing).
    pub fn is_empty(&self) -> bool {
        self.0.selects_all()
    }

    /// Whether the labels of `obj` satisfy every requirement.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.is_empty() || self.0.matches(&string_map(at(obj, "/metadata/labels")))
    }
}

#[derive(Debug, Clone)]
struct FieldTerm {
    pointer: &'static str,
    default: &'static str,
    value: String,
    negate: bool,
}

/// A parsed field selector, resolved against one resource's supported fields.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// Splits on unescaped `sep`, keeping escapes for the later unescape.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            parts.last_mut().expect("never empty").push('\\');
            parts.last_mut().expect("never empty").push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts.last_mut().expect("never empty").push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl FieldSelector {
    /// Parses `fieldSelector` and checks every field is supported by `res`.
    /// The error is the message of the real server's `BadRequest`.
    pub fn parse(s: &str, res: &ResourceDef) -> Result<Self, String> {
        const DEFAULT: &[crate::resources::FieldLabel] = &[
            crate::resources::FieldLabel::new("metadata.name", "/metadata/name"),
            crate::resources::FieldLabel::new("metadata.namespace", "/metadata/namespace"),
        ];
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut terms = Vec::new();
        for raw in split_unescaped(s, ',') {
            let term = raw.trim();
            let (field, value, negate) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, false)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            let known = res.field_labels.unwrap_or(DEFAULT);
            let Some(label) = known.iter().find(|l| l.label == field) else {
                return Err(match res.field_labels {
                    Some(_) => format!("field label not supported: {field}"),
                    None => format!(
                        "\"{field}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    ),
                });
            };
            terms.push(FieldTerm {
                pointer: label.pointer,
                default: label.default,
                value: unescape(value),
                negate,
            });
        }
        Ok(Self { terms })
    }

    /// The value a term requires at `pointer` (`field=value` or `field==value`), if one does.
    pub fn equals(&self, pointer: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.pointer == pointer && !t.negate)
            .map(|t| t.value.as_str())
    }

    /// Whether `obj` satisfies every term.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let equal = match at(obj, t.pointer) {
                None | Some(Value::Null) => t.default == t.value,
                Some(Value::String(s)) => *s == t.value,
                Some(other) => {
                    // A bool or number as its JSON text ("true", "3").
                    let text = other.to_string();
                    text == t.value
                }
            };
            equal != t.negate
        })
    }
}

/// `obj.pointer(pointer)` for a pointer without escapes (`~`), without the allocations of
/// `Value::pointer`: selectors are matched against every object of a kind on each list, which
/// at thousands of pods made most of the fake's time.
fn at<'v>(obj: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.contains('~') {
        return obj.pointer(pointer);
    }
    pointer
        .split('/')
        .skip(1)
        .try_fold(obj, |v, token| match v {
            Value::Object(m) => m.get(token),
            Value::Array(a) => token.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        })
}

/// The strings of a JSON array (other items skipped); empty when it is not one.
pub(crate) fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The entries of a JSON object of strings (a value that is not a string reads as ""); empty
/// when it is not one.
pub(crate) fn string_map<C: FromIterator<(String, String)> + Default>(v: Option<&Value>) -> C {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    fn res(kind: &str, group: &str) -> ResourceDef {
        builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind && r.group == group)
            .unwrap()
    }

    #[test]
    fn equality_and_set_based_label_selectors() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (db, web)", true),
            ("app notin (web)", false),
            ("app notin (db)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("app in (web),!missing,tier", true),
        ] {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches_object(&p), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selectors_are_rejected() {
        for sel in ["app in ()", "app in (a", "=x", "app in x)", "a b"] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn label_selector_objects_combine_labels_and_expressions() {
        let s = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]
        }))
        .unwrap();
        assert!(s.matches_object(&pod(json!({"app": "web", "tier": "front"}))));
        assert!(!s.matches_object(&pod(json!({"app": "web", "tier": "back"}))));
        assert!(LabelSelector::from_object(&json!({})).unwrap().is_empty());
    }

    #[test]
    fn pod_field_selectors() {
        let pods = res("Pod", "");
        let p = pod(json!({}));
        for (sel, want) in [
            ("spec.nodeName=n1", true),
            ("spec.nodeName==n2", false),
            ("spec.nodeName!=n2", true),
            ("status.phase=Running,metadata.namespace=ns", true),
            ("spec.hostNetwork=false", true),
            ("spec.schedulerName=", true),
        ] {
            let s = FieldSelector::parse(sel, &pods).unwrap();
            assert_eq!(s.matches_object(&p), want, "{sel}");
        }
    }

    #[test]
    fn unsupported_fields_use_the_type_specific_message() {
        let err = FieldSelector::parse("spec.foo=x", &res("Pod", "")).unwrap_err();
        assert_eq!(err, "field label not supported: spec.foo");
        let err =
            FieldSelector::parse("spec.foo=x", &res("NodeClaim", "karpenter.sh")).unwrap_err();
        assert_eq!(
            err,
            "\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert!(FieldSelector::parse("nonsense", &res("Pod", "")).is_err());
    }
}
