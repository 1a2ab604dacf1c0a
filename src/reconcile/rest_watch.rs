//! The watch over a resting cluster ([`crate::decide::at_rest`]): every probe period it probes each
//! member on the kept probe connection, as a reconcile would, and each TTL audit period it
//! runs the audit's period (`ttl_sampling`); it wakes a reconcile of the cluster as soon as
//! anything differs from what the rest began with. Reads only: it never writes to the API
//! server or to a process, and it ends with its rest.
//!
//! Detection does not get slower: a reconcile probed once a period before, and so does this;
//! a member's process that closes its kept connection (a crash) wakes a reconcile at once; and
//! a change is handed to the controller at once (`reconcile_on`), and that reconcile probes
//! again before it decides anything.

use std::sync::Arc;

use crate::clock::member::{ClockKey, ClockTrack};
use crate::clock::record;
use crate::decide::at_rest::{Look, Rest, look};
use crate::hold::ttl_audit;
use crate::reconcile::context::Context;
use crate::reconcile::ttl_sampling::{self, Serving};
use crate::redis::connection::ClosedWatch;

/// Starts the watch of rest `generation` of cluster `uid`.
pub(crate) fn spawn(ctx: Arc<Context>, uid: String, generation: u64, rest: Arc<Rest>) {
    tokio::spawn(async move { watch(&ctx, &uid, generation, &rest).await });
}

async fn watch(ctx: &Context, uid: &str, generation: u64, rest: &Rest) {
    let period = ctx.settings.probe_period;
    // The reconcile that let the cluster rest probed just now: the first look is a period on.
    let start = tokio::time::Instant::now() + period;
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the audit reads is fixed for the rest: worked out once, not every period.
    let audit_key = ttl_sampling::audit_key(
        rest.cluster.namespace.as_deref().unwrap_or_default(),
        &rest.cluster.name,
        uid,
    );
    let serving = serving(rest);
    // The members' connection keys are fixed for the rest too (each hashes a password).
    let keys: Vec<_> = rest
        .members
        .iter()
        .map(|m| m.access.as_ref().unwrap_or(&rest.access).connection_key(m.ip))
        .collect();
    let kept = &ctx.memory.probe_connections;
    let mut closed = kept.closed_watches(uid, &keys, Vec::new());
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = any_ended(&closed) => {
                return wake(ctx, uid, generation, rest, "a member's process closed the operator's connection");
            }
        }
        if ctx.memory.resting.while_current(uid, generation, || ()).is_none() {
            return;
        }
        match probe(ctx, uid, rest).await {
            Ok(tracks) => {
                // The clocks move on only while the rest is current: a reconcile that ended it
                // judges its own probe against what it finds here, never against a sample
                // taken after its own.
                let kept = ctx.memory.resting.while_current(uid, generation, || {
                    ctx.memory
                        .member_clocks
                        .lock()
                        .expect("clock lock is never poisoned")
                        .extend(tracks)
                });
                if kept.is_none() {
                    return;
                }
            }
            Err(why) => return wake(ctx, uid, generation, rest, &why),
        }
        // A connection the probe replaced (same process, the old connection broken) is
        // watched from now on.
        closed = kept.closed_watches(uid, &keys, closed);
        // After the probe, as the reconcile ran it: a member slow to answer its `SCAN` delays
        // the next probe as it delayed the next reconcile (each request waits the connection
        // timeout at most). Not cut short: a cut would drop the connection mid-exchange, and a
        // batch that always takes longer than the cut would never move its sweep on.
        match audit(ctx, uid, generation, rest, &audit_key, &serving).await {
            Audited::Same => {}
            Audited::Other => return wake(ctx, uid, generation, rest, "the TTL audit found other keys"),
            Audited::RestOver => return,
        }
    }
}

/// Returns once one of `watches` (on the members' kept probe connections) sees its connection
/// end: a process that crashes closes its connection, and a reconcile is woken then instead of
/// a probe period later (issue 17). Never without any. Awaited only between probes: a probe's
/// replies would end it too.
async fn any_ended(watches: &[ClosedWatch]) {
    if watches.is_empty() {
        return std::future::pending().await;
    }
    futures::future::select_all(watches.iter().map(|w| Box::pin(w.ended()))).await;
}

