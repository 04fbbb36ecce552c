//! Loopback benchmark of the engine's data paths.
//!
//! Sends one warm file to N receivers (a child process, so its CPU is not
//! counted) with each data path and prints MB/s, CPU s/GiB and context
//! switches/GiB of the sending process (getrusage: all its threads, disk
//! threads included), plus the engine's wake-up and EAGAIN counters.
//!
//! cargo run --release -p sluice-engine --example loopback_send -- \
//!     [--size-mib 2048] [--file /tmp/sluice-bench.dat] [--receivers 1] [--runs 3] \
//!     [--paths copy,sendfile] [--lowat-kib 256|off] [--buf-kib 1024] [--chunk-kib 4096] [--workers 1]
//!     [--no-inline] [--block-kib N (MODE E-like 17-byte header per block)]

use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::sync::Arc;
use std::time::Instant;

use nix::sys::resource::{getrusage, UsageWho};
use sluice_engine::{Cancel, Counters, DataPath, Engine, EngineConfig};

struct Opts {
    size: u64,
    file: String,
    receivers: usize,
    runs: usize,
    paths: Vec<DataPath>,
    lowat: Option<u32>,
    buf: usize,
    chunk: usize,
    workers: usize,
    inline: bool,
    /// MODE E-like framing: blocks of this many bytes, each behind a 17-byte header.
    block: Option<u64>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        size: 2048 << 20,
        file: "/tmp/sluice-bench.dat".into(),
        receivers: 1,
        runs: 3,
        paths: vec![DataPath::Copy, DataPath::Sendfile],
        lowat: EngineConfig::default().notsent_lowat,
        buf: EngineConfig::default().read_buffer_size,
        chunk: EngineConfig::default().chunk_size,
        workers: 1,
        inline: true,
        block: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--size-mib" => o.size = num(&v)? << 20,
            "--file" => o.file = v,
            "--receivers" => o.receivers = num(&v)? as usize,
            "--runs" => o.runs = num(&v)? as usize,
            "--paths" => {
                o.paths = v
                    .split(',')
                    .map(|p| p.parse().map_err(|e| format!("{e}")))
                    .collect::<Result<_, _>>()?
            }
            "--lowat-kib" => {
                o.lowat = if v == "off" {
                    None
                } else {
                    Some((num(&v)? << 10) as u32)
                }
            }
            "--buf-kib" => o.buf = (num(&v)? << 10) as usize,
            "--chunk-kib" => o.chunk = (num(&v)? << 10) as usize,
            "--workers" => o.workers = num(&v)? as usize,
            "--block-kib" => o.block = Some(num(&v)? << 10),
            "--no-inline" => {
                o.inline = false;
                i += 1;
                continue;
            }
            "--receive" => {
                receiver(
                    &v,
                    num(args.get(i + 2).map(String::as_str).unwrap_or("1"))? as usize,
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    Ok(o)
}

/// Child process: opens `n` connections and drains them to EOF.
fn receiver(addr: &str, n: usize) {
    let conns: Vec<StdStream> = (0..n)
        .map(|_| StdStream::connect(addr).expect("connect"))
        .collect();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 128 << 10];
                let mut total = 0u64;
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return total,
                        Ok(k) => total += k as u64,
                    }
                }
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    println!("{total}");
}

fn ensure_file(path: &str, size: u64) -> std::io::Result<std::fs::File> {
    let ok = std::fs::metadata(path)
        .map(|m| m.len() == size)
        .unwrap_or(false);
    if !ok {
        let mut f = std::fs::File::create(path)?;
        let mut block = vec![0u8; 1 << 20];
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i * 31 % 251) as u8;
        }
        let mut left = size;
        while left > 0 {
            let k = left.min(block.len() as u64) as usize;
            f.write_all(&block[..k])?;
            left -= k as u64;
        }
    }
    // Warm the page cache.
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf)? > 0 {}
    std::fs::File::open(path)
}

/// CPU seconds, voluntary and involuntary context switches of this process.
fn rusage() -> (f64, u64, u64) {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(r) => {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            (
                t(r.user_time()) + t(r.system_time()),
                r.voluntary_context_switches() as u64,
                r.involuntary_context_switches() as u64,
            )
        }
        Err(_) => (0.0, 0, 0),
    }
}

