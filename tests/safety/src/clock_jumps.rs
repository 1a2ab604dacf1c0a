//! The operator's `ClockJump` events of a run, each explained or not: by a `member-clock-jump`
//! fault on the same member whose window (from its injection to its heal, plus
//! [`FAULT_MARGIN_NS`]) holds the event, else by a step of the host's own clock within
//! [`HOST_STEP_NEAR_NS`] (a true jump the harness did not deal, not the operator's mistake),
//! else a false positive: the operator reported a jump no clock made (under load: a slow
//! answer mistaken for a jump). A run with a false positive fails.

use std::collections::HashMap;

use serde::Serialize;

use crate::host::HostClockStep;
use crate::report::FaultRecord;
use crate::schedule::FaultKind;
use crate::violation::{WallClock, utc};

/// How long after a clock jump fault is healed its events still count as its own: a few
/// probe periods (1 s each), and the event's way to the harness.
pub const FAULT_MARGIN_NS: u64 = 10_000_000_000;

/// How near a host clock step an unexplained event is put down to it.
pub const HOST_STEP_NEAR_NS: u64 = 5_000_000_000;

/// One version of a `ClockJump` event as the harness's watch saw it (a series of occurrences
/// is one event whose count goes up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockJumpSighting {
    pub uid: String,
    pub resource_version: String,
    pub count: i32,
    /// When the harness saw this version (CLOCK_MONOTONIC ns).
    pub observed_mono_ns: u64,
    /// When the operator says it happened (the series' last time, else the event's time; ns
    /// since the Unix epoch on the operator's clock).
    pub stated_unix_ns: Option<i128>,
    /// The member's pod (the event's `related` object), e.g. `locks-3`.
    pub pod: Option<String>,
    pub message: String,
}

/// One occurrence of a `ClockJump` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClockJumpEvent {
    /// When the harness saw it (CLOCK_MONOTONIC ns), and when the operator says it happened on
    /// the same clock (its stated UTC time through the phase's wall clock).
    pub observed_mono_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stated_mono_ns: Option<u64>,
    /// The stated time (else the observed one) in UTC, as the events table shows it.
    pub utc: String,
    pub pod: String,
    /// The member's slot, from the pod's name (`<cluster>-<slot>`), else the message's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<usize>,
    pub uid: String,
    pub message: String,
}

impl ClockJumpEvent {
    /// Its times on CLOCK_MONOTONIC: the stated one and the observed one.
    fn times(&self) -> impl Iterator<Item = u64> + '_ {
        self.stated_mono_ns.into_iter().chain([self.observed_mono_ns])
    }
}

/// The slot of `pod` (`<cluster>-<slot>`), `None` for another cluster's or no slot.
fn slot_of(pod: &str, cluster: &str) -> Option<usize> {
    pod.strip_prefix(cluster)?.strip_prefix('-')?.parse().ok()
}

/// Every occurrence in `sightings` (in the order seen): a version whose count went up by n
/// since the version seen before it is n occurrences (the watch may miss versions in
/// between). `clock` puts the operator's stated times on CLOCK_MONOTONIC; `cluster` names the
/// pods `<cluster>-<slot>`.
pub fn occurrences(sightings: &[ClockJumpSighting], cluster: &str, clock: WallClock) -> Vec<ClockJumpEvent> {
    let mut counted: HashMap<&str, i32> = HashMap::new();
    let mut out = Vec::new();
    for s in sightings {
        let before = counted.entry(s.uid.as_str()).or_insert(0);
        let new = (s.count.max(1) - *before).max(0);
        *before = (*before).max(s.count.max(1));
        let stated_mono_ns = s
            .stated_unix_ns
            .and_then(|u| u64::try_from(i128::from(clock.mono_ns) + (u - clock.unix_ns)).ok());
        let pod = s.pod.clone().unwrap_or_default();
        // The note starts with the member's name: `locks-3: its clock jumped …`.
        let member = slot_of(&pod, cluster).or_else(|| {
            s.message
                .split(':')
                .next()
                .and_then(|m| slot_of(m.trim(), cluster))
        });
        let utc_at = s
            .stated_unix_ns
            .map_or_else(|| clock.utc(s.observed_mono_ns), utc);
        for _ in 0..new {
            out.push(ClockJumpEvent {
                observed_mono_ns: s.observed_mono_ns,
                stated_mono_ns,
                utc: utc_at.clone(),
                pod: pod.clone(),
                member,
                uid: s.uid.clone(),
                message: s.message.clone(),
            });
        }
    }
    out
}

