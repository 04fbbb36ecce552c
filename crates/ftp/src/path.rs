//! Virtual paths: what the session calls a path.
//!
//! The session keeps its working directory as a [`VirtualPath`]: always
//! rooted at `/`, normalized (no `.`, no `..`, no empty components, no
//! trailing slash), and never above `/` (`..` at the root stays at the root,
//! as on a chrooted server). Client arguments are resolved against it with
//! [`VirtualPath::resolve`].
//!
//! This is bookkeeping, not a security boundary: the shell hands a virtual
//! path to `sluice_platform::fs::ServedRoot`, where the kernel resolves it
//! beneath the served root (`openat2(RESOLVE_BENEATH)`) and refuses symlinks
//! that escape.

use crate::limits::MAX_PATH;

/// A normalized, `/`-rooted path inside the served tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VirtualPath(String);

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
        VirtualPath("/".to_string())
    }

    /// The path as text, always starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// Resolves a client argument against `self` (the working directory).
    /// Absolute arguments start from `/`; `..` never climbs above `/`.
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
        let mut s = String::with_capacity(arg.len() + self.0.len() + 1);
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
        Ok(VirtualPath(s))
    }

    /// The parent directory (`/` for `/`).
    pub fn parent(&self) -> VirtualPath {
        match self.0.rfind('/') {
            Some(0) | None => VirtualPath::root(),
            Some(i) => VirtualPath(self.0[..i].to_string()),
        }
    }

    /// The last component, or `None` for `/`.
    pub fn file_name(&self) -> Option<&str> {
        if self.is_root() {
            None
        } else {
            self.0.rsplit('/').next()
        }
    }

    /// The components, root first, without the leading `/`.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }
}

impl std::fmt::Display for VirtualPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
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
