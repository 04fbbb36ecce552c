//! MODE E send benchmark over loopback: one warm file, N streams, several
//! block sizes, each data path. The receiver is a child process (its CPU is
//! not counted) that drains every stream; the sender's MB/s, CPU s/GiB and
//! context switches/GiB come from getrusage of this process.
//!
//! cargo run --release -p sluice-transfer --example mode_e_loopback -- \
//!     [--size-mib 1024] [--streams 4] [--blocks-kib 256,1024,4096] [--runs 3] [--paths copy,sendfile]

use std::io::Read;
use std::net::TcpStream as StdStream;
use std::sync::Arc;
use std::time::Instant;

use sluice_engine::DataPath;
use sluice_transfer::{send, Cancel, Engine, EngineConfig, Mode, Progress, SendSpec};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.into())
}

fn receiver(addr: &str, n: usize) {
    let conns: Vec<StdStream> = (0..n)
        .map(|_| StdStream::connect(addr).expect("connect"))
        .collect();
    let hs: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 128 << 10];
                let mut total = 0u64;
                while let Ok(k) = c.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    total += k as u64;
                }
                total
            })
        })
        .collect();
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    println!("{total}");
}

fn rusage() -> (f64, u64) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(r) => {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            let cs = r.voluntary_context_switches() + r.involuntary_context_switches();
            (t(r.user_time()) + t(r.system_time()), cs as u64)
        }
        Err(_) => (0.0, 0),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--receive") {
        receiver(&args[2], args[3].parse().unwrap_or(1));
        return;
    }
    let size: u64 = arg(&args, "--size-mib", "1024")
        .parse::<u64>()
        .unwrap_or(1024)
        << 20;
    let streams: usize = arg(&args, "--streams", "4").parse().unwrap_or(4);
    let runs: usize = arg(&args, "--runs", "3").parse().unwrap_or(3);
    let blocks: Vec<u64> = arg(&args, "--blocks-kib", "256,1024,4096")
        .split(',')
        .filter_map(|s| s.parse::<u64>().ok())
        .map(|k| k << 10)
        .collect();
    let paths: Vec<DataPath> = arg(&args, "--paths", "copy,sendfile")
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let path = "/tmp/sluice-bench.dat";
    if std::fs::metadata(path)
        .map(|m| m.len() != size)
        .unwrap_or(true)
    {
        let f = std::fs::File::create(path).expect("create");
        f.set_len(size).expect("size"); // sparse is fine: pages come from the cache
    }
    let mut warm = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; 1 << 20];
    while warm.read(&mut buf).unwrap_or(0) > 0 {}
    let file = Arc::new(std::fs::File::open(path).expect("open"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("rt");
    println!(
        "MODE E, {} MiB, {streams} streams, {runs} runs (median MB/s, CPU s/GiB, ctxsw/GiB)",
        size >> 20
    );
    for &p in &paths {
        let engine = Engine::new(EngineConfig {
            data_path: p,
            ..EngineConfig::default()
        });
        for &b in &blocks {
            let mut res = Vec::new();
            for _ in 0..runs {
                res.push(rt.block_on(async {
                    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind");
                    let addr = l.local_addr().expect("addr").to_string();
                    let child = std::process::Command::new(std::env::current_exe().expect("exe"))
                        .args(["--receive", &addr, &streams.to_string()])
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .expect("spawn");
                    let mut conns = Vec::new();
                    for _ in 0..streams {
                        conns.push(l.accept().await.expect("accept").0);
                    }
                    let spec = SendSpec::from_offset(
                        Arc::clone(&file),
                        0,
                        Mode::Extended { block_size: b },
                    )
                    .expect("spec");
                    let (c0, s0) = rusage();
                    let t0 = Instant::now();
                    send(&engine, spec, conns, Progress::new(), Cancel::new())
                        .await
                        .expect("send");
                    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
                        .await
                        .expect("join")
                        .expect("wait");
                    let secs = t0.elapsed().as_secs_f64();
                    let (c1, s1) = rusage();
                    let got: u64 = String::from_utf8_lossy(&out.stdout)
                        .trim()
                        .parse()
                        .unwrap_or(0);
                    assert_eq!(
                        got,
                        size + (size.div_ceil(b) + streams as u64) * 17,
                        "bytes on the wire"
                    );
                    let gib = size as f64 / (1u64 << 30) as f64;
                    (
                        size as f64 / secs / 1e6,
                        (c1 - c0) / gib,
                        (s1 - s0) as f64 / gib,
                    )
                }));
            }
            let med = |f: fn(&(f64, f64, f64)) -> f64| {
                let mut v: Vec<f64> = res.iter().map(f).collect();
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            };
            println!(
                "{:<9} block {:>5} KiB: {:>6.0} MB/s  {:.3} CPU s/GiB  {:>6.0} ctxsw/GiB",
                p.to_string(),
                b >> 10,
                med(|r| r.0),
                med(|r| r.1),
                med(|r| r.2)
            );
        }
    }
}
