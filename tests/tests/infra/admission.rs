//! The admission policies of `infra/k8s/`: the placeholders' and the node writes' (their CEL
//! evaluated).

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

/// `infra/k8s/placeholders.yaml`: the placeholders' PriorityClass is above the Cluster
/// Autoscaler's expendable cutoff (-10) and below every real pod, never preempts; the admission
/// policy binds both of forewarn's groups (with Deny) and names what a placeholder is, with the
/// very namespace, label and annotation keys, class and image the code uses; the pod grant is a
/// Role of forewarn's namespace alone. (The CEL runs only in a real API server; the placeholder
/// the code builds is checked against the same rules in kube_actions/surge.rs and admission.rs.)
#[test]
fn the_placeholder_policy_allows_forewarns_groups_placeholders_only() {
    use forewarn::domain::surge::{NAMESPACE, PRIORITY_CLASS};
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/placeholders.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind}"))
            .clone()
    };
    let class = of("PriorityClass");
    assert_eq!(class["metadata"]["name"], PRIORITY_CLASS);
    let value = class["value"].as_i64().unwrap();
    assert!((-10..0).contains(&value), "{value}");
    assert_eq!(class["preemptionPolicy"], "Never");
    assert_eq!(class["globalDefault"], false);

    let policy = of("ValidatingAdmissionPolicy");
    assert_the_policy_names_what_a_placeholder_is(&policy);
    let binding = of("ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    // The grant the policy narrows: pods create, delete and list, in forewarn's namespace only,
    // to both groups.
    let role = of("Role");
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "list"]}])
    );
    let bound = of("RoleBinding");
    assert_eq!(bound["metadata"]["namespace"], NAMESPACE);
    assert_eq!(bound["roleRef"]["name"], role["metadata"]["name"]);
    let groups = |binding: &Value| -> Vec<String> {
        binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(groups(&bound), ["forewarn-handler", "forewarn-sweeper"]);
    // And a read of the budgets (a drain's rounds), cluster-wide: a read only.
    let budgets = of("ClusterRole");
    assert_eq!(
        budgets["rules"],
        json!([{"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]}])
    );
    let bound = of("ClusterRoleBinding");
    assert_eq!(bound["roleRef"]["name"], budgets["metadata"]["name"]);
    assert_eq!(groups(&bound), ["forewarn-handler", "forewarn-sweeper"]);
    // No ClusterRole of this file grants any pod write.
    for doc in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        for rule in doc["rules"].as_array().unwrap() {
            assert_ne!(rule["resources"], json!(["pods"]), "{doc}");
        }
    }
    // rbac.yaml grants no pod write: without placeholders.yaml, no pod can be created.
    let rbac = std::fs::read_to_string(workspace_root().join("infra/k8s/rbac.yaml")).unwrap();
    let rbac: Vec<Value> = serde_saphyr::from_multiple(&rbac).unwrap();
    for rule in rbac
        .iter()
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
    {
        if rule["resources"] == json!(["pods"]) {
            assert_eq!(rule["verbs"], json!(["list"]), "{rule}");
        }
    }
}

/// The placeholders' admission policy: fails closed, matches pod creates and deletes in every
/// namespace by forewarn's two groups, and its two validations name what a placeholder is (for
/// both operations, and for a create) with the code's own namespace, name, keys, class and image.
fn assert_the_policy_names_what_a_placeholder_is(policy: &Value) {
    use forewarn::domain::surge::{
        NAMESPACE, PLACEHOLDER_ANNOTATIONS, PLACEHOLDER_IMAGE, PLACEHOLDER_LABELS,
        PLACEHOLDER_USER, PRIORITY_CLASS,
    };
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["resources"], json!(["pods"]));
    assert_eq!(rule["operations"], json!(["CREATE", "DELETE"]));
    assert!(
        rule.get("namespaceSelector").is_none()
            && spec["matchConstraints"].get("namespaceSelector").is_none(),
        "the policy holds in every namespace"
    );
    let condition = spec["matchConditions"][0]["expression"].as_str().unwrap();
    for group in ["forewarn-handler", "forewarn-sweeper"] {
        assert!(condition.contains(&format!("'{group}'")), "{condition}");
    }
    let rules: Vec<&str> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap())
        .collect();
    assert_eq!(rules.len(), 2);
    // Both operations: forewarn's namespace, the exact name, the class.
    for needle in [
        format!("variables.pod.metadata.namespace == '{NAMESPACE}'"),
        "variables.pod.metadata.name == 'forewarn-placeholder-' + variables.pod.metadata.annotations['forewarn.io/pod-uid']".to_string(),
        format!("variables.pod.spec.priorityClassName == '{PRIORITY_CLASS}'"),
    ] {
        assert!(rules[0].contains(&needle), "{needle} in {}", rules[0]);
    }
    // A create: exactly the code's label and annotation keys, and nothing that runs.
    let quoted = |keys: &[&str]| {
        keys.iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for needle in [
        format!(
            "object.metadata.labels.all(k, k in [{}])",
            quoted(&PLACEHOLDER_LABELS)
        ),
        format!(
            "object.metadata.annotations.all(k, k in [{}])",
            quoted(&PLACEHOLDER_ANNOTATIONS)
        ),
        "o.apiVersion == 'v1' && o.kind == 'Node'".to_string(),
        format!("c.image == '{PLACEHOLDER_IMAGE}'"),
        "!has(object.spec.nodeName)".to_string(),
        // What the ServiceAccount plugin sets, no other account, and no token.
        "(!has(object.spec.serviceAccountName) || object.spec.serviceAccountName == 'default')"
            .to_string(),
        "!object.spec.automountServiceAccountToken".to_string(),
        // Pod Security `restricted`'s context as the code writes it, and nothing more.
        format!("object.spec.securityContext.runAsUser == {PLACEHOLDER_USER}"),
        "object.spec.securityContext.seccompProfile.type == 'RuntimeDefault'".to_string(),
        "!c.securityContext.allowPrivilegeEscalation".to_string(),
        "c.securityContext.capabilities.drop == ['ALL']".to_string(),
        "!has(c.securityContext.capabilities.add)".to_string(),
        "c.securityContext.readOnlyRootFilesystem".to_string(),
        "!has(c.securityContext.privileged)".to_string(),
        "!has(c.livenessProbe)".to_string(),
        "!has(c.readinessProbe)".to_string(),
        "!has(c.startupProbe)".to_string(),
        "!has(c.lifecycle)".to_string(),
        "!has(object.spec.volumes)".to_string(),
        "!has(object.metadata.finalizers)".to_string(),
    ] {
        assert!(rules[1].contains(&needle), "{needle} in {}", rules[1]);
    }
}

/// The ValidatingAdmissionPolicy of `infra/k8s/node-writes.yaml`, its CEL evaluated: `variables`
/// first, then each validation, on `object` and `oldObject` as JSON (what the API server hands
/// CEL) and a request of `groups`. `None`: the policy does not match the request (not one of
/// forewarn's groups); else whether every validation holds.
fn node_write_admitted(old: &Value, new: &Value, groups: &[&str]) -> Option<bool> {
    node_policy_admits(0, "UPDATE", old, new, groups)
}

/// [`node_write_admitted`] for the policy that is document `doc` of `node-writes.yaml`, on a
/// request of `operation` (a DELETE's `object` is `null`).
fn node_policy_admits(
    doc: usize,
    operation: &str,
    old: &Value,
    new: &Value,
    groups: &[&str],
) -> Option<bool> {
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/node-writes.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let spec = &docs[doc]["spec"];
    let eval = |expression: &str, variables: &Value| -> Value {
        let program =
            cel::Program::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e:?}"));
        let mut context = cel::Context::default();
        context
            .add_variable("object", new)
            .and_then(|()| context.add_variable("oldObject", old))
            .and_then(|()| {
                context.add_variable(
                    "request",
                    json!({"operation": operation, "userInfo": {"groups": groups}}),
                )
            })
            .and_then(|()| context.add_variable("variables", variables))
            .unwrap();
        let value = program
            .execute(&context)
            .unwrap_or_else(|e| panic!("{expression}: {e:?}"));
        value
            .json()
            .unwrap_or_else(|e| panic!("{expression}: {e:?}"))
    };
    let matched = spec["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| eval(c["expression"].as_str().unwrap(), &json!({})) == json!(true));
    if !matched {
        return None;
    }
    let mut variables = serde_json::Map::new();
    for v in spec["variables"].as_array().unwrap() {
        let value = eval(
            v["expression"].as_str().unwrap(),
            &Value::Object(variables.clone()),
        );
        variables.insert(v["name"].as_str().unwrap().to_string(), value);
    }
    let variables = Value::Object(variables);
    Some(spec["validations"].as_array().unwrap().iter().all(|v| {
        match eval(v["expression"].as_str().unwrap(), &variables) {
            Value::Bool(b) => b,
            other => panic!("{}: not a boolean: {other}", v["expression"]),
        }
    }))
}

/// Every taint key NTH puts, as forewarn's `nth` taint keys choose them: one per kind it taints for.
fn nth_taint_keys() -> Vec<&'static str> {
    let keys = forewarn::domain::event::EventKind::ALL.iter();
    let keys: Vec<_> = keys
        .filter_map(|k| forewarn::domain::config::nth_taint_key(*k))
        .collect();
    assert_eq!(keys.len(), 4, "NTH's four taint keys: {keys:?}");
    keys
}

