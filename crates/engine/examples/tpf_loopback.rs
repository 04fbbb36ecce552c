//! Loopback measurement of the prefetch modes on the engine's real data path
//! (a measurement, unlike `tpf_sim`): N application-limited readers in two
//! rate classes pull distinct cold files through `Engine::send_file` for a
//! fixed time; prints per-class throughput, bytes the process read from the
//! block device (`/proc/self/io` read_bytes), and the engine's counters
//! (planned, cancelled, evicted-unused read-ahead, wake-ups).
//!
//! Files are created once in `--dir` and dropped from the page cache
//! (`POSIX_FADV_DONTNEED`) before every run. For a slow, seek-bound disk run
//! it inside a blkio cgroup (see /work/shared/LAB.md), e.g.:
//!
//! ```text
//! mkdir -p /sys/fs/cgroup/blkio/tpf
//! echo "254:0 41943040" > /sys/fs/cgroup/blkio/tpf/blkio.throttle.read_bps_device
//! echo "254:0 150" > /sys/fs/cgroup/blkio/tpf/blkio.throttle.read_iops_device
//! sh -c 'echo $$ > /sys/fs/cgroup/blkio/tpf/cgroup.procs; exec target/release/examples/tpf_loopback \
//!     --modes kernel,fixed,tcp --path sendfile --conns 50 --secs 30'
//! ```
//!
//! Options: --modes LIST, --path copy|sendfile, --conns N (half fast, half
//! slow), --fast BYTES/S, --slow BYTES/S, --size-mib N (per file), --secs N,
//! --dir DIR, --budget-mib N, --fixed-kib N (fixed window), --cancel on|off,
//! --warm (files read into the page cache before each run, not dropped).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Cancel, Counters, DataPath, Engine, EngineConfig, PrefetchMode};
use sluice_platform::fadvise;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

struct Opts {
    modes: Vec<PrefetchMode>,
    path: DataPath,
    conns: usize,
    fast: u64,
    slow: u64,
    size: u64,
    secs: u64,
    dir: String,
    budget: u64,
    fixed: usize,
    cancel: bool,
    /// Read every file into the page cache before each run instead of
    /// dropping it (warm-cache comparison).
    warm: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        modes: vec![PrefetchMode::Kernel, PrefetchMode::Fixed, PrefetchMode::Tcp],
        path: DataPath::Sendfile,
        conns: 50,
        fast: 1_000_000,
        slow: 200_000,
        size: 64 << 20,
        secs: 30,
        dir: "/tmp/sluice-tpf".into(),
        budget: 256 << 20,
        fixed: 1 << 20,
        cancel: true,
        warm: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--modes" => {
                o.modes = v
                    .split(',')
                    .map(|m| m.parse().map_err(|e| format!("{e}")))
                    .collect::<Result<_, _>>()?
            }
            "--path" => o.path = v.parse().map_err(|e| format!("{e}"))?,
            "--conns" => o.conns = num(&v)? as usize,
            "--fast" => o.fast = num(&v)?,
            "--slow" => o.slow = num(&v)?,
            "--size-mib" => o.size = num(&v)? << 20,
            "--secs" => o.secs = num(&v)?,
            "--dir" => o.dir = v,
            "--budget-mib" => o.budget = num(&v)? << 20,
            "--fixed-kib" => o.fixed = (num(&v)? << 10) as usize,
            "--cancel" => o.cancel = sluice_engine::parse_switch(&v).ok_or("--cancel on|off")?,
            "--warm" => {
                o.warm = true;
                i += 1;
                continue;
            }
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    Ok(o)
}

fn read_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn make_files(o: &Opts) -> Vec<Arc<File>> {
    std::fs::create_dir_all(&o.dir).expect("create --dir");
    let block: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    (0..o.conns)
        .map(|i| {
            let p = format!("{}/f{i:03}.dat", o.dir);
            let ok = std::fs::metadata(&p)
                .map(|m| m.len() >= o.size)
                .unwrap_or(false);
            if !ok {
                let mut f = File::create(&p).expect("create file");
                for _ in 0..(o.size >> 20) {
                    f.write_all(&block).expect("write file");
                }
                f.sync_all().expect("sync file");
            }
            Arc::new(File::open(&p).expect("open file"))
        })
        .collect()
}

