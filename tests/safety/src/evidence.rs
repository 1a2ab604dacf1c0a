//! What the harness keeps of a run besides the history, the pure part: a RedlockCluster status
//! in one line and what of it counts as a change (`status-history.jsonl`), and the Kubernetes
//! events as rows and as a kubectl-style table (`events.jsonl`, `events.txt`). The harness
//! (`safety_harness::evidence`) watches the API server and writes them.

use serde::Serialize;
use serde_json::Value;

/// `status` without what changes at every probe while nothing happens: each member's clock
/// reading (`members[].clock`). Two statuses with the same value here are one line of the
/// status history.
pub fn status_significant(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(members) = s.get_mut("members").and_then(Value::as_array_mut) {
        for m in members {
            if let Some(m) = m.as_object_mut() {
                m.remove("clock");
            }
        }
    }
    s
}

/// `status` in one line: ready / held of instances, then each member by slot with its state,
/// the first 8 characters of its run id, `unstopped <run id>` when an old process was never
/// seen to stop, and its message (at most 140 characters). E.g.
/// `ready 4/5 held 1 | 0 Ready 1a2b3c4d | 3 Held 9f8e7d6c unstopped 5e6f7a8b (partitioned …)`.
pub fn status_brief(status: &Value) -> String {
    let num = |k: &str| status.get(k).and_then(Value::as_i64);
    let mut parts = vec![format!(
        "ready {}/{} held {}",
        num("readyInstances").map_or("?".into(), |n| n.to_string()),
        num("instances").map_or("?".into(), |n| n.to_string()),
        num("heldInstances").unwrap_or(0)
    )];
    let mut members: Vec<&Value> = status
        .get("members")
        .and_then(Value::as_array)
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    members.sort_by_key(|m| m.get("slot").and_then(Value::as_i64).unwrap_or(i64::MAX));
    let short_id = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(|id| id.chars().take(8).collect::<String>())
    };
    for m in members {
        let mut p = format!(
            "{} {}",
            m.get("slot")
                .and_then(Value::as_i64)
                .map_or("?".into(), |s| s.to_string()),
            m.get("state").and_then(Value::as_str).unwrap_or("?")
        );
        if let Some(id) = short_id(m.get("runId")) {
            p.push_str(&format!(" {id}"));
        }
        if let Some(id) = short_id(m.get("unstopped").and_then(|u| u.get("runId"))) {
            p.push_str(&format!(" unstopped {id}"));
        }
        if let Some(msg) = m.get("message").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            p.push_str(&format!(" ({})", cut(msg, 140)));
        }
        parts.push(p);
    }
    parts.join(" | ")
}

/// `s` at most `max` characters, `…` where cut.
fn cut(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// One Kubernetes event as the harness saw it (events.k8s.io/v1; the deprecated fields where
/// the new ones are empty). Times are UTC with milliseconds, so they sort as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRow {
    /// When the harness saw this version (UTC), and on CLOCK_MONOTONIC (history.json's clock).
    pub observed: String,
    pub observed_mono_ns: u64,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
    /// When it first and last happened (a series repeats it).
    pub first: Option<String>,
    pub last: Option<String>,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// `Kind/name` of the object it is about (`regarding`), and of `related`.
    pub object: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related: Option<String>,
    pub message: String,
    pub count: i32,
    /// `reportingController` (`reportingInstance`).
    pub reporter: String,
}

impl EventRow {
    /// When it last happened, else first, else when seen.
    fn when(&self) -> &str {
        self.last
            .as_deref()
            .or(self.first.as_deref())
            .unwrap_or(&self.observed)
    }
}

