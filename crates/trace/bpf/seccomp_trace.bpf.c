// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * nodeproof: seccomp denials seen from the kernel, without audit and without
 * touching the profile.
 *
 * Three ways to notice that seccomp skipped a syscall, one per strategy; the
 * agent loads the first that the kernel accepts (see agent/src/trace/loader.rs):
 *
 *  fexit    fexit/__secure_computing returning -1. Only tasks with seccomp
 *           work pay anything. Needs BPF trampolines (refused on some kernels).
 *  tp_btf   tp_btf/sys_enter + tp_btf/sys_exit. The x86 entry code runs
 *           seccomp before trace_sys_enter(), so a skipped syscall never
 *           reaches sys_enter but still passes sys_exit: a confined task's
 *           sys_exit with no recorded sys_enter is a denial.
 *  tracepoint  the same pairing on the classic raw_syscalls tracepoints, with
 *           a tid-keyed LRU hash instead of task storage and only probe reads,
 *           for kernels that refuse BTF-typed attach points.
 *
 * USER_NOTIF: seccomp skips a notified syscall the supervisor answers with an
 * error (or a value) exactly like an ERRNO one, so sys_exit alone cannot tell
 * them apart. The kernel tells who was notified: the supervisor's
 * ioctl(SECCOMP_IOCTL_NOTIF_RECV) returns the notification, with the
 * notifying thread's pid as the supervisor's pid namespace numbers it
 * (task_pid_vnr). At that ioctl's sys_exit the programs read the struct
 * from the supervisor's buffer and mark (that namespace, that pid) in
 * np_notified with the syscall nr. The notifying task's next skipped exit
 * finds its mark by walking its own pid numbers, one per namespace it is
 * visible in: an error answer is NOTIFY_ERROR, a value answer (emulation) is
 * no denial. A CONTINUE answer runs the call, whose paired exit takes the
 * mark. No timing: an answer that comes before the caller sleeps, a traced
 * or frozen task, a killable wait (WAIT_KILLABLE_RECV) are told apart the
 * same way. The marks are looked at only while np_notify_marks (marks
 * outstanding, node-wide) is non-zero: a node without USER_NOTIF pays one
 * load per confined exit. tp_btf and the tracepoint strategy with BTF do
 * this; fexit and the BTF-free variant report notify errors as errno.
 *
 * All three share: signal_generate (SIGSYS with si_code SYS_SECCOMP marks a
 * TRAP so the following skip is classed as trap), sched_process_exit (a task
 * leaving with seccomp.mode == SECCOMP_MODE_DEAD was killed by a KILL_THREAD /
 * KILL_PROCESS action; KILL_THREAD on a non-last thread calls do_exit()
 * straight from seccomp and is visible nowhere else), exact counts in a
 * per-CPU hash, and rate-limited samples through a ring buffer.
 *
 * Pairing rule, shared by tp_btf and tracepoint: a task's state is created at
 * its first confined sys_exit (tp_btf) or sys_enter (tracepoint), or when a
 * seccomp SIGSYS or a context switch mid-syscall needs it. A confined
 * sys_exit with *no state at all* is not judged (counted in NP_STAT_UNPAIRED_FIRST) and creates the state. That
 * single rule covers every known exit-without-enter that is not a denial:
 * the seccomp()/prctl() call that installs the first filter (mode was 0 at
 * entry), a child's first return from clone/clone3/fork/vfork, a syscall
 * that was already in flight when the tracer attached, a thread given a filter
 * by SECCOMP_FILTER_FLAG_TSYNC while blocked. Its only blind spot: a task whose
 * very first observed syscall is denied (a clone child has state from its
 * first return, so this is limited to tasks older than the tracer).
 */
#include "include/np_core.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "np_trace.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define SECCOMP_MODE_FILTER 2
#define SECCOMP_MODE_DEAD 3 /* SECCOMP_MODE_FILTER + 1, set by the KILL actions */
#define SIGSYS 31
#define TASK_INTERRUPTIBLE 0x1
#define SYS_SECCOMP 1
#define MAX_ERRNO 4095

#define AUDIT_ARCH_X86_64 0xC000003EU
#define AUDIT_ARCH_I386 0x40000003U
#define TS_COMPAT 0x0002U
#define NP_NR_EXIT 60
#define NP_NR_EXIT_GROUP 231
/* x86_64 kernel stack without KASAN; pt_regs sits at its top (no padding). */
#define NP_THREAD_SIZE 16384

/* Set by the loader before load (aya set_global). */
const volatile __u64 np_sample_limit = 1000; /* samples per CPU per ~1.07 s window */
const volatile __u32 np_sample_tgid = 0;     /* 0: samples for every process */

/* USER_NOTIF marks set and not yet taken, node-wide (see the top comment);
 * and SECCOMP_IOCTL_NOTIF_RECV calls entered and not yet exited. */
__s64 np_notify_marks = 0;
__s64 np_recvs_inflight = 0;

struct np_task_state {
	__u32 entered;   /* 1 between a confined sys_enter and its sys_exit */
	__u32 trap;      /* 1 after a seccomp SIGSYS, until the syscall's exit */
	__s32 trap_data; /* the filter's data, carried in si_errno */
	__u32 installing;   /* tp_btf: between a filter install's sys_enter and its sys_exit */
};

/*
 * NP_CLASSIC_ONLY builds the second object, seccomp_trace_classic.bpf.o: the
 * classic-tracepoint programs (with and without BTF) and the maps they use,
 * nothing else. A kernel without task storage (Linux < 5.11: creating the map
 * fails with EINVAL) or without tp_btf/fexit then still loads the tracepoint
 * strategy: a feature one strategy needs never stops another from loading.
 */
