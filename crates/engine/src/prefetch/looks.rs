//! The hub's looks at its feeds' sockets (the tick's `TCP_INFO`, in place
//! of each waiting sender's nap) and the dropping of acknowledged pages.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use sluice_platform::fadvise;

use super::{feed, Hub, Slot, State, TCP_STATE_CLOSE};
use crate::plan::ConnId;

impl Hub {
    /// Acknowledged pages to drop now (`DropBehind`, at most once per
    /// `DROP_EVERY` per feed) of `only` or of every feed, each alone on
    /// its file (pages another feed reads stay). What is acknowledged comes
    /// from the planner's socket estimate: the last sample drained at the
    /// connection's rate (`plan/planner/drain.rs`), so pages go in time
    /// without the sender waking to sample its socket. Done after the lock
    /// is released ([`drop_pages`]).
    pub(super) fn due_drops(
        &self,
        st: &mut State,
        only: Option<ConnId>,
    ) -> Vec<(Arc<File>, u64, u64)> {
        let now = self.now();
        let State {
            pf, conns, files, ..
        } = st;
        let mut out = Vec::new();
        let mut one = |id: ConnId, slot: &mut Slot| {
            let alone = slot
                .inode
                .is_some_and(|k| files.get(&k).copied() == Some(1));
            let Some(b) = slot.behind.as_mut().filter(|_| alone) else {
                return;
            };
            let Some(in_socket) = pf.planner().socket_estimate(id, now) else {
                return;
            };
            if let Some((off, len)) = b.next(now, slot.pos, in_socket) {
                out.push((Arc::clone(&slot.file), off, len));
            }
        };
        match only {
            Some(id) => {
                if let Some(slot) = conns.get_mut(&id) {
                    one(id, slot);
                }
            }
            None => {
                for (&id, slot) in conns.iter_mut() {
                    one(id, slot);
                }
            }
        }
        out
    }

    /// The sender of `id` hands over a duplicate of its socket for the
    /// tick's looks (once, at its first wait).
    pub(super) fn attach(&self, id: ConnId, sock: OwnedFd) {
        if let Some(slot) = self.lock().conns.get_mut(&id) {
            slot.sock = Some(sock);
        }
    }

    /// The tick's look at every attached socket that the planner has a
    /// rate for: its `TCP_INFO` goes to the planner as an app-limited sample
    /// (queue lengths only; the rate stays the sender's to measure), so the
    /// planner's drain estimate restarts from what is really there and
    /// acknowledged pages are dropped from the real count (`due_drops`).
    /// Before, each waiting sender napped (at most 1 s) to take this look
    /// itself: a loop wake-up per sender per second (lab tpf-mixed-rates:
    /// 480 senders, most of the loop's switches). Without these looks, with
    /// only the rate's estimate, sent pages were dropped late: the 256 MiB
    /// cgroup filled, 44 MB of read-ahead was evicted unsent and the
    /// 1 Mbit/s class fell to 59 % (s15-naps-1). A reset seen here is left
    /// to the sender (its error readiness wakes it).
    pub(super) fn sample_all(&self, st: &mut State) {
        let now = self.now();
        let State { pf, conns, .. } = st;
        for (&id, slot) in conns.iter() {
            let Some(sock) = &slot.sock else { continue };
            if !pf.planner().is_sampled(id) {
                continue;
            }
            let Ok(info) = sluice_platform::tcp::tcp_info(sock.as_fd()) else {
                continue;
            };
            if info.state == TCP_STATE_CLOSE {
                continue;
            }
            pf.handle_sample(now, id, &feed::flow_sample(&info, 0, true));
        }
    }
}

/// Asks the kernel to drop acknowledged pages (`Hub::due_drops`). Pages a
/// socket still pins (an estimate ahead of the real acknowledgements) are
/// kept by the kernel.
pub(super) fn drop_pages(drops: Vec<(Arc<File>, u64, u64)>) {
    for (file, off, len) in drops {
        let _ = fadvise::fadvise(file.as_fd(), off, len, fadvise::Advice::DontNeed);
    }
}
