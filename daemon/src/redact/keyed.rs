//! `name = value` secrets: `.env` lines, config files (`key: value`,
//! `"key": "value"`, `<key>value</key>`, `key="value"`), shell exports,
//! code assignments (`:=`, `=>`, `.=`, `?=`), call arguments
//! (`setProperty("KEY", "value")`) and URL query parameters, where the name
//! says the value is a secret.
//!
//! The name is split into words (snake, kebab, dotted and camel case); its
//! last word decides: `password`, `secret`, `token`, `credentials`,
//! `api_key`... make a *strong* name, whose value is a secret whatever its
//! entropy; `key`, `auth`, `signature`, a vendor's name... make a *weak*
//! one, whose value must look random. Names that end in `id`, `name`,
//! `file`, `url`, `length`... describe a secret rather than hold one.
//! Placeholders (`${VAR}`, `$VAR`, `<...>`, `changeme`, `xxxx`) and code
//! (`obj.field`, `call(x)`) are never secrets.

use super::entropy;

/// Words (ASCII, lower case) whose occurrence triggers the keyed scanner.
pub(crate) const TRIGGERS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "secret",
    "token",
    "key",
    "credential",
    "creds",
    "auth",
    "dsn",
    "sig",
    "salt",
    "cookie",
    "session",
    "private",
    "apikey",
    // vendors whose bare name is used as the key of their token
    "cloudflare",
    "meraki",
    "mailchimp",
    "artifactory",
    "jfrog",
    "discord",
    "telegram",
    "sumo",
    "facebook",
    "twitter",
    "heroku",
    "okta",
    "sonar",
    "snyk",
    "hubspot",
    "plaid",
    "kucoin",
    "sendbird",
    "sourcegraph",
    "messagebird",
    "sendbird",
    "asana",
    "plaid",
    "looker",
    "linkedin",
    "bitbucket",
    "alibaba",
    "adobe",
    "datadog",
    "dropbox",
    "mailgun",
    "mapbox",
    "twilio",
    "zendesk",
    "shopify",
];

/// Vendor names that make a weak key (gitleaks' semi-generic rules).
const VENDORS: &[&str] = &[
    "adafruit",
    "adobe",
    "airtable",
    "algolia",
    "alibaba",
    "asana",
    "atlassian",
    "jira",
    "confluence",
    "authress",
    "beamer",
    "bitbucket",
    "bittrex",
    "clickhouse",
    "cloudflare",
    "codecov",
    "coinbase",
    "confluent",
    "contentful",
    "datadog",
    "discord",
    "doppler",
    "dropbox",
    "droneci",
    "duffel",
    "dynatrace",
    "easypost",
    "etsy",
    "facebook",
    "fastly",
    "finicity",
    "finnhub",
    "flickr",
    "flutterwave",
    "frameio",
    "freshbooks",
    "gitter",
    "gocardless",
    "grafana",
    "harness",
    "heroku",
    "hubspot",
    "intercom",
    "jfrog",
    "artifactory",
    "xray",
    "kraken",
    "kucoin",
    "launchdarkly",
    "linear",
    "linkedin",
    "lob",
    "looker",
    "mailchimp",
    "mailchimpe",
    "mailgun",
    "mapbox",
    "mattermost",
    "maxmind",
    "meraki",
    "messagebird",
    "netlify",
    "relic",
    "newrelic",
    "nytimes",
    "okta",
    "plaid",
    "planetscale",
    "postman",
    "prefect",
    "pulumi",
    "rapidapi",
    "readme",
    "rubygems",
    "scalingo",
    "sendbird",
    "sendgrid",
    "sengrid",
    "sendinblue",
    "sentry",
    "settlemint",
    "shippo",
    "shopify",
    "sidekiq",
    "snyk",
    "sonar",
    "squarespace",
    "sumo",
    "sumologic",
    "telegram",
    "travis",
    "twilio",
    "twitch",
    "twitter",
    "typeform",
    "yandex",
    "zendesk",
    "cohere",
    "privateai",
    "perplexity",
    "github",
    "gitlab",
    "slack",
    "stripe",
    "openai",
    "anthropic",
    "huggingface",
    "npm",
    "pypi",
    "aws",
    "azure",
    "gcp",
    "google",
    "digitalocean",
    "vault",
    "databricks",
    "infracost",
    "notion",
    "octopus",
    "openshift",
    "pagerduty",
    "circleci",
    "vercel",
    "supabase",
    "sourcegraph",
    "messagebird",
];

