//! Docs that cannot rot: every relative link and `#anchor` of README.md, CHANGELOG.md,
//! CONTRIBUTING.md, SECURITY.md and docs/*.md resolves (the file exists inside the repository,
//! the anchor is a heading of it by GitHub's slug rules), every alert's runbook URL in the
//! chart's defaults names a heading of docs/runbooks.md, docs/spec.md names every field of the
//! CRD, every `make` target and Rust source file they name exists, and no page cites a commit
//! of this repository or more than three dates.
//!
//! Reads files only: no control plane, no Helm (tests/alerts.rs checks the rendered rules'
//! URLs the same way), so `make check` runs it.

use std::path::{Path, PathBuf};

use redlock_test_support::markdown::{self, GITHUB_BLOB};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The pages a reader follows links through: README.md, CHANGELOG.md, CONTRIBUTING.md,
/// SECURITY.md and every docs/*.md, relative to the root.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(ROOT).unwrap().to_owned())
        .collect();
    docs.sort();
    assert!(docs.len() >= 6, "docs/ has {} pages", docs.len());
    pages.extend(docs);
    pages
}

fn read(page: &Path) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(page)).unwrap()
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = Path::new(ROOT);
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (line, target) in markdown::links(&read(&page)) {
            // A link to this repository on GitHub is checked as the file it names.
            let (from, target) = match target.strip_prefix(GITHUB_BLOB) {
                Some(t) => (Path::new(""), t),
                None => (page.as_path(), target.as_str()),
            };
            if markdown::is_external(target) {
                continue;
            }
            checked += 1;
            if let Err(e) = markdown::check_link(root, from, target) {
                broken.push(format!("{}:{line}: {e}", page.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} links found: is the parser blind?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `alerts.runbookBaseUrl` of the chart's values.yaml, and each `#anchor` the PrometheusRule
/// template appends to it.
fn chart_runbook_urls() -> Vec<(String, String)> {
    let chart = Path::new(ROOT).join("charts/redlock-operator");
    let values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
    let base = values["alerts"]["runbookBaseUrl"].as_str().unwrap();
    let base = base.trim_end_matches('/');
    let template = std::fs::read_to_string(chart.join("templates/prometheusrule.yaml")).unwrap();
    let mut urls = Vec::new();
    let mut alert = None;
    for line in template.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            alert = Some(name.trim().to_owned());
        }
        if let Some((_, rest)) = line.split_once("runbook_url: {{ printf \"%s#") {
            let anchor = rest.split('"').next().unwrap();
            let name = alert.take().expect("a runbook_url after its alert's name");
            urls.push((name, format!("{base}#{anchor}")));
        }
    }
    urls
}

#[test]
fn every_alert_runbook_url_resolves_to_a_heading() {
    let urls = chart_runbook_urls();
    assert!(urls.len() >= 10, "{urls:?}");
    for (alert, url) in urls {
        assert_eq!(
            url,
            format!("{GITHUB_BLOB}docs/runbooks.md#{}", alert.to_lowercase()),
            "{alert}: the runbook is its own heading in docs/runbooks.md"
        );
        if let Err(e) = markdown::check_repo_url(Path::new(ROOT), &url) {
            panic!("{alert}: {e}");
        }
    }
}

/// Words of 7 to 40 hex digits with at least one letter and one digit: what a commit hash
/// looks like (and what no prose word or plain number does).
fn hash_like(word: &str) -> bool {
    (7..=40).contains(&word.len())
        && word
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

/// Dates such as 2026-11-28.
fn dates(text: &str) -> usize {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(9))
        .filter(|&i| {
            let d = |j: usize| b[i + j].is_ascii_digit();
            (i == 0 || !b[i - 1].is_ascii_digit())
                && (0..4).all(d)
                && b[i + 4] == b'-'
                && d(5)
                && d(6)
                && b[i + 7] == b'-'
                && d(8)
                && d(9)
        })
        .count()
}

#[test]
fn pages_cite_no_commits_and_few_dates() {
    let mut found = Vec::new();
    for page in pages().into_iter().filter(|p| p != Path::new("CHANGELOG.md")) {
        let text = read(&page);
        for (n, line) in text.lines().enumerate() {
            for word in line.split(|c: char| !c.is_ascii_alphanumeric()) {
                if hash_like(word) {
                    found.push(format!("{}:{}: {word}", page.display(), n + 1));
                }
            }
        }
        let dates = dates(&text);
        if dates > 3 {
            found.push(format!("{}: {dates} dates (at most 3)", page.display()));
        }
    }
    assert!(
        found.is_empty(),
        "history belongs in CHANGELOG.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
}

/// The field names of an object schema, `prefix.name`, down to `depth` levels (into array
/// items too), leaving out Kubernetes' own types the CRD embeds.
fn fields(schema: &serde_yaml::Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
    let Some(props) = schema["properties"].as_mapping() else {
        return;
    };
    for (name, sub) in props {
        let path = format!("{prefix}.{}", name.as_str().unwrap());
        out.push(path.clone());
        let embedded = ["resources", "affinity", "securityContext", "tolerations"]
            .iter()
            .any(|k| path.ends_with(k));
        if depth > 1 && !embedded {
            fields(sub, &path, depth - 1, out);
            fields(&sub["items"], &format!("{path}[]"), depth - 1, out);
        }
    }
}

#[test]
fn the_spec_reference_names_every_field() {
    let crd: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("crds/redlockcluster.yaml")).unwrap(),
    )
    .unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    let mut all = Vec::new();
    fields(&schema["spec"], "spec", 2, &mut all);
    fields(&schema["status"], "status", 2, &mut all);
    assert!(all.len() > 50, "{all:?}");
    let page = read(Path::new("docs/spec.md"));
    let missing: Vec<&String> = all
        .iter()
        .filter(|path| {
            let name = path.rsplit(['.', ']']).next().unwrap();
            ![
                format!("`{name}`"),
                format!(" {name}:"),
                format!("{{{name}:"),
                format!(".{name}`"),
                format!(".{name}[]"),
            ]
            .iter()
            .any(|form| page.contains(form.as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/spec.md does not name these fields (kubectl explain does): {missing:?}"
    );
}

/// The code of `text`: the lines of its fenced blocks and the contents of its code spans.
fn code(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            out.push(line.to_owned());
        } else {
            out.extend(line.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    out
}

#[test]
fn every_make_target_the_docs_name_exists() {
    let makefile = read(Path::new("Makefile"));
    let targets: Vec<&str> = makefile
        .lines()
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    let (mut unknown, mut checked) = (Vec::new(), 0);
    for page in pages() {
        for snippet in code(&read(&page)) {
            let words: Vec<&str> = snippet.split_whitespace().collect();
            for pair in words.windows(2) {
                let target = pair[1].trim_end_matches([',', ';', ')']);
                if pair[0] != "make" || !target.starts_with(|c: char| c.is_ascii_lowercase()) {
                    continue;
                }
                checked += 1;
                if !targets.contains(&target) {
                    unknown.push(format!("{}: make {target}", page.display()));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} make commands found");
    assert!(
        unknown.is_empty(),
        "no such Makefile target:\n{}",
        unknown.join("\n")
    );
}

/// Every file under `dir` (relative to the root), as `/`-separated paths.
fn files_under(dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(Path::new(ROOT).join(dir)) else {
        return;
    };
    for e in entries {
        let e = e.unwrap();
        let path = format!("{dir}/{}", e.file_name().to_string_lossy());
        if e.file_type().unwrap().is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A page naming `clock_offset.rs` after it became `clock/offset.rs` sends its reader to a
/// file that is not there. Every Rust file a page names in code (`act.rs`, `clock/offset.rs`,
/// `src/children/pod.rs`) is a file of the repository's sources, tests or benchmarks whose
/// path ends so. The CHANGELOG is history and keeps the names of its day.
#[test]
fn every_source_file_the_docs_name_exists() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        files_under(dir, &mut files);
    }
    let (mut missing, mut checked) = (Vec::new(), 0);
    for page in pages().into_iter().filter(|p| !p.ends_with("CHANGELOG.md")) {
        for snippet in code(&read(&page)) {
            for word in snippet.split(|c: char| c.is_whitespace() || ",;()`'\"".contains(c)) {
                let named = word.trim_end_matches(':');
                let is_path = named.ends_with(".rs")
                    && named.len() > 3
                    && named
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_/.-".contains(c));
                if !is_path {
                    continue;
                }
                checked += 1;
                let found = files
                    .iter()
                    .any(|f| f == named || f.ends_with(&format!("/{named}")));
                if !found {
                    missing.push(format!("{}: {named}", page.display()));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} file names found");
    assert!(missing.is_empty(), "no such file:\n{}", missing.join("\n"));
}
