//! Publishes `events.k8s.io/v1` Events, folding a repeat of the same event within
//! [`SERIES_WINDOW`] into one series (as `kubectl describe` shows: "x3 over 2m"), the way
//! client-go's event recorder does.
//!
//! Why not kube's own `Recorder`: it keeps a full copy of every event it published in the last
//! six minutes (about 2 KiB each, in a table that never shrinks), which at a few hundred
//! clusters is several MiB (heaptrack, `make bench-scale`). Here a series is remembered as its
//! name and count only. What makes two events the same is what client-go and kube use: type,
//! reason and the objects, not the note (a note that changes with every occurrence must not
//! make every occurrence a new event); a series shows its first note, which is why a slot's
//! events name its Pod (`events.rs`).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long after its last occurrence an event is still continued as a series (client-go's
/// and kube's value).
pub(crate) const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// One thing to report.
pub(crate) struct Occurrence {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    /// The object the event is about (the RedlockCluster).
    pub regarding: ObjectReference,
    /// A second object it concerns (a slot's Pod).
    pub related: Option<ObjectReference>,
}

/// Who reports: `reportingController` and `reportingInstance` of every event.
pub(crate) struct Reporter {
    pub controller: String,
    pub instance: String,
}

pub(crate) struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<Series>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Mutex::default(),
        }
    }

    /// Creates the event, or continues its series when the same one was published within
    /// [`SERIES_WINDOW`].
    pub async fn publish(&self, occurrence: &Occurrence) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = key(occurrence);
        let repeat = self.lock().repeat_of(key, now);
        let namespace = occurrence.regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let (name, count) = match repeat {
            Some(Repeat { name, count }) => {
                // Only the series changes: note, objects and reason are the first one's.
                let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                (name, count)
            }
            None => {
                let event = self.event(occurrence, now);
                let created = api.create(&PostParams::default(), &event).await?;
                (created.metadata.name.unwrap_or_default(), 1)
            }
        };
        self.lock().published(key, name, count, now);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn event(&self, occurrence: &Occurrence, now: Timestamp) -> Event {
        let regarding = &occurrence.regarding;
        Event {
            metadata: ObjectMeta {
                // Unique per occurrence, readable in `kubectl get events`.
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                )),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if occurrence.warning { "Warning" } else { "Normal" }.into()),
            reason: Some(occurrence.reason.into()),
            action: Some(occurrence.reason.into()),
            note: Some(occurrence.note.clone()),
            regarding: Some(regarding.clone()),
            related: occurrence.related.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone()),
            ..Default::default()
        }
    }
}

/// What makes two occurrences the same event: type, reason and objects.
fn key(occurrence: &Occurrence) -> u64 {
    let mut h = DefaultHasher::new();
    let object = |o: &ObjectReference, h: &mut DefaultHasher| {
        (&o.kind, &o.namespace, &o.name, &o.uid).hash(h);
    };
    (occurrence.warning, occurrence.reason).hash(&mut h);
    object(&occurrence.regarding, &mut h);
    if let Some(related) = &occurrence.related {
        object(related, &mut h);
    }
    h.finish()
}

/// The series published within [`SERIES_WINDOW`]: for each, its Event's name and count.
#[derive(Default)]
struct Series {
    recent: HashMap<u64, Published>,
}

struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

/// The next occurrence of a published event.
#[derive(Debug, PartialEq)]
struct Repeat {
    name: String,
    count: i32,
}

impl Series {
    /// Forgets series older than the window, then: is `key` a repeat, and which?
    fn repeat_of(&mut self, key: u64, now: Timestamp) -> Option<Repeat> {
        self.recent.retain(|_, p| p.last + SERIES_WINDOW > now);
        // A burst (hundreds of clusters created at once) must not leave its table behind.
        if self.recent.capacity() > 64 && self.recent.len() * 4 < self.recent.capacity() {
            self.recent.shrink_to_fit();
        }
        self.recent.get(&key).map(|p| Repeat {
            name: p.name.clone(),
            count: p.count + 1,
        })
    }

    fn published(&mut self, key: u64, name: String, count: i32, now: Timestamp) {
        self.recent.insert(
            key,
            Published {
                name,
                count,
                last: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn held(slot: &str, note: &str) -> Occurrence {
        Occurrence {
            warning: true,
            reason: "Held",
            note: note.into(),
            regarding: ObjectReference {
                kind: Some("RedlockCluster".into()),
                namespace: Some("team".into()),
                name: Some("locks".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            related: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("team".into()),
                name: Some(slot.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_repeat_within_the_window_continues_the_series() {
        let mut s = Series::default();
        let k = key(&held("locks-1", "held until 12:00"));
        assert_eq!(s.repeat_of(k, at(0)), None);
        s.published(k, "locks.1".into(), 1, at(0));
        let repeat = s.repeat_of(k, at(300)).unwrap();
        assert_eq!(
            repeat,
            Repeat {
                name: "locks.1".into(),
                count: 2
            }
        );
        s.published(k, repeat.name, repeat.count, at(300));
        // The window runs from the last occurrence, not the first.
        assert_eq!(s.repeat_of(k, at(600)).map(|r| r.count), Some(3));
    }

    #[test]
    fn a_different_slot_or_kind_is_a_new_event_a_different_note_is_not() {
        let base = key(&held("locks-1", "held until 12:00"));
        assert_eq!(base, key(&held("locks-1", "held until 12:05")));
        assert_ne!(base, key(&held("locks-2", "held until 12:00")));
        let mut normal = held("locks-1", "held until 12:00");
        normal.warning = false;
        assert_ne!(base, key(&normal));
        let mut whole_cluster = held("locks-1", "held until 12:00");
        whole_cluster.related = None;
        assert_ne!(base, key(&whole_cluster));
        let mut recreated = held("locks-1", "held until 12:00");
        recreated.regarding.uid = Some("u2".into());
        assert_ne!(base, key(&recreated));
    }

    #[test]
    fn series_older_than_the_window_are_forgotten_and_the_table_shrinks() {
        let mut s = Series::default();
        for i in 0..1000u64 {
            s.published(i, format!("e{i}"), 1, at(0));
        }
        s.published(5000, "late".into(), 1, at(300));
        let grown = s.recent.capacity();
        // Exactly the window after the last occurrence: a new event.
        assert_eq!(s.repeat_of(7, at(360)), None);
        assert_eq!(s.recent.len(), 1);
        assert!(
            s.recent.capacity() < grown / 4,
            "{} of {grown}",
            s.recent.capacity()
        );
        assert_eq!(s.repeat_of(5000, at(659)).map(|r| r.count), Some(2));
        assert_eq!(s.repeat_of(5000, at(660)), None);
    }
}
