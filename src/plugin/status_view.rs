//! `kubectl redlock status`: what a cluster looks like at a glance, built from the objects
//! read (pure, so every case is tested without an API server) and rendered as text (coloured
//! on a terminal) or JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::crd::conditions::ConditionType;
use crate::crd::model::quorum;
use crate::crd::{MemberState, MemberStatus, RedlockCluster};

/// Whether the operator looks alive, as far as its Lease tells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub(crate) enum OperatorState {
    /// The Lease was renewed within its duration.
    Running {
        holder: String,
        renewed_seconds_ago: f64,
    },
    /// The Lease exists but its holder stopped renewing it.
    NotRunning { detail: String },
    /// It could not be told (no Lease found, no permission to read it).
    Unknown { detail: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemberView {
    pub slot: i32,
    pub name: String,
    pub state: String,
    pub serving: bool,
    pub node: Option<String>,
    pub zone: Option<String>,
    pub pod_ip: Option<String>,
    pub run_id: Option<String>,
    pub held_until: Option<String>,
    /// Seconds until `held_until` (0 once passed).
    pub hold_left_seconds: Option<f64>,
    pub maintenance: Option<String>,
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventView {
    pub time: Option<String>,
    /// Seconds before the status was read.
    pub age_seconds: Option<f64>,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
}

/// Everything `status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusView {
    pub name: String,
    pub namespace: String,
    pub instances: i32,
    /// Of the list clients are told (it can differ from `instances` during a resize).
    pub published_instances: i32,
    pub quorum: i32,
    pub serving: i32,
    /// How many more members may stop serving before locks cannot be taken (negative: that
    /// many are missing for a quorum).
    pub more_may_fail: i32,
    pub max_lock_ttl: Option<String>,
    pub hold: Option<String>,
    pub max_lock_ttl_lowers_at: Option<String>,
    /// The operator has not yet acted on the latest spec.
    pub spec_pending: bool,
    pub operator: OperatorState,
    pub members: Vec<MemberView>,
    pub conditions: Vec<ConditionView>,
    pub events: Vec<EventView>,
}

/// Zone label of nodes, by node name.
pub(crate) type Zones = BTreeMap<String, String>;

/// How many recent events `status` shows.
pub(crate) const EVENTS_SHOWN: usize = 10;

pub(crate) fn view(
    cluster: &RedlockCluster,
    pods: &[Pod],
    zones: &Zones,
    events: &[Event],
    operator: OperatorState,
    now: Timestamp,
) -> StatusView {
    let status = cluster.status.clone().unwrap_or_default();
    let instances = cluster.spec.instances;
    let published = status.published_instances.unwrap_or(instances);
    // What a client of the published list needs (a resize can keep it longer than N).
    let q = quorum(published).max(status.quorum.unwrap_or(0));
    let members: Vec<MemberView> = status
        .members
        .iter()
        .map(|m| member_view(m, pods, zones, published, now))
        .collect();
    let serving = members.iter().filter(|m| m.serving).count() as i32;
    let mut events: Vec<EventView> = events.iter().map(|e| event_view(e, now)).collect();
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let events = events.split_off(events.len().saturating_sub(EVENTS_SHOWN));
    StatusView {
        name: cluster.metadata.name.clone().unwrap_or_default(),
        namespace: cluster.metadata.namespace.clone().unwrap_or_default(),
        instances,
        published_instances: published,
        quorum: q,
        serving,
        more_may_fail: serving - q,
        max_lock_ttl: status.hold.as_ref().map(|h| h.max_lock_ttl.to_string()),
        hold: status.hold.as_ref().map(|h| h.duration.to_string()),
        max_lock_ttl_lowers_at: status
            .hold
            .as_ref()
            .and_then(|h| Some(h.lowers_at.as_ref()?.0.to_string())),
        spec_pending: status.observed_generation != cluster.metadata.generation,
        operator,
        members,
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionView {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
        events,
    }
}

fn member_view(m: &MemberStatus, pods: &[Pod], zones: &Zones, published: i32, now: Timestamp) -> MemberView {
    let node = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(m.name.as_str()))
        .and_then(|p| p.spec.as_ref()?.node_name.clone());
    let hold_left = m
        .held_until
        .as_ref()
        .filter(|_| m.state.is_holding())
        .map(|u| u.0.duration_since(now).as_secs_f64().max(0.0));
    MemberView {
        slot: m.slot.index(),
        name: m.name.clone(),
        state: format!("{:?}", m.state),
        serving: m.state == MemberState::Ready && m.slot.within(published),
        zone: node.as_ref().and_then(|n| zones.get(n).cloned()),
        node,
        pod_ip: m.pod_ip.clone(),
        run_id: m.run_id.clone(),
        held_until: m
            .held_until
            .as_ref()
            .filter(|_| m.state.is_holding())
            .map(|u| u.0.to_string()),
        hold_left_seconds: hold_left,
        maintenance: m.maintenance.clone(),
        message: m.message.clone(),
    }
}

fn event_view(e: &Event, now: Timestamp) -> EventView {
    // Events from events.k8s.io (what the operator's recorder writes) carry `eventTime` and a
    // series; older ones `lastTimestamp`.
    let time = e
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    EventView {
        time: time.map(|t| t.to_string()),
        age_seconds: time.map(|t| now.duration_since(t).as_secs_f64().max(0.0)),
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: e
            .series
            .as_ref()
            .map(|s| s.count.unwrap_or(1))
            .or(e.count)
            .unwrap_or(1),
    }
}

/// ANSI colours, or none (output piped).
#[derive(Clone, Copy)]
pub(crate) struct Style {
    pub colour: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn good(self, t: &str) -> String {
        self.paint("32", t)
    }
    fn warn(self, t: &str) -> String {
        self.paint("33", t)
    }
    fn bad(self, t: &str) -> String {
        self.paint("31", t)
    }
    fn bold(self, t: &str) -> String {
        self.paint("1", t)
    }
}

/// Whether a condition in this status is good news. A type this operator does not write is
/// taken as good news when `True`.
fn condition_ok(type_: &str, status: &str) -> bool {
    let true_is_bad = ConditionType::parse(type_).is_some_and(ConditionType::true_is_bad);
    (status == "True") != true_is_bad
}

/// The text `kubectl redlock status` prints. Long on purpose: its sections in the order they
/// appear on the screen.
pub(crate) fn render_text(v: &StatusView, style: Style) -> String {
    let mut out = String::new();
    let s = style;
    let _ = writeln!(out, "{} {}/{}", s.bold("RedlockCluster"), v.namespace, v.name);
    let quorum_line = if v.more_may_fail >= 0 {
        s.good(&format!(
            "{} of {} serving, quorum {}: {} more may fail",
            v.serving, v.published_instances, v.quorum, v.more_may_fail
        ))
    } else {
        s.bad(&format!(
            "{} of {} serving, quorum {}: QUORUM LOST, locks cannot be taken",
            v.serving, v.published_instances, v.quorum
        ))
    };
    let _ = writeln!(out, "Quorum:       {quorum_line}");
    if v.published_instances != v.instances {
        let _ = writeln!(
            out,
            "Resizing:     {} asked for; clients are told {}",
            v.instances, v.published_instances
        );
    }
    let _ = writeln!(
        out,
        "maxLockTTL:   {} in force, hold {}{}",
        v.max_lock_ttl.as_deref().unwrap_or("?"),
        v.hold.as_deref().unwrap_or("?"),
        v.max_lock_ttl_lowers_at
            .as_ref()
            .map(|t| format!(" (a lower published value takes effect at {t})"))
            .unwrap_or_default()
    );
    let operator = match &v.operator {
        OperatorState::Running {
            holder,
            renewed_seconds_ago,
        } => s.good(&format!(
            "running ({holder}, lease renewed {renewed_seconds_ago:.0}s ago)"
        )),
        OperatorState::NotRunning { detail } => s.bad(&format!("NOT RUNNING: {detail}")),
        OperatorState::Unknown { detail } => s.warn(&format!("unknown: {detail}")),
    };
    let _ = writeln!(out, "Operator:     {operator}");
    if v.spec_pending {
        let _ = writeln!(
            out,
            "              {}",
            s.warn("the operator has not acted on the latest spec yet")
        );
    }
    let _ = writeln!(out, "\n{}", s.bold("Members"));
    let _ = writeln!(
        out,
        "  {:<4} {:<24} {:<9} {:<16} {:<10} {:<15} {:<12} RUN ID",
        "SLOT", "NAME", "STATE", "NODE", "ZONE", "POD IP", "HOLD LEFT"
    );
    for m in &v.members {
        let state = match (m.state.as_str(), m.serving) {
            (_, true) => s.good(&format!("{:<9}", m.state)),
            ("Lost", _) => s.bad(&format!("{:<9}", m.state)),
            _ => s.warn(&format!("{:<9}", m.state)),
        };
        let left = match m.hold_left_seconds {
            Some(l) if l > 0.0 => format!("{l:.1}s"),
            Some(_) => "ended".to_owned(),
            None => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "  {:<4} {:<24} {state} {:<16} {:<10} {:<15} {:<12} {}",
            m.slot,
            m.name,
            m.node.as_deref().unwrap_or("-"),
            m.zone.as_deref().unwrap_or("-"),
            m.pod_ip.as_deref().unwrap_or("-"),
            left,
            m.run_id.as_deref().map_or("-", |r| &r[..r.len().min(12)]),
        );
        if let Some(reason) = &m.maintenance {
            let _ = writeln!(
                out,
                "       {}",
                s.warn(&format!("fenced for maintenance: {reason}"))
            );
        }
        if let Some(msg) = &m.message {
            let _ = writeln!(out, "       {msg}");
        }
    }
    let _ = writeln!(out, "\n{}", s.bold("Conditions"));
    let type_width = v.conditions.iter().map(|c| c.type_.len()).max().unwrap_or(0);
    let reason_width = v.conditions.iter().map(|c| c.reason.len()).max().unwrap_or(0);
    for c in &v.conditions {
        let status = if condition_ok(&c.type_, &c.status) {
            s.good(&format!("{:<5}", c.status))
        } else {
            s.warn(&format!("{:<5}", c.status))
        };
        let _ = writeln!(
            out,
            "  {:<type_width$} {status} {:<reason_width$} {}",
            c.type_, c.reason, c.message
        );
    }
    let _ = writeln!(out, "\n{}", s.bold("Recent events"));
    if v.events.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for e in &v.events {
        let kind = if e.type_ == "Warning" {
            s.warn(&format!("{:<8}", e.type_))
        } else {
            format!("{:<8}", e.type_)
        };
        let count = if e.count > 1 {
            format!(" (x{})", e.count)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:>8} {kind} {}{count}: {}",
            e.age_seconds.map_or("-".to_owned(), age),
            e.reason,
            e.message
        );
    }
    out
}

