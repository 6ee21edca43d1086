//! The template resolved for one deployment (`Deployment`), the IAM matching the policies'
//! checks share, and the principals, rules and member stack the tests name.

use std::process::Command;

use forewarn_tests::moto::workspace_root;
use serde_json::{Value, json};

/// `infra/forewarn.yaml` as JSON (see [`template`]).
pub(crate) fn stack_template() -> Value {
    template("infra/forewarn.yaml")
}

/// The template at `path` (under the workspace) as JSON, its intrinsic functions in their long
/// form (`{"Fn::GetAtt": ["Queue", "Arn"]}`), read by cfn-lint's own template decoder (the
/// venv's Python), so that the short forms (`!GetAtt`, `!If`, ...) need no YAML support here.
pub(crate) fn template(path: &str) -> Value {
    let root = workspace_root();
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/test.sh (it installs requirements.txt into .venv)",
        python.display()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys, cfnlint.decode as d\n\
             t, m = d.decode(sys.argv[1])\n\
             assert not m, m\n\
             json.dump(t, sys.stdout, default=str)",
        )
        .arg(root.join(path))
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "decoding the template failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoded template is JSON")
}

// ---------------------------------------------------------------------------------------------
// The template's resources as one deployment resolves them

/// The account, region and stack name intrinsic functions resolve to.
pub(crate) const ACCOUNT: &str = "123456789012";
pub(crate) const REGION: &str = "us-east-1";
pub(crate) const STACK: &str = "forewarn-demo";

/// The template with parameter values (the defaults, but for `overrides`): resolves intrinsic
/// functions the way CloudFormation does, for the ones the stack uses. A resource's `Arn` is
/// `arn:aws:test:::<logical id>`, its `Ref` `ref:<logical id>`.
pub(crate) struct Deployment {
    pub(crate) template: Value,
    params: std::collections::BTreeMap<String, String>,
}

impl Deployment {
    /// `infra/forewarn.yaml` (stack [`STACK`]) serving cluster `demo` unless `overrides` give
    /// other `Clusters`.
    pub(crate) fn new(overrides: &[(&str, &str)]) -> Deployment {
        let mut d = Deployment::of("infra/forewarn.yaml", overrides);
        d.params.entry("Clusters".into()).or_insert("demo".into());
        d
    }

