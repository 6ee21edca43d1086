//! The rest of the checks of `policy/check_*.go`: restricted volumes, runAsNonRoot, runAsUser,
//! SELinux, seccomp (baseline and restricted), sysctls, Windows host processes.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    Violation, bad_setters, containers, containers_phrase, has, is_windows, join_quote, name,
    plural, sc, violation, volumes,
};

/// The inline volume sources the restricted profile allows.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other volume sources, in the order `restrictedVolumesV1Dot0` tests them.
const RESTRICTED_VOLUMES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

pub(super) fn restricted_volumes(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(spec) {
        if ALLOWED_VOLUMES.iter().any(|k| has(v, k)) {
            continue;
        }
        bad.push(name(v));
        let kind = RESTRICTED_VOLUMES
            .iter()
            .find(|k| has(v, k))
            .copied()
            .unwrap_or("unknown");
        types.insert(kind.to_string());
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad),
            plural("uses", "use", bad.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

pub(super) fn run_as_non_root(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut setters = Vec::new();
    let pod_level = spec
        .pointer("/securityContext/runAsNonRoot")
        .and_then(Value::as_bool);
    if pod_level == Some(false) {
        setters.push("pod".to_string());
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match sc(c, "runAsNonRoot").and_then(Value::as_bool) {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if pod_level != Some(true) => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

pub(super) fn run_as_user(_: &Value, spec: &Value, minor: u32) -> Violation {
    if minor < 23 {
        return None;
    }
    let (setters, _) = bad_setters(spec, "runAsUser", |v| {
        (v.as_i64() == Some(0)).then(|| "0".to_string())
    });
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];

pub(super) fn se_linux_options(_: &Value, spec: &Value, _: u32) -> Violation {
    let mut types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut invalid = |opts: &Value| -> bool {
        let text = |k: &str| {
            opts.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let mut valid = true;
        if !SELINUX_TYPES.contains(&text("type").as_str()) {
            valid = false;
            types.insert(text("type"));
        }
        if !text("user").is_empty() {
            valid = false;
            set_user = true;
        }
        if !text("role").is_empty() {
            valid = false;
            set_role = true;
        }
        !valid
    };
    let mut setters = Vec::new();
    if let Some(opts) = spec.pointer("/securityContext/seLinuxOptions")
        && !opts.is_null()
        && invalid(opts)
    {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| sc(c, "seLinuxOptions").is_some_and(&mut invalid))
        .map(name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    // As upstream: the user and role notes follow only a bad type.
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!(
            "{} {}",
            plural("type", "types", types.len()),
            join_quote(&types)
        ));
        if set_user {
            data.push("user may not be set".to_string());
        }
        if set_role {
            data.push("role may not be set".to_string());
        }
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "Localhost" || t == "RuntimeDefault"
}

fn seccomp_type(v: &Value) -> String {
    v.get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// `seccompProfileBaseline_1_0` (the alpha annotations) before 1.19, the fields from 1.19.
pub(super) fn seccomp_baseline(meta: &Value, spec: &Value, minor: u32) -> Violation {
    if minor < 19 {
        return seccomp_annotations(meta, spec);
    }
    let (setters, values) = bad_setters(spec, "seccompProfile", |v| {
        let t = seccomp_type(v);
        (!valid_seccomp(&t)).then_some(t)
    });
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn seccomp_annotations(meta: &Value, spec: &Value) -> Violation {
    let annotation = |key: &str| {
        meta.get("annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let mut forbidden = BTreeSet::new();
    let mut keys = vec!["seccomp.security.alpha.kubernetes.io/pod".to_string()];
    keys.extend(
        containers(spec)
            .into_iter()
            .map(|c| format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c))),
    );
    for key in keys {
        if let Some(v) = annotation(&key)
            && !valid(&v)
        {
            forbidden.insert(format!("{key}={}", Value::String(v)));
        }
    }
    if forbidden.is_empty() {
        return None;
    }
    let forbidden: Vec<String> = forbidden.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            plural("annotation", "annotations", forbidden.len()),
            forbidden.join(", ")
        ),
    )
}

pub(super) fn seccomp_restricted(_: &Value, spec: &Value, minor: u32) -> Violation {
    if minor < 19 || (minor >= 25 && is_windows(spec)) {
        return None;
    }
    let (setters, values) = bad_setters(spec, "seccompProfile", |v| {
        let t = seccomp_type(v);
        (!valid_seccomp(&t)).then_some(t)
    });
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    let pod_set = spec
        .pointer("/securityContext/seccompProfile")
        .is_some_and(|p| !p.is_null());
    let implicit: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| !pod_set && sc(c, "seccompProfile").is_none())
        .map(name)
        .collect();
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

/// The sysctls allowed at a version: the safe set of 1.0, grown in 1.27, 1.29 and 1.32.
fn allowed_sysctl(sysctl: &str, minor: u32) -> bool {
    const V1_0: &[&str] = &[
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    const V1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
    const V1_29: &[&str] = &[
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ];
    const V1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
    V1_0.contains(&sysctl)
        || (minor >= 27 && V1_27.contains(&sysctl))
        || (minor >= 29 && V1_29.contains(&sysctl))
        || (minor >= 32 && V1_32.contains(&sysctl))
}

pub(super) fn sysctls(_: &Value, spec: &Value, minor: u32) -> Violation {
    let bad: Vec<String> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| {
            s.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .filter(|s| !allowed_sysctl(s, minor))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

pub(super) fn windows_host_process(_: &Value, spec: &Value, _: u32) -> Violation {
    let host_process = |v: &Value| {
        (v.get("hostProcess").and_then(Value::as_bool) == Some(true)).then(|| "true".to_string())
    };
    let (setters, _) = bad_setters(spec, "windowsOptions", host_process);
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}
