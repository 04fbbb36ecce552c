//! `--metrics ADDR`: the engine's counters in Prometheus text format on
//! `GET /metrics`, so experiments read numbers, not logs (DESIGN.md).
//!
//! A separate listener rather than a path on the HTTP front door: a file
//! named `metrics` in the served root must stay reachable, and operators
//! usually expose metrics on another interface than the data.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use sluice_engine::Engine;
use sluice_http::response::{HeadBuilder, Status};
use sluice_http::{parse_request, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A scrape request is one short head; anything slower is dropped.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// Most bytes read while looking for the end of the head.
const MAX_HEAD: usize = 8 << 10;

/// Binds the metrics listener, prints its address and serves it in the
/// background.
pub async fn start(addr: SocketAddr, engine: Engine) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    println!("metrics listening on {bound}");
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((conn, _)) => {
                    let engine = engine.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(HEAD_DEADLINE, answer(conn, &engine)).await;
                    });
                }
                Err(e) => {
                    tracing::warn!("metrics accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(bound)
}

async fn answer(mut conn: TcpStream, engine: &Engine) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let req = loop {
        let mut chunk = [0u8; 1024];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_request(&buf) {
            Ok(Some((req, _))) => break Some(req),
            Ok(None) if buf.len() < MAX_HEAD => continue,
            _ => break None,
        }
    };
    let (status, body) = match &req {
        Some(r) if r.path.relative() == "metrics" => (
            Status::Ok,
            engine.counters().prometheus()
                + &engine.limits().prometheus()
                + &engine.cue_prometheus(),
        ),
        Some(_) => (Status::NotFound, "not found: try /metrics\n".to_string()),
        None => (Status::BadRequest, "bad request\n".to_string()),
    };
    let mut head = HeadBuilder::common(status, SystemTime::now(), "sluice", false, false);
    head.field("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    head.field("Content-Length", &body.len().to_string());
    let mut out = head.finish();
    if !matches!(req.map(|r| r.method), Some(Method::Head)) {
        out.extend_from_slice(body.as_bytes());
    }
    conn.write_all(&out).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::EngineConfig;

    async fn fetch(addr: SocketAddr, request: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_counters_and_nothing_else() {
        let engine = Engine::new(EngineConfig::default());
        let addr = start("127.0.0.1:0".parse().unwrap(), engine).await.unwrap();
        let ok = fetch(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("# TYPE sluice_engine_bytes_sent_total counter"),
            "{ok}"
        );
        assert!(ok.contains("\nsluice_engine_bytes_sent_total 0\n"), "{ok}");
        // What limited downloads (verdict.rs), by cause.
        assert!(
            ok.contains("sluice_engine_limit_seconds_total{by=\"receiver_window\"} 0.000000"),
            "{ok}"
        );
        let other = fetch(addr, "GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let bad = fetch(addr, "NONSENSE\r\n\r\n").await;
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    }
}
