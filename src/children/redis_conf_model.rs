//! Test-only model of how redis-server reads its config file (Redis 7.0
//! `loadServerConfig`/`loadServerConfigFromString` and `sdssplitargs`), so that what the
//! renderer writes can be checked the way the server will read it — not by looking for
//! substrings.
//!
//! What it models: the file is read in `fgets` chunks of at most 1024 bytes, each appended as
//! a C string (a NUL ends what is kept of that chunk); the text is split at `\n`; each line is
//! trimmed of ` \t\r\n`; empty lines and lines starting with `#` are skipped; the rest is split
//! into words: unquoted words end at ` `, `\n`, `\r`, `\t`; `"…"` takes escapes (`\n`, `\r`,
//! `\t`, `\b`, `\a`, `\xHH`, `\<c>`); `'…'` takes only `\'`; a closing quote must be followed
//! by whitespace or the end of the line; an unterminated quote makes the whole file invalid.
//! The first word, lowercased, is the directive; the rest are its arguments.

/// One directive as Redis reads it: lowercased name and its argument bytes.
pub(crate) type Directive = (String, Vec<Vec<u8>>);

/// Redis's `fgets` buffer (`CONFIG_READ_LEN`).
const READ_CHUNK: usize = 1024;

/// The directives of `conf` in file order, or the error Redis would stop with.
pub(crate) fn parse(conf: &[u8]) -> Result<Vec<Directive>, String> {
    let text = as_read(conf);
    let mut out = Vec::new();
    for (n, line) in text.split(|b| *b == b'\n').enumerate() {
        let line = trim(line);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let words = split_args(line).ok_or_else(|| format!("line {}: unbalanced quotes", n + 1))?;
        let Some((name, args)) = words.split_first() else {
            continue;
        };
        out.push((String::from_utf8_lossy(name).to_lowercase(), args.to_vec()));
    }
    Ok(out)
}

/// The bytes Redis keeps: per `fgets` chunk (up to and including `\n`, at most 1024 bytes),
/// what precedes the first NUL.
fn as_read(conf: &[u8]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(conf.len());
    let mut rest = conf;
    while !rest.is_empty() {
        let line_end = rest
            .iter()
            .position(|b| *b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let chunk = &rest[..line_end.min(READ_CHUNK)];
        rest = &rest[chunk.len()..];
        let until_nul = chunk.iter().position(|b| *b == 0).unwrap_or(chunk.len());
        kept.extend_from_slice(&chunk[..until_nul]);
    }
    kept
}

fn trim(mut line: &[u8]) -> &[u8] {
    let strip = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    while line.first().is_some_and(strip) {
        line = &line[1..];
    }
    while line.last().is_some_and(strip) {
        line = &line[..line.len() - 1];
    }
    line
}

/// C `isspace` in the "C" locale (Redis does not change `LC_CTYPE`).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `sdssplitargs`; `None` for unbalanced quotes or a closing quote not followed by a space.
/// Kept as one function on purpose: it follows Redis's C function branch by branch, so the two
/// can be compared side by side.
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut words = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(words);
        }
        let (mut in_double, mut in_single) = (false, false);
        let mut word = Vec::new();
        loop {
            let c = at(p);
            if in_double {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && at(p + 2).is_ascii_hexdigit()
                    && at(p + 3).is_ascii_hexdigit()
                {
                    let hex = std::str::from_utf8(&line[p + 2..p + 4]).ok()?;
                    word.push(u8::from_str_radix(hex, 16).ok()?);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    word.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    word.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    word.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    word.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    other => word.push(other),
                }
            }
            p += 1;
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn reads_directives_as_redis_does() {
        let conf =
            b"# comment\n\n  Port 6379 \r\nsave \"\"\nx \"a b\" 'it\\'s' \"\\x41\\n\"\n\t#indented comment\n";
        assert_eq!(
            parse(conf).unwrap(),
            vec![
                ("port".into(), words(&["6379"])),
                ("save".into(), words(&[""])),
                ("x".into(), words(&["a b", "it's", "A\n"])),
            ]
        );
    }

    #[test]
    fn quotes_must_balance_and_end_words() {
        assert!(parse(b"timeout \"0\n").is_err());
        assert!(parse(b"timeout '0\n").is_err());
        assert!(parse(b"timeout \"0\"x\n").is_err());
        // A quote opens quoting anywhere, also inside a word.
        assert_eq!(parse(b"timeout 0\"x y\"\n").unwrap()[0].1, words(&["0x y"]));
    }

    #[test]
    fn a_newline_in_a_value_is_an_extra_directive() {
        // What the renderer must never produce: the model has to see the injection.
        let parsed = parse(b"timeout 0\nsave 900 1\n").unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, "save");
        // A carriage return only separates words within the line.
        assert_eq!(
            parse(b"timeout 0\rsave\n").unwrap(),
            vec![("timeout".into(), words(&["0", "save"]))]
        );
    }

    #[test]
    fn a_nul_hides_the_rest_of_its_line_including_the_newline() {
        // `sdscat` stops at the NUL, so the next line is glued onto this one: the enforced
        // `save ""` would become arguments of `timeout`.
        assert_eq!(
            parse(b"timeout 0\0\nsave \"\"\n").unwrap(),
            vec![("timeout".into(), words(&["0save", ""]))]
        );
        assert_eq!(
            parse(b"a 1\0x\nb 2\n").unwrap(),
            vec![("a".into(), words(&["1b", "2"]))]
        );
    }
}
