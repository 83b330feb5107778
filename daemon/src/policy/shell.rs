//! Shell parsing with the tree-sitter bash grammar, quote and backslash
//! removal (bash(1), "QUOTING" and "Quote Removal"), and the walk over every
//! simple command, pipeline, list, subshell, substitution, heredoc,
//! redirection and assignment.
//!
//! Everything the walk does not understand fails closed: the command gets a
//! `write` part whose decision is at least `ask` (see [`Analyzer::fail`]).

use std::cell::RefCell;

use tree_sitter::{Node, Parser};

use super::{ClassifyContext, Part, PartDetail, Tier};

/// Longest command string classified, bytes. Longer input fails closed.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// Deepest nesting of syntax nodes plus `sh -c` / `eval` levels.
pub const MAX_DEPTH: usize = 48;
/// Most simple commands classified in one command string.
pub const MAX_COMMANDS: usize = 512;

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parses `src` with tree-sitter-bash. `None` when the parser could not be
/// set up or gave no tree (treated as a parse error by the caller).
fn parse(src: &str) -> Option<tree_sitter::Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut p = Parser::new();
            p.set_language(&tree_sitter_bash::LANGUAGE.into()).ok()?;
            *slot = Some(p);
        }
        slot.as_mut()?.parse(src, None)
    })
}

/// One shell word after quote removal, with what is statically unknown about it.
#[derive(Debug, Clone, Default)]
pub struct Word {
    /// The text after quote and backslash removal (expansions kept verbatim).
    pub text: String,
    /// Contains a parameter, arithmetic or command expansion: its value is
    /// only known at run time.
    pub dynamic: bool,
    /// Contains an unquoted glob character (`*`, `?`, `[...]`).
    pub glob: bool,
    /// Contains an unquoted brace expansion (`{a,b}`, `{1..3}`).
    pub brace: bool,
    /// Starts with an unquoted `~` (tilde expansion).
    pub tilde: bool,
    /// Contains an ANSI-C quoted part (`$'...'`).
    pub ansi: bool,
}

impl Word {
    /// Appends `next`, the rest of the same shell word.
    fn append(&mut self, next: Word) {
        self.text.push_str(&next.text);
        self.dynamic |= next.dynamic;
        self.glob |= next.glob;
        self.brace |= next.brace;
        self.ansi |= next.ansi;
    }

    /// A static word with `text`.
    pub fn lit(text: &str) -> Word {
        Word {
            text: text.to_string(),
            ..Word::default()
        }
    }

    /// True when the word's run-time value(s) may differ from [`Word::text`]
    /// in a way that can turn it into an option or several words: an
    /// expansion, a brace expansion, or a glob whose first character is a
    /// glob character (a file named `--pre=x` matches `*`).
    pub fn opaque(&self) -> bool {
        self.dynamic || self.brace || (self.glob && self.text.starts_with(['*', '?', '[']))
    }

    /// True when the word is exactly its text at run time.
    pub fn is_static(&self) -> bool {
        !(self.dynamic || self.brace || self.glob || self.tilde)
    }
}

