//! `forewarn migrate --from-nth VALUES.yaml`: the Helm values of aws-node-termination-handler
//! (NTH) as a forewarn policy on stdout (what `forewarn replay --policy` and the policy
//! ConfigMap take), the variables to set instead of the keys that are settings rather than
//! policy, and every key that cannot be carried over, named with why, on stderr.
//!
//! NTH's meaning is kept: in queue-processor mode (`enableSqsTerminationDraining: true`) NTH
//! cordons and drains on every event it takes, and its IMDS-mode switches
//! (`enableSpotInterruptionDraining`, `enableRebalanceMonitoring`, `enableRebalanceDraining`,
//! `enableScheduledEventDraining`) are not read; in IMDS mode they say, per kind, drain, cordon
//! or nothing, and the kinds NTH's IMDS mode never sees keep forewarn's defaults. `cordonOnly`
//! makes every drain a cordon.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The Helm values of aws-node-termination-handler (`helm get values <release> -o yaml`,
    /// or the values file it was installed with).
    #[arg(long, value_name = "VALUES.yaml")]
    from_nth: PathBuf,
}

/// What the values become: the policy's actions per kind, the variables to set, and the keys
/// not carried over with why.
#[derive(Debug, Default, PartialEq)]
pub struct Migration {
    pub actions: BTreeMap<&'static str, &'static str>,
    /// `excludeFromLoadBalancers`: the rule's `exclude-from-load-balancers`.
    pub exclude_from_lb: Option<bool>,
    pub variables: Vec<(String, String, String)>,
    pub dropped: Vec<(String, String)>,
}

impl Migration {
    /// The policy, as YAML: one rule over every node.
    pub fn policy_yaml(&self) -> String {
        let mut out = String::from(
            "# A forewarn policy made by `forewarn migrate --from-nth` from the Helm values of\n\
             # aws-node-termination-handler: the same action per event kind on every node.\n\
             rules:\n  - name: from-nth\n    nodes: {}\n    actions:\n",
        );
        for (kind, action) in &self.actions {
            out.push_str(&format!("      {kind}: {action}\n"));
        }
        if let Some(exclude) = self.exclude_from_lb {
            out.push_str(&format!("    exclude-from-load-balancers: {exclude}\n"));
        }
        out
    }
}

/// The keys of NTH's chart that only place or shape its own pods (forewarn runs as Lambda
/// functions): not carried over.
const DEPLOYMENT_KEYS: &str = "image imagePullSecrets nameOverride fullnameOverride \
    replicas resources nodeSelector linuxNodeSelector windowsNodeSelector affinity \
    linuxAffinity windowsAffinity tolerations priorityClassName podAnnotations \
    linuxPodAnnotations windowsPodAnnotations podLabels linuxPodLabels windowsPodLabels rbac \
    serviceAccount securityContext podSecurityContext dnsPolicy dnsConfig updateStrategy \
    linuxUpdateStrategy windowsUpdateStrategy useHostNetwork targetNodeOs \
    nodeSelectorTermsOs nodeSelectorTermsArch extraEnv customLabels podDisruptionBudget \
    serviceMonitor daemonsetNodeSelector daemonsetTolerations daemonsetAffinity \
    daemonsetPriorityClassName terminationGracePeriodSeconds";

/// The keys read only in IMDS mode.
const IMDS_SWITCHES: &[&str] = &[
    "enableSpotInterruptionDraining",
    "enableRebalanceMonitoring",
    "enableRebalanceDraining",
    "enableScheduledEventDraining",
];