/// One send of the file to every receiver: MB/s, CPU s/GiB, voluntary and
/// involuntary context switches per GiB, and the engine counters.
async fn one_run(
    o: &Opts,
    engine: &Engine,
    file: &Arc<std::fs::File>,
) -> (f64, f64, f64, f64, sluice_engine::CountersSnapshot) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let exe = std::env::current_exe().expect("exe");
    let child = std::process::Command::new(exe)
        .args(["--receive", &addr, &o.receivers.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn receiver");
    let mut conns = Vec::new();
    for _ in 0..o.receivers {
        conns.push(listener.accept().await.expect("accept").0);
    }
    let counters = Arc::new(Counters::new());
    let (cpu0, v0, i0) = rusage();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in conns {
        let (e, f, k, size, block) = (
            engine.clone(),
            Arc::clone(file),
            Arc::clone(&counters),
            o.size,
            o.block,
        );
        tasks.spawn(async move {
            e.prepare_socket(&c);
            let cancel = Cancel::new();
            match block {
                None => {
                    e.send_file(&c, &f, 0, size, &[], &k, &cancel)
                        .await
                        .expect("send");
                }
                Some(b) => {
                    let mut off = 0;
                    while off < size {
                        let len = b.min(size - off);
                        let mut h = [0u8; 17];
                        h[1..9].copy_from_slice(&len.to_be_bytes());
                        h[9..17].copy_from_slice(&off.to_be_bytes());
                        e.send_file(&c, &f, off, len, &h, &k, &cancel)
                            .await
                            .expect("send");
                        off += len;
                    }
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task");
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, v1, i1) = rusage();
    let got: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let headers = o.block.map_or(0, |b| o.size.div_ceil(b) * 17);
    assert_eq!(
        got,
        (o.size + headers) * o.receivers as u64,
        "receiver byte count"
    );
    let gib = got as f64 / (1u64 << 30) as f64;
    (
        got as f64 / secs / 1e6,
        (cpu1 - cpu0) / gib,
        (v1 - v0) as f64 / gib,
        (i1 - i0) as f64 / gib,
        counters.snapshot(),
    )
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("loopback_send: {e}");
            std::process::exit(2);
        }
    };
    let file = Arc::new(ensure_file(&o.file, o.size).expect("bench file"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.workers.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "file {} MiB, {} receiver(s), lowat {:?}, buf {} KiB, chunk {} KiB, workers {}, inline {}, block {:?}",
        o.size >> 20, o.receivers, o.lowat, o.buf >> 10, o.chunk >> 10, o.workers, o.inline, o.block
    );
    println!(
        "{:<9} {:>4} {:>9} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9}",
        "path",
        "run",
        "MB/s",
        "CPU s/GiB",
        "vcsw/GiB",
        "ivcsw/GiB",
        "wakeups/GiB",
        "sends/GiB",
        "diskjobs"
    );
    let engines: Vec<(DataPath, Engine)> = o
        .paths
        .iter()
        .map(|&path| {
            let cfg = EngineConfig {
                data_path: path,
                notsent_lowat: o.lowat,
                read_buffer_size: o.buf,
                chunk_size: o.chunk,
                inline_cached_reads: o.inline,
                ..EngineConfig::default()
            };
            (path, Engine::new(cfg))
        })
        .collect();
    // Paths alternate within each run so load from other processes hits both alike.
    let mut results: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); engines.len()];
    for run in 0..o.runs {
        for (i, (path, engine)) in engines.iter().enumerate() {
            let r = rt.block_on(one_run(&o, engine, &file));
            let c = r.4;
            let gib = c.bytes_sent as f64 / (1u64 << 30) as f64;
            println!(
                "{:<9} {:>4} {:>9.0} {:>10.3} {:>10.0} {:>10.0} {:>12.0} {:>10.0} {:>9}",
                path.to_string(),
                run,
                r.0,
                r.1,
                r.2,
                r.3,
                c.wakeups as f64 / gib,
                c.send_calls as f64 / gib,
                c.disk_reads
            );
            results[i].push((r.0, r.1, r.2, r.3));
        }
    }
    println!("medians over {} runs (min..max MB/s):", o.runs);
    for (i, (path, _)) in engines.iter().enumerate() {
        let med = |f: fn(&(f64, f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = results[i].iter().map(f).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            (v[v.len() / 2], v[0], v[v.len() - 1])
        };
        let (mbs, lo, hi) = med(|r| r.0);
        println!(
            "{:<9} MB/s {:.0} ({:.0}..{:.0})  CPU s/GiB {:.3}  ctxsw/GiB {:.0} (voluntary {:.0})",
            path.to_string(),
            mbs,
            lo,
            hi,
            med(|r| r.1).0,
            med(|r| r.2 + r.3).0,
            med(|r| r.2).0
        );
    }
}
