//! Data-connection addresses: PORT and EPRT arguments, 227 and 229 replies.
//!
//! ```text
//! PORT h1,h2,h3,h4,p1,p2          RFC 959 4.1.2   port = p1*256 + p2
//! EPRT |1|132.235.1.2|6275|       RFC 2428 2      any delimiter 33..=126
//! EPRT |2|1080::8:800:200C:417A|5282|
//! 227 Entering Passive Mode (h1,h2,h3,h4,p1,p2).
//! 229 Entering Extended Passive Mode (|||6446|)
//! ```
//!
//! Parsers are strict: every number must be plain decimal digits in range,
//! port 0 is refused. Whether the address is acceptable (same host as the
//! control peer, port >= 1024) is the session's policy, not checked here.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

/// Why an address argument or reply was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrError {
    /// Wrong shape: missing fields, wrong delimiters, stray characters.
    Syntax,
    /// A number out of its range (octet > 255, port 0 or > 65535).
    OutOfRange,
    /// EPRT network protocol other than 1 (IPv4) or 2 (IPv6): RFC 2428
    /// says reply 522.
    UnsupportedProtocol,
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Syntax => "malformed address",
            Self::OutOfRange => "address number out of range",
            Self::UnsupportedProtocol => "unsupported network protocol",
        })
    }
}

impl std::error::Error for AddrError {}

/// Parse a decimal number of at most `max`, digits only (no sign, no
/// spaces), without overflow however long the input.
fn number(s: &[u8], max: u32) -> Result<u32, AddrError> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(AddrError::Syntax);
    }
    let mut n: u32 = 0;
    for &d in s {
        n = n * 10 + u32::from(d - b'0');
        if n > max {
            return Err(AddrError::OutOfRange);
        }
    }
    Ok(n)
}

/// Six comma-separated numbers `h1,h2,h3,h4,p1,p2` (exactly, nothing else).
fn six_numbers(arg: &[u8]) -> Result<SocketAddrV4, AddrError> {
    let mut n = [0u8; 6];
    let mut fields = arg.split(|&b| b == b',');
    for slot in &mut n {
        let f = fields.next().ok_or(AddrError::Syntax)?;
        *slot = number(f, 255)? as u8;
    }
    if fields.next().is_some() {
        return Err(AddrError::Syntax);
    }
    let port = u16::from(n[4]) << 8 | u16::from(n[5]);
    if port == 0 {
        return Err(AddrError::OutOfRange);
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::new(n[0], n[1], n[2], n[3]),
        port,
    ))
}

/// Parse a PORT argument `h1,h2,h3,h4,p1,p2`. Surrounding spaces are
/// tolerated; anything else is not.
pub fn parse_port(arg: &[u8]) -> Result<SocketAddrV4, AddrError> {
    six_numbers(arg.trim_ascii())
}

/// Format a PORT argument (also the inside of a 227 reply).
pub fn format_port(addr: SocketAddrV4) -> String {
    let [a, b, c, d] = addr.ip().octets();
    let p = addr.port();
    format!("{a},{b},{c},{d},{},{}", p >> 8, p & 0xff)
}

/// Parse an EPRT argument `<d><proto><d><addr><d><port><d>`.
pub fn parse_eprt(arg: &[u8]) -> Result<SocketAddr, AddrError> {
    let arg = arg.trim_ascii();
    let (&d, rest) = arg.split_first().ok_or(AddrError::Syntax)?;
    if !(33..=126).contains(&d) || rest.last() != Some(&d) {
        return Err(AddrError::Syntax);
    }
    let mut fields = rest[..rest.len() - 1].split(|&b| b == d);
    let (Some(proto), Some(host), Some(port), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(AddrError::Syntax);
    };
    let proto = number(proto, 255).map_err(|_| AddrError::Syntax)?;
    let port = number(port, 65535)? as u16;
    if port == 0 {
        return Err(AddrError::OutOfRange);
    }
    let host = std::str::from_utf8(host).map_err(|_| AddrError::Syntax)?;
    let ip = match proto {
        1 => IpAddr::V4(host.parse::<Ipv4Addr>().map_err(|_| AddrError::Syntax)?),
        2 => IpAddr::V6(host.parse::<Ipv6Addr>().map_err(|_| AddrError::Syntax)?),
        _ => return Err(AddrError::UnsupportedProtocol),
    };
    Ok(SocketAddr::new(ip, port))
}

/// Format an EPRT argument with `|` as delimiter. An IPv4-mapped IPv6
/// address is sent as protocol 2, as it is.
pub fn format_eprt(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("|1|{}|{}|", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("|2|{}|{}|", a.ip(), a.port()),
    }
}

/// Text of a 227 reply for a passive listener at `addr`.
pub fn format_227(addr: SocketAddrV4) -> String {
    format!("Entering Passive Mode ({}).", format_port(addr))
}

/// Find the address in a 227 reply's text. As clients do (RFC 1123
/// 4.1.2.6), look for the first run of six comma-separated numbers anywhere,
/// with or without parentheses.
pub fn parse_227(text: &str) -> Result<SocketAddrV4, AddrError> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut last_err = AddrError::Syntax;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let end = b[i..]
                .iter()
                .position(|c| !(c.is_ascii_digit() || *c == b','))
                .map_or(b.len(), |n| i + n);
            match six_numbers(&b[i..end]) {
                Ok(a) => return Ok(a),
                Err(e) => last_err = e,
            }
            i = end;
        } else {
            i += 1;
        }
    }
    Err(last_err)
}

