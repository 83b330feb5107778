//! Kubernetes `Secret` manifests (`kind: Secret`): every value under
//! `data:` (base64, Kubernetes API `core/v1` Secret) and `stringData:`
//! (plain text) is a secret, whatever its name; block scalars (`|`, `>`)
//! included. Other kinds (`ExternalSecret`, `ConfigMap`) are left to the
//! other scanners.

use super::keyed::{is_placeholder, is_template};

/// Longest manifest document scanned (bytes).
const MAX_DOC: usize = 256 * 1024;
/// Shortest base64 `data:` value redacted (shorter ones encode a few bytes).
const MIN_B64: usize = 12;

/// `(start, end)` ranges of secret values in the manifest document holding
/// a `kind:` hit at `pos`, if that document is a `Secret`; and the end of
/// the document scanned (later hits before it need no scan).
pub(crate) fn scan_at(t: &[u8], pos: usize) -> (Vec<(usize, usize)>, usize) {
    let mut out = Vec::new();
    if !kind_is_secret(t, pos) {
        return (out, 0);
    }
    let (ds, de) = document(t, pos);
    scan_document(t, ds, de, &mut out);
    (out, de)
}

fn scan_document(t: &[u8], ds: usize, de: usize, out: &mut Vec<(usize, usize)>) {
    let lines = split_lines(t, ds, de);
    let mut i = 0;
    while i < lines.len() {
        let (ls, le) = lines[i];
        let (ind, content) = indent(t, ls, le);
        let string_data = content == b"stringData:";
        if content != b"data:" && !string_data {
            i += 1;
            continue;
        }
        i += 1;
        while i < lines.len() {
            let (ls, le) = lines[i];
            let (ind2, content) = indent(t, ls, le);
            if content.is_empty() {
                i += 1;
                continue;
            }
            if ind2 <= ind {
                break;
            }
            i += 1;
            let Some(colon) = content
                .windows(2)
                .position(|w| w == b": ")
                .or_else(|| content.ends_with(b":").then(|| content.len() - 1))
            else {
                continue;
            };
            let vstart = ls + ind2 + colon + 1;
            let (lead, raw) = indent(t, vstart, le);
            let vs = vstart + lead;
            let ve = vs + raw.len();
            if matches!(raw, b"|" | b">" | b"|-" | b">-" | b"|+" | b">+") {
                // block scalar: the following lines indented deeper
                let (bs, mut be) = (lines.get(i).map_or(le, |l| l.0), le);
                while i < lines.len() {
                    let (ls3, le3) = lines[i];
                    let (ind3, c3) = indent(t, ls3, le3);
                    if !c3.is_empty() && ind3 <= ind2 {
                        break;
                    }
                    be = le3;
                    i += 1;
                }
                push_value(t, bs, be, string_data, out);
                continue;
            }
            let (mut qs, mut qe) = (vs, ve);
            if qe > qs + 1 && matches!(t[qs], b'"' | b'\'') && t[qe - 1] == t[qs] {
                qs += 1;
                qe -= 1;
            }
            push_value(t, qs, qe, string_data, out);
        }
    }
}

fn push_value(t: &[u8], s: usize, e: usize, string_data: bool, out: &mut Vec<(usize, usize)>) {
    // trim the block's indentation and line breaks
    let mut s = s;
    while s < e && t[s].is_ascii_whitespace() {
        s += 1;
    }
    let mut e = e;
    while e > s && t[e - 1].is_ascii_whitespace() {
        e -= 1;
    }
    let v = &t[s..e];
    if v.is_empty() || is_template(v) {
        return;
    }
    let ok = if string_data {
        v.len() >= 4 && !is_placeholder(v)
    } else {
        let b64 = v
            .iter()
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            .count();
        b64 >= MIN_B64
            && v.iter().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'+' | b'/' | b'=' | b'\n' | b'\r' | b' ' | b'\t')
            })
    };
    if ok {
        out.push((s, e));
    }
}

/// True when the `kind:` at `pos` says `Secret` (any case, quoted or not).
fn kind_is_secret(t: &[u8], pos: usize) -> bool {
    let mut p = pos + 5;
    while p < t.len() && matches!(t[p], b' ' | b'\t' | b'"' | b'\'') {
        p += 1;
    }
    if p + 6 > t.len() || !t[p..p + 6].eq_ignore_ascii_case(b"secret") {
        return false;
    }
    let after = t.get(p + 6).copied().unwrap_or(b'\n');
    // the line must start with `kind:` (after indentation)
    let ls = t[..pos]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    t[ls..pos].iter().all(|b| matches!(b, b' ' | b'\t'))
        && matches!(after, b'\n' | b'\r' | b' ' | b'\t' | b'"' | b'\'')
}

/// The YAML document (between `---` lines) holding `pos`.
fn document(t: &[u8], pos: usize) -> (usize, usize) {
    let lo = pos.saturating_sub(MAX_DOC / 2);
    let hi = (pos + MAX_DOC / 2).min(t.len());
    let mut s = lo;
    let mut p = pos;
    while p > lo {
        let ls = t[lo..p]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(lo, |i| lo + i + 1);
        if t[ls..].starts_with(b"---") {
            s = ls;
            break;
        }
        if ls == lo {
            break;
        }
        p = ls - 1;
    }
    let mut e = hi;
    let mut p = pos;
    while let Some(i) = t[p..hi].iter().position(|&b| b == b'\n') {
        let ls = p + i + 1;
        if t[ls..hi].starts_with(b"---") {
            e = ls;
            break;
        }
        p = ls;
    }
    (s, e)
}

fn split_lines(t: &[u8], s: usize, e: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut p = s;
    while p < e {
        let le = t[p..e]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(e, |i| p + i);
        out.push((p, le));
        p = le + 1;
    }
    out
}

/// Indentation width and trimmed content of a line.
fn indent(t: &[u8], s: usize, e: usize) -> (usize, &[u8]) {
    let mut p = s;
    while p < e && matches!(t[p], b' ' | b'\t') {
        p += 1;
    }
    let mut q = e;
    while q > p && matches!(t[q - 1], b' ' | b'\t' | b'\r') {
        q -= 1;
    }
    (p - s, &t[p..q])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(doc: &str) -> Vec<String> {
        let pos = doc.find("kind:").unwrap();
        scan_at(doc.as_bytes(), pos)
            .0
            .into_iter()
            .map(|(s, e)| doc[s..e].to_string())
            .collect()
    }

    #[test]
    fn data_and_string_data() {
        let doc = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: c3VwZXJzZWNyZXQ=\n  short: YmFyCg==\n  ca.crt: |\n    LS0tLS1CRUdJTiBDRVJU\n    SUZJQ0FURS0tLS0t\nstringData:\n  token: plain-token-1\n";
        assert_eq!(
            values(doc),
            [
                "c3VwZXJzZWNyZXQ=",
                "LS0tLS1CRUdJTiBDRVJU\n    SUZJQ0FURS0tLS0t",
                "plain-token-1"
            ]
        );
    }

    #[test]
    fn other_kinds_and_templates() {
        assert!(values("kind: ConfigMap\ndata:\n  key: c3VwZXJzZWNyZXQ=\n").is_empty());
        assert!(values("kind: ExternalSecret\ndata:\n  - key: c3VwZXJzZWNyZXQ=\n").is_empty());
        assert!(values("kind: Secret\ndata:\n  htpasswd: {{ htpasswd }}\n  b: ''\n").is_empty());
        assert!(
            values("kind: Secret\n---\nkind: ConfigMap\ndata:\n  a: c3VwZXJzZWNyZXQ=\n").is_empty()
        );
    }
}