#ifndef NP_CLASSIC_ONLY
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct np_task_state);
} np_task_store SEC(".maps");
#endif

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct np_task_state);
} np_tid_state SEC(".maps");

/* A notification a supervisor received: the notifying thread as its pid
 * namespace numbers it (see the top comment). */
struct np_notif_key {
	__u32 ns;  /* the pid namespace's inode number */
	__u32 pid; /* the thread's pid there */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct np_notif_key);
	__type(value, __s32); /* the notified syscall */
} np_notified SEC(".maps");

/* The buffer of a supervisor thread's SECCOMP_IOCTL_NOTIF_RECV in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tid */
	__type(value, __u64);
} np_recv_buf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct np_count_key);
	__type(value, __u64);
} np_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} np_stats SEC(".maps");

struct np_rate {
	__u64 window;
	__u64 n;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_rate);
} np_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} np_events SEC(".maps");

/* Cgroup2 creations for the agent's id -> path cache: 256 KiB holds 496
 * records, about a second of a node starting a hundred pods at once, and
 * the agent drains it at every poll (<= 100 ms). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} np_cgroups SEC(".maps");

static __always_inline void np_stat(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&np_stats, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline __u32 np_arch(struct task_struct *task)
{
	__u32 status = BPF_CORE_READ(task, thread_info.status);
	return (status & TS_COMPAT) ? AUDIT_ARCH_I386 : AUDIT_ARCH_X86_64;
}

/* Count one denial exactly, then maybe sample it. Only the denial path runs this.
 * core = 0 (the BTF-free programs, a compile-time constant): no CO-RE reads,
 * so the arch is taken as x86_64 and mnt_ns as 0. */
static __always_inline void np_emit_x(struct task_struct *task, __s32 nr, __s32 err, __u32 action,
				      const int core)
{
	struct np_count_key key = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 one = 1;
	__u64 *cnt;

	key.cgroup_id = bpf_get_current_cgroup_id();
	key.tgid = pid_tgid >> 32;
	key.nr = nr;
	key.err = err;
	key.action = action;
	key.arch = core ? np_arch(task) : AUDIT_ARCH_X86_64;
	bpf_get_current_comm(key.comm, sizeof(key.comm));

	cnt = bpf_map_lookup_elem(&np_counts, &key);
	if (cnt) {
		/* Per-CPU slot, but a preempted program on the same CPU may race: atomic. */
		__sync_fetch_and_add(cnt, 1);
	} else if (bpf_map_update_elem(&np_counts, &key, &one, BPF_NOEXIST) != 0) {
		/* Another CPU created the key first, or the map is full. */
		cnt = bpf_map_lookup_elem(&np_counts, &key);
		if (cnt)
			__sync_fetch_and_add(cnt, 1);
		else
			np_stat(NP_STAT_COUNT_MAP_FULL);
	}

	if (np_sample_tgid && np_sample_tgid != key.tgid)
		return;

	__u32 zero = 0;
	struct np_rate *rl = bpf_map_lookup_elem(&np_rate, &zero);
	if (!rl)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 window = now >> 30;
	if (rl->window != window) {
		rl->window = window;
		rl->n = 0;
	}
	if (rl->n >= np_sample_limit) {
		np_stat(NP_STAT_DROP_RATELIMIT);
		return;
	}
	rl->n++;

	struct np_event *ev = bpf_ringbuf_reserve(&np_events, sizeof(*ev), 0);
	if (!ev) {
		np_stat(NP_STAT_DROP_RINGBUF);
		return;
	}
	ev->ts_ns = now;
	ev->cgroup_id = key.cgroup_id;
	ev->tgid = key.tgid;
	ev->tid = (__u32)pid_tgid;
	ev->mnt_ns = core ? BPF_CORE_READ(task, nsproxy, mnt_ns, ns.inum) : 0;
	ev->nr = nr;
	ev->arch = key.arch;
	ev->err = err;
	ev->action = action;
	ev->_pad = 0;
	__builtin_memcpy(ev->comm, key.comm, sizeof(ev->comm));
	bpf_ringbuf_submit(ev, 0);
	np_stat(NP_STAT_SAMPLES);
}

#define NP_NR_IOCTL 16
/* _IOWR('!', 0, struct seccomp_notif): 80 bytes (include/uapi/linux/seccomp.h) */
#define NP_SECCOMP_IOCTL_NOTIF_RECV 0xc0502100U
#define NP_MAX_PID_LEVELS 4 /* pid namespaces deep that a notifying thread is looked up in */

/* The supervisor's ioctl enters: remember a RECV's buffer. */
static __always_inline void np_recv_begin(unsigned long cmd, unsigned long buf)
{
	if ((__u32)cmd != NP_SECCOMP_IOCTL_NOTIF_RECV)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 b = buf;
	if (bpf_map_update_elem(&np_recv_buf, &tid, &b, BPF_ANY) == 0)
		__sync_fetch_and_add(&np_recvs_inflight, 1);
}

/* The pid namespace current's pids live in (task_active_pid_ns). */
static __always_inline __u32 np_active_pid_ns(struct task_struct *task)
{
	struct pid *pid = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	struct upid *up = (struct upid *)((char *)pid + bpf_core_field_offset(struct pid, numbers) +
					  (__u64)(level & 31) * bpf_core_type_size(struct upid));
	return BPF_CORE_READ(up, ns, ns.inum);
}

