use super::*;

/// A served directory holding `c.toml` with `text`, and the flags that
/// name both (the directory is dropped with the returned guard).
fn args_with_file(text: &str) -> (tempfile::TempDir, ServeArgs) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    let args = ServeArgs {
        config: Some(path),
        dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    (dir, args)
}

#[test]
fn unknown_key_is_an_error_naming_it() {
    let err = parse_file("writeable = true\n").unwrap_err().to_string();
    assert!(err.contains("writeable"), "{err}");
}

#[test]
fn flags_win_over_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "ftp = \"127.0.0.1:3000\"\nmax_sessions = 3\npasv_ports = \"50000-50010\"\ndata_path = \"sendfile\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        max_sessions: Some(7),
        dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let c = ServeConfig::load(&args).unwrap();
    assert_eq!(c.ftp, "127.0.0.1:3000".parse().unwrap());
    assert_eq!(c.max_sessions, 7);
    assert_eq!(c.pasv_ports, Some((50000, 50010)));
    assert_eq!(c.data_path, DataPath::Sendfile);
    assert!(!c.writable);
    assert!(c.anonymous);
}

#[test]
fn data_path_defaults_to_the_engines_choice() {
    let dir = tempfile::tempdir().unwrap();
    let args = ServeArgs {
        dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let c = ServeConfig::load(&args).unwrap();
    assert_eq!(
        c.data_path,
        sluice_engine::EngineConfig::default().data_path
    );
}

#[test]
fn users_need_phc_hashes() {
    let err = parse_file("[[user]]\nname = \"a\"\npassword_hash = \"x\"\nbogus = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("bogus"), "{err}");
    assert!(parse_port_range("10-5").is_err());
    assert_eq!(parse_port_range("5-10").unwrap(), (5, 10));
}

#[test]
fn sharing_comes_from_the_flag_or_the_file() {
    use sluice_engine::SharingMode;
    let (_dir, base) = args_with_file("sharing = \"off\"\n");
    let c = ServeConfig::load(&base).unwrap();
    assert_eq!(c.sharing, SharingMode::Off);
    let e = c.engine_config(sluice_engine::EngineConfig::default());
    assert_eq!(e.sharing, SharingMode::Off);
    let c = ServeConfig::load(&ServeArgs {
        sharing: Some("circus".into()),
        ..base.clone()
    })
    .unwrap();
    assert_eq!(c.sharing, SharingMode::Circus);
    let err = ServeConfig::load(&ServeArgs {
        sharing: Some("always".into()),
        ..base
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("always"), "{err}");
}

#[test]
fn prefetch_and_cancel_come_from_flags_or_file() {
    let (_dir, base) = args_with_file("prefetch = \"fixed\"\ncancel = false\n");
    let c = ServeConfig::load(&base).unwrap();
    assert_eq!(
        (c.prefetch, c.cancel),
        (sluice_engine::PrefetchMode::Fixed, false)
    );
    let flags = ServeArgs {
        prefetch: Some("tcp".into()),
        cancel: Some("on".into()),
        ..base.clone()
    };
    let c = ServeConfig::load(&flags).unwrap();
    assert_eq!(
        (c.prefetch, c.cancel),
        (sluice_engine::PrefetchMode::Tcp, true)
    );
    assert!(ServeConfig::load(&ServeArgs {
        prefetch: Some("sometimes".into()),
        ..base.clone()
    })
    .is_err());
    assert!(ServeConfig::load(&ServeArgs {
        cancel: Some("maybe".into()),
        ..base
    })
    .is_err());
}

#[test]
fn runtime_and_workers_flag_over_key() {
    let (dir, base) = args_with_file("runtime = \"shared\"\nworkers = 3\n");
    let c = ServeConfig::merge(&base).unwrap();
    assert_eq!(c.runtime, crate::runtime::RuntimeKind::Shared);
    assert_eq!(c.workers, Some(3));
    let c = ServeConfig::merge(&ServeArgs {
        runtime: Some("per-core".into()),
        workers: Some(2),
        ..base.clone()
    })
    .unwrap();
    assert_eq!(c.runtime, crate::runtime::RuntimeKind::PerCore);
    assert_eq!(c.workers, Some(2));
    assert_eq!(crate::runtime::workers(c.workers).unwrap(), 2);
    std::fs::write(dir.path().join("c.toml"), "workers = 0\n").unwrap();
    assert!(ServeConfig::merge(&base).is_err());
}

#[test]
fn blocking_data_path_and_send_knobs_parse() {
    let (_dir, base) = args_with_file(
        "data_path = \"blocking\"\nnotsent_lowat = 131072\nsend_buffer = \"auto\"\n",
    );
    let c = ServeConfig::merge(&base).unwrap();
    assert_eq!(c.data_path, DataPath::Blocking);
    assert_eq!(c.notsent_lowat, Some(Some(128 << 10)));
    assert_eq!(c.send_buffer, Some(sluice_engine::SendBufferChoice::Auto));
    let flags = ServeArgs {
        notsent_lowat: Some("off".into()),
        send_buffer: Some("2M".into()),
        ..base.clone()
    };
    let c = ServeConfig::merge(&flags).unwrap();
    assert_eq!(c.notsent_lowat, Some(None));
    assert_eq!(
        c.send_buffer,
        Some(sluice_engine::SendBufferChoice::Bytes(2 << 20))
    );
    let e = c.engine_config(sluice_engine::EngineConfig::default());
    assert_eq!(e.notsent_lowat, None);
    assert_eq!((e.send_buffer, e.send_buffer_max), (Some(2 << 20), false));
    assert_eq!(e.data_path, DataPath::Blocking);
    assert!(ServeConfig::merge(&ServeArgs {
        notsent_lowat: Some("lots".into()),
        ..base.clone()
    })
    .is_err());
    assert!(ServeConfig::merge(&ServeArgs {
        send_buffer: Some("0".into()),
        ..base.clone()
    })
    .is_err());
    assert!(ServeConfig::merge(&ServeArgs {
        refill_time: Some("soon".into()),
        ..base.clone()
    })
    .is_err());
    let c = ServeConfig::merge(&ServeArgs {
        refill_time: Some("off".into()),
        ..base
    })
    .unwrap();
    assert_eq!(c.refill_time, Some(None));
}

#[test]
fn engine_table_reaches_the_engine_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(
        &path,
        "[engine]\nchunk_size = \"8M\"\ndisk_threads = 5\ncongestion = \"reno\"\nevent_interval = 31\n",
    )
    .unwrap();
    let base = ServeArgs {
        dir: Some(dir.path().to_path_buf()),
        config: Some(path.clone()),
        ..Default::default()
    };
    let c = ServeConfig::merge(&base).unwrap();
    let e = c.engine_config(sluice_engine::EngineConfig::default());
    assert_eq!(e.chunk_size, 8 << 20);
    assert_eq!(e.disk_threads, 5);
    assert_eq!(e.congestion.as_deref(), Some("reno"));
    assert_eq!(c.event_interval, Some(31));
    let mut flags = base.clone();
    flags.tuning.chunk_size = Some("2M".parse().unwrap());
    let e = ServeConfig::merge(&flags)
        .unwrap()
        .engine_config(sluice_engine::EngineConfig::default());
    assert_eq!(e.chunk_size, 2 << 20, "the flag wins over [engine]");
    assert_eq!(e.disk_threads, 5);
    // A bad value stops the start, naming its key.
    std::fs::write(&path, "[engine]\ndisk_threads = 0\n").unwrap();
    let err = format!("{:#}", ServeConfig::merge(&base).unwrap_err());
    assert!(err.contains("disk_threads"), "{err}");
    // An unknown key in [engine] too.
    std::fs::write(&path, "[engine]\nchunk_sise = 1\n").unwrap();
    let err = format!("{:#}", ServeConfig::merge(&base).unwrap_err());
    assert!(err.contains("chunk_sise"), "{err}");
}

#[test]
fn tls_keys_come_from_the_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let hash = crate::auth::hash_password("pw").unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "tls_cert = {cert:?}\ntls_key = {key:?}\nhttps = \"127.0.0.1:0\"\nno_http = true\n\
             require_tls = true\n[[user]]\nname = \"bob\"\npassword_hash = \"{hash}\"\nrequire_tls = false\n"
        ),
    )
    .unwrap();
    let base = ServeArgs {
        dir: Some(dir.path().to_path_buf()),
        config: Some(path.clone()),
        ..Default::default()
    };
    let c = ServeConfig::merge(&base).unwrap();
    assert!(c.tls.server.is_some() && c.tls.require_tls);
    assert!(c.http.is_none(), "plain HTTP off");
    let https = c.https.as_ref().expect("the HTTPS door has its settings");
    assert_eq!(https.addr, "127.0.0.1:0".parse().unwrap());
    let users = crate::auth::Users::new(&c);
    assert!(users.requires_tls("anonymous"));
    assert!(users.requires_tls("nobody-configured"));
    assert!(!users.requires_tls("bob"));
    // A user's require_tls without a certificate is refused.
    std::fs::write(
        &path,
        format!("[[user]]\nname = \"bob\"\npassword_hash = \"{hash}\"\nrequire_tls = true\n"),
    )
    .unwrap();
    let err = format!("{:#}", ServeConfig::merge(&base).unwrap_err());
    assert!(err.contains("require_tls"), "{err}");
}

#[test]
fn the_command_line_accepts_the_send_flags() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    use clap::Parser;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let argv = [
        "sluice",
        d,
        "--data-path",
        "blocking",
        "--notsent-lowat",
        "off",
        "--send-buffer",
        "auto",
        "--refill-time",
        "2",
    ];
    let cli = Cli::try_parse_from(argv).unwrap();
    let c = ServeConfig::merge(&cli.serve).unwrap();
    assert_eq!(c.data_path, DataPath::Blocking);
    assert_eq!(c.notsent_lowat, Some(None));
    assert_eq!(c.send_buffer, Some(sluice_engine::SendBufferChoice::Auto));
    assert_eq!(c.refill_time, Some(Some(Duration::from_secs(2))));
}
