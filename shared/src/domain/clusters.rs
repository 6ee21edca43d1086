//! A cluster is (account, region, name): one deployment may serve clusters of several accounts
//! (an organization's) and regions, and cluster names are unique only within an account and
//! region. Which served cluster an instance belongs to: one of its own account and region whose
//! name the instance's tags give (`kubernetes.io/cluster/<name>`, `eks:cluster-name`,
//! `aws:eks:cluster-name`); forewarn never guesses: an instance is acted on in a cluster only
//! when exactly one served cluster is its.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use crate::domain::facts::InstanceFacts;

/// The AWS account and region an event comes from: where its instances are described and its
/// lifecycle actions completed. `None`: the deployment's own (or not known, in a local run).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub account: Option<String>,
    pub region: Option<String>,
}

impl Place {
    /// `account` in `region`: test support, compiled for tests and the `fixtures` feature only
    /// (places come from events, settings and clusters).
    #[cfg(any(test, feature = "fixtures"))]
    pub fn of(account: &str, region: &str) -> Place {
        Place {
            account: Some(account.to_string()),
            region: Some(region.to_string()),
        }
    }

    /// Where `event` comes from: its account and region.
    pub fn of_event(event: &crate::domain::event::Event) -> Place {
        Place {
            account: event.account.clone(),
            region: event.region.clone(),
        }
    }

    /// This place, what it does not say taken from `own` (the deployment's own place).
    pub fn or(&self, own: &Place) -> Place {
        Place {
            account: self.account.clone().or_else(|| own.account.clone()),
            region: self.region.clone().or_else(|| own.region.clone()),
        }
    }

    /// Whether an event of `place` is here, both seen from a deployment whose own place is
    /// `own`: a part this place does not know (its own account or region unknown, in a local
    /// run) takes any; else they must be the same.
    pub fn holds(&self, place: &Place, own: &Place) -> bool {
        let (here, there) = (self.or(own), place.or(own));
        let same = |a: &Option<String>, b: &Option<String>| a.is_none() || a == b;
        same(&here.account, &there.account) && same(&here.region, &there.region)
    }
}

/// An AWS account id: 12 ASCII digits.
pub fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// An AWS region's name: lowercase words and a number joined by dashes (`us-east-1`,
/// `us-gov-west-1`, `cn-north-1`, `eu-isoe-west-1`), at most 25 characters.
pub fn is_region(s: &str) -> bool {
    static REGION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new("^[a-z]+(-[a-z]+)+-[0-9]{1,2}$").expect("a valid expression"));
    s.len() <= 25 && REGION.is_match(s)
}

/// A cluster name: 1 to 100 letters, digits, `-`, `_` or `.`.
pub fn is_cluster_name(s: &str) -> bool {
    (1..=100).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A cluster: its account, region and name. An account or region left `None` is the
/// deployment's own, not known (a local run without the own account or a region): such a
/// cluster takes the events of any account (or region), as the deployment then does.
///
/// Written `name`, `account/name` or `account/region/name`: the form it is configured in
/// (the served clusters, `--cluster`), shown in logs, reports and metrics, and signed into a
/// drain's continuation. Shown whole once its account and region are known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId {
    pub place: Place,
    pub name: String,
}

/// A cluster, or a place's every cluster (`*`), as the served clusters list them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Entry {
    /// This cluster.
    One(ClusterId),
    /// Every cluster of this place (`account/*`, `account/region/*`; `*` alone: every served
    /// place's, [`Place::default`] here).
    Every(Place),
}

/// What is wrong with a cluster as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a cluster: {why}")]
pub struct BadCluster {
    pub given: String,
    pub why: &'static str,
}

/// The forms a cluster is written in, for messages.
pub const FORMS: &str = "`name`, `account/name` or `account/region/name` (a 12-digit account \
     id, a region such as `eu-west-1`, a name of 1 to 100 letters, digits, `-`, `_` or `.`)";

