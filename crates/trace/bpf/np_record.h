/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * The recorder's layout shared between record.bpf.c and the agent: the
 * single definition. crates/trace/build/layout.rs reads this header at build
 * time into the Rust structs and constants of crates/trace/src/abi.rs, and
 * refuses any C it does not read (see the subset there).
 */
#ifndef NP_RECORD_H
#define NP_RECORD_H

/* x32's __X32_SYSCALL_BIT, which its numbers carry in seccomp_data.nr. */
#define NP_X32_BIT 0x40000000U

/* Arch indexes: an x86_64 task's three kinds of call. */
#define NP_REC_X86_64 0U
#define NP_REC_I386 1U
#define NP_REC_X32 2U
#define NP_REC_ARCHES 3U

/* Containers recorded at once: one slot each (a restarted container's old
 * slot is read out and freed). Recordings are asked for a few pods, not a
 * node's every pod: 256 is a few dozen pods' containers with room to spare;
 * beyond it user space refuses the next container (RecordError::SlotsFull). */
#define NP_REC_SLOTS 256U
/* Syscall numbers a bitmap holds: x86_64's table ends below 470, i386's
 * below 470, x32's (bit stripped) below 550. A number beyond is lost. */
#define NP_REC_NRS 1024U
#define NP_REC_WORDS (NP_REC_NRS / 64U)

/* Values kept per (slot, arch, syscall, argument) unless the loader sets
 * np_rec_value_cap (aya override_global). */
#define NP_REC_VALUE_CAP 64U
/* Entries of np_rec_values unless the loader shrinks it (aya set_max_entries). */
#define NP_REC_MAX_VALUES 16384U

struct np_rec_bits {
	__u64 w[NP_REC_WORDS];
};

struct np_rec_arg {
	__u32 slot;
	__u16 nr;
	__u8 arch;
	__u8 index;
};

struct np_rec_value {
	__u64 value;
	struct np_rec_arg arg;
};

struct np_rec_count {
	__u32 n;    /* values in np_rec_values for this argument */
	__u32 over; /* 1: a value beyond np_rec_value_cap was not kept */
};

#endif
