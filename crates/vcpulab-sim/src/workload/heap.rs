//! A glibc-like per-thread heap (a non-main arena), enough to make heap churn cause TLB
//! shootdowns as TPDS found (TPDS §6; glibc malloc/arena.c `shrink_heap`).
//!
//! - Chunks carry glibc's header word: a request of `n` bytes takes `request2size(n)` (n + 8
//!   rounded up to 16, at least 32).
//! - A chunk at or above `mmap_threshold` is mapped on its own, page-rounded with its header;
//!   freeing it unmaps it (a shootdown) and, with the dynamic threshold, raises
//!   `mmap_threshold` to that chunk size and `trim_threshold` to twice it (glibc malloc.c
//!   `__libc_free` → `munmap_chunk`, `DEFAULT_MMAP_THRESHOLD_MAX` = 32 MiB on 64-bit), so the
//!   next request of the same size comes from the heap. The thresholds are the **process's**,
//!   not the arena's: glibc keeps them in `mp_`, one `struct malloc_par` per process, which
//!   every arena reads ([`MallocPar`]). One thread's free of a mapped buffer therefore stops
//!   the other threads' arenas trimming below twice its size.
//! - A thread's first `malloc` creates its arena (`_int_new_arena` → `new_heap`): the first heap
//!   is that request plus the arena's header plus `top_pad`, made read-write (`mprotect`).
//!   Smaller chunks come from the top of the heap; growing past the mapped part grows it by
//!   just the shortfall (`sysmalloc` → `grow_heap(MINSIZE + nb − old_size)`, page-rounded;
//!   `mprotect` adding permissions: no shootdown), and touching pages not resident faults them in.
//! - `free` of the top chunk merges it into the top; when the top's free space reaches
//!   `trim_threshold` the heap shrinks by `ALIGN_DOWN(top_free − MINSIZE − 1 − top_pad, page)`
//!   with `madvise(MADV_DONTNEED)` (glibc malloc/arena.c `heap_trim` / `shrink_heap`): a
//!   shootdown, and the next growth faults those pages in again. glibc before 2.22 ignores
//!   `trim_threshold` for these per-thread heaps ([`HeapParams::trim_always`]): every free
//!   that leaves a page free above `top_pad` shrinks the heap.
//! - Shrinking with `madvise` keeps the pages' permissions (`shrink_heap` leaves
//!   `mprotect_size`), so growing back into them makes no system call (`grow_heap` calls
//!   `mprotect` only beyond `mprotect_size`): only the page faults.
//! - A free trims only when the chunk it leaves (merged with its free neighbours, the top
//!   included) is at least `FASTBIN_CONSOLIDATION_THRESHOLD` = 64 KiB (malloc.c `_int_free`:
//!   `heap_trim` is called only then).
//! - Arenas are handed out as glibc's malloc/arena.c does ([`ProcessHeap`]): the main thread
//!   is on the main arena; another thread's first `malloc` takes the arena an exited thread
//!   left (`get_free_list`), else creates one while the process has fewer than the limit
//!   (`arena_get2`: 8 × CPUs, at least 9, the main one included), else shares one in
//!   `reused_arena`'s round-robin order. Each thread frees its own chunks.
//! - With glibc's per-thread cache (2.26 and later, [`HeapParams::tcache`]) a thread's first
//!   `malloc` allocates the cache first (`tcache_init`), so that request creates the arena:
//!   the first heap is sized for it, and its chunk stays at the heap's bottom.
//! - Not modelled: the main arena's `sbrk` heap (it grows and trims as a non-main arena does
//!   here; glibc grows it by `top_pad` more each time and trims it by shrinking `brk`, which
//!   flushes the TLB as `madvise` does), the tcache's and fastbins' holding of small chunks
//!   (small frees never reach the top, and trim nothing either way), and `reused_arena`
//!   passing over an arena another thread holds locked at that instant.
//!
//! Profiles free LIFO (the most recent allocation first), the pattern that trims. A replayed
//! trace frees any live chunk by its id, its own or another thread's ([`Arena::free_chunk`]):
//! a chunk below the top becomes a hole that merges with the holes beside it (`_int_free`'s
//! backward and forward consolidation), that a later `malloc` of no more than its size reuses,
//! the smallest that fits, split when what is left is a chunk (glibc's bins: best fit, the
//! remainder kept free), and that merges into the top once every chunk above it is free.
//! Without the merging and splitting a program that frees buffers of varying sizes below the
//! top (VIPS' tile buffers) finds no hole large enough, grows the top, and trims it again:
//! the replay of parsec.vips at 1 thread made 533 trims where glibc made 3. Not modelled: the
//! tcache and fastbins holding small freed chunks unmerged.

/// Page size (bytes).
pub const PAGE: u64 = 4096;
/// glibc's `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit.
pub const MMAP_THRESHOLD_MAX: u64 = 32 << 20;

/// Allocator parameters (glibc tunables `glibc.malloc.trim_threshold`, `top_pad`,
/// `mmap_threshold`; defaults 128 KiB each, dynamic thresholds unless one is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapParams {
    /// `M_TRIM_THRESHOLD`.
    pub trim_threshold: u64,
    /// `M_TOP_PAD`.
    pub top_pad: u64,
    /// `M_MMAP_THRESHOLD`.
    pub mmap_threshold: u64,
    /// Dynamic mmap/trim thresholds (off once any of the three is set explicitly).
    pub dynamic: bool,
    /// Per-thread heaps shrink whenever at least a page is free above `top_pad`, whatever
    /// `trim_threshold` says: glibc before 2.22 (malloc/arena.c `heap_trim`: `extra = (top_size
    /// - pad - MINSIZE - 1) & ~(pagesz - 1)`, shrink if `extra >= pagesz`; glibc commit
    /// c26efef979, BZ #17195, first in 2.22, applies the threshold). Set from the C library
    /// of the kernel the thread runs on (`arena_trim = "always"`, docs/spec.md).
    pub trim_always: bool,
    /// The C library's per-thread cache (`tcache_perthread_struct` bytes; 0: none): a thread's
    /// first `malloc` requests it first, which creates its arena, and its chunk stays at the
    /// bottom of the heap. Set from `[host]` / `[guest]` `tcache_bytes` of the kernel the
    /// thread runs on (the default, 0, is the bare arena of the unit tests).
    pub tcache: u64,
    /// Bytes of the heap already made read-write when the thread starts (`h->mprotect_size`,
    /// page-rounded): growing up to it makes no `mprotect`. 0 is a fresh arena. A profile that
    /// starts in its steady state sets what its first allocations left (not a glibc tunable:
    /// it does not turn the dynamic thresholds off).
    pub mprotect_size: u64,
}