/// What each remaining key becomes: a note saying what forewarn does instead.
fn note(key: &str) -> Option<&'static str> {
    Some(match key {
        "taintNode" => {
            "NTH did not taint the nodes it cordoned; forewarn always does, with \
             forewarn.io/interruption=<kind> (FOREWARN_TAINT_KEY)"
        }
        "ignoreDaemonSets" | "ignoreDaemonsSets" => {
            "forewarn never evicts a DaemonSet's pods (they would come back on the node)"
        }
        "deleteLocalData" | "deleteEmptyDirData" => {
            "forewarn evicts pods with emptyDir volumes: the instance and its local data go anyway"
        }
        "podTerminationGracePeriod" | "gracePeriod" => {
            "forewarn lets each pod its own terminationGracePeriodSeconds, cut to the time left \
             before the instance goes"
        }
        "nodeTerminationGracePeriod" => {
            "a drain must end 15 s before the instance goes; events \
             that give no time get FOREWARN_DRAIN_TIMEOUT"
        }
        "checkASGTagBeforeDraining"
        | "checkTagBeforeDraining"
        | "managedAsgTag"
        | "managedTag"
        | "assumeAsgTagPropagation" => {
            "forewarn acts only on instances tagged for its clusters (kubernetes.io/cluster/<name>, \
             eks:cluster-name; FOREWARN_CLUSTERS), and on their node verified live"
        }
        "queueURL" => {
            "the stack (infra/forewarn.yaml, `forewarn deploy`) makes forewarn's own queue and \
             EventBridge rules"
        }
        "awsRegion" => "the functions run in the stack's region (AWS_REGION)",
        "enableSqsTerminationDraining" => "forewarn is always queue-based",
        "jsonLogging" => "the functions' logs are JSON (CloudWatch Logs)",
        "enablePrometheusServer" | "prometheusServerPort" | "podMonitor" => {
            "forewarn's metrics are CloudWatch metrics (EMF, namespace forewarn), with a \
             dashboard in the stack"
        }
        "enableProbesServer" | "probesServerPort" | "probesServerEndpoint" => {
            "Lambda functions have no probes"
        }
        "emitKubernetesEvents" => "forewarn always records Kubernetes Events on the nodes",
        "kubernetesEventsExtraAnnotations" | "kubernetesExtraEventsAnnotations" => {
            "forewarn's Events carry no extra annotations"
        }
        "heartbeatInterval" | "heartbeatUntil" => {
            "forewarn keeps an ASG lifecycle action alive every 30 s while its drain lasts"
        }
        "completeLifecycleActionDelaySeconds" => {
            "forewarn completes a lifecycle action once its drain is over \
             (FOREWARN_LIFECYCLE_HOOKS=off leaves them to their timeouts)"
        }
        "webhookURLSecretName" => {
            "give the URL itself as FOREWARN_WEBHOOK_URL (a function's environment, encrypted)"
        }
        "webhookProxy" => "the functions post the webhook directly",
        "webhookHeaders" => "forewarn posts application/json and no other header",
        "webhookTemplateConfigMapName" | "webhookTemplateConfigMapKey" => {
            "give the template itself as FOREWARN_WEBHOOK_TEMPLATE"
        }
        "useProviderId" => "forewarn always matches a node to its instance by providerID",
        "instanceMetadataURL" | "metadataTries" | "uptimeFromFile" | "procUptimeFile" => {
            "IMDS mode only: forewarn reads EventBridge events, never instance metadata"
        }
        "awsEndpoint" | "awsSecretAccessKey" | "awsAccessKeyID" => {
            "testing settings of NTH: forewarn uses the standard AWS configuration"
        }
        "windowsUpdateStrategy" | "enableWindows" => "forewarn does not run on the nodes",
        _ => return None,
    })
}

/// NTH's webhook template fields, and forewarn's.
const TEMPLATE_FIELDS: &[(&str, &str)] = &[
    ("EventID", "event_id"),
    ("Kind", "kind"),
    ("InstanceID", "instance_id"),
    ("NodeName", "node"),
    ("Description", "summary"),
    ("StartTime", "time"),
    ("InstanceType", "instance_type"),
    ("AvailabilityZone", "zone"),
];

/// NTH's Go template as forewarn's (`{{ .EventID }}` → `{{event_id}}`); `Err` with the first
/// field forewarn has no counterpart for.
fn template(nth: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = nth;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or("an unclosed {{")?;
        let inner = after[..close].trim();
        let field = inner.strip_prefix('.').unwrap_or(inner);
        let ours = TEMPLATE_FIELDS
            .iter()
            .find(|(theirs, _)| *theirs == field)
            .map(|(_, ours)| *ours)
            .ok_or_else(|| format!("{{{{ {inner} }}}} has no forewarn field"))?;
        out.push_str(&format!("{{{{{ours}}}}}"));
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A Helm value's truth, when it is a boolean (or its text).
fn truth(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) => Some(s.eq_ignore_ascii_case("true")),
        _ => None,
    }
}

