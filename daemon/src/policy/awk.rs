//! Whether an awk program is read-only: a small awk lexer (POSIX awk, "Lexical
//! Conventions"; the GNU Awk manual for gawk's extensions) that finds every
//! construct that runs a command, writes a file or opens a connection:
//! `system()`, `|` and `|&` pipes, `print`/`printf` output redirection
//! (`>`, `>>`), `getline < FILE` from anything but a plain file name,
//! gawk's `/inet/...` special files and `@load`/`@include`/indirect calls.
//!
//! The scanner fails closed: a program it cannot lex (an unterminated string
//! or regex, a byte that is no awk token, a regex whose end differs between
//! awk implementations) is reported as a risk, never as read-only. A `/`
//! whose meaning (division or the start of a regex literal) depends on
//! grammar context the lexer does not track is scanned both ways, and the
//! program is read-only only when both readings are; past a budget of such
//! branches the program is reported as too complex.

/// Most lexer branches explored at ambiguous `/` before giving up (fail closed).
const BRANCH_BUDGET: usize = 64;

/// What the previous token lets a `/` mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// An operand ended (`x`, `1`, `"s"`, `)`, `]`, `x++`): `/` divides.
    Operand,
    /// An operator or statement start: `/` opens a regex literal.
    Operator,
    /// Either (after `getline`): scan both readings.
    Either,
}

/// Lexer state carried across a branch.
#[derive(Debug, Clone)]
struct State {
    prev: Prev,
    /// Parenthesis depth at the `print`/`printf` of the current statement.
    print_depth: Option<usize>,
    /// `getline` seen in the current statement (a following `<` reads a file).
    getline: bool,
    /// Open parentheses; true for the condition of `if`/`while`/`for`/`switch`
    /// (after its `)` a statement, which may be a regex, starts).
    parens: Vec<bool>,
    /// The last word was `if`/`while`/`for`/`switch`.
    cond_kw: bool,
}

/// What the scanner found that keeps a program from being read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Not valid awk in this reading (awk would refuse it and run nothing;
    /// a program none of whose readings is valid is still not classified).
    Invalid(&'static str),
    /// A side effect, or a construct awks read differently.
    Risk(&'static str),
}

/// Of two readings of an ambiguous `/`: a risk in either is a risk; a
/// reading that is not valid awk is one awk did not take.
fn either(a: Option<Found>, b: Option<Found>) -> Option<Found> {
    match (a, b) {
        (Some(Found::Risk(r)), _) | (_, Some(Found::Risk(r))) => Some(Found::Risk(r)),
        (None, _) | (_, None) => None,
        (Some(x), Some(_)) => Some(x),
    }
}

/// Why an awk program is not read-only, or `None` when it provably is.
pub fn awk_program_risk(p: &str) -> Option<&'static str> {
    let mut budget = BRANCH_BUDGET;
    let st = State {
        prev: Prev::Operator,
        print_depth: None,
        getline: false,
        parens: Vec::new(),
        cond_kw: false,
    };
    scan(p.as_bytes(), 0, st, &mut budget).map(|f| match f {
        Found::Invalid(r) | Found::Risk(r) => r,
    })
}

/// Reads a string literal whose opening `"` is at `i`; returns the index
/// after the closing quote and the raw contents, or `None` when the string
/// does not end on its line.
fn string_at(b: &[u8], i: usize) -> Option<(usize, &[u8])> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'"' => return Some((j + 1, &b[i + 1..j])),
            b'\\' => {
                if j + 1 >= b.len() {
                    return None;
                }
                j += 2;
            }
            b'\n' => return None,
            _ => j += 1,
        }
    }
    None
}

