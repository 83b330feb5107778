//! The scanner: one Aho-Corasick pass (ASCII case-insensitive) over the
//! input finds every rule keyword, keyed-name trigger, `-----BEGIN`, known
//! secret value and existing marker; each rule's regex then runs only on the
//! lines around its own keyword hits. Findings are merged into disjoint
//! ranges; ranges inside existing markers are left alone, so a marker never
//! re-matches.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use regex::bytes::{Regex, RegexBuilder};

use super::rules::{Post, RuleDef, Window, LINE_CAP, RULES};
use super::{entropy, k8s, keyed, known, pem, PiiSettings, RedactError};

/// What a keyword hit triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Rule(usize),
    Keyed,
    Pem,
    K8s,
    Known,
    Marker,
}

/// A raw finding: the secret's range, the range that must stay together
/// with it in a stream (its name, for keyed secrets), rule, priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    pub ctx_start: usize,
    pub start: usize,
    pub end: usize,
    pub rule: &'static str,
    pub prio: u8,
    /// A private-key block without its END line, ending at the input's end.
    pub open_block: bool,
}

/// Values at least this long (bytes) are not re-read for names inside them.
const LONG_VALUE: usize = 128;

/// Marker prefix searched for existing markers.
pub(crate) const MARKER_PREFIX: &str = "[REDACTED:";

