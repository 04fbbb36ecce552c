//! Source and target URLs. The scheme picks the protocol module
//! (`ftp://` now; `http://` comes later), so each protocol sees an already
//! parsed, percent-decoded address.

use crate::error::{ClientError, Result};

/// Longest URL we accept on the command line; matches the FTP path bound
/// with room for scheme, credentials and host.
const MAX_URL: usize = 8192;

/// A parsed URL, one variant per protocol the client speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `ftp://` (plain FTP with GridFTP extensions when the server has them).
    Ftp(FtpUrl),
}

/// TLS on an FTP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FtpTls {
    /// `ftp://`: clear text.
    #[default]
    Off,
    /// `ftpes://`: AUTH TLS on the FTP port, then PBSZ 0 and PROT P
    /// (RFC 4217).
    Explicit,
    /// `ftps://`: TLS from the first byte (port 990 by default), PROT P.
    Implicit,
}

/// An `ftp://` URL, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtpUrl {
    /// TLS: `ftpes://` or `ftps://`.
    pub tls: FtpTls,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Control port (21 by default).
    pub port: u16,
    /// Login name (`anonymous` when the URL has none).
    pub user: String,
    /// Password (an e-mail-like string for anonymous).
    pub password: String,
    /// Path on the server, percent-decoded, starting with `/`.
    pub path: String,
}

impl FtpUrl {
    /// Last path segment, or `None` for a directory URL (`.../`).
    pub fn file_name(&self) -> Option<&str> {
        let name = self.path.rsplit('/').next().unwrap_or("");
        if name.is_empty() || name == "." || name == ".." {
            None
        } else {
            Some(name)
        }
    }

    /// `host:port` in a form `ToSocketAddrs` accepts (brackets for IPv6).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses a URL given on the command line.
pub fn parse(s: &str) -> Result<Target> {
    if s.len() > MAX_URL {
        return Err(ClientError::Usage(format!(
            "URL longer than {MAX_URL} bytes"
        )));
    }
    let u = url::Url::parse(s).map_err(|e| ClientError::Usage(format!("bad URL: {e}")))?;
    match u.scheme() {
        "ftp" | "gsiftp" => parse_ftp(&u, FtpTls::Off).map(Target::Ftp),
        "ftpes" => parse_ftp(&u, FtpTls::Explicit).map(Target::Ftp),
        "ftps" => parse_ftp(&u, FtpTls::Implicit).map(Target::Ftp),
        other => Err(ClientError::Usage(format!(
            "unsupported URL scheme `{other}` (expected ftp://, ftpes://, ftps://, http:// or https://)"
        ))),
    }
}

fn parse_ftp(u: &url::Url, tls: FtpTls) -> Result<FtpUrl> {
    let host = match u.host() {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err(ClientError::Usage("URL has no host".into())),
    };
    let port = u
        .port()
        .unwrap_or(if tls == FtpTls::Implicit { 990 } else { 21 });
    let user = decode(u.username(), "user name")?;
    let password = decode(u.password().unwrap_or(""), "password")?;
    let (user, password) = if user.is_empty() {
        (
            "anonymous".to_string(),
            if password.is_empty() {
                "sluice@".into()
            } else {
                password
            },
        )
    } else {
        (user, password)
    };
    // `;type=i` and similar RFC 1738 typecodes are not paths.
    let raw_path = u.path().split(';').next().unwrap_or("/");
    let path = decode(raw_path, "path")?;
    if path.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(ClientError::Usage("path contains CR, LF or NUL".into()));
    }
    if path.len() > sluice_ftp::limits::MAX_PATH {
        return Err(ClientError::Usage("path too long".into()));
    }
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    Ok(FtpUrl {
        tls,
        host,
        port,
        user,
        password,
        path,
    })
}

fn decode(s: &str, what: &str) -> Result<String> {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
    let out = String::from_utf8(bytes)
        .map_err(|_| ClientError::Usage(format!("{what} is not UTF-8 after decoding")))?;
    if out.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(ClientError::Usage(format!("{what} contains CR, LF or NUL")));
    }
    Ok(out)
}

/// The URL with any password replaced by `***`, for error lines.
pub fn redact(s: &str) -> String {
    match url::Url::parse(s) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ftp(s: &str) -> FtpUrl {
        match parse(s).expect("parses") {
            Target::Ftp(f) => f,
        }
    }

    #[test]
    fn anonymous_default_port() {
        let u = ftp("ftp://example.org/pub/file.bin");
        assert_eq!(u.host, "example.org");
        assert_eq!(u.port, 21);
        assert_eq!(u.user, "anonymous");
        assert_eq!(u.path, "/pub/file.bin");
        assert_eq!(u.file_name(), Some("file.bin"));
    }

    #[test]
    fn credentials_are_percent_decoded() {
        let u = ftp("ftp://us%40er:p%3Ass%20w@127.0.0.1:2121/a%20b/c%25d");
        assert_eq!(u.user, "us@er");
        assert_eq!(u.password, "p:ss w");
        assert_eq!(u.port, 2121);
        assert_eq!(u.path, "/a b/c%d");
        assert_eq!(u.authority(), "127.0.0.1:2121");
    }

    #[test]
    fn ipv6_host() {
        let u = ftp("ftp://[::1]:2121/x");
        assert_eq!(u.host, "::1");
        assert_eq!(u.authority(), "[::1]:2121");
    }

    #[test]
    fn directory_url_has_no_file_name() {
        assert_eq!(ftp("ftp://h/dir/").file_name(), None);
        assert_eq!(ftp("ftp://h").file_name(), None);
        assert_eq!(ftp("ftp://h").path, "/");
    }

    #[test]
    fn typecode_is_stripped() {
        assert_eq!(ftp("ftp://h/f;type=i").path, "/f");
    }

    #[test]
    fn rejects_crlf_injection() {
        assert!(matches!(
            parse("ftp://h/a%0d%0aDELE%20x"),
            Err(ClientError::Usage(_))
        ));
        assert!(matches!(
            parse("ftp://u%0a:p@h/x"),
            Err(ClientError::Usage(_))
        ));
    }

    #[test]
    fn rejects_other_schemes_and_garbage() {
        assert!(matches!(parse("gopher://h/x"), Err(ClientError::Usage(_))));
        assert!(matches!(parse("not a url"), Err(ClientError::Usage(_))));
        assert!(matches!(parse("ftp://"), Err(ClientError::Usage(_))));
        assert!(matches!(parse("http://h/x"), Err(ClientError::Usage(_))));
    }

    #[test]
    fn redact_hides_password() {
        assert_eq!(redact("ftp://u:secret@h/x"), "ftp://u:***@h/x");
        assert_eq!(redact("ftp://h/x"), "ftp://h/x");
    }
}
