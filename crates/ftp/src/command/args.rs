//! Argument parsers for [`super::parse_command`]: one function per
//! argument shape, each bounded and returning the [`CommandError`] that
//! names the verb.

use super::{Command, CommandError, Dcau, Opts, Parallelism, Restart, RetrOpts, TransferType};
use crate::limits::{MAX_OFFSET, MAX_PARALLELISM, MAX_PATH, MAX_SBUF, MAX_VERB};
use crate::markers::{decimal, RangeSet};

pub(super) fn need<'a>(
    arg: Option<&'a [u8]>,
    verb: &'static str,
) -> Result<&'a [u8], CommandError> {
    arg.ok_or(CommandError::MissingArgument(verb))
}

/// The argument trimmed of surrounding spaces.
pub(super) fn word(a: &[u8]) -> &[u8] {
    a.trim_ascii()
}

pub(super) fn number(a: &[u8], verb: &'static str) -> Result<u64, CommandError> {
    decimal(a).map_err(|_| CommandError::BadArgument(verb))
}

fn text(a: &[u8], verb: &'static str, max: usize) -> Result<String, CommandError> {
    if a.len() > max {
        return Err(CommandError::TooLong(verb));
    }
    if a.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(CommandError::BadPath(verb));
    }
    String::from_utf8(a.to_vec()).map_err(|_| CommandError::BadPath(verb))
}

/// A USER/ACCT name: UTF-8 without control characters. Names end up in
/// logs and in the user table lookup; a NUL or an escape sequence in one is
/// never a real name.
pub(super) fn name(
    arg: Option<&[u8]>,
    verb: &'static str,
    max: usize,
) -> Result<String, CommandError> {
    let a = need(arg, verb)?;
    if a.len() > max {
        return Err(CommandError::TooLong(verb));
    }
    if a.iter().any(u8::is_ascii_control) {
        return Err(CommandError::BadName(verb));
    }
    String::from_utf8(a.to_vec()).map_err(|_| CommandError::BadName(verb))
}

pub(super) fn path(arg: Option<&[u8]>, verb: &'static str) -> Result<String, CommandError> {
    text(need(arg, verb)?, verb, MAX_PATH)
}

/// `MFMT YYYYMMDDHHMMSS[.sss] path`: the time (UTC, checked by
/// [`crate::listing::parse_mdtm`]) and the path after one space.
pub(super) fn mfmt(arg: Option<&[u8]>) -> Result<super::Command, CommandError> {
    let a = need(arg, "MFMT")?;
    let sp = a
        .iter()
        .position(|&b| b == b' ')
        .ok_or(CommandError::BadArgument("MFMT"))?;
    let time = std::str::from_utf8(&a[..sp]).map_err(|_| CommandError::BadArgument("MFMT"))?;
    let secs = crate::listing::parse_mdtm(time).ok_or(CommandError::BadArgument("MFMT"))?;
    let path = text(&a[sp + 1..], "MFMT", MAX_PATH)?;
    Ok(super::Command::Mfmt { secs, path })
}

pub(super) fn opt_path(
    arg: Option<&[u8]>,
    verb: &'static str,
) -> Result<Option<String>, CommandError> {
    arg.map(|a| text(a, verb, MAX_PATH)).transpose()
}

pub(super) fn transfer_type(a: &[u8]) -> Result<TransferType, CommandError> {
    let up = a.trim_ascii().to_ascii_uppercase();
    let mut parts = up.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let t = match (parts.next(), parts.next()) {
        (Some(b"A"), None | Some(b"N")) => TransferType::Ascii,
        (Some(b"I"), None) => TransferType::Image,
        (Some(b"L"), Some(b"8")) => TransferType::Local8,
        (Some(b"A" | b"E" | b"L"), _) => return Err(CommandError::Unsupported("TYPE")),
        _ => return Err(CommandError::BadArgument("TYPE")),
    };
    if parts.next().is_some() {
        return Err(CommandError::BadArgument("TYPE"));
    }
    Ok(t)
}