/// The compiled scanner (shared by every session).
#[derive(Debug)]
pub(crate) struct Engine {
    ac: AhoCorasick,
    /// Per AC pattern: what it triggers.
    targets: Vec<Vec<Target>>,
    /// Per AC pattern: the exact bytes of a known value (case-sensitive check).
    known_bytes: Vec<Option<Vec<u8>>>,
    rules: Vec<(RuleDef, Regex)>,
    marker_re: Regex,
    pii: Vec<(&'static str, Regex)>,
    private_ips: Vec<(u32, u32)>,
    internal_domains: Vec<String>,
}

fn bytes_regex(p: &str) -> Result<Regex, RedactError> {
    RegexBuilder::new(p)
        .unicode(false)
        .size_limit(32 << 20)
        .build()
        .map_err(|e| RedactError::Internal(format!("rule pattern {p:?}: {e}")))
}

impl Engine {
    /// Builds the scanner from the built-in rules minus `disabled`, the
    /// known secret `values`, and the PII settings.
    pub(crate) fn build(
        disabled: &[String],
        values: &[Vec<u8>],
        pii: &PiiSettings,
    ) -> Result<Engine, RedactError> {
        let mut pats: Vec<Vec<u8>> = Vec::new();
        let mut targets: Vec<Vec<Target>> = Vec::new();
        let mut known_bytes: Vec<Option<Vec<u8>>> = Vec::new();
        let mut index = std::collections::HashMap::<Vec<u8>, usize>::new();
        let mut add =
            |p: &[u8], t: Target, pats: &mut Vec<Vec<u8>>, targets: &mut Vec<Vec<Target>>| {
                let key = p.to_ascii_lowercase();
                let i = *index.entry(key.clone()).or_insert_with(|| {
                    pats.push(key);
                    targets.push(Vec::new());
                    pats.len() - 1
                });
                if !targets[i].contains(&t) {
                    targets[i].push(t);
                }
                i
            };
        let mut rules = Vec::new();
        for d in RULES {
            if disabled.iter().any(|x| x == d.id) {
                continue;
            }
            let re = bytes_regex(d.pattern)?;
            let ri = rules.len();
            rules.push((*d, re));
            for k in d.keywords {
                add(k.as_bytes(), Target::Rule(ri), &mut pats, &mut targets);
            }
        }
        let keyed_on = !disabled.iter().any(|x| x == "secret-assignment");
        if keyed_on {
            for k in keyed::TRIGGERS {
                add(k.as_bytes(), Target::Keyed, &mut pats, &mut targets);
            }
        }
        if !disabled.iter().any(|x| x == "private-key") {
            add(b"-----begin ", Target::Pem, &mut pats, &mut targets);
        }
        if !disabled.iter().any(|x| x == "kubernetes-secret") {
            add(b"kind:", Target::K8s, &mut pats, &mut targets);
        }
        add(
            MARKER_PREFIX.as_bytes(),
            Target::Marker,
            &mut pats,
            &mut targets,
        );
        let mut exact: Vec<(usize, Vec<u8>)> = Vec::new();
        for v in values {
            for f in known::forms(v) {
                // each form is its own pattern so that its exact bytes can be checked
                pats.push(f.to_ascii_lowercase());
                targets.push(vec![Target::Known]);
                exact.push((pats.len() - 1, f));
            }
        }
        known_bytes.resize(pats.len(), None);
        for (i, f) in exact {
            known_bytes[i] = Some(f);
        }
        let ac = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&pats)
            .or_else(|_| {
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::Standard)
                    .build(&pats)
            })
            .map_err(|e| RedactError::Internal(format!("keyword automaton: {e}")))?;
        let mut pii_res = Vec::new();
        if pii.email {
            pii_res.push(("email-address", bytes_regex(super::rules::EMAIL)?));
        }
        if pii.phone {
            pii_res.push(("phone-number", bytes_regex(super::rules::PHONE)?));
        }
        let mut private_ips = Vec::new();
        for c in &pii.private_ips {
            private_ips.push(parse_cidr(c)?);
        }
        if !private_ips.is_empty() {
            pii_res.push(("private-ip", bytes_regex(super::rules::IPV4)?));
        }
        let internal_domains: Vec<String> = pii
            .internal_domains
            .iter()
            .map(|d| d.trim_start_matches('.').to_ascii_lowercase())
            .filter(|d| !d.is_empty())
            .collect();
        if !internal_domains.is_empty() {
            let alts: Vec<String> = internal_domains.iter().map(|d| regex::escape(d)).collect();
            let p = format!(r"(?i)\b((?:[a-z0-9-]+\.)*(?:{}))\b", alts.join("|"));
            pii_res.push(("internal-domain", bytes_regex(&p)?));
        }
        Ok(Engine {
            ac,
            targets,
            known_bytes,
            rules,
            marker_re: bytes_regex(r"\[REDACTED:[a-z0-9-]{1,64}:[0-9a-f]{12}\]")?,
            pii: pii_res,
            private_ips,
            internal_domains,
        })
    }

    /// Scans `text`; returns disjoint hits sorted by start.
    pub(crate) fn scan(&self, text: &[u8]) -> Vec<Hit> {
        let mut rule_hits: Vec<Vec<usize>> = vec![Vec::new(); self.rules.len()];
        let mut keyed_hits: Vec<usize> = Vec::new();
        let mut pem_hits: Vec<usize> = Vec::new();
        let mut k8s_hits: Vec<usize> = Vec::new();
        let mut marker_hits: Vec<usize> = Vec::new();
        let mut hits: Vec<Hit> = Vec::new();
        for m in self.ac.find_overlapping_iter(text) {
            let pid = m.pattern().as_usize();
            for t in &self.targets[pid] {
                match *t {
                    Target::Rule(r) => {
                        let v = &mut rule_hits[r];
                        if v.last() != Some(&m.start()) {
                            v.push(m.start());
                        }
                    }
                    Target::Keyed => keyed_hits.push(m.start()),
                    Target::Pem => pem_hits.push(m.start()),
                    Target::K8s => k8s_hits.push(m.start()),
                    Target::Marker => marker_hits.push(m.start()),
                    Target::Known => {
                        if let Some(exact) = &self.known_bytes[pid] {
                            if &text[m.start()..m.end()] == exact.as_slice() {
                                hits.push(Hit {
                                    ctx_start: m.start(),
                                    start: m.start(),
                                    end: m.end(),
                                    rule: "known-secret",
                                    prio: 1,
                                    open_block: false,
                                });
                            }
                        }
                    }
                }
            }
        }
        for (ri, positions) in rule_hits.iter().enumerate() {
            if positions.is_empty() {
                continue;
            }
            let (def, re) = &self.rules[ri];
            let mut last_end = 0usize;
            for &pos in positions {
                if pos < last_end {
                    continue; // inside a window already scanned
                }
                let (ws, we) = window(text, pos, def.window);
                last_end = we;
                if def.needs != 0 && !text[pos..we].contains(&def.needs) {
                    continue;
                }
                for caps in re.captures_iter(&text[ws..we]) {
                    let Some(g) = caps.get(def.group) else {
                        continue;
                    };
                    if !def.edges_ok(text, ws + g.start(), ws + g.end()) {
                        continue;
                    }
                    let whole = caps.get(0).map_or(g.start(), |m| m.start());
                    let (mut gs, mut ge) = (g.start(), g.end());
                    match def.post {
                        Post::None => {}
                        Post::NotProse => {
                            if !Post::not_prose(g.as_bytes()) {
                                continue;
                            }
                        }
                        Post::NeedsDigit => {
                            if !g.as_bytes().iter().any(u8::is_ascii_digit) {
                                continue;
                            }
                        }
                        Post::UserPass => match keyed::user_pass(g.as_bytes()) {
                            Some((s, e)) => {
                                ge = gs + e;
                                gs += s;
                            }
                            None => continue,
                        },
                    }
                    let secret = &text[ws + gs..ws + ge];
                    if def.min_entropy > 0.0 && entropy(secret) < def.min_entropy {
                        continue;
                    }
                    if def.placeholder_check && keyed::is_template(secret) {
                        continue;
                    }
                    if def.id == "aws-access-key-id" && secret.ends_with(b"EXAMPLE") {
                        continue;
                    }
                    hits.push(Hit {
                        ctx_start: ws + whole,
                        start: ws + gs,
                        end: ws + ge,
                        rule: def.id,
                        prio: 3,
                        open_block: false,
                    });
                }
            }
        }
        keyed_hits.sort_unstable();
        let mut last_key = (usize::MAX, usize::MAX);
        let mut long_value_end = 0;
        for pos in keyed_hits {
            if pos < long_value_end {
                continue; // inside a long value already read
            }
            let span = keyed::key_span(text, pos);
            if span == last_key {
                continue;
            }
            last_key = span;
            let mut scanned = 0;
            let found = keyed::parse_at(text, span.0, span.1, &mut scanned);
            if scanned >= span.1 + LONG_VALUE {
                long_value_end = scanned;
            }
            if let Some(k) = found {
                hits.push(Hit {
                    ctx_start: k.ctx_start,
                    start: k.start,
                    end: k.end,
                    rule: k.rule,
                    prio: 2,
                    open_block: false,
                });
            }
        }
        for pos in pem_hits {
            if let Some(p) = pem::scan_at(text, pos) {
                hits.push(Hit {
                    ctx_start: p.start,
                    start: p.start,
                    end: p.end,
                    rule: "private-key",
                    prio: 4,
                    open_block: !p.complete && p.end + 2 >= text.len(),
                });
            }
        }
        let mut doc_end = 0;
        for pos in k8s_hits {
            if pos < doc_end {
                continue; // that document was scanned whole
            }
            let (values, end) = k8s::scan_at(text, pos);
            doc_end = end;
            for (s, e) in values {
                hits.push(Hit {
                    ctx_start: s.min(pos),
                    start: s,
                    end: e,
                    rule: "kubernetes-secret",
                    prio: 3,
                    open_block: false,
                });
            }
        }
        for (rule, re) in &self.pii {
            for caps in re.captures_iter(text) {
                let Some(g) = caps.get(1) else { continue };
                if *rule == "private-ip" && !self.ip_listed(g.as_bytes()) {
                    continue;
                }
                if *rule == "internal-domain" && !self.domain_listed(g.as_bytes()) {
                    continue;
                }
                hits.push(Hit {
                    ctx_start: g.start(),
                    start: g.start(),
                    end: g.end(),
                    rule,
                    prio: 0,
                    open_block: false,
                });
            }
        }
        let mut markers: Vec<(usize, usize)> = Vec::new();
        for pos in marker_hits {
            if let Some(m) = self.marker_re.find_at(text, pos) {
                if m.start() == pos {
                    markers.push((m.start(), m.end()));
                }
            }
        }
        merge(subtract_markers(hits, &markers))
    }

    fn ip_listed(&self, ip: &[u8]) -> bool {
        let Some(v) = parse_ipv4(ip) else {
            return false;
        };
        self.private_ips.iter().any(|&(net, mask)| v & mask == net)
    }

    fn domain_listed(&self, host: &[u8]) -> bool {
        let h = String::from_utf8_lossy(host).to_ascii_lowercase();
        self.internal_domains
            .iter()
            .any(|d| h == *d || h.ends_with(&format!(".{d}")))
    }
}

