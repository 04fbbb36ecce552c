//! Content-Type from a file name: a small table of common types, the
//! rest is `application/octet-stream` (safe: browsers download it rather
//! than render it). Text types say UTF-8, which is what a modern tree of
//! text files holds.

/// The Content-Type for a file called `name` (only its extension, case-
/// insensitive, is looked at).
pub fn content_type(name: &str) -> &'static str {
    let ext = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => ext.to_ascii_lowercase(),
        _ => return DEFAULT,
    };
    TABLE
        .iter()
        .find(|(e, _)| *e == ext)
        .map_or(DEFAULT, |(_, t)| t)
}

/// Unknown types.
pub const DEFAULT: &str = "application/octet-stream";

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("xml", "application/xml"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("svg", "image/svg+xml"),
    ("ico", "image/x-icon"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tgz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("bz2", "application/x-bzip2"),
    ("xz", "application/x-xz"),
    ("zst", "application/zstd"),
    ("iso", "application/x-iso9660-image"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("A.PNG"), "image/png");
        assert_eq!(content_type("x.tar.gz"), "application/gzip");
        assert_eq!(content_type("data.bin"), DEFAULT);
        assert_eq!(content_type("README"), DEFAULT);
        assert_eq!(content_type(".json"), DEFAULT);
        assert_eq!(content_type("trailing."), DEFAULT);
    }
}
