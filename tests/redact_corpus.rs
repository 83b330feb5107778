//! Labelled corpus for the secret redactor (issue 8): the project corpus
//! (`../shared/corpus/secrets.jsonl`), gitleaks' own rule test vectors
//! (`../shared/peer/gitleaks-vectors.jsonl`), and synthetic secrets of every
//! rule with benign look-alikes generated here. Prints recall and the
//! false-positive rate; asserts recall >= 99% and false positives <= 2%.
//!
//! Scoring: a `secret` row is caught when none of its secret substrings
//! survives redaction; a `benign` row must come back unchanged;
//! `benign-gitleaks` rows (benign only by gitleaks' own allowlists or
//! entropy) are reported separately and not scored.

use std::path::PathBuf;

use serde_json::Value;
use warden_daemon::redact::{RedactSettings, Redactor, StreamRedactor};

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn read_jsonl(rel: &str) -> Vec<Value> {
    let path = shared().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("labelled corpus {} is missing or unreadable ({e}); it lives beside the repository in shared/", path.display())
    });
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: bad line {l:?}: {e}", path.display()))
        })
        .collect()
}

struct Case {
    source: &'static str,
    kind: String,
    text: String,
    /// Substrings that must not survive; empty for benign rows.
    secrets: Vec<String>,
    /// Scored benign row (must be unchanged).
    benign: bool,
}

/// Deterministic xorshift generator for synthetic values.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick(&mut self, alphabet: &str, n: usize) -> String {
        let a = alphabet.as_bytes();
        (0..n)
            .map(|_| a[(self.next() % a.len() as u64) as usize] as char)
            .collect()
    }
}