impl Entry {
    /// `name`, `account/name`, `account/region/name`, or `*`, `account/*`, `account/region/*`.
    pub fn parse(s: &str) -> Result<Entry, BadCluster> {
        let bad = |why| BadCluster {
            given: s.chars().take(120).collect(),
            why,
        };
        let parts: Vec<&str> = s.split('/').collect();
        let (account, region, name) = match parts.as_slice() {
            [name] => (None, None, *name),
            [account, name] => (Some(*account), None, *name),
            [account, region, name] => (Some(*account), Some(*region), *name),
            _ => return Err(bad("more than three parts separated by `/`")),
        };
        if account.is_some_and(|a| !is_account_id(a)) {
            return Err(bad("its account is not an AWS account id (12 digits)"));
        }
        if region.is_some_and(|r| !is_region(r)) {
            return Err(bad(
                "its region is not an AWS region's name (such as `eu-west-1`)",
            ));
        }
        let place = Place {
            account: account.map(str::to_string),
            region: region.map(str::to_string),
        };
        if name == "*" {
            return Ok(Entry::Every(place));
        }
        if !is_cluster_name(name) {
            return Err(bad(
                "its name is not 1 to 100 letters, digits, `-`, `_` or `.`",
            ));
        }
        Ok(Entry::One(ClusterId::at(&place, name)))
    }
}

impl ClusterId {
    /// The cluster's key under `prefix` in a store: `<prefix>#<account>#<region>#<name>` (`-`
    /// for what its place does not say).
    pub fn key(&self, prefix: &str) -> String {
        let part = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".into());
        let (account, region) = (part(&self.place.account), part(&self.place.region));
        format!("{prefix}#{account}#{region}#{}", self.name)
    }

    /// The cluster `name` of `place`.
    pub fn at(place: &Place, name: &str) -> ClusterId {
        let (place, name) = (place.clone(), name.to_string());
        ClusterId { place, name }
    }

    /// `name`, `account/name` or `account/region/name` (not `*`).
    pub fn parse(s: &str) -> Result<ClusterId, BadCluster> {
        match Entry::parse(s)? {
            Entry::One(id) => Ok(id),
            Entry::Every(_) => Err(BadCluster {
                given: s.chars().take(120).collect(),
                why: "`*` names every cluster, not one",
            }),
        }
    }

    /// This cluster with what it does not say taken from `own` (the deployment's own place).
    pub fn or(&self, own: &Place) -> ClusterId {
        ClusterId::at(&self.place.or(own), &self.name)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.place.account, &self.place.region) {
            (Some(account), Some(region)) => write!(f, "{account}/{region}/{}", self.name),
            (Some(account), None) => write!(f, "{account}/{}", self.name),
            (None, _) => f.write_str(&self.name),
        }
    }
}

/// Where an instance's events are handled, and where a share of a batch runs
/// (the fleet's split of a batch); [`home`] answers only the first two.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Destination {
    /// In this served cluster (`None`: the one cluster of a deployment that names none).
    Cluster(Option<ClusterId>),
    /// Nowhere: nothing to act on, or the instance is another cluster's, or which served
    /// cluster is its cannot be told (see [`refusal`]).
    Elsewhere,
    /// Not known: the instance lookup failed (the batch's, or the event's place's).
    Unrouted,
    /// A continuation naming a cluster this deployment does not serve (by name; `None`: it
    /// names none while the deployment serves several): refused before anything reads it
    /// further, and no client of that cluster is made.
    NotServed(Option<String>),
}

/// The home of `instance` (`None`: EC2 does not know it), an instance of `place` (its event's
/// account and region), among the `served` clusters (empty: one cluster, named by nobody, of the
/// own place), seen from a deployment whose own place is `own`. Only clusters of the instance's
/// own account and region are candidates:
///
/// - tagged for exactly one of them: that one;
/// - untagged, or unknown, when exactly one cluster is served and it is of that place: that one
///   (its node, found by name in that cluster, is membership enough, as with one cluster);
/// - else (tagged only for clusters not served, for several served ones, untagged when several
///   are served, or of a place no served cluster is in): [`Destination::Elsewhere`].
pub fn home(
    instance: Option<&InstanceFacts>,
    place: &Place,
    served: &[ClusterId],
    own: &Place,
) -> Destination {
    if served.is_empty() {
        return if own.holds(place, own) {
            Destination::Cluster(None)
        } else {
            Destination::Elsewhere
        };
    }
    let tagged: Vec<&str> = instance.map(InstanceFacts::clusters).unwrap_or_default();
    let ours: Vec<&ClusterId> = served
        .iter()
        .filter(|c| c.place.holds(place, own) && tagged.contains(&c.name.as_str()))
        .collect();
    match (ours.as_slice(), tagged.is_empty(), served) {
        ([one], _, _) => Destination::Cluster(Some((*one).clone())),
        ([], true, [only]) if only.place.holds(place, own) => {
            Destination::Cluster(Some(only.clone()))
        }
        _ => Destination::Elsewhere,
    }
}

