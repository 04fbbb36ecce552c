//! MODE S uploads: everything one connection delivers, written from a
//! start offset until the peer closes.

use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sluice_engine::{Cancel, Engine, FileWriter};
use tokio::net::TcpStream;

use crate::receive::range_hook;
use crate::{Progress, TransferError};

/// MODE S upload: writes everything `conn` delivers into `file` from
/// `start_offset` (REST/APPE) until the peer closes; returns bytes written.
/// The caller syncs ([`Engine::sync_data`]) and renames.
pub async fn receive_stream(
    engine: &Engine,
    file: Arc<File>,
    start_offset: u64,
    conn: TcpStream,
    progress: Arc<Progress>,
    cancel: Cancel,
) -> Result<u64, TransferError> {
    let overflow = Arc::new(AtomicBool::new(false));
    let mut w = FileWriter::new(engine, file, Arc::clone(progress.counters()), cancel)
        .on_written(range_hook(&progress, &overflow));
    let got = w.copy_to_eof(&conn, start_offset).await?;
    let written = w.finish().await?;
    debug_assert_eq!(got, written);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::tests::read_all;
    use crate::send::tests::{engine, pairs, pattern};
    use sluice_engine::DataPath;
    use std::os::unix::fs::FileExt;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mode_s_upload_at_a_restart_offset() {
        let data = pattern(2_500_000);
        let e = engine(DataPath::Copy);
        let (mut tx, mut rx) = pairs(1).await;
        let mut c = tx.pop().unwrap();
        let d2 = data.clone();
        tokio::spawn(async move { c.write_all(&d2).await.unwrap() });
        let file = Arc::new(tempfile::tempfile().unwrap());
        file.write_all_at(b"kept", 0).unwrap();
        let p = Progress::new();
        let n = receive_stream(
            &e,
            Arc::clone(&file),
            4,
            rx.pop().unwrap(),
            Arc::clone(&p),
            Cancel::new(),
        )
        .await
        .unwrap();
        assert_eq!(n, data.len() as u64);
        let back = read_all(&file);
        assert_eq!(&back[..4], b"kept");
        assert_eq!(&back[4..], &data[..]);
        assert_eq!(p.ranges().to_string(), format!("4-{}", 4 + data.len()));
    }
}