/// Last words that name something about a secret, not the secret.
const NOT_SECRET_LAST: &[&str] = &[
    "id",
    "ids",
    "name",
    "names",
    "file",
    "files",
    "filename",
    "path",
    "paths",
    "url",
    "uri",
    "urls",
    "type",
    "types",
    "size",
    "length",
    "len",
    "count",
    "counts",
    "mode",
    "format",
    "prefix",
    "suffix",
    "header",
    "headers",
    "env",
    "var",
    "vars",
    "variable",
    "field",
    "fields",
    "version",
    "kind",
    "ttl",
    "expiry",
    "expires",
    "expiration",
    "expire",
    "timeout",
    "enabled",
    "enable",
    "disabled",
    "required",
    "bytes",
    "bits",
    "dir",
    "directory",
    "location",
    "endpoint",
    "host",
    "hostname",
    "port",
    "user",
    "username",
    "login",
    "scope",
    "scopes",
    "hash",
    "hashes",
    "algorithm",
    "alg",
    "policy",
    "manager",
    "store",
    "provider",
    "source",
    "ref",
    "reference",
    "label",
    "description",
    "desc",
    "hint",
    "regex",
    "pattern",
    "chars",
    "usage",
    "status",
    "limit",
    "max",
    "min",
    "index",
    "idx",
    "list",
    "map",
    "table",
    "column",
    "tokens",
    "keys",
    "secrets",
    "passwords",
    "results",
    "result",
    "request",
    "response",
    "error",
    "errors",
    "message",
    "msg",
    "text",
    "prompt",
    "policies",
    "rotation",
    "strength",
    "checker",
    "validator",
    "validation",
    "generator",
    "encoder",
    "decoder",
    "parser",
    "helper",
    "util",
    "utils",
    "service",
    "client",
    "handler",
    "callback",
    "event",
    "events",
    "exists",
    "present",
    "set",
    "config",
    "settings",
    "options",
    "option",
    "flag",
    "flags",
    "arn",
    "region",
    "account",
    "owner",
    "issuer",
    "audience",
    "subject",
    "holder",
    "placeholder",
    "example",
    "template",
    "test",
    "tests",
    "spec",
    "schema",
    "ident",
    "identifier",
    "uid",
    "guid",
    "uuid",
    "num",
    "number",
    "date",
    "time",
    "timestamp",
    "at",
    "on",
    "by",
    "from",
    "to",
    "of",
    "in",
    "mgr",
    "dict",
    "hashed",
    "digest",
    "fingerprint",
    "pub",
    "public",
    "kid",
    "line",
    "lines",
    "column",
    "reset",
    "forgot",
    "confirm",
    "confirmation",
    "label",
    "input",
    "button",
    "form",
    "box",
    "view",
    "page",
    "screen",
    "dialog",
    "modal",
    "component",
    "class",
    "style",
    "css",
    "icon",
    "image",
    "img",
    "visible",
    "hidden",
    "changed",
    "change",
    "updated",
    "update",
    "created",
    "create",
    "delete",
    "deleted",
    "get",
    "fetch",
    "load",
    "save",
    "stored",
    "storage",
    "cache",
    "cached",
    "verify",
    "verified",
    "valid",
    "invalid",
    "match",
    "matches",
    "policy",
    "level",
    "rule",
    "rules",
    "id_token_hint",
];

/// Last words that make a strong key.
const STRONG_LAST: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "passcode",
    "pw",
    "secret",
    "token",
    "credential",
    "credentials",
    "creds",
    "cred",
    "dsn",
    "apikey",
    "pat",
    "privatekey",
    "secretkey",
    "accesskey",
    "authtoken",
    "accesstoken",
    "refreshtoken",
    "bearertoken",
    "sessiontoken",
    "clientsecret",
    "secretaccesskey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "licensekey",
    "apitoken",
    "auths",
];

/// Words before `key` that make it a strong key (`api_key`, `secret_key`).
const STRONG_BEFORE_KEY: &[&str] = &[
    "api",
    "secret",
    "private",
    "access",
    "signing",
    "encryption",
    "master",
    "client",
    "account",
    "license",
    "shared",
    "app",
    "consumer",
    "auth",
    "admin",
    "deploy",
    "webhook",
    "session",
    "storage",
    "subscription",
    "sas",
    "root",
    "bot",
    "live",
    "prod",
    "service",
    "encrypt",
    "hmac",
    "jwt",
    "cookie",
    "crypt",
    "cipher",
    "aes",
    "decryption",
    "sk",
    "server",
    "integration",
];

/// Last words that make a weak key.
const WEAK_LAST: &[&str] = &[
    "key",
    "auth",
    "sig",
    "signature",
    "salt",
    "cookie",
    "session",
    "sas",
    "hmac",
    "otp",
    "pin",
];

/// Words anywhere in the name that mean "not a secret".
const NEVER: &[&str] = &["public", "publishable", "pubkey", "csrf", "xsrf"];

/// How secret a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyClass {
    /// Not a secret's name.
    None,
    /// The value is a secret if it looks random.
    Weak,
    /// The value is a secret unless it is a placeholder.
    Strong,
}