/// Why nothing is done for an instance of `place` whose home is [`Destination::Elsewhere`].
pub fn refusal(instance: Option<&InstanceFacts>, place: &Place) -> String {
    let tagged = instance.map(InstanceFacts::clusters).unwrap_or_default();
    let at = match (&place.account, &place.region) {
        (Some(account), Some(region)) => format!(" (account {account}, region {region})"),
        (Some(account), None) => format!(" (account {account})"),
        _ => String::new(),
    };
    if tagged.is_empty() {
        format!(
            "the instance{at} has no cluster tag (kubernetes.io/cluster/<name>, \
             eks:cluster-name) naming a cluster this deployment serves in its account and \
             region: nothing is done"
        )
    } else {
        format!(
            "instance{at} of cluster {}, not exactly one cluster this deployment serves in its \
             account and region: nothing is done",
            tagged.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "123456789012";
    const MEMBER: &str = "111111111111";

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

    fn own() -> Place {
        Place::of(OWN, "eu-west-1")
    }

    fn ids(n: &[&str]) -> Vec<ClusterId> {
        n.iter()
            .map(|s| ClusterId::parse(s).unwrap().or(&own()))
            .collect()
    }

    fn id(s: &str) -> ClusterId {
        ClusterId::parse(s).unwrap().or(&own())
    }

    fn home_of(instance: Option<&InstanceFacts>, place: &Place, served: &[&str]) -> Destination {
        home(instance, place, &ids(served), &own())
    }

    #[test]
    fn a_cluster_is_written_in_three_forms_and_shown_whole() {
        let bare = ClusterId::parse("prod").unwrap();
        assert_eq!(
            (bare.place.account.as_deref(), bare.name.as_str()),
            (None, "prod")
        );
        assert_eq!(bare.to_string(), "prod");
        assert_eq!(bare.or(&own()).to_string(), "123456789012/eu-west-1/prod");
        let member = ClusterId::parse("111111111111/prod").unwrap();
        assert_eq!(member.to_string(), "111111111111/prod");
        assert_eq!(member.or(&own()).to_string(), "111111111111/eu-west-1/prod");
        let whole = ClusterId::parse("111111111111/us-east-2/prod.eu_1").unwrap();
        assert_eq!(ClusterId::parse(&whole.to_string()).unwrap(), whole);
        assert_eq!(
            Entry::parse("111111111111/*").unwrap(),
            Entry::Every(Place {
                account: Some(MEMBER.into()),
                region: None
            })
        );
        assert_eq!(Entry::parse("*").unwrap(), Entry::Every(Place::default()));
        for (bad, why) in [
            ("", "name"),
            ("a/b", "account"),
            ("1111/prod", "account"),
            ("111111111111/EU/prod", "region"),
            ("111111111111/eu-west-1/pr od", "name"),
            ("111111111111/eu-west-1/a/b", "three parts"),
            ("111111111111/eu-west-1/", "name"),
        ] {
            let e = Entry::parse(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        assert!(
            ClusterId::parse("*")
                .unwrap_err()
                .to_string()
                .contains("every cluster")
        );
    }

    #[test]
    fn the_same_cluster_whatever_the_form() {
        // `id` takes what a cluster does not say from the own place.
        assert_eq!(id("prod"), id("123456789012/prod"));
        assert_ne!(id("prod"), id("111111111111/prod"));
        assert_ne!(id("prod"), id("123456789012/us-east-1/prod"));
    }

    #[test]
    fn the_tags_name_the_served_cluster_of_the_instances_own_account() {
        let served = ["blue", "green", "111111111111/green"];
        let green = tagged(&[("kubernetes.io/cluster/green", "owned")]);
        assert_eq!(
            home_of(Some(&green), &own(), &served),
            Destination::Cluster(Some(id("green")))
        );
        let member = Place::of(MEMBER, "eu-west-1");
        assert_eq!(
            home_of(Some(&green), &member, &served),
            Destination::Cluster(Some(id("111111111111/green")))
        );
        let eks = tagged(&[("eks:cluster-name", "blue")]);
        assert_eq!(
            home_of(Some(&eks), &own(), &served),
            Destination::Cluster(Some(id("blue")))
        );
        // A member's instance tagged for a name only the own account serves is not the own
        // account's cluster's.
        assert_eq!(
            home_of(Some(&eks), &member, &served),
            Destination::Elsewhere
        );
        let aws = tagged(&[("aws:eks:cluster-name", "blue")]);
        assert_eq!(
            home_of(Some(&aws), &Place::default(), &served),
            Destination::Cluster(Some(id("blue"))),
            "an event naming no account is the own account's"
        );
    }

    #[test]
    fn another_region_is_another_cluster() {
        let blue = tagged(&[("eks:cluster-name", "blue")]);
        let served = ["blue", "123456789012/us-east-1/blue"];
        assert_eq!(
            home_of(Some(&blue), &Place::of(OWN, "us-east-1"), &served),
            Destination::Cluster(Some(id("123456789012/us-east-1/blue")))
        );
        assert_eq!(
            home_of(Some(&blue), &Place::of(OWN, "ap-south-1"), &served),
            Destination::Elsewhere
        );
    }

    #[test]
    fn another_clusters_instance_is_elsewhere() {
        let served = ["blue", "green"];
        let red = tagged(&[("kubernetes.io/cluster/red", "owned")]);
        assert_eq!(home_of(Some(&red), &own(), &served), Destination::Elsewhere);
        let why = refusal(Some(&red), &own());
        assert!(why.contains("cluster red") && why.contains(OWN), "{why}");
    }

    #[test]
    fn never_a_guess_between_served_clusters() {
        let served = ["blue", "green"];
        let both = tagged(&[
            ("kubernetes.io/cluster/blue", "shared"),
            ("kubernetes.io/cluster/green", "shared"),
        ]);
        assert_eq!(
            home_of(Some(&both), &own(), &served),
            Destination::Elsewhere
        );
        let untagged = tagged(&[]);
        assert_eq!(
            home_of(Some(&untagged), &own(), &served),
            Destination::Elsewhere
        );
        assert_eq!(home_of(None, &own(), &served), Destination::Elsewhere);
        assert!(refusal(None, &own()).contains("no cluster tag"));
    }

    #[test]
    fn one_served_cluster_keeps_untagged_instances_of_its_own_place_only() {
        let served = ["blue"];
        assert_eq!(
            home_of(Some(&tagged(&[])), &own(), &served),
            Destination::Cluster(Some(id("blue")))
        );
        assert_eq!(
            home_of(None, &own(), &served),
            Destination::Cluster(Some(id("blue")))
        );
        let member = Place::of(MEMBER, "eu-west-1");
        assert_eq!(home_of(None, &member, &served), Destination::Elsewhere);
        assert_eq!(
            home_of(Some(&tagged(&[])), &member, &served),
            Destination::Elsewhere
        );
        let red = tagged(&[("kubernetes.io/cluster/red", "owned")]);
        assert_eq!(home_of(Some(&red), &own(), &served), Destination::Elsewhere);
        // One cluster named by nobody: every instance of the own place, none of another's.
        assert_eq!(
            home(Some(&red), &own(), &[], &own()),
            Destination::Cluster(None)
        );
        assert_eq!(home(None, &member, &[], &own()), Destination::Elsewhere);
    }

    #[test]
    fn an_unknown_own_place_takes_any() {
        let unknown = Place::default();
        let blue = tagged(&[("eks:cluster-name", "blue")]);
        let served = [ClusterId::parse("blue").unwrap()];
        let anywhere = Place::of(MEMBER, "us-east-1");
        assert_eq!(
            home(Some(&blue), &anywhere, &served, &unknown),
            Destination::Cluster(Some(served[0].clone()))
        );
        assert_eq!(
            home(None, &anywhere, &[], &unknown),
            Destination::Cluster(None)
        );
        let named = [ClusterId::parse("111111111111/blue").unwrap()];
        assert_eq!(
            home(
                Some(&blue),
                &Place::of("222222222222", "us-east-1"),
                &named,
                &unknown
            ),
            Destination::Elsewhere,
            "a named account is that account"
        );
    }
}
