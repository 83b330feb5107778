//! A getopt-style option scanner shared by the per-program rules: short
//! clusters (`-rf`), attached values (`-n5`, `-ob64.txt`), `--opt=value`,
//! GNU long-option prefixes (`--out` for `--output`) and `--` (getopt(3),
//! getopt_long(3)).

use super::shell::Word;

/// What a program's options look like.
pub struct Spec {
    /// Short options that take a value (`"efl"` for sed).
    pub short_val: &'static str,
    /// Long options that take a value when given without `=`.
    pub long_val: &'static [&'static str],
    /// POSIX mode: the first operand ends the options (wrappers, `find`).
    pub stop_at_operand: bool,
}

impl Spec {
    /// GNU mode: options may follow operands.
    pub const fn new(short_val: &'static str, long_val: &'static [&'static str]) -> Spec {
        Spec {
            short_val,
            long_val,
            stop_at_operand: false,
        }
    }

    /// POSIX mode: the first operand ends the options.
    pub const fn posix(self) -> Spec {
        Spec {
            stop_at_operand: true,
            ..self
        }
    }
}

/// One scanned argument.
#[derive(Debug, Clone)]
pub enum Opt<'a> {
    /// `-x`, with its value if it takes one.
    Short(char, Option<&'a str>),
    /// `--name` or `--name=value` (name without the dashes).
    Long(&'a str, Option<&'a str>),
    /// An operand (index into the argument slice).
    Operand(usize),
    /// A word whose run-time value is unknown before `--`: it may be an option.
    Opaque(usize),
}

/// True when `given` (a long option name as typed) abbreviates or equals
/// `full`: GNU getopt_long accepts any unambiguous prefix.
pub fn long_is(given: &str, full: &str) -> bool {
    !given.is_empty() && full.starts_with(given)
}

/// Scans `args` (the words after the program name).
pub fn scan<'a>(args: &'a [Word], spec: &Spec) -> Vec<Opt<'a>> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    let mut only_operands = false;
    while i < args.len() {
        let w = &args[i];
        let t = w.text.as_str();
        if only_operands {
            out.push(Opt::Operand(i));
            i += 1;
            continue;
        }
        if w.opaque() {
            out.push(Opt::Opaque(i));
            i += 1;
            continue;
        }
        if t == "--" {
            only_operands = true;
            i += 1;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => out.push(Opt::Long(n, Some(v))),
                None => {
                    let takes = spec.long_val.iter().any(|full| long_is(long, full));
                    if takes && i + 1 < args.len() {
                        out.push(Opt::Long(long, Some(args[i + 1].text.as_str())));
                        i += 1;
                    } else {
                        out.push(Opt::Long(long, None));
                    }
                }
            }
            i += 1;
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let body = &t[1..];
            for (pos, c) in body.char_indices() {
                if spec.short_val.contains(c) {
                    let rest = &body[pos + c.len_utf8()..];
                    if !rest.is_empty() {
                        out.push(Opt::Short(c, Some(rest)));
                    } else if i + 1 < args.len() {
                        out.push(Opt::Short(c, Some(args[i + 1].text.as_str())));
                        i += 1;
                    } else {
                        out.push(Opt::Short(c, None));
                    }
                    break;
                }
                out.push(Opt::Short(c, None));
            }
            i += 1;
            continue;
        }
        out.push(Opt::Operand(i));
        if spec.stop_at_operand {
            only_operands = true;
        }
        i += 1;
    }
    out
}

/// Index of the first operand, for wrappers (`timeout 5 CMD`): options are
/// scanned in POSIX mode; `None` when an opaque word comes first or there is
/// no operand.
pub fn first_operand(args: &[Word], spec: &Spec) -> Result<Option<usize>, usize> {
    for o in scan(args, spec) {
        match o {
            Opt::Operand(i) => return Ok(Some(i)),
            Opt::Opaque(i) => return Err(i),
            _ => {}
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(list: &[&str]) -> Vec<Word> {
        list.iter().map(|s| Word::lit(s)).collect()
    }

    #[test]
    fn clusters_values_and_double_dash() {
        let args = w(&["-rf", "-n5", "--out=x", "--pre", "cmd", "--", "-z"]);
        let spec = Spec {
            short_val: "n",
            long_val: &["pre"],
            stop_at_operand: false,
        };
        let got = scan(&args, &spec);
        assert!(matches!(got[0], Opt::Short('r', None)));
        assert!(matches!(got[1], Opt::Short('f', None)));
        assert!(matches!(got[2], Opt::Short('n', Some("5"))));
        assert!(matches!(got[3], Opt::Long("out", Some("x"))));
        assert!(matches!(got[4], Opt::Long("pre", Some("cmd"))));
        assert!(matches!(got[5], Opt::Operand(6)));
        assert!(long_is("out", "output") && !long_is("outputs", "output"));
    }
}
