//! Resource quantities (`resource.Quantity`) and the resource lists the scheduler adds up.
//!
//! A quantity (`100m`, `1Gi`, `2.5`, `1e3`) is read by `kube_quantity`. The scheduler reads cpu in
//! millicores (`MilliValue`) and everything else in units (`Value`), both rounded up, as
//! [`Resources`] holds them.

use std::collections::BTreeMap;

use kube_quantity::ParsedQuantity;
use serde_json::Value;

/// Largest value a quantity saturates to (the scheduler's int64 arithmetic never gets there
/// with real clusters).
const SATURATED: i128 = i64::MAX as i128 / 4;

/// `1000 × q`, rounded up: thousandths of the quantity's unit. `None` when it does not parse.
pub(crate) fn parse_milli(text: &str) -> Option<i128> {
    let text = text.trim();
    // A suffix alone (`m`) is no quantity, though `kube_quantity` reads it as zero.
    if !text.contains(|c: char| c.is_ascii_digit()) {
        return None;
    }
    // `kube_quantity` 0.9 takes the exa suffixes for an exponent without digits and refuses
    // them: they are read one step down, then multiplied.
    let (text, times) = match (text.strip_suffix("Ei"), text.strip_suffix('E')) {
        (Some(number), _) => (format!("{number}Pi"), 1024.0),
        (None, Some(number)) => (format!("{number}P"), 1000.0),
        (None, None) => (text.to_string(), 1.0),
    };
    let milli = ParsedQuantity::try_from(text).ok()?.to_bytes_f64()? * times * 1000.0;
    // Up to the next thousandth (towards zero when negative), but not for a float's own error:
    // `0.1` is 100 thousandths, not 101.
    let near = milli.round();
    let milli = if (milli - near).abs() <= near.abs() * 1e-12 {
        near
    } else {
        milli.ceil()
    };
    // `as` saturates at i128's bounds, far beyond ours.
    Some((milli as i128).clamp(-SATURATED, SATURATED))
}

