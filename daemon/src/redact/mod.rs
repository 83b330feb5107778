//! Secret scanning and redaction of everything returned to a client.
//!
//! API contract: [`Redactor::redact`] for whole texts; [`StreamRedactor`] for
//! output that arrives in chunks (a window is carried across chunk
//! boundaries). Markers look like `[REDACTED:<rule>:<short keyed hash>]`.
//!
//! What is found (see `rules.rs`, `keyed.rs`, `pem.rs`, `known.rs`):
//! vendor keys and tokens by their formats (the formats gitleaks' default
//! rule set knows, restated as facts), JWTs, bearer tokens and
//! `Authorization` / `Cookie` headers, private-key blocks (complete, cut off
//! before END, or `\n`-escaped in JSON), `name = value` secrets whose name
//! says they are secret, URL userinfo passwords and secret query
//! parameters, `curl -u user:pass`, values the daemon knows are secret
//! (exactly and base64 / percent / JSON encoded), and, when the policy says
//! so, e-mail addresses, phone numbers, internal domains and private IPs.
//!
//! Markers: `[REDACTED:<rule>:<12 hex>]`, the hex being the first 48 bits
//! of BLAKE3 keyed by a per-session key over the secret, so a model can
//! tell two secrets apart within a session but cannot test guesses. The
//! session's [`Redactor`] remembers which marker stands for which value, so
//! a write or patch that carries markers gets the original values back
//! ([`Redactor::restore_markers`]) or a clear error. Scanning never
//! passes output through on failure: the output is withheld.

mod engine;
mod k8s;
mod keyed;
mod known;
mod pem;
mod rules;
mod stream;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use stream::StreamRedactor;

use engine::Engine;

/// The policy file's `[redact]` section. Every field has a default, so a
/// policy without the section (or with only some fields) parses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactSettings {
    /// Treat the daemon's environment variables with secret-looking names
    /// (`*_TOKEN`, `*_PASSWORD`, `*_SECRET*`, `*_API_KEY`...) as known secrets.
    pub env_secrets: bool,
    /// More environment variable names whose values are secret.
    pub secret_env: Vec<String>,
    /// Rule ids to switch off (e.g. `"jwt"`); `"secret-assignment"` switches
    /// off the `name = value` scanner, `"private-key"` the key-block scanner.
    pub disable_rules: Vec<String>,
    /// What reading a file that is a secret by its path does (`.env*`,
    /// `*.pem`, `id_rsa*`, cloud credential files, `.npmrc`, `.netrc`,
    /// `.git-credentials`...).
    pub secret_files: SecretFileAction,
    /// More file-name patterns (`*` wildcards) that are secret files.
    pub secret_file_patterns: Vec<String>,
    /// Bytes a [`StreamRedactor`] holds back so that a secret split across
    /// chunks is still seen whole (default 4096; 256..=65536).
    pub stream_window_bytes: usize,
    /// Optional personal-data redaction, off by default.
    pub pii: PiiSettings,
}

impl Default for RedactSettings {
    fn default() -> Self {
        RedactSettings {
            env_secrets: true,
            secret_env: Vec::new(),
            disable_rules: Vec::new(),
            secret_files: SecretFileAction::Redact,
            secret_file_patterns: Vec::new(),
            stream_window_bytes: stream::DEFAULT_WINDOW,
            pii: PiiSettings::default(),
        }
    }
}

/// `[redact.pii]`: personal data, each off unless the policy turns it on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PiiSettings {
    /// E-mail addresses.
    pub email: bool,
    /// Phone numbers in international (`+1 555 123 4567`) or `(555) 123-4567` form.
    pub phone: bool,
    /// Domain suffixes that are internal (`corp.example.com`): host names under them are redacted.
    pub internal_domains: Vec<String>,
    /// IPv4 ranges (`10.0.0.0/8`) whose addresses are redacted.
    pub private_ips: Vec<String>,
}

/// What reading a secret file (by its path) does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretFileAction {
    /// The whole content is replaced by one marker.
    #[default]
    Redact,
    /// The read is refused ([`RedactError::SecretFile`]).
    Deny,
    /// The content is scanned like any other file.
    Scan,
}

