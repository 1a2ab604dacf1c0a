//! Where the machine's CPU went over a window, by process group (from /proc): the operator,
//! the control plane's processes, the redis-servers, the process kubelet (which runs inside
//! the benchmark's own process) and the exec probes and container wrappers it started and
//! reaped. The operator's numbers on 2 shared cores mean little without knowing what it
//! shared them with.

use std::collections::{BTreeMap, HashMap};

/// CPU seconds so far: the machine's busy and total time, each process by group, and what
/// the benchmark's own reaped children used.
pub struct Snapshot {
    at: std::time::Instant,
    busy: f64,
    total: f64,
    processes: HashMap<u32, (&'static str, f64)>,
    reaped_children: f64,
}

fn ticks() -> f64 {
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// The command name and the fields after it of /proc/<pid>/stat (the name may hold spaces).
fn stat(pid: &str) -> Option<(String, Vec<f64>)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(") ")?;
    let fields = text[close + 2..]
        .split(' ')
        .map(|f| f.trim().parse::<f64>().unwrap_or(0.0))
        .collect();
    Some((text[open + 1..close].to_string(), fields))
}

fn group(pid: u32, comm: &str, operator: u32, this: u32) -> &'static str {
    if pid == operator {
        return "operator";
    }
    if pid == this {
        return "process kubelet + benchmark";
    }
    match comm {
        "kube-apiserver" => "kube-apiserver",
        "etcd" => "etcd",
        "kube-controller" => "kube-controller-manager",
        "kube-scheduler" => "kube-scheduler",
        "redis-server" => "redis-server",
        _ => "other",
    }
}

pub fn snapshot(operator: u32) -> Snapshot {
    let this = std::process::id();
    let tck = ticks();
    let machine = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // cpu  user nice system idle iowait irq softirq steal ...
    let cpu: Vec<f64> = machine
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let total: f64 = cpu.iter().take(8).sum::<f64>() / tck;
    let idle = (cpu.get(3).unwrap_or(&0.0) + cpu.get(4).unwrap_or(&0.0)) / tck;
    let mut processes = HashMap::new();
    let mut reaped_children = 0.0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some((comm, f)) = stat(&pid.to_string()) else {
            continue;
        };
        // utime, stime are fields 14 and 15 (11 and 12 after the name); cutime, cstime next.
        let own = (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / tck;
        if pid == this {
            reaped_children = (f.get(13).unwrap_or(&0.0) + f.get(14).unwrap_or(&0.0)) / tck;
        }
        processes.insert(pid, (group(pid, &comm, operator, this), own));
    }
    Snapshot {
        at: std::time::Instant::now(),
        busy: total - idle,
        total,
        processes,
        reaped_children,
    }
}

/// Percent of one core per group between `a` and `b`, and the number of processes in each; a
/// process started in the window counts in full, one that ended in it only if the benchmark
/// reaped it. First line: the whole machine's busy time.
pub fn report(a: &Snapshot, b: &Snapshot) -> String {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let pct = |cpu: f64| cpu / secs * 100.0;
    let mut groups: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (pid, (group, cpu)) in &b.processes {
        let before = a.processes.get(pid).map_or(0.0, |(_, c)| *c);
        let entry = groups.entry(group).or_default();
        entry.0 += cpu - before;
        entry.1 += 1;
    }
    groups.insert(
        "exec probes and container wrappers (reaped by the kubelet)",
        (b.reaped_children - a.reaped_children, 0),
    );
    let mut lines = vec![format!(
        "machine busy {:.0}% of its CPUs ({:.0}% of one core)",
        (b.busy - a.busy) / (b.total - a.total) * 100.0,
        pct(b.busy - a.busy)
    )];
    let mut sorted: Vec<_> = groups.into_iter().collect();
    sorted.sort_by(|x, y| y.1.0.total_cmp(&x.1.0));
    for (group, (cpu, n)) in sorted {
        let count = if n > 0 {
            format!(" ({n} processes)")
        } else {
            String::new()
        };
        lines.push(format!("{group}: {:.1}% of a core{count}", pct(cpu)));
    }
    lines.join("\n    ")
}
