//! Request paths: percent-decoding and dot-segment removal into a
//! [`VirtualPath`], and percent-encoding for links.
//!
//! Decisions (each one the safe choice, see docs/SECURITY.md):
//! - `%2F` (an encoded `/`) is rejected with 400: decoding it would let a
//!   client smuggle a separator past segment-wise checks, and keeping it
//!   inside a segment would name a file no Linux directory can hold.
//! - NUL, raw or encoded, and other control bytes are rejected: they are
//!   never in legitimate names we serve and they poison logs.
//! - A malformed escape (`%zz`, `%4`) is rejected, not passed through.
//! - Decoded segments must be UTF-8 (listings only link UTF-8 names).
//! - Dot segments (also `%2e%2e`) are removed after decoding, as
//!   RFC 3986 5.2.4 describes, and `..` at the root stays at the root.
//!   The shell still opens the result with `openat2(RESOLVE_BENEATH)`:
//!   this module is a first line, not the only one.

use std::fmt;

use crate::limits::MAX_PATH_BYTES;

/// A normalized path inside the served tree: starts with `/`, has no
/// empty, `.` or `..` segments, and no segment contains `/`, NUL or a
/// control byte. Only [`normalize`] builds one from client input.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VirtualPath {
    /// Always starts with '/'; no trailing '/' except for the root.
    path: String,
    /// The client asked for `.../` (a directory); matters for redirects
    /// and relative links in listings.
    trailing_slash: bool,
    /// The client's path had a `..` segment: a listing must be redirected
    /// to the normalized path, or its relative links resolve against the
    /// unnormalized one (`/sub/..` is `/`, but `./x` there means `/sub/x`).
    climbed: bool,
}

/// Why a request path was refused. Every variant answers 400 except
/// [`PathError::TooLong`] (414).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not an origin-form path (must start with `/`).
    NotAbsolute,
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%2F`, an encoded slash: refused, see module docs.
    EncodedSlash,
    /// NUL or another control byte, raw or encoded.
    ControlByte,
    /// A decoded segment is not UTF-8.
    NotUtf8,
    /// Longer than [`MAX_PATH_BYTES`].
    TooLong,
}

impl PathError {
    /// The HTTP status this error is answered with.
    pub fn status(self) -> u16 {
        match self {
            PathError::TooLong => 414,
            _ => 400,
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotAbsolute => "path must start with /",
            PathError::BadEscape => "malformed percent escape",
            PathError::EncodedSlash => "encoded slash in path",
            PathError::ControlByte => "control byte in path",
            PathError::NotUtf8 => "path is not UTF-8",
            PathError::TooLong => "path too long",
        })
    }
}

impl std::error::Error for PathError {}

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> VirtualPath {
        VirtualPath {
            path: "/".to_owned(),
            trailing_slash: true,
            climbed: false,
        }
    }

    /// The path, `/a/b` (never with a trailing slash except for `/`).
    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.path == "/"
    }

    /// The client's path ended in `/` (or was the root).
    pub fn has_trailing_slash(&self) -> bool {
        self.trailing_slash
    }

    /// The client's path had a `..` segment.
    pub fn climbed(&self) -> bool {
        self.climbed
    }

    /// The path relative to the served root, for `openat2(root_fd, ..,
    /// RESOLVE_BENEATH)`: `a/b`, or `.` for the root.
    pub fn relative(&self) -> &str {
        if self.is_root() {
            "."
        } else {
            &self.path[1..]
        }
    }

    /// The segments, in order (none for the root).
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.path.split('/').filter(|s| !s.is_empty())
    }

    /// The last segment, if any.
    pub fn file_name(&self) -> Option<&str> {
        self.segments().last()
    }

    /// The path percent-encoded for a URL (a `Location` header or a
    /// link), with a trailing `/` if `dir`.
    pub fn encoded(&self, dir: bool) -> String {
        let mut out = String::with_capacity(self.path.len() + 1);
        for seg in self.segments() {
            out.push('/');
            out.push_str(&encode_segment(seg));
        }
        if out.is_empty() || dir {
            out.push('/');
        }
        out
    }
}

impl fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

