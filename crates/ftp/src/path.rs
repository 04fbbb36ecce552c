//! Virtual paths: what the session calls a path.
//!
//! The session keeps its working directory as a [`VirtualPath`]: always
//! rooted at `/`, normalized (no `.`, no `..`, no empty components, no
//! trailing slash), and never above `/` (`..` at the root stays at the root,
//! as on a chrooted server). Client arguments are resolved against it with
//! [`VirtualPath::resolve`].
//!
//! A trailing slash is not kept in the text but not forgotten either: a
//! client path ending in `/` (or `/.`) names a directory, as in POSIX path
//! resolution, and [`VirtualPath::names_dir`] tells the shell to refuse it
//! when it is anything else (`RETR file/` is "Not a directory", as open(2)
//! says ENOTDIR).
//!
//! This is bookkeeping, not a security boundary: the shell hands a virtual
//! path to `sluice_platform::fs::ServedRoot`, where the kernel resolves it
//! beneath the served root (`openat2(RESOLVE_BENEATH)`) and refuses symlinks
//! that escape.

use crate::limits::MAX_PATH;

/// A normalized, `/`-rooted path inside the served tree.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VirtualPath {
    path: String,
    /// Written with a trailing slash: must be a directory.
    dir: bool,
}

/// Why a client path argument was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// Longer than [`MAX_PATH`] before or after resolving.
    TooLong,
    /// Contains a NUL byte, which no file name can hold.
    Nul,
}

impl VirtualPath {
    /// The root, `/`.
    pub fn root() -> VirtualPath {
        VirtualPath::plain("/".to_string())
    }

    fn plain(path: String) -> VirtualPath {
        VirtualPath { path, dir: false }
    }

    /// The path as text, always starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.path == "/"
    }

    /// True if the client wrote the path ending in `/` (or `/.`): it names
    /// a directory, and an operation on it must fail with "Not a
    /// directory" if it is anything else. Never true for `/`.
    pub fn names_dir(&self) -> bool {
        self.dir
    }

    /// The same path without the [`names_dir`](Self::names_dir) flag.
    pub fn without_dir_flag(self) -> VirtualPath {
        VirtualPath::plain(self.path)
    }

    /// Resolves a client argument against `self` (the working directory).
    /// Absolute arguments start from `/`; `..` never climbs above `/`. An
    /// argument whose last component is empty or `.` (`d/`, `d/.`) gives a
    /// path that [`names_dir`](Self::names_dir).
    pub fn resolve(&self, arg: &str) -> Result<VirtualPath, PathError> {
        if arg.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        if arg.contains('\0') {
            return Err(PathError::Nul);
        }
        let mut parts: Vec<&str> = if arg.starts_with('/') {
            Vec::new()
        } else {
            self.components().collect()
        };
        for comp in arg.split('/') {
            match comp {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                c => parts.push(c),
            }
        }
        let mut s = String::with_capacity(arg.len() + self.path.len() + 1);
        for p in &parts {
            s.push('/');
            s.push_str(p);
        }
        if s.is_empty() {
            s.push('/');
        }
        if s.len() > MAX_PATH {
            return Err(PathError::TooLong);
        }
        // `..` needs no flag: what it leaves is an ancestor, a directory.
        let dir = !arg.is_empty() && matches!(arg.rsplit('/').next(), Some("" | ".")) && s != "/";
        Ok(VirtualPath { path: s, dir })
    }

    /// The parent directory (`/` for `/`).
    pub fn parent(&self) -> VirtualPath {
        match self.path.rfind('/') {
            Some(0) | None => VirtualPath::root(),
            Some(i) => VirtualPath::plain(self.path[..i].to_string()),
        }
    }

    /// The last component, or `None` for `/`.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.path.rsplit('/').next()
        }
    }

    /// The components, root first, without the leading `/`.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.path.split('/').filter(|c| !c.is_empty())
    }
}

impl std::fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path)
    }
}

/// `VirtualPath("/a/d/")`: the text, with the trailing slash if the
/// client wrote one.
impl std::fmt::Debug for VirtualPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slash = if self.dir { "/" } else { "" };
        write!(f, "VirtualPath({:?})", format!("{}{slash}", self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vp(s: &str) -> VirtualPath {
        VirtualPath::root().resolve(s).unwrap()
    }

    #[test]
    fn resolves_relative_and_absolute() {
        let cwd = vp("/a/b");
        assert_eq!(cwd.as_str(), "/a/b");
        assert_eq!(cwd.resolve("c").unwrap().as_str(), "/a/b/c");
        assert_eq!(cwd.resolve("/x//y/").unwrap().as_str(), "/x/y");
        assert_eq!(cwd.resolve("..").unwrap().as_str(), "/a");
        assert_eq!(cwd.resolve("./../../..").unwrap().as_str(), "/");
        assert_eq!(
            cwd.resolve("../../../../etc/passwd").unwrap().as_str(),
            "/etc/passwd"
        );
        assert_eq!(cwd.resolve("").unwrap().as_str(), "/a/b");
    }

    #[test]
    fn a_trailing_slash_is_kept_as_meaning() {
        let cwd = vp("/a");
        assert_eq!(cwd.resolve("f/").unwrap().as_str(), "/a/f");
        assert_ne!(cwd.resolve("f/").unwrap(), cwd.resolve("f").unwrap());
        assert_ne!(cwd.resolve("f/.").unwrap(), cwd.resolve("f").unwrap());
        assert_eq!(cwd.resolve("/a/f").unwrap(), cwd.resolve("f").unwrap());
        assert_eq!(cwd.resolve("/").unwrap(), VirtualPath::root());
        let f = cwd.resolve("f/").unwrap();
        assert!(f.names_dir());
        assert_eq!(format!("{f:?}"), "VirtualPath(\"/a/f/\")");
        assert_eq!(f.to_string(), "/a/f");
        for (arg, dir) in [
            ("f/.", true),
            ("/f//", true),
            (".", true),
            ("f", false),
            ("", false),
            ("f/..", false),
            ("./", true),
            ("/", false),
            ("..//", false),
        ] {
            let p = cwd.resolve(arg).unwrap();
            assert_eq!(p.names_dir(), dir, "{arg:?}");
        }
        // Paths derived from a flagged one do not inherit the flag.
        assert!(!f.parent().names_dir());
        assert!(!f.resolve("g").unwrap().names_dir());
    }

    #[test]
    fn parent_and_name() {
        assert_eq!(vp("/a/b").parent().as_str(), "/a");
        assert_eq!(vp("/a").parent().as_str(), "/");
        assert_eq!(VirtualPath::root().parent().as_str(), "/");
        assert_eq!(vp("/a/b").file_name(), Some("b"));
        assert_eq!(VirtualPath::root().file_name(), None);
    }

    #[test]
    fn refuses_nul_and_overlong() {
        assert_eq!(VirtualPath::root().resolve("a\0b"), Err(PathError::Nul));
        let long = "x".repeat(MAX_PATH + 1);
        assert_eq!(VirtualPath::root().resolve(&long), Err(PathError::TooLong));
    }

    proptest! {
        #[test]
        fn always_normalized(cwd in "[a./]{0,20}", arg in "[a./]{0,40}") {
            let base = VirtualPath::root().resolve(&cwd).unwrap();
            let p = base.resolve(&arg).unwrap();
            let s = p.as_str();
            prop_assert!(s.starts_with('/'));
            prop_assert!(s == "/" || !s.ends_with('/'));
            prop_assert!(!s.contains("//"));
            prop_assert!(p.components().all(|c| c != "." && c != ".."));
        }
    }
}
