//! Calls in the account and region an event came from. An organization's member accounts forward
//! their events to one deployment (`infra/member.yaml`); EC2 and Auto Scaling calls about an
//! instance of a member account are made in that account, with the credentials of a role
//! forewarn assumes there (the settings' member role, the same name in every member account), and in
//! the event's region.
//!
//! [`Accounts::config_for`] answers the SDK configuration for a [`Place`]: the deployment's own
//! for its own account (or an event that names none), else one whose credentials come from STS
//! `AssumeRole` of `arn:<partition>:iam::<account>:role/<name>`, kept per account and region
//! (the SDK's identity cache renews its credentials before they expire). What an event says is
//! checked first: an account that is not 12 digits, or a region that is not a region's name, is
//! refused, never put into an ARN; and without a member role an event of another account
//! is refused, naming the account, rather than answered with the deployment's own credentials.
//! A served account whose role STS refuses, or whose role is refused a call, is
//! [`AccountUnreachable`]: its events fail and come back, they are never acknowledged.
//! [`PerPlace`] keeps one client of a service per place on top of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use aws_config::sts::AssumeRoleProvider;
use aws_config::{Region, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;

pub use crate::domain::clusters::{is_account_id, is_region};
use crate::ports::{AccountUnreachable, FailureKind, NotServed, Place, PortError};

/// The role session name forewarn's sessions in member accounts carry (their CloudTrail entries
/// say it).
pub const SESSION_NAME: &str = "forewarn";

/// What the settings say of accounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountSettings {
    /// The deployment's own account.
    pub own: Option<String>,
    /// The role assumed in every other account.
    pub member_role: Option<String>,
    /// The other accounts served (those the served clusters name): an event of any other is
    /// refused before a role is assumed.
    pub served: std::collections::BTreeSet<String>,
}

/// The partition of a region (`aws`, `aws-cn`, `aws-us-gov`, ...), by its prefix.
pub fn partition_of(region: &str) -> &'static str {
    const PREFIXES: &[(&str, &str)] = &[
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-isob-", "aws-iso-b"),
        ("us-isof-", "aws-iso-f"),
        ("us-iso-", "aws-iso"),
        ("eu-isoe-", "aws-iso-e"),
        ("eusc-", "aws-eusc"),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| region.starts_with(prefix))
        .map_or("aws", |(_, partition)| partition)
}

/// `arn:<partition>:iam::<account>:role/<role>`, in the partition of `region`.
pub fn role_arn(account: &str, role: &str, region: &str) -> String {
    format!("arn:{}:iam::{account}:role/{role}", partition_of(region))
}

/// `base` with the credentials of the role `arn`, assumed as session `session` (STS is called
/// in `base`'s region, with its credentials, at the first call: a role that cannot be assumed
/// fails that call), its calls made in `region`.
pub async fn assume_role(
    base: &SdkConfig,
    arn: String,
    session: &str,
    region: Option<Region>,
) -> SdkConfig {
    let provider = AssumeRoleProvider::builder(arn)
        .configure(base)
        .session_name(session)
        .build()
        .await;
    base.clone()
        .into_builder()
        .credentials_provider(SharedCredentialsProvider::new(provider))
        .region(region)
        .build()
}

/// At most this many characters of a refused value are repeated in an error.
const SHOWN_MAX: usize = 40;

/// A value from an event, as an error repeats it: quoted and escaped (no control character
/// reaches a log line), cut after [`SHOWN_MAX`] characters.
fn shown(value: &str) -> String {
    let cut: String = value.chars().take(SHOWN_MAX).collect();
    let more = if cut.len() < value.len() { "…" } else { "" };
    format!("{cut:?}{more}")
}

