//! Parsing and validation of vtrace files.

use std::collections::BTreeMap;
use std::path::Path;

use super::format::{self, kind, KindInfo};
use super::{Event, Header, LockMode, Origin, Process, ProcessStart, Record, ThreadTrace, Trace, TraceError, TraceErrorKind};

/// Reads and validates the trace file at `path` (errors name it, a byte of its name that is not
/// UTF-8 as `\xNN`).
/// An xz-compressed file is decompressed first (see [`from_bytes_named`]).
pub fn read(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
    let path = path.as_ref();
    let bytes = read_bytes(path)?;
    from_bytes_named(&file_name(path), &bytes)
}

/// The bytes of the trace file at `path` as stored (compressed or not), refusing a file larger
/// than [`format::MAX_TRACE_BYTES`]. Errors name the file as [`read`]'s do.
pub fn read_bytes(path: impl AsRef<Path>) -> Result<Vec<u8>, TraceError> {
    use std::io::Read;
    let path = path.as_ref();
    let fail = |kind| TraceError { file: file_name(path), offset: 0, kind };
    let file = std::fs::File::open(path).map_err(|e| fail(TraceErrorKind::Io(e.to_string())))?;
    let mut bytes = Vec::new();
    file.take(format::MAX_TRACE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| fail(TraceErrorKind::Io(e.to_string())))?;
    if bytes.len() as u64 > format::MAX_TRACE_BYTES {
        return Err(fail(TraceErrorKind::TooLarge { compressed: false }));
    }
    Ok(bytes)
}

/// `path` as text: as it is when it is UTF-8, else with each byte that is not as `\xNN` (the
/// CLI shows such bytes in the same way).
fn file_name(path: &Path) -> String {
    #[cfg(unix)]
    {
        use std::fmt::Write;
        use std::os::unix::ffi::OsStrExt;
        let mut name = String::new();
        for chunk in path.as_os_str().as_bytes().utf8_chunks() {
            name.push_str(chunk.valid());
            for b in chunk.invalid() {
                let _ = write!(name, "\\x{b:02x}");
            }
        }
        name
    }
    #[cfg(not(unix))]
    {
        path.display().to_string()
    }
}

/// Parses a trace held in memory (errors name it `<bytes>`).
pub fn from_bytes(bytes: &[u8]) -> Result<Trace, TraceError> {
    from_bytes_named("<bytes>", bytes)
}

/// Parses a trace held in memory; errors name it `file`. Bytes that start with the xz magic
/// ([`format::XZ_MAGIC`]) are an xz-compressed trace: decompressed first (at most
/// [`format::MAX_TRACE_BYTES`]), and errors in its content name it `FILE (decompressed)`, the
/// byte offsets being the decompressed trace's.
pub fn from_bytes_named(file: &str, bytes: &[u8]) -> Result<Trace, TraceError> {
    if bytes.starts_with(&format::XZ_MAGIC) {
        let plain = decompress_xz(bytes, format::MAX_TRACE_BYTES).map_err(|kind| TraceError { file: file.to_string(), offset: 0, kind })?;
        return parse(&format!("{file} (decompressed)"), &plain);
    }
    parse(file, bytes)
}

