//! A slot whose pod name is taken by a pod this cluster does not control.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::identity::fresh_record;
use super::input::PlanInput;
use super::step::Step;
use crate::children::names::slot_name;
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::hold::floor_micros;

/// The start of a message about a slot whose pod name is taken. (A re-plan tells that the
/// conflict was already reported by comparing the whole message with the record's.)
const NAME_TAKEN: &str = "pod name taken";

/// The slot's pod name is taken by a pod this cluster does not control. Whatever runs there
/// may serve lock clients (the slot's Service selects by labels), and nothing of ours can run
/// under the name: nothing is created, released or replaced, and a slot that had a process of
/// ours records it `Lost` with no end, so its full hold starts once the name is free.
pub(super) fn name_taken(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    owner: &str,
    step: &mut Step,
) -> MemberStatus {
    let name = slot_name(input.cluster, slot);
    let message = format!(
        "{NAME_TAKEN}: pod {name} exists but is not controlled by this RedlockCluster ({owner}); nothing is created, released or replaced for this slot while it exists, and the slot is held in full once it is gone"
    );
    let reported = prev.is_some_and(|p| p.message.as_deref() == Some(message.as_str()));
    if !reported {
        step.tell(slot, MemberReason::NameConflict, message.clone(), true);
    }
    let mut next = match prev {
        None => fresh_record(input, slot, MemberState::Starting),
        Some(p) if p.state == MemberState::Starting => p.clone(),
        Some(p) => MemberStatus {
            state: MemberState::Lost,
            run_id: None,
            container_id: None,
            held_until: None,
            hold_started_at: None,
            since: Some(MicroTime(floor_micros(input.now))),
            refused_since: None,
            ..p.clone()
        },
    };
    next.message = Some(message);
    next
}
