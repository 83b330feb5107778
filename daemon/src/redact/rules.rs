//! The built-in rule table: secret formats by vendor, as facts about those
//! formats (prefixes, alphabets, lengths). Patterns are compiled as
//! byte regexes with Unicode off, so `\w`, `\d`, `\s` and `\b` are ASCII.
//!
//! Every rule names the keywords (ASCII case-insensitive) that must occur
//! near a match; the engine runs a rule's pattern only on the lines around
//! its keywords (the prefilter gitleaks also uses), so the cost of the
//! table is one Aho-Corasick pass over the input plus a few short lines.

/// How far around a keyword hit the rule's pattern is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Window {
    /// The line holding the hit (capped at [`LINE_CAP`] bytes either side).
    Line,
}

/// Bytes either side of a hit that a line window may span.
pub(crate) const LINE_CAP: usize = 2048;

/// One pattern rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleDef {
    /// Rule id shown in markers and findings.
    pub id: &'static str,
    /// Keywords (ASCII case-insensitive) at least one of which the match contains or follows.
    pub keywords: &'static [&'static str],
    /// Byte regex (Unicode off).
    pub pattern: &'static str,
    /// Capture group holding the secret (0: the whole match).
    pub group: usize,
    /// Minimum Shannon entropy (bits per byte) of the secret; 0 to skip.
    pub min_entropy: f32,
    /// Reject values that look like templates (`xxxx`, `${VAR}`, `<...>`).
    pub placeholder_check: bool,
    /// Extra check of the secret.
    pub post: Post,
    /// A byte that must occur in the window after the keyword (cheap
    /// pre-check before the regex runs), or 0.
    pub needs: u8,
    /// Window around keyword hits.
    pub window: Window,
    /// What may come right before the secret.
    pub left: Left,
    /// The byte right after the secret must not be an ASCII letter or digit
    /// (a fixed-length token is not the start of a longer run), nor, for
    /// [`Left::Word`] tokens, `_`.
    pub right: bool,
}

/// What may come right before a vendor token. Patterns carry no `\b`: a
/// word boundary misses tokens glued to `_`, to an escape (`\nAKIA...` in
/// JSON, `%3Dsk_live_...` in a URL) or to other text (`xAKIA...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// Anything: the token's prefix is distinctive enough on its own
    /// (`AKIA` + 16, `sk_live_`, `glpat-`, `xoxb-`).
    Any,
    /// Start of the line, a byte that is not an ASCII letter or digit, or an
    /// escape ending in one (`\n`, `\t`, `\r`, `\xNN`, `\uNNNN`, `%NN`):
    /// for short or hex/base64-like prefixes (`SK` + 32 hex, `key-`, `dapi`,
    /// `eyJ`) that occur inside longer words and encoded blobs.
    Word,
}

impl RuleDef {
    /// Sets what may come before the secret.
    pub(crate) const fn left(mut self, l: Left) -> RuleDef {
        self.left = l;
        self
    }

    /// The secret must not be followed by an ASCII letter or digit.
    pub(crate) const fn right(mut self) -> RuleDef {
        self.right = true;
        self
    }

    /// True when the secret at `[s, e)` of `text` stands where this rule's
    /// tokens stand: see [`Left`] and [`RuleDef::right`].
    pub(crate) fn edges_ok(&self, text: &[u8], s: usize, e: usize) -> bool {
        // a token with a weak prefix glued to `_` after it is a longer
        // identifier (`&hf_servingcell..._h_prio`)
        let glue = |b: &u8| b.is_ascii_alphanumeric() || (self.left == Left::Word && *b == b'_');
        if self.right && text.get(e).is_some_and(glue) {
            return false;
        }
        match self.left {
            Left::Any => true,
            Left::Word => word_start(text, s),
        }
    }
}