/// Errors of the redactor. A scanner failure withholds the output.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// The scanner failed; the output must be withheld.
    #[error("redactor: {0}")]
    Internal(String),
    /// The `[redact]` settings are invalid.
    #[error("redact settings: {0}")]
    Settings(String),
    /// A text carries a marker this session did not issue (or no longer
    /// remembers), so its original value cannot be restored.
    #[error("cannot restore {marker}: this session did not redact it (markers are per session)")]
    UnknownMarker { marker: String },
    /// Restoring markers would give bytes that are not UTF-8.
    #[error("restored text is not UTF-8 (a marker stood for binary data)")]
    NotUtf8,
    /// A read of a file that is secret by its path, refused by policy.
    #[error("{path} is a secret file (policy: redact.secret_files = \"deny\")")]
    SecretFile { path: String },
}

/// One secret found: which rule, where (byte range in the input).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: String,
    pub start: usize,
    pub end: usize,
}

/// Rule id of output withheld because the scanner failed.
pub const WITHHELD_RULE: &str = "withheld";

/// Compiled scanners kept for reuse, by settings and the BLAKE3 hash of the
/// extra known secrets.
type CachedEngine = (RedactSettings, [u8; 32], Arc<Shared>);
static ENGINE_CACHE: Mutex<Vec<CachedEngine>> = Mutex::new(Vec::new());
const MAX_CACHED_ENGINES: usize = 16;
/// Marker memories of recent sessions, oldest first.
static SESSION_VAULTS: Mutex<Vec<(String, Arc<Mutex<Vault>>)>> = Mutex::new(Vec::new());
const MAX_SESSION_VAULTS: usize = 1024;

fn process_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(random_key)
}

/// Most marker -> value pairs a session remembers for restoring.
const VAULT_MAX_ENTRIES: usize = 65_536;
/// Most bytes of values a session remembers for restoring.
const VAULT_MAX_BYTES: usize = 16 << 20;

#[derive(Debug, Default)]
struct Vault {
    values: HashMap<String, Vec<u8>>,
    bytes: usize,
}

#[derive(Debug)]
struct Shared {
    settings: RedactSettings,
    /// The compiled scanner, or why it could not be built (then every
    /// output is withheld).
    engine: Result<Engine, String>,
}

/// A configured scanner. Cheap to clone and share across sessions (the
/// compiled rules are behind an `Arc`); the marker key and the
/// marker -> value memory are per session ([`Redactor::for_session`],
/// [`Redactor::with_key`]).
#[derive(Debug, Clone)]
pub struct Redactor {
    shared: Arc<Shared>,
    key: [u8; 32],
    vault: Arc<Mutex<Vault>>,
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new(&RedactSettings::default())
    }
}

fn random_key() -> [u8; 32] {
    use std::io::Read;
    let mut key = [0u8; 32];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .is_ok();
    if !ok {
        // no urandom: still unpredictable enough to keep markers from being
        // a guessing oracle across daemons (time, pid, address entropy)
        let mut h = blake3::Hasher::new();
        h.update(&format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes());
        h.update(&(&key as *const _ as usize).to_le_bytes());
        key = *h.finalize().as_bytes();
    }
    key
}

/// Shannon entropy of `v` in bits per byte.
pub(crate) fn entropy(v: &[u8]) -> f32 {
    if v.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in v {
        counts[b as usize] += 1;
    }
    let n = v.len() as f32;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f32 / n;
            -p * p.log2()
        })
        .sum()
}

impl Redactor {
    /// A redactor with the built-in rules and `settings`, a fresh random
    /// marker key, and (if `settings.env_secrets`) the daemon's secret
    /// environment values as known secrets. The compiled rules are cached
    /// per settings for the life of the process (the environment is read
    /// when they are first built). Invalid settings do not fail
    /// open: the redactor then withholds every output (see
    /// [`Redactor::try_new`] to get the error).
    pub fn new(settings: &RedactSettings) -> Redactor {
        Redactor::try_new(settings).unwrap_or_else(|e| Redactor {
            shared: Arc::new(Shared {
                settings: settings.clone(),
                engine: Err(e.to_string()),
            }),
            key: random_key(),
            vault: Arc::default(),
        })
    }

