//! The page allocator and page LRU of a kernel, on the paths that fault pages in and free
//! them: where page faults and `munmap` / `madvise(MADV_DONTNEED)` take kernel spinlocks.
//!
//! Modelled on Linux v3.19 and v4.15 (the same structure in both):
//! - **Per-CPU page lists** (mm/page_alloc.c `buffered_rmqueue` / `free_hot_cold_page`): an
//!   order-0 allocation takes a page from the CPU's list; an empty list is refilled with
//!   `batch` pages taken from the buddy lists under `zone->lock` (`rmqueue_bulk`). A freed
//!   page goes onto the CPU's list; when the list reaches `high` pages, `batch` of them go
//!   back to the buddy lists under `zone->lock` (`free_pcppages_bulk`). For a zone larger
//!   than 512 MiB, `zone_batchsize` gives batch = 31 and `pageset_set_batch` high = 6 × batch
//!   = 186 (the `pagesets` of /proc/zoneinfo).
//! - **LRU insertion** (mm/swap.c `lru_cache_add` → `__lru_cache_add`): every faulted-in
//!   anonymous page goes into the CPU's `lru_add_pvec` pagevec; when its PAGEVEC_SIZE = 14
//!   slots are full, `__pagevec_lru_add` moves the 14 pages onto the LRU lists under the LRU
//!   lock (`pagevec_lru_move_fn`).
//! - **LRU removal on free** (mm/swap.c `release_pages`, called by `tlb_finish_mmu` after the
//!   zap's TLB flush): pages leave the LRU under the LRU lock, which is dropped and retaken
//!   every SWAP_CLUSTER_MAX = 32 pages (`lock_batch`); then the pages are freed to the
//!   per-CPU list (`free_hot_cold_page_list`).
//!
//! The host has one zone and one LRU lock per memory node, and a CPU allocates from and frees
//! to its own node's; so does a guest that sees its NUMA topology (`vm.numa = "exposed"`),
//! per virtual node. A guest that does not (the default) has one node and one normal zone.
//! The lock sections run as kernel work of the faulting thread, which cannot be preempted by
//! its kernel while it holds or waits for one; the time under a lock is the per-page cost
//! of the platform preset (`zone_page`, `lru_page`) times the pages moved.

use crate::account::{Attr, Cause};
use crate::world::World;

use super::kpath::KStep;
use super::spinlock::{KLockRef, MmLock, TicketLock};
use super::{KernelId, KernelKind, ThreadId};

/// `pcp->batch` of a zone above 512 MiB (mm/page_alloc.c `zone_batchsize`).
pub const PCP_BATCH: u32 = 31;
/// `pcp->high` = 6 × batch (mm/page_alloc.c `pageset_set_batch`).
pub const PCP_HIGH: u32 = 6 * PCP_BATCH;
/// PAGEVEC_SIZE (include/linux/pagevec.h).
pub const PAGEVEC_SIZE: u32 = 14;
/// SWAP_CLUSTER_MAX (include/linux/swap.h): `release_pages`'s `lock_batch`.
pub const SWAP_CLUSTER_MAX: u64 = 32;

/// A kernel's page-allocator locks (by [`MmLock::index`]).
#[derive(Debug, Default)]
pub struct PageAllocator {
    /// The locks, created on first use.
    pub locks: Vec<TicketLock>,
}

impl PageAllocator {
    /// Lock `m`.
    pub fn lock(&mut self, m: MmLock) -> &mut TicketLock {
        let i = m.index();
        if self.locks.len() <= i {
            self.locks.resize_with(i + 1, TicketLock::default);
        }
        &mut self.locks[i]
    }

    /// Who a spinner on `m` waits for.
    pub fn culprit(&self, m: MmLock, d: super::spinlock::Discipline) -> Option<ThreadId> {
        self.locks.get(m.index()).and_then(|l| l.culprit(d))
    }
}

/// A CPU's page-allocator state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpState {
    /// Pages on its per-CPU free list.
    pub count: u32,
    /// Pages in its `lru_add_pvec`.
    pub lru_add: u32,
}