/* A RECV exits: mark the notifying thread it returned (see the top comment). */
static __always_inline void np_recv_end(struct task_struct *task, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *buf = bpf_map_lookup_elem(&np_recv_buf, &tid);
	if (!buf)
		return;
	__u64 b = *buf;
	bpf_map_delete_elem(&np_recv_buf, &tid);
	__sync_fetch_and_add(&np_recvs_inflight, -1);
	if (ret != 0)
		return;
	/* struct seccomp_notif: __u64 id; __u32 pid; __u32 flags; struct seccomp_data { int nr; ... } */
	struct {
		__u64 id;
		__u32 pid;
		__u32 flags;
		__s32 nr;
	} n = {};
	if (bpf_probe_read_user(&n, sizeof(n), (void *)b) || !n.pid)
		return; /* 0: the notifying thread is not visible in the supervisor's namespace */
	struct np_notif_key key = {.ns = np_active_pid_ns(task), .pid = n.pid};
	if (bpf_map_update_elem(&np_notified, &key, &n.nr, BPF_NOEXIST) == 0)
		__sync_fetch_and_add(&np_notify_marks, 1);
	else
		bpf_map_update_elem(&np_notified, &key, &n.nr, BPF_ANY);
}

/* Takes task's mark, found by its pid in each namespace it is visible in:
 * the notified syscall, or -1 without one. */
static __always_inline int np_take_notified(struct task_struct *task)
{
	struct pid *pid = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	char *numbers = (char *)pid + bpf_core_field_offset(struct pid, numbers);
	__u32 size = bpf_core_type_size(struct upid);

	for (int i = 0; i < NP_MAX_PID_LEVELS; i++) {
		if (i > level)
			break;
		struct upid *up = (struct upid *)(numbers + (__u64)i * size);
		struct np_notif_key key = {
			.ns = BPF_CORE_READ(up, ns, ns.inum),
			.pid = (__u32)BPF_CORE_READ(up, nr),
		};
		__s32 *nr = bpf_map_lookup_elem(&np_notified, &key);
		if (nr) {
			int v = *nr;
			if (bpf_map_delete_elem(&np_notified, &key) == 0)
				__sync_fetch_and_add(&np_notify_marks, -1);
			return v;
		}
	}
	return -1;
}

/* A paired (run) syscall of a task with a mark: a CONTINUE answer, or the
 * mark is stale. Either way it is not a denial's: take it. */
static __always_inline void np_drop_notified(struct task_struct *task)
{
	if (np_notify_marks > 0)
		np_take_notified(task);
}

static __always_inline void np_emit(struct task_struct *task, __s32 nr, __s32 err, __u32 action)
{
	np_emit_x(task, nr, err, action, 1);
}

/* A skipped syscall's exit: classify by the notify and trap marks, else by the return value. */
static __always_inline void np_skipped_x(struct task_struct *task, struct np_task_state *st,
					 long nr, long ret, const int core)
{
	if (nr < 0)
		return; /* a ptrace tracer cancelled the syscall (orig_ax = -1): not seccomp */
	if (core && np_notify_marks > 0) {
		int notified = np_take_notified(task);
		/* A mark for another syscall is stale (the notification was cut
		 * short): taken, and this exit judged on its own. */
		if (notified == nr) {
			if (ret < 0 && ret >= -MAX_ERRNO)
				np_emit(task, nr, -ret, NP_ACT_NOTIFY_ERROR);
			else
				np_stat(NP_STAT_NOTIFY_EMULATED);
			return;
		}
	}
	if (st->trap) {
		st->trap = 0;
		np_emit_x(task, nr, st->trap_data, NP_ACT_TRAP, core);
		return;
	}
	np_emit_x(task, nr, (ret < 0 && ret >= -MAX_ERRNO) ? -ret : 0, NP_ACT_ERRNO, core);
}

static __always_inline void np_skipped(struct task_struct *task, struct np_task_state *st, long nr,
				       long ret)
{
	np_skipped_x(task, st, nr, ret, 1);
}

#ifndef NP_CLASSIC_ONLY
/* ---------------------------------------------------------------- tp_btf */