    /// Like [`Redactor::new`], but returns [`RedactError::Settings`] for
    /// invalid settings (a bad CIDR in `pii.private_ips`, a window size out
    /// of range).
    pub fn try_new(settings: &RedactSettings) -> Result<Redactor, RedactError> {
        Redactor::build(settings, &[])
    }

    /// The redactor of session `session_id` under `settings`: the compiled
    /// rules are shared by every caller with equal settings (built once per
    /// process), the marker key is derived from a per-process random key and
    /// the session id (so markers are stable across all of the session's
    /// calls), and the marker memory is the session's (so a write can
    /// restore markers issued by an earlier read). The daemon keeps the
    /// memory of the 1024 most recently created sessions; markers of older
    /// sessions, or from before a daemon restart, cannot be restored
    /// ([`RedactError::UnknownMarker`]). Invalid settings withhold every
    /// output, as with [`Redactor::new`].
    pub fn for_session_id(settings: &RedactSettings, session_id: &str) -> Redactor {
        let base = Redactor::new(settings);
        let key = blake3::keyed_hash(process_key(), session_id.as_bytes());
        let vault = {
            let mut sessions = SESSION_VAULTS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(v) = sessions.iter().find(|(id, _)| id == session_id) {
                v.1.clone()
            } else {
                if sessions.len() >= MAX_SESSION_VAULTS {
                    sessions.remove(0);
                }
                let v: Arc<Mutex<Vault>> = Arc::default();
                sessions.push((session_id.to_string(), v.clone()));
                v
            }
        };
        Redactor {
            shared: base.shared,
            key: *key.as_bytes(),
            vault,
        }
    }