impl Default for HeapParams {
    fn default() -> Self {
        HeapParams {
            trim_threshold: 128 << 10,
            top_pad: 128 << 10,
            mmap_threshold: 128 << 10,
            dynamic: true,
            trim_always: false,
            tcache: 0,
            mprotect_size: 0,
        }
    }
}

/// The dynamic thresholds of a process (glibc malloc/malloc.c `mp_`, a single `struct
/// malloc_par` shared by all of the process's arenas): `malloc` of an arena compares with
/// `mmap_threshold`, its trims with `trim_threshold`, and `free` of any thread's mapped chunk
/// raises both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MallocPar {
    /// `mp_.mmap_threshold`.
    pub mmap_threshold: u64,
    /// `mp_.trim_threshold`.
    pub trim_threshold: u64,
    /// Whether the thresholds still adapt (`!mp_.no_dyn_threshold`).
    pub dynamic: bool,
}

impl MallocPar {
    /// A process's thresholds at start.
    pub fn new(p: &HeapParams) -> MallocPar {
        MallocPar { mmap_threshold: p.mmap_threshold, trim_threshold: p.trim_threshold, dynamic: p.dynamic }
    }

    /// The chunk `malloc(size)` maps on its own, if it does (glibc malloc.c `sysmalloc`): the
    /// padded request `nb = request2size(size)` (size + SIZE_SZ rounded up to 16 bytes, at least
    /// MINSIZE = 32) at or above the mmap threshold gets a mapping of `ALIGN_UP(nb + SIZE_SZ,
    /// page)` bytes. So after a mapped chunk's free has raised the threshold to that chunk's
    /// size, the next request of the same size is below it and comes from the heap.
    pub fn mapped_chunk(&self, size: u64) -> Option<u64> {
        let nb = request2size(size);
        (nb >= self.mmap_threshold).then(|| (nb + SIZE_SZ).div_ceil(PAGE) * PAGE)
    }

    /// `free` of a mapped chunk of `size` bytes (glibc malloc.c `__libc_free`): a chunk above
    /// the current mmap threshold and at most `DEFAULT_MMAP_THRESHOLD_MAX` raises it to its
    /// size and the trim threshold to twice that.
    pub fn unmapped(&mut self, size: u64) {
        if self.dynamic && size > self.mmap_threshold && size <= MMAP_THRESHOLD_MAX {
            self.mmap_threshold = size;
            self.trim_threshold = 2 * size;
        }
    }
}

impl Default for MallocPar {
    fn default() -> Self {
        MallocPar::new(&HeapParams::default())
    }
}

/// A memory-management consequence of a heap operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmOp {
    /// `mmap` of a large chunk (pages).
    Mmap(u64),
    /// Heap growth (`mprotect` adding permissions; pages).
    Grow(u64),
    /// Page faults on non-resident pages (count).
    Faults(u64),
    /// `munmap` of a large chunk: its pages (the range shot down), and those of them resident
    /// (released: a program may touch less of a buffer than it allocated).
    Munmap(u64, u64),
    /// `madvise(MADV_DONTNEED)` trimming the heap (pages): shootdown.
    Trim(u64),
    /// `mprotect` removing permissions (pages): shootdown, the pages stay.
    Protect(u64),
}

/// An arena: one thread's, or shared by several beyond glibc's arena limit ([`ProcessHeap`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Arena {
    params: HeapParams,
    /// Chunks, most recent last. A chunk that is not live is a hole (only heap chunks become
    /// holes; an mmapped chunk is unmapped when freed).
    chunks: Vec<Chunk>,
    /// Holes among `chunks`.
    holes: usize,
    /// Bytes in use from the heap base.
    top: u64,
    /// Bytes of the heap in use by the arena (`h->size`).
    mapped: u64,
    /// Bytes of the heap made read-write so far (`h->mprotect_size`): growing below it
    /// needs no system call.
    prot: u64,
    /// Bytes of the heap with resident pages.
    resident: u64,
}

/// Which allocation a chunk is: the `seq`-th `malloc` (0-based, in program order) of the thread
/// `thread`. Any thread may free it; it goes back to the arena it came from (malloc.c
/// `__libc_free` → `arena_for_chunk`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkId {
    /// The allocating thread.
    pub thread: u32,
    /// Its allocation count when it made this one.
    pub seq: u32,
}

/// A chunk of an arena.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Chunk {
    bytes: u64,
    mmapped: bool,
    live: bool,
    id: ChunkId,
    /// A mapped chunk's pages touched (faulted in), all of them unless [`Arena::touched`] says
    /// fewer.
    touched: u64,
}

/// `SIZE_SZ` on 64-bit: the chunk header word.
const SIZE_SZ: u64 = 8;
/// `MINSIZE` on 64-bit: the smallest chunk.
const MINSIZE: u64 = 32;
/// Bytes at the start of a non-main arena's first heap taken by its `heap_info` and
/// `malloc_state` (glibc 2.19–2.36 on 64-bit: 32 + 2,200, aligned to 16).
const ARENA_HEADER: u64 = 2_240;