pub(super) fn restart(a: &[u8]) -> Result<Restart, CommandError> {
    let a = a.trim_ascii();
    if a.contains(&b'-') {
        RangeSet::parse(a)
            .map(Restart::Ranges)
            .map_err(|_| CommandError::BadArgument("REST"))
    } else {
        number(a, "REST").map(Restart::Offset)
    }
}

pub(super) fn sbuf(a: &[u8], verb: &'static str) -> Result<u64, CommandError> {
    let n = number(a, verb)?;
    if n > MAX_SBUF {
        return Err(CommandError::BadArgument(verb));
    }
    Ok(n)
}

pub(super) fn opts(a: &[u8]) -> Result<Opts, CommandError> {
    let a = a.trim_ascii();
    let (name, rest) = match a.iter().position(|&b| b == b' ') {
        Some(sp) => (&a[..sp], a[sp + 1..].trim_ascii()),
        None => (a, &b""[..]),
    };
    let name_up = name.to_ascii_uppercase();
    match &name_up[..] {
        b"UTF8" | b"UTF-8" => match rest.to_ascii_uppercase().as_slice() {
            b"ON" | b"" => Ok(Opts::Utf8(true)),
            b"OFF" => Ok(Opts::Utf8(false)),
            _ => Err(CommandError::BadArgument("OPTS")),
        },
        b"RETR" => retr_opts(rest).map(Opts::Retr),
        _ => {
            if name.len() > MAX_VERB {
                return Err(CommandError::BadArgument("OPTS"));
            }
            Ok(Opts::Other {
                name: String::from_utf8_lossy(&name_up).into_owned(),
                args: rest.to_vec(),
            })
        }
    }
}

fn retr_opts(a: &[u8]) -> Result<RetrOpts, CommandError> {
    let bad = CommandError::BadArgument("OPTS");
    let mut o = RetrOpts::default();
    for item in a
        .split(|&b| b == b';')
        .map(<[u8]>::trim_ascii)
        .filter(|i| !i.is_empty())
    {
        let eq = item.iter().position(|&b| b == b'=').ok_or(bad.clone())?;
        let (k, v) = (&item[..eq], &item[eq + 1..]);
        if k.eq_ignore_ascii_case(b"Parallelism") {
            let mut n = [0u32; 3];
            let mut parts = v.split(|&b| b == b',');
            for slot in &mut n {
                let p = decimal(parts.next().ok_or(bad.clone())?).map_err(|_| bad.clone())?;
                if p == 0 || p > u64::from(MAX_PARALLELISM) {
                    return Err(bad);
                }
                *slot = p as u32;
            }
            if parts.next().is_some() {
                return Err(bad);
            }
            o.parallelism = Some(Parallelism {
                start: n[0],
                min: n[1],
                max: n[2],
            });
        } else {
            if o.other.len() >= 16 {
                return Err(bad);
            }
            let k = String::from_utf8(k.to_vec()).map_err(|_| bad.clone())?;
            let v = String::from_utf8(v.to_vec()).map_err(|_| bad.clone())?;
            o.other.push((k, v));
        }
    }
    Ok(o)
}

pub(super) fn site(a: &[u8]) -> Result<Command, CommandError> {
    let t = a.trim_ascii_start();
    let (sub, rest) = match t.iter().position(|&b| b == b' ') {
        Some(sp) => (&t[..sp], &t[sp + 1..]),
        None => (t, &b""[..]),
    };
    if sub.eq_ignore_ascii_case(b"BUFSIZE") {
        return Ok(Command::Sbuf(sbuf(rest, "SITE BUFSIZE")?));
    }
    Ok(Command::Site(a.to_vec()))
}