/// Reads a regex literal whose opening `/` is at `i`; returns the index
/// after the closing `/`. `Err` when it does not end on its line or has a
/// `/` inside a bracket expression (gawk reads `/[/]/` as one regex, other
/// awks end it at the inner `/`).
fn regex_at(b: &[u8], i: usize) -> Result<usize, Found> {
    let mut j = i + 1;
    let mut bracket = false;
    while j < b.len() {
        match b[j] {
            b'\\' => {
                if j + 1 >= b.len() || b[j + 1] == b'\n' {
                    return Err(Found::Invalid("unterminated awk regex: not classified"));
                }
                j += 2;
                continue;
            }
            b'\n' => return Err(Found::Invalid("unterminated awk regex: not classified")),
            b'[' if !bracket => {
                bracket = true;
                j += 1;
                // a leading `]` (after an optional `^`) is a literal
                if j < b.len() && b[j] == b'^' {
                    j += 1;
                }
                if j < b.len() && b[j] == b']' {
                    j += 1;
                }
                continue;
            }
            b'[' if bracket && j + 1 < b.len() && matches!(b[j + 1], b':' | b'.' | b'=') => {
                // `[:alpha:]`, `[.x.]`, `[=x=]` inside a bracket expression
                let close = b[j + 1];
                let mut k = j + 2;
                while k + 1 < b.len() && !(b[k] == close && b[k + 1] == b']') {
                    if b[k] == b'\n' {
                        return Err(Found::Invalid("unterminated awk regex: not classified"));
                    }
                    k += 1;
                }
                j = k + 2;
                continue;
            }
            b']' if bracket => bracket = false,
            b'/' if bracket => {
                return Err(Found::Risk(
                    "awk regex with `/` inside brackets (read differently by awk implementations): not classified",
                ))
            }
            b'/' => return Ok(j + 1),
            _ => {}
        }
        j += 1;
    }
    Err(Found::Invalid("unterminated awk regex: not classified"))
}

/// gawk's network special files (`/inet/tcp/...`, `/inet4/...`, `/inet6/...`).
fn is_inet(s: &[u8]) -> bool {
    s.starts_with(b"/inet")
}