/// Splits a name into lower-case words: `AWS_SECRET_ACCESS_KEY`,
/// `awsSecretAccessKey`, `aws-secret.access_key` all give
/// `[aws, secret, access, key]`. Digit runs are separate words.
pub(crate) fn words(name: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let n = name.len();
    for i in 0..n {
        let c = name[i];
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if let Some(&p) = cur.as_bytes().last().map(|_| &name[i - 1]) {
            let boundary = (p.is_ascii_lowercase() && c.is_ascii_uppercase())
                || (p.is_ascii_digit() != c.is_ascii_digit())
                || (p.is_ascii_uppercase()
                    && c.is_ascii_uppercase()
                    && i + 1 < n
                    && name[i + 1].is_ascii_lowercase());
            if boundary {
                out.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c.to_ascii_lowercase() as char);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Classifies a name (`DB_PASSWORD`, `asanaToken`, `X-Api-Key`).
pub(crate) fn classify_key(name: &[u8]) -> KeyClass {
    // `PWD=/path` in `env` output is the shell's working directory.
    if super::known::is_shell_path_var(name) {
        return KeyClass::None;
    }
    let mut ws = words(name);
    while ws
        .last()
        .is_some_and(|w| w.bytes().all(|b| b.is_ascii_digit()))
    {
        ws.pop();
    }
    let Some(last) = ws.last().map(String::as_str) else {
        return KeyClass::None;
    };
    if ws.iter().any(|w| NEVER.contains(&w.as_str())) {
        return KeyClass::None;
    }
    let prev = if ws.len() >= 2 {
        ws[ws.len() - 2].as_str()
    } else {
        ""
    };
    let joined: String = ws.concat();
    let has_vendor = ws.iter().any(|w| VENDORS.contains(&w.as_str()))
        || VENDORS.iter().any(|v| v.len() >= 6 && joined.contains(v));
    if NOT_SECRET_LAST.contains(&last) {
        // A vendor's client id, access id or login is a credential half.
        if has_vendor && matches!(last, "id" | "client" | "login") && prev != "key" {
            return KeyClass::Weak;
        }
        return KeyClass::None;
    }
    if STRONG_LAST.contains(&last) {
        return KeyClass::Strong;
    }
    if last == "key" && STRONG_BEFORE_KEY.contains(&prev) {
        return KeyClass::Strong;
    }
    // Concatenated lower-case names: `dbpassword`, `adafruittoken`, `clientsecret`.
    for suffix in [
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "secretkey",
        "privatekey",
        "accesskey",
    ] {
        if last.len() > suffix.len() && last.ends_with(suffix) {
            return KeyClass::Strong;
        }
    }
    if WEAK_LAST.contains(&last) || VENDORS.contains(&last) {
        return KeyClass::Weak;
    }
    if last.len() > 3 && last.ends_with("key") && ws.len() == 1 {
        // `mykey`, `hubspotkey`; not `monkey`, `hotkey` (those need a random value anyway)
        return KeyClass::Weak;
    }
    let strong_word = ws.iter().any(|w| {
        matches!(
            w.as_str(),
            "password" | "passwd" | "secret" | "token" | "credentials" | "apikey"
        )
    });
    if strong_word || has_vendor && ws.len() <= 3 {
        return KeyClass::Weak;
    }
    KeyClass::None
}

/// Whole values that are placeholders, not secrets (lower case).
const PLACEHOLDER_WORDS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "secret",
    "token",
    "test",
    "testing",
    "tests",
    "changeme",
    "change_me",
    "changeit",
    "foo",
    "bar",
    "baz",
    "foobar",
    "none",
    "null",
    "nil",
    "undefined",
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "empty",
    "default",
    "string",
    "str",
    "value",
    "xxx",
    "yyy",
    "zzz",
    "abc",
    "abc123",
    "123456",
    "12345678",
    "123456789",
    "qwerty",
    "admin",
    "root",
    "user",
    "username",
    "dummy",
    "sample",
    "mypassword",
    "mysecret",
    "mytoken",
    "required",
    "optional",
    "hidden",
    "masked",
    "redacted",
    "n/a",
    "na",
    "tbd",
    "todo",
    "secret123",
    "password123",
    "example",
    "apikey",
    "api_key",
    "your_api_key",
    "bearer",
    "basic",
    "token123",
    "pass123",
    "letmein",
    "notasecret",
    "not-a-secret",
    "secretpassword",
    "bool",
    "boolean",
    "int",
    "integer",
    "object",
    "any",
    "unknown",
    "int32",
    "int64",
    "number",
    "text",
    "env",
    "auto",
    "random",
    "generated",
    "sensitive",
    "disabled",
    "enabled",
    "invalid",
    "valid",
    "fake",
    "mock",
    "demo",
    "local",
    "localhost",
    "prompt",
    "ask",
    "keyring",
    "vault",
    "stdin",
    "file",
    "required",
    "nothing",
    "private",
    "public",
    "secure",
    "insecure",
    "unset",
    "self",
    "this",
    "pass:",
    "key",
    "auth",
    "oauth",
    "oauth2",
    "jwt",
    "hmac",
    "sha256",
    "md5",
    "plain",
    "plaintext",
    "cleartext",
    "session",
    "cookie",
    "none;",
    "aws",
    "github",
    "gitlab",
];

/// Substrings that mark a value as a placeholder (lower case).
const PLACEHOLDER_PARTS: &[&str] = &[
    "<",
    ">",
    "your_",
    "your-",
    "yourpassword",
    "yoursecret",
    "yourtoken",
    "yourkey",
    "changeme",
    "change_me",
    "change-me",
    "replace_me",
    "replaceme",
    "replace-me",
    "replace_with",
    "put_your",
    "_here",
    "-here",
    "example",
    "dummy",
    "placeholder",
    "redacted",
    "insert_",
    "enter_",
    "enter-your",
    "<your",
    "todo",
    "fixme",
    "notreal",
    "not_real",
    "not-real",
    "fake_",
    "fake-",
    "sample_",
    "[redacted",
];

/// Substrings that mark any value as a template (lower case).
const TEMPLATE_PARTS: &[&str] = &[
    "xxxx", "****", "...", "\u{2026}", "####", "••", "${", "$(", "{{", "}}",
];

/// `v` trimmed, and its lower-case form; `None` when not UTF-8.
fn trimmed(v: &[u8]) -> Option<(&str, String)> {
    let t = std::str::from_utf8(v).ok()?.trim();
    Some((t, t.to_ascii_lowercase()))
}

/// True when `v` is a template rather than a value: `xxxx`, `****`, `...`,
/// `${VAR}`, `{{ var }}`, `%VAR%`, `<...>`, `$VAR`, `ALL_CAPS_NAME`, or one
/// character repeated over half of it. Lighter than [`is_placeholder`]:
/// used for vendor formats, whose prefix already says "secret".
pub(crate) fn is_template(v: &[u8]) -> bool {
    let Some((t, lower)) = trimmed(v) else {
        return false;
    };
    if t.is_empty() {
        return true;
    }
    if TEMPLATE_PARTS.iter().any(|p| lower.contains(p)) {
        return true;
    }
    let b = t.as_bytes();
    if matches!(b[0], b'$' | b'<' | b'{') || (b[0] == b'%' && t.ends_with('%') && t.len() > 1) {
        return true;
    }
    // an environment variable's name, not its value: `ACCESS_TOKEN`
    if b.len() >= 5 && b.contains(&b'_') && b.iter().all(|c| c.is_ascii_uppercase() || *c == b'_') {
        return true;
    }
    let mut longest = 0;
    let mut run = 0;
    let mut prev = 0u8;
    for &c in b {
        run = if c == prev { run + 1 } else { 1 };
        prev = c;
        longest = longest.max(run);
    }
    b.len() >= 3 && longest * 2 >= b.len()
}

/// Splits `user:password` (from `curl -u`): the range of the password, or
/// of the user when the password is empty (`-u token:`). `None` when the
/// secret part is a placeholder (`user:pass`, `$USER:$PASS`, `[PASSWORD]`).
pub(crate) fn user_pass(v: &[u8]) -> Option<(usize, usize)> {
    // `"user:pass"` quoted as a whole
    if v.len() >= 3 && matches!(v[0], b'"' | b'\'') && v[v.len() - 1] == v[0] {
        let inner = &v[1..v.len() - 1];
        if !inner.contains(&v[0]) {
            return user_pass(inner).map(|(s, e)| (s + 1, e + 1));
        }
    }
    let colon = match v.first() {
        Some(&q @ (b'"' | b'\'')) => 1 + v[1..].iter().position(|&b| b == q)? + 1,
        _ => v.iter().position(|&b| b == b':')?,
    };
    if v.get(colon) != Some(&b':') {
        return None;
    }
    let unquote = |s: usize, e: usize| {
        if e >= s + 2 && matches!(v[s], b'"' | b'\'') && v[e - 1] == v[s] {
            (s + 1, e - 1)
        } else {
            (s, e)
        }
    };
    let (us, ue) = unquote(0, colon);
    let (ps, pe) = unquote(colon + 1, v.len());
    let (us, ue) = unbrace(v, us, ue);
    let (ps, pe) = unbrace(v, ps, pe);
    let (user, pass) = (&v[us..ue], &v[ps..pe]);
    if is_placeholder(user) && !user.is_empty() && (pass.is_empty() || is_placeholder(pass)) {
        return None;
    }
    if pass.is_empty() {
        if user.len() >= 8 && user.iter().any(u8::is_ascii_digit) && !is_placeholder(user) {
            return Some((us, ue));
        }
        return None;
    }
    if is_placeholder(pass) || pass.len() < 4 || pass.iter().all(u8::is_ascii_digit) || pass == user
    {
        return None;
    }
    Some((ps, pe))
}

/// `{VALUE}` around a random value (IBM's `--user "{apikey}":"{value}"`
/// examples filled in): the range inside the braces; otherwise unchanged
/// (`{user}` and `{{ var }}` stay templates).
fn unbrace(v: &[u8], s: usize, e: usize) -> (usize, usize) {
    if e >= s + 2 && v[s] == b'{' && v[e - 1] == b'}' && looks_random(&v[s + 1..e - 1], 3.0) {
        (s + 1, e - 1)
    } else {
        (s, e)
    }
}

/// True for a value made of words (`SalesResults-1.2`, `MySecretManagerKey`,
/// `jetbrains.mps.v8_elimination`): most of its letters are in runs of
/// three or more that contain a vowel, as in names, not generated keys.
pub(crate) fn is_wordy(v: &[u8]) -> bool {
    let letters = v.iter().filter(|b| b.is_ascii_alphabetic()).count();
    if letters == 0 || letters * 10 < v.len() * 6 {
        return false;
    }
    let mut wordish = 0;
    let mut i = 0;
    while i < v.len() {
        if !v[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        // a word: optional capital, then lower case; or an all-caps run
        let s = i;
        i += 1;
        if v[s].is_ascii_uppercase() {
            if i < v.len() && v[i].is_ascii_lowercase() {
                while i < v.len() && v[i].is_ascii_lowercase() {
                    i += 1;
                }
            } else {
                while i < v.len()
                    && v[i].is_ascii_uppercase()
                    && !(i + 1 < v.len() && v[i + 1].is_ascii_lowercase())
                {
                    i += 1;
                }
            }
        } else {
            while i < v.len() && v[i].is_ascii_lowercase() {
                i += 1;
            }
        }
        let w = &v[s..i];
        let vowels = w
            .iter()
            .filter(|c| {
                matches!(
                    c.to_ascii_lowercase(),
                    b'a' | b'e' | b'i' | b'o' | b'u' | b'y'
                )
            })
            .count();
        if w.len() >= 3 && vowels * 5 >= w.len() && vowels * 5 <= w.len() * 3 {
            wordish += w.len();
        }
    }
    wordish * 10 >= letters * 7
}

/// True when `v` is a placeholder or template, not a secret value.
pub(crate) fn is_placeholder(v: &[u8]) -> bool {
    let Some((t, lower)) = trimmed(v) else {
        return false;
    };
    if t.is_empty() {
        return true;
    }
    if PLACEHOLDER_WORDS.contains(&lower.as_str()) {
        return true;
    }
    let first = t.as_bytes()[0];
    if matches!(first, b'[' | b'(' | b'!' | b'*' | b'&' | b'@' | b'#') {
        return true;
    }
    if PLACEHOLDER_PARTS.iter().any(|p| lower.contains(p)) {
        return true;
    }
    is_template(v)
}

/// True for an unquoted value that reads as code, not data:
/// `obj.field.name`, `call(arg)`, `Type::new`, `a->b`.
pub(crate) fn is_code(v: &[u8]) -> bool {
    if v.iter().any(|&b| matches!(b, b'(' | b')')) {
        return true;
    }
    let s = match std::str::from_utf8(v) {
        Ok(s) => s,
        Err(_) => return false,
    };
    if s.contains("::") || s.contains("->") {
        return true;
    }
    if s.contains('.') {
        let segs: Vec<&str> = s.split('.').collect();
        if segs.len() >= 2 && segs.iter().all(|g| is_identifier_word(g)) {
            return true;
        }
    }
    false
}

/// A camel/snake identifier made of words with at most trailing digits
/// (`key_length`, `XSalsa20`, `kVK_Return`, `u16`).
fn is_identifier_word(g: &str) -> bool {
    let b = g.as_bytes();
    if b.is_empty() || !(b[0].is_ascii_alphabetic() || b[0] == b'_') {
        return false;
    }
    let body_end = b
        .iter()
        .rposition(|c| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let body = &b[..body_end];
    // digits only at the end; letters in word runs: an upper-case letter may
    // start a word, and lower-case letters / underscores continue it
    if body.iter().any(|c| c.is_ascii_digit()) {
        return false;
    }
    let mut upper_run = 0;
    for &c in body {
        if c.is_ascii_uppercase() {
            upper_run += 1;
        } else {
            upper_run = 0;
        }
    }
    let _ = upper_run;
    // random tokens mix case inside words often: count case flips
    let mut flips = 0;
    for w in body.windows(2) {
        if w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase() {
            flips += 1;
        }
    }
    flips * 4 <= body.len()
}

/// True when a value under a weak name looks like generated key material.
pub(crate) fn looks_random(v: &[u8], min_entropy: f32) -> bool {
    if v.len() < 8 || v.len() > 1024 {
        return false;
    }
    if v.iter().any(|b| b.is_ascii_whitespace()) {
        return false;
    }
    let digits = v.iter().filter(|b| b.is_ascii_digit()).count();
    let lower = v.iter().filter(|b| b.is_ascii_lowercase()).count();
    let upper = v.iter().filter(|b| b.is_ascii_uppercase()).count();
    let mixed = (digits > 0 && (lower + upper) > 0) || (lower > 0 && upper > 0 && v.len() >= 16);
    if !mixed {
        // all digits (client ids) may still be ids of a vendor
        if digits != v.len() || v.len() < 12 {
            return false;
        }
    }
    entropy(v) >= min_entropy
}

/// A `name = value` finding: byte ranges of the value and of the whole
/// assignment (for stream cut points), and the rule id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedHit {
    pub ctx_start: usize,
    pub start: usize,
    pub end: usize,
    pub rule: &'static str,
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn is_quote(b: u8) -> bool {
    matches!(b, b'"' | b'\'' | b'`')
}

/// The name around a trigger hit at `pos`: `(start, end)`.
pub(crate) fn key_span(text: &[u8], pos: usize) -> (usize, usize) {
    let mut s = pos;
    while s > 0 && pos - s < 96 && is_key_byte(text[s - 1]) {
        s -= 1;
    }
    let mut e = pos;
    while e < text.len() && e - pos < 96 && is_key_byte(text[e]) {
        e += 1;
    }
    // a name does not start or end with '-' or '.'
    while s < e && matches!(text[s], b'-' | b'.') {
        s += 1;
    }
    while e > s && matches!(text[e - 1], b'-' | b'.') {
        e -= 1;
    }
    (s, e)
}

/// Cheap test run before the name is classified: after the name, an
/// optional closing quote and blanks, or a type word, comes an operator
/// character (`=`, `:`, `>`, `,`, `|`, `.=`, `?=`, `+=`).
fn operator_follows(text: &[u8], ke: usize) -> bool {
    let mut p = ke;
    let end = (ke + 24).min(text.len());
    while p < end {
        match text[p] {
            b'=' | b':' | b'>' | b',' | b'|' => return true,
            b'.' | b'?' | b'+' => return text.get(p + 1) == Some(&b'='),
            b'"' | b'\'' | b'`' | b'\\' | b' ' | b'\t' => p += 1,
            b if b.is_ascii_alphabetic() || b == b'&' => p += 1, // `name string =`, `name: &str =`
            _ => return false,
        }
    }
    false
}

/// Parses `name <op> value` with the name at `[ks, ke)`.
///
/// `scanned` is set to the end of the value read, when one was read, so
/// that the caller can skip names inside a long value it already read
/// (keeping the scan linear on inputs like `key=key=key=...`).
pub(crate) fn parse_at(text: &[u8], ks: usize, ke: usize, scanned: &mut usize) -> Option<KeyedHit> {
    if ke <= ks || ke - ks > 128 {
        return None;
    }
    if !operator_follows(text, ke) {
        return None;
    }
    let key = &text[ks..ke];
    let class = classify_key(key);
    if class == KeyClass::None {
        return None;
    }
    let n = text.len();
    let before = if ks > 0 { text[ks - 1] } else { b'\n' };
    let before2 = if ks > 1 { text[ks - 2] } else { b'\n' };
    // `$key .= "v"` / `@key = v` are fine; `foo.key = v` too (dotted names are in the key)
    let mut key_quoted = is_quote(before);
    let in_query = matches!(before, b'?' | b'&' | b';');
    let xml = before == b'<' && before2 != b'<';
    let mut p = ke;
    if key_quoted {
        if p < n && text[p] == before {
            p += 1;
        } else if p + 1 < n && text[p] == b'\\' && text[p + 1] == before {
            p += 2;
        } else {
            // `"KEY=value` inside a string: the quote opens the string, not the name
            key_quoted = false;
        }
    }
    let skip_blank = |mut p: usize| {
        while p < n && matches!(text[p], b' ' | b'\t') {
            p += 1;
        }
        p
    };
    p = skip_blank(p);
    // type annotations: `name string = "v"`, `name: String = "v"`
    for ty in [
        &b": String"[..],
        b": string",
        b": str",
        b": &str",
        b"string",
        b"String",
        b"str",
    ] {
        if text[p..].starts_with(ty) {
            let q = skip_blank(p + ty.len());
            if q > p + ty.len() || text.get(q) == Some(&b'=') {
                if text.get(q) == Some(&b'=') {
                    p = q;
                    break;
                }
            }
        }
    }
    // operator
    let rest = &text[p..];
    let mut op_len = 0;
    let mut comma = false;
    let mut xml_op = false;
    for op in [
        &b":::="[..],
        b"::=",
        b":=",
        b"?=",
        b".=",
        b"+=",
        b"=>",
        b"||",
        b"=",
        b":",
    ] {
        if rest.starts_with(op) {
            op_len = op.len();
            break;
        }
    }
    if op_len == 0 {
        if rest.starts_with(b",") && key_quoted {
            op_len = 1;
            comma = true;
        } else if rest.starts_with(b">") && xml {
            op_len = 1;
            xml_op = true;
        } else {
            return None;
        }
    }
    let op = &rest[..op_len];
    // `"token:"` is a string that ends after the operator, not a name
    if is_quote(before) && !key_quoted && text.get(p + op_len) == Some(&before) {
        return None;
    }
    let after_op = text.get(p + op_len).copied().unwrap_or(b'\n');
    if op == b"=" && matches!(after_op, b'=' | b'~') {
        return None; // comparison
    }
    if op == b":" {
        // YAML / JSON / header: `key: v` or `"key":"v"`; not `a:b` paths, not `::`
        if !(matches!(after_op, b' ' | b'\t' | b'"' | b'\'' | b'`') || key_quoted) {
            return None;
        }
    }
    if in_query && op != b"=" {
        return None;
    }
    p += op_len;
    // blanks; XML values and call arguments may start on the next line
    if xml_op || comma {
        while p < n && text[p].is_ascii_whitespace() {
            p += 1;
        }
    } else {
        p = skip_blank(p);
    }
    if p >= n {
        return None;
    }
    // value
    let (vs, ve, quoted) =
        if is_quote(text[p]) || (text[p] == b'\\' && p + 1 < n && is_quote(text[p + 1])) {
            let escaped = text[p] == b'\\';
            let q = if escaped { text[p + 1] } else { text[p] };
            let vs = p + if escaped { 2 } else { 1 };
            let mut e = vs;
            let limit = (vs + 4096).min(n);
            while e < limit && text[e] != b'\n' {
                if escaped {
                    if text[e] == b'\\' && e + 1 < n && text[e + 1] == q {
                        break;
                    }
                } else if text[e] == q {
                    break;
                } else if text[e] == b'\\' && e + 1 < n {
                    e += 1;
                }
                e += 1;
            }
            (vs, e.min(limit), true)
        } else {
            if comma {
                return None;
            }
            let vs = p;
            let mut e = vs;
            let limit = (vs + 4096).min(n);
            while e < limit {
                let b = text[e];
                if b.is_ascii_whitespace()
                    || matches!(
                        b,
                        b'"' | b'\'' | b'`' | b';' | b',' | b'<' | b')' | b']' | b'}'
                    )
                {
                    break;
                }
                if b == b'&' && in_query {
                    break;
                }
                if b == b'\\'
                    && e + 1 < n
                    && matches!(text[e + 1], b'n' | b'r' | b't' | b'"' | b'\'' | b'\\')
                {
                    break;
                }
                if b == b'>' && xml_op {
                    break;
                }
                e += 1;
            }
            (vs, e, false)
        };
    let mut ve = ve;
    if quoted {
        // strip trailing blanks inside quotes
        while ve > vs && text[ve - 1] == b' ' {
            ve -= 1;
        }
        // a back-quoted shell command is a substitution, not a value
        if text[vs - 1] == b'`' && text[vs..ve].contains(&b' ') {
            return None;
        }
        if ve > vs && text[ve - 1] == b':' && is_placeholder(&text[vs..ve - 1]) {
            return None;
        }
    } else {
        // a trailing '.' or ':' ends a sentence, not a value
        while ve > vs && matches!(text[ve - 1], b'.' | b':') {
            ve -= 1;
        }
    }
    *scanned = ve;
    let value = &text[vs..ve];
    if value.is_empty() || is_placeholder(value) {
        return None;
    }
    if value.eq_ignore_ascii_case(key) {
        return None;
    }
    // `name: Some words` in a message is prose (`cp: cannot create regular
    // file 'token': Read-only file system`, `token: Permission denied`)
    if !quoted && op == b":" && is_prose(text, ks, ve, value) {
        return None;
    }
    // a value that is itself the name of a secret (`secretKey: api-key`,
    // `passwordField: password_input`) refers to one, it is not one
    let name_like = value.iter().any(|b| matches!(b, b'_' | b'-' | b'.'))
        || value.iter().skip(1).any(u8::is_ascii_uppercase);
    if name_like
        && value
            .iter()
            .all(|b| b.is_ascii_alphabetic() || matches!(b, b'_' | b'-' | b'.'))
        && classify_key(value) != KeyClass::None
    {
        return None;
    }
    if !quoted && is_code(value) {
        return None;
    }
    // a value that is itself a secret-looking name followed by an operator
    // (`password: password_field`) is still accepted for strong names
    let ok = match class {
        KeyClass::Strong => {
            value.len() >= 6 || (value.len() >= 4 && value.iter().any(|b| b.is_ascii_digit()))
        }
        KeyClass::Weak => looks_random(value, 3.0) && !has_spaces(value) && !is_wordy(value),
        KeyClass::None => false,
    };
    if !ok {
        return None;
    }
    let rule = rule_for(key);
    Some(KeyedHit {
        ctx_start: ks,
        start: vs,
        end: ve,
        rule,
    })
}

/// A word of prose: letters, with `-`, `'` or `/` inside (`Read-only`,
/// `Input/output`, `can't`).
fn is_plain_word(w: &[u8]) -> bool {
    w.len() >= 2
        && w[0].is_ascii_alphabetic()
        && w[w.len() - 1].is_ascii_alphabetic()
        && w.iter()
            .all(|b| b.is_ascii_alphabetic() || matches!(b, b'-' | b'\'' | b'/'))
}

/// True when the unquoted value `value` (ending at `ve`) of a `name:` at
/// `ks` reads as prose rather than a secret: a plain word followed on its
/// line by another word (`Read-only file system`, `Permission denied`), an
/// upper-case dictionary-like word that ends the line or sentence
/// (`..._secret: REMOVED`), or, when other text precedes the name on its
/// line (a message, not a config line), such a capitalised word
/// (`... token: Unauthorized`).
/// Secrets under such names are random strings, digits or symbols: those
/// are still found.
fn is_prose(text: &[u8], ks: usize, ve: usize, value: &[u8]) -> bool {
    if !is_plain_word(value) {
        return false;
    }
    let mut p = ve;
    while p < text.len() && text[p] == b' ' {
        p += 1;
    }
    if p > ve && p < text.len() && text[p].is_ascii_alphabetic() {
        return true;
    }
    let line_start = text[..ks]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let message = text[line_start..ks]
        .iter()
        .any(|b| !(b.is_ascii_whitespace() || is_quote(*b) || matches!(b, b'-' | b'{' | b',')));
    let ends = p >= text.len() || matches!(text[p], b'\n' | b'\r' | b'.' | b'!' | b'(' | b',');
    let upper = value.iter().all(|b| !b.is_ascii_lowercase());
    let capital =
        value[0].is_ascii_uppercase() && value[1..].iter().all(|b| !b.is_ascii_uppercase());
    ends && (upper || (message && capital)) && is_wordy(value)
}

fn has_spaces(v: &[u8]) -> bool {
    v.contains(&b' ')
}

/// The rule id reported for a keyed secret.
fn rule_for(key: &[u8]) -> &'static str {
    let ws = words(key);
    let has = |w: &str| ws.iter().any(|x| x == w);
    if has("aws") && has("secret") {
        return "aws-secret-access-key";
    }
    if has("aws") && (has("session") || has("security")) {
        return "aws-session-token";
    }
    let last = ws.last().map(String::as_str).unwrap_or("");
    if matches!(
        last,
        "password" | "passwd" | "pwd" | "pass" | "passphrase" | "passcode" | "pw"
    ) || last.ends_with("password")
        || last.ends_with("passwd")
    {
        return "password-assignment";
    }
    "secret-assignment"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(text: &str) -> Option<String> {
        let t = text.as_bytes();
        for trig in TRIGGERS {
            let lower = text.to_ascii_lowercase();
            let mut from = 0;
            while let Some(i) = lower[from..].find(trig) {
                let pos = from + i;
                let (ks, ke) = key_span(t, pos);
                if let Some(h) = parse_at(t, ks, ke, &mut 0) {
                    return Some(text[h.start..h.end].to_string());
                }
                from = pos + 1;
            }
        }
        None
    }

    #[test]
    fn splits_names_into_words() {
        assert_eq!(
            words(b"AWS_SECRET_ACCESS_KEY"),
            ["aws", "secret", "access", "key"]
        );
        assert_eq!(
            words(b"awsSecretAccessKey"),
            ["aws", "secret", "access", "key"]
        );
        assert_eq!(
            words(b"sengridAPITokenToken"),
            ["sengrid", "api", "token", "token"]
        );
        assert_eq!(words(b"bot_token4"), ["bot", "token", "4"]);
    }

    #[test]
    fn classifies_names() {
        assert_eq!(classify_key(b"DB_PASSWORD"), KeyClass::Strong);
        assert_eq!(classify_key(b"asanaToken"), KeyClass::Strong);
        assert_eq!(classify_key(b"X-Api-Key"), KeyClass::Strong);
        assert_eq!(classify_key(b"bucket_key"), KeyClass::Weak);
        assert_eq!(classify_key(b"secret_length"), KeyClass::None);
        assert_eq!(classify_key(b"keyword"), KeyClass::None);
        assert_eq!(classify_key(b"prompt_tokens"), KeyClass::None);
        assert_eq!(classify_key(b"public_key"), KeyClass::None);
        assert_eq!(classify_key(b"aws_access_key_id"), KeyClass::None);
        assert_eq!(classify_key(b"bypass"), KeyClass::None);
        // The shell's working directory (`env` output), not a password;
        // a password named pwd still is one.
        assert_eq!(classify_key(b"PWD"), KeyClass::None);
        assert_eq!(classify_key(b"OLDPWD"), KeyClass::None);
        assert_eq!(classify_key(b"DB_PWD"), KeyClass::Strong);
        assert_eq!(classify_key(b"Pwd"), KeyClass::Strong);
    }

    #[test]
    fn finds_assignments() {
        assert_eq!(
            find("DB_PASSWORD=hunter2!673\n").as_deref(),
            Some("hunter2!673")
        );
        assert_eq!(
            find("password: 'rootpasswd'").as_deref(),
            Some("rootpasswd")
        );
        assert_eq!(
            find(r#"{"api_token": "abc123def456"}"#).as_deref(),
            Some("abc123def456")
        );
        assert_eq!(
            find("var x string = 1; var discordToken string = \"630954955852889352\"").as_deref(),
            Some("630954955852889352")
        );
        assert_eq!(
            find("System.setProperty(\"ASANA_TOKEN\", \"3875083714468362\")").as_deref(),
            Some("3875083714468362")
        );
        assert_eq!(
            find("<bittrexToken>\n    omwpl08z0r1pgiawghuag375uhz4f9ej\n</bittrexToken>")
                .as_deref(),
            Some("omwpl08z0r1pgiawghuag375uhz4f9ej")
        );
        assert_eq!(
            find("{\"config.ini\": \"AIRTABLE_TOKEN=u1rvuhryl6obzlr00\\nBACKUP_ENABLED=true\"}")
                .as_deref(),
            Some("u1rvuhryl6obzlr00")
        );
        assert_eq!(
            find("https://x.example/cb?state=1&access_token=AbC123xyz789&x=1").as_deref(),
            Some("AbC123xyz789")
        );
    }

    #[test]
    fn user_pass_parts() {
        let part = |v: &str| user_pass(v.as_bytes()).map(|(s, e)| v[s..e].to_string());
        assert_eq!(part("deploy:Depl0y-Pw").as_deref(), Some("Depl0y-Pw"));
        assert_eq!(part("'johns:h0pk1ns~21s'").as_deref(), Some("h0pk1ns~21s"));
        assert_eq!(part("\":d2LkV78zLx!t\"").as_deref(), Some("d2LkV78zLx!t"));
        assert_eq!(part("\"d2LkV78zLx!t:\"").as_deref(), Some("d2LkV78zLx!t"));
        assert_eq!(
            part("kevin:'pRf7vG2h1L8nQkW9'").as_deref(),
            Some("pRf7vG2h1L8nQkW9")
        );
        assert_eq!(
            part("\"{acd3c08b-74e8}\":\"{ZqL5kVrX1n8tA2}\"").as_deref(),
            Some("ZqL5kVrX1n8tA2")
        );
        assert_eq!(part("{user}:{password}"), None);
        for p in [
            "user:pass",
            "test:test",
            "$USER:$PASS",
            "xxx:yyy",
            "neo4j:[PASSWORD]",
            "1000:1000",
            ":",
        ] {
            assert_eq!(part(p), None, "{p}");
        }
    }

    #[test]
    fn skips_placeholders_and_code() {
        for t in [
            "API_KEY=${API_KEY}",
            "password: <your-password-here>",
            "let password = read_password(&prompt)?;",
            "secret_length = X25519.secret_length",
            "administrator_login_password = var.db_password",
            "password = \"${aws_db_instance.default.password}\"",
            "PASSWORD=changeme",
            "token: $TOKEN",
            "if token == \"abcdefgh\" {",
            "usage: prompt_tokens=1532 completion_tokens=211",
            "sequenceKey = \"18\"",
            "privateaiToken = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
        ] {
            assert_eq!(find(t), None, "{t}");
        }
    }

    /// Error messages and prose after a secret-looking name are not values
    /// (the red team's `... 'token': Read-only file system`).
    #[test]
    fn prose_after_a_name_is_no_secret() {
        for t in [
            "cp: cannot create regular file 'token': Read-only file system",
            "error: could not write password: Read-only file system",
            "open secret.key: Read-only file system",
            "Password: Read-only file system",
            "ERROR secret_key: Permission denied",
            "git@github.com token: Permission denied (publickey).",
            "warning: unable to access 'credentials': Input/output error",
            "error fetching token: Unauthorized",
            "gnutls_session_get_master_secret: REMOVED",
            "refresh of the access token: Expired.",
        ] {
            assert_eq!(find(t), None, "{t}");
        }
        for (t, want) in [
            ("password: hunter2!673", "hunter2!673"),
            ("Password: Tr0ub4dor&3 is what you typed", "Tr0ub4dor&3"),
            ("token: ghx8Kd93JdkeLq0Z", "ghx8Kd93JdkeLq0Z"),
            ("DB_PASSWORD=Permission denied", "Permission"),
            ("password: sunshine", "sunshine"),
            ("  password: Sunshine", "Sunshine"),
            ("token: 'Read-only file system'", "Read-only file system"),
            ("login failed, password: QzXvBnMkPl", "QzXvBnMkPl"),
        ] {
            assert_eq!(find(t).as_deref(), Some(want), "{t}");
        }
    }
}
