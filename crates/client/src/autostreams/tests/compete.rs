//! Several transfers on one bottleneck, each with its own controller, on
//! a virtual clock (what lab/auto_streams.py `--compete` measures).

use super::*;

/// `k` transfers started `gap` apart on one bottleneck of `cap` bytes/s
/// whose streams are each held to `per` (a window, or random loss at
/// `loss`): below the capacity every stream gets `per` and the round trip
/// is the path's; above it the capacity is shared per stream (TCP's
/// fairness), a queue stands (the round trip grows with the overload, up
/// to three times the path's) and loss grows with the overload. Each transfer's rate carries
/// its own noise of up to `noise` (a deterministic xorshift). Returns
/// each transfer's rate and count per tick (zero before it started).
fn compete(
    k: usize,
    gap: u64,
    secs: u64,
    per: f64,
    cap: f64,
    loss: f64,
    noise: f64,
) -> (Vec<Vec<f64>>, Vec<Vec<u32>>, Vec<Controller>) {
    let mut c: Vec<Controller> = (0..k).map(|_| Controller::new(64)).collect();
    let (mut bytes, mut lost) = (vec![0.0f64; k], vec![0.0f64; k]);
    let (mut rates, mut counts) = (vec![Vec::new(); k], vec![Vec::new(); k]);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut at = Duration::ZERO;
    while at < Duration::from_secs(secs) {
        at += TICK;
        let start = |i: usize| Duration::from_secs(gap * i as u64);
        let on: Vec<bool> = (0..k).map(|i| at > start(i)).collect();
        let n: Vec<u32> = (0..k)
            .map(|i| if on[i] { c[i].streams() } else { 0 })
            .collect();
        let total = f64::from(n.iter().sum::<u32>());
        let want = per * total;
        // What the streams want beyond the link waits in the queue (up to
        // 2 BDP: the round trip at most triples).
        let (each, l) = if want <= cap {
            (per, loss)
        } else {
            (cap / total, loss + 0.0004 * (want / cap).powi(2))
        };
        let rtt = (50.0 * (want / cap).clamp(1.0, 3.0)) as u64;
        for i in 0..k {
            if !on[i] {
                rates[i].push(0.0);
                counts[i].push(0);
                continue;
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let jitter = 1.0 + noise * ((seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0);
            let r = each * f64::from(n[i]) * jitter;
            bytes[i] += r * TICK.as_secs_f64();
            lost[i] += r * TICK.as_secs_f64() / SEGMENT * l;
            c[i].on_sample(Sample {
                at: at - start(i),
                bytes: bytes[i] as u64,
                lost: lost[i] as u64,
                rtt: Duration::from_millis(rtt),
            });
            rates[i].push(r);
            counts[i].push(n[i]);
        }
    }
    (rates, counts, c)
}

/// Jain's index of each second from `from` s on, over every transfer's
/// mean rate in that second; the median and the least.
fn jain_per_second(rates: &[Vec<f64>], from: u64) -> (f64, f64) {
    let ticks = rates[0].len();
    let mut j: Vec<f64> = (from as usize * 10..ticks)
        .step_by(10)
        .map(|t| {
            let x: Vec<f64> = rates
                .iter()
                .map(|r| r[t..(t + 10).min(ticks)].iter().sum::<f64>())
                .collect();
            jain(&x)
        })
        .collect();
    j.sort_by(f64::total_cmp);
    (j[j.len() / 2], j[0])
}

fn show_epochs(c: &[Controller]) -> String {
    c.iter()
        .map(|c| {
            c.history()
                .iter()
                .map(|e| {
                    format!(
                        "{:.1}:{}:{:.1}:{:.4}",
                        e.at.as_secs_f64(),
                        e.streams,
                        e.rate / MB,
                        e.loss
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn show_counts(counts: &[Vec<u32>]) -> String {
    counts
        .iter()
        .map(|c| {
            let mut out = Vec::new();
            let mut last = u32::MAX;
            for (t, &n) in c.iter().enumerate() {
                if n != last {
                    out.push(format!("{:.1}:{n}", t as f64 / 10.0));
                    last = n;
                }
            }
            out.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn competing_transfers_on_a_lossy_path_stay_near_fair_shares() {
    // lab auto-streams with 0.1 % loss: a stream gets ~1.3 MB/s, the
    // 400 Mbit/s path wants ~38 of them. Two and four transfers 10 s
    // apart, the last running 20 s; Jain's index from 10 s after the last
    // start (the lab's measure), with 10 % noise on every rate. Here 0.85
    // and 0.86, short of the 0.95 the issue asks: the late transfer first
    // sees the round trip behind the others' queue, takes it for the
    // path's, and finds room where they do not. Two rules tried in session
    // 14 did better in a model or no worse (streams kept only when each
    // carried half a mean stream: 0.95 and 0.91 with a round trip of 75 ms
    // whenever the link was full; a quarter of the count cut while the
    // queue stands: 0.90 and 0.85 here) and worse or no better in the lab
    // (lab/results/auto-streams/README.md, session 14), so neither is kept.
    for (k, want) in [(2usize, 0.8), (4, 0.8)] {
        let gap = 10;
        let end = gap * (k as u64 - 1) + 20;
        let (rates, counts, c) = compete(k, gap, end, 1.3 * MB, 50.0 * MB, 0.001, 0.1);
        let (median, least) = jain_per_second(&rates, end - 10);
        assert!(
            median >= want,
            "{k} transfers: Jain median {median:.2} (least {least:.2})\n{}\n{}",
            show_counts(&counts),
            show_epochs(&c)
        );
    }
}
