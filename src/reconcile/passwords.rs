//! The client password rotation's step of a reconcile (docs/design.md §8.10): after the probes,
//! before the decision. Starts or advances the rotation (`password_rotation`, pure), puts the
//! new credentials on record first (`<name>-admin`, `<name>-client`, the ACL file), and only
//! then brings each process's client user to the passwords on record. Nothing here lets a
//! client in or shuts one out of a lock: passwords only, never `on`/`off`.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::children::{self, ChildrenReport};
use super::inputs::Inputs;
use crate::children::names::CLIENT_USER;
use crate::children::secrets::{Credentials, PROBE_PASSWORD_KEY, client_user, generate_password};
use crate::crd::RedlockCluster;
use crate::crd::conditions::Desired;
use crate::crd::model::Slot;
use crate::credentials::admin_rotation;
use crate::credentials::client_rotation::{self, Coverage, ProcessPasswords, Timing};
use crate::decide::observe::{PodState, RedisInfo, SlotObservation};
use crate::error::Result;
use crate::reconcile::context::Context;
use crate::runtime::events;

/// Returns the rotation's condition for the status. A step taken replaces `inputs`'
/// credentials with those now on record: what follows in this reconcile (a release sets the
/// client user's passwords) must use them, never the ones read before the step.
pub(crate) async fn rotate(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &mut Inputs,
    children: &ChildrenReport,
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Result<Option<Desired>> {
    let request = client_rotation::request(cluster);
    let name = cluster.name_any();
    let grace = ctx.settings.password_rotation_grace;
    let mut creds = inputs.credentials.clone();
    let found = processes(observed);
    let coverage = coverage(cluster, observed);
    let condition = |creds: &Credentials| client_rotation::condition(creds, request, &coverage, grace, &name);
    // Secrets not this cluster's or not current (a rejected spec applies none): nothing
    // changes, and no process is touched with passwords that are not on record.
    if !children.config_ready {
        return Ok(condition(&creds));
    }
    let timing = Timing {
        now: ctx.clock.now().wall,
        grace,
    };
    let (started, start) = client_rotation::start(&creds, request, generate_password);
    let (next, advanced) = client_rotation::advance(&started, request, &found, &coverage, timing);
    if next != creds {
        // A replica that lost the lease must not write a step (another may be writing its own).
        ctx.leadership.check()?;
        let mut report = ChildrenReport::default();
        // Conditional on the `<name>-admin` the step was decided from: the steps are recorded
        // there, and a write decided from an older read must not take one back.
        let read_at = inputs.credentials.admin_read_at.as_deref();
        if !children::apply_secrets(ctx, cluster, ns, &next, read_at, &mut report).await? {
            tracing::warn!(problems = ?report.problems, conflicts = ?report.conflicts, "client password rotation waits: its Secrets were not written");
            return Ok(condition(&creds));
        }
        creds = next;
        super::inputs::remember(ctx, cluster, &creds);
        for t in [start, advanced].into_iter().flatten() {
            tracing::info!(reason = t.reason.as_str(), "{}", t.message);
            events::publish_for_cluster(&ctx.recorder, cluster, t.reason, t.message, false).await;
        }
    }
    sync(ctx, inputs, &creds, &found, observed).await?;
    let desired = condition(&creds);
    inputs.credentials = creds;
    Ok(desired)
}

/// The admin password rotation's step (`admin_rotation`, pure), after the client password's:
/// the step is put on record first (`<name>-admin`, then the ACL file), and only then is each
/// process's admin user brought to the passwords on record. Returns the condition. A step
/// taken replaces `inputs`' credentials and the admin access: what follows in this reconcile
/// logs in with the password on record now.
pub(crate) async fn rotate_admin(
    ctx: &Context,
    cluster: &RedlockCluster,
    ns: &str,
    inputs: &mut Inputs,
    children: &ChildrenReport,
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Result<Option<Desired>> {
    let token = admin_rotation::requested(cluster);
    let mut creds = inputs.credentials.clone();
    let found = admin_processes(observed);
    // Every running process counts, whatever its client user: each one is a process the
    // operator must still be able to log in to when the rotation ends.
    let silent: Vec<Slot> = observed
        .iter()
        .filter(|(_, o)| matches!(o.pod, PodState::Running { .. }) && !o.probe.is_answered())
        .map(|(slot, _)| *slot)
        .collect();
    let members = cluster.recorded_members();
    let unanswered = admin_rotation::holding(&silent, members);
    if !children.config_ready {
        return Ok(admin_rotation::condition(&creds, token, &unanswered));
    }
    let timing = Timing {
        now: ctx.clock.now().wall,
        grace: ctx.settings.password_rotation_grace,
    };
    let (started, start) = admin_rotation::start(&creds, token, generate_password);
    let (next, advanced) = admin_rotation::advance(&started, &found, &unanswered, timing);
    if next != creds {
        ctx.leadership.check()?;
        let mut report = ChildrenReport::default();
        // Over the `<name>-admin` the step was decided from, as a client rotation's step.
        let read_at = inputs.credentials.admin_read_at.as_deref();
        if !children::apply_secrets(ctx, cluster, ns, &next, read_at, &mut report).await? {
            tracing::warn!(problems = ?report.problems, conflicts = ?report.conflicts, "admin password rotation waits: its Secrets were not written");
            return Ok(admin_rotation::condition(&creds, token, &unanswered));
        }
        creds = next;
        super::inputs::remember(ctx, cluster, &creds);
        for t in [start, advanced].into_iter().flatten() {
            tracing::info!(reason = t.reason.as_str(), "{}", t.message);
            events::publish_for_cluster(&ctx.recorder, cluster, t.reason, t.message, false).await;
        }
        inputs.access.admin_password = creds.admin_password.clone();
        inputs.access.admin_fallback_password = creds.admin_fallback_password().map(str::to_owned);
    }
    let hashes = creds.accepted_admin_hashes();
    for (slot, run_id) in admin_rotation::syncs(&creds, &found) {
        let Some(o) = observed.get(&slot) else { continue };
        let Some(ip) = o.pod_ip else { continue };
        ctx.leadership.check()?;
        match inputs
            .access
            .for_slot(o)
            .set_admin_passwords(ip, &run_id, &hashes)
            .await
        {
            Ok(()) => {
                tracing::info!(slot = slot.index(), %run_id, passwords = hashes.len(), "admin passwords set")
            }
            Err(e) => tracing::warn!(slot = slot.index(), error = %e, "admin passwords not set"),
        }
    }
    let desired = admin_rotation::condition(&creds, token, &unanswered);
    inputs.credentials = creds;
    Ok(desired)
}

/// Whether every answering process accepts exactly the passwords on record (client and, during
/// an admin rotation, admin): otherwise a sync was just attempted, and the next probe must show
/// whether it took.
pub(super) fn in_sync(creds: &Credentials, observed: &BTreeMap<Slot, SlotObservation>) -> bool {
    client_rotation::syncs(creds, &processes(observed)).is_empty()
        && admin_rotation::syncs(creds, &admin_processes(observed)).is_empty()
}

/// The answering processes with the admin passwords they accept.
fn admin_processes(observed: &BTreeMap<Slot, SlotObservation>) -> Vec<ProcessPasswords> {
    answering(observed, |redis| redis.admin_password_hashes.as_ref())
}

/// The answering processes whose lock clients log in as the client user (auth on), with the
/// passwords it accepts.
fn processes(observed: &BTreeMap<Slot, SlotObservation>) -> Vec<ProcessPasswords> {
    answering(observed, |redis| redis.client_password_hashes.as_ref())
}

/// The answering processes for which `hashes` (of what their probe found) is known.
fn answering(
    observed: &BTreeMap<Slot, SlotObservation>,
    hashes: impl Fn(&RedisInfo) -> Option<&Vec<String>>,
) -> Vec<ProcessPasswords> {
    observed
        .iter()
        .filter_map(|(slot, o)| {
            let redis = o.probe.answered()?;
            Some(ProcessPasswords {
                slot: *slot,
                run_id: redis.run_id.clone(),
                hashes: hashes(redis)?.clone(),
            })
        })
        .collect()
}

/// Of the running pods whose lock clients log in as the client user: which did not answer
/// this probe, and which were built with a readiness probe that logs in with a client
/// password.
fn coverage(cluster: &RedlockCluster, observed: &BTreeMap<Slot, SlotObservation>) -> Coverage {
    let spec_user = client_user(cluster);
    let mut c = Coverage::default();
    for (slot, o) in observed {
        let running = matches!(o.pod, PodState::Running { .. });
        if !running || o.client_user.as_deref().unwrap_or(spec_user) != CLIENT_USER {
            continue;
        }
        if !o.probe.is_answered() {
            c.unanswered.push(*slot);
        }
        if o.probe_password_key.as_deref() != Some(PROBE_PASSWORD_KEY) {
            c.old_probes.push(*slot);
        }
    }
    c
}

/// Sets every process whose client user accepts other passwords than those on record to
/// exactly those, on a connection that checked its run id. A failure is left to the next
/// reconcile, which probes again.
async fn sync(
    ctx: &Context,
    inputs: &Inputs,
    creds: &Credentials,
    found: &[ProcessPasswords],
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Result<()> {
    let hashes = creds.accepted_client_hashes();
    for (slot, run_id) in client_rotation::syncs(creds, found) {
        let Some(o) = observed.get(&slot) else { continue };
        let Some(ip) = o.pod_ip else { continue };
        ctx.leadership.check()?;
        let access = inputs.access.for_slot(o);
        match access.set_client_passwords(ip, &run_id, &hashes).await {
            Ok(()) => {
                tracing::info!(slot = slot.index(), %run_id, passwords = hashes.len(), "client passwords set")
            }
            Err(e) => tracing::warn!(slot = slot.index(), error = %e, "client passwords not set"),
        }
    }
    Ok(())
}
