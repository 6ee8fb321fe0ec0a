/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * Records shared between the tracer's programs and the agent: the single
 * definition. crates/trace/build/layout.rs reads this header at build time
 * into the Rust structs and constants of crates/trace/src/abi.rs, and
 * refuses any C it does not read (see the subset there).
 */
#ifndef NP_TRACE_H
#define NP_TRACE_H

/* Action classes, stable across the ABI. */
#define NP_ACT_ERRNO 1U
#define NP_ACT_KILL 2U
#define NP_ACT_TRAP 3U
#define NP_ACT_NOTIFY_ERROR 4U

/* Indices of the per-CPU stats array. */
#define NP_STAT_SAMPLES 0U          /* samples written to the ring buffer */
#define NP_STAT_DROP_RATELIMIT 1U   /* samples not written: rate limit */
#define NP_STAT_DROP_RINGBUF 2U     /* samples not written: ring buffer full */
#define NP_STAT_COUNT_MAP_FULL 3U   /* denials that found no slot in counts (lost counts) */
#define NP_STAT_UNPAIRED_FIRST 4U   /* first exit of a task never seen entering: not judged */
#define NP_STAT_STATE_FAIL 5U       /* task state could not be created */
#define NP_STAT_NOTIFY_EMULATED 6U  /* USER_NOTIF answered with a value (the supervisor emulated the call): not a denial */
#define NP_STAT_CGROUP_DROP 7U      /* cgroup2 creations not written: np_cgroups full */
#define NP_STAT_MAX 8U

struct np_count_key {
	__u64 cgroup_id;
	__u32 tgid;
	__s32 nr;
	__s32 err;
	__u32 action;
	__u32 arch;
	__u32 _pad;
	char comm[16];
};

struct np_event {
	__u64 ts_ns;
	__u64 cgroup_id;
	__u32 tgid;
	__u32 tid;
	__u32 mnt_ns;
	__s32 nr;
	__u32 arch;
	__s32 err;
	__u32 action;
	__u32 _pad;
	char comm[16];
};

/* A cgroup2 directory as it is created: its id (what bpf_get_current_cgroup_id()
 * returns for tasks in it) and its path from the hierarchy root, so that user
 * space can attribute denials of a cgroup that is gone before they are read. */
#define NP_CGROUP_PATH_MAX 512U
struct np_cgroup_event {
	__u64 id;
	__u32 level;
	__u32 len; /* bytes of path with its NUL, as bpf_probe_read_kernel_str returned; <= 0: unreadable */
	char path[NP_CGROUP_PATH_MAX];
};

_Static_assert(sizeof(struct np_count_key) == 48, "np_count_key layout");
_Static_assert(sizeof(struct np_cgroup_event) == 16 + NP_CGROUP_PATH_MAX, "np_cgroup_event layout");
_Static_assert(sizeof(struct np_event) == 64, "np_event layout");

#endif