    fn build(settings: &RedactSettings, extra: &[Vec<u8>]) -> Result<Redactor, RedactError> {
        let extra_id = {
            let mut h = blake3::Hasher::new();
            for v in extra {
                h.update(&(v.len() as u64).to_le_bytes());
                h.update(v);
            }
            *h.finalize().as_bytes()
        };
        {
            let cache = ENGINE_CACHE.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, _, shared)) = cache
                .iter()
                .find(|(s, x, _)| s == settings && *x == extra_id)
            {
                return Ok(Redactor {
                    shared: shared.clone(),
                    key: random_key(),
                    vault: Arc::default(),
                });
            }
        }
        let r = Redactor::build_uncached(settings, extra)?;
        let mut cache = ENGINE_CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED_ENGINES {
            cache.remove(0);
        }
        cache.push((settings.clone(), extra_id, r.shared.clone()));
        Ok(r)
    }

    /// The same redactor (key, marker memory) with the secret values of
    /// `vars` added as known secrets, chosen as for the daemon's own
    /// environment (secret-looking names, `secret_env` names, URL
    /// passwords): for the `env` a policy gives an MCP server. Unchanged
    /// when `vars` holds no secret.
    pub fn with_env_secrets<'a>(&self, vars: impl Iterator<Item = (&'a str, &'a str)>) -> Redactor {
        let values = known::from_vars(
            vars.map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())),
            &self.shared.settings.secret_env,
        );
        if values.is_empty() {
            return self.clone();
        }
        self.with_known_secrets(values)
            .unwrap_or_else(|_| self.clone())
    }

    fn build_uncached(
        settings: &RedactSettings,
        extra: &[Vec<u8>],
    ) -> Result<Redactor, RedactError> {
        if !(256..=65536).contains(&settings.stream_window_bytes) {
            return Err(RedactError::Settings(format!(
                "stream_window_bytes = {} is outside 256..=65536",
                settings.stream_window_bytes
            )));
        }
        let mut values: Vec<Vec<u8>> = Vec::new();
        if settings.env_secrets {
            values.extend(known::from_env(&settings.secret_env));
        }
        values.extend(
            extra
                .iter()
                .filter(|v| v.len() >= known::MIN_KNOWN)
                .cloned(),
        );
        values.sort();
        values.dedup();
        let engine = Engine::build(&settings.disable_rules, &values, &settings.pii)?;
        Ok(Redactor {
            shared: Arc::new(Shared {
                settings: settings.clone(),
                engine: Ok(engine),
            }),
            key: random_key(),
            vault: Arc::default(),
        })
    }

    /// The same rules with `values` added as known secrets (matched exactly
    /// and base64 / percent / JSON encoded; values shorter than 8 bytes are
    /// ignored). Keeps this redactor's key and marker memory.
    pub fn with_known_secrets<I, V>(&self, values: I) -> Result<Redactor, RedactError>
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        let extra: Vec<Vec<u8>> = values.into_iter().map(|v| v.as_ref().to_vec()).collect();
        let mut r = Redactor::build(&self.shared.settings, &extra)?;
        r.key = self.key;
        r.vault = self.vault.clone();
        Ok(r)
    }

    /// A redactor for one session: the same rules, a fresh random marker
    /// key and an empty marker memory.
    pub fn for_session(&self) -> Redactor {
        self.with_key(random_key())
    }

    /// The same rules with marker key `key` and an empty marker memory
    /// (markers are stable for a given key).
    pub fn with_key(&self, key: [u8; 32]) -> Redactor {
        Redactor {
            shared: self.shared.clone(),
            key,
            vault: Arc::default(),
        }
    }

    /// The settings this redactor was built from.
    pub fn settings(&self) -> &RedactSettings {
        &self.shared.settings
    }

    /// The marker for `secret` found by `rule`: `[REDACTED:<rule>:<12 hex>]`.
    pub fn marker(&self, rule: &str, secret: &[u8]) -> String {
        let h = blake3::keyed_hash(&self.key, secret);
        format!("[REDACTED:{rule}:{}]", &h.to_hex()[..12])
    }

    /// Finds secrets in `text` without changing it: findings carry rule and
    /// byte range, never the value. Errors: [`RedactError::Internal`] when
    /// the scanner cannot run (the caller must withhold the text).
    pub fn find(&self, text: &[u8]) -> Result<Vec<Finding>, RedactError> {
        Ok(self
            .scan(text)?
            .into_iter()
            .map(|h| Finding {
                rule: h.rule.to_string(),
                start: h.start,
                end: h.end,
            })
            .collect())
    }

    pub(crate) fn scan(&self, text: &[u8]) -> Result<Vec<engine::Hit>, RedactError> {
        let engine = self
            .shared
            .engine
            .as_ref()
            .map_err(|e| RedactError::Internal(e.clone()))?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.scan(text)))
            .map_err(|_| RedactError::Internal("scanner panicked".into()))
    }

    /// Returns `text` with secrets replaced by markers, and the findings
    /// (byte ranges in `text`). On scanner failure the whole text is
    /// withheld: it is replaced by one `[REDACTED:withheld:...]` marker.
    pub fn redact(&self, text: &str) -> (String, Vec<Finding>) {
        match self.try_redact(text) {
            Ok(r) => r,
            Err(_) => self.withhold(text.as_bytes()),
        }
    }

    /// Like [`Redactor::redact`], but returns the scanner's error instead
    /// of withholding.
    pub fn try_redact(&self, text: &str) -> Result<(String, Vec<Finding>), RedactError> {
        let mut hits = self.scan(text.as_bytes())?;
        for h in &mut hits {
            while !text.is_char_boundary(h.start) {
                h.start -= 1;
            }
            while !text.is_char_boundary(h.end) {
                h.end += 1;
            }
        }
        let (out, findings) = self.apply(text.as_bytes(), &hits);
        // every byte outside a finding is copied from `text` and every
        // finding covers whole characters, so `out` is UTF-8
        let out =
            String::from_utf8(out).map_err(|_| RedactError::Internal("non-UTF-8 result".into()))?;
        Ok((out, findings))
    }

    /// [`Redactor::redact`] for bytes that need not be UTF-8 (binary tool
    /// output); ranges are byte ranges.
    pub fn redact_bytes(&self, data: &[u8]) -> (Vec<u8>, Vec<Finding>) {
        match self.scan(data) {
            Ok(hits) => self.apply(data, &hits),
            Err(_) => {
                let (s, f) = self.withhold(data);
                (s.into_bytes(), f)
            }
        }
    }

    fn withhold(&self, data: &[u8]) -> (String, Vec<Finding>) {
        let m = self.marker(WITHHELD_RULE, data);
        (
            m,
            vec![Finding {
                rule: WITHHELD_RULE.into(),
                start: 0,
                end: data.len(),
            }],
        )
    }

    /// Replaces `hits` (disjoint, sorted) in `data` by markers and
    /// remembers each marker's value for [`Redactor::restore_markers`].
    pub(crate) fn apply(&self, data: &[u8], hits: &[engine::Hit]) -> (Vec<u8>, Vec<Finding>) {
        let mut out = Vec::with_capacity(data.len());
        let mut findings = Vec::with_capacity(hits.len());
        let mut at = 0;
        for h in hits {
            if h.start < at || h.end > data.len() || h.start >= h.end {
                continue;
            }
            out.extend_from_slice(&data[at..h.start]);
            let secret = &data[h.start..h.end];
            let m = self.marker(h.rule, secret);
            self.remember(&m, secret);
            out.extend_from_slice(m.as_bytes());
            findings.push(Finding {
                rule: h.rule.to_string(),
                start: h.start,
                end: h.end,
            });
            at = h.end;
        }
        out.extend_from_slice(&data[at..]);
        (out, findings)
    }

    fn remember(&self, marker: &str, value: &[u8]) {
        let Ok(mut v) = self.vault.lock() else { return };
        if v.values.contains_key(marker) {
            return;
        }
        if v.values.len() >= VAULT_MAX_ENTRIES || v.bytes + value.len() > VAULT_MAX_BYTES {
            return; // restoring this marker will fail with UnknownMarker
        }
        v.bytes += value.len();
        v.values.insert(marker.to_string(), value.to_vec());
    }

    /// True when `text` contains something shaped like a marker.
    pub fn contains_markers(&self, text: &str) -> bool {
        marker_regex().is_match(text)
    }

    /// Puts back the original values of this session's markers in `text`
    /// (a file write or patch the model produced from redacted output), so
    /// a marker is never written over a secret. Errors:
    /// [`RedactError::UnknownMarker`] for a marker this session did not
    /// issue (the write must be refused), [`RedactError::NotUtf8`].
    pub fn restore_markers(&self, text: &str) -> Result<String, RedactError> {
        let out = self.restore_markers_bytes(text.as_bytes())?;
        String::from_utf8(out).map_err(|_| RedactError::NotUtf8)
    }

    /// [`Redactor::restore_markers`] for bytes.
    pub fn restore_markers_bytes(&self, data: &[u8]) -> Result<Vec<u8>, RedactError> {
        let re = marker_regex_bytes();
        let vault = self
            .vault
            .lock()
            .map_err(|_| RedactError::Internal("marker memory poisoned".into()))?;
        let mut out = Vec::with_capacity(data.len());
        let mut at = 0;
        for m in re.find_iter(data) {
            let marker = String::from_utf8_lossy(m.as_bytes()).into_owned();
            let value = vault
                .values
                .get(&marker)
                .ok_or(RedactError::UnknownMarker { marker })?;
            out.extend_from_slice(&data[at..m.start()]);
            out.extend_from_slice(value);
            at = m.end();
        }
        out.extend_from_slice(&data[at..]);
        Ok(out)
    }

    /// Whether `path` names a file that is secret by its path, and what the
    /// policy does with reads of it (`None`: an ordinary file).
    pub fn secret_file(&self, path: &Path) -> Option<SecretFileAction> {
        if is_secret_path(path, &self.shared.settings.secret_file_patterns) {
            Some(self.shared.settings.secret_files)
        } else {
            None
        }
    }

    /// Redacts the content of the file at `path` (read by the daemon for a
    /// client): a secret file is replaced whole by one marker, refused, or
    /// scanned, as the policy says; other files are scanned. Errors:
    /// [`RedactError::SecretFile`] when the policy denies it.
    pub fn redact_file(
        &self,
        path: &Path,
        content: &[u8],
    ) -> Result<(Vec<u8>, Vec<Finding>), RedactError> {
        match self.secret_file(path) {
            Some(SecretFileAction::Deny) => Err(RedactError::SecretFile {
                path: path.display().to_string(),
            }),
            Some(SecretFileAction::Redact) if !content.is_empty() => {
                let h = engine::Hit {
                    ctx_start: 0,
                    start: 0,
                    end: content.len(),
                    rule: "secret-file",
                    prio: 5,
                    open_block: false,
                };
                Ok(self.apply(content, &[h]))
            }
            _ => Ok(self.redact_bytes(content)),
        }
    }
}