impl World<'_> {
    /// The memory node whose zone CPU `cpu` of kernel `k` allocates from: the host's node of
    /// the core; for a guest, the vCPU's virtual node when the VM exposes its NUMA topology
    /// (`vm.numa = "exposed"`), else its only node.
    pub(crate) fn mm_node(&self, k: KernelId, cpu: u32) -> u32 {
        match self.kernels[k as usize].kind {
            KernelKind::Host => self.core_node(cpu),
            KernelKind::Guest { vm } => self
                .mem
                .as_ref()
                .and_then(|m| m.vms.get(vm as usize))
                .filter(|v| v.view == crate::spec::vm::NumaView::Exposed)
                .map_or(0, |v| v.vnode[cpu as usize]),
        }
    }

    /// `n` page faults: as many as the CPU's free list and pagevec allow at once, then the
    /// refill or the pagevec drain under its lock.
    /// `vma`: the read lock they take.
    pub(crate) fn expand_faults(&mut self, k: KernelId, cpu: u32, t: ThreadId, n: u64, vma: super::rwsem::FaultLock, attr: Attr) {
        self.threads[t as usize].kpath.pop_front();
        if n == 0 {
            return;
        }
        let node = self.mm_node(k, cpu);
        let pcp = &mut self.kernels[k as usize].cpus[cpu as usize].pcp;
        if pcp.count == 0 {
            // rmqueue_bulk: refill the CPU's list from the buddy lists.
            pcp.count = PCP_BATCH;
            let zone = KLockRef::Mm(MmLock::Zone(node));
            let hold = u64::from(PCP_BATCH) * self.costs.zone_page;
            self.kpath_push_front(
                t,
                vec![KStep::Lock(zone), KStep::Work(hold, Cause::MemoryOp), KStep::Unlock(zone), KStep::FaultChunk(n, vma)],
            );
            return;
        }
        let m = n.min(u64::from(pcp.count)).min(u64::from(PAGEVEC_SIZE - pcp.lru_add));
        pcp.count -= m as u32;
        pcp.lru_add += m as u32;
        let drain = pcp.lru_add == PAGEVEC_SIZE;
        if drain {
            pcp.lru_add = 0;
        }
        self.push_work(k, cpu, attr, m * self.costs.page_fault);
        let mut front = Vec::with_capacity(4);
        if drain {
            // __pagevec_lru_add: the full pagevec goes onto the LRU.
            let lru = KLockRef::Mm(MmLock::Lru(node));
            front.extend([
                KStep::Lock(lru),
                KStep::Work(u64::from(PAGEVEC_SIZE) * self.costs.lru_page, Cause::MemoryOp),
                KStep::Unlock(lru),
            ]);
        }
        // up_read (or the VMA's): the next pagevec's worth takes it again.
        front.push(KStep::ReadUnlock);
        if n > m {
            front.push(KStep::Faults(n - m, vma));
        }
        self.kpath_push_front(t, front);
    }

    /// `n` pages onto the CPU's free list; at `high`, a batch goes back under `zone->lock`.
    pub(crate) fn expand_free(&mut self, k: KernelId, cpu: u32, t: ThreadId, n: u64) {
        self.threads[t as usize].kpath.pop_front();
        if n == 0 {
            return;
        }
        let node = self.mm_node(k, cpu);
        let pcp = &mut self.kernels[k as usize].cpus[cpu as usize].pcp;
        let m = n.min(u64::from(PCP_HIGH.saturating_sub(pcp.count)).max(1));
        pcp.count += m as u32;
        let mut front = Vec::with_capacity(4);
        if pcp.count >= PCP_HIGH {
            // free_pcppages_bulk.
            pcp.count -= PCP_BATCH;
            let zone = KLockRef::Mm(MmLock::Zone(node));
            front.extend([
                KStep::Lock(zone),
                KStep::Work(u64::from(PCP_BATCH) * self.costs.zone_page, Cause::MemoryOp),
                KStep::Unlock(zone),
            ]);
        }
        if n > m {
            front.push(KStep::Free(n - m));
        }
        self.kpath_push_front(t, front);
    }
}
