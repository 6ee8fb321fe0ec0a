// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * nodeproof record: which syscalls the tasks of chosen cgroups make, per
 * audit arch, and the values of the arguments a profile's rules compare,
 * kept in the kernel as sets (a bit per syscall, a hash entry per value),
 * never as an event per call. User space (crates/trace/src/record.rs) picks
 * the cgroups, fills the watch and reads the sets.
 *
 * One program on sys_enter: tp_btf (the pt_regs are ctx[0], the syscall id
 * ctx[1], as the x86 entry code passes them to trace_sys_enter()), and the
 * same on the classic raw_syscalls tracepoint, whose record carries the six
 * arguments, for kernels that refuse tp_btf. sys_enter runs after seccomp
 * (syscall_trace_enter() calls __secure_computing() first): a call the
 * filter skips is not recorded, one it lets run is. That is what a profile
 * diff wants: the calls the container made and got through.
 *
 * Arch: on x86_64 a task makes three kinds of call. i386 ones (int 0x80,
 * sysenter, a 32-bit binary) run with TS_COMPAT in thread_info.status, as
 * in_ia32_syscall() (arch/x86/include/asm/syscall.h) tells them; x32 ones
 * carry __X32_SYSCALL_BIT (bit 30) in the number, which seccomp_data.nr
 * keeps too. Each is an arch of its own here, the x32 bit stripped for the
 * bitmap and the watch and put back by user space.
 *
 * Cost: a task whose cgroup is not recorded pays bpf_get_current_cgroup_id()
 * and one hash lookup; a recorded one an array lookup and a test of its bit
 * (a write only the first time), an array lookup of the watch and, for a
 * watched call, per watched argument a per-CPU array lookup (the last value
 * kept) and, when the value differs from it, one hash lookup.
 */
#include "include/np_core.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "np_record.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TS_COMPAT 0x0002U
#define EEXIST 17

/* Values kept per (slot, arch, syscall, argument): beyond it the argument
 * is marked incomplete. Set by the loader (aya override_global). */
const volatile __u32 np_rec_value_cap = NP_REC_VALUE_CAP;

/* cgroup v2 id (the inode of the cgroup directory, what
 * bpf_get_current_cgroup_id() returns) -> slot. A container's own cgroup
 * and the cgroups under it (CRI-O's `container`, a process's own sub-cgroup);
 * 4096 covers every slot with sub-cgroups to spare. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} np_rec_cgroups SEC(".maps");

/* [slot * NP_REC_ARCHES + arch]: the syscalls seen, a bit each;
 * 768 entries of 128 bytes, 96 KiB. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NP_REC_SLOTS * NP_REC_ARCHES);
	__type(key, __u32);
	__type(value, struct np_rec_bits);
} np_rec_bits SEC(".maps");

/* [arch * NP_REC_NRS + nr]: the argument indexes (bit i = args[i]) whose
 * values to keep, from the profiles' rules; one watch for all slots. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NP_REC_ARCHES * NP_REC_NRS);
	__type(key, __u32);
	__type(value, __u32);
} np_rec_watch SEC(".maps");

/* The set of (slot, arch, nr, index, value); the loader may shrink it
 * (aya set_max_entries). 16384 entries of 16 + 8 bytes, preallocated:
 * about 1.5 MiB with the hash's own overhead. A full set counts lost. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NP_REC_MAX_VALUES);
	__type(key, struct np_rec_value);
	__type(value, __u8);
} np_rec_values SEC(".maps");

/* Per (slot, arch, nr, index): how many values are kept, so that one
 * argument (an mmap length) cannot fill the set for every other. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct np_rec_arg);
	__type(value, struct np_rec_count);
} np_rec_counts SEC(".maps");

/* [slot]: calls not fully recorded (a full map, a number beyond the bitmap). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NP_REC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} np_rec_lost SEC(".maps");

/* The last value kept on this CPU: a loop making one call with the same
 * arguments (the common case of a hot path) finds it here, an array
 * lookup, instead of hashing into np_rec_values every time. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct np_rec_value);
} np_rec_last SEC(".maps");

static __always_inline void np_rec_lose(__u32 slot)
{
	__u64 *l = bpf_map_lookup_elem(&np_rec_lost, &slot);
	if (l)
		__sync_fetch_and_add(l, 1);
}

/* Keeps one argument's value; false when it was lost. */
static __always_inline bool np_rec_value(__u32 slot, __u32 arch, __u32 nr, __u32 index, __u64 value)
{
	struct np_rec_value key = {
		.value = value,
		.arg = {.slot = slot, .nr = nr, .arch = arch, .index = index},
	};
	struct np_rec_count zero = {}, *c;
	__u8 one = 1;
	long err;

	__u32 zero32 = 0;
	struct np_rec_value *last = bpf_map_lookup_elem(&np_rec_last, &zero32);

	if (last && last->value == value && *(__u64 *)&last->arg == *(__u64 *)&key.arg)
		return true;
	if (bpf_map_lookup_elem(&np_rec_values, &key)) {
		if (last)
			*last = key;
		return true;
	}
	c = bpf_map_lookup_elem(&np_rec_counts, &key.arg);
	if (!c) {
		bpf_map_update_elem(&np_rec_counts, &key.arg, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&np_rec_counts, &key.arg);
		if (!c)
			return false;
	}
	if (c->n >= np_rec_value_cap) {
		/* Not lost: the argument is marked incomplete instead. */
		if (!c->over)
			c->over = 1;
		return true;
	}
	err = bpf_map_update_elem(&np_rec_values, &key, &one, BPF_NOEXIST);
	if (err == 0) {
		__sync_fetch_and_add(&c->n, 1);
		if (last)
			*last = key;
		return true;
	}
	/* Another CPU kept the same value first. */
	if (err == -EEXIST)
		return true;
	/* The set is full: this argument's values are incomplete too. */
	if (!c->over)
		c->over = 1;
	return false;
}