/// The built-in rules' regex patterns (byte regexes, Unicode off), for
/// benchmarks that compare the keyword-prefiltered scanner with a plain
/// regex scan.
#[doc(hidden)]
pub fn rule_patterns() -> Vec<&'static str> {
    rules::RULES.iter().map(|d| d.pattern).collect()
}

/// Every keyword of the prefilter (lower case), for benchmarks.
#[doc(hidden)]
pub fn prefilter_keywords() -> Vec<String> {
    let mut k: Vec<String> = rules::RULES
        .iter()
        .flat_map(|d| d.keywords.iter().map(|s| s.to_string()))
        .collect();
    k.extend(keyed::TRIGGERS.iter().map(|s| s.to_string()));
    k.extend([
        "-----begin ".to_string(),
        "kind:".to_string(),
        engine::MARKER_PREFIX.to_ascii_lowercase(),
    ]);
    k.sort();
    k.dedup();
    k
}

fn marker_regex() -> &'static regex::Regex {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"\[REDACTED:[a-z0-9-]{1,64}:[0-9a-f]{12}\]").expect("marker regex")
    })
}

fn marker_regex_bytes() -> &'static regex::bytes::Regex {
    static RE: std::sync::OnceLock<regex::bytes::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::bytes::Regex::new(r"\[REDACTED:[a-z0-9-]{1,64}:[0-9a-f]{12}\]")
            .expect("marker regex")
    })
}

