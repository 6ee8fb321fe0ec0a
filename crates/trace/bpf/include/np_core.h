/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * The few kernel types the nodeproof programs read, marked
 * preserve_access_index so that clang emits CO-RE relocations and the loader
 * rewrites every offset against the running kernel's BTF. A full vmlinux.h
 * (~134k lines) would work too; this keeps the build fast and the object tied
 * only to field names, not to one kernel's layout.
 */
#ifndef NP_CORE_H
#define NP_CORE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* Map type / flag constants (uapi/linux/bpf.h) used by the map definitions. */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_LOCAL_STORAGE_GET_F_CREATE (1ULL << 0)

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r9;
	unsigned long r8;
	unsigned long r10;
	unsigned long bp;
	unsigned long bx;
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long cx;
	unsigned long ax;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));
struct thread_info {
	u32 status;
} __attribute__((preserve_access_index));
#else
#error "nodeproof eBPF programs: only x86_64 is wired up so far"
#endif

struct seccomp {
	int mode;
} __attribute__((preserve_access_index));

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct mnt_namespace {
	struct ns_common ns;
} __attribute__((preserve_access_index));

struct nsproxy {
	struct mnt_namespace *mnt_ns;
} __attribute__((preserve_access_index));

struct pid_namespace {
	struct ns_common ns;
} __attribute__((preserve_access_index));

/* One of a pid's numbers: the pid in one namespace of its chain. */
struct upid {
	int nr;
	struct pid_namespace *ns;
} __attribute__((preserve_access_index));

/* numbers[0..level]: the pid in the initial namespace first, its own last. */
struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	void *stack;
	int pid;
	int tgid;
	char comm[16];
	struct nsproxy *nsproxy;
	struct seccomp seccomp;
	struct pid *thread_pid;
} __attribute__((preserve_access_index));

struct kernfs_node {
	u64 id;
} __attribute__((preserve_access_index));

struct cgroup_root {
	int hierarchy_id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
	struct cgroup_root *root;
	int level;
} __attribute__((preserve_access_index));

struct kernel_siginfo {
	int si_signo;
	int si_errno;
	int si_code;
} __attribute__((preserve_access_index));

#endif