/*
 * The common path without a helper call. Every BPF helper call ends in a
 * `ret`, and with the kernel's return-thunk mitigations (SRSO "safe RET",
 * retbleed) each one costs as much as a good part of an empty program; on 6.18
 * bpf_get_current_task_btf() is still a real call (the verifier inlines it
 * only from the x86 patches queued after it), while a PERCPU_ARRAY lookup is
 * inlined from 6.10 on. So each CPU keeps, in np_cpu:
 *
 *  cur, cur_regs, cur_mode, gen  the task running here, its pt_regs and its
 *           seccomp.mode, written by sched_switch as the task comes in
 *           (ctx[2], next) or by the first syscall program that finds the
 *           entry unusable. sys_enter and sys_exit read the mode from here
 *           only when cur_regs is the pt_regs they are given (ctx[0]): the
 *           entry names the task that is running. Not "every switch-in
 *           rewrites it": a kernel may switch tasks without the sched_switch
 *           program seeing it (this project's 6.18 hosts never report a switch
 *           *out of* their init's threads, so the task switched in after one
 *           ran under that thread's entry, mode 0, and a short-lived confined
 *           process lost every denial). pt_regs sit at a fixed offset from the
 *           task's stack (task_pt_regs()), and two live tasks never share a
 *           stack, so the compare costs one load and no helper call.
 *           regs_off (pt_regs minus task->stack, the same for every task) is
 *           learnt by the first syscall program on the CPU; until then
 *           sched_switch writes cur_regs 0, which matches nothing.
 *  entered  the task that entered a confined syscall here and is still
 *           running: sys_enter writes it, the matching sys_exit clears it
 *           with a cmpxchg, and sched_switch, when the task leaves the CPU
 *           mid-syscall, moves the mark into task storage (entered = 1) and
 *           clears it. Invariant: a task outside a syscall is in no slot. So
 *           at sys_exit, "entered == cur" means this syscall entered (fast
 *           path, no task storage); otherwise task storage decides (slow
 *           path: a syscall that blocked, or a denial). cmpxchg on both
 *           sides: a preempted exit program and sched_switch must not both
 *           claim the same mark.
 *
 * A mode changes while its task runs only when a filter is installed: by the
 * task itself (seccomp(SECCOMP_SET_MODE_FILTER/STRICT), prctl(PR_SET_SECCOMP))
 * or, with SECCOMP_FILTER_FLAG_TSYNC, by a sibling thread while this one runs
 * on another CPU (kernel/seccomp.c: seccomp_sync_threads() sets the mode of
 * every thread of the group under sighand->siglock). So every install is
 * bracketed: its sys_enter adds one to np_installs_inflight (and marks the
 * task's storage), its sys_exit takes it off and bumps np_install_gen. A
 * cached mode counts only while no install is in flight and its gen is the
 * current one; anything else re-reads task->seccomp.mode. The gen is read
 * before the mode, so an entry written after an install's exit saw the
 * filter. An install that a filter denies never reaches sys_enter, and
 * installs nothing.
 */
struct np_cpu {
	__u64 entered;  /* task that entered a confined syscall here and still runs; 0: none */
	__u64 cur;      /* task running here as of its switch-in; 0: not known yet */
	__u64 cur_regs; /* task_pt_regs(cur): the entry is cur's only if ctx[0] is this; 0: none */
	__u64 gen;      /* np_install_gen when cur_mode was read */
	__u32 cur_mode; /* cur->seccomp.mode then */
	__u32 regs_off; /* task_pt_regs(t) - t->stack, learnt here (0: not yet) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_cpu);
} np_slot SEC(".maps");

/* Filter installs entered and not yet exited, node-wide; and how many have exited. */
__s64 np_installs_inflight = 0;
__u64 np_install_gen = 0;

#define NP_NR_PRCTL 157
#define NP_NR_SECCOMP 317
#define NP_NR_IA32_PRCTL 172   /* x86_64's iopl: taken as an install too, harmlessly */
#define NP_NR_IA32_SECCOMP 354 /* unused on x86_64 */
#define NP_PR_SET_SECCOMP 22
#define NP_SECCOMP_SET_MODE_FILTER 1

/* The cached mode of the task running on this CPU (whose pt_regs the syscall
 * tracepoint passes as ctx[0]), or -1 when it cannot be trusted. */
static __always_inline int np_cached_mode(struct np_cpu *c, __u64 *ctx)
{
	if (c->cur_regs != ctx[0] || np_installs_inflight != 0 || c->gen != np_install_gen)
		return -1;
	return c->cur_mode;
}

/* Caches task and its mode; the gen first (see above). regs: task's pt_regs,
 * or 0 when not known. */
static __always_inline void np_cache_task(struct np_cpu *c, struct task_struct *task, __u64 regs)
{
	__u64 gen = np_install_gen;

	asm volatile("" ::: "memory"); /* x86 keeps loads in order; the compiler must too */
	c->cur_mode = task->seccomp.mode;
	c->gen = gen;
	c->cur = (__u64)task;
	c->cur_regs = regs;
}

/* Caches current, from a syscall program: its pt_regs are ctx[0] (the x86
 * entry code passes task_pt_regs(current) to trace_sys_enter/trace_sys_exit),
 * which also gives the CPU the offset of pt_regs in every task's stack. */
static __always_inline void np_cache_current(struct np_cpu *c, struct task_struct *task,
					     __u64 *ctx)
{
	c->regs_off = (__u32)(ctx[0] - (__u64)task->stack);
	np_cache_task(c, task, ctx[0]);
}

/* Caches next as sched_switch brings it in. */
static __always_inline void np_cache_next(struct np_cpu *c, struct task_struct *next)
{
	__u32 off = c->regs_off;

	np_cache_task(c, next, off ? (__u64)next->stack + off : 0);
}

/* A syscall that may change the caller's (or, TSYNC, its siblings') mode. */
static __always_inline bool np_is_install(__u64 *ctx)
{
	long nr = (long)ctx[1];

	if (nr == NP_NR_IA32_PRCTL || nr == NP_NR_IA32_SECCOMP)
		return true;
	if (nr != NP_NR_SECCOMP && nr != NP_NR_PRCTL)
		return false;
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	unsigned long op = regs->di;
	if (nr == NP_NR_PRCTL)
		return op == NP_PR_SET_SECCOMP;
	return op <= NP_SECCOMP_SET_MODE_FILTER; /* SET_MODE_STRICT (0) or SET_MODE_FILTER */
}

static __always_inline void np_install_begin(struct task_struct *task)
{
	struct np_task_state *st =
		bpf_task_storage_get(&np_task_store, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!st) {
		/* Untracked: the count stays up and caches stay off (slower, still exact). */
		np_stat(NP_STAT_STATE_FAIL);
		__sync_fetch_and_add(&np_installs_inflight, 1);
		return;
	}
	if (st->installing)
		return;
	st->installing = 1;
	__sync_fetch_and_add(&np_installs_inflight, 1);
}

/* The install's own exit, whether it entered confined or not: never judged. */
static __always_inline bool np_install_end(struct task_struct *task, struct np_cpu *c)
{
	struct np_task_state *st = bpf_task_storage_get(&np_task_store, task, 0, 0);

	if (!st || !st->installing)
		return false;
	st->installing = 0;
	__sync_fetch_and_add(&np_install_gen, 1);
	__sync_fetch_and_add(&np_installs_inflight, -1);
	if (c)
		__sync_val_compare_and_swap(&c->entered, (__u64)task, 0);
	st->entered = 0;
	st->trap = 0;
	return true;
}

SEC("tp_btf/sys_enter")
int np_btf_enter(__u64 *ctx)
{
	struct task_struct *task;
	struct np_cpu *c;
	__u32 zero = 0;
	int mode;

	if (ctx[1] == NP_NR_IOCTL) {
		struct pt_regs *regs = (struct pt_regs *)ctx[0];
		np_recv_begin(regs->si, regs->dx);
	}
	if (np_is_install(ctx))
		np_install_begin(bpf_get_current_task_btf());
	c = bpf_map_lookup_elem(&np_slot, &zero); /* inlined from 6.10: no helper call */
	if (!c)
		return 0;
	mode = np_cached_mode(c, ctx);
	if (mode < 0) {
		task = bpf_get_current_task_btf();
		np_cache_current(c, task, ctx);
		mode = task->seccomp.mode;
	}
	if (mode != SECCOMP_MODE_FILTER)
		return 0;
	/* exit/exit_group never return: do_exit's last switch would only move the mark. */
	if (ctx[1] == NP_NR_EXIT || ctx[1] == NP_NR_EXIT_GROUP)
		return 0;
	c->entered = c->cur;
	return 0;
}

/* prev leaves the CPU: a mark in the slot moves into its task storage. */
static __always_inline void np_switch_out(__u64 *ctx, struct np_cpu *c)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct np_task_state *st;

