//! A glibc-like per-thread heap (a non-main arena), enough to make heap churn cause TLB
//! shootdowns as TPDS found (TPDS §6; glibc malloc/arena.c `shrink_heap`).
//!
//! - `malloc(n)` with `n >= mmap_threshold` maps a chunk of its own; freeing it unmaps it
//!   (a shootdown) and, with the dynamic threshold, raises `mmap_threshold` to `n` and
//!   `trim_threshold` to `2n` (glibc malloc.c `free` → `munmap_chunk`, `DEFAULT_MMAP_THRESHOLD_MAX`
//!   = 32 MiB on 64-bit).
//! - Smaller chunks come from the top of the arena's heap; growing past the mapped part
//!   grows the heap by the request plus `top_pad` (`mprotect` adding permissions: no
//!   shootdown), and touching pages not resident faults them in.
//! - `free` of the top chunk merges it into the top; when the top's free space reaches
//!   `trim_threshold` the heap shrinks by `ALIGN_DOWN(top_free − top_pad, page)` with
//!   `madvise(MADV_DONTNEED)` (glibc malloc/arena.c `heap_trim` / `shrink_heap`): a
//!   shootdown, and the next growth faults those pages in again. glibc before 2.22 ignores
//!   `trim_threshold` for these per-thread heaps ([`HeapParams::trim_always`]): every free
//!   that leaves a page free above `top_pad` shrinks the heap.
//! - Shrinking with `madvise` keeps the pages' permissions (`shrink_heap` leaves
//!   `mprotect_size`), so growing back into them makes no system call (`grow_heap` calls
//!   `mprotect` only beyond `mprotect_size`): only the page faults.
//!
//! Profiles free LIFO (the most recent allocation first), the pattern that trims. A replayed
//! trace frees any live chunk ([`Arena::free_live`]): a chunk below the top becomes a hole that
//! a later `malloc` of no more than its size reuses (glibc's bins, first fit) and that merges
//! into the top once every chunk above it is free.

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
            mprotect_size: 0,
        }
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
    /// `munmap` of a large chunk (pages): shootdown.
    Munmap(u64),
    /// `madvise(MADV_DONTNEED)` trimming the heap (pages): shootdown.
    Trim(u64),
    /// `mprotect` removing permissions (pages): shootdown, the pages stay.
    Protect(u64),
}

/// One thread's arena.
#[derive(Clone, Debug, Default)]
pub struct Arena {
    params: HeapParams,
    /// Chunks, most recent last: (bytes, mmapped, live). A chunk that is not live is a hole
    /// (only heap chunks become holes; an mmapped chunk is unmapped when freed).
    chunks: Vec<(u64, bool, bool)>,
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

fn pages_up(b: u64) -> u64 {
    b.div_ceil(PAGE)
}

impl Arena {
    /// An empty arena.
    pub fn new(params: HeapParams) -> Arena {
        Arena { params, prot: pages_up(params.mprotect_size) * PAGE, ..Default::default() }
    }

    /// Current parameters (they change with the dynamic threshold).
    pub fn params(&self) -> HeapParams {
        self.params
    }