/// Non-ASCII characters that some terminals and tools treat as whitespace.
fn is_unicode_space(c: char) -> bool {
    matches!(
        c,
        '\u{85}' | '\u{a0}' | '\u{1680}' | '\u{180e}' | '\u{2000}'
            ..='\u{200b}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// Walks parsed shell source and collects classified [`Part`]s.
pub struct Analyzer<'c> {
    pub ctx: &'c ClassifyContext,
    /// The context after a `cd` in the command (its `cwd` changed; an
    /// absolute `cwd` lies outside the workspace or in `/tmp`).
    pub cd_ctx: Option<ClassifyContext>,
    pub parts: Vec<Part>,
    /// Reasons that concern the whole command (parse errors, bounds).
    pub reasons: Vec<String>,
    /// Set when any part could not be classified: the decision is then at
    /// least `ask`.
    pub unclassifiable: bool,
    /// Simple commands seen so far (bounded by [`MAX_COMMANDS`]).
    pub count: usize,
    /// Per part (same index): written paths, hosts, wrapper chain, install source.
    pub(crate) details: Vec<PartDetail>,
}

impl<'c> Analyzer<'c> {
    pub fn new(ctx: &'c ClassifyContext) -> Self {
        Analyzer {
            ctx,
            cd_ctx: None,
            parts: Vec::new(),
            reasons: Vec::new(),
            unclassifiable: false,
            count: 0,
            details: Vec::new(),
        }
    }

    /// Records that something could not be classified: a `write` part with
    /// `reason`, and the whole command's decision becomes at least `ask`.
    pub fn fail(&mut self, argv: Vec<String>, reason: impl Into<String>) {
        let reason = reason.into();
        self.unclassifiable = true;
        if !self.reasons.contains(&reason) {
            self.reasons.push(reason.clone());
        }
        self.push_part(Part {
            argv,
            tier: Tier::Write,
            reasons: vec![reason],
        });
    }

    /// Parses and walks `src` (a whole command string, or the string of a
    /// `sh -c` / `eval` at nesting `depth`).
    pub fn analyze(&mut self, src: &str, depth: usize) {
        if src.len() > MAX_INPUT_BYTES {
            return self.fail(
                vec![],
                format!("command longer than {MAX_INPUT_BYTES} bytes: not classified"),
            );
        }
        if depth > MAX_DEPTH {
            return self.fail(
                vec![],
                format!("nesting deeper than {MAX_DEPTH}: not classified"),
            );
        }
        if let Some(c) = src
            .chars()
            .find(|&c| c.is_control() && c != '\n' && c != '\t')
        {
            return self.fail(
                vec![],
                format!(
                    "control character U+{:04X} in command: not classified",
                    c as u32
                ),
            );
        }
        if src.trim().is_empty() {
            return self.fail(vec![], "empty command: not classified");
        }
        let Some(tree) = parse(src) else {
            return self.fail(vec![], "shell parser failed: not classified");
        };
        let root = tree.root_node();
        if root.has_error() {
            self.fail(vec![], "shell syntax error: not classified");
        }
        self.walk(src, root, depth);
    }

    fn text<'s>(src: &'s str, n: Node) -> &'s str {
        &src[n.byte_range()]
    }

    /// Walks a statement-level node.
    fn walk(&mut self, src: &str, node: Node, depth: usize) {
        if depth > MAX_DEPTH {
            return self.fail(
                vec![],
                format!("nesting deeper than {MAX_DEPTH}: not classified"),
            );
        }
        if self.count > MAX_COMMANDS {
            return;
        }
        if node.is_error() || node.is_missing() {
            return self.fail(
                vec![Self::text(src, node).chars().take(80).collect()],
                "shell syntax error: not classified",
            );
        }
        match node.kind() {
            "command" => self.command(src, node, depth),
            "variable_assignment" => self.assignment(src, node, depth, false),
            "declaration_command" => self.declaration(src, node, depth),
            "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                self.redirect(src, node, depth)
            }
            "comment"
            | "variable_name"
            | "test_operator"
            | "heredoc_start"
            | "heredoc_end"
            | "file_descriptor"
            | "special_variable_name"
            | "regex"
            | "extglob_pattern"
            | "number"
            | "heredoc_content"
            | "string_content" => {}
            "word"
            | "string"
            | "raw_string"
            | "ansi_c_string"
            | "translated_string"
            | "concatenation"
            | "simple_expansion"
            | "expansion"
            | "command_substitution"
            | "process_substitution"
            | "arithmetic_expansion"
            | "brace_expression"
            | "array" => {
                self.word(src, node, depth + 1);
            }
            "unset_command" => {
                self.push_part(Part {
                    argv: Self::text(src, node)
                        .split_whitespace()
                        .map(String::from)
                        .collect(),
                    tier: Tier::SafeRead,
                    reasons: vec!["unset: shell builtin".into()],
                });
            }
            "program"
            | "list"
            | "pipeline"
            | "subshell"
            | "compound_statement"
            | "do_group"
            | "negated_command"
            | "redirected_statement"
            | "if_statement"
            | "elif_clause"
            | "else_clause"
            | "while_statement"
            | "for_statement"
            | "c_style_for_statement"
            | "case_statement"
            | "case_item"
            | "function_definition"
            | "test_command"
            | "binary_expression"
            | "unary_expression"
            | "ternary_expression"
            | "postfix_expression"
            | "parenthesized_expression"
            | "variable_assignments"
            | "heredoc_body"
            | "subscript" => {
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.walk(src, child, depth + 1);
                }
                // Anonymous children can hide errors (MISSING tokens), and the
                // grammar accepts `;;` outside `case`, which bash rejects.
                let mut cur = node.walk();
                for child in node.children(&mut cur) {
                    if child.is_missing() || child.is_error() {
                        self.fail(vec![], "shell syntax error: not classified");
                    } else if child.kind() == ";;" && node.kind() != "case_item" {
                        self.fail(
                            vec![";;".into()],
                            "`;;` outside `case`: shell syntax error: not classified",
                        );
                    }
                }
            }
            other => self.fail(
                vec![Self::text(src, node).chars().take(80).collect()],
                format!("unsupported shell construct `{other}`: not classified"),
            ),
        }
    }

    /// Evaluates a word-like node: quote and backslash removal, and a walk
    /// of every substitution inside it.
    pub fn word(&mut self, src: &str, node: Node, depth: usize) -> Word {
        let mut w = Word::default();
        self.word_into(src, node, depth, &mut w, true);
        w
    }

    fn word_into(&mut self, src: &str, node: Node, depth: usize, w: &mut Word, first: bool) {
        if depth > MAX_DEPTH {
            w.dynamic = true;
            return self.fail(
                vec![],
                format!("nesting deeper than {MAX_DEPTH}: not classified"),
            );
        }
        let text = Self::text(src, node);
        match node.kind() {
            "word" => {
                if text.chars().any(is_unicode_space) {
                    self.fail(
                        vec![text.to_string()],
                        "non-ASCII whitespace outside quotes: not classified",
                    );
                }
                unquoted_word(text, w, first);
            }
            "number" | "variable_name" | "special_variable_name" => w.text.push_str(text),
            "raw_string" => {
                w.text.push_str(
                    text.strip_prefix('\'')
                        .unwrap_or(text)
                        .strip_suffix('\'')
                        .unwrap_or(""),
                );
            }
            "ansi_c_string" => {
                w.ansi = true;
                let inner = text
                    .strip_prefix("$'")
                    .and_then(|t| t.strip_suffix('\''))
                    .unwrap_or("");
                if !ansi_c_decode(inner, &mut w.text) {
                    w.dynamic = true;
                }
            }
            "string" | "translated_string" => {
                let start = node.start_byte() + if node.kind() == "string" { 1 } else { 2 };
                let end = node.end_byte().saturating_sub(1).max(start);
                let mut pos = start;
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    if child.start_byte() > pos {
                        dquote_unescape(&src[pos..child.start_byte()], &mut w.text);
                    }
                    match child.kind() {
                        "string_content" => dquote_unescape(Self::text(src, child), &mut w.text),
                        _ => self.word_into(src, child, depth + 1, w, false),
                    }
                    pos = child.end_byte().max(pos);
                }
                if end > pos {
                    dquote_unescape(&src[pos..end], &mut w.text);
                }
            }
            "concatenation" => {
                if raw_has_brace_expansion(text) {
                    w.brace = true;
                }
                let mut cur = node.walk();
                let mut first_child = first;
                let mut pos = node.start_byte();
                for child in node.named_children(&mut cur) {
                    // Unnamed pieces between children are literal text (`$`, `{`).
                    if child.start_byte() > pos {
                        unquoted_word(&src[pos..child.start_byte()], w, first_child);
                        first_child = false;
                    }
                    self.word_into(src, child, depth + 1, w, first_child);
                    first_child = false;
                    pos = child.end_byte().max(pos);
                }
                if node.end_byte() > pos {
                    unquoted_word(&src[pos..node.end_byte()], w, first_child);
                }
            }
            "brace_expression" => {
                w.brace = true;
                w.text.push_str(text);
            }
            "simple_expansion" | "expansion" | "arithmetic_expansion" | "array" => {
                w.dynamic = true;
                w.text.push_str(text);
                // the grammar leaves `${x:-`cmd`}` a plain word: bash runs
                // it; `${x@P}` expands x as a prompt, `$(...)` in it included
                if text.contains('`') || (node.kind() == "expansion" && text.contains("@P")) {
                    self.fail(
                        vec![text.to_string()],
                        "backquote or prompt expansion (`@P`) inside an expansion: not classified",
                    );
                }
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.walk_value(src, child, depth + 1);
                }
            }
            "command_substitution" | "process_substitution" => {
                w.dynamic = true;
                w.text.push_str(text);
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.walk(src, child, depth + 1);
                }
            }
            _ => {
                if node.is_error() || node.is_missing() {
                    self.fail(vec![text.to_string()], "shell syntax error: not classified");
                }
                w.dynamic = true;
                w.text.push_str(text);
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.walk_value(src, child, depth + 1);
                }
            }
        }
    }

    /// Walks a node inside an expansion for the substitutions it may contain.
    fn walk_value(&mut self, src: &str, node: Node, depth: usize) {
        match node.kind() {
            "command_substitution" | "process_substitution" => {
                let mut w = Word::default();
                self.word_into(src, node, depth, &mut w, false);
            }
            _ => {
                if depth > MAX_DEPTH {
                    return self.fail(
                        vec![],
                        format!("nesting deeper than {MAX_DEPTH}: not classified"),
                    );
                }
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.walk_value(src, child, depth + 1);
                }
            }
        }
    }

    fn command(&mut self, src: &str, node: Node, depth: usize) {
        self.count += 1;
        if self.count > MAX_COMMANDS {
            return self.fail(
                vec![],
                format!("more than {MAX_COMMANDS} commands: not classified"),
            );
        }
        let mut assigns: Vec<(String, Word)> = Vec::new();
        let mut argv: Vec<Word> = Vec::new();
        let mut name_ok = true;
        let mut redirects = Vec::new();
        // End of the last argument node: the grammar sometimes splits one
        // shell word into adjacent nodes (`a{b}\c`); bash sees one word.
        let mut last_end: Option<usize> = None;
        let mut cur = node.walk();
        for child in node.named_children(&mut cur) {
            let piece = match child.kind() {
                "variable_assignment" => {
                    let (n, v) = self.assignment_parts(src, child, depth);
                    assigns.push((n, v));
                    None
                }
                "file_redirect" | "herestring_redirect" | "heredoc_redirect" => {
                    redirects.push(child);
                    None
                }
                "command_name" => match child.named_child(0) {
                    Some(inner) => Some(self.word(src, inner, depth + 1)),
                    None => {
                        name_ok = false;
                        None
                    }
                },
                "subscript" | "comment" => None,
                _ => Some(self.word(src, child, depth + 1)),
            };
            let is_arg = piece.is_some();
            match (piece, argv.last_mut()) {
                (Some(w), Some(prev)) if last_end == Some(child.start_byte()) => prev.append(w),
                (Some(w), _) => argv.push(w),
                (None, _) => {}
            }
            // Only an argument node continues into the next one.
            last_end = is_arg.then(|| child.end_byte());
        }
        for r in redirects {
            self.redirect(src, r, depth + 1);
        }
        let shown: Vec<String> = assigns
            .iter()
            .map(|(n, v)| format!("{n}={}", v.text))
            .chain(argv.iter().map(|w| w.text.clone()))
            .collect();
        if !name_ok || argv.is_empty() {
            if argv.is_empty() && name_ok {
                // Assignments only (`a=1 b=2`), with redirections handled above.
                for (n, v) in &assigns {
                    self.check_assignment(n, v, false);
                }
                return;
            }
            return self.fail(shown, "command without a name: not classified");
        }
        let cmd = &argv[0];
        if cmd.dynamic || cmd.ansi {
            return self.fail(
                shown,
                format!(
                    "expansion in command position (`{}`): not classified",
                    Self::text(src, node).chars().take(60).collect::<String>()
                ),
            );
        }
        if cmd.brace || cmd.glob || cmd.tilde && !cmd.text.starts_with("~/") || cmd.text.is_empty()
        {
            return self.fail(
                shown,
                format!(
                    "brace, glob or tilde expansion in command position (`{}`): not classified",
                    cmd.text
                ),
            );
        }
        let mut v = super::commands::Verdict::default();
        for (n, val) in &assigns {
            if let Some(reason) = env_var_risk(n) {
                v.raise(Tier::Write, format!("{n}= {reason}"));
            }
            if val.dynamic && !v.reasons.iter().any(|r| r.contains("expansion")) {
                // Value only known at run time: harmless for allow-listed names.
            }
        }
        super::commands::classify(self, &mut v, &argv, depth);
        if super::commands::shell_reads_stdin(&argv) {
            self.stdin_script(src, &redirects_of(node), &mut v, depth);
        }
        self.push_verdict(shown, v);
    }

    /// A shell reading its script from standard input: classify a heredoc or
    /// here-string script given to it (`bash <<'EOF' ... EOF`).
    fn stdin_script(
        &mut self,
        src: &str,
        redirects: &[Node],
        v: &mut super::commands::Verdict,
        depth: usize,
    ) {
        for r in redirects {
            match r.kind() {
                "heredoc_redirect" => {
                    let mut cur = r.walk();
                    let Some(body) = r
                        .named_children(&mut cur)
                        .find(|c| c.kind() == "heredoc_body")
                    else {
                        continue;
                    };
                    let mut cur = body.walk();
                    if body
                        .named_children(&mut cur)
                        .any(|c| c.kind() != "heredoc_content")
                    {
                        v.fail("shell script in a heredoc with expansions: not classified");
                        continue;
                    }
                    v.note("shell reads a heredoc script: classified it");
                    self.analyze(Self::text(src, body), depth + 1);
                }
                "herestring_redirect" => {
                    let mut cur = r.walk();
                    let Some(value) = r.named_children(&mut cur).next() else {
                        continue;
                    };
                    let w = self.word(src, value, depth + 1);
                    if w.is_static() {
                        v.note("shell reads a here-string script: classified it");
                        self.analyze(&w.text, depth + 1);
                    } else {
                        v.fail("shell script in a here-string with expansions: not classified");
                    }
                }
                _ => {}
            }
        }
    }

    /// Adds a classified part built from a verdict.
    pub fn push_verdict(&mut self, argv: Vec<String>, v: super::commands::Verdict) {
        if v.unclassifiable {
            self.unclassifiable = true;
            for r in &v.reasons {
                if r.contains("not classified") && !self.reasons.contains(r) {
                    self.reasons.push(r.clone());
                }
            }
        }
        self.parts.push(Part {
            argv,
            tier: v.tier,
            reasons: v.reasons,
        });
        self.details.push(PartDetail {
            writes: v.writes,
            hosts: v.hosts,
            chain: v.chain,
            install_source: v.install_source.map(String::from),
            intent: None,
        });
    }

    fn push_part(&mut self, part: Part) {
        self.parts.push(part);
        self.details.push(PartDetail::default());
    }

    fn assignment_parts(&mut self, src: &str, node: Node, depth: usize) -> (String, Word) {
        let name = node
            .child_by_field_name("name")
            .map(|n| Self::text(src, n).to_string())
            .unwrap_or_default();
        let value = match node.child_by_field_name("value") {
            Some(v) => self.word(src, v, depth + 1),
            None => Word::default(),
        };
        (name, value)
    }

    fn assignment(&mut self, src: &str, node: Node, depth: usize, exported: bool) {
        let (name, value) = self.assignment_parts(src, node, depth);
        self.check_assignment(&name, &value, exported);
    }

    /// A standalone assignment (`X=1`, `export X=1`): a part only when it
    /// changes what later commands run.
    fn check_assignment(&mut self, name: &str, value: &Word, exported: bool) {
        let risk = if exported {
            env_var_risk(name)
        } else {
            env_var_changes_exec(name).then_some("changes what later commands run: at least write")
        };
        if let Some(reason) = risk {
            self.push_part(Part {
                argv: vec![format!("{name}={}", value.text)],
                tier: Tier::Write,
                reasons: vec![format!("{name}= {reason}")],
            });
        } else if exported && !env_var_allowed(name) {
            self.push_part(Part {
                argv: vec![format!("export {name}={}", value.text)],
                tier: Tier::SafeRead,
                reasons: vec![format!("export {name}: not known to change what runs")],
            });
        }
    }

    fn declaration(&mut self, src: &str, node: Node, depth: usize) {
        let mut argv = vec![node
            .child(0)
            .map(|c| Self::text(src, c).to_string())
            .unwrap_or_default()];
        let mut v = super::commands::Verdict::default();
        let mut cur = node.walk();
        for child in node.named_children(&mut cur) {
            match child.kind() {
                "variable_assignment" => {
                    let (n, val) = self.assignment_parts(src, child, depth);
                    let exported = argv[0] == "export"
                        || argv.iter().any(|a| a.starts_with('-') && a.contains('x'));
                    let risk = if exported {
                        env_var_risk(&n)
                    } else {
                        env_var_changes_exec(&n).then_some("changes what later commands run")
                    };
                    if let Some(reason) = risk {
                        v.raise(Tier::Write, format!("{n}= {reason}"));
                    }
                    argv.push(format!("{n}={}", val.text));
                }
                "variable_name" => argv.push(Self::text(src, child).to_string()),
                _ => {
                    let w = self.word(src, child, depth + 1);
                    if w.dynamic {
                        v.fail(format!(
                            "{}: expansion in declaration (`{}`): not classified",
                            argv[0], w.text
                        ));
                    }
                    argv.push(w.text);
                }
            }
        }
        // A nameref (`declare -n r=PATH`) makes later assignments to `r`
        // assign the variable it names: treat it like assigning PATH.
        if matches!(argv[0].as_str(), "declare" | "typeset" | "local")
            && argv[1..]
                .iter()
                .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('n'))
        {
            v.raise(
                Tier::Write,
                format!(
                    "{} -n: a nameref can assign any variable, PATH included",
                    argv[0]
                ),
            );
        }
        if v.reasons.is_empty() {
            v.reasons.push(format!("{}: shell builtin", argv[0]));
        }
        self.push_verdict(argv, v);
    }

    fn redirect(&mut self, src: &str, node: Node, depth: usize) {
        match node.kind() {
            "herestring_redirect" => {
                let mut cur = node.walk();
                for child in node.named_children(&mut cur) {
                    self.word(src, child, depth + 1);
                }
            }
            "heredoc_redirect" => {
                let mut cur = node.walk();
                let mut quoted = false;
                for child in node.named_children(&mut cur) {
                    match child.kind() {
                        "heredoc_start" => {
                            quoted = Self::text(src, child).contains(['\'', '"', '\\'])
                        }
                        // an unquoted delimiter expands the body, backquotes
                        // included, which the grammar does not parse there
                        "heredoc_body" if !quoted && Self::text(src, child).contains('`') => self
                            .fail(
                                vec![Self::text(src, child).chars().take(80).collect()],
                                "backquote in a heredoc that expands: not classified",
                            ),
                        _ => {}
                    }
                    self.walk(src, child, depth + 1);
                }
            }
            _ => {
                let mut op = "";
                let mut cur = node.walk();
                for child in node.children(&mut cur) {
                    if !child.is_named() {
                        op = child.kind();
                        break;
                    }
                }
                let mut dests = Vec::new();
                let mut cur = node.walk();
                for child in node.children_by_field_name("destination", &mut cur) {
                    dests.push(self.word(src, child, depth + 1));
                }
                let dest = dests.first().cloned().unwrap_or_default();
                // bash opens a socket for /dev/tcp/HOST/PORT and /dev/udp/HOST/PORT.
                if let Some(rest) = dest
                    .text
                    .strip_prefix("/dev/tcp/")
                    .or_else(|| dest.text.strip_prefix("/dev/udp/"))
                {
                    let host = rest.split('/').next().unwrap_or("").to_ascii_lowercase();
                    let mut v = super::commands::Verdict::default();
                    v.raise(
                        Tier::Network,
                        format!("{op} {}: bash opens a network socket", dest.text),
                    );
                    if !host.is_empty() {
                        v.hosts.push(host);
                    }
                    return self.push_verdict(vec![op.to_string(), dest.text.clone()], v);
                }
                let is_fd = !dest.dynamic
                    && (dest.text == "-"
                        || dest.text.chars().all(|c| c.is_ascii_digit()) && !dest.text.is_empty());
                let writes = match op {
                    "<" => false,
                    ">" | ">>" | ">|" | "&>" | "&>>" => true,
                    ">&" => !is_fd,
                    "<&" => false,
                    "<&-" | ">&-" => false,
                    _ => {
                        return self.fail(
                            vec![Self::text(src, node).to_string()],
                            format!("unsupported redirection `{op}`: not classified"),
                        )
                    }
                };
                if !writes {
                    return;
                }
                if dests.len() != 1 {
                    return self.fail(
                        vec![Self::text(src, node).to_string()],
                        "redirection with several targets: not classified",
                    );
                }
                let mut v = super::commands::Verdict::default();
                let ctx = self.cd_ctx.clone();
                super::commands::write_target(ctx.as_ref().unwrap_or(self.ctx), &mut v, &dest, op);
                if v.tier > Tier::SafeRead || !v.writes.is_empty() {
                    self.push_verdict(vec![op.to_string(), dest.text.clone()], v);
                }
            }
        }
    }
}

