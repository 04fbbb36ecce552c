//! One place that turns `-1`/errno into `io::Error` and retries EINTR.

use std::io;

/// Converts a libc return value into `io::Result`, reading errno on `-1`.
pub fn cvt<T: IsMinusOne>(ret: T) -> io::Result<T> {
    if ret.is_minus_one() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Calls `f` until it returns something other than EINTR.
pub fn cvt_retry<T: IsMinusOne, F: FnMut() -> T>(mut f: F) -> io::Result<T> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Integer return types of libc calls that signal failure with `-1`.
pub trait IsMinusOne {
    /// True when the value is the libc failure marker.
    fn is_minus_one(&self) -> bool;
}

macro_rules! impl_is_minus_one {
    ($($t:ty)*) => ($(impl IsMinusOne for $t {
        fn is_minus_one(&self) -> bool { *self == -1 }
    })*)
}
impl_is_minus_one! { i32 i64 isize }
