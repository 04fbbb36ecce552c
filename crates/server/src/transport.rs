//! A connection of either door, in clear or under TLS: the transfer
//! layer's [`Conn`](sluice_transfer::Conn), which its
//! [`Transfer`](sluice_transfer::Transfer) sends bodies over.

pub use sluice_transfer::Conn;