/// Why a variable is set, when its line says more than the key it stands for.
fn because(var: &str) -> Option<&'static str> {
    (var == "FOREWARN_TAINT_KEY").then_some(
        "the nodes forewarn cordons get NTH's taint keys (aws-node-termination-handler/spot-itn, \
         ...), so that tolerations written for NTH keep matching",
    )
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The migration of NTH's values (a YAML mapping, as JSON).
pub fn from_nth(values: &Value) -> Migration {
    let mut m = Migration::default();
    let on = |key: &str, default: bool| values.get(key).and_then(truth).unwrap_or(default);
    let queue = on("enableSqsTerminationDraining", false);
    let drain = if on("cordonOnly", false) {
        "cordon"
    } else {
        "cordon-drain"
    };
    if queue {
        for kind in [
            "spot-interruption",
            "rebalance-recommendation",
            "scheduled-change",
            "asg-termination",
            "state-change",
        ] {
            m.actions.insert(kind, drain);
        }
        if !on("enableASGLifecycleDraining", true) {
            m.actions.insert("asg-termination", "none");
        }
    } else {
        let pick = |key, default| if on(key, default) { drain } else { "none" };
        m.actions.insert(
            "spot-interruption",
            pick("enableSpotInterruptionDraining", true),
        );
        m.actions.insert(
            "rebalance-recommendation",
            match (
                on("enableRebalanceDraining", false),
                on("enableRebalanceMonitoring", false),
            ) {
                (true, _) => drain,
                (false, true) => "cordon",
                (false, false) => "none",
            },
        );
        m.actions.insert(
            "scheduled-change",
            pick("enableScheduledEventDraining", false),
        );
    }
    let Some(map) = values.as_object() else {
        return m;
    };
    for (key, value) in map {
        carry(&mut m, key, value, queue);
    }
    if m.actions.values().any(|a| *a == "none") {
        m.dropped.push((
            "(the policy)".into(),
            "it says `none` for a kind NTH left alone: FOREWARN_POLICY_ALLOW (stack parameter \
             PolicyAllow) must allow `none` for the policy ConfigMap to say it (a --policy file \
             or FOREWARN_POLICY_FILE is not limited)"
                .into(),
        ));
    }
    m
}

/// One key of the values: a variable to set, a key already in the policy, or one dropped.
fn carry(m: &mut Migration, key: &str, value: &Value, queue: bool) {
    let mut set = |var: &str, v: String| m.variables.push((var.into(), v, key.into()));
    match key {
        "enableSqsTerminationDraining" | "cordonOnly" | "enableASGLifecycleDraining" => {}
        k if IMDS_SWITCHES.contains(&k) => {
            if queue {
                m.dropped.push((
                    k.into(),
                    "IMDS mode only: NTH's queue-processor mode does not read it (every event it \
                     takes is drained), so the policy does not either"
                        .into(),
                ));
            }
        }
        "webhookURL" => set("FOREWARN_WEBHOOK_URL", text(value)),
        "webhookTemplate" => match template(&text(value)) {
            Ok(t) => set("FOREWARN_WEBHOOK_TEMPLATE", t),
            Err(why) => m.dropped.push((key.into(), why)),
        },
        "dryRun" => set("FOREWARN_DRY_RUN", text(value)),
        "logLevel" => set("RUST_LOG", text(value).to_lowercase()),
        "workers" => set("FOREWARN_CONCURRENCY", text(value)),
        "taintNode" if truth(value) == Some(true) => set("FOREWARN_TAINT_KEY", "nth".into()),
        "taintEffect" => set("FOREWARN_TAINT_EFFECT", text(value)),
        "excludeFromLoadBalancers" => match truth(value) {
            Some(b) => m.exclude_from_lb = Some(b),
            None => m.dropped.push((key.into(), "not true or false".into())),
        },
        k if DEPLOYMENT_KEYS.split_whitespace().any(|d| d == k) => m.dropped.push((
            k.into(),
            "places or shapes NTH's own pods: forewarn runs as Lambda functions".into(),
        )),
        k => {
            let why = note(k).unwrap_or("not an NTH setting forewarn knows");
            m.dropped.push((k.into(), why.into()));
        }
    }
}