const AN: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const LOWER_AN: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &str = "0123456789abcdef";
const UP_AN: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// Synthetic secrets: one or more per rule, in the contexts they show up in.
fn synthetic_secrets() -> Vec<(String, String, Vec<String>)> {
    let mut g = Rng(0x9e37_79b9_7f4a_7c15);
    let mut v: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut add =
        |kind: &str, text: String, secrets: Vec<String>| v.push((kind.to_string(), text, secrets));
    let aws_id = format!("AKIA{}", g.pick(UP_AN, 16));
    let aws_secret = g.pick(B64, 40);
    add(
        "aws-ini",
        format!("[prod]\naws_access_key_id = {aws_id}\naws_secret_access_key = {aws_secret}\n"),
        vec![aws_id.clone(), aws_secret],
    );
    let asia = format!("ASIA{}", g.pick(UP_AN, 16));
    let sess = format!("IQoJb3JpZ2luX2Vj{}", g.pick(B64, 300));
    add(
        "aws-session",
        format!("export AWS_ACCESS_KEY_ID={asia}\nexport AWS_SESSION_TOKEN={sess}\n"),
        vec![asia, sess.clone()],
    );
    add(
        "aws-session-bare",
        format!("\"SessionToken\": \"{sess}\""),
        vec![sess],
    );
    let gcp = format!("AIza{}", g.pick(URLSAFE, 35));
    add(
        "gcp-api-key",
        format!("fetch(`https://maps.googleapis.com/maps/api/js?key={gcp}`)"),
        vec![gcp],
    );
    let pem_body: String = (0..20).map(|_| format!("{}\\n", g.pick(B64, 64))).collect();
    let sa_key_first = pem_body[..64].to_string();
    add(
        "gcp-service-account-json",
        format!(
            "{{\n  \"type\": \"service_account\",\n  \"project_id\": \"demo-1\",\n  \"private_key_id\": \"{}\",\n  \"private_key\": \"-----BEGIN PRIVATE KEY-----\\n{pem_body}-----END PRIVATE KEY-----\\n\",\n  \"client_email\": \"svc@demo-1.iam.gserviceaccount.com\"\n}}",
            g.pick(HEX, 40)
        ),
        vec![sa_key_first],
    );
    let acct_key = format!("{}==", g.pick(B64, 86));
    add("azure-conn-string", format!("AZURE_STORAGE_CONNECTION_STRING=\"DefaultEndpointsProtocol=https;AccountName=demo;AccountKey={acct_key};EndpointSuffix=core.windows.net\""), vec![acct_key]);
    let sig = format!("{}%3D", g.pick(AN, 43));
    add("azure-sas", format!("https://demo.blob.core.windows.net/c/b.txt?sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01T00:00:00Z&sig={sig}"), vec![sig]);
    let sb = format!("{}=", g.pick(B64, 43));
    add("azure-servicebus", format!("Endpoint=sb://demo.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={sb}"), vec![sb]);
    let ad = format!("{}8Q~{}", g.pick(AN, 3), g.pick(AN, 34));
    add(
        "azure-ad-client-secret",
        format!("\"clientSecret\": \"{ad}\""),
        vec![ad],
    );
    let ghp = format!("ghp_{}", g.pick(AN, 36));
    add(
        "github-classic",
        format!("git push https://x-access-token:{ghp}@github.com/o/r.git"),
        vec![ghp],
    );
    let gho = format!("gho_{}", g.pick(AN, 36));
    add("github-oauth", format!("oauth_token: {gho}"), vec![gho]);
    let ghs = format!("ghs_{}", g.pick(AN, 36));
    add(
        "github-app",
        format!("Using installation token {ghs} for checkout"),
        vec![ghs],
    );
    let fg = format!("github_pat_{}_{}", g.pick(AN, 22), g.pick(AN, 59));
    add("github-fine-grained", format!("GH_TOKEN={fg}"), vec![fg]);
    let glpat = format!("glpat-{}", g.pick(URLSAFE, 20));
    add(
        "gitlab-pat",
        format!("git clone https://oauth2:{glpat}@gitlab.com/g/p.git"),
        vec![glpat],
    );
    let glrt = format!("glrt-{}", g.pick(URLSAFE, 20));
    add("gitlab-runner", format!("  token = \"{glrt}\""), vec![glrt]);
    let xoxb = format!(
        "xoxb-{}-{}-{}",
        g.pick("0123456789", 12),
        g.pick("0123456789", 13),
        g.pick(AN, 24)
    );
    add("slack-bot", format!("SLACK_BOT_TOKEN={xoxb}"), vec![xoxb]);
    let xoxp = format!(
        "xoxp-{}-{}-{}-{}",
        g.pick("0123456789", 12),
        g.pick("0123456789", 12),
        g.pick("0123456789", 13),
        g.pick(HEX, 32)
    );
    add(
        "slack-user",
        format!("curl -d token={xoxp} https://slack.com/api/auth.test"),
        vec![xoxp],
    );
    let hook = format!(
        "https://hooks.slack.com/services/T{}/B{}/{}",
        g.pick(UP_AN, 8),
        g.pick(UP_AN, 10),
        g.pick(AN, 24)
    );
    add(
        "slack-webhook",
        format!("webhook_url: \"{hook}\""),
        vec![hook[8..].to_string()],
    );
    let sk = format!("sk_live_{}", g.pick(AN, 24));
    add(
        "stripe-live",
        format!("Stripe::setApiKey('{sk}');"),
        vec![sk],
    );
    let rk = format!("rk_test_{}", g.pick(AN, 24));
    add("stripe-restricted", format!("STRIPE_KEY: {rk}"), vec![rk]);
    let oai = format!(
        "sk-proj-{}T3BlbkFJ{}",
        g.pick(URLSAFE, 74),
        g.pick(URLSAFE, 74)
    );
    add(
        "openai-project",
        format!("client = OpenAI(api_key=\"{oai}\")"),
        vec![oai],
    );
    let oai_old = format!("sk-{}T3BlbkFJ{}", g.pick(AN, 20), g.pick(AN, 20));
    add(
        "openai-legacy",
        format!("Incorrect API key provided: {oai_old}."),
        vec![oai_old],
    );
    let ant = format!("sk-ant-api03-{}AA", g.pick(URLSAFE, 93));
    add("anthropic", format!("x-api-key: {ant}"), vec![ant]);
    let oat = format!("sk-ant-oat01-{}AA", g.pick(URLSAFE, 93));
    add(
        "anthropic-oauth",
        format!("{{\"accessToken\":\"{oat}\",\"expiresAt\":1760000000}}"),
        vec![oat],
    );
    let hf = format!(
        "hf_{}",
        g.pick("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 34)
    );
    add(
        "huggingface",
        format!("from huggingface_hub import login; login(\"{hf}\")"),
        vec![hf],
    );
    let npm = format!("npm_{}", g.pick(AN, 36));
    add(
        "npmrc",
        format!("//registry.npmjs.org/:_authToken={npm}"),
        vec![npm],
    );
    let pypi = format!("pypi-AgEIcHlwaS5vcmc{}", g.pick(URLSAFE, 70));
    add(
        "pypirc",
        format!("[pypi]\nusername = __token__\npassword = {pypi}\n"),
        vec![pypi],
    );
    let jwt = format!(
        "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
        g.pick(URLSAFE, 60),
        g.pick(URLSAFE, 43)
    );
    add("jwt", format!("id_token={jwt}&state=1"), vec![jwt.clone()]);
    add(
        "bearer",
        format!("> Authorization: Bearer {}", &jwt),
        vec![jwt],
    );
    let opaque = g.pick(URLSAFE, 32);
    add(
        "bearer-opaque",
        format!("curl -H 'Authorization: Bearer {opaque}' https://api.example.com/v1"),
        vec![opaque],
    );
    let basic = g.pick(B64, 28);
    add(
        "basic-auth",
        format!("Authorization: Basic {basic}="),
        vec![basic],
    );
    let cookie = g.pick(AN, 40);
    add(
        "cookie",
        format!("Cookie: session={cookie}; theme=dark"),
        vec![cookie],
    );
    let rsa_lines: Vec<String> = (0..12).map(|_| g.pick(B64, 64)).collect();
    add(
        "pem-rsa",
        format!(
            "-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----\n",
            rsa_lines.join("\n")
        ),
        rsa_lines.clone(),
    );
    add(
        "pem-truncated",
        format!(
            "$ head -5 key.pem\n-----BEGIN EC PRIVATE KEY-----\n{}\n{}\n$ ",
            rsa_lines[0], rsa_lines[1]
        ),
        rsa_lines[..2].to_vec(),
    );
    add("pem-encrypted", format!("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{}\n\n{}\n-----END RSA PRIVATE KEY-----", g.pick("0123456789ABCDEF", 32), rsa_lines[2..6].join("\n")), rsa_lines[2..6].to_vec());
    add("openssh", format!("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n{}\n-----END OPENSSH PRIVATE KEY-----", rsa_lines[6..9].join("\n")), rsa_lines[6..9].to_vec());
    add("pem-yaml-indented", format!("tls:\n  key: |\n    -----BEGIN PRIVATE KEY-----\n    {}\n    {}\n    -----END PRIVATE KEY-----\n", rsa_lines[9], rsa_lines[10]), rsa_lines[9..11].to_vec());
    let pw = "Tr0ub4dor&3x!";
    add(
        "dotenv-password",
        format!("DB_USER=app\nDB_PASSWORD={pw}\n"),
        vec![pw.into()],
    );
    add(
        "yaml-password",
        "database:\n  password: \"correct horse battery\"\n".into(),
        vec!["correct horse battery".into()],
    );
    add(
        "low-entropy-secret",
        "SECRET_KEY=mysecretkey\n".into(),
        vec!["mysecretkey".into()],
    );
    add(
        "json-secret",
        "{\"client_secret\": \"qwe-RTY-uiop-1234\"}".into(),
        vec!["qwe-RTY-uiop-1234".into()],
    );
    add(
        "dsn",
        "SENTRY_DSN: https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/42".into(),
        vec!["https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/42".into()],
    );
    let k8s = "c3VwZXJzZWNyZXRwYXNzd29yZDEyMw==";
    add("k8s-secret", format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: {k8s}\n  api-token: {}\n", "dG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg=="), vec![k8s.into(), "dG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg==".into()]);
    let dauth = "dXNlcm5hbWU6c3VwZXJzZWNyZXQxMjM=";
    add(
        "docker-auths",
        format!("{{\"auths\": {{\"ghcr.io\": {{\"auth\": \"{dauth}\"}}}}}}"),
        vec![dauth.into()],
    );
    for (scheme, pw) in [
        ("postgres", "pG9xVv2s"),
        ("mysql", "my$qlPa55"),
        ("mongodb+srv", "m0ng0Pw!"),
        ("redis", "r3d1sPw"),
        ("amqp", "rabbitPw9"),
        ("git+https", "gitPw123x"),
    ] {
        add(
            "url-password",
            format!("connecting to {scheme}://admin:{pw}@host.internal:1234/db"),
            vec![pw.into()],
        );
    }
    add(
        "jdbc",
        "jdbc:sqlserver://db:1433;databaseName=app;user=sa;password=Sql$erverPw1;".into(),
        vec!["Sql$erverPw1".into()],
    );
    add(
        "jdbc-query",
        "jdbc:postgresql://db/app?user=app&password=JdbcPw-42".into(),
        vec!["JdbcPw-42".into()],
    );
    let qp = g.pick(AN, 30);
    add(
        "query-param",
        format!("GET /callback?code=abc&access_token={qp}&state=x HTTP/1.1"),
        vec![qp],
    );
    add(
        "curl-u",
        "curl -fsS -u deploy:Depl0y-Pw https://ci.example.com/api".into(),
        vec!["Depl0y-Pw".into()],
    );
    add(
        "netrc",
        "machine api.example.com login bot password N3trcPw99".into(),
        vec!["N3trcPw99".into()],
    );
    add(
        "cli-flag",
        "docker login --username bot --password D0ckerPw77 registry.example.com".into(),
        vec!["D0ckerPw77".into()],
    );
    add(
        "mysql-flag",
        "mysql -uroot -pR00tPw55 -h db".into(),
        vec!["R00tPw55".into()],
    );
    let tg = format!("{}:AA{}", g.pick("0123456789", 10), g.pick(URLSAFE, 33));
    add(
        "telegram",
        format!("https://api.telegram.org/bot{tg}/getMe"),
        vec![tg],
    );
    let sg = format!("SG.{}.{}", g.pick(URLSAFE, 22), g.pick(URLSAFE, 43));
    add(
        "sendgrid",
        format!("sg = SendGridAPIClient('{sg}')"),
        vec![sg],
    );
    let dop = format!("dop_v1_{}", g.pick(HEX, 64));
    add(
        "digitalocean",
        format!("doctl auth init -t {dop}"),
        vec![dop],
    );
    let shp = format!("shpat_{}", g.pick(HEX, 32));
    add(
        "shopify",
        format!("X-Shopify-Access-Token: {shp}"),
        vec![shp],
    );
    let age = format!(
        "AGE-SECRET-KEY-1{}",
        g.pick("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)
    );
    add("age", format!("# created: 2024\n{age}"), vec![age]);
    let tf = format!("{}.atlasv1.{}", g.pick(LOWER_AN, 14), g.pick(LOWER_AN, 67));
    add(
        "terraform",
        format!("credentials \"app.terraform.io\" {{ token = \"{tf}\" }}"),
        vec![tf],
    );
    let vault = format!("hvs.{}", g.pick(URLSAFE, 95));
    add("vault", format!("VAULT_TOKEN={vault}"), vec![vault]);
    v
}

fn synthetic_benign() -> Vec<(String, String)> {
    let mut g = Rng(0x1234_5678_9abc_def1);
    let mut v: Vec<(String, String)> = Vec::new();
    let mut add = |kind: &str, text: String| v.push((kind.to_string(), text));
    for _ in 0..3 {
        add(
            "git-sha",
            format!(
                "commit {}\nMerge: {} {}",
                g.pick(HEX, 40),
                g.pick(HEX, 7),
                g.pick(HEX, 7)
            ),
        );
    }
    add(
        "git-log",
        format!(
            "{} Fix parser (#1234)\n{} Bump deps",
            g.pick(HEX, 7),
            g.pick(HEX, 7)
        ),
    );
    add(
        "uuid",
        format!(
            "request_id={}-{}-{}-{}-{}",
            g.pick(HEX, 8),
            g.pick(HEX, 4),
            g.pick(HEX, 4),
            g.pick(HEX, 4),
            g.pick(HEX, 12)
        ),
    );
    add(
        "uuid-json",
        format!(
            "{{\"id\": \"{}-{}-4{}-a{}-{}\", \"status\": \"ok\"}}",
            g.pick(HEX, 8),
            g.pick(HEX, 4),
            g.pick(HEX, 3),
            g.pick(HEX, 3),
            g.pick(HEX, 12)
        ),
    );
    add(
        "npm-integrity",
        format!("\"integrity\": \"sha512-{}==\"", g.pick(B64, 86)),
    );
    add("package-lock", format!("      \"resolved\": \"https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz\",\n      \"integrity\": \"sha1-{}=\"", g.pick(B64, 27)));
    add("go-sum", format!("github.com/stretchr/testify v1.9.0 h1:{}=\ngithub.com/stretchr/testify v1.9.0/go.mod h1:{}=", g.pick(B64, 43), g.pick(B64, 43)));
    add("cargo-lock", format!("[[package]]\nname = \"serde\"\nversion = \"1.0.197\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{}\"", g.pick(HEX, 64)));
    add(
        "base64-image",
        format!(
            "<img src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAA{}\"/>",
            g.pick(B64, 400)
        ),
    );
    add(
        "css-data-uri",
        format!(
            "background: url(data:image/svg+xml;base64,PHN2ZyB4bWxucz0i{});",
            g.pick(B64, 200)
        ),
    );
    add(
        "ssh-pubkey",
        format!(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{} user@host",
            g.pick(B64, 43)
        ),
    );
    add(
        "ssh-rsa-pubkey",
        format!(
            "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{} ci@runner",
            g.pick(B64, 300)
        ),
    );
    add(
        "pem-public",
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----",
            g.pick(B64, 64),
            g.pick(B64, 64)
        ),
    );
    add(
        "certificate",
        format!(
            "-----BEGIN CERTIFICATE-----\nMIID{}\n{}\n-----END CERTIFICATE-----",
            g.pick(B64, 60),
            g.pick(B64, 64)
        ),
    );
    add("aws-example-key", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into());
    add("aws-arn", "arn:aws:iam::123456789012:role/deploy".into());
    add(
        "docker-digest",
        format!("Digest: sha256:{}", g.pick(HEX, 64)),
    );
    add(
        "placeholder-env",
        "API_KEY=${API_KEY}\nDATABASE_URL=$DATABASE_URL\nTOKEN=<your-token>\nPASSWORD=changeme\n"
            .into(),
    );
    add(
        "placeholder-yaml",
        "password: \"{{ .Values.password }}\"\ntoken: ${{ secrets.GITHUB_TOKEN }}\n".into(),
    );
    add("code", "let token = env::var(\"GITHUB_TOKEN\")?;\nif password.len() < 8 { return Err(TooShort); }\n".into());
    add(
        "code2",
        "const secretKey = config.secretKey;\nself.api_key = api_key\n".into(),
    );
    add("url-no-password", "Downloading https://static.crates.io/crates/serde/serde-1.0.197.crate\ngit clone git@github.com:rust-lang/cargo.git".into());
    add(
        "url-user-only",
        "ssh://git@github.com/org/repo.git and https://user@example.com/path".into(),
    );
    add(
        "token-counts",
        "usage: prompt_tokens=1532 completion_tokens=211 total_tokens=1743 max_tokens=4096".into(),
    );
    add("cargo-build", "   Compiling tokio v1.37.0\n   Compiling warden-daemon v0.1.0 (/work/daemon)\n    Finished `dev` profile [unoptimized + debuginfo] target(s) in 42.17s".into());
    add(
        "test-output",
        "test redact::tests::marker_shape ... ok\ntest result: ok. 12 passed; 0 failed; 0 ignored"
            .into(),
    );
    add(
        "compiler-error",
        "error[E0425]: cannot find value `secret_key` in this scope\n  --> src/main.rs:10:5".into(),
    );
    add(
        "key-lengths",
        "key_length = 32\nsecret_length = X25519.secret_length\nkeySize: 2048".into(),
    );
    add("markdown", "Set the `API_KEY` environment variable to your key. The password must be at least 12 characters.".into());
    add(
        "hex-color-hash",
        format!("build-id: {} sha1={}", g.pick(HEX, 32), g.pick(HEX, 40)),
    );
    add(
        "version-strings",
        "node v20.11.1 npm 10.2.4 rustc 1.85.0 (4d91de4e4 2025-02-17)".into(),
    );
    add(
        "jwt-like-but-not",
        "eyJ is the base64 of {\" and that is all".into(),
    );
    add(
        "gpg-fingerprint",
        "gpg: using RSA key 4AEE18F83AFDEB23 fingerprint: 3B4F E6AC 97A2 4A1D".into(),
    );
    v
}

fn load_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for r in read_jsonl("corpus/secrets.jsonl") {
        let label = r["label"].as_str().expect("label");
        cases.push(Case {
            source: "corpus",
            kind: r["kind"].as_str().unwrap_or("?").to_string(),
            text: r["text"].as_str().expect("text").to_string(),
            secrets: r["secrets"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            benign: label == "benign",
        });
    }
    let rows = read_jsonl("peer/gitleaks-vectors.jsonl");
    assert!(
        rows.len() > 1000,
        "gitleaks vectors look truncated: {} rows",
        rows.len()
    );
    for r in rows.into_iter().filter(|r| r.get("_meta").is_none()) {
        let label = r["label"].as_str().expect("label");
        let (secrets, benign) = match label {
            "secret" => (
                vec![r["secret"].as_str().expect("secret").to_string()],
                false,
            ),
            "benign" => (vec![], true),
            _ => (vec![], false), // benign-gitleaks: reported, not scored
        };
        cases.push(Case {
            source: if label == "benign-gitleaks" {
                "gitleaks-unscored"
            } else {
                "gitleaks"
            },
            kind: r["rule"].as_str().unwrap_or("?").to_string(),
            text: r["text"].as_str().expect("text").to_string(),
            secrets,
            benign,
        });
    }
    for (kind, text, secrets) in synthetic_secrets() {
        cases.push(Case {
            source: "synthetic",
            kind,
            text,
            secrets,
            benign: false,
        });
    }
    for (kind, text) in synthetic_benign() {
        cases.push(Case {
            source: "synthetic",
            kind,
            text,
            secrets: vec![],
            benign: true,
        });
    }
    cases
}

fn redactor() -> Redactor {
    Redactor::new(&RedactSettings {
        env_secrets: false,
        ..RedactSettings::default()
    })
}

#[test]
fn corpus_recall_and_false_positive_rate() {
    let r = redactor();
    let cases = load_cases();
    let (mut pos, mut caught, mut neg, mut fp) = (0usize, 0usize, 0usize, 0usize);
    let (mut unscored, mut unscored_changed) = (0usize, 0usize);
    let mut misses = Vec::new();
    let mut fps = Vec::new();
    let mut per_source: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for c in &cases {
        let (out, _) = r.redact(&c.text);
        if c.source == "gitleaks-unscored" {
            unscored += 1;
            unscored_changed += usize::from(out != c.text);
            continue;
        }
        if c.benign {
            neg += 1;
            if out != c.text {
                fp += 1;
                fps.push(format!(
                    "[{}:{}] {:?}\n    -> {:?}",
                    c.source, c.kind, c.text, out
                ));
            }
        } else {
            pos += 1;
            let e = per_source.entry(c.source).or_default();
            e.0 += 1;
            let ok = !c.secrets.is_empty() && c.secrets.iter().all(|s| !out.contains(s.as_str()));
            if ok {
                caught += 1;
                e.1 += 1;
            } else {
                misses.push(format!(
                    "[{}:{}] {:?}\n    -> {:?}",
                    c.source, c.kind, c.text, out
                ));
            }
        }
    }
    for m in &misses {
        println!("MISS {m}");
    }
    for f in &fps {
        println!("FALSE POSITIVE {f}");
    }
    let recall = caught as f64 / pos as f64;
    let fpr = fp as f64 / neg as f64;
    for (src, (n, k)) in &per_source {
        println!(
            "recall[{src}] = {k}/{n} = {:.2}%",
            100.0 * *k as f64 / *n as f64
        );
    }
    println!("recall = {caught}/{pos} = {:.2}%", 100.0 * recall);
    println!("false positives = {fp}/{neg} = {:.2}%", 100.0 * fpr);
    println!("benign-gitleaks (unscored): {unscored_changed}/{unscored} redacted");
    assert!(recall >= 0.99, "recall {:.2}% < 99%", 100.0 * recall);
    assert!(fpr <= 0.02, "false-positive rate {:.2}% > 2%", 100.0 * fpr);
}

#[test]
fn corpus_through_the_stream_matches_whole_text() {
    // every scored corpus row, concatenated and fed in awkward chunks, gives
    // the same output as redacting the whole text at once
    let r = redactor();
    let cases = load_cases();
    let mut text = String::new();
    for c in cases
        .iter()
        .filter(|c| c.source != "gitleaks-unscored")
        .take(600)
    {
        text.push_str(&c.text);
        text.push_str("\n\n");
    }
    let whole = r.redact(&text).0;
    for chunk in [7usize, 4093] {
        let mut s = StreamRedactor::new(r.clone());
        let mut out = Vec::new();
        for c in text.as_bytes().chunks(chunk) {
            out.extend(s.push(c));
        }
        out.extend(s.finish());
        let out = String::from_utf8(out).expect("utf-8 in, utf-8 out");
        assert!(
            out == whole,
            "chunk size {chunk}: stream output differs from whole-text output"
        );
    }
}

#[test]
fn markers_round_trip_through_restore() {
    let r = redactor();
    for (kind, text, _) in synthetic_secrets() {
        let (red, findings) = r.redact(&text);
        assert!(!findings.is_empty(), "{kind}");
        assert_eq!(r.restore_markers(&red).unwrap(), text, "{kind}");
    }
}

/// `warden redact` runs in-process (no daemon: none is started here),
/// exits 0 with or without findings, and `--json` never prints values.
#[test]
fn cli_redacts_stdin_without_a_daemon() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let run = |args: &[&str], input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_warden-under-test"))
            .arg("redact")
            .args(args)
            .env("WARDEN_SOCKET", "/nonexistent/warden.sock")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn warden");
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stderr,
        )
    };
    let secret = "glpat-Gejkc5bJFIoxSLivuGvI";
    let input = format!("clean line\nGITLAB_TOKEN={secret}\n\u{1F600} done\n");
    let (code, out, err) = run(&["--no-env"], input.as_bytes());
    assert_eq!(code, Some(0), "stderr: {}", String::from_utf8_lossy(&err));
    assert!(!out.contains(secret));
    assert!(
        out.starts_with("clean line\nGITLAB_TOKEN=[REDACTED:gitlab-token:")
            && out.ends_with("]\n\u{1F600} done\n"),
        "{out}"
    );
    let (code, out, _) = run(&["--json", "--no-env"], input.as_bytes());
    assert_eq!(code, Some(0));
    assert!(!out.contains(secret));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["redactions"], 1);
    assert_eq!(v["findings"][0]["rule"], "gitlab-token");
    let start = input.find(secret).unwrap();
    assert_eq!(v["findings"][0]["start"], start);
    assert_eq!(v["findings"][0]["end"], start + secret.len());
    let (code, out, _) = run(&["--no-env"], b"nothing secret here\n");
    assert_eq!((code, out.as_str()), (Some(0), "nothing secret here\n"));
    let (code, _, err) = run(&["--policy", "/nonexistent/policy.toml"], b"x");
    assert_eq!(code, Some(125));
    assert!(String::from_utf8_lossy(&err).contains("redact"));
}