/// What explains a `ClockJump` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "cause")]
pub enum Cause {
    /// The `member-clock-jump` fault (its index in the fault log) on the same member.
    Fault { fault: usize },
    /// The host's clock stepped this far (ns) this near it: a true jump, not an operator false
    /// positive.
    HostClockStepped { step_ns: i64, at_utc: String },
    /// Nothing: the operator reported a jump no clock made.
    FalsePositive,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassifiedJump {
    #[serde(flatten)]
    pub event: ClockJumpEvent,
    pub explained_by: Cause,
}

/// The `ClockJump` events of a run, counted by what explains them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClockJumpCounts {
    /// `member-clock-jump` faults dealt.
    pub faults_dealt: usize,
    /// `ClockJump` events (occurrences), and of them: explained by a fault, by a host clock
    /// step, by nothing (false positives).
    pub events: usize,
    pub explained: usize,
    pub host_clock_stepped: usize,
    pub false_positives: usize,
    pub fault_margin_ms: u64,
    pub host_step_near_ms: u64,
    pub classified: Vec<ClassifiedJump>,
}

/// Classifies each of `events` against the run's `faults` and the host's clock `steps`.
pub fn classify(
    events: &[ClockJumpEvent],
    faults: &[FaultRecord],
    steps: &[HostClockStep],
) -> ClockJumpCounts {
    let jumps: Vec<&FaultRecord> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::MemberClockJump)
        .collect();
    let classified: Vec<ClassifiedJump> = events
        .iter()
        .map(|e| {
            let fault = jumps.iter().find(|f| {
                e.member.is_some_and(|m| f.members.contains(&m))
                    && e.times().any(|t| {
                        (f.injected..=f.healed.max(f.injected).saturating_add(FAULT_MARGIN_NS)).contains(&t)
                    })
            });
            let step = || {
                steps
                    .iter()
                    .find(|s| e.times().any(|t| t.abs_diff(s.at_mono_ns) <= HOST_STEP_NEAR_NS))
            };
            let explained_by = match (fault, step()) {
                (Some(f), _) => Cause::Fault { fault: f.index },
                (None, Some(s)) => Cause::HostClockStepped {
                    step_ns: s.step_ns,
                    at_utc: s.utc.clone(),
                },
                (None, None) => Cause::FalsePositive,
            };
            ClassifiedJump {
                event: e.clone(),
                explained_by,
            }
        })
        .collect();
    let count = |want: fn(&Cause) -> bool| classified.iter().filter(|c| want(&c.explained_by)).count();
    ClockJumpCounts {
        faults_dealt: jumps.len(),
        events: classified.len(),
        explained: count(|c| matches!(c, Cause::Fault { .. })),
        host_clock_stepped: count(|c| matches!(c, Cause::HostClockStepped { .. })),
        false_positives: count(|c| *c == Cause::FalsePositive),
        fault_margin_ms: FAULT_MARGIN_NS / 1_000_000,
        host_step_near_ms: HOST_STEP_NEAR_NS / 1_000_000,
        classified,
    }
}

impl ClockJumpCounts {
    /// `clock jump faults dealt 1, ClockJump events 5, explained 1, host clock stepped 0,
    /// false positives 4`.
    pub fn text(&self) -> String {
        format!(
            "clock jump faults dealt {}, ClockJump events {}, explained {}, host clock stepped {}, false positives {}",
            self.faults_dealt, self.events, self.explained, self.host_clock_stepped, self.false_positives
        )
    }