pub fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.from_nth)
        .with_context(|| format!("reading {}", args.from_nth.display()))?;
    let values: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_saphyr::from_str(&text)
            .with_context(|| format!("{}: not YAML", args.from_nth.display()))?
    };
    if !values.is_object() {
        anyhow::bail!(
            "{}: not Helm values (a YAML mapping of keys)",
            args.from_nth.display()
        );
    }
    let m = from_nth(&values);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", m.policy_yaml())?;
    out.flush().context("writing the policy")?;
    for (var, value, key) in &m.variables {
        let why = because(var).map(|w| format!(": {w}")).unwrap_or_default();
        eprintln!("forewarn migrate: {key}: set {var}={value} (a variable of the functions){why}");
    }
    for (key, why) in &m.dropped {
        eprintln!("forewarn migrate: {key}: not carried over: {why}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(m: &Migration) -> forewarn::domain::policy::Policy {
        forewarn::domain::policy::Policy::parse(&m.policy_yaml())
            .expect("the policy is one forewarn takes")
    }

    #[test]
    fn queue_mode_drains_every_kind_and_ignores_the_imds_switches() {
        let m = from_nth(&json!({
            "enableSqsTerminationDraining": true,
            "queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/nth",
            "enableRebalanceMonitoring": true,
            "workers": 20,
            "taintNode": true,
            "podMonitor": {"create": false},
        }));
        assert_eq!(m.actions["rebalance-recommendation"], "cordon-drain");
        assert_eq!(m.actions["asg-termination"], "cordon-drain");
        let p = policy(&m);
        assert_eq!(p.rules.len(), 1);
        assert_eq!(
            m.variables,
            [
                (
                    "FOREWARN_TAINT_KEY".into(),
                    "nth".into(),
                    "taintNode".into()
                ),
                ("FOREWARN_CONCURRENCY".into(), "20".into(), "workers".into())
            ]
        );
        let dropped: Vec<&str> = m.dropped.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            dropped,
            ["enableRebalanceMonitoring", "podMonitor", "queueURL"]
        );
    }

    #[test]
    fn nths_taints_are_kept_only_when_nth_tainted() {
        for yes in [json!(true), json!("True")] {
            let m = from_nth(
                &json!({"enableSqsTerminationDraining": true, "taintNode": yes,
                                     "taintEffect": "NoExecute"}),
            );
            assert_eq!(
                m.variables,
                [
                    (
                        "FOREWARN_TAINT_EFFECT".into(),
                        "NoExecute".into(),
                        "taintEffect".into()
                    ),
                    (
                        "FOREWARN_TAINT_KEY".into(),
                        "nth".into(),
                        "taintNode".into()
                    )
                ]
            );
            assert!(m.dropped.is_empty(), "{:?}", m.dropped);
        }
        let m = from_nth(&json!({"enableSqsTerminationDraining": true, "taintNode": false}));
        assert!(m.variables.is_empty());
        assert_eq!(m.dropped[0].0, "taintNode");
        assert!(m.dropped[0].1.contains("forewarn.io/interruption"));
        // The value the variable is set to is one the settings take.
        let c = forewarn::app::settings::Settings::from_vars([("FOREWARN_TAINT_KEY", "nth")])
            .unwrap()
            .config;
        assert_eq!(c.taint_keys, forewarn::domain::config::TaintKeys::Nth);
        assert!(
            because("FOREWARN_TAINT_KEY")
                .unwrap()
                .contains("tolerations")
        );
    }

    #[test]
    fn imds_mode_keeps_each_switchs_meaning() {
        let base = json!({"enableRebalanceMonitoring": true, "enableScheduledEventDraining": true});
        let m = from_nth(&base);
        assert_eq!(m.actions["spot-interruption"], "cordon-drain");
        assert_eq!(m.actions["rebalance-recommendation"], "cordon");
        assert_eq!(m.actions["scheduled-change"], "cordon-drain");
        assert!(
            !m.actions.contains_key("asg-termination"),
            "forewarn's default"
        );
        let m = from_nth(&json!({"enableRebalanceDraining": true, "cordonOnly": true,
                                 "enableSpotInterruptionDraining": false}));
        assert_eq!(m.actions["rebalance-recommendation"], "cordon");
        assert_eq!(m.actions["spot-interruption"], "none");
        assert_eq!(m.actions["scheduled-change"], "none");
        policy(&m);
        assert!(
            m.dropped
                .iter()
                .any(|(k, why)| k == "(the policy)" && why.contains("PolicyAllow"))
        );
    }

    #[test]
    fn the_webhook_template_is_translated_or_named() {
        let m = from_nth(&json!({
            "webhookURL": "https://hooks.slack.com/services/x",
            "webhookTemplate": "{\"text\":\"[NTH] {{ .EventID }} {{ .Kind }} {{.NodeName}}\"}",
        }));
        assert!(m.variables.contains(&(
            "FOREWARN_WEBHOOK_TEMPLATE".into(),
            "{\"text\":\"[NTH] {{event_id}} {{kind}} {{node}}\"}".into(),
            "webhookTemplate".into()
        )));
        let m = from_nth(&json!({"webhookTemplate": "{{ .Pod }}"}));
        assert_eq!(m.dropped[0].0, "webhookTemplate");
        assert!(m.dropped[0].1.contains("{{ .Pod }} has no forewarn field"));
        let m = from_nth(&json!({"webhookTemplate": "{{ .Kind "}));
        assert!(m.dropped[0].1.contains("unclosed"));
    }

    #[test]
    fn an_unknown_key_is_named() {
        let m = from_nth(&json!({"frobnicate": 1, "image": {"tag": "v1"}}));
        assert_eq!(
            m.dropped[..2],
            [
                (
                    "frobnicate".into(),
                    "not an NTH setting forewarn knows".into()
                ),
                (
                    "image".into(),
                    "places or shapes NTH's own pods: forewarn runs as Lambda functions".into()
                )
            ]
        );
    }
}
