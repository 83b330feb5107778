//! Values the daemon itself knows are secret (its environment variables
//! with secret-looking names, configured secrets), matched exactly and in
//! the encodings they travel in: base64 (RFC 4648 section 4 and the URL-safe
//! alphabet of section 5, at every byte alignment, so the value is found
//! inside a longer encoded blob such as `user:secret` in Basic auth),
//! percent-encoding (RFC 3986 section 2.1) and JSON string escaping
//! (RFC 8259 section 7).

use base64::Engine as _;

/// Shortest value treated as a known secret (bytes); shorter ones would
/// match ordinary text.
pub(crate) const MIN_KNOWN: usize = 8;
/// Shortest encoded form searched (bytes).
const MIN_FORM: usize = 8;

/// The forms in which `value` is searched.
pub(crate) fn forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vec![value.to_vec()];
    let std = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE;
    for engine in [&std, &url] {
        for shift in 0..3usize {
            let mut buf = vec![0u8; shift];
            buf.extend_from_slice(value);
            let enc = engine.encode(&buf).into_bytes();
            // characters that depend only on the value's bytes: skip those
            // mixed with the leading filler, and those mixed with whatever follows
            let skip_front = match shift {
                0 => 0,
                1 => 2,
                _ => 3,
            };
            let total = shift + value.len();
            let stable_bits = total * 8 - (total * 8) % 6;
            let stable_end = stable_bits / 6;
            if stable_end > skip_front && stable_end - skip_front >= MIN_FORM {
                out.push(enc[skip_front..stable_end].to_vec());
            }
            if shift == 0 {
                // the full padded encoding, as `echo -n v | base64` prints it
                out.push(enc.clone());
            }
        }
    }
    let pct = percent_encode(value);
    out.push(pct);
    if let Ok(s) = std::str::from_utf8(value) {
        if let Ok(j) = serde_json::to_string(s) {
            let j = j.as_bytes();
            out.push(j[1..j.len() - 1].to_vec());
        }
    }
    out.retain(|f| f.len() >= MIN_FORM);
    out.sort();
    out.dedup();
    out
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// Secret values from the daemon's environment: variables whose name is a
/// secret's name (`*_TOKEN`, `*_PASSWORD`, `AWS_SECRET_ACCESS_KEY`...) or
/// listed in `extra_names`, and passwords in URL-valued variables
/// (`DATABASE_URL=postgres://u:p@h/db`).
pub(crate) fn from_env(extra_names: &[String]) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    from_vars(
        std::env::vars_os().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())),
        extra_names,
    )
}

/// [`from_env`] over given `(name, value)` pairs.
pub(crate) fn from_vars(
    vars: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    extra_names: &[String],
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (name, value) in vars {
        let (name, value) = (name.as_slice(), value.as_slice());
        if value.len() < MIN_KNOWN || super::keyed::is_placeholder(value) {
            continue;
        }
        let listed = extra_names.iter().any(|n| n.as_bytes() == name);
        if !listed && is_shell_path_var(name) {
            continue;
        }
        let class = super::keyed::classify_key(name);
        if listed || class == super::keyed::KeyClass::Strong {
            out.push(value.to_vec());
        } else if class == super::keyed::KeyClass::Weak && super::keyed::looks_random(value, 3.0) {
            out.push(value.to_vec());
        }
        if let Some(pw) = url_password(value) {
            if pw.len() >= MIN_KNOWN && !super::keyed::is_placeholder(pw) {
                out.push(pw.to_vec());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The shell's working-directory variables (`PWD`, `OLDPWD`, POSIX
/// sh(1) "Shell Variables"): their values are paths, not passwords, though
/// `pwd` is a password's name in connection strings (`Pwd=...`).
pub(crate) fn is_shell_path_var(name: &[u8]) -> bool {
    matches!(name, b"PWD" | b"OLDPWD")
}

/// The password of `scheme://user:password@host...`, if any.
fn url_password(v: &[u8]) -> Option<&[u8]> {
    let s = v.windows(3).position(|w| w == b"://")? + 3;
    let at = s + v[s..].iter().position(|&b| b == b'@')?;
    let auth = &v[s..at];
    if auth.contains(&b'/') {
        return None;
    }
    let colon = auth.iter().position(|&b| b == b':')?;
    Some(&auth[colon + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_forms_match_inside_longer_blobs() {
        let secret = b"s3cr3t-Value-42";
        let fs = forms(secret);
        let std = base64::engine::general_purpose::STANDARD;
        for prefix in ["", "u:", "ab:", "user:"] {
            let mut v = prefix.as_bytes().to_vec();
            v.extend_from_slice(secret);
            v.extend_from_slice(b"\ntrailer");
            let enc = std.encode(&v);
            assert!(
                fs.iter()
                    .any(|f| enc.as_bytes().windows(f.len()).any(|w| w == &f[..])),
                "prefix {prefix:?}: {enc}"
            );
        }
    }

    #[test]
    fn url_and_json_forms() {
        let fs = forms(b"p@ss w\"rd/1");
        assert!(fs.contains(&b"p%40ss%20w%22rd%2F1".to_vec()));
        assert!(fs.contains(&b"p@ss w\\\"rd/1".to_vec()));
    }

    /// Red-team leak: `PWD` was read as a password's name, so the daemon's
    /// working directory became a known secret and every path under it was
    /// redacted (`[REDACTED:known-secret:...]/ws`).
    #[test]
    fn working_directory_variables_are_not_secrets() {
        let vars = [
            ("PWD", "/home/alice/projects/warden"),
            ("OLDPWD", "/home/alice/projects"),
            ("DB_PASSWORD", "s3cr3t-Value-42"),
            ("MYSQL_PWD", "an0ther-Secret-9"),
        ];
        let got = from_vars(
            vars.iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())),
            &[],
        );
        assert_eq!(
            got,
            vec![b"an0ther-Secret-9".to_vec(), b"s3cr3t-Value-42".to_vec()]
        );
        // listed by name in the settings: still taken
        let got = from_vars(
            std::iter::once((b"PWD".to_vec(), b"/srv/x/y/z".to_vec())),
            &["PWD".to_string()],
        );
        assert_eq!(got, vec![b"/srv/x/y/z".to_vec()]);
    }

    #[test]
    fn url_passwords() {
        assert_eq!(
            url_password(b"postgres://app:pw123456@db/x"),
            Some(&b"pw123456"[..])
        );
        assert_eq!(url_password(b"https://example.com/a@b"), None);
    }
}
