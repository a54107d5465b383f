//! Traces of real programs recorded by the vtrace LD_PRELOAD tracer (`tracer/vtrace/`).
//!
//! ```text
//!  VTRACE_OUT=app.vtrace LD_PRELOAD=libvtrace.so ./app      trace::read("app.vtrace")
//!        │ per-thread buffers, one checksummed block per write        │ validate, group, sort
//!        ▼                                                            ▼
//!  header block block block ... (threads and processes mixed)  ──► Trace ─ Process ─ ThreadTrace ─ Record
//! ```
//!
//! A file holds the blocks of every process that ran with the tracer and the same
//! `VTRACE_OUT` (fork children, exec'd images), in the order they were written. [`read`]
//! checks the header, every block's checksum and every record's kind and length, then groups
//! the records by process (pid and process start time) and thread, sorted by time. Any defect
//! is a [`TraceError`] naming the file, the byte offset and what was expected. The format is
//! documented in `docs/trace-format.md`; its constants are in [`format`]. A file that starts with
//! the xz magic ([`format::XZ_MAGIC`]) is decompressed first (bounded by
//! [`format::MAX_TRACE_BYTES`]); its byte offsets are then those of the decompressed trace.
//!
//! ```
//! # use vcpulab_sim::trace;
//! match trace::from_bytes(b"not a trace") {
//!     Err(e) => assert_eq!(e.to_string(), "<bytes>: byte 0: not a vtrace file (expected the magic bytes \\x89VTRACE\\n)"),
//!     Ok(_) => unreachable!(),
//! }
//! ```

use std::fmt;

use serde::Serialize;

pub mod format;
mod read;

#[cfg(test)]
pub(crate) use read::tests::{sample as sample_bytes, xz};
pub use read::{from_bytes, from_bytes_named, read, read_bytes};

/// A whole trace file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trace {
    /// The file header.
    pub header: Header,
    /// Every process image, in order of first appearance in the file.
    pub processes: Vec<Process>,
}

/// The file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Header {
    /// Format version of the file.
    pub version: u16,
    /// Header flags (0 in version 1).
    pub flags: u32,
    /// When the file was created (Unix time, ns).
    pub created_unix_ns: u64,
    /// The process that created it.
    pub creator_pid: u32,
}

/// One process image: a process from its start (or fork) to its exit or exec.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Process {
    /// Its pid (an exec'd image keeps the pid of the image it replaced).
    pub pid: u32,
    /// Its clock base: `CLOCK_MONOTONIC` (ns) at its start. Record times are relative to it.
    pub base_ns: u64,
    /// Its start record (None if that block was lost).
    pub start: Option<ProcessStart>,
    /// Its threads, in order of first appearance.
    pub threads: Vec<ThreadTrace>,
}

/// What a process recorded about itself at its start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessStart {
    /// Parent pid.
    pub ppid: u32,
    /// Online CPUs.
    pub cpus: u32,
    /// How it started.
    pub origin: Origin,
    /// `CLOCK_REALTIME` (ns since the Unix epoch) at its start.
    pub realtime_base_ns: u64,
    /// Its command line (bounded at 1024 bytes; lossy UTF-8).
    pub cmdline: Vec<String>,
    /// The release of the kernel it ran on (`uname -r`; format version 4, None before).
    pub kernel: Option<String>,
    /// The version of its C library (glibc's `gnu_get_libc_version`, e.g. "2.36"; format
    /// version 4, None before).
    pub libc: Option<String>,
}

/// How a process image started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Origin {
    /// A program started (by exec, including the first one).
    Exec,
    /// A fork of the process `ppid`.
    Fork,
}

/// The records of one thread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadTrace {
    /// Its kernel thread id (the main thread's is the pid).
    pub tid: u32,
    /// The thread that created it (None: the main thread, or a thread the tracer did not see
    /// created).
    pub parent: Option<u32>,
    /// Its creation sequence number in the process (0 = main thread), matching
    /// [`Event::ThreadCreate::seq`] of its creator.
    pub seq: Option<u32>,
    /// Blocks read for it.
    pub blocks: u32,
    /// Blocks missing from its sequence (lost: written by a process killed mid-way, or skipped
    /// at exit while the thread was recording).
    pub lost_blocks: u32,
    /// Its records, sorted by time (stable: equal times keep file order).
    pub records: Vec<Record>,
}