    /// The template at `path` with its defaults but for `overrides`.
    pub(crate) fn of(path: &str, overrides: &[(&str, &str)]) -> Deployment {
        let template = template(path);
        let mut params: std::collections::BTreeMap<String, String> = template["Parameters"]
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, p)| {
                let v = match p.get("Default")? {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                Some((k.clone(), v))
            })
            .collect();
        for (k, v) in overrides {
            assert!(template["Parameters"].get(*k).is_some(), "no parameter {k}");
            params.insert(k.to_string(), v.to_string());
        }
        Deployment { template, params }
    }

    pub(crate) fn arn(resource: &str) -> String {
        format!("arn:aws:test:::{resource}")
    }

    fn reference(&self, name: &str) -> Option<Value> {
        Some(json!(match name {
            "AWS::NoValue" => return None,
            "AWS::Partition" => "aws".to_string(),
            "AWS::Region" => REGION.to_string(),
            "AWS::AccountId" => ACCOUNT.to_string(),
            "AWS::StackName" => STACK.to_string(),
            _ => match self.params.get(name) {
                // A list parameter is a list: its value split at commas, as CloudFormation does.
                Some(v) if self.template["Parameters"][name]["Type"] == "CommaDelimitedList" => {
                    return Some(json!(v.split(',').collect::<Vec<_>>()));
                }
                Some(v) => v.clone(),
                None => {
                    assert!(
                        self.template["Resources"].get(name).is_some(),
                        "Ref to nothing: {name}"
                    );
                    format!("ref:{name}")
                }
            },
        }))
    }

    fn attribute(&self, resource: &str, attribute: &str) -> String {
        assert!(
            self.template["Resources"].get(resource).is_some(),
            "GetAtt of nothing: {resource}"
        );
        match attribute {
            "Arn" => Deployment::arn(resource),
            _ => format!("{resource}.{attribute}"),
        }
    }

    pub(crate) fn condition(&self, name: &str) -> bool {
        self.truth(&self.template["Conditions"][name])
    }

    fn truth(&self, v: &Value) -> bool {
        let (f, args) = v.as_object().and_then(|o| o.iter().next()).unwrap();
        match f.as_str() {
            "Fn::Equals" => self.resolve(&args[0]) == self.resolve(&args[1]),
            "Fn::Not" => !self.truth(&args[0]),
            "Fn::And" => args.as_array().unwrap().iter().all(|a| self.truth(a)),
            "Fn::Or" => args.as_array().unwrap().iter().any(|a| self.truth(a)),
            "Condition" => self.condition(args.as_str().unwrap()),
            other => panic!("condition function {other}"),
        }
    }

    fn sub(&self, text: &str, vars: &serde_json::Map<String, Value>) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let end = rest[i..].find('}').unwrap() + i;
            let name = &rest[i + 2..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str(&format!("${{{literal}}}"));
            } else if let Some(v) = vars.get(name) {
                out.push_str(self.resolve(v).unwrap().as_str().unwrap());
            } else if let Some((resource, attribute)) = name.split_once('.') {
                out.push_str(&self.attribute(resource, attribute));
            } else {
                out.push_str(self.reference(name).unwrap().as_str().unwrap());
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `v` resolved; `None`: `AWS::NoValue` (dropped from the list or map holding it).
    fn resolve(&self, v: &Value) -> Option<Value> {
        match v {
            Value::Array(items) => Some(Value::Array(
                items.iter().filter_map(|i| self.resolve(i)).collect(),
            )),
            Value::Object(o)
                if o.len() == 1 && o.keys().next().unwrap().starts_with("Fn::")
                    || o.contains_key("Ref") && o.len() == 1 =>
            {
                let (f, args) = o.iter().next().unwrap();
                match f.as_str() {
                    "Ref" => self.reference(args.as_str().unwrap()),
                    "Fn::GetAtt" => Some(json!(
                        self.attribute(args[0].as_str().unwrap(), args[1].as_str().unwrap())
                    )),
                    "Fn::If" => {
                        let branch = if self.condition(args[0].as_str().unwrap()) {
                            1
                        } else {
                            2
                        };
                        self.resolve(&args[branch])
                    }
                    "Fn::Sub" => Some(json!(match args {
                        Value::String(text) => self.sub(text, &serde_json::Map::new()),
                        _ => self.sub(args[0].as_str().unwrap(), args[1].as_object().unwrap()),
                    })),
                    "Fn::Split" => {
                        let text = self.resolve(&args[1]).unwrap();
                        Some(json!(
                            text.as_str()
                                .unwrap()
                                .split(args[0].as_str().unwrap())
                                .collect::<Vec<_>>()
                        ))
                    }
                    "Fn::Select" => {
                        let index = match &args[0] {
                            Value::String(i) => i.parse::<usize>().unwrap(),
                            i => usize::try_from(i.as_u64().unwrap()).unwrap(),
                        };
                        let items = self.resolve(&args[1]).unwrap();
                        Some(items[index].clone())
                    }
                    "Fn::FindInMap" => {
                        let key = |i: usize| {
                            let k = self.resolve(&args[i]).unwrap();
                            k.as_str().map_or_else(|| k.to_string(), str::to_string)
                        };
                        let value = &self.template["Mappings"][key(0)][key(1)][key(2)];
                        assert!(!value.is_null(), "no mapping {args}");
                        Some(value.clone())
                    }
                    "Fn::Join" => {
                        let items = self.resolve(&args[1]).unwrap();
                        let items: Vec<&str> = items
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|i| i.as_str().unwrap())
                            .collect();
                        Some(json!(items.join(args[0].as_str().unwrap())))
                    }
                    other => panic!("intrinsic function {other} is not resolved here"),
                }
            }
            Value::Object(o) => Some(Value::Object(
                o.iter()
                    .filter_map(|(k, v)| Some((k.clone(), self.resolve(v)?)))
                    .collect(),
            )),
            other => Some(other.clone()),
        }
    }

    /// A resource's properties, resolved.
    pub(crate) fn properties(&self, resource: &str) -> Value {
        let r = &self.template["Resources"][resource];
        assert!(r.is_object(), "no resource {resource}");
        self.resolve(&r["Properties"]).unwrap()
    }

    /// An output's value, resolved.
    pub(crate) fn output(&self, name: &str) -> String {
        let v = self
            .resolve(&self.template["Outputs"][name]["Value"])
            .unwrap();
        v.as_str().unwrap().to_string()
    }
}

pub(crate) const RULES: [&str; 7] = [
    "SpotInterruptionRule",
    "RebalanceRecommendationRule",
    "StateChangeRule",
    "CapacityReservationInterruptionRule",
    "HealthScheduledChangeRule",
    "AsgTerminateLifecycleRule",
    "AsgLaunchLifecycleRule",
];
pub(crate) const EVENTS: &str = "events.amazonaws.com";
pub(crate) const HOOK_ROLE: &str = "arn:aws:iam::123456789012:role/asg-hook-notifications";
pub(crate) const REDRIVE_ROLE: &str = "arn:aws:iam::123456789012:role/ops/dlq-redrive";
pub(crate) const ADMIN_ROLE: &str = "arn:aws:iam::123456789012:role/Admin";

