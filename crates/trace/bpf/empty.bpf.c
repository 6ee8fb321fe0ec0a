// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * An empty tp_btf sys_enter/sys_exit pair: the floor of any tracepoint-based
 * design (attaching any syscall tracepoint moves every task onto the slow
 * syscall path). The overhead benchmark measures nodeproof against it.
 */
#include "include/np_core.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("tp_btf/sys_enter")
int np_empty_enter(__u64 *ctx)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int np_empty_exit(__u64 *ctx)
{
	return 0;
}
