//! A test CA and server certificates, made at test time with rcgen.

use std::path::{Path, PathBuf};

/// Files of one test PKI in a temp directory.
pub struct TestPki {
    /// The CA certificate (what clients trust: curl --cacert).
    pub ca: PathBuf,
    /// The server's chain (leaf then CA) for `localhost` and 127.0.0.1.
    pub cert: PathBuf,
    /// The server's key.
    pub key: PathBuf,
    /// A chain signed by the same CA for `wrong.example` only.
    pub wrong_cert: PathBuf,
    /// Its key.
    pub wrong_key: PathBuf,
    /// A chain for `localhost` and 127.0.0.1 by the same CA whose leaf
    /// expired (valid through 2021 only).
    pub expired_cert: PathBuf,
    /// Its key.
    pub expired_key: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestPki {
    /// Makes a CA and two server certificates.
    pub fn new() -> TestPki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let dir = tempfile::Builder::new()
            .prefix("sluice-pki-")
            .tempdir()
            .expect("pki dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Sluice test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf = |names: &[&str], stem: &str, expired: bool| -> (PathBuf, PathBuf) {
            let mut p =
                CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            if expired {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            p.distinguished_name.push(DnType::CommonName, names[0]);
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
            let (c, k) = (
                dir.path().join(format!("{stem}.pem")),
                dir.path().join(format!("{stem}.key")),
            );
            std::fs::write(&c, format!("{}{}", cert.pem(), ca.pem())).unwrap();
            std::fs::write(&k, key.serialize_pem()).unwrap();
            (c, k)
        };
        let (cert, key) = leaf(&["localhost", "127.0.0.1"], "server", false);
        let (wrong_cert, wrong_key) = leaf(&["wrong.example"], "wrong", false);
        let (expired_cert, expired_key) = leaf(&["localhost", "127.0.0.1"], "expired", true);
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        TestPki {
            ca: ca_path,
            cert,
            key,
            wrong_cert,
            wrong_key,
            expired_cert,
            expired_key,
            _dir: dir,
        }
    }

    /// `--tls-cert CERT --tls-key KEY` for `sluice serve`.
    pub fn serve_args(&self) -> Vec<String> {
        tls_args(&self.cert, &self.key)
    }
}

/// `--tls-cert CERT --tls-key KEY`.
pub fn tls_args(cert: &Path, key: &Path) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ]
}
