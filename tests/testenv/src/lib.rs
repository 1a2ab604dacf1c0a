//! Test environment of redlock-operator (docs/design.md §7): a real kube-apiserver, etcd,
//! kube-controller-manager and kube-scheduler on loopback, a *process kubelet* that runs
//! Redis pods as local `redis-server` processes on their own 127.x.y.z addresses, a
//! resolver for published Service names, and a handle on the operator under test.
//!
//! Everything started here is torn down on drop, also when a test panics; every child
//! process additionally gets `PR_SET_PDEATHSIG` so even a killed test binary leaks nothing.

pub mod budget;
pub mod certs;
pub mod controlplane;
pub mod faults;
pub mod kubelet;
pub mod nodes;
pub mod operator;
pub mod procs;
pub mod resolver;
pub mod restarting;

pub use controlplane::{ControlPlane, ControlPlaneConfig};
pub use nodes::images::NodeImages;
