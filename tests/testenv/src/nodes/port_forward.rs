//! A port on this side forwarded into the run's network namespace: `make demo` runs real
//! nodes (and the API server) inside namespaces of their own ([`super::namespace`]), and the
//! user's `kubectl` runs outside them. Plain TCP relayed byte for byte (TLS end to end), one
//! pair of threads per connection; the threads end with their connection or the process.

use std::io::copy;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

use anyhow::{Context, Result};
use tracing::warn;

use super::namespace::connect_inside;

/// Forwards connections accepted on `listener` to `target` inside the network namespace of
/// process `pid`, in the background.
pub fn forward(listener: TcpListener, pid: u32, target: SocketAddr) -> Result<()> {
    let local = listener.local_addr().context("listener address")?;
    std::thread::Builder::new()
        .name(format!("forward {local}"))
        .spawn(move || {
            for outside in listener.incoming() {
                let outside = match outside {
                    Ok(s) => s,
                    Err(e) => {
                        warn!("accept on {local}: {e}");
                        continue;
                    }
                };
                match connect_inside(pid, target) {
                    Ok(inside) => relay(outside, inside),
                    Err(e) => {
                        warn!("forward {local} -> {target}: {e:#}");
                        let _ = outside.shutdown(Shutdown::Both);
                    }
                }
            }
        })
        .context("start the forwarding thread")?;
    Ok(())
}

/// Copies both ways until either side closes.
fn relay(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one_way = |mut from: TcpStream, mut to: TcpStream| {
        move || {
            let _ = copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        }
    };
    std::thread::spawn(one_way(a, b2));
    std::thread::spawn(one_way(b, a2));
}