/// `42s ago`, `5m ago`, `3h ago`, `2d ago`.
fn age(seconds: f64) -> String {
    let s = seconds as u64;
    match s {
        0..120 => format!("{s}s ago"),
        120..7_200 => format!("{}m ago", s / 60),
        7_200..172_800 => format!("{}h ago", s / 3_600),
        _ => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{MemberStatus, RedlockClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn cluster(members: Vec<MemberStatus>) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        c.metadata.generation = Some(2);
        c.status = Some(RedlockClusterStatus {
            observed_generation: Some(2),
            quorum: Some(2),
            members,
            ..Default::default()
        });
        c
    }

    fn member(slot: i32, state: MemberState, until: Option<i64>) -> MemberStatus {
        MemberStatus {
            held_until: until.map(|u| MicroTime(at(u))),
            run_id: Some(format!("{slot}abcdefabcdefabcdef")),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn pod(name: &str, node: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "spec": {"nodeName": node, "containers": []}
        }))
        .unwrap()
    }

    fn running() -> OperatorState {
        OperatorState::Running {
            holder: "op-1".into(),
            renewed_seconds_ago: 1.0,
        }
    }

    #[test]
    fn counts_serving_members_and_what_may_still_fail() {
        let mut fenced = member(2, MemberState::Held, Some(140));
        fenced.maintenance = Some("disk swap".into());
        let c = cluster(vec![
            member(0, MemberState::Ready, None),
            member(1, MemberState::Held, Some(130)),
            fenced,
        ]);
        let zones: Zones = [("n1".to_owned(), "z1".to_owned())].into();
        let v = view(
            &c,
            &[pod("locks-0", "n1"), pod("locks-1", "n2")],
            &zones,
            &[],
            running(),
            at(100),
        );
        assert_eq!((v.serving, v.quorum, v.more_may_fail), (1, 2, -1));
        assert_eq!(v.members[0].node.as_deref(), Some("n1"));
        assert_eq!(v.members[0].zone.as_deref(), Some("z1"));
        assert_eq!(v.members[1].zone, None);
        assert_eq!(v.members[1].hold_left_seconds, Some(30.0));
        assert_eq!(v.members[0].hold_left_seconds, None);
        assert!(!v.spec_pending);
        let text = render_text(&v, Style { colour: false });
        assert!(text.contains("QUORUM LOST"), "{text}");
        assert!(text.contains("fenced for maintenance: disk swap"), "{text}");
        assert!(text.contains("30.0s"), "{text}");
        assert!(!text.contains('\x1b'), "plain when not a terminal");
        assert!(render_text(&v, Style { colour: true }).contains("\x1b[31m"));
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["members"][2]["maintenance"], "disk swap");
        assert_eq!(json["operator"]["state"], "running");
    }

    #[test]
    fn healthy_cluster_says_how_many_may_fail_and_a_stale_spec_is_flagged() {
        let mut c = cluster((0..3).map(|s| member(s, MemberState::Ready, None)).collect());
        c.metadata.generation = Some(3);
        let v = view(&c, &[], &Zones::new(), &[], running(), at(100));
        assert_eq!(v.more_may_fail, 1);
        assert!(v.spec_pending);
        let text = render_text(&v, Style { colour: false });
        assert!(
            text.contains("3 of 3 serving, quorum 2: 1 more may fail"),
            "{text}"
        );
        assert!(text.contains("not acted on the latest spec"), "{text}");
    }

    #[test]
    fn shows_the_latest_events_in_order() {
        let events: Vec<Event> = (0..15)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("e{i}")},
                    "involvedObject": {},
                    "type": if i % 2 == 0 { "Normal" } else { "Warning" },
                    "reason": format!("R{i}"),
                    "message": "m",
                    "lastTimestamp": at(1000 + i).to_string(),
                }))
                .unwrap()
            })
            .rev()
            .collect();
        let v = view(&cluster(vec![]), &[], &Zones::new(), &events, running(), at(1014));
        let reasons: Vec<&str> = v.events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(v.events.last().unwrap().age_seconds, Some(0.0));
        assert!(render_text(&v, Style { colour: false }).contains("0s ago Normal   R14"));
        assert_eq!(
            [age(59.9), age(600.0), age(7_200.0), age(200_000.0)],
            ["59s ago", "10m ago", "2h ago", "2d ago"]
        );
        assert_eq!(reasons.len(), EVENTS_SHOWN);
        assert_eq!(reasons.first(), Some(&"R5"));
        assert_eq!(reasons.last(), Some(&"R14"));
    }
}