fn saturate(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// A quantity in JSON (a string, or a bare number some seeds carry) as thousandths.
fn milli_of(value: &Value) -> Option<i128> {
    match value {
        Value::String(s) => parse_milli(s),
        Value::Number(n) => parse_milli(&n.to_string()),
        _ => None,
    }
}

/// A resource list in the scheduler's units: cpu in millicores, the rest in units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    pub cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// `pods` (a node's allocatable pod count; not a pod request).
    pub pods: i64,
    /// Extended resources, hugepages and anything else, by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Nothing at all.
    pub const ZERO: Self = Self {
        cpu: 0,
        memory: 0,
        ephemeral_storage: 0,
        pods: 0,
        scalar: BTreeMap::new(),
    };

    /// Reads a `ResourceList` object; unparsable quantities count as zero.
    pub fn from_list(list: Option<&Value>) -> Self {
        let mut out = Self::default();
        let Some(map) = list.and_then(Value::as_object) else {
            return out;
        };
        for (name, q) in map {
            let Some(milli) = milli_of(q) else {
                continue;
            };
            out.set(name, milli);
        }
        out
    }

    fn set(&mut self, name: &str, milli: i128) {
        let units = saturate(milli.div_euclid(1000) + i128::from(milli.rem_euclid(1000) != 0));
        match name {
            "cpu" => self.cpu = saturate(milli),
            "memory" => self.memory = units,
            "ephemeral-storage" => self.ephemeral_storage = units,
            "pods" => self.pods = units,
            other => {
                self.scalar.insert(other.to_string(), units);
            }
        }
    }

    /// The amount of one resource by name (`pods` included).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    fn combine(&mut self, other: &Self, f: impl Fn(i64, i64) -> i64) {
        self.cpu = f(self.cpu, other.cpu);
        self.memory = f(self.memory, other.memory);
        self.ephemeral_storage = f(self.ephemeral_storage, other.ephemeral_storage);
        self.pods = f(self.pods, other.pods);
        for (name, v) in &other.scalar {
            let mine = self.scalar.entry(name.clone()).or_insert(0);
            *mine = f(*mine, *v);
        }
    }

    pub fn add(&mut self, other: &Self) {
        self.combine(other, i64::saturating_add);
    }

    pub fn sub(&mut self, other: &Self) {
        self.combine(other, i64::saturating_sub);
        self.scalar.retain(|_, v| *v != 0);
    }

    pub fn max_with(&mut self, other: &Self) {
        self.combine(other, i64::max);
    }

    /// Whether the pod requests nothing the resource filter checks (then only the pod count is).
    pub fn is_empty_request(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// A container's requests, with the API server's defaulting: a resource that has a limit and
/// no request requests its limit.
fn container_requests(container: &Value) -> Resources {
    let resources = container.get("resources");
    let mut requests = Resources::from_list(resources.and_then(|r| r.get("requests")));
    let requested = resources
        .and_then(|r| r.get("requests"))
        .and_then(Value::as_object);
    if let Some(limits) = resources
        .and_then(|r| r.get("limits"))
        .and_then(Value::as_object)
    {
        for (name, q) in limits {
            if requested.is_some_and(|r| r.contains_key(name)) {
                continue;
            }
            if let Some(milli) = milli_of(q) {
                requests.set(name, milli);
            }
        }
    }
    requests.pods = 0;
    requests
}

/// `resourcehelper.PodRequests`: the sum of the containers, against the largest init container
/// (restartable "sidecar" init containers run alongside what follows them), plus `overhead`.
pub(crate) fn pod_requests(spec: &Value) -> Resources {
    let list = |field: &str| {
        spec.get(field)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .to_vec()
    };
    let mut total = Resources::default();
    for c in list("containers") {
        total.add(&container_requests(&c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in list("initContainers") {
        let own = container_requests(&c);
        let during = if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            total.add(&own);
            sidecars.add(&own);
            sidecars.clone()
        } else {
            let mut during = own;
            during.add(&sidecars);
            during
        };
        init_peak.max_with(&during);
    }
    total.max_with(&init_peak);
    total.add(&Resources::from_list(spec.get("overhead")));
    total.pods = 0;
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_parse_in_every_form() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("0.1"), Some(100));
        assert_eq!(parse_milli(".5"), Some(500));
        assert_eq!(parse_milli("1Ki"), Some(1_024_000));
        assert_eq!(parse_milli("1Mi"), Some(1_048_576_000));
        assert_eq!(parse_milli("2Gi"), Some(2 * 1_073_741_824 * 1000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1M"), Some(1_000_000_000));
        assert_eq!(parse_milli("1G"), Some(1_000_000_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("1E3"), Some(1_000_000));
        assert_eq!(parse_milli("1P"), Some(1_000_000_000_000_000_000));
        assert_eq!(
            parse_milli("1E"),
            Some(SATURATED),
            "beyond any node: saturates"
        );
        assert_eq!(parse_milli("1n"), Some(1), "rounds up to a thousandth");
        assert_eq!(parse_milli("1500u"), Some(2));
        assert_eq!(parse_milli("0"), Some(0));
        assert_eq!(parse_milli("+2"), Some(2000));
        assert_eq!(parse_milli("-1"), Some(-1000));
        assert_eq!(parse_milli("1Ei"), Some(SATURATED));
        assert_eq!(parse_milli("2.5"), Some(2500));
        for bad in ["", "m", "1.2.3", "1Xi", "abc", "1 Gi"] {
            assert_eq!(parse_milli(bad), None, "{bad}");
        }
    }

    #[test]
    fn cpu_is_in_millicores_and_the_rest_in_units_rounded_up() {
        let r = Resources::from_list(Some(&json!({
            "cpu": "250m", "memory": "1.5Ki", "pods": "110", "nvidia.com/gpu": 2,
            "ephemeral-storage": "1G", "hugepages-2Mi": "2Mi"
        })));
        assert_eq!(r.cpu, 250);
        assert_eq!(r.memory, 1536);
        assert_eq!(r.pods, 110);
        assert_eq!(r.get("nvidia.com/gpu"), 2);
        assert_eq!(r.ephemeral_storage, 1_000_000_000);
        assert_eq!(r.get("hugepages-2Mi"), 2 * 1024 * 1024);
        let r = Resources::from_list(Some(&json!({"memory": "1m"})));
        assert_eq!(r.memory, 1, "a thousandth of a byte is a byte");
    }

    #[test]
    fn pod_requests_add_containers_and_take_the_largest_init_container() {
        let spec = json!({
            "initContainers": [
                {"name": "big", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m", "example.com/foo": "1"}}},
            ],
            "overhead": {"cpu": "10m"},
        });
        let r = pod_requests(&spec);
        // cpu: max(2000, 750) + 10; memory: max(64Mi, 1Gi); the limit-only resources count.
        assert_eq!(r.cpu, 2010);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.get("example.com/foo"), 1);
    }

    #[test]
    fn sidecars_run_alongside_the_containers_and_later_init_containers() {
        let spec = json!({
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}],
        });
        // Containers with the sidecar: 600m; setup with the sidecar: 1100m.
        assert_eq!(pod_requests(&spec).cpu, 1100);
    }
}
