//! Properties of the LIST/NLST wildcard matcher (`sluice_ftp::glob`): it
//! agrees with a plain recursive matcher written from the rules (slow,
//! exponential at worst, fine for short inputs), a name matches itself
//! escaped, and nothing panics. The `ftp_glob` fuzz target checks the same
//! on longer runs.

use proptest::prelude::*;
use sluice_ftp::glob::{Glob, MAX_PATTERN};

/// The rules of the module docs, directly: recursion on the pattern.
fn reference(p: &[char], n: &[char]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some('*') => (0..=n.len()).any(|k| reference(&p[1..], &n[k..])),
        Some('?') => !n.is_empty() && reference(&p[1..], &n[1..]),
        Some('\\') if p.len() > 1 => n.first() == Some(&p[1]) && reference(&p[2..], &n[1..]),
        Some('[') => match set(&p[1..]) {
            Some((accepts, used)) => {
                !n.is_empty() && accepts(n[0]) && reference(&p[1 + used..], &n[1..])
            }
            None => n.first() == Some(&'[') && reference(&p[1..], &n[1..]),
        },
        Some(c) => n.first() == Some(c) && reference(&p[1..], &n[1..]),
    }
}

/// A set after `[`: a predicate and the chars used, `]` included.
#[allow(clippy::type_complexity)]
fn set(p: &[char]) -> Option<(Box<dyn Fn(char) -> bool>, usize)> {
    let neg = matches!(p.first(), Some('!' | '^'));
    let mut i = usize::from(neg);
    let mut members: Vec<(char, char)> = Vec::new();
    let start = i;
    loop {
        let mut c = *p.get(i)?;
        if c == ']' && i > start {
            let f = move |x: char| members.iter().any(|&(a, b)| a <= x && x <= b) != neg;
            return Some((Box::new(f), i + 1));
        }
        if c == '\\' {
            i += 1;
            c = *p.get(i)?;
        }
        i += 1;
        if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|&x| x != ']') {
            let mut hi = p[i + 1];
            i += 2;
            if hi == '\\' {
                hi = *p.get(i)?;
                i += 1;
            }
            members.push((c, hi));
        } else {
            members.push((c, c));
        }
    }
}

fn reference_name(pattern: &str, name: &str) -> bool {
    // An escaped dot is as explicit as a bare one (`ls \.*` in a shell).
    if name.starts_with('.') && !pattern.starts_with('.') && !pattern.starts_with("\\.") {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    reference(&p, &n)
}

fn escape(name: &str) -> String {
    name.chars()
        .flat_map(|c| {
            let esc = matches!(c, '*' | '?' | '[' | '\\');
            esc.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn agrees_with_the_reference(pattern in "[ab.*?\\[\\]!^\\\\-]{0,10}", name in "[ab.\\]\\-é]{0,8}") {
        let g = Glob::new(&pattern).unwrap();
        prop_assert_eq!(g.matches(name.as_bytes()), reference_name(&pattern, &name),
            "pattern {:?} name {:?}", pattern, name);
    }

    #[test]
    fn a_name_matches_itself_escaped(name in "[^/\0]{1,40}") {
        let g = Glob::new(&escape(&name)).unwrap();
        // A hidden name needs the explicit dot, which escaping keeps.
        prop_assert!(g.matches(name.as_bytes()));
        let star = Glob::new(&format!("*{}", escape(&name))).unwrap();
        prop_assert_eq!(star.matches(name.as_bytes()), !name.starts_with('.'));
    }

    #[test]
    fn never_panics(pattern in ".{0,300}", name in prop::collection::vec(any::<u8>(), 0..300)) {
        match Glob::new(&pattern) {
            Some(g) => { let _ = g.matches(&name); }
            None => prop_assert!(pattern.len() > MAX_PATTERN),
        }
    }
}
