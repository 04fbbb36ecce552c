//! `http://host[:port]/path?query` URLs for `sluice get`: just enough
//! parsing to connect and to build a request, with the target encoded so
//! it can go on a request line. `https://` is the same with `tls` set.

use std::fmt;

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host to connect to: a name, an IPv4 literal, or an IPv6 literal
    /// without brackets.
    pub host: String,
    /// TCP port (80, or 443 for https, if none was given).
    pub port: u16,
    /// `https://`: the connection is TLS.
    pub tls: bool,
    /// Origin-form target (`/path?query`), percent-encoded where the
    /// input had spaces or bytes outside printable ASCII; `#fragment`
    /// dropped.
    pub target: String,
}

/// Why a URL was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlError {
    /// Not `http://` or `https://`.
    Scheme,
    /// Empty or malformed host, or `user@` (credentials in URLs are not
    /// supported).
    Host,
    /// Port not a number in 1..=65535.
    Port,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlError::Scheme => "only http:// and https:// URLs are supported",
            UrlError::Host => "bad host in URL",
            UrlError::Port => "bad port in URL",
        })
    }
}

impl std::error::Error for UrlError {}

impl HttpUrl {
    /// Parse `http://host[:port][/path][?query][#fragment]`.
    pub fn parse(s: &str) -> Result<HttpUrl, UrlError> {
        let s = s.trim();
        let (tls, rest) = match (s.get(..7), s.get(..8)) {
            (Some(p), _) if p.eq_ignore_ascii_case("http://") => (false, &s[7..]),
            (_, Some(p)) if p.eq_ignore_ascii_case("https://") => (true, &s[8..]),
            _ => return Err(UrlError::Scheme),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err(UrlError::Host);
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or(UrlError::Host)?;
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(UrlError::Host);
            }
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or(UrlError::Port)?)),
            }
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        {
            return Err(UrlError::Host);
        }
        let port = match port {
            None | Some("") if tls => 443,
            None | Some("") => 80,
            Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u16>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(UrlError::Port)?,
            Some(_) => return Err(UrlError::Port),
        };
        let tail = tail.split('#').next().unwrap_or("");
        let mut target = String::with_capacity(tail.len() + 1);
        if !tail.starts_with('/') {
            target.push('/');
        }
        for &b in tail.as_bytes() {
            if b > 0x20 && b < 0x7f {
                target.push(char::from(b));
            } else {
                target.push_str(&format!("%{b:02X}"));
            }
        }
        Ok(HttpUrl {
            host: host.to_ascii_lowercase(),
            port,
            tls,
            target,
        })
    }

    /// The Host field value: `host`, or `host:port` when not the
    /// scheme's default port (80, https 443); IPv6
    /// literals in brackets (RFC 9110 7.2).
    pub fn host_field(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The last path segment, percent-decoded if that is clean, for a
    /// default output file name; `None` for a directory-like target.
    pub fn file_name(&self) -> Option<String> {
        let path = self.target.split('?').next().unwrap_or("/");
        let vp = crate::path::normalize(path).ok()?;
        if vp.has_trailing_slash() {
            return None;
        }
        vp.file_name().map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let u = HttpUrl::parse("http://127.0.0.1:8080/big%20file?x=1#frag").unwrap();
        assert_eq!(
            u,
            HttpUrl {
                host: "127.0.0.1".into(),
                port: 8080,
                tls: false,
                target: "/big%20file?x=1".into()
            }
        );
        assert_eq!(u.host_field(), "127.0.0.1:8080");
        assert_eq!(u.file_name().as_deref(), Some("big file"));
        let u = HttpUrl::parse("HTTP://Example.COM").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("example.com", 80, "/")
        );
        assert_eq!(u.host_field(), "example.com");
        assert_eq!(u.file_name(), None);
        let u = HttpUrl::parse("http://[::1]:81/a b").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("::1", 81, "/a%20b")
        );
        assert_eq!(u.host_field(), "[::1]:81");
        assert_eq!(HttpUrl::parse("http://h?q").unwrap().target, "/?q");
        assert_eq!(HttpUrl::parse("http://h/d/").unwrap().file_name(), None);
    }

    #[test]
    fn refusals() {
        let s = HttpUrl::parse("https://h/x").unwrap();
        assert!(s.tls && s.port == 443 && s.host_field() == "h");
        assert_eq!(
            HttpUrl::parse("https://h:8443/").unwrap().host_field(),
            "h:8443"
        );
        assert_eq!(HttpUrl::parse("ftp://h/"), Err(UrlError::Scheme));
        assert_eq!(HttpUrl::parse("http:///x"), Err(UrlError::Host));
        assert_eq!(HttpUrl::parse("http://u:p@h/"), Err(UrlError::Host));
        assert_eq!(HttpUrl::parse("http://[zz]/"), Err(UrlError::Host));
        assert_eq!(HttpUrl::parse("http://h:0/"), Err(UrlError::Port));
        assert_eq!(HttpUrl::parse("http://h:70000/"), Err(UrlError::Port));
        assert_eq!(HttpUrl::parse("http://h:8a/"), Err(UrlError::Port));
        assert_eq!(HttpUrl::parse("http://h\r\nX: y/"), Err(UrlError::Host));
    }

    #[test]
    fn target_is_safe_for_the_request_builder() {
        let u = HttpUrl::parse("http://h/a\r\nEvil: 1 \u{e9}").unwrap();
        assert_eq!(u.target, "/a%0D%0AEvil:%201%20%C3%A9");
        let req = crate::ClientRequest {
            method: crate::Method::Get,
            host: &u.host_field(),
            target: &u.target,
            range: None,
            if_range: None,
            keep_alive: true,
            user_agent: "",
        };
        assert!(req.encode().is_ok());
    }
}