/// Split off the first space-separated token.
fn token(a: &[u8]) -> Option<(&[u8], &[u8])> {
    let a = a.trim_ascii_start();
    let sp = a.iter().position(|&b| b == b' ')?;
    Some((&a[..sp], &a[sp + 1..]))
}

pub(super) fn eret(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("ERET");
    let (module, rest) = token(a).ok_or(bad.clone())?;
    if !module.eq_ignore_ascii_case(b"P") {
        return Err(CommandError::Unsupported("ERET"));
    }
    let (off, rest) = token(rest).ok_or(bad.clone())?;
    let (len, p) = token(rest).ok_or(bad)?;
    let offset = number(off, "ERET")?;
    let length = number(len, "ERET")?;
    end_within_limit(offset, length, "ERET")?;
    Ok(Command::Eret {
        offset,
        length,
        path: path(Some(p), "ERET")?,
    })
}

/// `offset + length` must not pass [`MAX_OFFSET`] (what `off_t` can hold).
fn end_within_limit(offset: u64, length: u64, verb: &'static str) -> Result<(), CommandError> {
    match offset.checked_add(length) {
        Some(end) if end <= MAX_OFFSET => Ok(()),
        _ => Err(CommandError::BadArgument(verb)),
    }
}

pub(super) fn esto(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("ESTO");
    let (module, rest) = token(a).ok_or(bad.clone())?;
    if !module.eq_ignore_ascii_case(b"A") {
        return Err(CommandError::Unsupported("ESTO"));
    }
    let (off, p) = token(rest).ok_or(bad)?;
    Ok(Command::Esto {
        offset: number(off, "ESTO")?,
        path: path(Some(p), "ESTO")?,
    })
}

pub(super) fn cksm(a: &[u8]) -> Result<Command, CommandError> {
    let bad = CommandError::BadArgument("CKSM");
    let (alg, rest) = token(a).ok_or(bad.clone())?;
    let (off, rest) = token(rest).ok_or(bad.clone())?;
    let (len, p) = token(rest).ok_or(bad.clone())?;
    if alg.is_empty()
        || alg.len() > MAX_VERB
        || !alg.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
    {
        return Err(bad);
    }
    let offset = number(off, "CKSM")?;
    let length = if len == b"-1" {
        None
    } else {
        Some(number(len, "CKSM")?)
    };
    if let Some(l) = length {
        end_within_limit(offset, l, "CKSM")?;
    }
    Ok(Command::Cksm {
        algorithm: String::from_utf8_lossy(&alg.to_ascii_uppercase()).into_owned(),
        offset,
        length,
        path: path(Some(p), "CKSM")?,
    })
}

