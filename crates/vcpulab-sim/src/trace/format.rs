//! The layout of a vtrace file, format versions 1 to 4 (`docs/trace-format.md` describes it byte by
//! byte; `tracer/vtrace/vtrace_format.h` is the writer's copy of these constants).
//!
//! ```text
//!  file   = header block*
//!  header = magic[8] version:u16 header_len:u16 flags:u32 created_unix_ns:u64 creator_pid:u32 crc:u32
//!  block  = "VTBK" payload_len:u32 pid:u32 tid:u32 process_base:u64 seq:u32 nrec:u32 flags:u32 crc:u32 payload
//!  record = kind:u8 flags:u8 len:u16 t:u64 body        (all integers little-endian)
//! ```

/// The first eight bytes of every vtrace file.
pub const MAGIC: [u8; 8] = *b"\x89VTRACE\n";
/// The first six bytes of an xz stream: a file starting with them is an xz-compressed trace,
/// decompressed before it is read (`traces/<suite>/<program>/t<N>.vtrace.xz`).
pub const XZ_MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0x00];
/// The largest trace the reader takes: 1 GiB, of the file, and of an xz-compressed file once
/// decompressed (a committed trace is tens of MB; a larger one is refused rather than filling
/// the memory).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// The newest format version this reader understands (it reads every version up to it).
pub const VERSION: u16 = 4;
/// Length of the version-1 file header.
pub const HEADER_LEN: usize = 32;
/// The first four bytes of every block.
pub const BLOCK_MAGIC: [u8; 4] = *b"VTBK";
/// Length of `PROCESS_START`'s kernel release field, after the command line (version 4).
pub const RELEASE_LEN: usize = 64;
/// Length of `PROCESS_START`'s C library version field, after the release (version 4).
pub const LIBC_LEN: usize = 16;
/// Length of a block header.
pub const BLOCK_HEADER_LEN: usize = 40;
/// The largest block (header and payload) a writer produces.
pub const BLOCK_MAX: usize = 65536;
/// Length of the common record header (kind, flags, length, time).
pub const RECORD_HEADER_LEN: usize = 12;
/// The largest size a successful allocation, mapping, `munmap`, `madvise` or `mprotect` can
/// have had: 128 TiB, x86-64's 47-bit user address space (`TASK_SIZE`; a larger one is a
/// format error, not a call to replay).
pub const USER_SPACE_MAX: u64 = 1 << 47;

/// Record flag: a try-lock variant (`pthread_*_trylock`).
pub const F_TRY: u8 = 0x01;
/// Record flag: a timed variant (`*_timedlock`, `pthread_cond_timedwait`).
pub const F_TIMED: u8 = 0x02;
/// Record flag: the CPU time is extrapolated from the thread's last measurement.
pub const F_CPU_EST: u8 = 0x80;

/// Hold time the tracer could not measure (it did not see the acquisition).
pub const HOLD_UNKNOWN: u64 = u64::MAX;
/// Creation sequence number of a thread the tracer did not see created.
pub const SEQ_UNKNOWN: u32 = u32::MAX;

/// Record kind codes.
#[allow(missing_docs)]
pub mod kind {
    pub const PROCESS_START: u8 = 0x01;
    pub const THREAD_START: u8 = 0x02;
    pub const THREAD_EXIT: u8 = 0x03;
    pub const THREAD_CREATE: u8 = 0x04;
    pub const THREAD_JOIN: u8 = 0x05;
    pub const EXEC: u8 = 0x06;
    pub const MUTEX_LOCK: u8 = 0x10;
    pub const MUTEX_UNLOCK: u8 = 0x11;
    pub const SPIN_LOCK: u8 = 0x12;
    pub const SPIN_UNLOCK: u8 = 0x13;
    pub const RW_RDLOCK: u8 = 0x14;
    pub const RW_WRLOCK: u8 = 0x15;
    pub const RW_UNLOCK: u8 = 0x16;
    pub const BARRIER_INIT: u8 = 0x17;
    pub const BARRIER_WAIT: u8 = 0x18;
    pub const COND_WAIT: u8 = 0x19;
    pub const COND_SIGNAL: u8 = 0x1A;
    pub const COND_BROADCAST: u8 = 0x1B;
    /// A thread's run-queue delay and context switches, just before its exit (version 2), and
    /// its minor page faults (version 3: 52 bytes).
    pub const THREAD_STATS: u8 = 0x07;
    /// A futex(2) call made through libc's `syscall()` (format version 2).
    pub const FUTEX: u8 = 0x1C;
    pub const MALLOC: u8 = 0x20;
    pub const FREE: u8 = 0x21;
    pub const CALLOC: u8 = 0x22;
    pub const REALLOC: u8 = 0x23;
    pub const MEMALIGN: u8 = 0x24;
    pub const MMAP: u8 = 0x30;
    pub const MUNMAP: u8 = 0x31;
    pub const MADVISE: u8 = 0x32;
    pub const MPROTECT: u8 = 0x33;
}

