//! The `detail` of AWS Health events (source `aws.health`): EC2 scheduled changes (instance
//! retirement, maintenance) name the instances they affect; forewarn takes the EC2
//! `scheduledChange` events and leaves the others unsupported.
//!
//! A scheduled retirement (`events/08-health-scheduled-change-rfc1123.json`, description
//! shortened): AWS Health writes its times in RFC 1123 (see [`super::parse_time`]).
//!
//! ```json
//! {
//!   "version": "0",
//!   "id": "a9a1a080-da21-4329-beda-4a08db8572fd",
//!   "detail-type": "AWS Health Event",
//!   "source": "aws.health",
//!   "account": "123456789012",
//!   "time": "2026-11-20T10:00:28Z",
//!   "region": "us-east-1",
//!   "resources": ["i-0a1b2c3d4e5f60008"],
//!   "detail": {
//!     "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_aad6ca80-231d-4d2a-b80b-291a3a02d4ba",
//!     "service": "EC2",
//!     "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
//!     "eventTypeCategory": "scheduledChange",
//!     "eventScopeCode": "ACCOUNT_SPECIFIC",
//!     "communicationId": "46b72ec447e385691eec425576996e30662da3e9-1",
//!     "startTime": "Sat, 21 Nov 2026 10:30:00 GMT",
//!     "endTime": "Sat, 21 Nov 2026 12:30:00 GMT",
//!     "lastUpdatedTime": "Fri, 20 Nov 2026 10:00:25 GMT",
//!     "statusCode": "upcoming",
//!     "eventRegion": "us-east-1",
//!     "eventDescription": [{"language": "en_US", "latestDescription": "EC2 has detected degradation of the underlying hardware hosting your Amazon EC2 instance ..."}],
//!     "affectedEntities": [
//!       {
//!         "entityValue": "i-0a1b2c3d4e5f60008",
//!         "lastUpdatedTime": "Fri, 20 Nov 2026 10:00:25 GMT",
//!         "status": "PENDING",
//!         "tags": {"eks:cluster-name": "demo", "eks:nodegroup-name": "ng-general"}
//!       }
//!     ],
//!     "affectedAccount": "123456789012",
//!     "page": "1",
//!     "totalPages": "1"
//!   }
//! }
//! ```

use serde::Deserialize;
use serde_json::Value;

use super::fields::{Fields, Obj, Parsed, unsupported};
use super::{DecodeError, Detail, EventKind, is_instance_id};

/// What a Health event is about: read first, so that the rest of an event forewarn does not
/// handle is never read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct About {
    service: Option<String>,
    event_type_category: Option<String>,
}

/// An EC2 scheduled change.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Scheduled {
    event_type_code: Option<String>,
    event_arn: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
    status_code: Option<String>,
    affected_entities: Option<Vec<Obj<Entity>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entity {
    entity_value: Option<String>,
    status: Option<String>,
}

/// An `AWS Health Event`: an EC2 scheduled change names its instances in
/// `affectedEntities[].entityValue` (other entities, and repeats, are left out); any other
/// service or category is unsupported.
pub(crate) fn scheduled_change(f: &Fields<'_>, detail: &Value) -> Result<Parsed, DecodeError> {
    let about: About = f.read(detail, "detail")?;
    let service = about.service.unwrap_or_default();
    let category = about.event_type_category.unwrap_or_default();
    if service != "EC2" || category != "scheduledChange" {
        return Ok(unsupported(format!(
            "AWS Health event for service `{service}`, category `{category}`: only EC2 scheduledChange events are handled"
        )));
    }
    let d: Scheduled = f.read(detail, "detail")?;
    // Empty is absent: the drain deadline then falls back as for events that give none.
    let given = |t: Option<String>| t.filter(|s| !s.trim().is_empty());
    let start_time = f.time(given(d.start_time).as_deref(), "detail.startTime")?;
    let end_time = f.time(given(d.end_time).as_deref(), "detail.endTime")?;
    let status_closed = d
        .status_code
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("closed"));
    let mut ids: Vec<String> = Vec::new();
    let mut closed: Vec<String> = Vec::new();
    for Obj(entity) in d.affected_entities.unwrap_or_default() {
        let over = entity.status.as_deref().map(str::trim).is_some_and(|s| {
            s.eq_ignore_ascii_case("RESOLVED") || s.eq_ignore_ascii_case("CANCELLED")
        });
        if let Some(value) = entity.entity_value.as_deref().map(str::trim)
            && is_instance_id(value)
            && !ids.iter().any(|x| x == value)
        {
            ids.push(value.to_string());
            if over || status_closed {
                closed.push(value.to_string());
            }
        }
    }
    if ids.is_empty() {
        return Err(f.err(
            "detail.affectedEntities",
            "no entityValue is an EC2 instance id",
        ));
    }
    let detail = Detail::Scheduled {
        event_type_code: d.event_type_code.unwrap_or_default(),
        event_arn: d.event_arn,
        start_time,
        end_time,
        closed,
    };
    Ok((EventKind::ScheduledChange, ids, detail))
}