	/* Not in a syscall entered on this CPU (preempted or sleeping outside
	 * one, or not confined): nothing to move. */
	if (c->entered != (__u64)prev)
		return;
	if (__sync_val_compare_and_swap(&c->entered, (__u64)prev, 0) != (__u64)prev)
		return;
	st = bpf_task_storage_get(&np_task_store, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (st)
		st->entered = 1;
	else
		np_stat(NP_STAT_STATE_FAIL);
}

SEC("tp_btf/sched_switch")
int np_btf_switch(__u64 *ctx)
{
	struct np_cpu *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&np_slot, &zero);
	if (!c)
		return 0;
	np_switch_out(ctx, c);
	/* next comes in: the syscall programs read its mode from here. */
	np_cache_next(c, (struct task_struct *)ctx[2]);
	return 0;
}

SEC("tp_btf/sys_exit")
int np_btf_exit(__u64 *ctx)
{
	struct task_struct *task;
	struct np_task_state *st;
	struct np_cpu *c;
	__u32 zero = 0;
	int mode;

	c = bpf_map_lookup_elem(&np_slot, &zero);
	if (!c)
		return 0;
	/* A supervisor's RECV returns (it may be unconfined): mark the notified thread. */
	if (np_recvs_inflight > 0 && ((struct pt_regs *)ctx[0])->orig_ax == NP_NR_IOCTL)
		np_recv_end(bpf_get_current_task_btf(), (long)ctx[1]);
	mode = np_cached_mode(c, ctx);
	if (mode < 0) {
		task = bpf_get_current_task_btf();
		/* Before the mode test: a failed install leaves the task unconfined. */
		if (np_installs_inflight > 0 && np_install_end(task, c))
			return 0;
		np_cache_current(c, task, ctx);
		mode = task->seccomp.mode;
	}
	if (mode != SECCOMP_MODE_FILTER)
		return 0;
	__u64 cur = c->cur;
	if (cur && c->entered == cur && __sync_val_compare_and_swap(&c->entered, cur, 0) == cur) {
		/* Entered on this CPU and never left it: paired. A mark left by a
		 * CONTINUE'd notification (this very call) ends here. */
		np_drop_notified(bpf_get_current_task_btf());
		return 0;
	}

	task = bpf_get_current_task_btf();
	/* The cached mode is as of the task's switch-in: a KILL action sets it
	 * DEAD without a filter install, and the skipped call then still passes
	 * sys_exit (the kill is counted at sched_process_exit). A traced task
	 * (ptrace stops switch it out and back in) is cached FILTER just before
	 * its kill; read the mode again on this slow path. */
	if (task->seccomp.mode != SECCOMP_MODE_FILTER)
		return 0;
	st = bpf_task_storage_get(&np_task_store, task, 0, 0);
	if (st && st->entered) {
		st->entered = 0;
		st->trap = 0; /* a SIGSYS not from seccomp (self-queued) must not linger */
		np_drop_notified(task);
		return 0;
	}
	if (!st) {
		/* Never seen before: the filter-installing call, a child's first
		 * return, or a syscall in flight at attach. Not judged; seen from now. */
		np_stat(NP_STAT_UNPAIRED_FIRST);
		if (!bpf_task_storage_get(&np_task_store, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
			np_stat(NP_STAT_STATE_FAIL);
		return 0;
	}
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	np_skipped(task, st, (long)regs->orig_ax, (long)ctx[1]);
	return 0;
}

static __always_inline int np_btf_sigsys(struct kernel_siginfo *info, struct task_struct *target)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct np_task_state *st;

	/* SEND_SIG_NOINFO / SEND_SIG_PRIV are 0 and 1, not pointers. */
	if ((unsigned long)info <= 1 || BPF_CORE_READ(info, si_code) != SYS_SECCOMP)
		return 0;
	if (BPF_CORE_READ(target, pid) != task->pid)
		return 0;
	/* KILL actions set mode DEAD before raising SIGSYS: counted at exit instead. */
	if (task->seccomp.mode != SECCOMP_MODE_FILTER)
		return 0;
	st = bpf_task_storage_get(&np_task_store, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		np_stat(NP_STAT_STATE_FAIL);
		return 0;
	}
	st->trap = 1;
	st->trap_data = BPF_CORE_READ(info, si_errno);
	return 0;
}

SEC("tp_btf/signal_generate")
int np_btf_signal(__u64 *ctx)
{
	if ((int)ctx[0] != SIGSYS)
		return 0;
	return np_btf_sigsys((struct kernel_siginfo *)ctx[1], (struct task_struct *)ctx[2]);
}

SEC("tp_btf/sched_process_exit")
int np_btf_proc_exit(__u64 *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();

	/* Killed inside an install: its sys_exit never comes. */
	if (np_installs_inflight > 0)
		np_install_end(task, 0);
	if (task->seccomp.mode == SECCOMP_MODE_FILTER) {
		/* Killed while waiting for its supervisor: the mark must not outlive it. */
		np_drop_notified(task);
		return 0;
	}
	if (task->seccomp.mode != SECCOMP_MODE_DEAD)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	np_emit(task, (__s32)regs->orig_ax, 0, NP_ACT_KILL);
	return 0;
}

/* ---------------------------------------------------------------- fexit */

SEC("fexit/__secure_computing")
int np_fexit_seccomp(__u64 *ctx)
{
	__u64 ret = 0;
	struct task_struct *task;
	struct np_task_state *st;

	/* bpf_get_func_ret: the signature lost its seccomp_data argument in 6.15. */
	bpf_get_func_ret(ctx, &ret);
	if ((int)ret != -1)
		return 0;
	task = bpf_get_current_task_btf();
	if (task->seccomp.mode != SECCOMP_MODE_FILTER)
		return 0; /* KILL (mode DEAD): counted at sched_process_exit */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	long nr = (long)regs->orig_ax;
	long rv = (long)regs->ax; /* syscall_set_return_value() put -errno here */
	st = bpf_task_storage_get(&np_task_store, task, 0, 0);
	if (st && st->trap) {
		st->trap = 0;
		np_emit(task, nr, st->trap_data, NP_ACT_TRAP);
		return 0;
	}
	np_emit(task, nr, (rv < 0 && rv >= -MAX_ERRNO) ? -rv : 0, NP_ACT_ERRNO);
	return 0;
}

#endif /* NP_CLASSIC_ONLY */

/* ---------------------------------------------------------- tracepoint */

struct np_tp_sys_enter {
	__u64 common;
	long id;
	unsigned long args[6];
};

struct np_tp_sys_exit {
	__u64 common;
	long id;
	long ret;
};

struct np_tp_signal_generate {
	__u64 common;
	int sig;
	int err;
	int code;
	char comm[16];
	int pid;
	int group;
	int result;
};

static __always_inline int np_tp_mode(struct task_struct *task)
{
	return BPF_CORE_READ(task, seccomp.mode);
}

/* No bpf_task_pt_regs for classic tracepoints: pt_regs sit at the top of the kernel stack. */
static __always_inline struct pt_regs *np_tp_regs(struct task_struct *task)
{
	void *stack = BPF_CORE_READ(task, stack);
	return (struct pt_regs *)((char *)stack + NP_THREAD_SIZE - bpf_core_type_size(struct pt_regs));
}

SEC("tracepoint/raw_syscalls/sys_enter")
int np_tp_enter(struct np_tp_sys_enter *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	if (ctx->id == NP_NR_IOCTL)
		np_recv_begin(ctx->args[1], ctx->args[2]);
	if (np_tp_mode(task) != SECCOMP_MODE_FILTER)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st) {
		st->entered = 1;
	} else {
		struct np_task_state init = {.entered = 1};
		bpf_map_update_elem(&np_tid_state, &tid, &init, BPF_ANY);
	}
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int np_tp_exit(struct np_tp_sys_exit *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	if (np_recvs_inflight > 0 && ctx->id == NP_NR_IOCTL)
		np_recv_end(task, ctx->ret);
	if (np_tp_mode(task) != SECCOMP_MODE_FILTER)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st && st->entered) {
		st->entered = 0;
		st->trap = 0;
		np_drop_notified(task);
		return 0;
	}
	if (!st) {
		struct np_task_state init = {};
		np_stat(NP_STAT_UNPAIRED_FIRST);
		if (bpf_map_update_elem(&np_tid_state, &tid, &init, BPF_ANY))
			np_stat(NP_STAT_STATE_FAIL);
		return 0;
	}
	np_skipped(task, st, ctx->id, ctx->ret);
	return 0;
}

