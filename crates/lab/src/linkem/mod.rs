//! `linkem`: a user-space link emulator joining two network namespaces through
//! TUN devices, with delay, jitter, loss, a rate limit and a drop-tail queue per
//! direction, all changeable while it runs through a control socket.

pub mod ctl;
pub mod delay_line;
pub mod forward;
pub mod params;
pub mod setup;

pub use params::LinkParams;
