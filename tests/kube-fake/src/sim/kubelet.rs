//! The kubelet, for what the scheduler model needs: a bound pod starts (`Running`, `Ready`)
//! once the start delay has passed.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::cluster::PodKey;
use super::{Sim, rfc3339, set_condition};
use crate::store::{Store, meta_str, node_of};

impl Sim {
    /// Starts the pod if it is still the one bound then, bound, `Pending` and not terminating.
    pub(super) fn start_pod(
        &mut self,
        store: &mut Store,
        key: &PodKey,
        uid: &str,
        t: DateTime<Utc>,
    ) {
        let okey = self.pod_key(store, key);
        let Some(mut obj) = store.object(&okey).cloned() else {
            return;
        };
        let node = node_of(&obj).unwrap_or_default().to_string();
        let phase = obj.pointer("/status/phase").and_then(Value::as_str);
        if meta_str(&obj, "uid") != Some(uid)
            || meta_str(&obj, "deletionTimestamp").is_some()
            || node.is_empty()
            || !matches!(phase, None | Some("Pending"))
        {
            return;
        }
        let host_ip = store
            .object(&store.key_of(self.kinds.node, None, &node))
            .and_then(|n| n.pointer("/status/addresses"))
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .find(|x| x.get("type").and_then(Value::as_str) == Some("InternalIP"))
            })
            .and_then(|x| x.get("address").cloned());
        self.ips += 1;
        let pod_ip = format!(
            "10.{}.{}.{}",
            (self.ips >> 16) & 0xff,
            (self.ips >> 8) & 0xff,
            self.ips & 0xff
        );
        let at = rfc3339(t);
        let containers: Vec<Value> = obj
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                json!({"name": c.get("name"), "image": c.get("image"), "imageID": "",
                       "ready": true, "started": true, "restartCount": 0,
                       "state": {"running": {"startedAt": at}}})
            })
            .collect();
        if !obj.get("status").is_some_and(Value::is_object) {
            obj["status"] = json!({});
        }
        let status = &mut obj["status"];
        status["phase"] = json!("Running");
        status["startTime"] = json!(at);
        status["podIP"] = json!(pod_ip);
        status["podIPs"] = json!([{"ip": pod_ip}]);
        if let Some(ip) = host_ip {
            status["hostIP"] = ip.clone();
            status["hostIPs"] = json!([{"ip": ip}]);
        }
        status["containerStatuses"] = json!(containers);
        for kind in [
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "Ready",
        ] {
            set_condition(
                &mut obj,
                json!({"type": kind, "status": "True", "lastProbeTime": null,
                       "lastTransitionTime": at}),
            );
        }
        store.write(okey.clone(), obj);
        self.pod_changed(store, &okey, t);
    }
}
