//! Wildcards in the last component of a LIST/NLST argument (`NLST *.dat`,
//! what `mget *.dat` sends), as vsftpd and ProFTPD expand them.
//!
//! ```text
//! *        any run of characters, empty too
//! ?        one character
//! [abc]    one of a, b, c;  [a-z] a range;  [!a] or [^a] anything but a;
//!          `]` first in the set is literal; a `[` without `]` is literal
//! \x       x itself
//! ```
//!
//! A name starting with `.` matches only a pattern starting with a
//! literal `.` (`*` does not list hidden files; `.*` does), as in the shell
//! and vsftpd. Matching is by character (UTF-8); a name that is not UTF-8
//! is matched with its bad bytes as U+FFFD, which only `?`, `*` and a
//! negated set match.
//!
//! Cost: one name against one pattern is at most `len(name) x
//! len(pattern)` steps (star backtracking goes back to the last `*` only,
//! never further), and a pattern is at most [`MAX_PATTERN`] bytes, so a
//! listing costs at most a constant per directory entry however the
//! pattern is built.

use std::borrow::Cow;

/// Longest pattern accepted: no longer name exists on Linux (NAME_MAX),
/// so a longer last component could not match anything literal either.
pub const MAX_PATTERN: usize = 255;

/// True if `component` holds a wildcard (`*`, `?` or `[`): a listing of it
/// is a match over its directory (when no entry has that very name).
pub fn is_glob(component: &str) -> bool {
    component.bytes().any(|b| matches!(b, b'*' | b'?' | b'['))
}

/// A compiled pattern; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Char(char),
    AnyChar,
    Star,
    Set {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Char(x) => *x == c,
            Token::AnyChar => true,
            Token::Star => unreachable!("stars are handled by the matcher"),
            Token::Set { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

impl Glob {
    /// Compiles `pattern`; `None` if it is longer than [`MAX_PATTERN`].
    pub fn new(pattern: &str) -> Option<Glob> {
        if pattern.len() > MAX_PATTERN {
            return None;
        }
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            let t = match c {
                '*' => {
                    // `**` is `*`: fewer stars, less backtracking.
                    if tokens.last() == Some(&Token::Star) {
                        continue;
                    }
                    Token::Star
                }
                '?' => Token::AnyChar,
                '\\' if i < chars.len() => {
                    i += 1;
                    Token::Char(chars[i - 1])
                }
                '[' => match parse_set(&chars[i..]) {
                    Some((t, used)) => {
                        i += used;
                        t
                    }
                    None => Token::Char('['),
                },
                c => Token::Char(c),
            };
            tokens.push(t);
        }
        Some(Glob { tokens })
    }

    /// Whether `name` (one directory entry's name, raw bytes) matches.
    pub fn matches(&self, name: &[u8]) -> bool {
        let name: Cow<'_, str> = String::from_utf8_lossy(name);
        if name.starts_with('.') && self.tokens.first() != Some(&Token::Char('.')) {
            return false;
        }
        self.matches_str(&name)
    }

    fn matches_str(&self, name: &str) -> bool {
        let toks = &self.tokens;
        let (mut p, mut n) = (0usize, 0usize);
        // After a `*`: the token after it and the name position it was
        // last tried at. Backtracking to the latest star is enough: what an
        // earlier star would take, this one can take too.
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            let c = name[n..].chars().next().unwrap_or('\u{fffd}');
            match toks.get(p) {
                Some(Token::Star) => {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                Some(t) if t.matches(c) => {
                    p += 1;
                    n += c.len_utf8();
                    continue;
                }
                _ => {}
            }
            let Some((sp, sn)) = star else {
                return false;
            };
            let skipped = name[sn..].chars().next().map_or(1, char::len_utf8);
            star = Some((sp, sn + skipped));
            p = sp;
            n = sn + skipped;
        }
        toks[p..].iter().all(|t| *t == Token::Star)
    }
}

/// The set after a `[`: its token and how many chars it used (the
/// closing `]` included), or `None` if it is not closed.
fn parse_set(chars: &[char]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Token::Set { negated, ranges }, i + 1));
        }
        first = false;
        let lo = if c == '\\' {
            i += 1;
            *chars.get(i)?
        } else {
            c
        };
        i += 1;
        // `a-z`; a `-` before the closing `]` is literal.
        if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&c| c != ']') {
            let mut hi = chars[i + 1];
            i += 2;
            if hi == '\\' {
                hi = *chars.get(i)?;
                i += 1;
            }
            if lo <= hi {
                ranges.push((lo, hi));
            }
        } else {
            ranges.push((lo, lo));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Glob::new(p).unwrap().matches(n.as_bytes())
    }

    #[test]
    fn stars_and_questions() {
        assert!(m("*.dat", "a.dat"));
        assert!(!m("*.dat", ".dat.dat"));
        assert!(!m("*.dat", "a.dat.gz"));
        assert!(m("*", "x"));
        assert!(m("a*", "a"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("*a*b*", "xxbxxaxx"));
        assert!(m("?.dat", "é.dat"));
        assert!(!m("?.dat", "ab.dat"));
        assert!(m("run-??", "run-01"));
        assert!(m("a**b", "axyzb"));
        assert!(m("", ""));
        assert!(!m("", "a"));
    }

    #[test]
    fn sets() {
        assert!(m("[ab].dat", "a.dat"));
        assert!(!m("[ab].dat", "c.dat"));
        assert!(m("[!ab].dat", "c.dat"));
        assert!(m("[^ab].dat", "c.dat"));
        assert!(!m("[!ab].dat", "a.dat"));
        assert!(m("f[0-9][0-9]", "f42"));
        assert!(!m("f[0-9]", "fa"));
        assert!(m("[]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("[!]]", "a"));
        // Not closed: a literal `[`.
        assert!(m("[x", "[x"));
        assert!(m("[x].dat", "x.dat"));
        assert!(!m("[x].dat", "[x].dat"));
        assert!(m("\\[x\\].dat", "[x].dat"));
        assert!(m("[é-ë]", "ê"));
    }

    #[test]
    fn hidden_names_need_an_explicit_dot() {
        assert!(!m("*", ".hidden"));
        assert!(!m("?hidden", ".hidden"));
        assert!(!m("[.]hidden", ".hidden"));
        assert!(m(".*", ".hidden"));
        assert!(m(".h*", ".hidden"));
        assert!(m("\\.h*", ".hidden"));
        assert!(!m("*", ".a.sluice-partial"));
    }

    #[test]
    fn is_glob_and_limits() {
        assert!(is_glob("*.dat"));
        assert!(is_glob("a?"));
        assert!(is_glob("[ab]"));
        assert!(!is_glob("plain.dat"));
        assert!(Glob::new(&"*".repeat(MAX_PATTERN)).is_some());
        assert!(Glob::new(&"*".repeat(MAX_PATTERN + 1)).is_none());
        // Not UTF-8: the bad byte is one character.
        let g = Glob::new("a?b").unwrap();
        assert!(g.matches(b"a\xffb"));
        assert!(!Glob::new("a*c").unwrap().matches(b"a\xffb"));
    }
}
