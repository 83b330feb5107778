//! Private-key blocks: PEM (RFC 7468: `-----BEGIN <label>-----`, base64
//! lines, `-----END <label>-----`), OpenSSH (`OPENSSH PRIVATE KEY`), PGP
//! armor (RFC 4880 section 6.2: armor headers, blank line, base64, `=CRC`)
//! with any label containing `PRIVATE KEY`. Also found when cut off before
//! the END line, indented (YAML blocks), or with `\n` escapes inside a JSON
//! string (GCP service-account files).

/// Minimum base64 body (bytes) for a block to count as key material.
const MIN_BODY: usize = 32;
/// Longest block scanned (bytes).
const MAX_BLOCK: usize = 64 * 1024;

/// A private-key block found at a `-----BEGIN` hit: `[start, end)`, and
/// whether its END line was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PemHit {
    pub start: usize,
    pub end: usize,
    pub complete: bool,
}

fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// Skips line separators: newlines, `\n` / `\r` escapes (any number of
/// backslashes), and indentation. Returns the new position and whether a
/// line break was crossed.
fn skip_separators(t: &[u8], mut p: usize) -> (usize, bool) {
    let mut broke = false;
    loop {
        let start = p;
        while p < t.len() && matches!(t[p], b' ' | b'\t') {
            p += 1;
        }
        if p < t.len() && matches!(t[p], b'\n' | b'\r') {
            p += 1;
            broke = true;
            continue;
        }
        if p < t.len() && t[p] == b'\\' {
            let mut q = p;
            while q < t.len() && t[q] == b'\\' {
                q += 1;
            }
            if q < t.len() && matches!(t[q], b'n' | b'r') {
                p = q + 1;
                broke = true;
                continue;
            }
        }
        if p == start {
            return (p, broke);
        }
        if p >= t.len() {
            return (p, broke);
        }
        if !matches!(t[p], b' ' | b'\t' | b'\n' | b'\r' | b'\\') {
            return (p, broke);
        }
    }
}

/// Parses `-----BEGIN <label>-----` at `pos`; returns the label range end
/// (after the closing dashes) if the label names a private key.
fn header(t: &[u8], pos: usize) -> Option<usize> {
    let rest = &t[pos..];
    if rest.len() < 11 || !rest[..11].eq_ignore_ascii_case(b"-----BEGIN ") {
        return None;
    }
    let mut p = pos + 11;
    let ls = p;
    while p < t.len()
        && p - ls <= 64
        && (t[p].is_ascii_alphanumeric() || matches!(t[p], b' ' | b'_'))
    {
        p += 1;
    }
    let label = &t[ls..p];
    if !t[p..].starts_with(b"-----") {
        return None;
    }
    let label_up = label.to_ascii_uppercase();
    if !label_up.windows(11).any(|w| w == b"PRIVATE KEY") {
        return None;
    }
    Some(p + 5)
}

/// Parses `-----END <label>-----` at `p`; returns its end.
fn footer(t: &[u8], p: usize) -> Option<usize> {
    let rest = &t[p..];
    if rest.len() < 9 || !rest[..9].eq_ignore_ascii_case(b"-----END ") {
        return None;
    }
    let mut q = p + 9;
    while q < t.len()
        && q - p <= 80
        && (t[q].is_ascii_alphanumeric() || matches!(t[q], b' ' | b'_'))
    {
        q += 1;
    }
    if t[q..].starts_with(b"-----") {
        Some(q + 5)
    } else {
        None
    }
}