/* fexit where task storage (5.11), bpf_task_pt_regs (5.15) and
 * bpf_get_func_ret (5.17) are missing, e.g. Debian 11's 5.10: the return
 * value is the context slot after __secure_computing's one argument (const
 * struct seccomp_data *; 6.15 dropped it, and there the verifier refuses this
 * slot and np_fexit_seccomp serves), pt_regs at the top of the kernel stack,
 * the trap mark in the tid-keyed hash np_tp_signal writes. */
SEC("fexit/__secure_computing")
int np_fexit_compat(__u64 *ctx)
{
	if ((int)ctx[1] != -1)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	if (np_tp_mode(task) != SECCOMP_MODE_FILTER)
		return 0; /* KILL (mode DEAD): counted at sched_process_exit */
	struct pt_regs *regs = np_tp_regs(task);
	long nr = (long)BPF_CORE_READ(regs, orig_ax);
	long rv = (long)BPF_CORE_READ(regs, ax);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st && st->trap) {
		st->trap = 0;
		np_emit(task, nr, st->trap_data, NP_ACT_TRAP);
		return 0;
	}
	np_emit(task, nr, (rv < 0 && rv >= -MAX_ERRNO) ? -rv : 0, NP_ACT_ERRNO);
	return 0;
}

/* SIGSYS from seccomp on a tid-keyed task (classic tracepoint strategies):
 * the next skipped exit of this thread is a TRAP, not an ERRNO. */