/// Why no configuration is given for a place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The event's account is not an account id.
    #[error("the event's account {} is not an AWS account id (12 digits)", shown(.0))]
    InvalidAccount(String),
    /// The event's region is not a region's name.
    #[error("the event's region {} is not an AWS region", shown(.0))]
    InvalidRegion(String),
    /// An event of another account, and no role to assume there.
    #[error(
        "the event is of account {account}, not of this deployment's account {own}: set its \
         member role, FOREWARN_MEMBER_ROLE (deploy infra/member.yaml in that account), to serve it"
    )]
    NotServed { account: String, own: String },
    /// An event of another account that the served clusters do not name: no role is assumed
    /// there.
    #[error(
        "the event is of account {account}, which no cluster this deployment (account {own}) \
         serves is in: no role is assumed there (name its clusters among the served ones, as \
         {account}/<name> or {account}/*, to serve it)"
    )]
    NotListed { account: String, own: String },
    /// An event of a region of another partition: no role of this partition can be assumed
    /// there.
    #[error(
        "the event's region {region} is in partition {}, this deployment's ({own_region}) in {}: \
         a role cannot be assumed across partitions",
        partition_of(.region),
        partition_of(.own_region)
    )]
    OtherPartition { region: String, own_region: String },
    /// An event of a member account that names no region, and no own region to go by.
    #[error("the event of account {0} names no region, and this deployment has none")]
    NoRegion(String),
}

impl AccountError {
    /// What kind of failure: the same event meets it again (never retryable).
    pub fn kind(&self) -> FailureKind {
        match self {
            AccountError::NotServed { .. } | AccountError::NotListed { .. } => {
                FailureKind::Forbidden
            }
            _ => FailureKind::Invalid,
        }
    }

    /// What a lookup of `service` in the place answers: the event's account not served (no
    /// member role is configured, or no served cluster is in it: [`NotServed`], saying this
    /// error, as its source, so that its events are acknowledged), else this error, wrong in
    /// itself.
    pub fn for_lookup(self, service: &'static str) -> PortError {
        let kind = self.kind();
        match &self {
            AccountError::NotServed { account, .. } | AccountError::NotListed { account, .. } => {
                let (account, why) = (account.clone(), self.to_string());
                PortError::new(service, kind, NotServed { account, why })
            }
            _ => PortError::new(service, kind, self),
        }
    }
}

/// The STS error code of a role that cannot be assumed: it does not exist, or its trust policy
/// does not admit the caller (STS says the same of both).
const ROLE_REFUSED: &str = "AccessDenied";

/// What STS said, when one of `error`'s causes is an `AssumeRole` refused with
/// [`ROLE_REFUSED`]: `sts:AssumeRole: AccessDenied: <message>`.
pub fn role_refusal(error: &PortError) -> Option<String> {
    use aws_sdk_sts::error::ProvideErrorMetadata;
    let sts = error.cause::<aws_sdk_sts::operation::assume_role::AssumeRoleError>()?;
    (sts.code() == Some(ROLE_REFUSED)).then(|| match sts.message() {
        Some(message) => format!("sts:AssumeRole: {ROLE_REFUSED}: {message}"),
        None => format!("sts:AssumeRole: {ROLE_REFUSED}"),
    })
}

/// Where calls about a place go: the deployment's own account, or a member account through its
/// role (`role`: the member role's ARN there, [`role_arn`]); in a region.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Own {
        region: Option<String>,
    },
    Member {
        account: String,
        region: String,
        role: String,
    },
}

/// The SDK configurations of the accounts and regions events come from (see the module's
/// documentation). Cloned, it shares its configurations.
#[derive(Debug, Clone)]
pub struct Accounts {
    base: SdkConfig,
    settings: AccountSettings,
    configs: Arc<Mutex<HashMap<Target, SdkConfig>>>,
}

impl Accounts {
    /// Over `base`, the deployment's own configuration (its credentials assume the member
    /// roles, and its region is the own region), as `aws_config` loads it (with its time source
    /// and identity cache: the role provider needs a clock, the member configurations a shared
    /// cache).
    pub fn new(base: &SdkConfig, settings: AccountSettings) -> Accounts {
        Accounts {
            base: base.clone(),
            settings,
            configs: Arc::default(),
        }
    }