/// One traced event of a thread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// When the call returned (acquisitions, waits, allocations) or was made (releases,
    /// signals): ns since the process's clock base.
    pub t: u64,
    /// The thread's CPU time then (ns), for every kind except the allocator's.
    pub cpu: Option<u64>,
    /// `cpu` is extrapolated from the thread's last measurement (see `VTRACE_CPU_GAP_NS`).
    pub cpu_estimated: bool,
    /// What happened.
    pub event: Event,
}

/// How a lock was requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LockMode {
    /// Waiting as long as needed.
    Block,
    /// A try-lock (`ret` tells whether it was taken).
    Try,
    /// With a time-out.
    Timed,
}

/// Traced events. Addresses identify objects; `ret` is the call's return value (0 = success
/// for the pthread calls); `wait_ns` is return time minus call time; `hold_ns` is the time
/// since the matching acquisition (None when the tracer did not see it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // the fields: see above
pub enum Event {
    /// The process started (always the first record of its first thread).
    ProcessStart { pid: u32 },
    /// The thread started.
    ThreadStart { tid: u32, parent: Option<u32>, seq: Option<u32>, handle: u64 },
    /// The thread ended (also the thread that called `exit`).
    ThreadExit,
    /// `pthread_create`; `child` is the tid of the thread with this `seq` (filled by the reader).
    ThreadCreate { seq: u32, ret: i32, handle: u64, child: Option<u32> },
    /// `pthread_join`; `tid` is None when the tracer could not tell which thread it was.
    ThreadJoin { tid: Option<u32>, ret: i32, handle: u64, wait_ns: u64 },
    /// `exec*`: `ret` 0 is written (and flushed) just before the call; a failed call adds one
    /// with its errno.
    Exec { ret: i32 },
    /// `pthread_mutex_lock` (`trylock`: [`LockMode::Try`], `timedlock`: [`LockMode::Timed`]).
    MutexLock { addr: u64, mode: LockMode, wait_ns: u64, ret: i32 },
    /// `pthread_mutex_unlock`, recorded at the call.
    MutexUnlock { addr: u64, hold_ns: Option<u64> },
    /// `pthread_spin_lock` / `pthread_spin_trylock`.
    SpinLock { addr: u64, mode: LockMode, wait_ns: u64, ret: i32 },
    /// `pthread_spin_unlock`, recorded at the call.
    SpinUnlock { addr: u64, hold_ns: Option<u64> },
    /// `pthread_rwlock_rdlock` and its try/timed variants.
    RwReadLock { addr: u64, mode: LockMode, wait_ns: u64, ret: i32 },
    /// `pthread_rwlock_wrlock` and its try/timed variants.
    RwWriteLock { addr: u64, mode: LockMode, wait_ns: u64, ret: i32 },
    /// `pthread_rwlock_unlock`, recorded at the call.
    RwUnlock { addr: u64, hold_ns: Option<u64> },
    /// `pthread_barrier_init` with `count` parties.
    BarrierInit { addr: u64, count: u32, ret: i32 },
    /// `ret` is -1 (`PTHREAD_BARRIER_SERIAL_THREAD`) for one thread per opening, else 0.
    BarrierWait { addr: u64, wait_ns: u64, ret: i32 },
    /// `pthread_cond_wait` / `pthread_cond_timedwait` (`timed`); the mutex is held again at `t`.
    CondWait { cond: u64, mutex: u64, timed: bool, wait_ns: u64, ret: i32 },
    /// `pthread_cond_signal`.
    CondSignal { cond: u64 },
    /// `pthread_cond_broadcast`.
    CondBroadcast { cond: u64 },
    /// The thread's time waiting for a CPU (`run_delay` of its schedstat; None where the
    /// kernel does not keep it) and its context switches, recorded just before its exit; or,
    /// for a thread still alive when the process exited, read by the exiting thread (with the
    /// thread's CPU time, and no context switches).
    ThreadStats {
        run_delay_ns: Option<u64>,
        voluntary_switches: Option<u64>,
        involuntary_switches: Option<u64>,
        /// Its minor page faults (`ru_minflt`); None before format version 3, or for a thread
        /// the process's exit killed.
        minor_faults: Option<u64>,
    },
    /// `syscall(SYS_futex, addr, op, val, ...)`: `op` as passed (with `FUTEX_PRIVATE_FLAG`),
    /// `timed` when a wait had a timeout, `ret` 0 or the number woken, or `-errno`.
    Futex { addr: u64, op: u32, val: u32, timed: bool, wait_ns: u64, ret: i32 },
    /// `malloc(size)` returned `ptr`.
    Malloc { size: u64, ptr: u64 },
    /// `free(ptr)` (never NULL).
    Free { ptr: u64 },
    /// `calloc(nmemb, size)` returned `ptr`.
    Calloc { nmemb: u64, size: u64, ptr: u64 },
    /// `realloc(old, size)` returned `ptr`.
    Realloc { old: u64, size: u64, ptr: u64 },
    /// `memalign`, `aligned_alloc`, `posix_memalign`.
    Memalign { align: u64, size: u64, ptr: u64 },
    /// `mmap`: `addr` is the result (`u64::MAX` = `MAP_FAILED`).
    Mmap { addr: u64, len: u64, prot: i32, flags: i32, fd: i32 },
    /// `munmap`.
    Munmap { addr: u64, len: u64, ret: i32 },
    /// `madvise` with its advice (`MADV_DONTNEED` = 4).
    Madvise { addr: u64, len: u64, advice: i32, ret: i32 },
    /// `mprotect` with its new protection.
    Mprotect { addr: u64, len: u64, prot: i32, ret: i32 },
}

