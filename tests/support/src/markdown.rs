//! The repository's Markdown read as GitHub renders it: the anchors of its headings (GitHub's
//! slug rules) and its links, so that tests can check that every relative link and `#anchor`
//! resolves (`tests/docs.rs`) and that each alert's `runbook_url` names a heading of the
//! runbooks (`tests/alerts.rs`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

/// Where the chart's links point by default: this repository's files on GitHub.
pub const GITHUB_BLOB: &str = "https://github.com/redlock-dev/redlock-operator/blob/main/";

/// The lines of `text` outside fenced code blocks (```` ``` ```` or `~~~`), with their
/// 1-based numbers.
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<&str> = None;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                None
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                None
            }
            (Some(_), _) => None,
            (None, None) => Some((i + 1, line)),
        }
    })
}

/// `text` with inline code spans removed: what they hold is not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor for a heading's text: inline markup dropped (a link keeps its text),
/// lower case, every character but letters, digits, `-`, `_` and spaces removed, spaces
/// turned into `-`.
pub fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim();
    // [text](target) -> text
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end + 1))
        }) {
            Some((close, end)) => {
                text.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors GitHub gives the ATX headings of `text` (`#` to `######`, outside code
/// blocks): a repeated heading gets `-1`, `-2`, ... as GitHub numbers them.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 {
            continue;
        }
        let Some(heading) = line[hashes..].strip_prefix(' ') else {
            continue;
        };
        let base = slug(heading.trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links and images of `text` (`[text](target)`, `![alt](target)`,
/// outside code blocks and code spans), with their line numbers; a title after the target
/// (`(target "title")`) is dropped.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// `path` with `.` and `..` folded, or None when it climbs above its start.
fn normalized(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether a link leaves the repository's files for the web (or mail).
pub fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// Checks one link target of the file `from` (relative to `root`): a `#anchor` must be a
/// heading of `from`; a relative path must stay inside the repository and name a file or
/// directory, and its `#anchor`, if any, a heading of that Markdown file.
pub fn check_link(root: &Path, from: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_owned()
    } else {
        let dir = from.parent().unwrap_or(Path::new(""));
        normalized(&dir.join(path)).ok_or_else(|| format!("{target}: leaves the repository"))?
    };
    let full = root.join(&file);
    if !full.exists() {
        return Err(format!("{target}: {} does not exist", file.display()));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if full.extension().is_none_or(|e| e != "md") {
        return Err(format!("{target}: an anchor into a file that is not Markdown"));
    }
    let text = std::fs::read_to_string(&full).map_err(|e| format!("{target}: {e}"))?;
    if anchors(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!(
            "{target}: {} has no heading with anchor #{anchor}",
            file.display()
        ))
    }
}

/// Checks a URL into this repository on GitHub (`GITHUB_BLOB` + path + `#anchor`), such as an
/// alert's `runbook_url`: the file must exist and the anchor name one of its headings.
pub fn check_repo_url(root: &Path, url: &str) -> Result<(), String> {
    let target = url
        .strip_prefix(GITHUB_BLOB)
        .ok_or_else(|| format!("{url}: not under {GITHUB_BLOB}"))?;
    if !target.contains('#') {
        return Err(format!("{url}: no anchor"));
    }
    check_link(root, Path::new(""), target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_get_githubs_anchors() {
        let text = "# redlock-operator\n## Why it exists: the delayed-restart rule\n\
                    ### `make bench`: detection, release lateness\n## Status\n## Status\n\
                    ```sh\n# not a heading\n```\n#not-a-heading\n## Design §6 (code shape)\n\
                    ## See [the spec](spec.md)\n";
        let got: Vec<String> = anchors(text).into_iter().collect();
        assert_eq!(
            got,
            [
                "design-6-code-shape",
                "make-bench-detection-release-lateness",
                "redlock-operator",
                "see-the-spec",
                "status",
                "status-1",
                "why-it-exists-the-delayed-restart-rule",
            ]
        );
    }

    #[test]
    fn links_outside_code_are_found() {
        let text = "See [a](docs/a.md#x) and ![img](p.svg \"t\").\n`[no](code.md)`\n\
                    ```\n[no](fence.md)\n```\n[b](#local) [c](https://example.com)\n";
        let got: Vec<(usize, String)> = links(text);
        assert_eq!(
            got,
            [
                (1, "docs/a.md#x".to_owned()),
                (1, "p.svg".to_owned()),
                (6, "#local".to_owned()),
                (6, "https://example.com".to_owned()),
            ]
        );
    }

    #[test]
    fn paths_above_the_root_are_refused() {
        assert_eq!(
            normalized(Path::new("docs/../README.md")),
            Some("README.md".into())
        );
        assert_eq!(normalized(Path::new("docs/../../shared/x.md")), None);
    }
}