/// glibc's HEAP_MIN_SIZE and HEAP_MAX_SIZE on 64-bit (malloc/arena.c; the maximum is 2 ×
/// DEFAULT_MMAP_THRESHOLD_MAX).
const HEAP_MIN_SIZE: u64 = 32 << 10;
const HEAP_MAX_SIZE: u64 = 64 << 20;
/// glibc's `FASTBIN_CONSOLIDATION_THRESHOLD` (malloc.c): a free trims only when the chunk it
/// leaves is at least this large.
const FASTBIN_CONSOLIDATION_THRESHOLD: u64 = 64 << 10;

/// glibc's `request2size`: the chunk a request of `n` bytes takes (the header word added,
/// rounded up to MALLOC_ALIGNMENT = 16, at least MINSIZE).
pub fn request2size(n: u64) -> u64 {
    (n.saturating_add(SIZE_SZ + 15) & !15).max(MINSIZE)
}

fn pages_up(b: u64) -> u64 {
    b.div_ceil(PAGE)
}

impl Arena {
    /// A thread's arena, created at its first `malloc` ([`Arena::malloc`]).
    pub fn new(params: HeapParams) -> Arena {
        Arena { params, ..Default::default() }
    }

    /// The thread's first `malloc(size)` creates its arena (glibc malloc/arena.c `arena_get2` →
    /// `_int_new_arena(size)` → `new_heap(size + header, top_pad)`; with a tcache, `size` is the
    /// cache's, allocated first): the first heap is the request plus the arena's header plus
    /// `top_pad`, page-rounded (at least HEAP_MIN_SIZE =
    /// 32 KiB, at most HEAP_MAX_SIZE = 64 MiB), made read-write with one `mprotect`, and the
    /// header's page is resident. An arena that starts in its steady state (`mprotect_size` >
    /// 0) was created, grown and trimmed before the run: no `mprotect`, `mprotect_size` bytes
    /// read-write, and the heap as the last trim left it (`heap_trim` keeps `top_pad` +
    /// MINSIZE + 1 above the top, page-rounded), its pages resident.
    fn create(&mut self, size: u64, out: &mut Vec<MmOp>) {
        // glibc >= 2.26: the thread's tcache is allocated first (`tcache_init`), and that request
        // creates the arena; its chunk stays at the bottom of the heap.
        let tcache = if self.params.tcache > 0 { request2size(self.params.tcache) } else { 0 };
        let size = if tcache > 0 { self.params.tcache } else { size };
        self.top = ARENA_HEADER + tcache;
        if self.params.mprotect_size > 0 {
            self.mapped = (self.top + self.params.top_pad + MINSIZE + 1).min(HEAP_MAX_SIZE).div_ceil(PAGE) * PAGE;
            self.resident = self.mapped;
            self.prot = self.mapped.max(pages_up(self.params.mprotect_size) * PAGE);
            return;
        }
        let first = (size.saturating_add(ARENA_HEADER + self.params.top_pad)).clamp(HEAP_MIN_SIZE, HEAP_MAX_SIZE).div_ceil(PAGE) * PAGE;
        (self.mapped, self.prot, self.resident) = (first, first, pages_up(self.top) * PAGE);
        out.push(MmOp::Grow(first / PAGE));
    }

    /// `malloc(size)`, the allocation `id`, under the process's thresholds `par`; appends its
    /// consequences to `out`.
    pub fn malloc(&mut self, par: &MallocPar, id: ChunkId, size: u64, out: &mut Vec<MmOp>) {
        let size = size.max(16);
        if self.mapped == 0 {
            self.create(size, out);
        }
        if let Some(chunk) = par.mapped_chunk(size) {
            self.chunks.push(Chunk { bytes: chunk, mmapped: true, live: true, id, touched: pages_up(size) });
            out.push(MmOp::Mmap(chunk / PAGE));
            out.push(MmOp::Faults(pages_up(size)));
            return;
        }
        let size = request2size(size);
        if self.holes > 0 && self.reuse_hole(id, size) {
            return;
        }
        self.chunks.push(Chunk { bytes: size, mmapped: false, live: true, id, touched: 0 });
        self.top += size;
        // The top chunk must keep MINSIZE after the split; a non-main arena grows its heap by
        // just what is missing, page-rounded (malloc.c `sysmalloc`: `grow_heap(h, MINSIZE + nb -
        // old_size)`; `top_pad` is added only when a heap is created and kept by trims).
        if self.top + MINSIZE > self.mapped {
            self.mapped = (self.top + MINSIZE).div_ceil(PAGE) * PAGE;
            if self.mapped > self.prot {
                out.push(MmOp::Grow((self.mapped - self.prot) / PAGE));
                self.prot = self.mapped;
            }
        }
        let need = pages_up(self.top) * PAGE;
        if need > self.resident {
            out.push(MmOp::Faults((need - self.resident) / PAGE));
            self.resident = need;
        }
    }

    /// A request of `size` bytes (a chunk size) served from a free chunk below the top, as
    /// glibc's `_int_malloc` does past the tcache: the smallest free chunk that fits (best fit,
    /// the lowest-addressed of equals: an exact fit from the unsorted bin, else the smallest
    /// chunk of the request's bin or of the next non-empty bin), split when what is left is a
    /// chunk (`remainder_size >= MINSIZE`: the remainder stays free, in the unsorted bin), else
    /// taken whole. False if no free chunk fits (the request comes from the top).
    fn reuse_hole(&mut self, id: ChunkId, size: u64) -> bool {
        let mut best: Option<(usize, u64)> = None;
        for (i, c) in self.chunks.iter().enumerate() {
            if !c.live && c.bytes >= size && best.is_none_or(|(_, b)| c.bytes < b) {
                best = Some((i, c.bytes));
                if c.bytes == size {
                    break;
                }
            }
        }
        let Some((i, bytes)) = best else { return false };
        let c = &mut self.chunks[i];
        (c.live, c.id) = (true, id);
        self.holes -= 1;
        if bytes - size >= MINSIZE {
            c.bytes = size;
            self.chunks.insert(i + 1, Chunk { bytes: bytes - size, mmapped: false, live: false, id: ChunkId::default(), touched: 0 });
            self.holes += 1;
        }
        true
    }