/// Decode and normalize the path part of a request target (query already
/// split off). See the module docs for what is refused and why.
pub fn normalize(raw: &str) -> Result<VirtualPath, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if raw.len() > MAX_PATH_BYTES * 3 {
        // Even fully encoded it cannot decode to a legal length.
        return Err(PathError::TooLong);
    }
    let mut stack: Vec<String> = Vec::new();
    let mut last_was_dir = false;
    let mut climbed = false;
    for raw_seg in raw[1..].split('/') {
        let seg = decode_segment(raw_seg)?;
        match seg.as_str() {
            "" | "." => last_was_dir = true,
            ".." => {
                stack.pop();
                last_was_dir = true;
                climbed = true;
            }
            _ => {
                stack.push(seg);
                last_was_dir = false;
            }
        }
    }
    let mut path = String::with_capacity(raw.len());
    for seg in &stack {
        path.push('/');
        path.push_str(seg);
    }
    if path.is_empty() {
        return Ok(VirtualPath {
            climbed,
            ..VirtualPath::root()
        });
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong);
    }
    Ok(VirtualPath {
        path,
        trailing_slash: last_was_dir,
        climbed,
    })
}

/// Percent-decode one segment, refusing what the module docs list.
fn decode_segment(raw: &str) -> Result<String, PathError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let decoded = if b == b'%' {
            let hi = bytes.get(i + 1).and_then(|&c| hex_val(c));
            let lo = bytes.get(i + 2).and_then(|&c| hex_val(c));
            match (hi, lo) {
                (Some(h), Some(l)) => {
                    i += 3;
                    (h << 4) | l
                }
                _ => return Err(PathError::BadEscape),
            }
        } else {
            i += 1;
            b
        };
        if decoded == b'/' {
            return Err(PathError::EncodedSlash);
        }
        if is_control(decoded) {
            return Err(PathError::ControlByte);
        }
        out.push(decoded);
    }
    String::from_utf8(out).map_err(|_| PathError::NotUtf8)
}