/// File names that are secrets by their name (`*` matches any run).
const SECRET_FILE_NAMES: &[&str] = &[
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    ".htpasswd",
    "credentials.json",
    "application_default_credentials.json",
    "service-account*.json",
    "*.tfvars",
    ".dockercfg",
];

/// Paths (suffixes) that are secret files: cloud credential files.
const SECRET_FILE_PATHS: &[&str] = &[
    ".aws/credentials",
    ".aws/config",
    ".docker/config.json",
    ".kube/config",
    ".azure/accessTokens.json",
    ".azure/msal_token_cache.json",
    ".config/gcloud/credentials.db",
    ".config/gcloud/access_tokens.db",
    ".config/gh/hosts.yml",
    ".terraform.d/credentials.tfrc.json",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".m2/settings.xml",
    ".ssh/config",
];

/// Templates that are safe to read (`.env.example`).
const TEMPLATE_SUFFIXES: &[&str] = &[".example", ".sample", ".template", ".dist", ".tmpl", ".pub"];

fn glob_match(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            let Some(at) = rest.find(p) else { return false };
            rest = &rest[at + p.len()..];
        }
    }
    true
}

/// True when `path` is a secret file by its name or location.
pub fn is_secret_path(path: &Path, extra_patterns: &[String]) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if TEMPLATE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return false;
    }
    if SECRET_FILE_NAMES.iter().any(|p| glob_match(p, name))
        || extra_patterns.iter().any(|p| glob_match(p, name))
    {
        return true;
    }
    let full = path.to_string_lossy();
    SECRET_FILE_PATHS
        .iter()
        .any(|p| full == *p || full.ends_with(&format!("/{p}")))
}

#[cfg(test)]
mod tests;