static __always_inline void np_tid_mark_trap(__u32 tid, int err)
{
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st) {
		st->trap = 1;
		st->trap_data = err;
	} else {
		struct np_task_state init = {.trap = 1, .trap_data = err};
		if (bpf_map_update_elem(&np_tid_state, &tid, &init, BPF_ANY))
			np_stat(NP_STAT_STATE_FAIL);
	}
}

SEC("tracepoint/signal/signal_generate")
int np_tp_signal(struct np_tp_signal_generate *ctx)
{
	if (ctx->sig != SIGSYS || ctx->code != SYS_SECCOMP)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if ((__u32)ctx->pid != tid)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	if (np_tp_mode(task) != SECCOMP_MODE_FILTER)
		return 0;
	np_tid_mark_trap(tid, ctx->err);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int np_tp_proc_exit(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	int mode = np_tp_mode(task);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (mode == SECCOMP_MODE_FILTER) {
		bpf_map_delete_elem(&np_tid_state, &tid); /* tids are recycled */
		np_drop_notified(task); /* killed while waiting for its supervisor */
		return 0;
	}
	if (mode != SECCOMP_MODE_DEAD)
		return 0;
	bpf_map_delete_elem(&np_tid_state, &tid);
	unsigned long nr = BPF_CORE_READ(np_tp_regs(task), orig_ax);
	np_emit(task, (__s32)nr, 0, NP_ACT_KILL);
	return 0;
}

/* --------------------------------------------------- tracepoint without BTF
 *
 * The same classic-tracepoint pairing for kernels without BTF (and no BTF
 * file): no CO-RE at all. The one task_struct field needed, seccomp.mode, is
 * read at np_off_seccomp_mode, which the loader finds first with np_nb_probe:
 * it snapshots the bytes of one of its own threads' task_struct before and
 * after that thread installs an allow-all filter, and looks for struct
 * seccomp's signature (mode 0 -> 2, filter_count 0 -> 1, filter NULL -> a
 * kernel pointer). Given up here: the arch (x86_64 assumed), mnt_ns (0),
 * USER_NOTIF classification (errno). A KILL's syscall comes from the pt_regs
 * at the top of the kernel stack, whose task->stack offset the probe finds
 * too (np_off_stack; nr -1 when it did not).
 */
const volatile __u32 np_off_seccomp_mode = 0;
const volatile __u32 np_off_stack = 0; /* task->stack; 0: not found, a KILL's nr is then -1 */
const volatile __u32 np_probe_tid = 0;

#define NP_PROBE_BYTES 16384
#define NP_PROBE_CANDIDATES 32
#define NP_PT_REGS_SIZE 168   /* x86_64 struct pt_regs: 21 registers, an ABI (user_regs_struct) */
#define NP_PT_REGS_DI 112
#define NP_PT_REGS_ORIG_AX 120

/* task->stack candidates from user space (kernel addresses aligned to the
 * stack size), and whether each one's pt_regs match the probing syscall. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NP_PROBE_CANDIDATES);
	__type(key, __u32);
	__type(value, __u64);
} np_probe_cand SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NP_PROBE_CANDIDATES);
	__type(key, __u32);
	__type(value, __u64);
} np_probe_hit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[NP_PROBE_BYTES]);
} np_probe_snap SEC(".maps");

SEC("tracepoint/raw_syscalls/sys_enter")
int np_nb_probe(struct np_tp_sys_enter *ctx)
{
	__u32 zero = 0;
	if ((__u32)bpf_get_current_pid_tgid() != np_probe_tid)
		return 0;
	void *buf = bpf_map_lookup_elem(&np_probe_snap, &zero);
	if (buf)
		bpf_probe_read_kernel(buf, NP_PROBE_BYTES, (void *)bpf_get_current_task());
	/* A candidate is task->stack if the pt_regs at its top hold this very
	 * syscall: orig_ax is the nr and di the first argument. */
	for (__u32 i = 0; i < NP_PROBE_CANDIDATES; i++) {
		__u32 k = i;
		__u64 *cand = bpf_map_lookup_elem(&np_probe_cand, &k);
		__u64 *hit = bpf_map_lookup_elem(&np_probe_hit, &k);
		if (!cand || !hit || !*cand)
			continue;
		char *regs = (char *)*cand + NP_THREAD_SIZE - NP_PT_REGS_SIZE;
		__u64 orig_ax = 0, di = 0;
		bpf_probe_read_kernel(&orig_ax, 8, regs + NP_PT_REGS_ORIG_AX);
		bpf_probe_read_kernel(&di, 8, regs + NP_PT_REGS_DI);
		*hit = orig_ax == (__u64)ctx->id && di == ctx->args[0];
	}
	return 0;
}