/// The bytes refused in a path, raw or encoded: ASCII controls and DEL.
fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// True if a request can name a directory entry called `name`: its
/// encoded form ([`encode_segment`]) normalizes back to exactly that one
/// segment. False for names with control bytes (refused above, for the
/// logs' sake), `/`, and the dot segments. Listings show only such names,
/// so every link they offer can be followed.
pub fn is_requestable_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() < MAX_PATH_BYTES
        && !name.bytes().any(|b| b == b'/' || is_control(b))
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-encode one path segment for a URL: everything but RFC 3986
/// unreserved characters and a few safe sub-delims is escaped, so `/`,
/// `?`, `#`, `%`, quotes and `<>` in a file name cannot change a link.
pub fn encode_segment(seg: &str) -> String {
    let mut out = String::with_capacity(seg.len());
    for &b in seg.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(s: &str) -> String {
        normalize(s).unwrap().as_str().to_owned()
    }

    #[test]
    fn plain_paths() {
        assert_eq!(n("/"), "/");
        assert_eq!(n("/a/b.txt"), "/a/b.txt");
        assert_eq!(n("//a///b"), "/a/b");
        assert!(normalize("/a/").unwrap().has_trailing_slash());
        assert!(!normalize("/a").unwrap().has_trailing_slash());
    }

    #[test]
    fn dot_segments_never_escape_root() {
        assert_eq!(n("/a/./b/../c"), "/a/c");
        assert_eq!(n("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(n("/a/%2e%2e/%2E%2E/%2e%2e/x"), "/x");
        assert_eq!(n("/a/.."), "/");
        assert!(normalize("/a/..").unwrap().has_trailing_slash());
        assert!(normalize("/a/..").unwrap().climbed());
        assert!(normalize("/..").unwrap().climbed());
        assert!(!normalize("/a/./b/").unwrap().climbed());
        // "..." is a legal file name, not a dot segment.
        assert_eq!(n("/.../..a"), "/.../..a");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(n("/hello%20world"), "/hello world");
        assert_eq!(n("/caf%C3%A9"), "/café");
        assert_eq!(normalize("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(normalize("/a%2fb"), Err(PathError::EncodedSlash));
        assert_eq!(normalize("/a%00b"), Err(PathError::ControlByte));
        assert_eq!(normalize("/a\0b"), Err(PathError::ControlByte));
        assert_eq!(normalize("/a%0Ab"), Err(PathError::ControlByte));
        assert_eq!(normalize("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(normalize("/a%4"), Err(PathError::BadEscape));
        assert_eq!(normalize("/a%"), Err(PathError::BadEscape));
        assert_eq!(normalize("/%FF"), Err(PathError::NotUtf8));
        assert_eq!(normalize("a/b"), Err(PathError::NotAbsolute));
        assert_eq!(normalize(""), Err(PathError::NotAbsolute));
    }

    #[test]
    fn length_bound() {
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(normalize(&long), Err(PathError::TooLong));
        assert_eq!(PathError::TooLong.status(), 414);
        let ok = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        assert!(normalize(&ok).is_ok());
    }

    #[test]
    fn relative_and_encoded() {
        assert_eq!(VirtualPath::root().relative(), ".");
        assert_eq!(normalize("/a/b").unwrap().relative(), "a/b");
        let p = normalize("/my%20dir/x%3Fy#").unwrap();
        assert_eq!(p.encoded(false), "/my%20dir/x%3Fy%23");
        assert_eq!(p.encoded(true), "/my%20dir/x%3Fy%23/");
        assert_eq!(VirtualPath::root().encoded(false), "/");
        assert_eq!(p.file_name(), Some("x?y#"));
    }

    #[test]
    fn encode_segment_escapes_dangerous_bytes() {
        assert_eq!(
            encode_segment("a b/c?d#e%f\"g<h>'&"),
            "a%20b%2Fc%3Fd%23e%25f%22g%3Ch%3E%27%26"
        );
        assert_eq!(encode_segment("é"), "%C3%A9");
        assert_eq!(encode_segment("a-b_c.d~"), "a-b_c.d~");
    }

    #[test]
    fn requestable_names() {
        for ok in ["a", "...", "a b", "caf\u{e9}", "x?y#%", "\u{85}c1"] {
            assert!(is_requestable_name(ok), "{ok:?}");
        }
        let long = "a".repeat(MAX_PATH_BYTES);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "new\nline",
            "cr\rx",
            "tab\there",
            "ctl\u{1}\u{1b}[31m",
            "del\u{7f}",
            &long,
        ] {
            assert!(!is_requestable_name(bad), "{bad:?}");
        }
    }

    /// Names mixing ASCII (controls included) with any other character.
    fn names() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![(0u8..0x80).prop_map(char::from), any::<char>()],
            0..12,
        )
        .prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #[test]
        fn requestable_names_are_exactly_the_followable_ones(name in names()) {
            // A listing shows a name exactly when its link leads back to it.
            let back = normalize(&format!("/{}", encode_segment(&name)));
            let followable =
                back.is_ok_and(|p| !p.is_root() && p.as_str() == format!("/{name}"));
            prop_assert_eq!(is_requestable_name(&name), followable, "{:?}", name);
        }

        #[test]
        fn normalized_paths_are_clean(s in "/[a-z./%2eEfF0-9]{0,40}") {
            if let Ok(p) = normalize(&s) {
                prop_assert!(p.as_str().starts_with('/'));
                prop_assert!(p.is_root() || !p.as_str().ends_with('/'));
                for seg in p.segments() {
                    prop_assert!(seg != "." && seg != ".." && !seg.is_empty());
                    prop_assert!(!seg.contains('/') && !seg.contains('\0'));
                }
                prop_assert!(!p.relative().starts_with('/'));
                // Normalizing the encoded form gives the same path back.
                let again = normalize(&p.encoded(false)).unwrap();
                prop_assert_eq!(again.as_str(), p.as_str());
            }
        }

        #[test]
        fn any_string_is_safe(s in any::<String>()) {
            let s = format!("/{s}");
            if let Ok(p) = normalize(&s) {
                prop_assert!(p.segments().all(|g| g != ".." && g != "." && !g.contains('/')));
                prop_assert!(p.as_str().len() <= MAX_PATH_BYTES);
            }
        }
    }
}