/// The redirections of a command node and of the statement around it.
fn redirects_of(node: Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut cur = node.walk();
    for c in node.named_children(&mut cur) {
        if matches!(c.kind(), "heredoc_redirect" | "herestring_redirect") {
            out.push(c);
        }
    }
    if let Some(parent) = node.parent().filter(|p| p.kind() == "redirected_statement") {
        let mut cur = parent.walk();
        for c in parent.named_children(&mut cur) {
            if matches!(c.kind(), "heredoc_redirect" | "herestring_redirect") {
                out.push(c);
            }
        }
    }
    out
}

/// Quote removal for an unquoted word piece: backslash escapes the next
/// character, `\<newline>` disappears; notes globs, braces and a leading tilde.
fn unquoted_word(text: &str, w: &mut Word, first: bool) {
    let mut chars = text.chars();
    let mut i = 0;
    let mut open_bracket = false;
    let mut open_brace = false;
    let mut brace_sep = false;
    let mut prev = '\0';
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    if n != '\n' {
                        w.text.push(n);
                    }
                }
                prev = '\0';
                i += 1;
                continue;
            }
            '*' | '?' => w.glob = true,
            '[' => open_bracket = true,
            ']' if open_bracket => w.glob = true,
            '{' => open_brace = true,
            ',' if open_brace => brace_sep = true,
            '.' if open_brace && prev == '.' => brace_sep = true,
            '}' if open_brace && brace_sep => w.brace = true,
            '~' if i == 0 && first => w.tilde = true,
            _ => {}
        }
        w.text.push(c);
        prev = c;
        i += 1;
    }
}