/// Hands the cluster to the controller, if rest `generation` is still current.
fn wake(ctx: &Context, uid: &str, generation: u64, rest: &Rest, why: &str) {
    if ctx.memory.resting.wake_if(uid, generation) {
        tracing::debug!(cluster = %rest.cluster, %why, "woken from rest");
        // The receiver lives as long as the controller: a send fails only while the operator
        // stops, when nothing needs waking.
        let _ = ctx.wake.unbounded_send(rest.cluster.clone());
    }
}

enum Audited {
    /// No period was due, or it found what the status shows.
    Same,
    /// Its findings differ from what the status shows: a reconcile writes them.
    Other,
    /// The rest ended meanwhile; its samples were not kept.
    RestOver,
}

/// The members the audit reads: those of the rest (all serving), as the rest began.
fn serving(rest: &Rest) -> Vec<Serving<'_>> {
    rest.members
        .iter()
        .filter(|m| m.seen.client_enabled)
        .map(|m| Serving {
            slot: m.slot,
            run_id: m.seen.run_id.clone(),
            ip: m.ip,
            access: m.access.as_ref().unwrap_or(&rest.access),
        })
        .collect()
}

/// The TTL audit's period over `serving` (the cluster's audit state under `key`), when due.
/// The period is taken, and its samples absorbed, only while the rest is current: a reconcile
/// that ended it runs the audit's periods itself, and a member it found restarted must not
/// take samples of the process before.
async fn audit(
    ctx: &Context,
    uid: &str,
    generation: u64,
    rest: &Rest,
    key: &str,
    serving: &[Serving<'_>],
) -> Audited {
    let now = std::time::Instant::now();
    let due = ctx
        .memory
        .resting
        .while_current(uid, generation, || ttl_sampling::take_due(ctx, key, serving, now));
    let cursors = match due {
        None => return Audited::RestOver,
        Some(Err(_not_due)) => return Audited::Same,
        Some(Ok(cursors)) => cursors,
    };
    let results = ttl_sampling::sample(ctx, uid, serving, cursors).await;
    let report = ctx.memory.resting.while_current(uid, generation, || {
        ttl_sampling::absorb(ctx, key, &rest.cluster.name, results, rest.max_lock_ttl, now)
    });
    match report {
        None => Audited::RestOver,
        Some(report) if ttl_audit::same_findings(report.as_ref(), rest.ttl.as_ref()) => Audited::Same,
        Some(_) => Audited::Other,
    }
}

/// Probes every member once, side by side; the clocks to remember when all is as before,
/// otherwise why not.
async fn probe(ctx: &Context, uid: &str, rest: &Rest) -> Result<Vec<(ClockKey, ClockTrack)>, String> {
    let kept = &ctx.memory.probe_connections;
    let probes = rest.members.iter().map(|m| async move {
        let access = m.access.as_ref().unwrap_or(&rest.access);
        (m, access.probe_kept(m.ip, kept, uid).await)
    });
    let results = futures::future::join_all(probes).await;
    let clocks = ctx
        .memory
        .member_clocks
        .lock()
        .expect("clock lock is never poisoned");
    let mut tracks = Vec::with_capacity(results.len());
    for (m, result) in results {
        let key = (uid.to_owned(), m.slot);
        let (info, verdict, record) = match result {
            Ok((info, time)) => {
                // Judged as the reconcile judges it (`record::judge_sample`); a record
                // due to be written again (its age, or the readings apart by more than the
                // band) wakes the cluster as a changed verdict does.
                let (across, track) = record::judge_sample(
                    clocks.get(&key),
                    m.clock_record.as_ref(),
                    &info.run_id,
                    time,
                    ctx.clock.server_time(time.middle()),
                    rest.drift_factor,
                    rest.max_lock_ttl,
                );
                tracks.push((key, track));
                (Ok(info), Some(across.verdict), across.record)
            }
            Err(e) => (Err(e.why), None, None),
        };
        if let Look::Changed(why) = look(m, &info, verdict.as_ref(), record.as_ref()) {
            return Err(why);
        }
    }
    Ok(tracks)
}