pub(super) fn dcau(a: &[u8]) -> Result<Dcau, CommandError> {
    let a = a.trim_ascii();
    let (mode, rest) = match a.iter().position(|&b| b == b' ') {
        Some(sp) => (&a[..sp], a[sp + 1..].trim_ascii()),
        None => (a, &b""[..]),
    };
    match (mode.to_ascii_uppercase().as_slice(), rest.is_empty()) {
        (b"N", true) => Ok(Dcau::None),
        (b"A", true) => Ok(Dcau::SelfAuth),
        (b"S", false) => Ok(Dcau::Subject(text(rest, "DCAU", MAX_PATH)?)),
        _ => Err(CommandError::BadArgument("DCAU")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse_command, Epsv, Prot, TransferMode};
    use super::*;
    use crate::reply::ReplyCode;

    fn p(s: &str) -> Result<Command, CommandError> {
        parse_command(s.as_bytes())
    }

    #[test]
    fn type_mode_stru() {
        assert_eq!(p("TYPE I").unwrap(), Command::Type(TransferType::Image));
        assert_eq!(p("type a").unwrap(), Command::Type(TransferType::Ascii));
        assert_eq!(p("TYPE A N").unwrap(), Command::Type(TransferType::Ascii));
        assert_eq!(p("TYPE L 8").unwrap(), Command::Type(TransferType::Local8));
        assert_eq!(p("TYPE E"), Err(CommandError::Unsupported("TYPE")));
        assert_eq!(p("TYPE L 7"), Err(CommandError::Unsupported("TYPE")));
        assert_eq!(p("TYPE X"), Err(CommandError::BadArgument("TYPE")));
        assert_eq!(p("TYPE I extra"), Err(CommandError::BadArgument("TYPE")));
        assert_eq!(
            p("MODE E").unwrap(),
            Command::Mode(TransferMode::ExtendedBlock)
        );
        assert_eq!(p("mode s").unwrap(), Command::Mode(TransferMode::Stream));
        assert_eq!(
            p("MODE B").unwrap_err().reply().code,
            ReplyCode::PARAMETER_NOT_IMPLEMENTED
        );
        assert_eq!(p("STRU F").unwrap(), Command::Stru);
        assert_eq!(p("STRU R"), Err(CommandError::Unsupported("STRU")));
    }

    #[test]
    fn opts() {
        assert_eq!(p("OPTS UTF8 ON").unwrap(), Command::Opts(Opts::Utf8(true)));
        assert_eq!(
            p("opts utf8 off").unwrap(),
            Command::Opts(Opts::Utf8(false))
        );
        let Command::Opts(Opts::Retr(r)) = p("OPTS RETR Parallelism=4,2,8;").unwrap() else {
            panic!()
        };
        assert_eq!(
            r.parallelism,
            Some(Parallelism {
                start: 4,
                min: 2,
                max: 8
            })
        );
        let Command::Opts(Opts::Retr(r)) =
            p("OPTS RETR StripeLayout=Blocked;BlockSize=1048576;").unwrap()
        else {
            panic!()
        };
        assert_eq!(r.parallelism, None);
        assert_eq!(r.other.len(), 2);
        assert_eq!(
            p("OPTS RETR Parallelism=0,1,1;"),
            Err(CommandError::BadArgument("OPTS"))
        );
        assert_eq!(
            p("OPTS RETR Parallelism=65,1,1;"),
            Err(CommandError::BadArgument("OPTS"))
        );
        assert_eq!(
            p("OPTS RETR Parallelism=1,1;"),
            Err(CommandError::BadArgument("OPTS"))
        );
        assert_eq!(
            p("OPTS RETR Parallelism=99999999999999999999,1,1;"),
            Err(CommandError::BadArgument("OPTS"))
        );
        assert_eq!(
            p("OPTS MLST type;size;").unwrap(),
            Command::Opts(Opts::Other {
                name: "MLST".into(),
                args: b"type;size;".to_vec()
            })
        );
    }

    #[test]
    fn rest() {
        assert_eq!(p("REST 100").unwrap(), Command::Rest(Restart::Offset(100)));
        assert_eq!(p("REST -1"), Err(CommandError::BadArgument("REST")));
        assert_eq!(
            p("REST 18446744073709551616"),
            Err(CommandError::BadArgument("REST"))
        );
        let Command::Rest(Restart::Ranges(r)) = p("REST 0-100,200-300").unwrap() else {
            panic!()
        };
        assert_eq!(r.ranges(), &[0..100, 200..300]);
    }

    #[test]
    fn gridftp() {
        assert_eq!(
            p("ERET P 100 200 my file").unwrap(),
            Command::Eret {
                offset: 100,
                length: 200,
                path: "my file".into()
            }
        );
        assert_eq!(p("ERET X 1 2 f"), Err(CommandError::Unsupported("ERET")));
        assert_eq!(p("ERET P 1 f"), Err(CommandError::BadArgument("ERET")));
        assert_eq!(
            p("ERET P 9223372036854775807 1 f"),
            Err(CommandError::BadArgument("ERET"))
        );
        assert_eq!(
            p("ESTO A 5 f g").unwrap(),
            Command::Esto {
                offset: 5,
                path: "f g".into()
            }
        );
        assert_eq!(p("SBUF 1048576").unwrap(), Command::Sbuf(1 << 20));
        assert_eq!(p("SITE BUFSIZE 4096").unwrap(), Command::Sbuf(4096));
        assert_eq!(p("site bufsize 4096").unwrap(), Command::Sbuf(4096));
        assert_eq!(
            p("SBUF 99999999999"),
            Err(CommandError::BadArgument("SBUF"))
        );
        assert_eq!(
            p("SITE CHMOD 644 f").unwrap(),
            Command::Site(b"CHMOD 644 f".to_vec())
        );
        assert_eq!(p("DCAU N").unwrap(), Command::Dcau(Dcau::None));
        assert_eq!(p("DCAU A").unwrap(), Command::Dcau(Dcau::SelfAuth));
        assert_eq!(
            p("DCAU S /O=x/CN=y z").unwrap(),
            Command::Dcau(Dcau::Subject("/O=x/CN=y z".into()))
        );
        assert_eq!(p("DCAU S"), Err(CommandError::BadArgument("DCAU")));
        assert_eq!(p("PROT P").unwrap(), Command::Prot(Prot::Private));
        assert_eq!(p("PROT c").unwrap(), Command::Prot(Prot::Clear));
        assert_eq!(p("PBSZ 0").unwrap(), Command::Pbsz(0));
        assert_eq!(
            p("CKSM md5 0 -1 a b").unwrap(),
            Command::Cksm {
                algorithm: "MD5".into(),
                offset: 0,
                length: None,
                path: "a b".into()
            }
        );
        assert_eq!(
            p("CKSM ADLER32 10 20 f").unwrap(),
            Command::Cksm {
                algorithm: "ADLER32".into(),
                offset: 10,
                length: Some(20),
                path: "f".into()
            }
        );
        assert_eq!(p("CKSM MD5 0 -2 f"), Err(CommandError::BadArgument("CKSM")));
        assert_eq!(p("ALLO 1000").unwrap(), Command::Allo(Some(1000)));
        assert_eq!(p("ALLO 1000 R 10").unwrap(), Command::Allo(Some(1000)));
        assert_eq!(p("ALLO").unwrap(), Command::Allo(None));
    }

    #[test]
    fn data_channel_setup() {
        assert_eq!(p("PASV").unwrap(), Command::Pasv);
        assert_eq!(p("EPSV").unwrap(), Command::Epsv(Epsv::Any));
        assert_eq!(p("EPSV ALL").unwrap(), Command::Epsv(Epsv::All));
        assert_eq!(p("epsv all").unwrap(), Command::Epsv(Epsv::All));
        assert_eq!(p("EPSV 2").unwrap(), Command::Epsv(Epsv::Protocol(2)));
        assert_eq!(p("EPSV 300"), Err(CommandError::BadArgument("EPSV")));
        assert_eq!(
            p("PORT 127,0,0,1,4,1").unwrap(),
            Command::Port("127.0.0.1:1025".parse().unwrap())
        );
        assert_eq!(
            p("PORT 127,0,0,256,4,1"),
            Err(CommandError::BadArgument("PORT"))
        );
        assert_eq!(
            p("EPRT |2|::1|5000|").unwrap(),
            Command::Eprt("[::1]:5000".parse().unwrap())
        );
        assert_eq!(p("EPRT |3|x|5000|"), Err(CommandError::UnsupportedProtocol));
        assert_eq!(
            p("EPRT |3|x|5000|").unwrap_err().reply().code,
            ReplyCode::BAD_NETWORK_PROTOCOL
        );
        assert_eq!(p("SPAS").unwrap(), Command::Spas);
        assert_eq!(
            p("SPOR 127,0,0,1,4,1 127,0,0,1,4,2").unwrap(),
            Command::Spor(vec![
                "127.0.0.1:1025".parse().unwrap(),
                "127.0.0.1:1026".parse().unwrap()
            ])
        );
    }
}
