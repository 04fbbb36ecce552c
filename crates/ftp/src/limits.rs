//! Every bound on peer-controlled input in the FTP core, in one place
//! (as vsftpd's `defs.h`). Each constant says why it has its value.

/// Longest control line we accept, terminator included. vsftpd reads
/// commands into a 4096-byte buffer; no legitimate command comes close,
/// and a peer that sends more without CRLF is not speaking FTP.
pub const MAX_LINE: usize = 4096;

/// Longest path argument, in bytes. Linux `PATH_MAX` is 4096, and a path
/// must fit in one command line together with its verb.
pub const MAX_PATH: usize = MAX_LINE - 8;

/// Longest USER argument. Unix login names are at most 32 bytes; 256
/// leaves room for `user@host` forms used by proxies and GridFTP DNs.
pub const MAX_USER: usize = 256;

/// Longest PASS argument. Long enough for tokens and e-mail style
/// anonymous passwords, short enough that hashing it costs little.
pub const MAX_PASS: usize = 1024;

/// Most lines in one multi-line reply the client parser accepts. FEAT and
/// HELP replies from real servers are under 100 lines; a STAT of a large
/// directory is the longest legitimate case. Beyond this the server is
/// either broken or hostile.
pub const MAX_REPLY_LINES: usize = 4096;

/// Most bytes in one reply (all lines together) the client parser buffers.
/// Bounds client memory against a server that never ends a reply.
pub const MAX_REPLY_BYTES: usize = 1 << 20;

/// Most parallel data streams per transfer (OPTS RETR Parallelism). Each
/// stream costs a socket and buffers; globus-url-copy users rarely pass
/// `-p` above 32.
pub const MAX_PARALLELISM: u32 = 64;

/// Largest MODE E block payload we accept. Globus sends blocks of its
/// block size (256 KiB by default, `-bs` up to a few MiB); 64 MiB bounds
/// what a receiver must be ready to place at one offset.
pub const MAX_MODE_E_BLOCK: u64 = 64 << 20;

/// Largest socket buffer a peer may ask for with SBUF / SITE BUFSIZE.
/// Linux caps at `net.core.{r,w}mem_max` anyway; 512 MiB covers a
/// 40 Gbit/s x 100 ms path.
pub const MAX_SBUF: u64 = 512 << 20;

/// Largest byte count or offset we accept in ERET/ESTO/REST/CKSM/ALLO:
/// fits in `i64` (what `off_t` and `pread` take).
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// Most ranges in one 111 restart marker we parse. Each range is a gap a
/// receiver tracks; a peer could otherwise make us allocate without bound.
pub const MAX_MARKER_RANGES: usize = 1024;

/// Most bytes of client input echoed back in an error reply. Enough to
/// recognise the command, too little to use the reply as a reflector.
pub const MAX_ECHO: usize = 32;

/// Longest OPTS/SITE/unknown-verb name we keep. Real verbs are 3-8 chars.
pub const MAX_VERB: usize = 16;