/// True when unquoted text (quotes skipped, backslashes honoured) holds a
/// brace expansion `{a,b}` or `{x..y}` (bash(1), "Brace Expansion").
fn raw_has_brace_expansion(text: &str) -> bool {
    let mut q: Option<char> = None;
    let mut depth = 0usize;
    let mut sep = false;
    let mut prev = '\0';
    let mut it = text.chars();
    while let Some(c) = it.next() {
        match (q, c) {
            (None, '\\') => {
                it.next();
                prev = '\0';
                continue;
            }
            (None, '\'' | '"') => q = Some(c),
            (Some('"'), '\\') => {
                it.next();
            }
            (Some(qc), _) if qc == c => q = None,
            (Some(_), _) => {}
            (None, '{') => depth += 1,
            (None, ',') if depth > 0 => sep = true,
            (None, '.') if depth > 0 && prev == '.' => sep = true,
            (None, '}') if depth > 0 => {
                if sep {
                    return true;
                }
                depth -= 1;
            }
            _ => {}
        }
        prev = c;
    }
    false
}

/// Backslash removal inside double quotes: only `\$`, `` \` ``, `\"`, `\\`
/// and `\<newline>` are escapes (bash(1), "QUOTING").
fn dquote_unescape(text: &str, out: &mut String) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => out.push(chars.next().unwrap_or('\\')),
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
}