/// Text of a 229 reply for a passive listener on `port`.
pub fn format_229(port: u16) -> String {
    format!("Entering Extended Passive Mode (|||{port}|)")
}

/// Find the port in a 229 reply's text: `(<d><d><d>port<d>)`, with any
/// delimiter 33..=126 (RFC 2428 3).
pub fn parse_229(text: &str) -> Result<u16, AddrError> {
    let b = text.as_bytes();
    let open = b.iter().position(|&c| c == b'(').ok_or(AddrError::Syntax)?;
    let close = b[open..]
        .iter()
        .position(|&c| c == b')')
        .ok_or(AddrError::Syntax)?
        + open;
    let inner = &b[open + 1..close];
    if inner.len() < 5 {
        return Err(AddrError::Syntax);
    }
    let d = inner[0];
    if !(33..=126).contains(&d) || inner[1] != d || inner[2] != d || inner[inner.len() - 1] != d {
        return Err(AddrError::Syntax);
    }
    let port = number(&inner[3..inner.len() - 1], 65535)? as u16;
    if port == 0 {
        return Err(AddrError::OutOfRange);
    }
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_basic() {
        let a = parse_port(b"127,0,0,1,4,1").unwrap();
        assert_eq!(a, "127.0.0.1:1025".parse().unwrap());
        assert_eq!(format_port(a), "127,0,0,1,4,1");
        assert_eq!(
            parse_port(b" 10,0,0,1,255,255 ").unwrap(),
            "10.0.0.1:65535".parse().unwrap()
        );
    }

    #[test]
    fn port_rejects() {
        for bad in [
            &b"127,0,0,1,4"[..],
            b"127,0,0,1,4,1,1",
            b"127,0,0,1,4,256",
            b"256,0,0,1,4,1",
            b"127,0,0,1,0,0",
            b"127,0,0,1,+4,1",
            b"127,0,0,1,4,",
            b"127,0,0,1,4,1x",
            b"127,0,0,1,4,99999999999999999999999",
            b"127, 0,0,1,4,1",
            b"",
        ] {
            assert!(
                parse_port(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_port(b"1,2,3,4,5,300"), Err(AddrError::OutOfRange));
    }

    #[test]
    fn eprt() {
        assert_eq!(
            parse_eprt(b"|1|132.235.1.2|6275|").unwrap(),
            "132.235.1.2:6275".parse().unwrap()
        );
        assert_eq!(
            parse_eprt(b"|2|1080::8:800:200C:417A|5282|").unwrap(),
            "[1080::8:800:200C:417A]:5282".parse().unwrap()
        );
        assert_eq!(
            parse_eprt(b"!1!10.0.0.1!21!").unwrap(),
            "10.0.0.1:21".parse().unwrap()
        );
        assert_eq!(parse_eprt(b"|3|x|1|"), Err(AddrError::UnsupportedProtocol));
        assert_eq!(parse_eprt(b"|1|::1|21|"), Err(AddrError::Syntax));
        assert_eq!(parse_eprt(b"|2|10.0.0.1|21|"), Err(AddrError::Syntax));
        assert_eq!(parse_eprt(b"|1|10.0.0.1|0|"), Err(AddrError::OutOfRange));
        assert_eq!(
            parse_eprt(b"|1|10.0.0.1|65536|"),
            Err(AddrError::OutOfRange)
        );
        assert_eq!(parse_eprt(b"|1|10.0.0.1|21"), Err(AddrError::Syntax));
        assert_eq!(parse_eprt(b"|1|10.0.0.1|21|x|"), Err(AddrError::Syntax));
        assert_eq!(parse_eprt(b" 1 10.0.0.1 21 "), Err(AddrError::Syntax));
        assert_eq!(parse_eprt(b"|2|fe80::1%eth0|21|"), Err(AddrError::Syntax));
        let a: SocketAddr = "[::1]:2121".parse().unwrap();
        assert_eq!(format_eprt(a), "|2|::1|2121|");
        assert_eq!(parse_eprt(format_eprt(a).as_bytes()).unwrap(), a);
    }

    #[test]
    fn pasv_replies() {
        let a: SocketAddrV4 = "192.168.1.2:50000".parse().unwrap();
        let t = format_227(a);
        assert_eq!(t, "Entering Passive Mode (192,168,1,2,195,80).");
        assert_eq!(parse_227(&t).unwrap(), a);
        assert_eq!(parse_227("=192,168,1,2,195,80").unwrap(), a);
        assert_eq!(
            parse_227("Entering Passive Mode 192,168,1,2,195,80").unwrap(),
            a
        );
        assert_eq!(parse_227("Mode 2 (192,168,1,2,195,80)").unwrap(), a);
        assert!(parse_227("Entering Passive Mode (192,168,1,2,195)").is_err());
        assert!(parse_227("nothing").is_err());
        assert_eq!(
            format_229(6446),
            "Entering Extended Passive Mode (|||6446|)"
        );
        assert_eq!(parse_229(&format_229(6446)).unwrap(), 6446);
        assert_eq!(parse_229("ok (!!!21!)").unwrap(), 21);
        assert!(parse_229("(|||0|)").is_err());
        assert!(parse_229("(|||70000|)").is_err());
        assert!(parse_229("(||6446|)").is_err());
        assert!(parse_229("(|||6446|").is_err());
    }
}
