//! What a member clock jump exposed, in both runs. The harness steps the clock by writing the
//! member's libfaketime offset file; the process sees the new offset only when libfaketime
//! next reads that file (within a second or two). From that moment the member's locks have
//! expired. So the harness watches the member's `TIME` until it shows the jump, reading the
//! run's lock keys on every member meanwhile: the last reading before the jump showed says
//! whether a lock was exposed (`on_bare_quorum`), and the moment says where the window starts.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};
use redis::aio::MultiplexedConnection;
use redlock_safety::clock::mono_ns;
use redlock_safety::report::on_bare_quorum;

/// How long a stepped clock may take to show: libfaketime re-reads its offset file at most
/// once a second (`FAKETIME_CACHE_DURATION=1`), counted in whole seconds.
const SHOWS_WITHIN: Duration = Duration::from_secs(5);

/// What the watch saw.
pub struct Jumped {
    /// Whether, in the last reading before the jump showed, the member had a lock whose holder
    /// had it on a bare quorum.
    pub exposed: bool,
    /// No later than the jump took effect (CLOCK_MONOTONIC ns): when the last `TIME` request
    /// that still showed no jump was sent. The reading that first shows it comes one round of
    /// key reads later, and a lock the jump expired early may be taken again in between (the
    /// safety suite once saw a violation begin 1 ms before that reading returned).
    pub visible: u64,
}

/// The member's clock ahead of this machine's wall clock (which nothing here steps).
async fn ahead(c: &mut MultiplexedConnection) -> Result<Duration> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(c).await?;
    let member = Duration::from_secs(secs) + Duration::from_micros(micros);
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    Ok(member.saturating_sub(now))
}

/// Whether `member` has a lock on a bare quorum, reading `keys` on every member.
async fn read_exposed(conns: &mut [MultiplexedConnection], member: usize, keys: &[String]) -> Result<bool> {
    let quorum = conns.len() / 2 + 1;
    let mut exposed = false;
    for key in keys {
        let mut values = Vec::with_capacity(conns.len());
        for c in conns.iter_mut() {
            let v: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(c).await?;
            values.push(v);
        }
        exposed |= on_bare_quorum(&values, member, quorum);
    }
    Ok(exposed)
}

/// Sets member `member`'s clock `jump` ahead with `step`, and waits until its `TIME` shows at
/// least half of it, reading `keys` on every member (`conns`, one per member) until then.
pub async fn step_and_watch(
    conns: &mut [MultiplexedConnection],
    member: usize,
    keys: &[String],
    jump: Duration,
    step: impl FnOnce() -> Result<()>,
) -> Result<Jumped> {
    if ahead(&mut conns[member]).await? >= jump / 2 {
        bail!("member {member}'s clock is ahead already");
    }
    // Each reading counts once `TIME` after it shows no jump yet: it was wholly before it.
    let mut before = read_exposed(conns, member, keys).await?;
    // The jump takes effect after the step, and after the server answered the last `TIME` that
    // did not show it (which it did after that request was sent).
    let mut since = mono_ns();
    step()?;
    let deadline = Instant::now() + SHOWS_WITHIN;
    loop {
        let exposed = read_exposed(conns, member, keys).await?;
        let asked = mono_ns();
        if ahead(&mut conns[member]).await? >= jump / 2 {
            return Ok(Jumped {
                exposed: before,
                visible: since,
            });
        }
        since = asked;
        before = exposed;
        if Instant::now() > deadline {
            bail!("member {member}'s clock did not show its {jump:?} jump within {SHOWS_WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// After a stepped clock was set back to true time: waits until the member's `TIME` shows it
/// (less than half of `jump` ahead).
pub async fn wait_stepped_back(c: &mut MultiplexedConnection, jump: Duration) -> Result<()> {
    let deadline = Instant::now() + SHOWS_WITHIN;
    while ahead(c).await? >= jump / 2 {
        if Instant::now() > deadline {
            bail!("a member's clock still runs ahead {SHOWS_WITHIN:?} after it was set back");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