/// The byte window around a keyword hit at `pos`.
fn window(text: &[u8], pos: usize, w: Window) -> (usize, usize) {
    let lo = pos.saturating_sub(LINE_CAP);
    let start = text[lo..pos]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(lo, |i| lo + i + 1);
    let extra = match w {
        Window::Line => 0,
    };
    let mut end = pos;
    let mut lines_left = extra + 1;
    let cap = (pos + LINE_CAP * (extra + 1)).min(text.len());
    while end < cap {
        if text[end] == b'\n' {
            lines_left -= 1;
            if lines_left == 0 {
                break;
            }
        }
        end += 1;
    }
    (start, end)
}

/// Removes the parts of hits that lie inside existing markers.
fn subtract_markers(hits: Vec<Hit>, markers: &[(usize, usize)]) -> Vec<Hit> {
    if markers.is_empty() {
        return hits;
    }
    let mut out = Vec::with_capacity(hits.len());
    for h in hits {
        let mut pieces = vec![(h.start, h.end)];
        for &(ms, me) in markers {
            let mut next = Vec::new();
            for (s, e) in pieces {
                if me <= s || ms >= e {
                    next.push((s, e));
                    continue;
                }
                if s < ms {
                    next.push((s, ms));
                }
                if me < e {
                    next.push((me, e));
                }
            }
            pieces = next;
        }
        for (s, e) in pieces {
            // a lone quote or separator left next to a marker is no secret
            if e - s == 1 {
                continue;
            }
            out.push(Hit {
                start: s,
                end: e,
                ctx_start: h.ctx_start.min(s),
                ..h.clone()
            });
        }
    }
    out
}

