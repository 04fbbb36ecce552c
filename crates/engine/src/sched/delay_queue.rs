//! Requests held back after their connection's congestion window was cut.

use std::collections::HashMap;
use std::time::Duration;

use super::ReqId;
use crate::plan::{ConnId, ReadRequest};

/// Per-connection delay periods and the requests waiting them out. Small
/// (only connections that just saw a cut), so linear scans are fine.
#[derive(Debug, Default)]
pub(super) struct DelayQueue {
    until: HashMap<ConnId, Duration>,
    waiting: Vec<(ReqId, ReadRequest)>,
}

impl DelayQueue {
    /// Starts (or extends) `conn`'s delay period until `until`.
    pub(super) fn start(&mut self, conn: ConnId, until: Duration) {
        let u = self.until.entry(conn).or_insert(until);
        *u = (*u).max(until);
    }

    /// Whether `conn` is in a delay period at `now`.
    pub(super) fn delays(&self, conn: ConnId, now: Duration) -> bool {
        self.until.get(&conn).is_some_and(|&u| now < u)
    }

    pub(super) fn push(&mut self, id: ReqId, req: ReadRequest) {
        self.waiting.push((id, req));
    }

    /// Requests whose connection's delay ended by `now`; ends those periods.
    pub(super) fn take_due(&mut self, now: Duration) -> Vec<(ReqId, ReadRequest)> {
        self.until.retain(|_, u| now < *u);
        let until = &self.until;
        let (due, keep): (Vec<_>, Vec<_>) = self
            .waiting
            .drain(..)
            .partition(|(_, r)| !until.contains_key(&r.conn));
        self.waiting = keep;
        due
    }

    /// The waiting request whose period ends first (ties: lower id), for an
    /// otherwise idle disk. Its connection's period ends with it, so the rest
    /// of its reads follow in order rather than one per idle moment.
    pub(super) fn pop_earliest(&mut self) -> Option<(ReqId, ReadRequest)> {
        let until = &self.until;
        let key =
            |(id, r): &(ReqId, ReadRequest)| (until.get(&r.conn).copied().unwrap_or_default(), *id);
        let i = (0..self.waiting.len()).min_by_key(|&i| key(&self.waiting[i]))?;
        let (id, req) = self.waiting.remove(i);
        self.until.remove(&req.conn);
        Some((id, req))
    }

    /// Drops `conn`'s period and requests, returning the requests.
    pub(super) fn remove_conn(&mut self, conn: ConnId) -> Vec<(ReqId, ReadRequest)> {
        self.until.remove(&conn);
        let (gone, keep): (Vec<_>, Vec<_>) =
            self.waiting.drain(..).partition(|(_, r)| r.conn == conn);
        self.waiting = keep;
        gone
    }

    pub(super) fn next_due(&self) -> Option<Duration> {
        self.waiting
            .iter()
            .filter_map(|(_, r)| self.until.get(&r.conn).copied())
            .min()
    }

    pub(super) fn holds(&self, conn: ConnId) -> bool {
        self.waiting.iter().any(|(_, r)| r.conn == conn)
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }
}
