//! Members fenced on purpose for maintenance (`kubectl redlock fence`): which slots the user
//! asked to take out, read from an annotation of the RedlockCluster (as CloudNativePG fences
//! instances), and the `Maintenance` condition that reports them.
//!
//! A fenced member is shut out of lock clients and held as after a loss: it serves again only
//! once it is unfenced *and* a full hold has run since it was fenced, so anything done to it
//! meanwhile (a restart, a flush, a config change) cannot let a second client lock a majority.

use std::collections::BTreeMap;

use crate::crd::conditions::{ConditionReason, ConditionType, Desired};
use crate::crd::model::Slot;
use crate::crd::{MemberStatus, RedlockCluster};

/// The annotation that lists the members fenced on purpose: a JSON object from slot number to
/// the reason given, e.g. `{"1": "kernel upgrade on node-b"}`.
pub const FENCED_MEMBERS: &str = "redlock.dev/fenced-members";

/// The slots to keep fenced, and what was wrong with the request if it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Request {
    pub slots: BTreeMap<Slot, String>,
    pub error: Option<String>,
}

/// Reads the fence request of `cluster`. A request that cannot be read never unfences
/// anything: the members on record as fenced stay fenced (unknown means unsafe, and a typo
/// must not put a member under maintenance back into service before its hold).
pub(crate) fn request(cluster: &RedlockCluster, members: &[MemberStatus]) -> Request {
    let Some(raw) = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FENCED_MEMBERS))
    else {
        return Request::default();
    };
    match parse(raw) {
        Ok(slots) => Request { slots, error: None },
        Err(e) => Request {
            slots: members
                .iter()
                .filter_map(|m| Some((m.slot, m.maintenance.clone()?)))
                .collect(),
            error: Some(format!(
                "annotation {FENCED_MEMBERS} is not a JSON object from slot number to reason ({e}); the members fenced so far stay fenced and no other is fenced until it is fixed"
            )),
        },
    }
}

/// Parses the annotation's value. An empty value or object fences nothing.
pub(crate) fn parse(raw: &str) -> Result<BTreeMap<Slot, String>, String> {
    if raw.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let map: BTreeMap<String, String> = serde_json::from_str(raw).map_err(|e| e.to_string())?;
    map.into_iter()
        .map(|(k, reason)| match k.trim().parse::<i32>() {
            Ok(slot) if slot >= 0 => Ok((Slot::new(slot), reason)),
            _ => Err(format!("{k:?} is not a slot number")),
        })
        .collect()
}

/// The annotation's value for `slots` (what `kubectl redlock fence` writes).
pub(crate) fn render(slots: &BTreeMap<Slot, String>) -> String {
    let map: BTreeMap<String, &String> = slots.iter().map(|(s, r)| (s.to_string(), r)).collect();
    serde_json::to_string(&map).expect("a map of strings serializes")
}

/// `Maintenance`: True while a member is fenced on purpose or the request cannot be read.
pub(crate) fn condition(request: &Request, members: &[MemberStatus]) -> Desired {
    let fenced: Vec<String> = members
        .iter()
        .filter_map(|m| Some(format!("{} ({})", m.name, m.maintenance.as_deref()?)))
        .collect();
    if let Some(e) = &request.error {
        return Desired {
            type_: ConditionType::Maintenance,
            status: true,
            reason: ConditionReason::FenceRequestInvalid,
            message: e.clone(),
        };
    }
    if fenced.is_empty() {
        return Desired {
            type_: ConditionType::Maintenance,
            status: false,
            reason: ConditionReason::NoMemberFenced,
            message: "no member is fenced for maintenance".into(),
        };
    }
    Desired {
        type_: ConditionType::Maintenance,
        status: true,
        reason: ConditionReason::MembersFenced,
        message: format!(
            "fenced for maintenance: {}; each serves again once unfenced and its hold has run",
            fenced.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::MemberState;

    fn cluster(annotation: Option<&str>) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(serde_json::json!({}));
        if let Some(a) = annotation {
            c.metadata.annotations = Some([(FENCED_MEMBERS.to_owned(), a.to_owned())].into());
        }
        c
    }

    #[test]
    fn reads_slots_and_reasons() {
        assert_eq!(parse(""), Ok(BTreeMap::new()));
        assert_eq!(parse("{}"), Ok(BTreeMap::new()));
        assert_eq!(
            parse(r#"{"1": "kernel upgrade", "2": ""}"#),
            Ok([
                (Slot::new(1), "kernel upgrade".to_owned()),
                (Slot::new(2), String::new())
            ]
            .into())
        );
        for bad in [
            r#"{"a": "x"}"#,
            r#"{"-1": "x"}"#,
            r#"["1"]"#,
            r#"{"1": 2}"#,
            "1",
            "{",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let slots: BTreeMap<Slot, String> = [
            (Slot::new(0), "a \"b\"".to_owned()),
            (Slot::new(10), "c".to_owned()),
        ]
        .into();
        assert_eq!(parse(&render(&slots)), Ok(slots));
    }

    #[test]
    fn an_unreadable_request_keeps_what_is_fenced_and_fences_nothing_new() {
        let members = [
            MemberStatus {
                maintenance: Some("disk".into()),
                ..MemberStatus::new("locks-0".into(), 0, MemberState::Held)
            },
            MemberStatus::new("locks-1".into(), 1, MemberState::Ready),
        ];
        assert_eq!(request(&cluster(None), &members), Request::default());
        let ok = request(&cluster(Some(r#"{"1": "x"}"#)), &members);
        assert_eq!(ok.slots, [(Slot::new(1), "x".to_owned())].into());
        assert_eq!(ok.error, None);
        let bad = request(&cluster(Some(r#"{"1": "x""#)), &members);
        assert_eq!(bad.slots, [(Slot::new(0), "disk".to_owned())].into());
        assert!(bad.error.as_deref().unwrap().contains(FENCED_MEMBERS));
        let c = condition(&bad, &members);
        assert_eq!((c.status, c.reason), (true, ConditionReason::FenceRequestInvalid));
        let c = condition(&ok, &members);
        assert_eq!((c.status, c.reason), (true, ConditionReason::MembersFenced));
        assert!(c.message.contains("locks-0 (disk)"), "{}", c.message);
        let c = condition(&Request::default(), &members[1..]);
        assert_eq!((c.status, c.reason), (false, ConditionReason::NoMemberFenced));
    }
}