/// Vendor tokens glued to their surroundings (red-team round 2): every
/// gitleaks `secret` whose bare value the redactor finds on its own is put
/// in contexts where a `\b` word boundary fails (an underscore, a JSON
/// `\n` escape, a percent-encoded byte, a letter) and in ordinary ones (a
/// URL path, a trailing underscore). Prints recall per context and the
/// rules that miss; asserts >= 99% for the escape, underscore and URL
/// contexts. Tokens glued to a letter (before) or an underscore (after) are
/// caught only for distinctive prefixes (`AKIA`, `sk_live_`, `glpat-`,
/// JWTs): short or hex/base64-like ones (Twilio `SK`, `key-`, `hf_`, the
/// base64 of a JWT) keep a boundary on purpose, since inside words and
/// blobs they are mostly not tokens; those contexts assert a floor only
/// (2026-11 values: 81.5% and 54.0%, against 69.4% and 4.9% with `\b`).
#[test]
fn glued_vendor_tokens_recall() {
    let r = redactor();
    let mut secrets: Vec<(String, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in read_jsonl("peer/gitleaks-vectors.jsonl") {
        if row["label"] != "secret" {
            continue;
        }
        let s = row["secret"].as_str().unwrap_or("").to_string();
        // multi-line and spaced secrets (key blocks) have no "glued" form
        if s.len() < 12 || s.contains(char::is_whitespace) || !seen.insert(s.clone()) {
            continue;
        }
        if r.redact(&s).0.contains(s.as_str()) {
            continue; // found only with its name (`api_key = ...`): not a vendor token
        }
        secrets.push((row["rule"].as_str().unwrap_or("?").to_string(), s));
    }
    assert!(
        secrets.len() > 300,
        "too few standalone tokens: {}",
        secrets.len()
    );
    type Ctx = (&'static str, fn(&str) -> String, f64);
    let contexts: [Ctx; 7] = [
        ("underscore", |s| format!("export DEPLOY_{s}\n"), 0.99),
        (
            "json-escape",
            |s| format!("{{\"log\": \"starting\\n{s}\\nok\"}}"),
            0.99,
        ),
        (
            "percent",
            |s| format!("GET /cb?state=a%3D{s}%26b HTTP/1.1"),
            0.99,
        ),
        (
            "url-path",
            |s| format!("https://api.example.com/v1/{s}/items"),
            0.99,
        ),
        (
            "trailing-underscore",
            |s| format!("value {s}_backup\n"),
            0.80,
        ),
        ("letter", |s| format!("x{s}\n"), 0.50),
        ("base64-ish", |s| format!("Zm9v{s}==\n"), 0.50),
    ];
    let mut failed = Vec::new();
    for (name, make, want) in contexts {
        let mut caught = 0;
        let mut misses: Vec<String> = Vec::new();
        let mut missed_rules: std::collections::BTreeMap<&str, usize> = Default::default();
        for (rule, s) in &secrets {
            let text = make(s);
            if !r.redact(&text).0.contains(s.as_str()) {
                caught += 1;
            } else {
                *missed_rules.entry(rule.as_str()).or_default() += 1;
                if misses.len() < 3 {
                    misses.push(format!("[{rule}] {text:?}"));
                }
            }
        }
        let recall = caught as f64 / secrets.len() as f64;
        println!(
            "glued[{name}] = {caught}/{} = {:.2}%",
            secrets.len(),
            100.0 * recall
        );
        for m in &misses {
            println!("  miss {m}");
        }
        if !missed_rules.is_empty() {
            println!("  missed by rule: {missed_rules:?}");
        }
        if recall < want {
            failed.push(format!(
                "{name}: {:.2}% < {:.0}%",
                100.0 * recall,
                100.0 * want
            ));
        }
    }
    assert!(failed.is_empty(), "glued recall too low: {failed:?}");
}