/// Reads at most `rate` bytes/s (token bucket), until `stop`.
async fn paced_reader(mut s: TcpStream, rate: u64, got: Arc<AtomicU64>, stop: Instant) {
    let mut buf = vec![0u8; 64 << 10];
    let start = Instant::now();
    let mut total = 0u64;
    while Instant::now() < stop {
        let allowed = (rate as f64 * start.elapsed().as_secs_f64()) as u64 + (16 << 10);
        if total >= allowed {
            let ahead = (total + 1 - allowed) as f64 / rate as f64;
            tokio::time::sleep(Duration::from_secs_f64(ahead.max(0.001))).await;
            continue;
        }
        let want = ((allowed - total) as usize).min(buf.len());
        match s.read(&mut buf[..want]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n as u64;
                got.fetch_add(n as u64, Relaxed);
            }
        }
    }
}

fn run(o: &Opts, files: &[Arc<File>], mode: PrefetchMode) {
    for f in files {
        if o.warm {
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0;
            while let Ok(n @ 1..) = std::os::unix::fs::FileExt::read_at(&**f, &mut buf, off) {
                off += n as u64;
            }
        } else {
            let _ = fadvise::fadvise(f.as_fd(), 0, 0, fadvise::Advice::DontNeed);
        }
    }
    let engine = Engine::new(EngineConfig {
        data_path: o.path,
        prefetch: mode,
        prefetch_budget: o.budget,
        sendfile_prefetch: o.fixed,
        cancel: o.cancel,
        ..EngineConfig::default()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let disk_before = read_bytes();
    let secs = o.secs;
    let classes: Vec<u64> = (0..o.conns)
        .map(|i| if i % 2 == 0 { o.fast } else { o.slow })
        .collect();
    let got: Vec<Arc<AtomicU64>> = (0..o.conns).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let started = Instant::now();
    rt.block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let stop = Instant::now() + Duration::from_secs(secs);
        let cancel = Cancel::new();
        let mut senders = Vec::new();
        let mut readers = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let c = TcpStream::connect(addr).await.expect("connect");
            let (s, _) = l.accept().await.expect("accept");
            let rcvbuf = 256 << 10;
            let _ = nix::sys::socket::setsockopt(
                &c.as_fd(),
                nix::sys::socket::sockopt::RcvBuf,
                &rcvbuf,
            );
            readers.push(tokio::spawn(paced_reader(
                c,
                classes[i],
                Arc::clone(&got[i]),
                stop,
            )));
            let (e, f, k, size) = (engine.clone(), Arc::clone(f), cancel.clone(), o.size);
            senders.push(tokio::spawn(async move {
                e.prepare_socket(&s);
                e.send_file(&s, &f, 0, size, &[], &Counters::new(), &k)
                    .await
            }));
        }
        for r in readers {
            let _ = r.await;
        }
        cancel.cancel();
        for s in senders {
            let _ = s.await;
        }
    });
    let dt = started.elapsed().as_secs_f64();
    // Let cancelled reads drain before the totals are read.
    std::thread::sleep(Duration::from_millis(200));
    let disk = read_bytes() - disk_before;
    let c = engine.counters();
    let class_rate = |rate: u64| {
        let v: Vec<f64> = classes
            .iter()
            .zip(&got)
            .filter(|(r, _)| **r == rate)
            .map(|(_, g)| g.load(Relaxed) as f64 / dt)
            .collect();
        (
            v.iter().sum::<f64>() / v.len().max(1) as f64 / 1e3,
            v.iter().cloned().fold(f64::MAX, f64::min) / 1e3,
        )
    };
    let (fast, fast_min) = class_rate(o.fast);
    let (slow, slow_min) = class_rate(o.slow);
    println!(
        "{:<7} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>9}",
        mode.to_string(),
        fast,
        fast_min,
        slow,
        slow_min,
        disk as f64 / 1e6,
        c.bytes_read_disk as f64 / 1e6,
        c.evicted_unused as f64 / 1e6,
        c.prefetch_reads,
        c.prefetch_reads_cancelled,
        c.wakeups,
    );
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tpf_loopback: {e}");
            std::process::exit(2);
        }
    };
    let files = make_files(&o);
    println!(
        "# {} conns ({} at {} B/s, {} at {} B/s), {} MiB files, {} s, path {}, budget {} MiB, fixed window {} KiB, cancel {}",
        o.conns,
        o.conns.div_ceil(2),
        o.fast,
        o.conns / 2,
        o.slow,
        o.size >> 20,
        o.secs,
        o.path,
        o.budget >> 20,
        o.fixed >> 10,
        o.cancel
    );
    println!(
        "{:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
        "mode",
        "fast kB/s",
        "fast min",
        "slow kB/s",
        "slow min",
        "disk MB",
        "read MB",
        "evict MB",
        "reads",
        "cancel",
        "wakeups"
    );
    for &m in &o.modes {
        run(&o, &files, m);
    }
}