    /// The index of the heap chunk (not a mapped one) before / after `i`, if any.
    fn heap_neighbour(&self, i: usize, after: bool) -> Option<usize> {
        if after {
            (i + 1..self.chunks.len()).find(|&j| !self.chunks[j].mmapped)
        } else {
            (0..i).rev().find(|&j| !self.chunks[j].mmapped)
        }
    }

    /// The mapped chunk `id` had only `pages` of its pages touched (a replayed thread faults no
    /// more than the kernel counted for it): its `munmap` releases only those.
    pub fn touched(&mut self, id: ChunkId, pages: u64) {
        if let Some(c) = self.chunks.iter_mut().rev().find(|c| c.live && c.mmapped && c.id == id) {
            c.touched = c.touched.min(pages);
        }
    }

    /// `free` of thread `owner`'s `n` most recent live allocations (fewer if fewer are live).
    pub fn free(&mut self, par: &mut MallocPar, owner: u32, n: u64, out: &mut Vec<MmOp>) {
        for _ in 0..n {
            if !self.free_newest(par, owner, out) {
                return;
            }
        }
    }

    /// `free` of thread `owner`'s most recent live allocation; false if it has none. A mapped
    /// chunk's free raises the process's thresholds `par`; a heap chunk's trim compares with
    /// them.
    fn free_newest(&mut self, par: &mut MallocPar, owner: u32, out: &mut Vec<MmOp>) -> bool {
        let Some(i) = self.chunks.iter().rposition(|c| c.live && c.id.thread == owner) else { return false };
        self.free_at(i, par, out);
        true
    }

    /// `free` of the allocation `id`, whichever thread frees it; false if it is not a live
    /// chunk of this arena.
    pub fn free_chunk(&mut self, par: &mut MallocPar, id: ChunkId, out: &mut Vec<MmOp>) -> bool {
        let Some(i) = self.chunks.iter().rposition(|c| c.live && c.id == id) else { return false };
        self.free_at(i, par, out);
        true
    }

    /// `free` of the live chunk at `i`.
    fn free_at(&mut self, i: usize, par: &mut MallocPar, out: &mut Vec<MmOp>) {
        let Chunk { bytes: size, mmapped, touched, .. } = self.chunks[i];
        if mmapped {
            self.chunks.remove(i);
            out.push(MmOp::Munmap(pages_up(size), touched));
            par.unmapped(size);
            return;
        }
        self.chunks[i].live = false;
        self.holes += 1;
        // A freed chunk merges with the free chunks beside it (malloc.c `_int_free`: consolidate
        // backward, then forward), so neighbouring holes make one free chunk that a larger
        // request can reuse. (Small chunks that glibc's tcache or fastbins would hold, unmerged,
        // merge here too.)
        if let Some(j) = self.heap_neighbour(i, true).filter(|&j| !self.chunks[j].live) {
            self.chunks[i].bytes += self.chunks.remove(j).bytes;
            self.holes -= 1;
        }
        if let Some(j) = self.heap_neighbour(i, false).filter(|&j| !self.chunks[j].live) {
            self.chunks[j].bytes += self.chunks.remove(i).bytes;
            self.holes -= 1;
        }
        // Free chunks at the top merge into it (mmapped chunks are not in the heap).
        let mut merged = false;
        while let Some(j) = self.chunks.iter().rposition(|c| !c.mmapped) {
            let Chunk { bytes: size, live, .. } = self.chunks[j];
            if live {
                break;
            }
            self.chunks.remove(j);
            self.holes -= 1;
            self.top -= size;
            merged = true;
        }
        // `_int_free` calls `heap_trim` only when the merged chunk, here the new top, is at
        // least FASTBIN_CONSOLIDATION_THRESHOLD. (It calls it too after a free below the top
        // that merges 64 KiB of holes; not modelled: that finds the top the last check left,
        // which only a trim threshold below 64 KiB would trim then.)
        if merged && self.mapped - self.top >= FASTBIN_CONSOLIDATION_THRESHOLD {
            let top_free = self.mapped - self.top;
            // heap_trim: `top_area = top_size - MINSIZE - 1`, released above `pad` in whole pages;
            // from glibc 2.22 only once the top reaches the trim threshold.
            let extra = if self.params.trim_always || top_free >= par.trim_threshold {
                top_free.saturating_sub(self.params.top_pad + MINSIZE + 1) / PAGE * PAGE
            } else {
                0
            };
            if extra > 0 {
                self.mapped -= extra;
                self.resident = self.resident.min(self.mapped);
                out.push(MmOp::Trim(extra / PAGE));
            }
        }
    }
}

/// glibc's arena limit (malloc/arena.c `arena_get2`): a thread's first `malloc` creates an
/// arena while the process has fewer than `narenas_limit` = 8 × CPUs on 64-bit
/// (`NARENAS_FROM_NCORES`), the main arena included; the limit is computed only once more than
/// `arena_test` = 8 arenas exist, so there are at least 9.
pub fn arena_limit(ncpus: u32) -> usize {
    (8 * ncpus as usize).max(9)
}

/// A process's heap: its malloc thresholds (`mp_`) and its arenas as glibc hands them out
/// (malloc/arena.c, glibc 2.26–2.40).
/// - The main thread is on the main arena (index 0) from its start (`ptmalloc_init`).
/// - Another thread has no arena until its first `malloc` (`arena_get` → `arena_get2`): it
///   takes the arena most recently left by an exiting thread (`get_free_list`; the free list
///   is LIFO), else creates one (`_int_new_arena`) while fewer than [`arena_limit`] exist,
///   else shares one (`reused_arena`): from `next_to_use` (the main arena at first), the
///   ring that `_int_new_arena` links as main → newest → … → oldest → main, and `next_to_use`
///   moves to the one after it.
/// - A thread's exit detaches it (`arena_thread_freeres`); an arena no thread is attached to
///   goes on the free list, with its chunks and its heap as they are.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessHeap {
    /// The process's thresholds (`mp_`).
    pub par: MallocPar,
    params: HeapParams,
    /// Its arenas, 0 the main one, the others in creation order.
    arenas: Vec<Arena>,
    /// Threads attached to each (`attached_threads`).
    attached: Vec<u32>,
    /// Arenas no thread is attached to, the most recently left last.
    free_list: Vec<u32>,
    /// `reused_arena`'s `next_to_use`.
    next_to_use: u32,
    limit: usize,
    /// First `malloc`s given an exited thread's arena from the free list.
    pub reused: u32,
    /// First `malloc`s given an arena other threads were attached to (`reused_arena`).
    pub shared: u32,
}

