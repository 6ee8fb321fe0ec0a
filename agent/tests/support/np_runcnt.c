/* Prints the summed run_cnt (bpf_prog_info, counted while
 * kernel.bpf_stats_enabled=1) of the loaded BPF programs whose name starts
 * with argv[1]: the kernel matrix's evidence of which tasks a program runs
 * for (agent/tests/trace_kernels.rs). Static, no libbpf: the guest has none. */
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long bpf(int cmd, union bpf_attr *a)
{
	return syscall(SYS_bpf, cmd, a, sizeof(*a));
}

int main(int argc, char **argv)
{
	const char *prefix = argc > 1 ? argv[1] : "";
	unsigned long long total = 0;
	int found = 0;
	__u32 id = 0;

	for (;;) {
		union bpf_attr a;
		memset(&a, 0, sizeof(a));
		a.start_id = id;
		if (bpf(BPF_PROG_GET_NEXT_ID, &a))
			break;
		id = a.next_id;
		memset(&a, 0, sizeof(a));
		a.prog_id = id;
		int fd = bpf(BPF_PROG_GET_FD_BY_ID, &a);
		if (fd < 0)
			continue;
		struct bpf_prog_info info;
		memset(&info, 0, sizeof(info));
		memset(&a, 0, sizeof(a));
		a.info.bpf_fd = fd;
		a.info.info_len = sizeof(info);
		a.info.info = (__u64)(unsigned long)&info;
		if (!bpf(BPF_OBJ_GET_INFO_BY_FD, &a) &&
		    !strncmp(info.name, prefix, strlen(prefix))) {
			total += info.run_cnt;
			found = 1;
		}
		close(fd);
	}
	if (!found) {
		fprintf(stderr, "np_runcnt: no program named %s*\n", prefix);
		return 1;
	}
	printf("%llu\n", total);
	return 0;
}