/// The content of the xz stream `bytes`, at most `limit` bytes of it.
fn decompress_xz(bytes: &[u8], limit: u64) -> Result<Vec<u8>, TraceErrorKind> {
    /// A writer that takes at most `limit` bytes and remembers that it was offered more.
    struct Bounded {
        out: Vec<u8>,
        limit: u64,
        over: bool,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if (self.out.len() + buf.len()) as u64 > self.limit {
                self.over = true;
                return Err(std::io::Error::other("the decompressed trace exceeds the bound"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded { out: Vec::new(), limit, over: false };
    match lzma_rs::xz_decompress(&mut std::io::BufReader::new(bytes), &mut out) {
        Ok(()) => Ok(out.out),
        Err(_) if out.over => Err(TraceErrorKind::TooLarge { compressed: true }),
        Err(e) => Err(TraceErrorKind::Xz(one_line(&xz_message(e)))),
    }
}

/// What was wrong with an xz stream, in words (the decoder's, without its own prefixes).
fn xz_message(e: lzma_rs::error::Error) -> String {
    use lzma_rs::error::Error as E;
    match e {
        E::IoError(e) | E::HeaderTooShort(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => "truncated (the stream ends early)".into(),
        E::IoError(e) | E::HeaderTooShort(e) => e.to_string(),
        E::LzmaError(m) | E::XzError(m) => m,
    }
}

/// `text` on one line (the decoder's messages are, but the bound on them is cheap).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parses the (uncompressed) trace `bytes`; errors name it `file`.
fn parse(file: &str, bytes: &[u8]) -> Result<Trace, TraceError> {
    let err = |offset: usize, kind: TraceErrorKind| TraceError { file: file.to_string(), offset: offset as u64, kind };
    let header = parse_header(bytes).map_err(|(o, k)| err(o, k))?;
    let mut builder = Builder::default();
    let mut off = header_len(bytes);
    let mut block = 0u64;
    while off < bytes.len() {
        parse_block(bytes, off, (block, header.version), &mut builder).map_err(|(o, k)| err(o, k))?;
        off += format::BLOCK_HEADER_LEN + le32(bytes, off + 4) as usize;
        block += 1;
    }
    Ok(Trace { header, processes: builder.finish() })
}

type Fail = (usize, TraceErrorKind);

fn le16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

fn header_len(bytes: &[u8]) -> usize {
    usize::from(le16(bytes, 10)).max(format::HEADER_LEN)
}

fn parse_header(b: &[u8]) -> Result<Header, Fail> {
    let magic_len = b.len().min(format::MAGIC.len());
    if b[..magic_len] != format::MAGIC[..magic_len] {
        return Err((0, TraceErrorKind::BadMagic));
    }
    let truncated = (b.len(), TraceErrorKind::TruncatedHeader { len: b.len() as u64 });
    if b.len() < 10 {
        return Err(truncated);
    }
    let version = le16(b, 8);
    if version == 0 || version > format::VERSION {
        return Err((8, TraceErrorKind::UnsupportedVersion { version }));
    }
    if b.len() < format::HEADER_LEN {
        return Err(truncated);
    }
    let len = le16(b, 10);
    if usize::from(len) < format::HEADER_LEN {
        return Err((10, TraceErrorKind::HeaderLength { len }));
    }
    if b.len() < usize::from(len) {
        return Err(truncated);
    }
    let stored = le32(b, 28);
    let computed = crc32fast::hash(&b[..28]);
    if stored != computed {
        return Err((28, TraceErrorKind::HeaderChecksum { stored, computed }));
    }
    Ok(Header { version, flags: le32(b, 12), created_unix_ns: le64(b, 16), creator_pid: le32(b, 24) })
}

/// Block `block` of a file of format `version`, at `off`.
fn parse_block(b: &[u8], off: usize, (block, version): (u64, u16), out: &mut Builder) -> Result<(), Fail> {
    let have = (b.len() - off) as u64;
    let hl = format::BLOCK_HEADER_LEN;
    if have < hl as u64 {
        return Err((off, TraceErrorKind::TruncatedBlock { block, need: hl as u64, have }));
    }
    if b[off..off + 4] != format::BLOCK_MAGIC {
        return Err((off, TraceErrorKind::BadBlockMagic { block }));
    }
    let payload_len = le32(b, off + 4) as usize;
    if hl + payload_len > format::BLOCK_MAX {
        return Err((off + 4, TraceErrorKind::BlockTooLarge { block, payload: payload_len as u64 }));
    }
    if have < (hl + payload_len) as u64 {
        return Err((off, TraceErrorKind::TruncatedBlock { block, need: (hl + payload_len) as u64, have }));
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&b[off..off + 36]);
    h.update(&b[off + hl..off + hl + payload_len]);
    let computed = h.finalize();
    let stored = le32(b, off + 36);
    if stored != computed {
        return Err((off + 36, TraceErrorKind::Checksum { block, stored, computed }));
    }
    let (pid, tid, base, seq, nrec) = (le32(b, off + 8), le32(b, off + 12), le64(b, off + 16), le32(b, off + 24), le32(b, off + 28));
    let flags = le32(b, off + 32);
    if flags != 0 {
        return Err((off + 32, TraceErrorKind::Structure { block, what: format!("block flags {flags:#010x}, expected 0") }));
    }
    // The tracer writes a block only when it holds records (a header followed by an empty
    // block is not a trace of anything).
    if payload_len == 0 && nrec == 0 {
        return Err((
            off + 4,
            TraceErrorKind::Structure { block, what: "an empty block: no records (the tracer never writes one)".into() },
        ));
    }
    let payload = &b[off + hl..off + hl + payload_len];
    let length = |at: usize, what: String| (off + hl + at, TraceErrorKind::Length { block, what });
    let mut records = Vec::new();
    let mut at = Vec::new(); // each record's offset in the file
    let mut start = None;
    let mut pos = 0;
    while pos < payload.len() {
        let left = payload.len() - pos;
        if left < format::RECORD_HEADER_LEN {
            return Err(length(pos, format!("a record header needs {} bytes, {left} are left in the payload", format::RECORD_HEADER_LEN)));
        }
        let code = payload[pos];
        let Some(info) = format::kind_info(code) else {
            return Err((off + hl + pos, TraceErrorKind::UnknownKind { block, kind: code }));
        };
        let len = usize::from(le16(payload, pos + 2));
        let expected = match code {
            // Version 4 adds the kernel release and the C library version after the command line.
            kind::PROCESS_START if len >= info.len => {
                info.len + usize::from(le16(payload, pos + 34)) + if version >= 4 { format::RELEASE_LEN + format::LIBC_LEN } else { 0 }
            }
            // Version 3 adds THREAD_STATS's minflt.
            kind::THREAD_STATS if version >= 3 => info.len + 8,
            _ => info.len,
        };
        if len != expected {
            return Err(length(pos, format!("a {} record has length {len}, expected {expected}", info.name)));
        }
        if len > left {
            return Err(length(pos, format!("a {} record of {len} bytes overruns the payload ({left} bytes left)", info.name)));
        }
        let rec = &payload[pos..pos + len];
        let r = decode(info, rec).map_err(|what| (off + hl + pos, TraceErrorKind::Length { block, what }))?;
        if let Some(what) = implausible(&r.event) {
            let record = records.len() as u64;
            return Err((off + hl + pos, TraceErrorKind::Field { block, record, kind: info.name, what }));
        }
        records.push(r);
        at.push(off + hl + pos);
        if let (Event::ProcessStart { pid: p }, Some(s)) = (&records[records.len() - 1].event, process_start(rec, version)) {
            if *p != pid || le64(rec, 36) != base {
                return Err(length(pos, format!("a PROCESS_START record of pid {p} in a block of pid {pid} with another clock base")));
            }
            start = Some(s);
        }
        pos += len;
    }
    if records.len() != nrec as usize {
        return Err((
            off + 28,
            TraceErrorKind::Length { block, what: format!("the header declares {nrec} records, the payload holds {}", records.len()) },
        ));
    }
    out.block(BlockId { block, off, pid, base, tid, seq }, records, &at, start)
}

/// Where a block is and whose it is.
struct BlockId {
    block: u64,
    off: usize,
    pid: u32,
    base: u64,
    tid: u32,
    seq: u32,
}

fn process_start(rec: &[u8], version: u16) -> Option<ProcessStart> {
    let origin = match le16(rec, 32) {
        0 => Origin::Exec,
        _ => Origin::Fork,
    };
    let end = 52 + usize::from(le16(rec, 34));
    let cmd = rec.get(52..end)?;
    let cmdline = cmd.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
    // Version 4: the kernel release and the C library version, NUL-padded (empty: unknown).
    let text = |from: usize, len: usize| {
        (version >= 4)
            .then(|| rec.get(from..from + len))
            .flatten()
            .map(|r| String::from_utf8_lossy(r.split(|&c| c == 0).next().unwrap_or_default()).into_owned())
            .filter(|r| !r.is_empty())
    };
    let kernel = text(end, format::RELEASE_LEN);
    let libc = text(end + format::RELEASE_LEN, format::LIBC_LEN);
    Some(ProcessStart { ppid: le32(rec, 24), cpus: le32(rec, 28), origin, realtime_base_ns: le64(rec, 44), cmdline, kernel, libc })
}

fn mode(flags: u8) -> LockMode {
    if flags & format::F_TRY != 0 {
        LockMode::Try
    } else if flags & format::F_TIMED != 0 {
        LockMode::Timed
    } else {
        LockMode::Block
    }
}

fn opt_hold(v: u64) -> Option<u64> {
    (v != format::HOLD_UNKNOWN).then_some(v)
}

/// Decodes one record whose length has been checked against its kind.
fn decode(info: &KindInfo, r: &[u8]) -> Result<Record, String> {
    if r.len() < info.len {
        return Err(format!("a {} record has length {}, expected {}", info.name, r.len(), info.len));
    }
    let flags = r[1];
    let t = le64(r, 4);
    // Body fields start after the header, and after the CPU time when the kind has one.
    let at = if info.cpu { 20 } else { 12 };
    let u32_ = |i: usize| le32(r, at + i);
    let i32_ = |i: usize| le32(r, at + i) as i32;
    let u64_ = |i: usize| le64(r, at + i);
    let lock = |ctor: fn(u64, LockMode, u64, i32) -> Event| ctor(u64_(0), mode(flags), u64_(8), i32_(16));
    let event = match info.code {
        kind::PROCESS_START => Event::ProcessStart { pid: u32_(0) },
        kind::THREAD_START => Event::ThreadStart {
            tid: u32_(0),
            parent: Some(u32_(4)).filter(|&p| p != 0),
            seq: Some(u32_(8)).filter(|&s| s != format::SEQ_UNKNOWN),
            handle: u64_(16),
        },
        kind::THREAD_EXIT => Event::ThreadExit,
        kind::THREAD_CREATE => Event::ThreadCreate { seq: u32_(0), ret: i32_(4), handle: u64_(8), child: None },
        kind::THREAD_JOIN => Event::ThreadJoin { tid: Some(u32_(0)).filter(|&t| t != 0), ret: i32_(4), handle: u64_(8), wait_ns: u64_(16) },
        kind::EXEC => Event::Exec { ret: i32_(0) },
        kind::THREAD_STATS => Event::ThreadStats {
            run_delay_ns: opt_hold(u64_(0)),
            voluntary_switches: opt_hold(u64_(8)),
            involuntary_switches: opt_hold(u64_(16)),
            // Version 3's 52-byte record carries the minor faults.
            minor_faults: (r.len() >= info.len + 8).then(|| u64_(24)).and_then(opt_hold),
        },
        kind::MUTEX_LOCK => lock(|addr, mode, wait_ns, ret| Event::MutexLock { addr, mode, wait_ns, ret }),
        kind::SPIN_LOCK => lock(|addr, mode, wait_ns, ret| Event::SpinLock { addr, mode, wait_ns, ret }),
        kind::RW_RDLOCK => lock(|addr, mode, wait_ns, ret| Event::RwReadLock { addr, mode, wait_ns, ret }),
        kind::RW_WRLOCK => lock(|addr, mode, wait_ns, ret| Event::RwWriteLock { addr, mode, wait_ns, ret }),
        kind::MUTEX_UNLOCK => Event::MutexUnlock { addr: u64_(0), hold_ns: opt_hold(u64_(8)) },
        kind::SPIN_UNLOCK => Event::SpinUnlock { addr: u64_(0), hold_ns: opt_hold(u64_(8)) },
        kind::RW_UNLOCK => Event::RwUnlock { addr: u64_(0), hold_ns: opt_hold(u64_(8)) },
        kind::BARRIER_INIT => Event::BarrierInit { addr: u64_(0), count: u32_(8), ret: i32_(12) },
        kind::BARRIER_WAIT => Event::BarrierWait { addr: u64_(0), wait_ns: u64_(8), ret: i32_(16) },
        kind::COND_WAIT => {
            Event::CondWait { cond: u64_(0), mutex: u64_(8), timed: flags & format::F_TIMED != 0, wait_ns: u64_(16), ret: i32_(24) }
        }
        kind::COND_SIGNAL => Event::CondSignal { cond: u64_(0) },
        kind::COND_BROADCAST => Event::CondBroadcast { cond: u64_(0) },
        kind::FUTEX => Event::Futex {
            addr: u64_(0),
            op: u32_(8),
            val: u32_(12),
            timed: flags & format::F_TIMED != 0,
            wait_ns: u64_(16),
            ret: i32_(24),
        },
        kind::MALLOC => Event::Malloc { size: u64_(0), ptr: u64_(8) },
        kind::FREE => Event::Free { ptr: u64_(0) },
        kind::CALLOC => Event::Calloc { nmemb: u64_(0), size: u64_(8), ptr: u64_(16) },
        kind::REALLOC => Event::Realloc { old: u64_(0), size: u64_(8), ptr: u64_(16) },
        kind::MEMALIGN => Event::Memalign { align: u64_(0), size: u64_(8), ptr: u64_(16) },
        kind::MMAP => Event::Mmap { addr: u64_(0), len: u64_(8), prot: i32_(16), flags: i32_(20), fd: i32_(24) },
        kind::MUNMAP => Event::Munmap { addr: u64_(0), len: u64_(8), ret: i32_(16) },
        kind::MADVISE => Event::Madvise { addr: u64_(0), len: u64_(8), advice: i32_(16), ret: i32_(20) },
        kind::MPROTECT => Event::Mprotect { addr: u64_(0), len: u64_(8), prot: i32_(16), ret: i32_(20) },
        other => return Err(format!("no decoder for kind {other:#04x}")),
    };
    Ok(Record { t, cpu: info.cpu.then(|| le64(r, 12)), cpu_estimated: flags & format::F_CPU_EST != 0, event })
}

/// Why a successful call's size could not have been (None: it could): an allocation (a
/// `calloc`'s product), or a mapping, `munmap`, `madvise` or `mprotect` length, beyond the
/// 128 TiB of x86-64's 47-bit user address space ([`format::USER_SPACE_MAX`]), or a `calloc`
/// whose product overflows. A failed call (a NULL pointer, `MAP_FAILED`, a nonzero return)
/// may have asked for anything.
fn implausible(ev: &Event) -> Option<String> {
    let max = format::USER_SPACE_MAX;
    let (field, size) = match *ev {
        Event::Malloc { size, ptr } | Event::Memalign { size, ptr, .. } | Event::Realloc { size, ptr, .. } if ptr != 0 => ("size", size),
        Event::Calloc { nmemb, size, ptr } if ptr != 0 => match nmemb.checked_mul(size) {
            Some(bytes) => ("nmemb × size", bytes),
            None => {
                return Some(format!(
                    "nmemb {nmemb} × size {size} overflows 64 bits, expected a product of at most {max} bytes (128 TiB, the x86-64 user address space) for a calloc that succeeded"
                ));
            }
        },
        Event::Mmap { addr, len, .. } if addr != u64::MAX => ("len", len),
        Event::Munmap { len, ret: 0, .. } | Event::Madvise { len, ret: 0, .. } | Event::Mprotect { len, ret: 0, .. } => ("len", len),
        _ => return None,
    };
    (size > max)
        .then(|| format!("{field} {size} bytes, expected at most {max} (128 TiB, the x86-64 user address space) for a call that succeeded"))
}

/// Groups blocks by process image (pid, clock base) and thread, and checks that they fit
/// together as the tracer writes them (docs/trace-format.md): each thread numbers its blocks
/// from 0 and writes them in that order, once each; PROCESS_START opens the process's first
/// block (its main thread's, number 0), THREAD_START opens its thread's first block (after
/// PROCESS_START in the main thread) and names that thread, and THREAD_EXIT is the thread's last
/// record. A thread id the kernel hands out again within the process (after the thread that
/// had it exited) starts a new run of blocks from 0 with its THREAD_START.
#[derive(Default)]
struct Builder {
    processes: Vec<Process>,
    index: BTreeMap<(u32, u64), usize>,
    threads: Vec<BTreeMap<u32, usize>>,
    /// Per process, per thread (in `Process::threads` order): the blocks read so far.
    seen: Vec<Vec<Blocks>>,
    /// Per process: the block holding its PROCESS_START.
    started: Vec<Option<u64>>,
}

/// The blocks of one thread read so far.
#[derive(Default)]
struct Blocks {
    /// Sequence number -> the file's block number, for the thread's current run of blocks.
    seqs: BTreeMap<u32, u64>,
    /// Its THREAD_EXIT: the time and the block holding it.
    exited: Option<(u64, u64)>,
    /// Lost blocks of earlier runs of the same thread id.
    lost_before: u64,
}

impl Blocks {
    /// Blocks missing from the current run's numbering.
    fn lost(&self) -> u64 {
        let span = self.seqs.last_key_value().map_or(0, |(&m, _)| u64::from(m) + 1);
        span.saturating_sub(self.seqs.len() as u64)
    }
}

impl Builder {
    fn process(&mut self, pid: u32, base: u64) -> usize {
        *self.index.entry((pid, base)).or_insert_with(|| {
            self.processes.push(Process { pid, base_ns: base, start: None, threads: Vec::new() });
            self.threads.push(BTreeMap::new());
            self.seen.push(Vec::new());
            self.started.push(None);
            self.processes.len() - 1
        })
    }

    /// Adds a block's records (`at`: each one's offset in the file; `start`: its process start,
    /// if it holds the PROCESS_START record), or says how it does not fit.
    fn block(&mut self, id: BlockId, records: Vec<Record>, at: &[usize], start: Option<ProcessStart>) -> Result<(), Fail> {
        let BlockId { block, off, pid, base, tid, seq } = id;
        let bad = |at: usize, what: String| Err((at, TraceErrorKind::Structure { block, what }));
        let p = self.process(pid, base);
        let proc_ = &mut self.processes[p];
        let seen = &mut self.seen[p];
        let t = *self.threads[p].entry(tid).or_insert_with(|| {
            proc_.threads.push(ThreadTrace { tid, parent: None, seq: None, blocks: 0, lost_blocks: 0, records: Vec::new() });
            seen.push(Blocks::default());
            proc_.threads.len() - 1
        });
        let blocks = &mut seen[t];
        let who = format!("thread {tid} of process {pid}");
        // A thread id given again to a new thread: its block 0 opens with its THREAD_START,
        // made after the THREAD_EXIT of the thread that had the id before.
        let restarts = match (blocks.exited, records.first()) {
            (Some((exit_t, _)), Some(Record { t: start_t, event: Event::ThreadStart { .. }, .. })) => seq == 0 && *start_t >= exit_t,
            _ => false,
        };
        if restarts {
            blocks.lost_before += blocks.lost();
            blocks.seqs.clear();
            blocks.exited = None;
        } else if let Some(&first) = blocks.seqs.get(&seq) {
            return bad(off + 24, format!("a second block number {seq} of {who} (the first is block {first}): each block is written once"));
        } else if let Some((&last, &last_block)) = blocks.seqs.last_key_value().filter(|(&last, _)| seq < last) {
            return bad(
                off + 24,
                format!("block number {seq} of {who} after its block number {last} (block {last_block}): a thread's blocks are written in order"),
            );
        } else if let Some((_, exit_block)) = blocks.exited {
            return bad(off + 24, format!("block number {seq} of {who} after the thread's THREAD_EXIT (in block {exit_block})"));
        }
        for (i, r) in records.iter().enumerate() {
            match r.event {
                Event::ProcessStart { .. } => {
                    if let Some(first) = self.started[p] {
                        return bad(at[i], format!("a second PROCESS_START record of process {pid} (the first is in block {first})"));
                    }
                    if i != 0 || seq != 0 || tid != pid {
                        return bad(
                            at[i],
                            format!(
                                "a PROCESS_START record as record {i} of block number {seq} of {who}: it opens the process's first block \
                                 (record 0 of block number 0 of thread {pid})"
                            ),
                        );
                    }
                    self.started[p] = Some(block);
                }
                Event::ThreadStart { tid: named, .. } => {
                    if named != tid {
                        return bad(at[i], format!("a THREAD_START record of thread {named} in a block of {who}"));
                    }
                    let opens = seq == 0 && (i == 0 || (i == 1 && matches!(records[0].event, Event::ProcessStart { .. })));
                    if !opens {
                        return bad(
                            at[i],
                            format!(
                                "a THREAD_START record as record {i} of block number {seq} of {who}: it opens the thread's first block"
                            ),
                        );
                    }
                }
                Event::ThreadExit => {
                    if let Some(next) = records.get(i + 1) {
                        return bad(at[i + 1], format!("a {} record of {who} after its THREAD_EXIT", next.event.kind_name()));
                    }
                    blocks.exited = Some((r.t, block));
                }
                _ => {}
            }
        }
        blocks.seqs.insert(seq, block);
        if let Some(start) = start {
            proc_.start = Some(start);
        }
        let thread = &mut proc_.threads[t];
        for r in &records {
            if let Event::ThreadStart { parent, seq, .. } = r.event {
                thread.parent = parent;
                thread.seq = seq;
            }
        }
        thread.blocks += 1;
        thread.records.extend(records);
        Ok(())
    }

    fn finish(mut self) -> Vec<Process> {
        for (p, proc_) in self.processes.iter_mut().enumerate() {
            let children: BTreeMap<(u32, u32), u32> = proc_.threads.iter().filter_map(|t| Some(((t.parent?, t.seq?), t.tid))).collect();
            for (t, thread) in proc_.threads.iter_mut().enumerate() {
                let seen = &self.seen[p][t];
                thread.lost_blocks = (seen.lost_before + seen.lost()).min(u64::from(u32::MAX)) as u32;
                thread.records.sort_by_key(|r| r.t);
                let tid = thread.tid;
                for r in &mut thread.records {
                    if let Event::ThreadCreate { seq, ret: 0, child, .. } = &mut r.event {
                        *child = children.get(&(tid, *seq)).copied();
                    }
                }
            }
        }
        self.processes
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::TraceErrorKind as K;

    /// `bytes` xz-compressed.
    pub(crate) fn xz(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut std::io::BufReader::new(bytes), &mut out).expect("compresses");
        out
    }

    fn header(version: u16) -> Vec<u8> {
        let mut h = format::MAGIC.to_vec();
        h.extend(version.to_le_bytes());
        h.extend((format::HEADER_LEN as u16).to_le_bytes());
        h.extend(0u32.to_le_bytes());
        h.extend(1_700_000_000_000_000_000u64.to_le_bytes());
        h.extend(42u32.to_le_bytes());
        let crc = crc32fast::hash(&h);
        h.extend(crc.to_le_bytes());
        h
    }

    /// A record: kind, flags, t, then the body (CPU time included when the kind has one).
    fn rec(kind: u8, flags: u8, t: u64, body: &[u8]) -> Vec<u8> {
        let mut r = vec![kind, flags];
        r.extend(((format::RECORD_HEADER_LEN + body.len()) as u16).to_le_bytes());
        r.extend(t.to_le_bytes());
        r.extend(body);
        r
    }

    fn fields(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn block(pid: u32, tid: u32, base: u64, seq: u32, records: &[Vec<u8>]) -> Vec<u8> {
        let payload = records.concat();
        let mut b = format::BLOCK_MAGIC.to_vec();
        b.extend((payload.len() as u32).to_le_bytes());
        b.extend(pid.to_le_bytes());
        b.extend(tid.to_le_bytes());
        b.extend(base.to_le_bytes());
        b.extend(seq.to_le_bytes());
        b.extend((records.len() as u32).to_le_bytes());
        b.extend(0u32.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&b);
        h.update(&payload);
        b.extend(h.finalize().to_le_bytes());
        b.extend(payload);
        b
    }

    const BASE: u64 = 5_000_000;

    fn process_start(pid: u32, origin: u16, cmd: &[u8]) -> Vec<u8> {
        let body = fields(&[
            &7u64.to_le_bytes(),
            &pid.to_le_bytes(),
            &1u32.to_le_bytes(),
            &8u32.to_le_bytes(),
            &origin.to_le_bytes(),
            &(cmd.len() as u16).to_le_bytes(),
            &BASE.to_le_bytes(),
            &99u64.to_le_bytes(),
            cmd,
        ]);
        rec(kind::PROCESS_START, 0, 0, &body)
    }

    fn thread_start(t: u64, tid: u32, parent: u32, seq: u32) -> Vec<u8> {
        let body = fields(&[
            &t.to_le_bytes(),
            &tid.to_le_bytes(),
            &parent.to_le_bytes(),
            &seq.to_le_bytes(),
            &0u32.to_le_bytes(),
            &0xabcu64.to_le_bytes(),
        ]);
        rec(kind::THREAD_START, 0, t, &body)
    }

    /// A two-thread process: main creates thread 101 (seq 1) and joins it.
    pub(crate) fn sample() -> Vec<u8> {
        let m = 0x1000u64.to_le_bytes();
        let main1 = block(
            100,
            100,
            BASE,
            0,
            &[
                process_start(100, 0, b"./app\0-x\0"),
                thread_start(1, 100, 0, 0),
                rec(
                    kind::THREAD_CREATE,
                    0,
                    10,
                    &fields(&[&10u64.to_le_bytes(), &1u32.to_le_bytes(), &0i32.to_le_bytes(), &0xabcu64.to_le_bytes()]),
                ),
                rec(kind::MALLOC, 0, 12, &fields(&[&64u64.to_le_bytes(), &0x5000u64.to_le_bytes()])),
            ],
        );
        let child = block(
            100,
            101,
            BASE,
            0,
            &[
                thread_start(11, 101, 100, 1),
                rec(
                    kind::MUTEX_LOCK,
                    format::F_TRY | format::F_CPU_EST,
                    20,
                    &fields(&[&3u64.to_le_bytes(), &m, &5u64.to_le_bytes(), &0i32.to_le_bytes()]),
                ),
                rec(kind::MUTEX_UNLOCK, 0, 30, &fields(&[&4u64.to_le_bytes(), &m, &u64::MAX.to_le_bytes()])),
                rec(kind::THREAD_EXIT, 0, 31, &5u64.to_le_bytes()),
            ],
        );
        let main2 = block(
            100,
            100,
            BASE,
            1,
            &[
                rec(
                    kind::THREAD_JOIN,
                    0,
                    40,
                    &fields(&[
                        &9u64.to_le_bytes(),
                        &101u32.to_le_bytes(),
                        &0i32.to_le_bytes(),
                        &0xabcu64.to_le_bytes(),
                        &28u64.to_le_bytes(),
                    ]),
                ),
                rec(kind::FREE, 0, 41, &0x5000u64.to_le_bytes()),
                rec(kind::THREAD_EXIT, 0, 42, &9u64.to_le_bytes()),
            ],
        );
        [header(1), main1, child, main2].concat()
    }

    fn fails(bytes: &[u8]) -> TraceError {
        match from_bytes_named("t.vtrace", bytes) {
            Err(e) => e,
            Ok(t) => panic!("parsed: {t:?}"),
        }
    }

    /// [`sample`] as Python's `lzma.compress` writes it (FORMAT_XZ, CHECK_CRC64, preset 6):
    /// the way the committed traces are compressed.
    const SAMPLE_XZ_BY_PYTHON: &str = "fd377a585a000004e6d6b4460200210116000000742fe5a3e0022000ca5d00449586853580220d69c5b4840217dddfe12a3cfdd10abe6a615d7dd4e8eb8615bd03f92f712645901a6708819188e3511c73c541adf55665cd610c4a68087bd720698272cefbc8a774161aa408dd9a8f746b73d1cdf9c9758a71b1f7ea3c348f82c2f5c935953f899fe8dd2a896a1f8184b690bcd0a7393c4f76d70c94e6545db9906314c200b60b0b61a06c107234c9b605c6f274bff0fd3a0d86487d23d1902f21d036e00b41dcd91117cd9eb4111ac4e868bad41d2983c39d04b536e15943ba8873bf626a7d71377a000000de5dfcf1090c7fed0001e601a10400004ed3f6ccb1c467fb020000000004595a";

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex")).collect()
    }

    #[test]
    fn an_xz_compressed_trace_reads_as_the_trace() {
        let plain = from_bytes_named("t.vtrace", &sample()).expect("valid");
        let python = unhex(SAMPLE_XZ_BY_PYTHON);
        assert!(python.starts_with(&format::XZ_MAGIC));
        assert_eq!(from_bytes_named("t.vtrace.xz", &python).expect("valid"), plain);
        assert_eq!(from_bytes_named("t.vtrace.xz", &xz(&sample())).expect("valid"), plain);
        // Through a file, as `read` and the workloads read it.
        let dir = std::env::temp_dir().join(format!("vcpulab-xz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.vtrace.xz");
        std::fs::write(&path, &python).expect("written");
        assert_eq!(read(&path).expect("valid"), plain);
        assert_eq!(read_bytes(&path).expect("readable"), python);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_corrupt_or_truncated_xz_stream_is_one_clear_line() {
        let good = unhex(SAMPLE_XZ_BY_PYTHON);
        let mut corrupt = good.clone();
        corrupt[40] ^= 0x55;
        let truncated = &good[..good.len() / 2];
        for bad in [&corrupt[..], truncated, &format::XZ_MAGIC[..]] {
            let e = from_bytes_named("t.vtrace.xz", bad).expect_err("refused").to_string();
            assert!(e.starts_with("t.vtrace.xz: not a valid xz stream: "), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let e = from_bytes_named("t.vtrace.xz", truncated).expect_err("refused").to_string();
        assert_eq!(e, "t.vtrace.xz: not a valid xz stream: truncated (the stream ends early)");
        // A valid stream of something that is not a trace: the decompressed content's error.
        let e = from_bytes_named("t.vtrace.xz", &xz(b"not a trace")).expect_err("refused").to_string();
        assert_eq!(e, "t.vtrace.xz (decompressed): byte 0: not a vtrace file (expected the magic bytes \\x89VTRACE\\n)");
    }

    #[test]
    fn decompression_stops_at_the_bound() {
        let stream = xz(&vec![0u8; 5000]);
        assert_eq!(decompress_xz(&stream, 5000).map(|v| v.len()), Ok(5000));
        assert_eq!(decompress_xz(&stream, 4999), Err(K::TooLarge { compressed: true }));
        let e = TraceError { file: "t.vtrace.xz".into(), offset: 0, kind: K::TooLarge { compressed: true } };
        assert_eq!(
            e.to_string(),
            format!("t.vtrace.xz: decompresses to more than {} bytes, the largest trace read", format::MAX_TRACE_BYTES)
        );
    }

    #[test]
    fn round_trip_of_hand_built_bytes() {
        let t = from_bytes(&sample()).expect("valid");
        assert_eq!(t.header, Header { version: 1, flags: 0, created_unix_ns: 1_700_000_000_000_000_000, creator_pid: 42 });
        assert_eq!(t.processes.len(), 1);
        let p = &t.processes[0];
        assert_eq!((p.pid, p.base_ns), (100, BASE));
        let start = p.start.as_ref().expect("start");
        assert_eq!(start.cmdline, ["./app", "-x"]);
        assert_eq!((start.ppid, start.cpus, start.origin, start.realtime_base_ns), (1, 8, Origin::Exec, 99));
        assert_eq!(p.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), [100, 101]);
        let main = &p.threads[0];
        assert_eq!((main.blocks, main.lost_blocks, main.parent, main.seq), (2, 0, None, Some(0)));
        let kinds: Vec<_> = main.records.iter().map(|r| r.event.kind_name()).collect();
        assert_eq!(kinds, ["PROCESS_START", "THREAD_START", "THREAD_CREATE", "MALLOC", "THREAD_JOIN", "FREE", "THREAD_EXIT"]);
        assert_eq!(main.records[2].event, Event::ThreadCreate { seq: 1, ret: 0, handle: 0xabc, child: Some(101) });
        assert_eq!(main.records[3], Record { t: 12, cpu: None, cpu_estimated: false, event: Event::Malloc { size: 64, ptr: 0x5000 } });
        assert_eq!(main.records[4].event, Event::ThreadJoin { tid: Some(101), ret: 0, handle: 0xabc, wait_ns: 28 });
        let child = &p.threads[1];
        assert_eq!((child.parent, child.seq), (Some(100), Some(1)));
        assert_eq!(
            child.records[1],
            Record {
                t: 20,
                cpu: Some(3),
                cpu_estimated: true,
                event: Event::MutexLock { addr: 0x1000, mode: LockMode::Try, wait_ns: 5, ret: 0 }
            }
        );
        assert_eq!(child.records[2].event, Event::MutexUnlock { addr: 0x1000, hold_ns: None });
    }

    #[test]
    fn records_are_sorted_and_lost_blocks_counted() {
        // (a thread's blocks come in order; the reader sorts its records by time all the same)
        let first = block(7, 7, BASE, 0, &[rec(kind::FREE, 0, 50, &1u64.to_le_bytes())]);
        let fourth = block(7, 7, BASE, 3, &[rec(kind::FREE, 0, 10, &2u64.to_le_bytes())]);
        let t = from_bytes(&[header(1), first, fourth].concat()).expect("valid");
        let th = &t.processes[0].threads[0];
        assert_eq!(th.records.iter().map(|r| r.t).collect::<Vec<_>>(), [10, 50]);
        assert_eq!((th.blocks, th.lost_blocks), (2, 2));
        assert_eq!(t.processes[0].start, None);
    }

    #[test]
    fn an_exec_or_fork_is_a_separate_process() {
        let a = block(7, 7, BASE, 0, &[process_start(7, 0, b"a")]);
        let mut other = process_start(7, 1, b"b");
        other[36..44].copy_from_slice(&(BASE + 1).to_le_bytes());
        let b = block(7, 7, BASE + 1, 0, &[other]);
        let t = from_bytes(&[header(1), a, b].concat()).expect("valid");
        assert_eq!(t.processes.len(), 2);
        assert_eq!(t.processes[1].start.as_ref().map(|s| s.origin), Some(Origin::Fork));
    }

    #[test]
    fn header_only_is_an_empty_trace() {
        assert!(from_bytes(&header(1)).expect("valid").processes.is_empty());
    }

    #[test]
    fn bad_magic() {
        let e = fails(b"#!/bin/sh\necho hello, this is not a trace\n");
        assert_eq!(e.kind, K::BadMagic);
        assert_eq!(e.to_string(), "t.vtrace: byte 0: not a vtrace file (expected the magic bytes \\x89VTRACE\\n)");
    }

    #[test]
    fn newer_version() {
        let e = fails(&header(5));
        assert_eq!((e.offset, &e.kind), (8, &K::UnsupportedVersion { version: 5 }));
        assert_eq!(e.to_string(), "t.vtrace: byte 8: written by a newer vcpulab: format version 5, this reads ≤ 4");
        assert_eq!(fails(&header(0)).kind, K::UnsupportedVersion { version: 0 });
    }

    #[test]
    fn truncated_header() {
        for n in [0, 5, 12, 31] {
            let e = fails(&header(1)[..n]);
            assert_eq!(e.kind, K::TruncatedHeader { len: n as u64 }, "{n} bytes");
        }
        assert_eq!(fails(&header(1)[..12]).to_string(), "t.vtrace: byte 12: truncated header: expected 32 bytes, the file has 12");
    }

    #[test]
    fn header_checksum_and_length() {
        let mut h = header(1);
        h[20] ^= 1;
        assert!(matches!(fails(&h).kind, K::HeaderChecksum { .. }));
        let mut h = header(1);
        h[10] = 16;
        assert_eq!(fails(&h).kind, K::HeaderLength { len: 16 });
    }

    #[test]
    fn truncated_block() {
        let bytes = sample();
        let e = fails(&bytes[..bytes.len() - 3]);
        assert!(matches!(e.kind, K::TruncatedBlock { block: 2, have, need } if need == have + 3), "{e}");
        assert!(e.to_string().starts_with("t.vtrace: byte "), "{e}");
        assert!(e.to_string().contains("truncated block 2: expected "), "{e}");
        // ending inside a block header
        let e = fails(&bytes[..format::HEADER_LEN + 10]);
        assert_eq!(e.kind, K::TruncatedBlock { block: 0, need: 40, have: 10 });
        assert_eq!(e.offset, format::HEADER_LEN as u64);
    }

    #[test]
    fn checksum_mismatch() {
        let mut bytes = sample();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let e = fails(&bytes);
        assert!(matches!(e.kind, K::Checksum { block: 2, .. }), "{e}");
        assert!(e.to_string().contains("checksum mismatch in block 2: stored 0x"), "{e}");
    }

    #[test]
    fn bad_block_magic_and_size() {
        let mut bytes = sample();
        bytes[format::HEADER_LEN] = b'X';
        assert_eq!(fails(&bytes).kind, K::BadBlockMagic { block: 0 });
        let mut bytes = sample();
        bytes[format::HEADER_LEN + 4..format::HEADER_LEN + 8].copy_from_slice(&70000u32.to_le_bytes());
        assert_eq!(fails(&bytes).kind, K::BlockTooLarge { block: 0, payload: 70000 });
    }

    #[test]
    fn unknown_record_kind() {
        let b = block(7, 7, BASE, 0, &[rec(0x7f, 0, 1, &[0; 8])]);
        let e = fails(&[header(1), b].concat());
        assert_eq!(e.kind, K::UnknownKind { block: 0, kind: 0x7f });
        assert_eq!(e.offset, (format::HEADER_LEN + format::BLOCK_HEADER_LEN) as u64);
        assert_eq!(e.to_string(), "t.vtrace: byte 72: unknown record kind 0x7f in block 0");
    }

    #[test]
    fn inconsistent_lengths() {
        // a record whose length does not match its kind
        let b = block(7, 7, BASE, 0, &[rec(kind::MALLOC, 0, 1, &[0; 8])]);
        let e = fails(&[header(1), b].concat());
        assert_eq!(e.to_string(), "t.vtrace: byte 72: inconsistent lengths in block 0: a MALLOC record has length 20, expected 28");
        // a record running past the payload
        let mut r = rec(kind::FREE, 0, 1, &[0; 8]);
        let b = block(7, 7, BASE, 0, &[r.clone()]);
        r.truncate(16);
        let mut cut = block(7, 7, BASE, 0, &[r]);
        cut[28..32].copy_from_slice(&1u32.to_le_bytes());
        let e = fails(&[header(1), cut].concat());
        assert!(matches!(&e.kind, K::Length { what, .. } if what.contains("overruns")), "{e}");
        // a zero length (would loop forever if accepted)
        let mut zero = rec(kind::FREE, 0, 1, &[0; 8]);
        zero[2] = 0;
        let e = fails(&[header(1), block(7, 7, BASE, 0, &[zero])].concat());
        assert!(matches!(&e.kind, K::Length { what, .. } if what.contains("length 0")), "{e}");
        // a payload ending inside a record header
        let e = fails(&[header(1), block(7, 7, BASE, 0, &[vec![kind::FREE, 0, 20]])].concat());
        assert!(matches!(&e.kind, K::Length { what, .. } if what.contains("record header needs 12 bytes")), "{e}");
        // a record count that does not match
        let mut b2 = b.clone();
        b2[28..32].copy_from_slice(&2u32.to_le_bytes());
        let crc = {
            let mut h = crc32fast::Hasher::new();
            h.update(&b2[..36]);
            h.update(&b2[40..]);
            h.finalize()
        };
        b2[36..40].copy_from_slice(&crc.to_le_bytes());
        let e = fails(&[header(1), b2].concat());
        assert_eq!(e.to_string(), "t.vtrace: byte 60: inconsistent lengths in block 0: the header declares 2 records, the payload holds 1");
        // a process start of another process
        let e = fails(&[header(1), block(8, 8, BASE, 0, &[process_start(7, 0, b"")])].concat());
        assert!(matches!(&e.kind, K::Length { what, .. } if what.contains("PROCESS_START record of pid 7")), "{e}");
    }

    /// THREAD_STATS is 44 bytes in version 2 and 52 in version 3, which adds the minor faults.
    #[test]
    fn thread_stats_carry_the_minor_faults_from_version_3() {
        let stats = |minflt: Option<u64>| {
            let mut body = fields(&[&9u64.to_le_bytes(), &100u64.to_le_bytes(), &3u64.to_le_bytes(), &1u64.to_le_bytes()]);
            if let Some(m) = minflt {
                body.extend(m.to_le_bytes());
            }
            block(100, 100, BASE, 0, &[process_start(100, 0, b"./app\0"), rec(kind::THREAD_STATS, 0, 5, &body)])
        };
        let faults = |bytes: &[u8]| {
            let t = from_bytes_named("t.vtrace", bytes).expect("reads");
            t.processes[0].threads[0].records.iter().find_map(|r| match r.event {
                Event::ThreadStats { minor_faults, .. } => Some(minor_faults),
                _ => None,
            })
        };
        assert_eq!(faults(&[header(3), stats(Some(812))].concat()), Some(Some(812)));
        assert_eq!(faults(&[header(2), stats(None)].concat()), Some(None));
        let e = fails(&[header(3), stats(None)].concat());
        assert!(e.to_string().contains("a THREAD_STATS record has length 44, expected 52"), "{e}");
        let e = fails(&[header(2), stats(Some(812))].concat());
        assert!(e.to_string().contains("a THREAD_STATS record has length 52, expected 44"), "{e}");
    }

    /// Version 4 appends the kernel release (64 bytes) and the C library version (16), NUL-padded,
    /// to PROCESS_START.
    #[test]
    fn the_process_start_carries_the_kernel_and_libc_from_version_4() {
        let start = |release: Option<&[u8]>| {
            let mut r = process_start(100, 0, b"./app\0");
            if let Some(rel) = release {
                let mut field = rel.to_vec();
                field.resize(format::RELEASE_LEN, 0);
                r.extend(field);
                let mut libc = b"2.36".to_vec();
                libc.resize(format::LIBC_LEN, 0);
                r.extend(libc);
                let len = r.len() as u16;
                r[2..4].copy_from_slice(&len.to_le_bytes());
            }
            block(100, 100, BASE, 0, &[r])
        };
        let kernel = |bytes: &[u8]| from_bytes_named("t.vtrace", bytes).expect("reads").processes[0].start.clone().expect("start").kernel;
        assert_eq!(kernel(&[header(4), start(Some(b"6.18.44-fc"))].concat()).as_deref(), Some("6.18.44-fc"));
        let libc = from_bytes_named("t.vtrace", &[header(4), start(Some(b"6.1"))].concat()).expect("reads").processes[0]
            .start
            .clone()
            .expect("start")
            .libc;
        assert_eq!(libc.as_deref(), Some("2.36"));
        assert_eq!(kernel(&[header(4), start(Some(b""))].concat()), None, "uname failed");
        assert_eq!(kernel(&[header(3), start(None)].concat()), None);
        let e = fails(&[header(4), start(None)].concat());
        assert!(e.to_string().contains("a PROCESS_START record has length 58, expected 138"), "{e}");
        let t = from_bytes_named("t.vtrace", &[header(4), start(Some(b"6.1.0"))].concat()).expect("reads");
        assert_eq!(t.processes[0].start.as_ref().expect("start").cmdline, ["./app"], "the release is not part of the command line");
    }

    /// The blocks of `sample()` after the file header, each with its offset.
    fn sample_blocks() -> Vec<Vec<u8>> {
        let bytes = sample();
        let mut out = Vec::new();
        let mut off = format::HEADER_LEN;
        while off < bytes.len() {
            let end = off + format::BLOCK_HEADER_LEN + le32(&bytes, off + 4) as usize;
            out.push(bytes[off..end].to_vec());
            off = end;
        }
        out
    }

    fn structure(bytes: &[u8]) -> (u64, String) {
        let e = fails(bytes);
        match &e.kind {
            K::Structure { .. } => (e.offset, e.to_string()),
            _ => panic!("not a structure error: {e}"),
        }
    }

    #[test]
    fn a_file_holding_its_blocks_twice_is_rejected() {
        let bytes = sample();
        let twice = [bytes.clone(), bytes[format::HEADER_LEN..].to_vec()].concat();
        let (offset, msg) = structure(&twice);
        assert_eq!(offset, (bytes.len() + 24) as u64, "the second copy's sequence number");
        assert_eq!(msg, format!("t.vtrace: byte {offset}: malformed block 3: a second block number 0 of thread 100 of process 100 (the first is block 0): each block is written once"));
        // one block repeated right after itself
        let b = sample_blocks();
        let (_, msg) = structure(&[header(1), b[0].clone(), b[1].clone(), b[1].clone(), b[2].clone()].concat());
        assert!(msg.contains("malformed block 2: a second block number 0 of thread 101 of process 100 (the first is block 1)"), "{msg}");
    }

    #[test]
    fn a_thread_s_blocks_out_of_order_are_rejected() {
        let b = sample_blocks();
        let (_, msg) = structure(&[header(1), b[2].clone(), b[1].clone(), b[0].clone()].concat());
        assert!(msg.contains("malformed block 2: block number 0 of thread 100 of process 100 after its block number 1 (block 0)"), "{msg}");
    }

    #[test]
    fn an_empty_block_is_rejected() {
        let empty = block(100, 100, BASE, 0, &[]);
        let e = fails(&[header(1), empty.clone()].concat());
        assert_eq!(e.to_string(), "t.vtrace: byte 36: malformed block 0: an empty block: no records (the tracer never writes one)");
        let e = fails(&[sample(), block(100, 100, BASE, 2, &[])].concat());
        assert!(matches!(e.kind, K::Structure { block: 3, .. }), "{e}");
    }

    #[test]
    fn block_flags_must_be_zero() {
        let mut b = block(7, 7, BASE, 0, &[rec(kind::FREE, 0, 1, &[0; 8])]);
        b[32] = 1;
        let mut h = crc32fast::Hasher::new();
        h.update(&b[..36]);
        h.update(&b[40..]);
        let crc = h.finalize();
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(fails(&[header(1), b].concat()).to_string(), "t.vtrace: byte 64: malformed block 0: block flags 0x00000001, expected 0");
    }

    #[test]
    fn process_and_thread_starts_must_open_their_blocks() {
        let free = rec(kind::FREE, 0, 1, &[0; 8]);
        // a PROCESS_START that is not the first record
        let (_, msg) = structure(&[header(1), block(7, 7, BASE, 0, &[free.clone(), process_start(7, 0, b"a")])].concat());
        assert!(msg.contains("a PROCESS_START record as record 1 of block number 0 of thread 7 of process 7"), "{msg}");
        // in a later block
        let two =
            [header(1), block(7, 7, BASE, 0, std::slice::from_ref(&free)), block(7, 7, BASE, 1, &[process_start(7, 0, b"a")])].concat();
        assert!(structure(&two).1.contains("a PROCESS_START record as record 0 of block number 1"));
        // in another thread's block
        assert!(structure(&[header(1), block(7, 8, BASE, 0, &[process_start(7, 0, b"a")])].concat())
            .1
            .contains("of thread 8 of process 7"));
        // twice
        let twice = [header(1), block(7, 7, BASE, 0, &[process_start(7, 0, b"a"), process_start(7, 0, b"a")])].concat();
        assert!(structure(&twice).1.contains("a second PROCESS_START record of process 7 (the first is in block 0)"));
        // a THREAD_START naming another thread, or after other records
        let (_, msg) = structure(&[header(1), block(7, 8, BASE, 0, &[thread_start(1, 9, 7, 1)])].concat());
        assert!(msg.contains("a THREAD_START record of thread 9 in a block of thread 8 of process 7"), "{msg}");
        let (_, msg) = structure(&[header(1), block(7, 8, BASE, 0, &[free.clone(), thread_start(1, 8, 7, 1)])].concat());
        assert!(msg.contains("a THREAD_START record as record 1 of block number 0 of thread 8"), "{msg}");
        let (_, msg) = structure(&[header(1), block(7, 8, BASE, 2, &[thread_start(1, 8, 7, 1)])].concat());
        assert!(msg.contains("as record 0 of block number 2 of thread 8"), "{msg}");
    }

    #[test]
    fn nothing_of_a_thread_follows_its_exit() {
        let exit = rec(kind::THREAD_EXIT, 0, 5, &5u64.to_le_bytes());
        let free = rec(kind::FREE, 0, 6, &[0; 8]);
        let (offset, msg) = structure(&[header(1), block(7, 8, BASE, 0, &[thread_start(1, 8, 7, 1), exit.clone(), free.clone()])].concat());
        assert!(msg.contains("malformed block 0: a FREE record of thread 8 of process 7 after its THREAD_EXIT"), "{msg}");
        assert_eq!(offset, (format::HEADER_LEN + format::BLOCK_HEADER_LEN + 44 + 20) as u64);
        let later = [header(1), block(7, 8, BASE, 0, &[thread_start(1, 8, 7, 1), exit.clone()]), block(7, 8, BASE, 1, &[free])].concat();
        assert!(structure(&later).1.contains("block number 1 of thread 8 of process 7 after the thread's THREAD_EXIT (in block 0)"));
    }

    /// The kernel may give an exited thread's id to a new thread of the same process: its
    /// blocks are numbered from 0 again, and open with its THREAD_START.
    #[test]
    fn a_thread_id_used_again_after_its_thread_exited_is_read() {
        let exit = |t: u64| rec(kind::THREAD_EXIT, 0, t, &5u64.to_le_bytes());
        let free = |t: u64| rec(kind::FREE, 0, t, &[0; 8]);
        let bytes = [
            header(1),
            block(7, 7, BASE, 0, &[process_start(7, 0, b"a"), thread_start(1, 7, 0, 0)]),
            block(7, 8, BASE, 0, &[thread_start(2, 8, 7, 1), free(3)]),
            block(7, 8, BASE, 2, &[free(4), exit(5)]),
            block(7, 8, BASE, 0, &[thread_start(9, 8, 7, 2), exit(10)]),
        ]
        .concat();
        let t = from_bytes(&bytes).expect("valid");
        let th = &t.processes[0].threads[1];
        assert_eq!((th.tid, th.blocks, th.lost_blocks, th.records.len()), (8, 3, 1, 6));
        // ... but not a copy of the earlier thread's first block
        let copy = [bytes.clone(), block(7, 8, BASE, 0, &[thread_start(2, 8, 7, 1), free(3)])].concat();
        assert!(structure(&copy).1.contains("malformed block 4: a second block number 0 of thread 8 of process 7 (the first is block 3)"));
        let early = [
            header(1),
            block(7, 8, BASE, 0, &[thread_start(2, 8, 7, 1), exit(5)]),
            block(7, 8, BASE, 0, &[thread_start(2, 8, 7, 1), exit(5)]),
        ]
        .concat();
        assert_eq!(
            fails(&early).kind,
            K::Structure {
                block: 1,
                what: "a second block number 0 of thread 8 of process 7 (the first is block 0): each block is written once".into()
            }
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_file_name_that_is_not_utf8_is_shown_with_its_bytes_escaped() {
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/nonexistent/t\xffx\xc3.vtrace"));
        let e = match read(path) {
            Err(e) => e,
            Ok(_) => panic!("read a missing file"),
        };
        assert!(e.to_string().starts_with("/nonexistent/t\\xffx\\xc3.vtrace: cannot read: "), "{e}");
        assert_eq!(file_name(Path::new("/tmp/caf\u{e9}.vtrace")), "/tmp/caf\u{e9}.vtrace");
    }

    #[test]
    fn io_error_names_the_file() {
        let e = match read("/nonexistent/dir/x.vtrace") {
            Err(e) => e,
            Ok(_) => panic!("read a missing file"),
        };
        assert!(e.to_string().starts_with("/nonexistent/dir/x.vtrace: cannot read: "), "{e}");
    }

    #[test]
    fn a_successful_call_beyond_the_user_address_space_is_a_format_error() {
        let q = |v: u64| v.to_le_bytes();
        let d = |v: i32| v.to_le_bytes();
        let one = |r: Vec<u8>| {
            let main = [process_start(100, 0, b"./app\0"), thread_start(1, 100, 0, 0), r];
            [header(2), block(100, 100, BASE, 0, &main)].concat()
        };
        let max = format::USER_SPACE_MAX;
        let malloc = |size: u64, ptr: u64| rec(kind::MALLOC, 0, 2, &fields(&[&q(size), &q(ptr)]));
        let calloc = |n: u64, size: u64, ptr: u64| rec(kind::CALLOC, 0, 2, &fields(&[&q(n), &q(size), &q(ptr)]));
        let mmap = |addr: u64, len: u64| rec(kind::MMAP, 0, 2, &fields(&[&q(3), &q(addr), &q(len), &d(3), &d(0x22), &d(-1)]));
        let madvise = |len: u64, ret: i32| rec(kind::MADVISE, 0, 2, &fields(&[&q(3), &q(0x5000), &q(len), &d(4), &d(ret)]));
        let munmap = |len: u64| rec(kind::MUNMAP, 0, 2, &fields(&[&q(3), &q(0x5000), &q(len), &d(0)]));
        // The largest possible ones, 1 TiB, and failed calls of any size are read.
        for r in
            [malloc(max, 0x5000), malloc(1 << 40, 0x5000), malloc(u64::MAX, 0), calloc(u64::MAX, 2, 0), calloc(1 << 20, 1 << 27, 0x5000)]
                .into_iter()
                .chain([mmap(u64::MAX, u64::MAX), mmap(0x7f00_0000_0000, max), madvise(64 << 40, 0), madvise(u64::MAX, -22)])
        {
            from_bytes(&one(r)).expect("a size a program could have had");
        }
        for (r, field) in [
            (malloc(u64::MAX, 0x5000), "size 18446744073709551615 bytes"),
            (malloc(max + 1, 0x5000), "size 140737488355329 bytes"),
            (calloc(531, 0x7f00_0000_0000, 0x5000), "nmemb × size 74147765642330112 bytes"),
            (calloc(1 << 32, 1 << 32, 0x5000), "nmemb 4294967296 × size 4294967296 overflows 64 bits"),
            (mmap(0x7f00_0000_0000, max + 4096), "len 140737488359424 bytes"),
            (madvise(1 << 48, 0), "len 281474976710656 bytes"),
            (munmap(u64::MAX), "len 18446744073709551615 bytes"),
        ] {
            let len = r.len();
            let bytes = one(r);
            let e = fails(&bytes);
            assert_eq!(e.offset, (bytes.len() - len) as u64, "the record's own offset: {e}");
            assert!(matches!(e.kind, K::Field { block: 0, record: 2, .. }), "{e}");
            let shown = e.to_string();
            assert!(shown.starts_with("t.vtrace: byte "), "{shown}");
            assert!(shown.contains("record 2 of block 0: "), "{shown}");
            assert!(shown.contains(field), "{shown}");
            assert!(shown.contains("expected "), "{shown}");
            assert!(!shown.contains('\n'), "{shown}");
        }
    }

    #[test]
    fn every_kind_decodes() {
        for info in format::KINDS {
            let body = vec![0u8; info.len - format::RECORD_HEADER_LEN];
            let r = rec(info.code, 0, 1, &body);
            let d = decode(info, &r).expect("decodes");
            assert_eq!(d.event.kind_name(), info.name);
            assert_eq!(d.cpu.is_some(), info.cpu);
        }
    }
}