fn scan(b: &[u8], mut i: usize, mut st: State, budget: &mut usize) -> Option<Found> {
    let n = b.len();
    while i < n {
        let c = b[i];
        let cond_kw = std::mem::take(&mut st.cond_kw);
        match c {
            b' ' | b'\t' | b'\r' => {
                st.cond_kw = cond_kw;
                i += 1;
            }
            b'\\' => {
                // only a line continuation is valid outside strings and regexes
                match (b.get(i + 1), b.get(i + 2)) {
                    (Some(b'\n'), _) => i += 2,
                    (Some(b'\r'), Some(b'\n')) => i += 3,
                    _ => {
                        return Some(Found::Invalid(
                            "stray backslash in awk program: not classified",
                        ))
                    }
                }
                st.cond_kw = cond_kw;
            }
            b'#' => {
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\n' | b';' | b'{' | b'}' => {
                // A newline ends a statement only after an operand (after
                // `,`, `&&`, `||`, `print`... the statement goes on); `;`
                // inside parentheses is `for (;;)`; `{` and `}` start afresh.
                let ends = match c {
                    b'\n' => st.prev != Prev::Operator,
                    b';' => true,
                    _ => {
                        st.parens.clear();
                        true
                    }
                };
                if ends {
                    st.print_depth = None;
                    st.getline = false;
                }
                st.prev = Prev::Operator;
                i += 1;
            }
            b'"' => {
                let Some((end, body)) = string_at(b, i) else {
                    return Some(Found::Invalid("unterminated awk string: not classified"));
                };
                if is_inet(body) {
                    return Some(Found::Risk(
                        "awk /inet special file opens a network connection",
                    ));
                }
                st.prev = Prev::Operand;
                i = end;
            }
            b'/' => {
                let as_regex = match st.prev {
                    Prev::Operator => true,
                    Prev::Operand => false,
                    Prev::Either => {
                        if *budget == 0 {
                            return Some(Found::Risk(
                                "awk program too ambiguous to analyse: not classified",
                            ));
                        }
                        *budget -= 1;
                        let mut div = st.clone();
                        div.prev = Prev::Operator;
                        let after = if b.get(i + 1) == Some(&b'=') {
                            i + 2
                        } else {
                            i + 1
                        };
                        let as_div = scan(b, after, div, budget);
                        let as_re = match regex_at(b, i) {
                            Ok(end) => {
                                let mut re = st.clone();
                                re.prev = Prev::Operand;
                                scan(b, end, re, budget)
                            }
                            Err(f) => Some(f),
                        };
                        return either(as_div, as_re);
                    }
                };
                if as_regex {
                    match regex_at(b, i) {
                        Ok(end) => i = end,
                        Err(f) => return Some(f),
                    }
                    st.prev = Prev::Operand;
                } else {
                    // division or `/=`
                    i += 1;
                    if b.get(i) == Some(&b'=') {
                        i += 1;
                    }
                    st.prev = Prev::Operator;
                }
            }
            b'@' => {
                return Some(Found::Risk(
                    "awk `@load`/`@include`/indirect call runs code",
                ))
            }
            b'|' => {
                if b.get(i + 1) == Some(&b'|') {
                    st.prev = Prev::Operator;
                    i += 2;
                } else {
                    return Some(Found::Risk("awk pipe runs a command"));
                }
            }
            b'>' => {
                if b.get(i + 1) == Some(&b'=') {
                    i += 2;
                } else if st.print_depth == Some(st.parens.len()) {
                    return Some(Found::Risk("awk output redirection writes a file"));
                } else {
                    i += 1;
                }
                st.prev = Prev::Operator;
            }
            b'<' => {
                if b.get(i + 1) == Some(&b'=') {
                    i += 2;
                } else {
                    i += 1;
                    if st.getline {
                        // `getline < FILE`: only a plain file name is known to be a file
                        let mut j = i;
                        while j < n && matches!(b[j], b' ' | b'\t') {
                            j += 1;
                        }
                        if j >= n || b[j] != b'"' {
                            return Some(Found::Risk(
                                "awk `getline <` from a computed name (may be a special file)",
                            ));
                        }
                    }
                }
                st.prev = Prev::Operator;
            }
            b'(' => {
                st.parens.push(cond_kw);
                st.prev = Prev::Operator;
                i += 1;
            }
            b')' => {
                // an unmatched `)` could close anything: either reading
                let popped = st.parens.pop();
                let cond = popped.unwrap_or(false);
                st.prev = match popped {
                    None => Prev::Either,
                    Some(true) => Prev::Operator,
                    Some(false) => Prev::Operand,
                };
                if cond {
                    // the statement of `if (...)` starts here
                    st.print_depth = None;
                    st.getline = false;
                }
                i += 1;
            }
            b']' => {
                st.prev = Prev::Operand;
                i += 1;
            }
            b'+' | b'-' if b.get(i + 1) == Some(&c) => {
                // `x++` keeps an operand; `++x` is still before one
                i += 2;
            }
            b'0'..=b'9' | b'.' if c != b'.' || b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                st.prev = Prev::Operand;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                match &b[start..i] {
                    b"system" => return Some(Found::Risk("awk `system()` runs a command")),
                    b"print" | b"printf" => {
                        st.print_depth = Some(st.parens.len());
                        st.prev = Prev::Operator;
                    }
                    // `length` without parentheses is an operand in awk's
                    // grammar; scanned both ways all the same
                    b"getline" | b"length" => {
                        st.getline |= &b[start..i] == b"getline";
                        st.prev = Prev::Either;
                    }
                    b"if" | b"while" | b"for" | b"switch" => {
                        st.cond_kw = true;
                        st.prev = Prev::Operator;
                    }
                    b"return" | b"case" | b"do" | b"else" | b"in" | b"BEGIN" | b"END"
                    | b"BEGINFILE" | b"ENDFILE" | b"delete" | b"exit" => {
                        st.prev = Prev::Operator;
                    }
                    _ => st.prev = Prev::Operand,
                }
            }
            b'=' | b'!' | b'~' | b'&' | b'*' | b'%' | b'^' | b'+' | b'-' | b'?' | b':' | b','
            | b'$' | b'[' | b'.' => {
                st.prev = Prev::Operator;
                i += 1;
            }
            _ => return Some(Found::Invalid("byte that is no awk token: not classified")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::awk_program_risk;

    #[test]
    fn read_only_programs() {
        for p in [
            "{print $1}",
            "$3 > 100 {print $1}",
            "NR==1 || /x|y/ {n++} END {print n}",
            "{ print /re/ }",
            "{ x = $1 / 2; print x }",
            "{ n = a[1] / b[2] ; print n / 3 }",
            "{ if ($1 > 5) print $2 }",
            "{ print ($1 > $2) }",
            "{ printf \"%s|%s\\n\", $1, $2 }",
            "/a\\/b/ { c++ } END { print c }",
            "/[[:alpha:]]+/ { print }",
            "{ while ((getline line < \"data.txt\") > 0) n++ } END { print n }",
            "BEGIN { FS = \":\" } { sum += $3 } END { print sum / NR }",
            "{ if (x) /re/ ? a++ : b++ }",
            "{ print length / 2 }",
            "{ x++ / 2 }",
            "# system(\"id\") in a comment\n{ print }",
            "{ s = \"a > b | c\"; print s }",
            "{ print $1 }\\\n END { print NR }",
            "{ getline; print }",
            "{ getline x; print x / 2 }",
        ] {
            assert_eq!(awk_program_risk(p), None, "{p}");
        }
    }

    #[test]
    fn side_effects_found() {
        for p in [
            "BEGIN{system(\"id\")}",
            "BEGIN { system (\"id\") }",
            "{print > \"out.txt\"}",
            "{print >> \"out.txt\"}",
            "{printf(\"%s\", $1) > \"out\"}",
            "{print | \"sh\"}",
            "{print |& \"cat\"}",
            "{ \"date\" | getline d; print d }",
            "BEGIN { while ((\"ls\" | getline line) > 0) print line }",
            "BEGIN { getline x < \"/inet/tcp/0/example.com/80\" }",
            "BEGIN { getline x < f }",
            "BEGIN { print \"x\" > ENVIRON[\"HOME\"] \"/f\" }",
            "{print $1 > $2}",
            "@load \"filefuncs\"; BEGIN{}",
            "BEGIN { f = \"system\"; @f(\"id\") }",
        ] {
            assert!(awk_program_risk(p).is_some(), "{p}");
        }
    }

    /// The red team's lexer confusions: a regex literal or string that a
    /// naive scanner reads differently from awk, hiding a `system()` call.
    #[test]
    fn lexer_confusion_fails_closed() {
        for p in [
            // regex after print: a scanner that takes `/` as division reads `"` as a string
            "{ print /\"/ ; system(\"id\") ; x = \"/\" }",
            "{ print $1, /\"/ ; system(\"id\") ; x = \"/\" }",
            // regex after the condition of an if
            "{ if (1) /\"/; system(\"id\"); x=\"\" }",
            "{ while (0) /\"/; system(\"id\"); x=\"\" }",
            // division: a scanner that takes `/` as a regex skips the call
            "NR==1 { x = 1 / 2 ; system(\"id\") ; y = 4 / 2 }",
            "{ a = b /\"/; system(\"id\"); print \"/\" }",
            "{ print $1 /\"/ ; system(\"id\") ; c = \"/\" }",
            "{ print length /\"/; system(\"id\"); x=\"/\" }",
            "{ x = y ++ /\"/; system(\"id\"); z=\"/\" }",
            // getline: either reading hides nothing
            "{ getline /\"/; system(\"id\"); x=\"/\" }",
            "{ getline x /\"/; system(\"id\"); z=\"/\" }",
            // for (;;) keeps its condition; a newline after `,` continues print
            "{ for (i=0;i<1;i++) /\"/; system(\"id\"); x=\"/\" }",
            "{ print $1,\n $2 > \"out\" }",
            "{ x = 1 }) /\"/; system(\"id\"); x=\"/\" }",
            // `/` inside brackets ends the regex in some awks, not in gawk
            "/[/]/ { system(\"id\") }",
            "/[/\"]/ { x = 1 } { y = \"a\" }",
            // unterminated or multi-line strings and regexes
            "{ x = \"abc\n\"; system(\"id\") }",
            "{ x = \"abc",
            "/abc",
            "{ x = /a\n/ }",
            // stray bytes
            "{ x = 1 } \\ system(\"id\")",
            "{ x = `id` }",
            "{ print \"\u{e9}\" } \u{e9}",
        ] {
            assert!(awk_program_risk(p).is_some(), "{p:?} came out read-only");
        }
    }

    /// Seeded random programs from awk fragments: no panic, and a program
    /// holding `system` outside a comment is never read-only.
    #[test]
    fn random_programs_never_panic() {
        const FRAGS: &[&str] = &[
            "/", "\"", "\\", "[", "]", "(", ")", "{", "}", ";", "\n", "#", "print", "getline",
            "length", "if", "x", "1", "<", ">", "|", "=", "++", ",", " ", "$", "[:a:]", "^",
            "\u{e9}",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut p = String::new();
            let len = (seed % 24) as usize;
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                p.push_str(FRAGS[(seed % FRAGS.len() as u64) as usize]);
            }
            let _ = awk_program_risk(&p);
            let with_call = format!("{p}\nsystem(\"id\")");
            if !p.contains('#') {
                assert!(awk_program_risk(&with_call).is_some(), "{with_call:?}");
            }
        }
    }

    #[test]
    fn ambiguity_has_a_budget() {
        let many = "{ getline /1/ ; }".repeat(200);
        assert!(awk_program_risk(&many).is_some());
        let fine = "{ print $1 / 2 }".repeat(200);
        assert_eq!(awk_program_risk(&fine), None);
    }
}