/// Under FOREWARN_TAINT_KEYS=nth, `node-writes.yaml` admits NTH's four keys instead of forewarn's,
/// put and removed, by either group; no other key of NTH's prefix.
fn nths_keys_are_admitted(node: &Value, with: impl Fn(&dyn Fn(&mut Value)) -> Value) {
    let handler = ["forewarn-handler", "system:authenticated"];
    let sweeper = ["forewarn-sweeper", "system:authenticated"];
    for key in nth_taint_keys() {
        let nth = with(&|n| {
            n["spec"]["unschedulable"] = json!(true);
            n["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .push(json!({"key": key, "value": "spot-interruption", "effect": "NoSchedule"}));
        });
        assert_eq!(
            node_write_admitted(node, &nth, &handler),
            Some(true),
            "{key}"
        );
        assert_eq!(
            node_write_admitted(&nth, node, &sweeper),
            Some(true),
            "{key}"
        );
    }
    let other = with(&|n| {
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "aws-node-termination-handler/other", "effect": "NoSchedule"}));
    });
    assert_eq!(node_write_admitted(node, &other, &handler), Some(false));
}

/// `infra/k8s/node-writes.yaml`: the policy matches Node updates by forewarn's two groups (the
/// stack's defaults, which `forewarn deploy` replaces by the stack's own), fails closed, is bound
/// with Deny; and its CEL, evaluated on old and new Nodes, admits what forewarn's cordon, its
/// record, the load-balancer label and the way back write — through the very keys the code
/// uses — and refuses any other change of labels, annotations, taints or spec. (A CEL
/// interpreter, not the API server, evaluates it here.)
#[test]
fn the_node_write_policy_lets_forewarn_change_only_its_cordon() {
    use forewarn::domain::config::{LABEL_EXCLUDE_LB, TAINT_KEY};
    use forewarn::domain::cordon_record::ANNOTATION_CORDON;
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/node-writes.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(
        docs.len(),
        4,
        "the writes' policy and binding, the deletes'"
    );
    let (policy, binding) = (&docs[0], &docs[1]);
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": ["nodes"]}])
    );
    assert_eq!(binding["kind"], "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert!(
        text.contains(&format!("'{TAINT_KEY}'")),
        "forewarn's taint key"
    );
    for key in nth_taint_keys() {
        assert!(text.contains(&format!("'{key}'")), "NTH's taint key {key}");
    }
    assert!(text.contains(&format!("'{LABEL_EXCLUDE_LB}'")));
    assert!(ANNOTATION_CORDON.starts_with("forewarn.io/"));

    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
            "node-restriction.kubernetes.io/pool": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"providerID": "aws:///us-east-1a/i-1", "podCIDR": "10.0.0.0/24",
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
    });
    let handler = ["forewarn-handler", "system:authenticated"];
    let sweeper = ["forewarn-sweeper", "system:authenticated"];
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut n = node.clone();
        edit(&mut n);
        n
    };
    // What forewarn writes: the cordon with its taint (after the others), record and label.
    let cordoned = with(&|n| {
        n["spec"]["unschedulable"] = json!(true);
        n["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": TAINT_KEY, "value": "spot-interruption", "effect": "NoSchedule"}));
        n["metadata"]["labels"][LABEL_EXCLUDE_LB] = json!("true");
        n["metadata"]["labels"]["forewarn.io/cordoned"] = json!("true");
        n["metadata"]["annotations"][ANNOTATION_CORDON] = json!("{\"reason\":\"spot\"}");
    });
    assert_eq!(node_write_admitted(&node, &cordoned, &handler), Some(true));
    assert_eq!(node_write_admitted(&node, &cordoned, &sweeper), Some(true));
    // The way back: the cordon undone.
    assert_eq!(node_write_admitted(&cordoned, &node, &sweeper), Some(true));
    nths_keys_are_admitted(&node, with);
    // A node without labels, annotations or taints at all.
    let bare = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
        "spec": {}});
    let bare_cordoned = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n2", "annotations": {ANNOTATION_CORDON: "{}"}},
        "spec": {"unschedulable": true,
            "taints": [{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}]}});
    assert_eq!(
        node_write_admitted(&bare, &bare_cordoned, &handler),
        Some(true)
    );

    // Anything else, from forewarn's groups: refused.
    let refused = refused_node_writes(with);
    for (what, new) in &refused {
        assert_eq!(
            node_write_admitted(&node, new, &handler),
            Some(false),
            "{what}"
        );
        // Along with a cordon, too.
        let mut both = new.clone();
        both["spec"]["unschedulable"] = json!(true);
        assert_eq!(
            node_write_admitted(&node, &both, &sweeper),
            Some(false),
            "{what}"
        );
    }
    // Other principals are not this policy's to judge.
    assert_eq!(
        node_write_admitted(&node, &refused[0].1, &["system:nodes", "ops"]),
        None
    );
}