static __always_inline int np_nb_mode(void)
{
	int mode = 0;
	bpf_probe_read_kernel(&mode, sizeof(mode),
			      (char *)bpf_get_current_task() + np_off_seccomp_mode);
	return mode;
}

SEC("tracepoint/raw_syscalls/sys_enter")
int np_nb_enter(struct np_tp_sys_enter *ctx)
{
	if (np_nb_mode() != SECCOMP_MODE_FILTER)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st) {
		st->entered = 1;
	} else {
		struct np_task_state init = {.entered = 1};
		bpf_map_update_elem(&np_tid_state, &tid, &init, BPF_ANY);
	}
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int np_nb_exit(struct np_tp_sys_exit *ctx)
{
	if (np_nb_mode() != SECCOMP_MODE_FILTER)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct np_task_state *st = bpf_map_lookup_elem(&np_tid_state, &tid);
	if (st && st->entered) {
		st->entered = 0;
		st->trap = 0;
		return 0;
	}
	if (!st) {
		struct np_task_state init = {};
		np_stat(NP_STAT_UNPAIRED_FIRST);
		if (bpf_map_update_elem(&np_tid_state, &tid, &init, BPF_ANY))
			np_stat(NP_STAT_STATE_FAIL);
		return 0;
	}
	np_skipped_x((struct task_struct *)bpf_get_current_task(), st, ctx->id, ctx->ret, 0);
	return 0;
}

SEC("tracepoint/signal/signal_generate")
int np_nb_signal(struct np_tp_signal_generate *ctx)
{
	if (ctx->sig != SIGSYS || ctx->code != SYS_SECCOMP)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	if ((__u32)ctx->pid != tid || np_nb_mode() != SECCOMP_MODE_FILTER)
		return 0;
	np_tid_mark_trap(tid, ctx->err);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int np_nb_proc_exit(void *ctx)
{
	int mode = np_nb_mode();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (mode != SECCOMP_MODE_FILTER && mode != SECCOMP_MODE_DEAD)
		return 0;
	bpf_map_delete_elem(&np_tid_state, &tid); /* tids are recycled */
	if (mode != SECCOMP_MODE_DEAD)
		return 0;
	__s64 nr = -1;
	if (np_off_stack) {
		char *task = (char *)bpf_get_current_task();
		char *stack = 0;
		bpf_probe_read_kernel(&stack, sizeof(stack), task + np_off_stack);
		if (stack)
			bpf_probe_read_kernel(&nr, sizeof(nr),
					      stack + NP_THREAD_SIZE - NP_PT_REGS_SIZE + NP_PT_REGS_ORIG_AX);
	}
	np_emit_x((struct task_struct *)bpf_get_current_task(), (__s32)nr, 0, NP_ACT_KILL, 0);
	return 0;
}

/* ------------------------------------------------------- cgroup creation
 *
 * A container that lives a few milliseconds is gone, cgroup and all, before
 * the agent reads its denials: resolving bpf_get_current_cgroup_id() by
 * walking /sys/fs/cgroup then finds nothing. So every cgroup2 directory is
 * announced as it is created (cgroup_mkdir: kernel/cgroup/cgroup.c
 * cgroup_mkdir() -> TRACE_CGROUP_PATH(mkdir, cgrp), which formats the path
 * relative to the hierarchy root only while the tracepoint has a probe) and
 * the agent keeps id -> path. Once per mkdir, nothing per syscall. Only the
 * default hierarchy (hierarchy_id 0, cgrp_dfl_root: the first root
 * cgroup_init() sets up) is sent: v1 hierarchies have their own ids, which
 * bpf_get_current_cgroup_id() never returns.
 */
static __always_inline void np_cgroup_created(__u64 id, __u32 level, const char *path)
{
	struct np_cgroup_event *ev = bpf_ringbuf_reserve(&np_cgroups, sizeof(*ev), 0);
	if (!ev) {
		np_stat(NP_STAT_CGROUP_DROP);
		return;
	}
	ev->id = id;
	ev->level = level;
	long n = bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), path);
	ev->len = n > 0 ? (__u32)n : 0;
	bpf_ringbuf_submit(ev, 0);
}

#ifndef NP_CLASSIC_ONLY
SEC("tp_btf/cgroup_mkdir")
int np_btf_cgroup_mkdir(__u64 *ctx)
{
	struct cgroup *cgrp = (struct cgroup *)ctx[0];

	if (BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	np_cgroup_created(BPF_CORE_READ(cgrp, kn, id), BPF_CORE_READ(cgrp, level),
			  (const char *)ctx[1]);
	return 0;
}
#endif

/* The classic event's record (tracefs events/cgroup/cgroup_mkdir/format: the
 * same from 5.5, when the id became the 64-bit kernfs id, to 6.18). No CO-RE,
 * so the BTF-free variant uses it too; the loader checks the format file's
 * offsets before attaching it. */
struct np_tp_cgroup {
	__u64 common;
	int root;
	int level;
	__u64 id;
	__u32 path_loc; /* __data_loc: offset in the low 16 bits, length in the high */
};

SEC("tracepoint/cgroup/cgroup_mkdir")
int np_tp_cgroup_mkdir(struct np_tp_cgroup *ctx)
{
	if (ctx->root != 0)
		return 0;
	np_cgroup_created(ctx->id, ctx->level, (const char *)ctx + (ctx->path_loc & 0xffff));
	return 0;
}