impl ProcessHeap {
    /// A process on `ncpus` CPUs whose main thread (modelled or not) is on the main arena.
    pub fn new(params: HeapParams, ncpus: u32) -> ProcessHeap {
        ProcessHeap {
            par: MallocPar::new(&params),
            params,
            arenas: vec![Arena::new(params)],
            attached: vec![1],
            free_list: Vec::new(),
            next_to_use: 0,
            limit: arena_limit(ncpus),
            reused: 0,
            shared: 0,
        }
    }

    /// The main arena, for the process's main thread.
    pub const MAIN: u32 = 0;

    /// The arena for a thread's first `malloc` (`arena_get2`), attached to it.
    pub fn attach(&mut self) -> u32 {
        if let Some(a) = self.free_list.pop() {
            self.reused += 1;
            self.attached[a as usize] = 1;
            return a;
        }
        if self.arenas.len() < self.limit {
            self.arenas.push(Arena::new(self.params));
            self.attached.push(1);
            return (self.arenas.len() - 1) as u32;
        }
        let a = self.next_to_use;
        // The ring: main → newest → … → oldest → main.
        self.next_to_use = if a == 0 { (self.arenas.len() - 1) as u32 } else { a - 1 };
        self.attached[a as usize] += 1;
        self.shared += 1;
        a
    }

    /// Arena `a` for a thread's first `malloc`, the one glibc gave it in a traced run (numbered
    /// in the order the run's threads first used them, 0 the main one): made if it is new
    /// (whatever the limit: the run had it), taken off the free list if an exited thread left
    /// it, shared if other threads are attached to it.
    pub fn attach_to(&mut self, a: u32) -> u32 {
        let i = a as usize;
        if i >= self.arenas.len() {
            self.arenas.resize_with(i + 1, || Arena::new(self.params));
            self.attached.resize(i + 1, 0);
        } else if self.attached[i] > 0 {
            self.shared += 1;
        } else if let Some(k) = self.free_list.iter().position(|&f| f == a) {
            self.free_list.remove(k);
            self.reused += 1;
        }
        self.attached[i] += 1;
        a
    }

    /// [`Self::attach_to`] the arena a thread had in a traced run, else [`Self::attach`].
    pub fn attach_as(&mut self, traced: Option<u32>) -> u32 {
        match traced {
            Some(a) => self.attach_to(a),
            None => self.attach(),
        }
    }

    /// A thread attached to arena `a` exits (`arena_thread_freeres`).
    pub fn detach(&mut self, a: u32) {
        let n = &mut self.attached[a as usize];
        *n -= 1;
        if *n == 0 {
            self.free_list.push(a);
        }
    }

    /// Arena `a` and the process's thresholds.
    pub fn get(&mut self, a: u32) -> (&mut Arena, &mut MallocPar) {
        (&mut self.arenas[a as usize], &mut self.par)
    }

    /// The arenas the process has made.
    pub fn arenas(&self) -> usize {
        self.arenas.len()
    }
}

impl Default for ProcessHeap {
    fn default() -> Self {
        ProcessHeap::new(HeapParams::default(), 1)
    }
}