/// True when a token may start at `s`: see [`Left::Word`].
pub(crate) fn word_start(text: &[u8], s: usize) -> bool {
    if s == 0 || !text[s - 1].is_ascii_alphanumeric() {
        return true;
    }
    let before = &text[..s];
    let hex = |b: &[u8]| b.iter().all(u8::is_ascii_hexdigit);
    let ends = |n: usize, lead: &[u8]| {
        before.len() >= n
            && before[before.len() - n..].starts_with(lead)
            && hex(&before[before.len() - n + lead.len()..])
    };
    (before.len() >= 2
        && before[before.len() - 2] == b'\\'
        && matches!(before[before.len() - 1], b'n' | b'r' | b't'))
        || ends(3, b"%")
        || ends(4, b"\\x")
        || ends(6, b"\\u")
}

const fn r(
    id: &'static str,
    keywords: &'static [&'static str],
    pattern: &'static str,
    group: usize,
    min_entropy: f32,
) -> RuleDef {
    RuleDef {
        id,
        keywords,
        pattern,
        group,
        min_entropy,
        placeholder_check: true,
        post: Post::None,
        needs: 0,
        window: Window::Line,
        left: Left::Any,
        right: false,
    }
}

/// A rule whose secret may look like a template (`AGE-SECRET-KEY-1QQQ...`).
const fn raw(mut d: RuleDef) -> RuleDef {
    d.placeholder_check = false;
    d
}

const fn needs(mut d: RuleDef, b: u8) -> RuleDef {
    d.needs = b;
    d
}

const fn post(mut d: RuleDef, p: Post) -> RuleDef {
    d.post = p;
    d
}

/// Extra checks of a rule's secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Post {
    None,
    /// `user:password`: the password is the secret (the user when the
    /// password is empty); placeholders on either side are not secrets.
    UserPass,
    /// The secret must contain a digit.
    NeedsDigit,
    /// The secret is not a short lower-case word or an English function
    /// word (`--password for PKCS #12`, `--token is required`).
    NotProse,
}

/// Words that follow an option's name in prose, not as its value.
const PROSE_WORDS: &[&str] = &[
    "for",
    "was",
    "is",
    "are",
    "the",
    "and",
    "or",
    "of",
    "to",
    "in",
    "on",
    "with",
    "when",
    "if",
    "as",
    "be",
    "not",
    "from",
    "that",
    "this",
    "option",
    "options",
    "flag",
    "argument",
    "arguments",
    "parameter",
    "value",
    "instead",
    "only",
    "also",
    "now",
    "will",
    "would",
    "can",
    "must",
    "should",
    "may",
    "which",
    "where",
    "without",
    "given",
    "set",
    "used",
];

impl Post {
    /// True when `v` passes [`Post::NotProse`].
    pub(crate) fn not_prose(v: &[u8]) -> bool {
        let lower = v.to_ascii_lowercase();
        let word = std::str::from_utf8(&lower).unwrap_or("");
        !(PROSE_WORDS.contains(&word) || (v.len() <= 4 && v.iter().all(u8::is_ascii_lowercase)))
    }
}