    /// Where calls about `place` go, from what the event says, checked.
    pub fn target(&self, place: &Place) -> Result<Target, AccountError> {
        let own_region = self.base.region().map(|r| r.as_ref().to_string());
        let region = match &place.region {
            Some(region) if !is_region(region) => {
                return Err(AccountError::InvalidRegion(region.clone()));
            }
            Some(region) if Some(region) != own_region.as_ref() => Some(region.clone()),
            _ => None,
        };
        if let (Some(theirs), Some(own)) = (&region, &own_region)
            && partition_of(theirs) != partition_of(own)
        {
            let (region, own_region) = (theirs.clone(), own.clone());
            return Err(AccountError::OtherPartition { region, own_region });
        }
        let account = match &place.account {
            None => return Ok(Target::Own { region }),
            Some(account) if !is_account_id(account) => {
                return Err(AccountError::InvalidAccount(account.clone()));
            }
            Some(account) => account.clone(),
        };
        // The own account's, or any when the own account is unknown (a command run without it).
        let own = match &self.settings.own {
            Some(own) if *own != account => own.clone(),
            _ => return Ok(Target::Own { region }),
        };
        let Some(role) = &self.settings.member_role else {
            return Err(AccountError::NotServed { account, own });
        };
        if !self.settings.served.contains(&account) {
            return Err(AccountError::NotListed { account, own });
        }
        let Some(region) = region.or(own_region) else {
            return Err(AccountError::NoRegion(account));
        };
        let role = role_arn(&account, role, &region);
        Ok(Target::Member {
            account,
            region,
            role,
        })
    }

    /// The SDK configuration for calls about `place` (see the module's documentation).
    pub async fn config_for(&self, place: &Place) -> Result<SdkConfig, AccountError> {
        let target = self.target(place)?;
        if let Some(config) = lock(&self.configs).get(&target) {
            return Ok(config.clone());
        }
        let config = match &target {
            Target::Own { region: None } => self.base.clone(),
            Target::Own { region: Some(r) } => {
                let region = Region::new(r.clone());
                self.base.clone().into_builder().region(region).build()
            }
            Target::Member { region, role, .. } => {
                let region = Some(Region::new(region.clone()));
                assume_role(&self.base, role.clone(), SESSION_NAME, region).await
            }
        };
        Ok(lock(&self.configs).entry(target).or_insert(config).clone())
    }

    /// The account of `place`, a served member account, cannot be reached when `error`, met by
    /// a call there, is its member role refused by STS ([`role_refusal`]) or a call the role
    /// made refused as forbidden ([`AccountUnreachable`]: its events fail, to be retried, and
    /// are never acknowledged). `None` for any other error, and for the own account (whose
    /// calls assume no role).
    pub fn unreachable(&self, place: &Place, error: &PortError) -> Option<AccountUnreachable> {
        let Ok(Target::Member { account, role, .. }) = self.target(place) else {
            return None;
        };
        let why = match role_refusal(error) {
            Some(refusal) => refusal,
            None if error.kind == FailureKind::Forbidden => error.to_string(),
            None => return None,
        };
        Some(AccountUnreachable { account, role, why })
    }
}