/// Parses a byte size like `64KiB`, `1MiB`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        u => return Err(format!("unknown size unit '{u}' in '{s}' (use B, KiB, MiB or GiB)")),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("expected a size like '64KiB' (got '{s}')"))?;
    if !v.is_finite() || v < 0.0 || v * scale as f64 > 1e15 {
        return Err(format!("expected a non-negative size below 1 PB (got '{s}')"));
    }
    Ok((v * scale as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `[bytes(200_000) for _ in range(4)]` loop on a thread (four 200,033-byte
    /// `calloc`s freed newest first), against glibc 2.36 measured here: a C program doing
    /// exactly that for 300 rounds on one thread made 599 `madvise` calls (strace -c), two
    /// trims per round after the first (whose chunks are mapped and raise the thresholds to
    /// 200,704 / 401,408) and its stack's release. Whether the second free of a round trims
    /// turns on a few hundred bytes at the top: with the 656-byte tcache chunk at the heap's
    /// bottom and the heap grown from its small first size page by page, 3,824 bytes are left
    /// above the four chunks, and two of them free make 403,920 bytes, past the threshold;
    /// an arena created for the first 200 KB request leaves 384 bytes (400,480: no trim), so
    /// without the cache the model trimmed once per round.
    #[test]
    fn a_tcache_created_arena_trims_twice_per_round_as_glibc_does() {
        let rounds = |tcache: u64| {
            let mut a = Arena::new(HeapParams { tcache, ..HeapParams::default() });
            let mut par = MallocPar::default();
            let mut ops = Vec::new();
            let mut seq = 0;
            for _ in 0..300 {
                for _ in 0..4 {
                    a.malloc(&par, ChunkId { thread: 0, seq }, 200_033, &mut ops);
                    seq += 1;
                }
                a.free(&mut par, 0, 4, &mut ops);
            }
            assert_eq!(par.trim_threshold, 2 * 200_704);
            ops.iter().filter(|o| matches!(o, MmOp::Trim(_))).count()
        };
        assert_eq!(rounds(640), 2 * 299, "glibc 2.36 with its tcache");
        assert_eq!(rounds(0), 299, "an arena sized for the first request");
    }

    /// `sort` mallocs a buffer sized from physical memory and touches a sliver of it: the
    /// replay faults only what the kernel counted, and the `munmap` then releases only those
    /// pages (it shoots down the whole range).
    #[test]
    fn a_mapped_chunk_releases_only_the_pages_it_touched() {
        let mut a = Arena::new(HeapParams::default());
        let mut par = MallocPar::default();
        let mut ops = Vec::new();
        let id = ChunkId { thread: 0, seq: 0 };
        a.malloc(&par, id, 2 << 30, &mut ops);
        assert!(ops.contains(&MmOp::Faults(1 << 19)), "{ops:?}");
        a.touched(id, 5_000);
        a.touched(id, 9_000);
        ops.clear();
        a.free(&mut par, 0, 1, &mut ops);
        assert_eq!(ops, vec![MmOp::Munmap((1 << 19) + 1, 5_000)]);
    }

    #[test]
    fn churn_at_the_top_trims_and_refaults() {
        let mut a = Arena::new(HeapParams::default());
        let mut par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        for _ in 0..4 {
            a.malloc(&par, ChunkId::default(), 64 << 10, &mut ops);
        }
        // The first malloc creates the arena: its first heap is the 64 KiB request + the
        // 2,240-byte header + top_pad, page-rounded (49 pages, one mprotect). Three 64 KiB
        // chunks (65,552 bytes each with their header word) fit; the fourth grows the heap by
        // what is missing, page-rounded: 16 pages.
        let f = MmOp::Faults(16);
        assert_eq!(ops, vec![MmOp::Grow(49), f, f, f, MmOp::Grow(16), f]);
        ops.clear();
        a.free(&mut par, 0, 4, &mut ops);
        // 65 pages mapped. The first free leaves 67,344 bytes free at the top (below the
        // 128 KiB trim threshold); the second 132,896, of which nothing is a whole page above
        // top_pad + MINSIZE + 1; the third and fourth release 16 pages each, down to top_pad.
        assert_eq!(ops, vec![MmOp::Trim(16); 2], "{ops:?}");
        ops.clear();
        for _ in 0..3 {
            a.malloc(&par, ChunkId::default(), 64 << 10, &mut ops);
        }
        assert!(ops.iter().any(|o| matches!(o, MmOp::Faults(_))), "trimmed pages fault again: {ops:?}");
    }

    #[test]
    fn old_glibc_trims_a_thread_heap_on_every_large_free_and_regrows_without_mprotect() {
        // ebizzy's record loop: malloc 512 KiB, touch it, free it (glibc 2.19).
        let params = HeapParams {
            trim_threshold: 1032 << 10,
            mmap_threshold: 516 << 10,
            dynamic: false,
            trim_always: true,
            ..HeapParams::default()
        };
        let mut a = Arena::new(params);
        let mut par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        a.malloc(&par, ChunkId::default(), 512 << 10, &mut ops);
        // The arena's first heap: 512 KiB + header + top_pad = 161 pages read-write; the
        // 524,304-byte chunk fits, and the 128 pages beyond the header's are touched.
        assert_eq!(ops, vec![MmOp::Grow(161), MmOp::Faults(128)]);
        for trimmed in [128, 96, 96] {
            ops.clear();
            a.free(&mut par, 0, 1, &mut ops);
            // 657,216 bytes free at the top the first time (the first heap's 161 pages), then
            // 526,144 (129 pages regrown): less 128 KiB + 33, rounded down to pages.
            assert_eq!(ops, vec![MmOp::Trim(trimmed)], "trimmed below the 1 MiB threshold: {ops:?}");
            ops.clear();
            a.malloc(&par, ChunkId::default(), 512 << 10, &mut ops);
            assert_eq!(ops, vec![MmOp::Faults(96)], "regrown within mprotect_size: faults only ({ops:?})");
        }
        // glibc 2.22 and later: below the threshold nothing is trimmed.
        let mut b = Arena::new(HeapParams { trim_always: false, ..params });
        let mut par = MallocPar::new(&b.params);
        b.malloc(&par, ChunkId::default(), 512 << 10, &mut ops);
        ops.clear();
        b.free(&mut par, 0, 1, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
    }

    #[test]
    fn a_heap_started_in_its_steady_state_grows_without_mprotect() {
        // ebizzy after its first record: 512 KiB + top_pad already read-write.
        let params = HeapParams { mmap_threshold: 516 << 10, dynamic: false, mprotect_size: 640 << 10, ..HeapParams::default() };
        let mut a = Arena::new(params);
        let par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        // The heap as the previous record's trim left it: 33 pages, resident; the record
        // grows it to 129 within the 160 pages already read-write, and faults 96.
        a.malloc(&par, ChunkId::default(), 512 << 10, &mut ops);
        assert_eq!(ops, vec![MmOp::Faults(96)], "within mprotect_size: faults only");
        // Beyond it, only the difference is made read-write.
        ops.clear();
        a.malloc(&par, ChunkId::default(), 200 << 10, &mut ops);
        // 204,816 bytes more: the heap end moves from 129 to 179 pages, 19 of them beyond the
        // 160 already read-write.
        assert_eq!(ops, vec![MmOp::Grow(19), MmOp::Faults(50)], "{ops:?}");
    }

    #[test]
    fn a_large_trim_threshold_stops_trimming() {
        let mut a = Arena::new(HeapParams { trim_threshold: 64 << 20, dynamic: false, ..HeapParams::default() });
        let mut par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        for _ in 0..4 {
            a.malloc(&par, ChunkId::default(), 64 << 10, &mut ops);
        }
        ops.clear();
        a.free(&mut par, 0, 4, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
    }

    #[test]
    fn mmapped_chunks_unmap_and_raise_the_threshold() {
        let mut a = Arena::new(HeapParams::default());
        let mut par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        a.malloc(&par, ChunkId::default(), 1 << 20, &mut ops);
        // The arena is created for the request (1 MiB + header + top_pad: 289 pages), which
        // is then mapped on its own: 1 MiB + 16 bytes of header, page-rounded.
        assert_eq!(ops[..2], [MmOp::Grow(289), MmOp::Mmap(257)]);
        a.free(&mut par, 0, 1, &mut ops);
        assert!(ops.contains(&MmOp::Munmap(257, 256)));
        assert_eq!(par.mmap_threshold, (1 << 20) + PAGE);
        assert_eq!(par.trim_threshold, 2 * ((1 << 20) + PAGE));
        // The same request again is below the raised threshold: it comes from the heap, which
        // was made large enough for it.
        ops.clear();
        a.malloc(&par, ChunkId::default(), 1 << 20, &mut ops);
        assert_eq!(ops, vec![MmOp::Faults(256)]);
        assert_eq!(par.mapped_chunk(1 << 20), None);
        assert_eq!(par.mapped_chunk((1 << 20) + PAGE), Some((1 << 20) + 2 * PAGE));
    }

    /// glibc's thresholds are the process's (`mp_`): one thread's free of a mapped buffer
    /// raises them for every arena, so another thread's churn of 256 KiB at its heap top no
    /// longer trims.
    #[test]
    fn a_mapped_free_in_one_arena_stops_trimming_in_the_others() {
        let mut par = MallocPar::default();
        let (mut main, mut worker) = (Arena::new(HeapParams::default()), Arena::new(HeapParams::default()));
        let churn = |worker: &mut Arena, par: &mut MallocPar| {
            let mut ops = Vec::new();
            for _ in 0..8 {
                worker.malloc(par, ChunkId::default(), 32 << 10, &mut ops);
            }
            worker.free(par, 0, 8, &mut ops);
            ops.iter().filter(|o| matches!(o, MmOp::Trim(_))).count()
        };
        assert!(churn(&mut worker, &mut par) > 0, "128 KiB thresholds: the worker's heap top is trimmed");
        let mut ops = Vec::new();
        main.malloc(&par, ChunkId::default(), 1 << 20, &mut ops);
        main.free(&mut par, 0, 1, &mut ops);
        assert_eq!(ops.last(), Some(&MmOp::Munmap(257, 256)));
        assert_eq!(par.trim_threshold, 2 * ((1 << 20) + PAGE));
        for _ in 0..3 {
            assert_eq!(churn(&mut worker, &mut par), 0, "2 MiB trim threshold: nothing trimmed");
        }
        // The same churn with thresholds of its own (a separate process) goes on trimming.
        let mut own = MallocPar::default();
        assert!(churn(&mut Arena::new(HeapParams::default()), &mut own) > 0);
    }

    #[test]
    fn a_hole_is_reused_and_merges_into_the_top_when_what_is_above_it_goes() {
        let mut a = Arena::new(HeapParams::default());
        let mut par = MallocPar::new(&a.params);
        let mut ops = Vec::new();
        let id = |seq| ChunkId { thread: 0, seq };
        for seq in 0..3 {
            a.malloc(&par, id(seq), 64 << 10, &mut ops);
        }
        ops.clear();
        assert!(a.free_chunk(&mut par, id(1), &mut ops), "the middle chunk");
        assert!(ops.is_empty(), "a hole below the top trims nothing: {ops:?}");
        a.malloc(&par, id(3), 32 << 10, &mut ops);
        assert!(ops.is_empty(), "a smaller request reuses the hole: {ops:?}");
        assert!(a.free_chunk(&mut par, id(3), &mut ops), "the reused hole again");
        assert!(a.free_chunk(&mut par, id(0), &mut ops), "the bottom chunk");
        assert!(ops.is_empty(), "{ops:?}");
        assert!(a.free_chunk(&mut par, id(2), &mut ops), "the top chunk: everything below is free");
        assert_eq!(a.top, ARENA_HEADER);
        assert!(matches!(ops.as_slice(), [MmOp::Trim(_)]), "one trim for the merged top: {ops:?}");
        assert!(!a.free_newest(&mut par, 0, &mut ops), "nothing live is left");
    }

    /// glibc on 2 CPUs: 16 arenas, the main one included. Threads 1–15 create theirs; the
    /// 16th and later share in `reused_arena`'s order (main, newest, …, oldest); an exited
    /// thread's arena goes to the next new thread, the most recently left first.
    #[test]
    fn arenas_are_created_to_the_limit_then_reused_from_the_free_list_or_shared() {
        assert_eq!((arena_limit(2), arena_limit(1), arena_limit(64)), (16, 9, 512));
        let mut h = ProcessHeap::new(HeapParams::default(), 2);
        let firsts: Vec<u32> = (0..15).map(|_| h.attach()).collect();
        assert_eq!(firsts, (1..16).collect::<Vec<_>>());
        assert_eq!(h.arenas(), 16);
        let shared: Vec<u32> = (0..18).map(|_| h.attach()).collect();
        assert_eq!(shared, [0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15]);
        // Arena 3 has two threads: it is free once both have gone.
        h.detach(3);
        h.detach(7);
        h.detach(7);
        h.detach(3);
        assert_eq!((h.attach(), h.attach()), (3, 7), "the most recently left first");
        assert_eq!(h.attach(), 14, "the free list empty: shared again where next_to_use points");
        assert_eq!(h.arenas(), 16);
        // Below the limit an exited thread's arena is still reused rather than a new one made.
        let mut h = ProcessHeap::new(HeapParams::default(), 2);
        let a = h.attach();
        h.detach(a);
        assert_eq!((h.attach(), h.arenas()), (a, 2));
    }

    /// Two threads churning in one shared arena: each one's chunks sit among the other's, so a
    /// free merges into the top only when what lies above it is free too, and the arena
    /// trims less often than two arenas of their own would. A thread frees only its own.
    #[test]
    fn a_shared_arena_frees_each_threads_own_chunks_and_trims_less() {
        let churn = |shared: bool| {
            let mut par = MallocPar::default();
            let mut arenas = [Arena::new(HeapParams::default()), Arena::new(HeapParams::default())];
            let mut trims = 0;
            for _ in 0..10 {
                let mut ops = Vec::new();
                for _ in 0..8 {
                    for owner in 0..2u32 {
                        let a = if shared { 0 } else { owner as usize };
                        arenas[a].malloc(&par, ChunkId { thread: owner, seq: 0 }, 32 << 10, &mut ops);
                    }
                }
                // Thread 0 frees its batch first, then thread 1.
                for owner in 0..2u32 {
                    let a = if shared { 0 } else { owner as usize };
                    arenas[a].free(&mut par, owner, 8, &mut ops);
                }
                trims += ops.iter().filter(|o| matches!(o, MmOp::Trim(_))).count();
            }
            trims
        };
        let (own, shared) = (churn(false), churn(true));
        assert_eq!(own, 10 * 2 * 4, "4 trims per batch in an arena of one's own");
        // Shared: thread 0's frees leave holes under thread 1's chunks (no trim); thread 1's
        // frees then merge everything into the top.
        assert!(shared < own, "shared {shared} against own {own}");
        let mut a = Arena::new(HeapParams::default());
        let mut ops = Vec::new();
        a.malloc(&MallocPar::default(), ChunkId { thread: 1, seq: 0 }, 64 << 10, &mut ops);
        assert!(!a.free_newest(&mut MallocPar::default(), 2, &mut ops), "thread 2 has nothing live here");
    }

    /// A chunk is freed by its id whoever frees it: another thread's free of the chunk at the
    /// top of a thread's arena merges it and trims there, as glibc's `arena_for_chunk` does.
    #[test]
    fn a_chunk_freed_by_another_thread_goes_back_to_its_arena() {
        let (mut a, mut par) = (Arena::new(HeapParams::default()), MallocPar::default());
        let mut ops = Vec::new();
        for seq in 0..4 {
            a.malloc(&par, ChunkId { thread: 1, seq }, 64 << 10, &mut ops);
        }
        ops.clear();
        for seq in (0..4).rev() {
            assert!(a.free_chunk(&mut par, ChunkId { thread: 1, seq }, &mut ops));
        }
        assert_eq!(ops, vec![MmOp::Trim(16); 2], "the same trims as the owner's own LIFO frees");
        assert!(!a.free_chunk(&mut par, ChunkId { thread: 1, seq: 0 }, &mut ops), "freed already");
        assert_eq!(a.top, ARENA_HEADER);
    }

    /// `_int_free` tries a trim only when the chunk it leaves is at least 64 KiB: with no
    /// `top_pad`, freeing a 32 KiB chunk into a top that had less than 32 KiB trims nothing.
    #[test]
    fn a_free_leaving_less_than_64_kib_at_the_top_trims_nothing() {
        let p = HeapParams { top_pad: 0, trim_threshold: 0, dynamic: false, ..HeapParams::default() };
        let (mut a, mut par) = (Arena::new(p), MallocPar::new(&p));
        let mut ops = Vec::new();
        for _ in 0..4 {
            a.malloc(&par, ChunkId::default(), 32 << 10, &mut ops);
        }
        ops.clear();
        a.free(&mut par, 0, 1, &mut ops);
        assert!(ops.is_empty(), "33 KiB at the top: {ops:?}");
        a.free(&mut par, 0, 1, &mut ops);
        assert!(matches!(ops.as_slice(), [MmOp::Trim(16)]), "65 KiB at the top, 16 pages above MINSIZE + 1: {ops:?}");
    }

    /// VIPS' worker frees buffers of one size below the top and asks for a little more: glibc
    /// merges the neighbouring free chunks and splits the merged one, so the top never moves
    /// and nothing is trimmed. Keeping each hole whole and apart (the model before) sent every
    /// such request to the top: the heap grew and trimmed on every round.
    #[test]
    fn holes_merge_and_split_so_the_top_stays() {
        let (mut a, mut par) = (Arena::new(HeapParams::default()), MallocPar::default());
        let mut ops = Vec::new();
        let id = |seq| ChunkId { thread: 0, seq };
        // A bottom chunk that stays, two 44,652-byte buffers, and a 100 KiB one on top.
        a.malloc(&par, id(0), 1024, &mut ops);
        a.malloc(&par, id(1), 44_652, &mut ops);
        a.malloc(&par, id(2), 44_652, &mut ops);
        a.malloc(&par, id(3), 100 << 10, &mut ops);
        let top = a.top;
        let (mut pair, mut seq) = ((1, 2), 4);
        ops.clear();
        for _ in 0..20 {
            // The pair freed: one 89,344-byte free chunk.
            assert!(a.free_chunk(&mut par, id(pair.0), &mut ops));
            assert!(a.free_chunk(&mut par, id(pair.1), &mut ops));
            assert_eq!(a.holes, 1, "the two frees merged");
            // A larger buffer and a smaller one fit in it, each split off what is left.
            a.malloc(&par, id(seq), 52_704, &mut ops);
            a.malloc(&par, id(seq + 1), 30_000, &mut ops);
            assert_eq!((a.top, a.holes), (top, 1), "split twice; the top untouched");
            a.free_chunk(&mut par, id(seq + 1), &mut ops);
            a.free_chunk(&mut par, id(seq), &mut ops);
            assert_eq!(a.holes, 1, "all merged again");
            // The pair again fills it exactly.
            a.malloc(&par, id(seq + 2), 44_652, &mut ops);
            a.malloc(&par, id(seq + 3), 44_652, &mut ops);
            assert_eq!((a.top, a.holes), (top, 0));
            (pair, seq) = ((seq + 2, seq + 3), seq + 4);
        }
        assert!(ops.is_empty(), "no growth, no trim: {ops:?}");
        // The pair and the top chunk freed merge into the top: one trim.
        assert!(a.free_chunk(&mut par, id(pair.0), &mut ops));
        assert!(a.free_chunk(&mut par, id(pair.1), &mut ops));
        assert!(a.free_chunk(&mut par, id(3), &mut ops));
        assert_eq!((a.top, a.holes), (ARENA_HEADER + request2size(1024), 0));
        assert!(matches!(ops.as_slice(), [MmOp::Trim(_)]), "{ops:?}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert!(parse_size("3 parsecs").is_err());
    }
}
