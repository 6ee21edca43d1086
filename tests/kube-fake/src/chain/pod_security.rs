//! The `PodSecurity` admission plugin (`plugin/pkg/admission/security/podsecurity`, the library
//! `staging/src/k8s.io/pod-security-admission`): the namespace's
//! `pod-security.kubernetes.io/enforce` and `enforce-version` labels choose a level and a
//! version (`api.PolicyToEvaluate`: no labels is the default `privileged:latest`; an invalid
//! level means `restricted`, an invalid version `latest`), and a pod violating it is refused
//! with the message `admission/admission.go` builds: `pods "NAME" is forbidden: violates
//! PodSecurity "restricted:latest": <reason> (<detail>), ...`, each check's `ForbiddenReason`
//! and `ForbiddenDetail` worded as in `policy/check_*.go`, aggregated as
//! `policy.AggregateCheckResults` does.
//!
//! The checks run in the registry's order (`policy/registry.go`): the baseline checks in the
//! order their files register them, then, for `restricted`, the restricted checks, each
//! baseline check a restricted one overrides at that version left out (`capabilities_baseline`
//! by `capabilities_restricted` from 1.22, `hostPathVolumes` by `restrictedVolumes`,
//! `seccompProfile_baseline` by `seccompProfile_restricted` from 1.19). A version label picks
//! each check's implementation for that version (`runAsUser` from 1.23,
//! `capabilities_restricted` from 1.22, the sysctls allowed growing in 1.27, 1.29 and 1.32, the
//! Windows exemptions from 1.25, ...); versions past the newest check are `latest`.
//!
//! Not modelled: exemptions (usernames, runtime classes, namespaces: none are configured by
//! default), the `audit` and `warn` modes, the user-namespace relaxations (opt-in upstream),
//! the `hostProbesAndhostLifecycle` check of 1.34, and the field form of the AppArmor check
//! (`securityContext.appArmorProfile`), of which only the annotation form is checked.

use std::collections::BTreeSet;

use serde_json::Value;

/// The newest version any check has an implementation for.
const NEWEST_MINOR: u32 = 34;

/// A Pod Security level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Privileged,
    Baseline,
    Restricted,
}

/// The level and version to enforce (`version`: the minor of `v1.<minor>`; `None` is latest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub level: Level,
    pub version: Option<u32>,
}

impl Policy {
    /// `api.PolicyToEvaluate` on a namespace's labels, for `enforce`.
    pub fn from_labels(labels: Option<&Value>) -> Self {
        let label = |key: &str| {
            labels
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let level = match label("pod-security.kubernetes.io/enforce").as_deref() {
            None | Some("privileged") => Level::Privileged,
            Some("baseline") => Level::Baseline,
            Some(_) => Level::Restricted,
        };
        let version = label("pod-security.kubernetes.io/enforce-version")
            .and_then(|v| parse_version(&v))
            .unwrap_or(None);
        Self { level, version }
    }

    /// `restricted:latest`, `baseline:v1.30`.
    pub fn render(&self) -> String {
        let level = match self.level {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        };
        match self.version {
            None => format!("{level}:latest"),
            Some(minor) => format!("{level}:v1.{minor}"),
        }
    }
}

/// `api.ParseVersion`: `latest` or `v1.<minor>`; `None` when invalid.
fn parse_version(v: &str) -> Option<Option<u32>> {
    if v == "latest" {
        return Some(None);
    }
    let minor = v.strip_prefix("v1.")?;
    if minor.is_empty() || (minor.len() > 1 && minor.starts_with('0')) {
        return None;
    }
    minor.parse::<u32>().ok().map(Some)
}

/// One failed check: `ForbiddenReason` and `ForbiddenDetail`.
type Violation = Option<(String, String)>;

fn violation(reason: &str, detail: String) -> Violation {
    Some((reason.to_string(), detail))
}

/// `joinQuote`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", items.join("\", \""))
}