/// What the reader knows about a record kind.
#[derive(Clone, Copy, Debug)]
pub struct KindInfo {
    /// Its code.
    pub code: u8,
    /// Its name in the documentation.
    pub name: &'static str,
    /// Whether the body starts with the thread's CPU time.
    pub cpu: bool,
    /// Total record length (header included); for `PROCESS_START`, the length without the
    /// command line.
    pub len: usize,
}

const fn k(code: u8, name: &'static str, cpu: bool, len: usize) -> KindInfo {
    KindInfo { code, name, cpu, len }
}

/// Every kind of format versions 1 to 3 (version 2 adds `THREAD_STATS` and `FUTEX`; version 3
/// lengthens `THREAD_STATS`, whose minimum length here is version 2's).
pub const KINDS: &[KindInfo] = &[
    k(kind::PROCESS_START, "PROCESS_START", true, 52),
    k(kind::THREAD_START, "THREAD_START", true, 44),
    k(kind::THREAD_EXIT, "THREAD_EXIT", true, 20),
    k(kind::THREAD_CREATE, "THREAD_CREATE", true, 36),
    k(kind::THREAD_JOIN, "THREAD_JOIN", true, 44),
    k(kind::EXEC, "EXEC", true, 24),
    k(kind::THREAD_STATS, "THREAD_STATS", true, 44),
    k(kind::MUTEX_LOCK, "MUTEX_LOCK", true, 40),
    k(kind::MUTEX_UNLOCK, "MUTEX_UNLOCK", true, 36),
    k(kind::SPIN_LOCK, "SPIN_LOCK", true, 40),
    k(kind::SPIN_UNLOCK, "SPIN_UNLOCK", true, 36),
    k(kind::RW_RDLOCK, "RW_RDLOCK", true, 40),
    k(kind::RW_WRLOCK, "RW_WRLOCK", true, 40),
    k(kind::RW_UNLOCK, "RW_UNLOCK", true, 36),
    k(kind::BARRIER_INIT, "BARRIER_INIT", true, 36),
    k(kind::BARRIER_WAIT, "BARRIER_WAIT", true, 40),
    k(kind::COND_WAIT, "COND_WAIT", true, 48),
    k(kind::COND_SIGNAL, "COND_SIGNAL", true, 28),
    k(kind::COND_BROADCAST, "COND_BROADCAST", true, 28),
    k(kind::FUTEX, "FUTEX", true, 48),
    k(kind::MALLOC, "MALLOC", false, 28),
    k(kind::FREE, "FREE", false, 20),
    k(kind::CALLOC, "CALLOC", false, 36),
    k(kind::REALLOC, "REALLOC", false, 36),
    k(kind::MEMALIGN, "MEMALIGN", false, 36),
    k(kind::MMAP, "MMAP", true, 48),
    k(kind::MUNMAP, "MUNMAP", true, 40),
    k(kind::MADVISE, "MADVISE", true, 44),
    k(kind::MPROTECT, "MPROTECT", true, 44),
];

/// The description of kind `code`, if the format defines it.
pub fn kind_info(code: u8) -> Option<&'static KindInfo> {
    KINDS.iter().find(|i| i.code == code)
}