/// Decodes the inside of `$'...'` (bash(1), "QUOTING"). False when an
/// escape is not understood.
fn ansi_c_decode(text: &str, out: &mut String) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else { return false };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 {
                    match chars.peek().and_then(|c| c.to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            chars.next();
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    return false;
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                            n += 1;
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            _ => return false,
        }
    }
    true
}

/// Environment variables that may prefix a command without changing what it
/// runs (locale, colour, logging).
pub fn env_var_allowed(name: &str) -> bool {
    name.starts_with("LC_")
        || matches!(
            name,
            "LANG"
                | "LANGUAGE"
                | "TZ"
                | "NO_COLOR"
                | "FORCE_COLOR"
                | "CLICOLOR"
                | "CLICOLOR_FORCE"
                | "COLUMNS"
                | "LINES"
                | "TERM"
                | "COLORTERM"
                | "RUST_LOG"
                | "RUST_BACKTRACE"
                | "CI"
                | "TIME_STYLE"
                | "QUOTING_STYLE"
                | "LS_COLORS"
                | "GREP_COLORS"
                | "POSIXLY_CORRECT"
                | "PYTHONUNBUFFERED"
                | "PYTHONDONTWRITEBYTECODE"
                | "CARGO_TERM_COLOR"
                | "NO_PROXY"
        )
}

