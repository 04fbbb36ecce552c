//! Arbitrary sequences of control bytes, shell results and timeouts
//! applied to one server session. `check_ops` asserts the invariants
//! (no panic, `used <= len`, every reply byte well formed).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sluice_ftp::session::internal::{check_ops, Op};

#[derive(Arbitrary, Debug)]
enum FuzzOp {
    Input(Vec<u8>),
    Login(Option<(bool, bool)>),
    Passive(Option<u16>),
    Result(u8, u64),
    Started(Option<u64>),
    Done(Result<u64, u8>),
    Advance(u16),
}

fuzz_target!(|ops: Vec<FuzzOp>| {
    let ops: Vec<Op> = ops
        .into_iter()
        .map(|o| match o {
            FuzzOp::Input(b) => Op::Input(b),
            FuzzOp::Login(g) => Op::Login(g),
            FuzzOp::Passive(p) => Op::Passive(p),
            FuzzOp::Result(k, n) => Op::Result(k, n),
            FuzzOp::Started(s) => Op::Started(s),
            FuzzOp::Done(r) => Op::Done(r),
            FuzzOp::Advance(s) => Op::Advance(s),
        })
        .collect();
    check_ops(&ops);
});