/* The calls of a recorded task: its bit, then the watched arguments. */
static __always_inline void np_rec(__u32 slot, __u32 arch, __u64 id, __u32 m, const __u64 *args)
{
	__u32 nr = (__u32)id;
	__u32 key;
	struct np_rec_bits *b;

	if (arch == NP_REC_X86_64 && (nr & NP_X32_BIT)) {
		arch = NP_REC_X32;
		nr &= ~NP_X32_BIT;
	}
	if (nr >= NP_REC_NRS) {
		np_rec_lose(slot);
		return;
	}
	key = slot * NP_REC_ARCHES + arch;
	b = bpf_map_lookup_elem(&np_rec_bits, &key);
	if (!b)
		return;
	__u64 bit = 1ULL << (nr & 63);
	__u64 *w = &b->w[nr >> 6];
	/* Read first: after the first call only reads, no cache line bouncing. */
	if (!(*w & bit))
		__sync_fetch_and_or(w, bit);

	for (__u32 i = 0; i < 6; i++) {
		if (!(m & (1U << i)))
			continue;
		__u64 v = args[i];
		if (arch == NP_REC_I386)
			v &= 0xffffffffULL; /* seccomp_data of a compat call holds 32-bit values */
		if (!np_rec_value(slot, arch, nr, i, v))
			np_rec_lose(slot);
	}
}

/* The watched arguments of a call (0: none); x32 calls have their own watch. */
static __always_inline __u32 np_rec_watched(__u32 arch, __u64 id)
{
	__u32 nr = (__u32)id;
	__u32 key, *mask;

	if (arch == NP_REC_X86_64 && (nr & NP_X32_BIT)) {
		arch = NP_REC_X32;
		nr &= ~NP_X32_BIT;
	}
	if (nr >= NP_REC_NRS)
		return 0;
	key = arch * NP_REC_NRS + nr;
	mask = bpf_map_lookup_elem(&np_rec_watch, &key);
	return mask ? *mask : 0;
}

SEC("tp_btf/sys_enter")
int np_rec_btf_enter(__u64 *ctx)
{
	__u64 cg = bpf_get_current_cgroup_id();
	__u32 *slot = bpf_map_lookup_elem(&np_rec_cgroups, &cg);
	struct pt_regs *regs;
	struct task_struct *task;
	__u64 args[6] = {};
	__u32 arch, m;

	if (!slot)
		return 0;
	task = bpf_get_current_task_btf();
	arch = (task->thread_info.status & TS_COMPAT) ? NP_REC_I386 : NP_REC_X86_64;
	m = np_rec_watched(arch, ctx[1]);
	if (m) {
		regs = (struct pt_regs *)ctx[0];
		if (arch == NP_REC_I386) {
			/* The i386 calling convention (arch/x86/entry/syscall_32.c). */
			args[0] = regs->bx;
			args[1] = regs->cx;
			args[2] = regs->dx;
			args[3] = regs->si;
			args[4] = regs->di;
			args[5] = regs->bp;
		} else {
			args[0] = regs->di;
			args[1] = regs->si;
			args[2] = regs->dx;
			args[3] = regs->r10;
			args[4] = regs->r8;
			args[5] = regs->r9;
		}
	}
	np_rec(*slot, arch, ctx[1], m, args);
	return 0;
}

struct np_tp_sys_enter {
	__u64 common;
	long id;
	unsigned long args[6];
};

/* The classic tracepoint's record holds the arguments as
 * syscall_get_arguments() gives them, in either convention. */
SEC("tracepoint/raw_syscalls/sys_enter")
int np_rec_tp_enter(struct np_tp_sys_enter *ctx)
{
	__u64 cg = bpf_get_current_cgroup_id();
	__u32 *slot = bpf_map_lookup_elem(&np_rec_cgroups, &cg);
	struct task_struct *task;
	__u64 args[6];
	__u32 arch, status;

	if (!slot)
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	status = BPF_CORE_READ(task, thread_info.status);
	arch = (status & TS_COMPAT) ? NP_REC_I386 : NP_REC_X86_64;
	for (int i = 0; i < 6; i++)
		args[i] = ctx->args[i];
	np_rec(*slot, arch, ctx->id, np_rec_watched(arch, ctx->id), args);
	return 0;
}