/// `rows` as `kubectl get events` shows them, oldest first: last seen (UTC), type, reason,
/// object, count, reporter, message (related object appended).
pub fn events_table(rows: &[EventRow]) -> String {
    let mut sorted: Vec<&EventRow> = rows.iter().collect();
    sorted.sort_by(|a, b| (a.when(), &a.uid).cmp(&(b.when(), &b.uid)));
    let width = |f: &dyn Fn(&EventRow) -> usize, head: &str| {
        sorted.iter().map(|r| f(r)).max().unwrap_or(0).max(head.len())
    };
    let (wt, wr, wo, wn) = (
        width(&|r| r.type_.len(), "TYPE"),
        width(&|r| r.reason.len(), "REASON"),
        width(&|r| r.namespace.len() + 1 + r.object.len(), "OBJECT"),
        width(&|r| r.reporter.len(), "REPORTER"),
    );
    let mut out = format!(
        "{:<24}  {:<wt$}  {:<wr$}  {:<wo$}  {:>5}  {:<wn$}  MESSAGE\n",
        "LAST SEEN (UTC)", "TYPE", "REASON", "OBJECT", "COUNT", "REPORTER"
    );
    for r in sorted {
        let related = r
            .related
            .as_deref()
            .map(|o| format!(" [related {o}]"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<24}  {:<wt$}  {:<wr$}  {:<wo$}  {:>5}  {:<wn$}  {}{related}\n",
            r.when(),
            r.type_,
            r.reason,
            format!("{}/{}", r.namespace, r.object),
            r.count,
            r.reporter,
            r.message.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(clock_read: &str, state3: &str) -> Value {
        json!({
            "instances": 5, "readyInstances": 4, "heldInstances": 1,
            "members": [
                {"slot": 3, "state": state3, "runId": "9f8e7d6c5b4a", "message": "partitioned:\n the node stopped   reporting",
                 "unstopped": {"runId": "5e6f7a8b9c0d", "podIp": "10.0.0.3", "fenced": false},
                 "clock": {"runId": "9f8e7d6c5b4a", "readAt": clock_read}},
                {"slot": 0, "state": "Ready", "runId": "1a2b3c4d5e6f", "clock": {"readAt": clock_read}},
                {"slot": 1, "state": "Ready", "message": ""},
            ],
        })
    }

    #[test]
    fn a_status_is_one_line_with_each_member_by_slot() {
        assert_eq!(
            status_brief(&status("t1", "Held")),
            "ready 4/5 held 1 | 0 Ready 1a2b3c4d | 1 Ready | 3 Held 9f8e7d6c unstopped 5e6f7a8b (partitioned: the node stopped reporting)"
        );
        assert_eq!(status_brief(&json!({})), "ready ?/? held 0");
        let long = json!({"members": [{"slot": 0, "state": "Held", "message": "x".repeat(200)}]});
        assert!(status_brief(&long).ends_with(&format!("({}…)", "x".repeat(140))));
    }

    #[test]
    fn a_new_clock_reading_alone_is_no_change() {
        assert_eq!(
            status_significant(&status("t1", "Held")),
            status_significant(&status("t2", "Held"))
        );
        assert_ne!(
            status_significant(&status("t1", "Held")),
            status_significant(&status("t1", "Ready"))
        );
        assert!(
            status_significant(&status("t1", "Held"))["members"][0]
                .get("clock")
                .is_none()
        );
        // Everything else stays.
        assert_eq!(
            status_significant(&status("t1", "Held"))["members"][0]["unstopped"]["runId"],
            "5e6f7a8b9c0d"
        );
        assert_eq!(status_significant(&json!(null)), json!(null));
    }

    fn row(uid: &str, last: Option<&str>, reason: &str) -> EventRow {
        EventRow {
            observed: "2026-01-01T00:00:09.000Z".into(),
            observed_mono_ns: 9,
            namespace: "lifecycle-x".into(),
            uid: uid.into(),
            resource_version: "1".into(),
            first: Some("2026-01-01T00:00:01.000Z".into()),
            last: last.map(str::to_owned),
            type_: "Warning".into(),
            reason: reason.into(),
            object: "RedlockCluster/locks".into(),
            related: Some("Pod/locks-3".into()),
            message: "member locks-3\n held".into(),
            count: 4,
            reporter: "redlock-operator".into(),
        }
    }

    #[test]
    fn events_are_a_table_oldest_first() {
        let t = events_table(&[
            row("b", Some("2026-01-01T00:00:05.000Z"), "ClockJump"),
            row("a", None, "MemberHeld"),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(
            lines[0].starts_with("LAST SEEN (UTC)") && lines[0].ends_with("MESSAGE"),
            "{t}"
        );
        // a has no last time: its first (00:01) sorts before b's last (00:05).
        assert!(
            lines[1].starts_with("2026-01-01T00:00:01.000Z  Warning  MemberHeld"),
            "{t}"
        );
        assert!(
            lines[2].contains("ClockJump   lifecycle-x/RedlockCluster/locks      4  redlock-operator  member locks-3 held [related Pod/locks-3]"),
            "{t}"
        );
        let json = serde_json::to_value(row("a", None, "X")).unwrap();
        assert_eq!(json["type"], "Warning");
        assert_eq!(json["count"], 4);
        assert_eq!(events_table(&[]).lines().count(), 1);
    }
}