/// `pluralize`.
fn plural<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `<container|containers> "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

/// `visitContainers`: init containers, containers, ephemeral containers.
fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect()
}

fn name(c: &Value) -> String {
    c.get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn sc<'a>(c: &'a Value, field: &str) -> Option<&'a Value> {
    c.get("securityContext")
        .and_then(|s| s.get(field))
        .filter(|v| !v.is_null())
}

fn is_windows(spec: &Value) -> bool {
    spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
}

fn allow_privilege_escalation(_: &Value, spec: &Value, minor: u32) -> Violation {
    if minor < 8 || (minor >= 25 && is_windows(spec)) {
        return None;
    }
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn app_armor_profile(meta: &Value, _: &Value, _: u32) -> Violation {
    let mut bad: Vec<String> = meta
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("container.apparmor.security.beta.kubernetes.io/"))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let allowed = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!allowed).then(|| format!("{k}={}", Value::String(v.to_string())))
        })
        .collect();
    bad.sort();
    if bad.is_empty() {
        return None;
    }
    violation(
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            bad.len(),
        ),
        bad.join(", "),
    )
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(c: &Value) -> Vec<String> {
    sc(c, "capabilities")
        .and_then(|caps| caps.get("add"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or("").to_string())
        .collect()
}

fn capabilities_baseline(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let extra: Vec<String> = added_capabilities(c)
            .into_iter()
            .filter(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
            .collect();
        if !extra.is_empty() {
            bad.push(name(c));
            caps.extend(extra);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn capabilities_restricted(_: &Value, spec: &Value, minor: u32) -> Violation {
    if minor >= 25 && is_windows(spec) {
        return None;
    }
    let (mut missing_drop, mut adding) = (Vec::new(), Vec::new());
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let Some(capabilities) = sc(c, "capabilities") else {
            missing_drop.push(name(c));
            continue;
        };
        let drops_all = capabilities
            .get("drop")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "ALL"));
        if !drops_all {
            missing_drop.push(name(c));
        }
        let extra: Vec<String> = added_capabilities(c)
            .into_iter()
            .filter(|cap| cap != "NET_BIND_SERVICE")
            .collect();
        if !extra.is_empty() {
            adding.push(name(c));
            caps.extend(extra);
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

fn host_namespaces(_: &Value, spec: &Value, _: u32) -> Violation {
    let set: Vec<String> = ["hostIPC", "hostNetwork", "hostPID"]
        .iter()
        .filter(|k| spec.get(**k).and_then(Value::as_bool) == Some(true))
        .map(|k| format!("{k}=true"))
        .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn volumes(spec: &Value) -> Vec<&Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

fn has(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

fn host_path_volumes(_: &Value, spec: &Value, _: u32) -> Violation {
    let bad: Vec<String> = volumes(spec)
        .into_iter()
        .filter(|v| has(v, "hostPath"))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

fn host_ports(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let used: Vec<String> = c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
            .filter(|p| *p != 0)
            .map(|p| p.to_string())
            .collect();
        if !used.is_empty() {
            bad.push(name(c));
            ports.extend(used);
        }
    }
    if bad.is_empty() {
        return None;
    }
    // `sets.NewString(...).List()`: sorted as strings.
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(_: &Value, spec: &Value, _: u32) -> Violation {
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "privileged").and_then(Value::as_bool) == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = sc(c, "procMount").and_then(Value::as_str)
            && t != "Default"
        {
            bad.push(name(c));
            types.insert(t.to_string());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

/// The setters (`pod`, `containers "a", "b"`) of a field with a bad value, and the bad values.
fn bad_setters(
    spec: &Value,
    field: &str,
    bad: impl Fn(&Value) -> Option<String>,
) -> (Vec<String>, BTreeSet<String>) {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(value) = spec
        .get("securityContext")
        .and_then(|s| s.get(field))
        .filter(|v| !v.is_null())
        .and_then(&bad)
    {
        setters.push("pod".to_string());
        values.insert(value);
    }
    let mut containers_bad = Vec::new();
    for c in containers(spec) {
        if let Some(value) = sc(c, field).and_then(&bad) {
            containers_bad.push(name(c));
            values.insert(value);
        }
    }
    if !containers_bad.is_empty() {
        setters.push(containers_phrase(&containers_bad));
    }
    (setters, values)
}

mod more;

use more::{
    restricted_volumes, run_as_non_root, run_as_user, se_linux_options, seccomp_baseline,
    seccomp_restricted, sysctls, windows_host_process,
};

type Check = fn(&Value, &Value, u32) -> Violation;

/// The baseline checks in registration order, each with the restricted check (and the version
/// from which it does) that overrides it in the restricted profile.
const BASELINE: &[(Check, Option<u32>)] = &[
    (app_armor_profile, None),
    (capabilities_baseline, Some(22)),
    (host_namespaces, None),
    (host_path_volumes, Some(0)),
    (host_ports, None),
    (privileged, None),
    (proc_mount, None),
    (se_linux_options, None),
    (seccomp_baseline, Some(19)),
    (sysctls, None),
    (windows_host_process, None),
];

const RESTRICTED: &[Check] = &[
    allow_privilege_escalation,
    capabilities_restricted,
    restricted_volumes,
    run_as_non_root,
    run_as_user,
    seccomp_restricted,
];

/// The violations of `pod` at `policy`, in the registry's order (empty: admitted).
pub(crate) fn evaluate(policy: Policy, pod: &Value) -> Vec<(String, String)> {
    let null = Value::Null;
    let meta = pod.get("metadata").unwrap_or(&null);
    let spec = pod.get("spec").unwrap_or(&null);
    let minor = policy.version.unwrap_or(NEWEST_MINOR).min(NEWEST_MINOR);
    let restricted = policy.level == Level::Restricted;
    let mut out = Vec::new();
    if policy.level == Level::Privileged {
        return out;
    }
    for (check, overridden_from) in BASELINE {
        if restricted && overridden_from.is_some_and(|from| minor >= from) {
            continue;
        }
        out.extend(check(meta, spec, minor));
    }
    if restricted {
        for check in RESTRICTED {
            out.extend(check(meta, spec, minor));
        }
    }
    out
}

/// `violates PodSecurity "restricted:latest": reason (detail), reason (detail)`, or `None`.
pub(crate) fn denial(policy: Policy, pod: &Value) -> Option<String> {
    let violations = evaluate(policy, pod);
    if violations.is_empty() {
        return None;
    }
    let parts: Vec<String> = violations
        .iter()
        .map(|(reason, detail)| {
            if detail.is_empty() {
                reason.clone()
            } else {
                format!("{reason} ({detail})")
            }
        })
        .collect();
    Some(format!(
        "violates PodSecurity \"{}\": {}",
        policy.render(),
        parts.join(", ")
    ))
}

/// `isSignificantPodUpdate`: an update is checked only when it changes the containers (their
/// number or an image) or the seccomp annotations; metadata, tolerations and
/// `activeDeadlineSeconds` changes are not.
pub(crate) fn significant_update(new: &Value, old: &Value) -> bool {
    let annotation = |pod: &Value, key: &str| {
        pod.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .cloned()
    };
    if annotation(new, "seccomp.security.alpha.kubernetes.io/pod")
        != annotation(old, "seccomp.security.alpha.kubernetes.io/pod")
    {
        return true;
    }
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        let list = |pod: &Value| {
            pod.pointer(&format!("/spec/{key}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (new_list, old_list) = (list(new), list(old));
        if new_list.len() != old_list.len() {
            return true;
        }
        for (n, o) in new_list.iter().zip(&old_list) {
            let seccomp = format!("container.seccomp.security.alpha.kubernetes.io/{}", name(n));
            if n.get("image") != o.get("image")
                || annotation(new, &seccomp) != annotation(old, &seccomp)
            {
                return true;
            }
        }
    }
    false
}