/// `cache` locked: a poisoned cache is still a cache (what it keeps is built again at worst).
pub(crate) fn lock<T>(cache: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    cache.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One client of a service per place: the own account's, given, for every place that is its;
/// the others' built when asked from [`Accounts::config_for`], which keeps each place's
/// configuration (and with it its credentials and connections): a client is only a handle on it.
#[derive(Debug, Clone)]
pub struct PerPlace<C> {
    own: C,
    accounts: Option<Accounts>,
    build: fn(&SdkConfig) -> C,
}

impl<C: Clone> PerPlace<C> {
    /// `own` for every place (no accounts: a directory of one account and region).
    pub fn single(own: C, build: fn(&SdkConfig) -> C) -> PerPlace<C> {
        PerPlace {
            own,
            accounts: None,
            build,
        }
    }

    /// `own` for the own account and region, clients built by `build` for the others.
    pub fn with_accounts(mut self, accounts: Accounts) -> PerPlace<C> {
        self.accounts = Some(accounts);
        self
    }

    /// The own account and region's client.
    pub fn own(&self) -> &C {
        &self.own
    }

    /// `error`, an answer to `call` about `place`: a served member account whose role is refused
    /// (by STS, or the call by the role) cannot be reached ([`Accounts::unreachable`]), which
    /// may pass (a role being re-created, IAM propagating): retryable.
    pub fn said(&self, place: &Place, call: &'static str, error: PortError) -> PortError {
        match (self.accounts.as_ref()).and_then(|a| a.unreachable(place, &error)) {
            Some(unreachable) => PortError::new(call, FailureKind::Unavailable, unreachable),
            None => error,
        }
    }

    /// The client for a lookup, `call`, about `place`; a place that cannot be served fails,
    /// naming it ([`AccountError::for_lookup`]).
    pub async fn client_for(&self, place: &Place, call: &'static str) -> Result<C, PortError> {
        self.client(place).await.map_err(|e| e.for_lookup(call))
    }

    /// The client for calls about `place`.
    pub async fn client(&self, place: &Place) -> Result<C, AccountError> {
        let Some(accounts) = &self.accounts else {
            return Ok(self.own.clone());
        };
        if accounts.target(place)? == (Target::Own { region: None }) {
            return Ok(self.own.clone());
        }
        Ok((self.build)(&accounts.config_for(place).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts(own: Option<&str>, role: Option<&str>) -> Accounts {
        // As `aws_config` loads it: a time source and an identity cache.
        let mut base = SdkConfig::builder()
            .region(Region::new("us-east-1"))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .identity_cache(aws_config::identity::IdentityCache::lazy().build());
        base.set_time_source(Some(Default::default()));
        Accounts::new(
            &base.build(),
            AccountSettings {
                own: own.map(str::to_string),
                member_role: role.map(str::to_string),
                served: ["111111111111", "210987654321", "222222222222"]
                    .map(String::from)
                    .into_iter()
                    .collect(),
            },
        )
    }

    fn place(account: Option<&str>, region: Option<&str>) -> Place {
        Place {
            account: account.map(str::to_string),
            region: region.map(str::to_string),
        }
    }

    #[test]
    fn names_checked() {
        for ok in [
            "us-east-1",
            "us-gov-west-1",
            "cn-north-1",
            "ap-southeast-3",
            "eu-isoe-west-1",
            "il-central-1",
        ] {
            assert!(is_region(ok), "{ok}");
        }
        for bad in [
            "",
            "us",
            "us-east",
            "US-EAST-1",
            "us-east-1/../x",
            "us--1",
            "us-east-100",
            "us-east-1 ",
            "us:east-1",
            "a-very-long-region-name-east-1",
        ] {
            assert!(!is_region(bad), "{bad:?}");
        }
        assert!(is_account_id("000000000001"));
        for bad in [
            "",
            "12345678901",
            "1234567890123",
            "12345678901a",
            "١٢٣٤٥٦٧٨٩٠١٢",
        ] {
            assert!(!is_account_id(bad), "{bad}");
        }
        assert_eq!(partition_of("us-east-1"), "aws");
        assert_eq!(partition_of("cn-northwest-1"), "aws-cn");
        assert_eq!(partition_of("us-gov-east-1"), "aws-us-gov");
        assert_eq!(partition_of("us-isob-east-1"), "aws-iso-b");
        assert_eq!(partition_of("us-iso-east-1"), "aws-iso");
    }

    #[test]
    fn targets_of_places() {
        let org = accounts(Some("123456789012"), Some("forewarn-member"));
        let own = |region: Option<&str>| Target::Own {
            region: region.map(str::to_string),
        };
        assert_eq!(org.target(&place(None, None)), Ok(own(None)));
        assert_eq!(
            org.target(&place(Some("123456789012"), Some("us-east-1"))),
            Ok(own(None))
        );
        assert_eq!(
            org.target(&place(Some("123456789012"), Some("eu-west-1"))),
            Ok(own(Some("eu-west-1")))
        );
        assert_eq!(
            org.target(&place(Some("111111111111"), None)),
            Ok(Target::Member {
                account: "111111111111".into(),
                region: "us-east-1".into(),
                role: "arn:aws:iam::111111111111:role/forewarn-member".into()
            })
        );
        assert_eq!(
            org.target(&place(Some("111111111111"), Some("eu-west-1"))),
            Ok(Target::Member {
                account: "111111111111".into(),
                region: "eu-west-1".into(),
                role: "arn:aws:iam::111111111111:role/forewarn-member".into()
            })
        );
        assert_eq!(
            role_arn("111111111111", "forewarn-member", "us-gov-west-1"),
            "arn:aws-us-gov:iam::111111111111:role/forewarn-member"
        );
    }

    /// An account the served clusters do not name is refused before any role is assumed
    /// there: a queue sender cannot make forewarn act in (or even call into) it.
    #[tokio::test]
    async fn an_account_no_served_cluster_is_in_is_refused_before_any_role_is_assumed() {
        let org = accounts(Some("123456789012"), Some("forewarn-member"));
        let e = org
            .target(&place(Some("333333333333"), Some("us-east-1")))
            .unwrap_err();
        assert_eq!(e.kind(), FailureKind::Forbidden);
        let lookup = e.clone().for_lookup("ec2");
        let not_served = lookup
            .cause::<NotServed>()
            .expect("acknowledged as not served");
        assert_eq!(not_served.account, "333333333333");
        assert!(e.to_string().contains("333333333333/*"), "{e}");
        // No configuration (no STS call) is made for it.
        assert!(
            org.config_for(&place(Some("333333333333"), None))
                .await
                .is_err()
        );
        assert!(org.configs.lock().unwrap().is_empty());
    }

    #[test]
    fn forged_places_are_refused_with_what_was_wrong() {
        let org = accounts(Some("123456789012"), Some("forewarn-member"));
        for forged in [
            "11111111111",
            "1111111111111",
            "111111111111:role/admin",
            "*",
            "",
        ] {
            let err = org.target(&place(Some(forged), None)).unwrap_err();
            assert_eq!(err, AccountError::InvalidAccount(forged.into()));
            assert!(err.to_string().contains("12 digits"), "{err}");
            assert_eq!(err.kind(), FailureKind::Invalid);
        }
        let long = format!("us-east-1{}\n", "x".repeat(500));
        let err = org
            .target(&place(Some("111111111111"), Some(&long)))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("not an AWS region"), "{text}");
        assert!(
            !text.contains('\n') && text.len() < 200,
            "escaped, cut: {text}"
        );
        let err = org
            .target(&place(Some("111111111111"), Some("cn-north-1")))
            .unwrap_err();
        assert!(
            err.to_string().contains("partition aws-cn") && err.to_string().contains("across"),
            "{err}"
        );
    }

    #[test]
    fn another_account_without_a_member_role_is_refused_naming_it() {
        let single = accounts(Some("123456789012"), None);
        assert_eq!(
            single.target(&place(Some("123456789012"), None)),
            Ok(Target::Own { region: None })
        );
        let err = single
            .target(&place(Some("111111111111"), Some("us-east-1")))
            .unwrap_err();
        assert_eq!(err.kind(), FailureKind::Forbidden);
        let text = err.to_string();
        assert!(
            text.contains("111111111111")
                && text.contains("123456789012")
                && text.contains("member role"),
            "{text}"
        );
        // The own account unknown (a command run): every well-formed place is its own.
        let unknown = accounts(None, None);
        assert_eq!(
            unknown.target(&place(Some("111111111111"), None)),
            Ok(Target::Own { region: None })
        );
        assert!(unknown.target(&place(Some("x"), None)).is_err());
    }

    /// A served member account whose role STS refuses (`AccessDenied`: no such role, or it
    /// does not trust this deployment), found below the errors that wrap it, or whose role is
    /// refused a call, cannot be reached: never "not served". Any other STS error, another
    /// error, or the own account's place is not that.
    #[test]
    fn a_served_account_whose_role_is_refused_is_unreachable_not_unserved() {
        use aws_credential_types::provider::error::CredentialsError;
        use aws_sdk_sts::error::ErrorMetadata;
        use aws_sdk_sts::operation::assume_role::AssumeRoleError;
        let sts = |code: &str| {
            let meta = ErrorMetadata::builder()
                .code(code)
                .message("User: arn:aws:sts::123456789012:assumed-role/h is not authorized")
                .build();
            let refused = CredentialsError::provider_error(AssumeRoleError::generic(meta));
            crate::adapters::aws::AwsError(refused.into())
        };
        let lookup = |kind: FailureKind, code: &str| {
            PortError::new("ec2:DescribeInstances", kind, sts(code))
        };
        let said = role_refusal(&lookup(FailureKind::Unknown, "AccessDenied")).unwrap();
        assert!(
            said.starts_with("sts:AssumeRole: AccessDenied: User: arn:aws:sts"),
            "{said}"
        );
        let other = lookup(FailureKind::Unknown, "RegionDisabledException");
        assert_eq!(role_refusal(&other), None);
        let io = std::io::Error::other("AccessDenied");
        let io = PortError::new("ec2:DescribeInstances", FailureKind::Unknown, io);
        assert_eq!(role_refusal(&io), None);
        let org = accounts(Some("123456789012"), Some("forewarn-member"));
        let member = place(Some("222222222222"), Some("eu-west-1"));
        let unreachable = org
            .unreachable(&member, &lookup(FailureKind::Unknown, "AccessDenied"))
            .unwrap();
        assert_eq!(unreachable.account, "222222222222");
        assert_eq!(
            unreachable.role,
            "arn:aws:iam::222222222222:role/forewarn-member"
        );
        let text = unreachable.to_string();
        assert!(
            text.contains("account 222222222222 is served but cannot be reached")
                && text.contains("arn:aws:iam::222222222222:role/forewarn-member")
                && text.contains("AccessDenied")
                && text.contains("dead-letter queue")
                && text.contains("infra/member.yaml"),
            "{text}"
        );
        // The role assumed, but refused the call (EC2's UnauthorizedOperation is forbidden).
        let denied = PortError::new(
            "ec2:DescribeInstances",
            FailureKind::Forbidden,
            "UnauthorizedOperation: not authorized",
        );
        let unreachable = org.unreachable(&member, &denied).unwrap();
        assert!(
            unreachable.why.contains("UnauthorizedOperation"),
            "{unreachable}"
        );
        // The own account assumes no role; a throttle is a throttle.
        let own = place(Some("123456789012"), None);
        assert_eq!(
            org.unreachable(&own, &lookup(FailureKind::Unknown, "AccessDenied")),
            None
        );
        assert_eq!(org.unreachable(&own, &denied), None);
        assert_eq!(
            org.unreachable(&member, &lookup(FailureKind::Throttled, "Throttling")),
            None
        );
        // No member role at all: an event of another account is of an account not served.
        let single = accounts(Some("123456789012"), None);
        let err = single
            .target(&place(Some("111111111111"), None))
            .unwrap_err();
        let lookup = err.for_lookup("ec2");
        let not_served = lookup.cause::<NotServed>().unwrap();
        assert_eq!(not_served.account, "111111111111");
        assert!(not_served.why.contains("member role"), "{not_served}");
        let forged = single.target(&place(Some("x"), None)).unwrap_err();
        assert_eq!(forged.for_lookup("ec2").cause::<NotServed>(), None);
    }

    #[tokio::test]
    async fn configurations_are_kept_per_account_and_region() {
        let org = accounts(Some("123456789012"), Some("forewarn-member"));
        let member = place(Some("111111111111"), Some("eu-west-1"));
        let first = org.config_for(&member).await.unwrap();
        assert_eq!(first.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert!(first.credentials_provider().is_some());
        assert_eq!(org.configs.lock().unwrap().len(), 1);
        org.config_for(&member).await.unwrap();
        assert_eq!(org.configs.lock().unwrap().len(), 1);
        let own = org.config_for(&place(None, None)).await.unwrap();
        assert_eq!(own.region().map(|r| r.as_ref()), Some("us-east-1"));
        let clients = PerPlace::single(1_u8, |_| 2).with_accounts(org);
        assert_eq!(clients.client(&place(None, None)).await, Ok(1));
        assert_eq!(clients.client(&member).await, Ok(2));
        assert!(clients.client(&place(Some("1"), None)).await.is_err());
    }
}