    /// `malloc(size)`; appends its consequences to `out`.
    pub fn malloc(&mut self, size: u64, out: &mut Vec<MmOp>) {
        let size = size.max(16);
        if size >= self.params.mmap_threshold {
            self.chunks.push((size, true, true));
            out.push(MmOp::Mmap(pages_up(size)));
            out.push(MmOp::Faults(pages_up(size)));
            return;
        }
        if self.holes > 0 {
            if let Some(c) = self.chunks.iter_mut().find(|c| !c.2 && c.0 >= size) {
                c.2 = true;
                self.holes -= 1;
                return;
            }
        }
        self.chunks.push((size, false, true));
        self.top += size;
        if self.top > self.mapped {
            let grow = (self.top + self.params.top_pad - self.mapped).div_ceil(PAGE) * PAGE;
            self.mapped += grow;
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

    /// `free` of the `n` most recent live allocations (fewer if fewer are live).
    pub fn free(&mut self, n: u64, out: &mut Vec<MmOp>) {
        for _ in 0..n {
            if !self.free_live(0, out) {
                return;
            }
        }
    }

    /// `free` of the `k`-th most recent live allocation (0 = the most recent); false if
    /// fewer than `k + 1` are live.
    pub fn free_live(&mut self, k: u64, out: &mut Vec<MmOp>) -> bool {
        let Some(i) = self.chunks.iter().rposition({
            let mut left = k;
            move |c| {
                if !c.2 {
                    return false;
                }
                if left == 0 {
                    return true;
                }
                left -= 1;
                false
            }
        }) else {
            return false;
        };
        let (size, mmapped, _) = self.chunks[i];
        if mmapped {
            self.chunks.remove(i);
            out.push(MmOp::Munmap(pages_up(size)));
            let p = &mut self.params;
            if p.dynamic && size > p.mmap_threshold && size <= MMAP_THRESHOLD_MAX {
                p.mmap_threshold = size;
                p.trim_threshold = 2 * size;
            }
            return true;
        }
        self.chunks[i].2 = false;
        self.holes += 1;
        // Free chunks at the top merge into it (mmapped chunks are not in the heap).
        let mut merged = false;
        while let Some(j) = self.chunks.iter().rposition(|c| !c.1) {
            let (size, _, live) = self.chunks[j];
            if live {
                break;
            }
            self.chunks.remove(j);
            self.holes -= 1;
            self.top -= size;
            merged = true;
        }
        if merged {
            let top_free = self.mapped - self.top;
            let extra = if self.params.trim_always {
                // glibc < 2.22 heap_trim: MINSIZE = 32 bytes on 64-bit.
                top_free.saturating_sub(self.params.top_pad + 33) / PAGE * PAGE
            } else if top_free >= self.params.trim_threshold {
                top_free.saturating_sub(self.params.top_pad) / PAGE * PAGE
            } else {
                0
            };
            if extra > 0 {
                self.mapped -= extra;
                self.resident = self.resident.min(self.mapped);
                out.push(MmOp::Trim(extra / PAGE));
            }
        }
        true
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

    #[test]
    fn churn_at_the_top_trims_and_refaults() {
        let mut a = Arena::new(HeapParams::default());
        let mut ops = Vec::new();
        for _ in 0..4 {
            a.malloc(64 << 10, &mut ops);
        }
        assert_eq!(ops[0], MmOp::Grow(48), "the first growth maps 64 KiB + top_pad: {ops:?}");
        ops.clear();
        a.free(4, &mut ops);
        // 384 KiB mapped; each free leaves more than trim_threshold free at the top, and the
        // heap shrinks back to top + top_pad every time.
        assert_eq!(ops, vec![MmOp::Trim(16); 4], "{ops:?}");
        ops.clear();
        for _ in 0..3 {
            a.malloc(64 << 10, &mut ops);
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
        let mut ops = Vec::new();
        a.malloc(512 << 10, &mut ops);
        assert_eq!(ops, vec![MmOp::Grow(160), MmOp::Faults(128)], "512 KiB + top_pad mapped, 128 pages touched");
        for _ in 0..3 {
            ops.clear();
            a.free(1, &mut ops);
            // 640 KiB free at the top: (640 KiB - 128 KiB - 33) rounded down to pages = 127 pages.
            assert_eq!(ops, vec![MmOp::Trim(127)], "trimmed below the 1 MiB threshold: {ops:?}");
            ops.clear();
            a.malloc(512 << 10, &mut ops);
            assert_eq!(ops, vec![MmOp::Faults(95)], "regrown within mprotect_size: faults only ({ops:?})");
        }
        // glibc 2.22 and later: below the threshold nothing is trimmed.
        let mut b = Arena::new(HeapParams { trim_always: false, ..params });
        b.malloc(512 << 10, &mut ops);
        ops.clear();
        b.free(1, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
    }

    #[test]
    fn a_heap_started_in_its_steady_state_grows_without_mprotect() {
        // ebizzy after its first record: 512 KiB + top_pad already read-write.
        let params = HeapParams { mmap_threshold: 516 << 10, dynamic: false, mprotect_size: 640 << 10, ..HeapParams::default() };
        let mut a = Arena::new(params);
        let mut ops = Vec::new();
        a.malloc(512 << 10, &mut ops);
        assert_eq!(ops, vec![MmOp::Faults(128)], "within mprotect_size: faults only");
        // Beyond it, only the difference is made read-write.
        ops.clear();
        a.malloc(200 << 10, &mut ops);
        assert_eq!(ops, vec![MmOp::Grow(50), MmOp::Faults(50)], "{ops:?}");
    }

    #[test]
    fn a_large_trim_threshold_stops_trimming() {
        let mut a = Arena::new(HeapParams { trim_threshold: 64 << 20, dynamic: false, ..HeapParams::default() });
        let mut ops = Vec::new();
        for _ in 0..4 {
            a.malloc(64 << 10, &mut ops);
        }
        ops.clear();
        a.free(4, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
    }

    #[test]
    fn mmapped_chunks_unmap_and_raise_the_threshold() {
        let mut a = Arena::new(HeapParams::default());
        let mut ops = Vec::new();
        a.malloc(1 << 20, &mut ops);
        a.free(1, &mut ops);
        assert!(ops.contains(&MmOp::Munmap(256)));
        assert_eq!(a.params().mmap_threshold, 1 << 20);
        assert_eq!(a.params().trim_threshold, 2 << 20);
    }

    #[test]
    fn a_hole_is_reused_and_merges_into_the_top_when_what_is_above_it_goes() {
        let mut a = Arena::new(HeapParams::default());
        let mut ops = Vec::new();
        for _ in 0..3 {
            a.malloc(64 << 10, &mut ops);
        }
        ops.clear();
        assert!(a.free_live(1, &mut ops), "the middle chunk");
        assert!(ops.is_empty(), "a hole below the top trims nothing: {ops:?}");
        a.malloc(32 << 10, &mut ops);
        assert!(ops.is_empty(), "a smaller request reuses the hole: {ops:?}");
        assert!(a.free_live(1, &mut ops), "the reused hole again");
        assert!(a.free_live(1, &mut ops), "the bottom chunk");
        assert!(ops.is_empty(), "{ops:?}");
        assert!(a.free_live(0, &mut ops), "the top chunk: everything below is free");
        assert_eq!(a.top, 0);
        assert!(matches!(ops.as_slice(), [MmOp::Trim(_)]), "one trim for the merged top: {ops:?}");
        assert!(!a.free_live(0, &mut ops), "nothing live is left");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert!(parse_size("3 parsecs").is_err());
    }
}
