//! The command parser against every form the RFCs and the GridFTP
//! extensions allow, and what it refuses.

use super::*;
use crate::limits::MAX_PATH;
use crate::reply::ReplyCode;

fn p(s: &str) -> Result<Command, CommandError> {
    parse_command(s.as_bytes())
}

#[test]
fn verbs_are_case_insensitive_and_paths_keep_spaces() {
    assert_eq!(p("retr a b.txt").unwrap(), Command::Retr("a b.txt".into()));
    assert_eq!(p("RETR  lead").unwrap(), Command::Retr(" lead".into()));
    assert_eq!(p("Stor x ").unwrap(), Command::Stor("x ".into()));
    assert_eq!(p("xpwd").unwrap(), Command::Pwd);
    assert_eq!(p("xpwd").unwrap().verb(), "PWD");
    assert_eq!(p("site bufsize 1").unwrap().verb(), "SBUF");
    assert_eq!(p("frob x").unwrap().verb(), "FROB");
    assert_eq!(p("XCUP").unwrap(), Command::Cdup);
    assert_eq!(p("XMKD d").unwrap(), Command::Mkd("d".into()));
    assert_eq!(p("XRMD d").unwrap(), Command::Rmd("d".into()));
    assert_eq!(p("XCWD /").unwrap(), Command::Cwd("/".into()));
}

#[test]
fn optional_arguments() {
    assert_eq!(p("LIST").unwrap(), Command::List(None));
    assert_eq!(p("LIST ").unwrap(), Command::List(None));
    assert_eq!(p("LIST -la").unwrap(), Command::List(Some("-la".into())));
    assert_eq!(p("MLSD").unwrap(), Command::Mlsd(None));
    assert_eq!(p("MLST f").unwrap(), Command::Mlst(Some("f".into())));
    assert_eq!(p("NLST d").unwrap(), Command::Nlst(Some("d".into())));
    assert_eq!(p("STAT").unwrap(), Command::Stat(None));
    assert_eq!(p("HELP SITE").unwrap(), Command::Help(Some("SITE".into())));
}

#[test]
fn missing_arguments() {
    for v in [
        "RETR", "STOR", "CWD", "SIZE", "MDTM", "REST", "PORT", "EPRT", "TYPE", "MODE", "USER",
        "ERET", "CKSM",
    ] {
        assert!(matches!(p(v), Err(CommandError::MissingArgument(_))), "{v}");
    }
    assert_eq!(
        p("RETR").unwrap_err().reply().code,
        ReplyCode::BAD_ARGUMENTS
    );
}

#[test]
fn login() {
    assert_eq!(
        p("USER anonymous").unwrap(),
        Command::User("anonymous".into())
    );
    let Command::Pass(pw) = p("PASS s3cr et").unwrap() else {
        panic!()
    };
    assert_eq!(pw.as_bytes(), b"s3cr et");
    assert!(!format!("{pw:?}").contains("s3cr"));
    assert_eq!(p("PASS").unwrap(), Command::Pass(Password(Vec::new())));
    let long = format!("USER {}", "u".repeat(MAX_USER + 1));
    assert_eq!(p(&long), Err(CommandError::TooLong("USER")));
}

#[test]
fn unknown_and_bad_verbs() {
    assert_eq!(p("AUTH tls").unwrap(), Command::Auth("TLS".into()));
    assert_eq!(p("CCC").unwrap(), Command::Ccc);
    assert_eq!(p("clnt x").unwrap(), Command::Unknown("CLNT".into()));
    assert_eq!(p(""), Err(CommandError::Empty));
    assert_eq!(p("   "), Err(CommandError::Empty));
    let e = parse_command(b"R\xffTR x").unwrap_err();
    assert!(matches!(e, CommandError::UnknownCommand(_)));
    let r = e.reply();
    assert_eq!(r.code, ReplyCode::SYNTAX_ERROR);
    assert!(r.text().contains("\\xff"));
    let long = "A".repeat(1000);
    let r = p(&long).unwrap_err().reply();
    assert!(r.text().len() < 60, "echo is clipped: {}", r.text());
}

#[test]
fn bad_paths() {
    assert_eq!(
        parse_command(b"RETR a\0b"),
        Err(CommandError::BadPath("RETR"))
    );
    assert_eq!(
        parse_command(b"RETR a\rb"),
        Err(CommandError::BadPath("RETR"))
    );
    assert_eq!(
        parse_command(b"RETR \xff\xfe"),
        Err(CommandError::BadPath("RETR"))
    );
    let long = format!("RETR {}", "a".repeat(MAX_PATH + 1));
    assert_eq!(p(&long), Err(CommandError::TooLong("RETR")));
    assert_eq!(p("RETR é").unwrap(), Command::Retr("é".into()));
}

#[test]
fn control_characters_in_names_are_refused_as_names() {
    for line in [
        &b"USER a\0b"[..],
        b"USER a\x01b",
        b"USER \x1b[2J",
        b"USER a\tb",
        b"USER a\x7f",
        b"USER \xff\xfe",
        b"ACCT a\0b",
    ] {
        let r = parse_command(line).unwrap_err().reply();
        assert_eq!(r.code, ReplyCode::BAD_ARGUMENTS, "{line:?}");
        assert!(
            r.text().contains(" name") && !r.text().contains("file"),
            "{line:?}: {}",
            r.text()
        );
    }
    assert!(p("USER a b@c.d").is_ok());
    // Passwords are bytes; whatever they hold is the checker's business.
    assert!(matches!(parse_command(b"PASS a\0b"), Ok(Command::Pass(_))));
}

#[test]
fn trailing_crlf_is_tolerated() {
    assert_eq!(p("NOOP\r\n").unwrap(), Command::Noop);
    assert_eq!(p("QUIT\n").unwrap(), Command::Quit);
}