/// The node changes the policy refuses forewarn's groups, each made by `with` on a plain node,
/// with what was changed.
fn refused_node_writes(with: impl Fn(&dyn Fn(&mut Value)) -> Value) -> Vec<(&'static str, Value)> {
    let refused: Vec<(&str, Value)> = vec![
        (
            "another label set",
            with(&|n| {
                n["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("b");
            }),
        ),
        (
            "a label added",
            with(&|n| {
                n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
            }),
        ),
        (
            "a label removed",
            with(&|n| {
                n["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("kubernetes.io/hostname");
            }),
        ),
        (
            "another annotation",
            with(&|n| {
                n["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/scale-down-disabled"] =
                    json!("true");
            }),
        ),
        (
            "an annotation removed",
            with(&|n| {
                n["metadata"]["annotations"] = json!({});
            }),
        ),
        (
            "another taint removed",
            with(&|n| {
                n["spec"]["taints"] = json!([]);
            }),
        ),
        (
            "another taint added",
            with(&|n| {
                n["spec"]["taints"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "evil", "effect": "NoExecute"}));
            }),
        ),
        (
            "the provider id",
            with(&|n| {
                n["spec"]["providerID"] = json!("aws:///us-east-1a/i-2");
            }),
        ),
        (
            "the pod CIDR",
            with(&|n| {
                n["spec"].as_object_mut().unwrap().remove("podCIDR");
            }),
        ),
        (
            "a finalizer",
            with(&|n| {
                n["metadata"]["finalizers"] = json!(["example.com/hold"]);
            }),
        ),
        (
            "an owner",
            with(&|n| {
                n["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]);
            }),
        ),
    ];
    refused
}

/// `infra/k8s/node-writes.yaml`'s second policy: forewarn's groups may delete a worker node (a
/// plain node's `delete` action), never a control-plane one, whether it says so by a label or
/// by a taint; it matches Node deletes only, fails closed, is bound with Deny; another group's
/// delete is not its business. (A CEL interpreter, not the API server, evaluates it here; the
/// fake enforces it in `kube_actions`.)
#[test]
fn the_node_delete_policy_keeps_forewarn_off_the_control_plane() {
    use forewarn::domain::facts::{LABEL_CONTROL_PLANE, LABEL_MASTER};
    let text =
        std::fs::read_to_string(workspace_root().join("infra/k8s/node-writes.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let (policy, binding) = (&docs[2], &docs[3]);
    assert_eq!(policy["metadata"]["name"], "forewarn-node-deletes");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
                "resources": ["nodes"]}])
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let worker = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"providerID": "aws:///us-east-1a/i-1"}});
    let bare = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}, "spec": {}});
    let handler = ["forewarn-handler", "system:authenticated"];
    let sweeper = ["forewarn-sweeper", "system:authenticated"];
    let delete =
        |old: &Value, groups: &[&str]| node_policy_admits(2, "DELETE", old, &Value::Null, groups);
    assert_eq!(delete(&worker, &handler), Some(true));
    assert_eq!(delete(&bare, &sweeper), Some(true));
    for role in [LABEL_CONTROL_PLANE, LABEL_MASTER] {
        let mut labelled = worker.clone();
        labelled["metadata"]["labels"][role] = json!("");
        let mut tainted = worker.clone();
        tainted["spec"]["taints"] = json!([{"key": role, "effect": "NoSchedule"}]);
        for node in [&labelled, &tainted] {
            assert_eq!(delete(node, &handler), Some(false), "{node}");
            assert_eq!(delete(node, &sweeper), Some(false), "{node}");
            assert_eq!(delete(node, &["system:masters"]), None, "not forewarn's");
        }
    }
}
