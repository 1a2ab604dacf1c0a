//! `timeline.svg`: per phase, one row per key with a bar for every hold interval (coloured by
//! client), faults as shaded bands from injection to recovery with their kind written above,
//! and violations as red marks where two holders overlapped.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::checker::{Violation, hold_interval};
use crate::history::Op;
use crate::report::FaultRecord;

pub struct Phase<'a> {
    pub title: String,
    pub ops: &'a [Op],
    pub faults: &'a [FaultRecord],
    pub violations: &'a [Violation],
    /// Start and end of the phase (CLOCK_MONOTONIC ns).
    pub start: u64,
    pub end: u64,
}

const COLOURS: [&str; 4] = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b"];
const LEFT: f64 = 90.0;
const ROW: f64 = 22.0;
const MAX_WIDTH: f64 = 8000.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn svg(phases: &[Phase], clients: &[String]) -> String {
    let longest = phases
        .iter()
        .map(|p| p.end.saturating_sub(p.start))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        / 1e9;
    // Readable bars for short runs, bounded width for long ones.
    let px_per_s = (MAX_WIDTH / longest).clamp(4.0, 60.0);
    let width = LEFT + longest * px_per_s + 20.0;
    let mut body = String::new();
    let mut y = 30.0;
    // Legend.
    for (i, c) in clients.iter().enumerate() {
        let x = LEFT + i as f64 * 140.0;
        let _ = write!(
            body,
            r#"<rect x="{x}" y="{}" width="14" height="10" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            y - 10.0,
            COLOURS[i % COLOURS.len()],
            x + 18.0,
            y,
            escape(c)
        );
    }
    let _ = write!(
        body,
        r##"<rect x="{}" y="{}" width="14" height="10" fill="#d62728"/><text x="{}" y="{y}">violation</text>"##,
        LEFT + clients.len() as f64 * 140.0,
        y - 10.0,
        LEFT + clients.len() as f64 * 140.0 + 18.0
    );
    y += 20.0;
    for phase in phases {
        let x = |t: u64| LEFT + t.saturating_sub(phase.start) as f64 / 1e9 * px_per_s;
        let keys: BTreeSet<&str> = phase.ops.iter().map(|o| o.key.as_str()).collect();
        let _ = write!(
            body,
            r#"<text x="4" y="{}" font-weight="bold">{}</text>"#,
            y + 14.0,
            escape(&phase.title)
        );
        y += 34.0;
        let top = y;
        let rows_height = keys.len() as f64 * ROW;
        for f in phase.faults {
            let (x0, x1) = (x(f.injected), x(f.recovered).max(x(f.injected) + 1.0));
            let _ = write!(
                body,
                r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#ff7f0e" fill-opacity="0.18"/><text x="{x0:.1}" y="{:.1}" font-size="9" fill="#b35900">{}</text>"##,
                top - 12.0,
                x1 - x0,
                rows_height + 12.0,
                top - 3.0 - (f.index % 2) as f64 * 8.0,
                f.kind.name()
            );
        }
        for (row, key) in keys.iter().enumerate() {
            let ry = top + row as f64 * ROW;
            let _ = write!(body, r#"<text x="4" y="{:.1}">{}</text>"#, ry + 14.0, escape(key));
            for op in phase.ops.iter().filter(|o| o.key == *key) {
                let Some((s, e)) = hold_interval(op) else { continue };
                let colour = clients
                    .iter()
                    .position(|c| *c == op.client)
                    .map_or("#7f7f7f", |i| COLOURS[i % COLOURS.len()]);
                let _ = write!(
                    body,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.8"><title>op {} {} {:.0} ms</title></rect>"#,
                    x(s),
                    ry + 3.0,
                    (x(e) - x(s)).max(0.5),
                    ROW - 6.0,
                    op.seq,
                    escape(&op.worker),
                    (e - s) as f64 / 1e6
                );
            }
            for v in phase.violations.iter().filter(|v| v.key == *key) {
                let _ = write!(
                    body,
                    r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#d62728"><title>ops {} and {} overlap {:.0} ms</title></rect>"##,
                    x(v.at),
                    ry,
                    (v.overlap_ns as f64 / 1e9 * px_per_s).max(2.0),
                    ROW,
                    v.first,
                    v.second,
                    v.overlap_ns as f64 / 1e6
                );
            }
        }
        y = top + rows_height + 6.0;
        // Time axis, a tick every 10 s.
        let secs = (phase.end.saturating_sub(phase.start) / 1_000_000_000) as usize;
        for s in (0..=secs).step_by(10) {
            let tx = LEFT + s as f64 * px_per_s;
            let _ = write!(
                body,
                r##"<line x1="{tx:.1}" y1="{y:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#555"/><text x="{tx:.1}" y="{:.1}" font-size="9">{s}s</text>"##,
                y + 4.0,
                y + 14.0
            );
        }
        y += 30.0;
    }
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{y:.0}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>{body}</svg>"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::overlaps;
    use crate::checker::tests::held;
    use crate::schedule::FaultKind;

    #[test]
    fn draws_holds_faults_and_violations() {
        let ops = vec![
            held(1, "k1", 0, 3000, Some(1000)),
            held(2, "k1", 500, 3000, Some(700)),
            held(3, "k2", 0, 3000, Some(100)),
        ];
        let violations = overlaps(&ops);
        let faults = vec![FaultRecord {
            index: 0,
            kind: FaultKind::KillMajority,
            members: vec![0, 1, 2],
            injected: 200_000_000,
            healed: 200_000_000,
            recovered: 900_000_000,
            clock_jump_s: None,
            clock_jump_visible: None,
            detected: None,
            exposed: None,
        }];
        let clients = vec!["c1".to_string(), "c2".to_string(), "c3".to_string()];
        let phase = Phase {
            title: "control <naive>".into(),
            ops: &ops,
            faults: &faults,
            violations: &violations,
            start: 0,
            end: 2_000_000_000,
        };
        let svg = svg(&[phase], &clients);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<title>op ").count(), 3, "one bar per hold");
        assert_eq!(svg.matches("overlap").count(), 1, "one violation mark");
        assert!(svg.contains(">kill-majority<") && svg.contains("control &lt;naive&gt;"));
        assert!(svg.contains(">k1<") && svg.contains(">k2<"));
    }
}