/// Scans the body from `p` (just after a header, or at the start of a
/// continuation); returns `(end, base64 bytes, complete)`.
pub(crate) fn body(t: &[u8], mut p: usize) -> (usize, usize, bool) {
    let limit = (p + MAX_BLOCK).min(t.len());
    let mut end = p;
    let mut b64 = 0;
    loop {
        let (q, _broke) = skip_separators(t, p);
        if q >= limit {
            return (end, b64, false);
        }
        if let Some(f) = footer(t, q) {
            return (f, b64, true);
        }
        // armor / encryption headers: `Proc-Type: 4,ENCRYPTED`, `Version: x`
        let mut r = q;
        while r < limit && (t[r].is_ascii_alphanumeric() || t[r] == b'-') {
            r += 1;
        }
        if r > q && r + 1 < limit && t[r] == b':' && t[r + 1] == b' ' {
            let mut e = r;
            while e < limit && !matches!(t[e], b'\n' | b'\r' | b'\\' | b'"') {
                e += 1;
            }
            p = e;
            end = e;
            continue;
        }
        // a base64 line: must end at a line break, the END line, a closing
        // quote, or the end of the input
        let mut e = q;
        while e < limit && is_b64(t[e]) {
            e += 1;
        }
        if e == q {
            return (end, b64, false);
        }
        let mut after = e;
        while after < t.len() && matches!(t[after], b' ' | b'\t') {
            after += 1;
        }
        let line_ends = after >= t.len()
            || matches!(t[after], b'\n' | b'\r' | b'"' | b',')
            || (t[after] == b'\\'
                && t.get(after + 1)
                    .is_some_and(|c| matches!(c, b'n' | b'r' | b'\\')))
            || footer(t, after).is_some();
        if !line_ends {
            return (end, b64, false);
        }
        b64 += e - q;
        p = e;
        end = e;
    }
}

/// Finds a private-key block starting at `pos` (a `-----BEGIN` hit).
pub(crate) fn scan_at(t: &[u8], pos: usize) -> Option<PemHit> {
    let h = header(t, pos)?;
    let (end, b64, complete) = body(t, h);
    if b64 < MIN_BODY {
        return None;
    }
    Some(PemHit {
        start: pos,
        end,
        complete,
    })
}

/// Length of a block's continuation at the start of `t` (base64 lines and
/// the END line), for a stream whose earlier part ended inside a block.
pub(crate) fn continuation(t: &[u8]) -> (usize, bool) {
    let (end, _, complete) = body(t, 0);
    (end, complete)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDAC4AWkdwKYSd8\nKs14IReLcYgADhoXk56ZzXI=";

    #[test]
    fn complete_block() {
        let t = format!("x\n-----BEGIN PRIVATE KEY-----\n{BODY}\n-----END PRIVATE KEY-----\nafter");
        let h = scan_at(t.as_bytes(), 2).unwrap();
        assert!(h.complete);
        assert_eq!(&t[h.end..], "\nafter");
    }

    #[test]
    fn truncated_block_stops_at_prose() {
        let t = format!("-----BEGIN RSA PRIVATE KEY-----\n{BODY}\n$ echo done");
        let h = scan_at(t.as_bytes(), 0).unwrap();
        assert!(!h.complete);
        assert_eq!(&t[h.end..], "\n$ echo done");
        let t = format!("-----BEGIN RSA PRIVATE KEY-----\n{BODY}\nHello world");
        let h = scan_at(t.as_bytes(), 0).unwrap();
        assert_eq!(&t[h.end..], "\nHello world");
    }

    #[test]
    fn json_escaped_block() {
        let body = BODY.replace('\n', "\\n");
        let t = format!(
            r#"{{"private_key": "-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n", "x": 1}}"#
        );
        let pos = t.find("-----BEGIN").unwrap();
        let h = scan_at(t.as_bytes(), pos).unwrap();
        assert!(h.complete);
        assert!(t[h.end..].starts_with("\\n\", \"x\""));
    }

    #[test]
    fn public_material_and_empty_bodies_are_not_keys() {
        assert!(scan_at(b"-----BEGIN CERTIFICATE-----\nMIIB...", 0).is_none());
        assert!(scan_at(
            b"-----BEGIN PRIVATE KEY-----\nanything\n-----END PRIVATE KEY-----",
            0
        )
        .is_none());
        assert!(scan_at(
            b"-----BEGIN OPENSSH PRIVATE KEY----------END OPENSSH PRIVATE KEY-----",
            0
        )
        .is_none());
    }
}