/// Whether `pattern` (an IAM ARN or action pattern: `*` any run of characters, `?` one) matches
/// `text`.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => {
            pattern.len() == text.len()
                && pattern
                    .chars()
                    .zip(text.chars())
                    .all(|(p, t)| p == '?' || p == t)
        }
        Some((head, rest)) => {
            text.len() >= head.len()
                && glob(head, &text[..head.len()])
                && (head.len()..=text.len()).any(|i| glob(rest, &text[i..]))
        }
    }
}

/// The strings of a policy element: one, or a list.
pub(crate) fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap()).collect(),
        Value::String(s) => vec![s.as_str()],
        other => panic!("not a string or a list: {other}"),
    }
}

/// A role's inline policy of this name, parsed when it is a JSON string.
pub(crate) fn inline_policy(role: &Value, name: &str) -> Value {
    let policy = role["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["PolicyName"] == name)
        .unwrap_or_else(|| panic!("no policy {name}"));
    match &policy["PolicyDocument"] {
        Value::String(text) => serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{name} is not JSON ({e}):\n{text}")),
        document => document.clone(),
    }
}

/// A group of this account and region named `name`.
pub(crate) fn group(name: &str) -> String {
    format!(
        "arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:6d2c4a8e:autoScalingGroupName/{name}"
    )
}

// ---------------------------------------------------------------------------------------------
// Many clusters, and an organization (infra/member.yaml)

/// The stack's four outputs of the functions' environment: each function's, as a file and as
/// `--env-var` pairs.
pub(crate) const ENV_OUTPUTS: [&str; 4] = [
    "HandlerEnvFile",
    "SweeperEnvFile",
    "HandlerEnvVars",
    "SweeperEnvVars",
];

/// An environment output's variables: `KEY=VALUE` lines (an env file), or pairs separated by
/// commas (`--env-var`, whose values then hold no comma).
pub(crate) fn env_of(text: &str) -> std::collections::BTreeMap<String, String> {
    let separator = if text.contains('\n') { '\n' } else { ',' };
    text.split(separator)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {p}"));
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

/// The statements of every policy of a role (inline, and `extra` policy resources naming it)
/// whose actions are of `service` (`eks:`, `sts:`).
pub(crate) fn statements_of(d: &Deployment, role: &str, service: &str) -> Vec<Value> {
    let properties = d.properties(role);
    let mut documents: Vec<Value> = properties["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| inline_policy(&properties, p["PolicyName"].as_str().unwrap()))
        .collect();
    for (name, resource) in d.template["Resources"].as_object().unwrap() {
        let applies = resource
            .get("Condition")
            .is_none_or(|c| d.condition(c.as_str().unwrap()));
        if resource["Type"] == "AWS::IAM::Policy" && applies {
            let policy = d.properties(name);
            if policy["Roles"]
                .as_array()
                .unwrap()
                .contains(&json!(format!("ref:{role}")))
            {
                documents.push(policy["PolicyDocument"].clone());
            }
        }
    }
    documents
        .iter()
        .flat_map(|d| d["Statement"].as_array().unwrap().clone())
        .filter(|s| strings(&s["Action"]).iter().any(|a| a.starts_with(service)))
        .collect()
}

/// The central deployment's bus and roles, as a member stack is given them.
pub(crate) const CENTRAL: &str = "210987654321";
pub(crate) const CENTRAL_BUS: &str =
    "arn:aws:events:us-east-1:210987654321:event-bus/forewarn-demo";
pub(crate) const CENTRAL_HANDLER: &str =
    "arn:aws:iam::210987654321:role/forewarn-demo-HandlerRole-X1";
pub(crate) const CENTRAL_SWEEPER: &str =
    "arn:aws:iam::210987654321:role/forewarn-demo-SweeperRole-X2";

/// `infra/member.yaml` resolved in account [`ACCOUNT`] for the central deployment above, serving
/// clusters `a` and `b` unless `overrides` say otherwise.
pub(crate) fn member(overrides: &[(&str, &str)]) -> Deployment {
    let mut all = vec![
        ("CentralEventBusArn", CENTRAL_BUS),
        ("HandlerRoleArn", CENTRAL_HANDLER),
        ("SweeperRoleArn", CENTRAL_SWEEPER),
        ("ClusterNames", "a,b"),
    ];
    all.extend_from_slice(overrides);
    Deployment::of("infra/member.yaml", &all)
}
