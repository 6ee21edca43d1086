//! Which of the clusters a deployment serves an instance belongs to (one deployment may serve
//! every cluster of an account: `FOREWARN_CLUSTERS`). The instance's tags say it
//! (`kubernetes.io/cluster/<name>`, `eks:cluster-name`, `aws:eks:cluster-name`); forewarn never
//! guesses: an instance is acted on in a cluster only when exactly one served cluster is its.

use crate::domain::facts::InstanceFacts;

/// Where an instance's events are handled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Home {
    /// In this served cluster (`None`: the one cluster of a deployment that names none).
    Served(Option<String>),
    /// Nowhere: the instance is another cluster's, or which served cluster is its cannot be
    /// told. Its pool is recorded, nothing is done (see [`refusal`]).
    Elsewhere,
}

/// The home of `instance` (`None`: EC2 does not know it) among the `served` clusters (empty:
/// one cluster, named by nobody):
///
/// - tagged for exactly one served cluster: that one;
/// - untagged, or unknown, when one cluster is served: that one (its node, found by name in
///   that cluster, is membership enough, as with one cluster);
/// - tagged only for clusters not served, for several served ones, or untagged when several
///   are served: [`Home::Elsewhere`].
pub fn home(instance: Option<&InstanceFacts>, served: &[String]) -> Home {
    let tagged: Vec<&str> = instance.map(InstanceFacts::clusters).unwrap_or_default();
    if served.is_empty() {
        return Home::Served(None);
    }
    let ours: Vec<&String> = served
        .iter()
        .filter(|s| tagged.contains(&s.as_str()))
        .collect();
    match (ours.as_slice(), tagged.is_empty(), served) {
        ([one], _, _) => Home::Served(Some((*one).clone())),
        ([], true, [only]) => Home::Served(Some(only.clone())),
        _ => Home::Elsewhere,
    }
}

/// Why nothing is done for an instance whose home is [`Home::Elsewhere`].
pub fn refusal(instance: Option<&InstanceFacts>) -> String {
    let tagged = instance.map(InstanceFacts::clusters).unwrap_or_default();
    if tagged.is_empty() {
        "the instance has no cluster tag (kubernetes.io/cluster/<name>, eks:cluster-name) and \
         this deployment serves several clusters: nothing is done (its pool is recorded)"
            .into()
    } else {
        format!(
            "instance of cluster {}, not exactly one cluster this deployment serves: nothing \
             is done (its pool is recorded)",
            tagged.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(tags: &[(&str, &str)]) -> InstanceFacts {
        InstanceFacts {
            instance_id: "i-1".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..InstanceFacts::default()
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_tags_name_the_served_cluster() {
        let served = names(&["blue", "green"]);
        let green = tagged(&[("kubernetes.io/cluster/green", "owned")]);
        assert_eq!(
            home(Some(&green), &served),
            Home::Served(Some("green".into()))
        );
        let eks = tagged(&[("eks:cluster-name", "blue")]);
        assert_eq!(home(Some(&eks), &served), Home::Served(Some("blue".into())));
        let aws = tagged(&[("aws:eks:cluster-name", "blue")]);
        assert_eq!(home(Some(&aws), &served), Home::Served(Some("blue".into())));
    }

    #[test]
    fn another_clusters_instance_is_elsewhere() {
        let served = names(&["blue", "green"]);
        let red = tagged(&[("kubernetes.io/cluster/red", "owned")]);
        assert_eq!(home(Some(&red), &served), Home::Elsewhere);
        assert!(refusal(Some(&red)).contains("cluster red"));
    }

    #[test]
    fn never_a_guess_between_served_clusters() {
        let served = names(&["blue", "green"]);
        let both = tagged(&[
            ("kubernetes.io/cluster/blue", "shared"),
            ("kubernetes.io/cluster/green", "shared"),
        ]);
        assert_eq!(home(Some(&both), &served), Home::Elsewhere);
        let untagged = tagged(&[]);
        assert_eq!(home(Some(&untagged), &served), Home::Elsewhere);
        assert_eq!(home(None, &served), Home::Elsewhere);
        assert!(refusal(None).contains("no cluster tag"));
    }

    #[test]
    fn one_served_cluster_keeps_untagged_instances() {
        let served = names(&["blue"]);
        assert_eq!(
            home(Some(&tagged(&[])), &served),
            Home::Served(Some("blue".into()))
        );
        assert_eq!(home(None, &served), Home::Served(Some("blue".into())));
        let red = tagged(&[("kubernetes.io/cluster/red", "owned")]);
        assert_eq!(home(Some(&red), &served), Home::Elsewhere);
        assert_eq!(home(Some(&red), &[]), Home::Served(None));
    }
}