/// The built-in pattern rules. Keyed `name = value` secrets, private-key
/// blocks and known secret values are scanned by dedicated code
/// (`keyed.rs`, `pem.rs`, `known.rs`).
pub(crate) const RULES: &[RuleDef] = &[
    // --- cloud providers ---
    r(
        "aws-access-key-id",
        &["akia", "asia", "abia", "acca", "a3t"],
        r"((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "aws-session-token",
        &["fwogzxivyxdz", "iqojb3jpz2lu"],
        r"((?:FwoGZXIvYXdz|IQoJb3JpZ2lu)[A-Za-z0-9/+=]{80,})",
        1,
        0.0,
    ).left(Left::Any),
    raw(r(
        "aws-bedrock-api-key",
        &["absk"],
        r"(ABSKQmVkcm9ja0FQSUtleS[A-Za-z0-9+/]{100,300}={0,2})(?:[^A-Za-z0-9+/=]|$)",
        1,
        0.0,
    ).left(Left::Any)),
    r(
        "aws-bedrock-api-key",
        &["bedrock-api-key-"],
        r"(bedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=%&_-]*)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "gcp-api-key",
        &["aiza"],
        r"(AIza[0-9A-Za-z_-]{35})(?:[^0-9A-Za-z_-]|$)",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "gcp-oauth-client-secret",
        &["gocspx-"],
        r"(GOCSPX-[A-Za-z0-9_-]{28})",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "gcp-oauth-access-token",
        &["ya29."],
        r"(ya29\.[0-9A-Za-z_-]{30,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "azure-storage-key",
        &["accountkey", "sharedaccesskey"],
        r"(?i)\b(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{20,}={0,2})",
        1,
        3.0,
    ),
    r(
        "azure-sas-signature",
        &["sig="],
        r"[?&;]sig=([A-Za-z0-9%+/=]{20,})",
        1,
        3.0,
    ),
    r(
        "azure-ad-client-secret",
        &["q~"],
        r#"([a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34})(?:$|[^a-zA-Z0-9_~.-])"#,
        1,
        3.0,
    )
    .left(Left::Word),
    r(
        "alibaba-access-key-id",
        &["ltai"],
        r"(LTAI(?i:[a-z0-9]{20}))",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "digitalocean-token",
        &["dop_v1_", "doo_v1_", "dor_v1_"],
        r"(do[opr]_v1_[a-f0-9]{64})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "yandex-access-token",
        &["t1."],
        r"(t1\.[A-Z0-9a-z_-]+={0,2}\.[A-Z0-9a-z_-]{86}={0,2})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "yandex-aws-access-token",
        &["yandex"],
        r"(YC[a-zA-Z0-9_-]{38})",
        1,
        3.5,
    ).left(Left::Word).right(),
    r(
        "yandex-api-key",
        &["aqvn"],
        r"(AQVN[A-Za-z0-9_-]{35,38})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "cloudflare-origin-ca-key",
        &["v1.0-"],
        r"(v1\.0-[a-f0-9]{24}-[a-f0-9]{146})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "flyio-access-token",
        &["fo1_"],
        r"(fo1_[\w-]{43})",
        1,
        3.5,
    ).left(Left::Any).right(),
    r(
        "flyio-access-token",
        &["fm1a_", "fm1r_", "fm2_"],
        r"((?:fm1[ar]|fm2)_[A-Za-z0-9+/=_-]{60,})",
        1,
        3.5,
    ).left(Left::Any),
    r(
        "heroku-api-key",
        &["hrku-"],
        r"(HRKU-AA[0-9a-zA-Z_-]{58})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "databricks-api-token",
        &["dapi"],
        r"(dapi[a-f0-9]{32}(?:-\d)?)",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "scalingo-api-token",
        &["tk-us-"],
        r"(tk-us-[\w-]{48})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "vault-token",
        &["hvs.", "hvb."],
        r"(hv[sb]\.[\w-]{90,400})",
        1,
        3.5,
    ).left(Left::Any),
    r(
        "vault-token",
        &["vault"],
        r"(?i)vault[\w.-]{0,30}(?:\s*[=:]\s*|\s+)['`]?(s\.[a-zA-Z0-9]{24})",
        1,
        3.5,
    ).right(),
    // --- source hosting ---
    r(
        "github-token",
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        r"(gh[pousr]_[A-Za-z0-9]{36,251})",
        1,
        3.0,
    ),
    r(
        "github-fine-grained-pat",
        &["github_pat_"],
        r"(github_pat_[A-Za-z0-9_]{50,255})",
        1,
        3.0,
    ),
    r(
        "gitlab-token",
        &[
            "glpat-", "glptt-", "glrt-", "glcbt-", "gldt-", "glffct-", "glft-", "glimt-",
            "glagent-", "gloas-", "glsoat-",
        ],
        r"(gl(?:pat|ptt|rt|cbt|dt|ffct|ft|imt|agent|oas|soat)-[\w.-]{20,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "gitlab-runner-registration-token",
        &["gr1348941"],
        r"(GR1348941[\w-]{20})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "gitlab-session-cookie",
        &["_gitlab_session="],
        r"(_gitlab_session=[0-9a-z]{32})",
        1,
        3.0,
    ),
    r(
        "bitbucket-app-password",
        &["atbb"],
        r"(ATBB[A-Za-z0-9_=.-]{28,})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "sourcegraph-access-token",
        &["sgp_"],
        r"(sgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}|sgp_[a-fA-F0-9]{40})",
        1,
        3.0,
    ).left(Left::Any).right(),
    // --- chat ---
    r(
        "slack-token",
        &["xoxb-"],
        r"(xoxb-[0-9]{10,13}-[0-9]{10,13}-?[a-zA-Z0-9]*)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxb-"],
        r"(xoxb-[0-9]{8,14}-[a-zA-Z0-9]{18,26})",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxp-", "xoxe-"],
        r"(xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,34})",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxo-", "xoxs-"],
        r"(xox[os]-\d+-\d+-\d+-[a-fA-F\d]+)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxa-", "xoxr-"],
        r"(xox[ar]-(?:\d-)?[0-9a-zA-Z]{8,48})",
        1,
        2.5,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xapp-"],
        r"(?i)(xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxe."],
        r"(?i)(xoxe\.xox[bp]-\d-[A-Z0-9]{100,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "slack-token",
        &["xoxe-"],
        r"(?i)(xoxe-\d-[A-Z0-9]{100,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "slack-webhook-url",
        &["hooks.slack.com"],
        r"((?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{30,})",
        1,
        0.0,
    ),
    r(
        "discord-webhook-url",
        &["discord"],
        r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w-]{40,})",
        1,
        0.0,
    ),
    r(
        "microsoft-teams-webhook",
        &["webhook.office.com"],
        r"(?i)(https://[a-z0-9-]+\.webhook\.office\.com/webhookb2/[a-z0-9-]+@[a-z0-9-]+/IncomingWebhook/[a-z0-9]+/[a-z0-9-]+)",
        1,
        0.0,
    ),
    r(
        "telegram-bot-token",
        &["telegr"],
        r"(?:\b|bot)(\d{5,16}:A[\w-]{34})",
        1,
        0.0,
    ).right(),
    r(
        "mattermost-access-token",
        &["mattermost"],
        r"(?i)mattermost[\w.-]{0,30}[\s'`]*[=:>]{1,3}[\s'`]*([a-z0-9]{26})",
        1,
        0.0,
    ).right(),
    // --- payments, commerce ---
    r(
        "stripe-key",
        &["sk_", "rk_"],
        r"((?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "square-access-token",
        &["eaaa", "sq0atp-"],
        r"((?:EAAA|sq0atp-)[\w-]{22,60})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "square-oauth-secret",
        &["sq0csp-"],
        r"(sq0csp-[0-9A-Za-z_-]{43})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "shopify-token",
        &["shpat_", "shpca_", "shppa_", "shpss_"],
        r"(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "shippo-api-token",
        &["shippo_"],
        r"(shippo_(?:live|test)_[a-fA-F0-9]{40})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "flutterwave-key",
        &["flwpubk_", "flwseck_"],
        r"(FLW(?:PUB|SEC)K_TEST-[a-h0-9]{12,32}(?:-X)?)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "duffel-api-token",
        &["duffel_"],
        r"(duffel_(?:test|live)_[a-z0-9_=-]{43})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "easypost-api-token",
        &["ezak", "eztk"],
        r"(EZ[AT]K[a-zA-Z0-9]{54})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "coinbase-access-token",
        &["coinbase"],
        r"(?i)coinbase[\w.-]{0,30}[\s'`\x22]*[=:>,]{1,4}[\s'`\x22]*([a-z0-9_-]{64})",
        1,
        3.0,
    ).right(),
    // --- AI providers ---
    r(
        "openai-api-key",
        &["t3blbkfj"],
        r"(sk-(?:[a-z]+-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "openai-api-key",
        &["sk-proj-", "sk-svcacct-", "sk-admin-", "sk-none-"],
        r"(sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{40,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "anthropic-api-key",
        &["sk-ant-"],
        r"(sk-ant-[a-z]+\d\d-[A-Za-z0-9_-]{20,})",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "huggingface-access-token",
        &["hf_"],
        r"(hf_[A-Za-z0-9]{34,40})",
        1,
        3.2,
    ).left(Left::Word).right(),
    r(
        "huggingface-organization-api-token",
        &["api_org_"],
        r"(api_org_[A-Za-z]{34})",
        1,
        3.2,
    ).left(Left::Word).right(),
    r(
        "perplexity-api-key",
        &["pplx-"],
        r"(pplx-[a-zA-Z0-9]{48})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "cohere-api-token",
        &["cohere", "co_api_key"],
        r"(?i)(?:cohere|co_api_key)[\w.-]{0,20}[\s'`\x22]*[=:>]{1,3}[\s'`\x22]*([a-z0-9]{40})",
        1,
        3.5,
    ).right(),
    // --- package registries ---
    r(
        "npm-access-token",
        &["npm_"],
        r"(npm_[A-Za-z0-9]{36})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "pypi-upload-token",
        &["pypi-ageichlwas5vcmc"],
        r"(pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,})",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "rubygems-api-token",
        &["rubygems_"],
        r"(rubygems_[a-f0-9]{48})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "clojars-api-token",
        &["clojars_"],
        r"(?i)(CLOJARS_[a-z0-9]{60})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "artifactory-api-key",
        &["akcp"],
        r"(AKCp[A-Za-z0-9]{69})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "artifactory-reference-token",
        &["cmvmd"],
        r"(cmVmd[A-Za-z0-9]{59})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "nuget-config-password",
        &["password"],
        r#"(?i)<add\s+key="(?:cleartext)?password"\s+value="([^"]{4,})""#,
        1,
        0.0,
    ),
    r(
        "sidekiq-secret",
        &["contribsys__com"],
        r#"(?i)BUNDLE_(?:ENTERPRISE|GEMS)__CONTRIBSYS__COM[\x22']?[ \t]*(?:=|:=|:|=>)[ \t]*[\x22']?([a-f0-9]{8}:[a-f0-9]{8})"#,
        1,
        0.0,
    ),
    // --- SaaS ---
    r(
        "1password-secret-key",
        &["a3-"],
        r"(A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "1password-service-account-token",
        &["ops_eyj"],
        r"(ops_eyJ[A-Za-z0-9+/]{100,}={0,3})",
        1,
        3.0,
    ).left(Left::Any),
    raw(r(
        "age-secret-key",
        &["age-secret-key-1"],
        r"(AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})",
        1,
        0.0,
    )),
    r(
        "airtable-personal-access-token",
        &["airtable"],
        r"(pat[A-Za-z0-9]{14}\.[a-f0-9]{64})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "atlassian-api-token",
        &["atatt3"],
        r"(ATATT3[A-Za-z0-9_=-]{150,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "authress-access-key",
        &["acc_", "acc-"],
        r"((?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\.[a-z0-9+/_=-]{30,120})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "clickhouse-cloud-api-secret-key",
        &["4b1d"],
        r"(4b1d[A-Za-z0-9]{38})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "defined-networking-api-token",
        &["dnkey-"],
        r"(dnkey-[a-z0-9=_-]{26}-[a-z0-9=_-]{52})",
        1,
        0.0,
    ),
    r(
        "doppler-api-token",
        &["dp.pt."],
        r"(?i)(dp\.pt\.[a-z0-9]{43})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "dynatrace-api-token",
        &["dt0c01."],
        r"(?i)(dt0c01\.[a-z0-9]{24}\.[a-z0-9]{64})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "frameio-api-token",
        &["fio-u-"],
        r"(?i)(fio-u-[a-z0-9_=-]{64})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "grafana-api-key",
        &["eyjrijoi"],
        r"(eyJrIjoi[A-Za-z0-9]{70,400}={0,3})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "grafana-cloud-api-token",
        &["glc_"],
        r"(glc_[A-Za-z0-9+/]{32,400}={0,3})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "grafana-service-account-token",
        &["glsa_"],
        r"(glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "harness-api-key",
        &["pat.", "sat."],
        r"((?:pat|sat)\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9]{24}\.[a-zA-Z0-9]{20})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "hashicorp-tf-api-token",
        &["atlasv1"],
        r"(?i)([a-z0-9]{14}\.atlasv1\.[a-z0-9_=-]{60,70})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "intra42-client-secret",
        &["s-s4t2"],
        r"(s-s4t2(?:ud|af)-[a-f0-9]{64})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "linear-api-key",
        &["lin_api_"],
        r"(?i)(lin_api_[a-z0-9]{40})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "mailchimp-api-key",
        &["-us"],
        r"([a-f0-9]{32}-us\d{1,2})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "mailgun-key",
        &["pubkey-", "key-"],
        r"((?:pub)?key-[a-f0-9]{32})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "mapbox-api-token",
        &["pk.", "sk."],
        r"(?i)([ps]k\.[a-z0-9]{60}\.[a-z0-9]{22})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "new-relic-key",
        &["nrak-", "nrjs-", "nrii-"],
        r"(?i)(NRAK-[a-z0-9]{27}|NRJS-[a-f0-9]{19}|NRII-[a-z0-9-]{32})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "notion-api-token",
        &["ntn_"],
        r"(ntn_[0-9]{11}[A-Za-z0-9]{35})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "octopus-deploy-api-key",
        &["api-"],
        r"(API-[A-Z0-9]{26})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "openshift-user-token",
        &["sha256~"],
        r"(sha256~[\w-]{43})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "planetscale-token",
        &["pscale_"],
        r"(pscale_(?:pw|tkn|oauth)_[\w=.-]{32,64})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "postman-api-token",
        &["pmak-"],
        r"(?i)(PMAK-[a-f0-9]{24}-[a-f0-9]{34})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "prefect-api-token",
        &["pnu_"],
        r"(?i)(pnu_[a-z0-9]{36})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "pulumi-api-token",
        &["pul-"],
        r"(pul-[a-f0-9]{40})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "readme-api-token",
        &["rdme_"],
        r"(rdme_[a-z0-9]{70})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "sendgrid-api-token",
        &["sg."],
        r"(?i)(SG\.[a-z0-9=_.-]{66})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "sendinblue-api-token",
        &["xkeysib-"],
        r"(?i)(xkeysib-[a-f0-9]{64}-[a-z0-9]{16})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "sentry-token",
        &["sntrys_"],
        r"(sntrys_eyJ[A-Za-z0-9+/=_]{40,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "sentry-token",
        &["sntryu_"],
        r"(sntryu_[a-f0-9]{64})",
        1,
        3.0,
    ).left(Left::Any).right(),
    r(
        "settlemint-token",
        &["sm_aat_", "sm_pat_", "sm_sat_"],
        r"(sm_[aps]at_[a-zA-Z0-9]{16})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "twilio-api-key",
        &["sk"],
        r"(SK[0-9a-fA-F]{32})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "twitter-bearer-token",
        &["aaaaaaaaaaaaaaaaaaaaaa"],
        r"(A{22}[a-zA-Z0-9%]{80,120})",
        1,
        0.0,
    ).left(Left::Word),
    r(
        "typeform-api-token",
        &["tfp_"],
        r"(?i)(tfp_[a-z0-9_.=-]{59})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "infracost-api-token",
        &["ico-"],
        r"(ico-[a-zA-Z0-9]{32})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "adobe-client-secret",
        &["p8e-"],
        r"(?i)(p8e-[a-z0-9]{32})",
        1,
        3.0,
    ).left(Left::Word).right(),
    r(
        "facebook-page-access-token",
        &["eaam", "eaac"],
        r"(EAA[MC][a-zA-Z0-9]{100,})",
        1,
        3.0,
    ).left(Left::Any),
    r(
        "facebook-access-token",
        &["facebook", "graph.facebook"],
        r"(?i)(\d{15,16}(?:\||%7c)[0-9a-z_-]{27,40})",
        1,
        0.0,
    ).left(Left::Word),
    post(
        r(
            "sumologic-access-id",
            &["sumo"],
            r"(?i)sumo[\w.-]{0,30}[\s'`\x22]*[=:>]{1,3}[\s'`\x22]*(su[a-zA-Z0-9]{12})",
            1,
            3.0,
        ).right(),
        Post::NeedsDigit,
    ),
    r(
        "okta-access-token",
        &["okta"],
        r"(?i)okta[\w.-]{0,30}[\s'`\x22]*[=:>]{1,3}[\s'`\x22]*(00[\w=-]{40})",
        1,
        3.5,
    ),
    // --- web tokens and auth material ---
    r(
        "jwt",
        &["eyj"],
        r"(ey[A-Za-z0-9_-]{15,}\.ey[A-Za-z0-9/\\_-]{15,}\.(?:[A-Za-z0-9/\\_-]{5,}={0,2})?)",
        1,
        0.0,
    ).left(Left::Any),
    r(
        "jwt-base64",
        &["zxlk"],
        r"(ZXlK[A-Za-z0-9+/]{60,}={0,2})",
        1,
        3.0,
    ).left(Left::Word),
    r(
        "authorization-header",
        &["authorization"],
        r#"(?i)\b(?:proxy-)?authorization\\?["']?\s*[:=]\s*\\?["']?(?:[A-Za-z][\w-]{1,30}\s+)?([^\s"'\\,;]{6,})"#,
        1,
        0.0,
    ),
    r(
        "bearer-token",
        &["bearer"],
        r#"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{12,})"#,
        1,
        2.5,
    ),
    r(
        "cookie-header",
        &["cookie"],
        // a cookie is `name=value`: `Cookie: Read-only file system` is prose
        r#"(?i)\b(?:set-)?cookie\s*:\s*([^\r\n"'=\s][^\r\n"'=]*=[^\r\n"']{4,})"#,
        1,
        0.0,
    ),
    post(
        r(
            "curl-user-password",
            &["curl", " -u", "--user"],
            r#"(?:\bcurl\b|\s)(?:-u|--user)(?:\s+|=)(["']?(?:"[^"\s]*"|'[^'\s]*'|[^\s"':]*):(?:"[^"\s]*"|'[^'\s]*'|[^\s"']*)["']?)"#,
            1,
            0.0,
        ),
        Post::UserPass,
    ),
    post(
        r(
            "cli-password-flag",
            &[
                "--password",
                "--passwd",
                "--token",
                "--secret",
                "--api-key",
                "--apikey",
                "--client-secret",
            ],
            r#"(?i)\s--(?:[a-z]+-)*(?:password|passwd|token|secret|api-?key)\s+["']?([^\s"'-][^\s"']*)"#,
            1,
            0.0,
        ),
        Post::NotProse,
    ),
    r(
        "mysql-password-flag",
        &["mysql", "mariadb"],
        r#"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\r\n]*?\s-p([^\s"'-][^\s"']*)"#,
        1,
        0.0,
    ),
    r(
        "netrc-password",
        &["machine"],
        r#"\bmachine\s+\S+\s+login\s+\S+\s+password\s+(\S+)"#,
        1,
        0.0,
    ),
    needs(
        r(
            "url-password",
            &["://"],
            r#"\b[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s:/?#@"'<>\[\]]*:([^\s@/?#"'<>]{1,256})@"#,
            1,
            0.0,
        ),
        b'@',
    ),
    r(
        "url-secret-param",
        &[
            "sig=",
            "signature=",
            "x-amz-",
            "x-goog-",
            "token=",
            "secret=",
            "key=",
            "password=",
            "auth=",
            "passwd=",
            "pwd=",
        ],
        r#"(?i)[?&;](?:access_token|refresh_token|id_token|token|api_key|apikey|api-key|client_secret|secret|password|passwd|pwd|auth|sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|x-goog-signature|x-goog-credential)=([^&\s#"'<>]{6,})"#,
        1,
        0.0,
    ),
];

/// Rules that are off by default and switched on by the policy's `[redact.pii]`.
pub(crate) const EMAIL: &str = r"\b([A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,24})\b";
/// E.164 and North-American style phone numbers.
pub(crate) const PHONE: &str = r"(?:^|[^\w+])(\+[1-9]\d{0,2}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}[ .-]?\d{2,4}[ .-]?\d{2,6}|\(\d{3}\)\s?\d{3}-\d{4})\b";
/// Dotted-quad IPv4 addresses (checked against the policy's ranges).
pub(crate) const IPV4: &str =
    r"\b((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})\b";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles_and_has_keywords() {
        for d in RULES {
            assert!(!d.keywords.is_empty(), "{} has no keywords", d.id);
            regex::bytes::RegexBuilder::new(d.pattern)
                .unicode(false)
                .build()
                .unwrap_or_else(|e| panic!("{}: {e}", d.id));
            for k in d.keywords {
                assert_eq!(
                    k.to_ascii_lowercase(),
                    *k,
                    "{}: keyword {k} not lowercase",
                    d.id
                );
            }
        }
    }
}