/// Why a trace could not be read: the file, the byte offset, and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The file (or `<bytes>`).
    pub file: String,
    /// Byte offset in the file where the problem is.
    pub offset: u64,
    /// What was wrong.
    pub kind: TraceErrorKind,
}

/// The kinds of [`TraceError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceErrorKind {
    /// The file could not be read.
    Io(String),
    /// The file starts with the xz magic but is not a valid xz stream (corrupt, truncated).
    Xz(String),
    /// The file (or an xz-compressed file's content) is larger than [`format::MAX_TRACE_BYTES`].
    TooLarge {
        /// The file is xz-compressed (its content is too large, not the file).
        compressed: bool,
    },
    /// The file does not start with the vtrace magic.
    BadMagic,
    /// The file ends inside the header.
    TruncatedHeader {
        /// Bytes in the file.
        len: u64,
    },
    /// The header's version is newer than [`format::VERSION`] (or 0).
    UnsupportedVersion {
        /// The file's version.
        version: u16,
    },
    /// The header's checksum does not match.
    HeaderChecksum {
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// The header length field is below the version's header length.
    HeaderLength {
        /// Its value.
        len: u16,
    },
    /// The file ends inside block `block` (counted from 0).
    TruncatedBlock {
        /// Block number.
        block: u64,
        /// Bytes the block needs.
        need: u64,
        /// Bytes left in the file.
        have: u64,
    },
    /// A block does not start with `VTBK`.
    BadBlockMagic {
        /// Block number.
        block: u64,
    },
    /// A block is larger than [`format::BLOCK_MAX`].
    BlockTooLarge {
        /// Block number.
        block: u64,
        /// Its payload length.
        payload: u64,
    },
    /// A block's checksum does not match.
    Checksum {
        /// Block number.
        block: u64,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A record of a kind this version does not define.
    UnknownKind {
        /// Block number.
        block: u64,
        /// The kind code.
        kind: u8,
    },
    /// Lengths that do not add up.
    Length {
        /// Block number.
        block: u64,
        /// What was inconsistent.
        what: String,
    },
    /// A successful call's size that no x86-64 Linux program could have had (beyond the
    /// 47-bit user address space, [`format::USER_SPACE_MAX`]).
    Field {
        /// Block number.
        block: u64,
        /// The record's number in its block (counted from 0).
        record: u64,
        /// The record's kind (e.g. `MALLOC`).
        kind: &'static str,
        /// What was wrong, and what was expected.
        what: String,
    },
    /// A block that does not fit the others as the tracer writes them: empty, written twice
    /// or out of its thread's order, records of a thread after its exit, a process or thread
    /// start out of place.
    Structure {
        /// Block number.
        block: u64,
        /// What was out of place.
        what: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TraceErrorKind as K;
        match &self.kind {
            K::Io(e) => return write!(f, "{}: cannot read: {e}", self.file),
            K::Xz(e) => return write!(f, "{}: not a valid xz stream: {e}", self.file),
            K::TooLarge { compressed: true } => {
                return write!(f, "{}: decompresses to more than {} bytes, the largest trace read", self.file, format::MAX_TRACE_BYTES)
            }
            K::TooLarge { compressed: false } => {
                return write!(f, "{}: larger than {} bytes, the largest trace read", self.file, format::MAX_TRACE_BYTES)
            }
            _ => {}
        }
        write!(f, "{}: byte {}: ", self.file, self.offset)?;
        match &self.kind {
            K::Io(_) | K::Xz(_) | K::TooLarge { .. } => Ok(()),
            K::BadMagic => write!(f, "not a vtrace file (expected the magic bytes \\x89VTRACE\\n)"),
            K::TruncatedHeader { len } => {
                write!(f, "truncated header: expected {} bytes, the file has {len}", format::HEADER_LEN)
            }
            K::UnsupportedVersion { version: 0 } => write!(f, "invalid format version 0"),
            K::UnsupportedVersion { version } => {
                write!(f, "written by a newer vcpulab: format version {version}, this reads ≤ {}", format::VERSION)
            }
            K::HeaderChecksum { stored, computed } => {
                write!(f, "header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            K::HeaderLength { len } => write!(f, "header length {len} is below the {} bytes of version 1", format::HEADER_LEN),
            K::TruncatedBlock { block, need, have } => {
                write!(f, "truncated block {block}: expected {need} bytes, the file ends after {have}")
            }
            K::BadBlockMagic { block } => write!(f, "block {block}: expected the block magic VTBK"),
            K::BlockTooLarge { block, payload } => {
                write!(f, "block {block}: payload of {payload} bytes exceeds the {}-byte block limit", format::BLOCK_MAX)
            }
            K::Checksum { block, stored, computed } => {
                write!(f, "checksum mismatch in block {block}: stored {stored:#010x}, computed {computed:#010x}")
            }
            K::UnknownKind { block, kind } => write!(f, "unknown record kind {kind:#04x} in block {block}"),
            K::Length { block, what } => write!(f, "inconsistent lengths in block {block}: {what}"),
            K::Structure { block, what } => write!(f, "malformed block {block}: {what}"),
            K::Field { block, record, kind, what } => write!(f, "impossible {kind} record {record} of block {block}: {what}"),
        }
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    /// Every thread of every process.
    pub fn threads(&self) -> impl Iterator<Item = (&Process, &ThreadTrace)> {
        self.processes.iter().flat_map(|p| p.threads.iter().map(move |t| (p, t)))
    }
}

impl Event {
    /// The documented name of its record kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Event::ProcessStart { .. } => "PROCESS_START",
            Event::ThreadStart { .. } => "THREAD_START",
            Event::ThreadExit => "THREAD_EXIT",
            Event::ThreadCreate { .. } => "THREAD_CREATE",
            Event::ThreadJoin { .. } => "THREAD_JOIN",
            Event::Exec { .. } => "EXEC",
            Event::MutexLock { .. } => "MUTEX_LOCK",
            Event::MutexUnlock { .. } => "MUTEX_UNLOCK",
            Event::SpinLock { .. } => "SPIN_LOCK",
            Event::SpinUnlock { .. } => "SPIN_UNLOCK",
            Event::RwReadLock { .. } => "RW_RDLOCK",
            Event::RwWriteLock { .. } => "RW_WRLOCK",
            Event::RwUnlock { .. } => "RW_UNLOCK",
            Event::BarrierInit { .. } => "BARRIER_INIT",
            Event::BarrierWait { .. } => "BARRIER_WAIT",
            Event::CondWait { .. } => "COND_WAIT",
            Event::CondSignal { .. } => "COND_SIGNAL",
            Event::CondBroadcast { .. } => "COND_BROADCAST",
            Event::Futex { .. } => "FUTEX",
            Event::ThreadStats { .. } => "THREAD_STATS",
            Event::Malloc { .. } => "MALLOC",
            Event::Free { .. } => "FREE",
            Event::Calloc { .. } => "CALLOC",
            Event::Realloc { .. } => "REALLOC",
            Event::Memalign { .. } => "MEMALIGN",
            Event::Mmap { .. } => "MMAP",
            Event::Munmap { .. } => "MUNMAP",
            Event::Madvise { .. } => "MADVISE",
            Event::Mprotect { .. } => "MPROTECT",
        }
    }
}
