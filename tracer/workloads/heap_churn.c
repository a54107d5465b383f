/*
 * heap_churn - glibc heap trimming and the TLB shootdowns it causes (TPDS §6).
 *
 * dedup-style churn: each thread repeatedly allocates a batch of medium blocks (below the mmap
 * threshold, so they come from the thread's own glibc arena), touches them, and frees them in
 * reverse order.  Every free of the block next to the arena's top merges it into the top chunk;
 * once the free top exceeds the trim threshold (128 KiB by default) glibc's heap_trim hands the
 * pages back with madvise(MADV_DONTNEED) (shrink_heap in malloc/arena.c).  MADV_DONTNEED zaps
 * page-table entries, so the kernel sends TLB-shootdown IPIs to every other CPU running a thread
 * of this process and busy-waits for their acknowledgement; the next iteration faults the pages
 * in again.  In a VM each IPI is an ICR-write exit and a preempted target stalls the sender (the
 * TLB shootdown preemption problem).
 *
 * The application-level mitigation of 2.3 is allocator tuning; compare
 *   heap_churn
 *   GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=67108864 heap_churn
 * and count the calls with `strace -f -c -e trace=madvise` or the "TLB" row of /proc/interrupts.
 *
 * --first-free S: before the workers start, the main thread allocates and frees one buffer of S
 * bytes (an input buffer, say).  Above the mmap threshold it is mapped on its own, and its free
 * raises glibc's dynamic thresholds for the whole process: mmap_threshold = S and trim_threshold
 * = 2 S (malloc/malloc.c __libc_free; mp_ is one per process, shared by every arena), so the
 * workers' arenas then trim only when 2 S lies free at their top.
 */
#include "common.h"

static long long o_threads = 2, o_iters = 20000, o_blocks = 32, o_size = 32768, o_first_free = 0;
static long page_size;

typedef struct {
    pthread_t tid;
    long long pages_touched;
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    size_t nb = (size_t)o_blocks, sz = (size_t)o_size;
    unsigned char **blk = xcalloc(nb, sizeof *blk);
    long long pages = 0;
    for (long long it = 0; it < o_iters; it++) {
        for (size_t b = 0; b < nb; b++) {
            unsigned char *p = malloc(sz);
            if (!p)
                die("malloc(%zu) failed", sz);
            /* one write per page: fault the page in (again, if it was trimmed) */
            for (size_t off = 0; off < sz; off += (size_t)page_size) {
                p[off] = (unsigned char)(it + (long long)b);
                pages++;
            }
            blk[b] = p;
        }
        for (size_t b = nb; b-- > 0;)
            free(blk[b]); /* reverse order: each free grows the arena's top chunk */
    }
    free(blk);
    w->pages_touched = pages;
    return NULL;
}

int main(int argc, char **argv)
{
    const opt_t opts[] = {
        OPT_INT("threads", "N", "worker threads (each gets its own glibc arena)", &o_threads, 1, 4096),
        OPT_INT("iters", "I", "iterations per thread", &o_iters, 0, 1000000000LL),
        OPT_INT("blocks", "B", "blocks allocated then freed per iteration", &o_blocks, 1, 1000000),
        OPT_INT("size", "S", "bytes per block", &o_size, 1, 1LL << 30),
        OPT_INT("first-free", "S", "bytes the main thread allocates, touches and frees before the workers start (0: none)",
                &o_first_free, 0, 1LL << 30),
    };
    opts_parse(argc, argv, "heap_churn",
               "glibc heap churn (dedup style; TPDS §6): per iteration each thread mallocs B blocks of\n"
               "S bytes, touches one byte per page, frees them in reverse order.  With default tunables the\n"
               "arena top is trimmed with madvise(MADV_DONTNEED) -> TLB shootdowns.",
               opts, (int)(sizeof opts / sizeof opts[0]));
    page_size = sysconf(_SC_PAGESIZE);
    if (page_size <= 0)
        page_size = 4096;

    if (o_first_free > 0) {
        unsigned char *buf = malloc((size_t)o_first_free);
        if (!buf)
            die("malloc(%lld) failed", o_first_free);
        memset(buf, 1, (size_t)o_first_free);
        free(buf);
    }

    int n = (int)o_threads;
    worker_t *ws = xcalloc((size_t)n, sizeof *ws);
    long long tlb0 = read_tlb_shootdowns();
    measure_t m;
    measure_start(&m);
    for (int i = 0; i < n; i++)
        start_thread(&ws[i].tid, worker, &ws[i]);
    for (int i = 0; i < n; i++)
        join_thread(ws[i].tid);
    double wall = now_s() - m.t0;
    long long tlb1 = read_tlb_shootdowns();

    long long pages = 0;
    for (int i = 0; i < n; i++)
        pages += ws[i].pages_touched;
    const char *tun = getenv("GLIBC_TUNABLES");

    json_t j;
    json_begin(&j, n);
    json_int(&j, "iters", o_iters);
    json_int(&j, "blocks", o_blocks);
    json_int(&j, "size", o_size);
    json_int(&j, "first_free", o_first_free);
    json_int(&j, "allocations", o_threads * o_iters * o_blocks);
    json_int(&j, "pages_touched", pages);
    json_str(&j, "glibc_tunables", tun ? tun : "");
    /* system-wide delta of /proc/interrupts "TLB" (other processes count too); -1 if unreadable */
    json_int(&j, "tlb_shootdowns_sys", (tlb0 >= 0 && tlb1 >= 0) ? tlb1 - tlb0 : -1);
    json_end(&j, &m, wall);
    free(ws);
    return 0;
}