/// Merges overlapping hits into disjoint ranges; the merged range keeps the
/// rule of its highest-priority part.
fn merge(mut hits: Vec<Hit>) -> Vec<Hit> {
    hits.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<Hit> = Vec::with_capacity(hits.len());
    for h in hits {
        if let Some(last) = out.last_mut() {
            if h.start < last.end {
                if h.prio > last.prio {
                    last.rule = h.rule;
                    last.prio = h.prio;
                }
                if h.end > last.end {
                    last.end = h.end;
                    last.open_block = h.open_block;
                }
                last.ctx_start = last.ctx_start.min(h.ctx_start);
                continue;
            }
        }
        out.push(h);
    }
    out
}

fn parse_ipv4(s: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(s).ok()?;
    let addr: std::net::Ipv4Addr = s.parse().ok()?;
    Some(u32::from(addr))
}

/// Parses `a.b.c.d/n` into (network, mask).
fn parse_cidr(c: &str) -> Result<(u32, u32), RedactError> {
    let bad = || {
        RedactError::Settings(format!(
            "pii.private_ips: {c:?} is not an IPv4 CIDR (a.b.c.d/n)"
        ))
    };
    let (ip, bits) = c.split_once('/').unwrap_or((c, "32"));
    let ip = parse_ipv4(ip.trim().as_bytes()).ok_or_else(bad)?;
    let bits: u32 = bits.trim().parse().map_err(|_| bad())?;
    if bits > 32 {
        return Err(bad());
    }
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    Ok((ip & mask, mask))
}