    /// Each event not explained by a fault, one a line, with what (if anything) explains it.
    pub fn unexplained_text(&self) -> String {
        self.classified
            .iter()
            .filter(|c| !matches!(c.explained_by, Cause::Fault { .. }))
            .map(|c| {
                let why = match &c.explained_by {
                    Cause::HostClockStepped { step_ns, at_utc } => format!(
                        "host clock stepped {:+.3} s at {at_utc} (a true jump, not an operator false positive)",
                        *step_ns as f64 / 1e9
                    ),
                    _ => "FALSE POSITIVE: no clock jump fault on this member and no host clock step near it"
                        .to_owned(),
                };
                format!(
                    "  {} {} (event {}): {why}\n    {}\n",
                    c.event.utc,
                    if c.event.pod.is_empty() { "?" } else { &c.event.pod },
                    c.event.uid,
                    c.event.message.split_whitespace().collect::<Vec<_>>().join(" ")
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    /// The phase's wall clock: mono 0 is 2026-01-01T00:00:00Z.
    const UNIX0: i128 = 1_767_225_600_000_000_000;
    const CLOCK: WallClock = WallClock {
        mono_ns: 0,
        unix_ns: UNIX0,
    };

    fn sighting(
        uid: &str,
        count: i32,
        observed_s: u64,
        stated_s: Option<u64>,
        pod: &str,
    ) -> ClockJumpSighting {
        ClockJumpSighting {
            uid: uid.into(),
            resource_version: format!("{uid}{count}"),
            count,
            observed_mono_ns: observed_s * S,
            stated_unix_ns: stated_s.map(|s| UNIX0 + i128::from(s * S)),
            pod: Some(pod.into()).filter(|p: &String| !p.is_empty()),
            message: format!("{pod}: its clock jumped 30.000 s forward since the last probe"),
        }
    }

    fn jump(index: usize, member: usize, from_s: u64, healed_s: u64) -> FaultRecord {
        FaultRecord {
            index,
            kind: FaultKind::MemberClockJump,
            members: vec![member],
            injected: from_s * S,
            healed: healed_s * S,
            recovered: (healed_s + 5) * S,
            clock_jump_s: Some(30),
            clock_jump_visible: None,
            detected: None,
            exposed: None,
        }
    }

    fn event(member: usize, observed_s: u64, stated_s: Option<u64>) -> ClockJumpEvent {
        occurrences(
            &[sighting("e", 1, observed_s, stated_s, &format!("locks-{member}"))],
            "locks",
            CLOCK,
        )
        .remove(0)
    }

    #[test]
    fn a_series_is_as_many_occurrences_as_its_count_went_up() {
        let seen = [
            sighting("a", 1, 10, Some(9), "locks-3"),
            // The same version again (a relist) and a version with the same count: nothing new.
            sighting("a", 1, 11, Some(9), "locks-3"),
            sighting("b", 1, 12, None, "locks-12"),
            // Count 1 -> 4: the watch missed two versions.
            sighting("a", 4, 20, Some(19), "locks-3"),
            sighting("a", 4, 21, Some(19), "locks-3"),
        ];
        let o = occurrences(&seen, "locks", CLOCK);
        let brief: Vec<(&str, Option<usize>, u64, Option<u64>)> = o
            .iter()
            .map(|e| {
                (
                    e.uid.as_str(),
                    e.member,
                    e.observed_mono_ns / S,
                    e.stated_mono_ns.map(|t| t / S),
                )
            })
            .collect();
        assert_eq!(
            brief,
            [
                ("a", Some(3), 10, Some(9)),
                ("b", Some(12), 12, None),
                ("a", Some(3), 20, Some(19)),
                ("a", Some(3), 20, Some(19)),
                ("a", Some(3), 20, Some(19)),
            ]
        );
        assert_eq!(o[0].utc, "2026-01-01T00:00:09.000Z");
        // Without a stated time, the observed one in UTC.
        assert_eq!(o[1].utc, "2026-01-01T00:00:12.000Z");
        // No related pod: the member from the note; another cluster's pod is no member.
        let mut bare = sighting("c", 1, 1, None, "locks-2");
        bare.pod = None;
        assert_eq!(occurrences(&[bare], "locks", CLOCK)[0].member, Some(2));
        assert_eq!(
            occurrences(&[sighting("d", 1, 1, None, "other-2")], "locks", CLOCK)[0].member,
            None
        );
        // A stated time before the phase's monotonic zero cannot be put on it.
        assert_eq!(
            occurrences(
                &[sighting("f", 1, 1, Some(0), "locks-1")],
                "locks",
                WallClock {
                    mono_ns: 0,
                    unix_ns: UNIX0 + 1
                }
            )[0]
            .stated_mono_ns,
            None
        );
    }

    #[test]
    fn an_event_is_a_faults_own_only_on_its_member_and_inside_its_window() {
        let faults = [
            jump(4, 2, 100, 130),
            FaultRecord {
                kind: FaultKind::KillOne,
                ..jump(5, 1, 200, 200)
            },
        ];
        let step = HostClockStep {
            at_mono_ns: 300 * S,
            utc: "2026-01-01T00:05:00.000Z".into(),
            step_ns: 2 * S as i64,
            since_previous_ns: S / 10,
        };
        let events = [
            // Inside the window, on its member: observed or stated time.
            event(2, 101, Some(101)),
            event(2, 139, None),
            event(2, 150, Some(135)),
            // Before the injection; after the margin; another member; a kill-one's member.
            event(2, 99, Some(99)),
            event(2, 141, Some(141)),
            event(3, 110, Some(110)),
            event(1, 201, Some(201)),
            // Near the host's step (before or after it): a true jump.
            event(0, 296, Some(296)),
            event(0, 304, None),
            event(0, 306, Some(306)),
        ];
        let c = classify(&events, &faults, std::slice::from_ref(&step));
        let causes: Vec<&Cause> = c.classified.iter().map(|c| &c.explained_by).collect();
        let stepped = Cause::HostClockStepped {
            step_ns: 2 * S as i64,
            at_utc: step.utc.clone(),
        };
        assert_eq!(
            causes,
            [
                &Cause::Fault { fault: 4 },
                &Cause::Fault { fault: 4 },
                &Cause::Fault { fault: 4 },
                &Cause::FalsePositive,
                &Cause::FalsePositive,
                &Cause::FalsePositive,
                &Cause::FalsePositive,
                &stepped,
                &stepped,
                &Cause::FalsePositive,
            ]
        );
        assert_eq!(
            (
                c.faults_dealt,
                c.events,
                c.explained,
                c.host_clock_stepped,
                c.false_positives
            ),
            (1, 10, 3, 2, 5)
        );
        assert_eq!(
            c.text(),
            "clock jump faults dealt 1, ClockJump events 10, explained 3, host clock stepped 2, false positives 5"
        );
        let text = c.unexplained_text();
        assert_eq!(text.matches("FALSE POSITIVE").count(), 5, "{text}");
        assert_eq!(text.matches("host clock stepped +2.000 s").count(), 2, "{text}");
        assert!(
            text.contains("2026-01-01T00:01:39.000Z locks-2 (event e)"),
            "{text}"
        );
        assert!(
            text.contains("locks-2: its clock jumped 30.000 s forward"),
            "{text}"
        );
        // Nothing dealt and nothing reported: all zero.
        let none = classify(&[], &[], &[]);
        assert_eq!((none.faults_dealt, none.events, none.false_positives), (0, 0, 0));
        assert_eq!(none.unexplained_text(), "");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["classified"][0]["explained_by"]["cause"], "fault");
        assert_eq!(json["classified"][3]["explained_by"]["cause"], "false-positive");
        assert_eq!(
            json["classified"][7]["explained_by"]["cause"],
            "host-clock-stepped"
        );
        assert_eq!(json["classified"][0]["pod"], "locks-2");
    }
}
