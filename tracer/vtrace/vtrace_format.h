/* vtrace binary format, version 4: constants shared by the tracer and its tests.
 * The authoritative description is docs/trace-format.md; the Rust reader is
 * crates/vcpulab-sim/src/trace/format.rs. All integers are little-endian. */
#ifndef VTRACE_FORMAT_H
#define VTRACE_FORMAT_H

#define VT_MAGIC "\x89VTRACE\n" /* 8 bytes */
#define VT_VERSION 4 /* 2: the FUTEX and THREAD_STATS kinds; 3: THREAD_STATS's minflt; 4: PROCESS_START's release and libc;
                       * readers take 1 to 4 */
#define VT_HEADER_LEN 32        /* magic[8] u16 version u16 header_len u32 flags u64 created_unix_ns u32 creator_pid u32 crc */
#define VT_BLOCK_MAGIC "VTBK"   /* 4 bytes */
#define VT_BLOCK_HEADER_LEN 40  /* magic[4] u32 payload_len u32 pid u32 tid u64 process_base u32 seq u32 nrec u32 flags u32 crc */
#define VT_BLOCK_MAX 65536      /* header + payload */
#define VT_PAYLOAD_MAX (VT_BLOCK_MAX - VT_BLOCK_HEADER_LEN)
#define VT_REC_HEADER_LEN 12    /* u8 kind u8 flags u16 len u64 t */
#define VT_CMDLINE_MAX 1024
#define VT_RELEASE_LEN 64 /* PROCESS_START's kernel release (uname -r), NUL-padded (version 4) */
#define VT_LIBC_LEN 16    /* PROCESS_START's glibc version (gnu_get_libc_version), NUL-padded (version 4) */

/* Record flags. */
#define VT_F_TRY 0x01   /* a try-lock variant */
#define VT_F_TIMED 0x02 /* a timed/clock variant */
#define VT_F_CPU_EST 0x80 /* the cpu field is extrapolated, not measured (VTRACE_CPU_GAP_NS) */

/* Record kinds; "C" = the body starts with u64 cpu (CLOCK_THREAD_CPUTIME_ID ns). */
enum vt_kind {
    VT_PROCESS_START = 0x01,  /* C u32 pid u32 ppid u32 ncpu u16 origin u16 cmdlen u64 mono_base u64 real_base bytes[cmdlen]
                               * bytes[VT_RELEASE_LEN] release bytes[VT_LIBC_LEN] libc (version 4) */
    VT_THREAD_START = 0x02,   /* C u32 tid u32 parent u32 seq u32 reserved u64 handle */
    VT_THREAD_EXIT = 0x03,    /* C */
    VT_THREAD_CREATE = 0x04,  /* C u32 seq i32 ret u64 handle */
    VT_THREAD_JOIN = 0x05,    /* C u32 tid i32 ret u64 handle u64 wait */
    VT_EXEC = 0x06,           /* C i32 ret (only written when exec failed; before exec: ret 0) */
    VT_THREAD_STATS = 0x07,   /* C u64 run_delay u64 nvcsw u64 nivcsw u64 minflt (version 2, minflt version 3;
                               * VT_HOLD_UNKNOWN: not known): just before
                               * THREAD_EXIT, or, for a thread still alive at the process's exit, its last record (then C is its
                               * CPU time read from schedstat by the exiting thread) */
    VT_MUTEX_LOCK = 0x10,     /* C u64 addr u64 wait i32 ret */
    VT_MUTEX_UNLOCK = 0x11,   /* C u64 addr u64 hold */
    VT_SPIN_LOCK = 0x12,      /* C u64 addr u64 wait i32 ret */
    VT_SPIN_UNLOCK = 0x13,    /* C u64 addr u64 hold */
    VT_RW_RDLOCK = 0x14,      /* C u64 addr u64 wait i32 ret */
    VT_RW_WRLOCK = 0x15,      /* C u64 addr u64 wait i32 ret */
    VT_RW_UNLOCK = 0x16,      /* C u64 addr u64 hold */
    VT_BARRIER_INIT = 0x17,   /* C u64 addr u32 count i32 ret */
    VT_BARRIER_WAIT = 0x18,   /* C u64 addr u64 wait i32 ret */
    VT_COND_WAIT = 0x19,      /* C u64 cond u64 mutex u64 wait i32 ret */
    VT_COND_SIGNAL = 0x1A,    /* C u64 cond */
    VT_COND_BROADCAST = 0x1B, /* C u64 cond */
    VT_FUTEX = 0x1C,          /* C u64 addr u32 op u32 val u64 wait i32 ret (version 2) */
    VT_MALLOC = 0x20,         /* u64 size u64 ptr */
    VT_FREE = 0x21,           /* u64 ptr */
    VT_CALLOC = 0x22,         /* u64 nmemb u64 size u64 ptr */
    VT_REALLOC = 0x23,        /* u64 old u64 size u64 ptr */
    VT_MEMALIGN = 0x24,       /* u64 align u64 size u64 ptr */
    VT_MMAP = 0x30,           /* C u64 addr u64 len i32 prot i32 flags i32 fd */
    VT_MUNMAP = 0x31,         /* C u64 addr u64 len i32 ret */
    VT_MADVISE = 0x32,        /* C u64 addr u64 len i32 advice i32 ret */
    VT_MPROTECT = 0x33,       /* C u64 addr u64 len i32 prot i32 ret */
};

#define VT_HOLD_UNKNOWN 0xFFFFFFFFFFFFFFFFull
#define VT_SEQ_UNKNOWN 0xFFFFFFFFu

#endif