/// Why setting `name` for a command is at least `write`; `None` for the
/// allow-list ([`env_var_allowed`]).
pub fn env_var_risk(name: &str) -> Option<&'static str> {
    if env_var_allowed(name) {
        return None;
    }
    Some(if env_var_changes_exec(name) {
        "changes what runs: at least write"
    } else {
        "is not on the environment allow-list: at least write"
    })
}

/// Variables that change what a shell or program runs (loader, shell
/// startup, search paths, pagers, editors, interpreter options, git).
pub fn env_var_changes_exec(name: &str) -> bool {
    name.starts_with("LD_")
        || matches!(
            name,
            "BASH_ENV"
                | "ENV"
                | "PATH"
                | "PAGER"
                | "GIT_PAGER"
                | "MANPAGER"
                | "LESSOPEN"
                | "LESSCLOSE"
                | "EDITOR"
                | "VISUAL"
                | "GIT_EDITOR"
                | "PYTHONSTARTUP"
                | "PYTHONPATH"
                | "NODE_OPTIONS"
                | "PERL5OPT"
                | "PERL5LIB"
                | "RUBYOPT"
                | "HOME"
                | "SHELL"
                | "IFS"
                | "PROMPT_COMMAND"
                | "BASHOPTS"
                | "SHELLOPTS"
                | "GLOBIGNORE"
                | "CDPATH"
        )
        || name.starts_with("GIT_")
        || name.starts_with("BASH_FUNC_")
        || name.starts_with("DYLD_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(src: &str) -> Vec<String> {
        let ctx = ClassifyContext::default();
        let mut a = Analyzer::new(&ctx);
        a.analyze(src, 0);
        a.parts.first().map(|p| p.argv.clone()).unwrap_or_default()
    }

    #[test]
    fn quote_and_backslash_removal_match_bash() {
        assert_eq!(words(r#""r""m" -rf x"#)[0], "rm");
        assert_eq!(words(r"\rm x")[0], "rm");
        assert_eq!(words(r"r\m x")[0], "rm");
        assert_eq!(words(r#"'r'm x"#)[0], "rm");
        assert_eq!(
            words(r#"echo "a\"b" 'c\d' e\ f "\$x""#),
            vec!["echo", "a\"b", r"c\d", "e f", "$x"]
        );
        assert_eq!(
            words(r#"echo "/usr"'/'"local"/bin"#),
            vec!["echo", "/usr/local/bin"]
        );
        assert_eq!(words(r#"echo "a\nb""#), vec!["echo", r"a\nb"]);
    }

    /// The grammar splits some unquoted words at a `}` followed by a
    /// backslash into adjacent nodes; bash sees one word.
    #[test]
    fn words_the_grammar_splits_are_joined() {
        assert_eq!(words(r"echo %{x}\n"), vec!["echo", "%{x}n"]);
        assert_eq!(words(r"echo a{b}\c d"), vec!["echo", "a{b}c", "d"]);
        assert_eq!(
            words(r"sed -n {p}\;e\ id\ -u a.txt"),
            vec!["sed", "-n", "{p};e id -u", "a.txt"]
        );
        // Separate words stay separate.
        assert_eq!(words(r"echo {a} \b"), vec!["echo", "{a}", "b"]);
    }

    #[test]
    fn ansi_c_strings_decode() {
        let mut s = String::new();
        assert!(ansi_c_decode(r"\x72m\n\101", &mut s));
        assert_eq!(s, "rm\nA");
    }
}
