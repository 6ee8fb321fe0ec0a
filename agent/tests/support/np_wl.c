/* The kernel matrix's denial workload (agent/tests/trace_kernels.rs), built
 * static with libseccomp so it runs in a bare initramfs. Each mode installs
 * its own filter and makes a known number of calls:
 *   errno  mkdir -> EPERM x5, rmdir -> EACCES x3, chmod -> ENOSPC x2, then two
 *          threads with mkdir x4 each and a forked child with mkdir x3
 *          (mkdir EPERM 16 in all)
 *   kill   symlink -> KILL_PROCESS (the process dies on its first call)
 *   trap   link -> TRAP x3, SIGSYS caught
 *   busy   unconfined getppid x20000, then confined (allow-all but chmod)
 *          getppid x20000 and nanosleep x20: no denial at all
 *   unconfined  getppid x20000 without a filter
 *   confined    getppid x20000 under an allow-all-but-chmod filter */
#include <errno.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *P = "/nonexistent-nodeproof/x";
static const char *Q = "/nonexistent-nodeproof/y";

static void filter(int nr, uint32_t action)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx || seccomp_rule_add(ctx, action, nr, 0) || seccomp_load(ctx)) {
		fprintf(stderr, "np_wl: filter failed\n");
		exit(2);
	}
	seccomp_release(ctx);
}

static void *mkdirs(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++)
		syscall(SYS_mkdir, P, 0755);
	return NULL;
}

static void on_sigsys(int sig) { (void)sig; }

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "errno")) {
		scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
		seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mkdir), 0);
		seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(rmdir), 0);
		seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSPC), SCMP_SYS(chmod), 0);
		if (seccomp_load(ctx))
			return 2;
		for (int i = 0; i < 5; i++)
			syscall(SYS_mkdir, P, 0755);
		for (int i = 0; i < 3; i++)
			syscall(SYS_rmdir, P);
		for (int i = 0; i < 2; i++)
			syscall(SYS_chmod, P, 0755);
		pthread_t t[2];
		for (int i = 0; i < 2; i++)
			pthread_create(&t[i], NULL, mkdirs, NULL);
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 0; i < 3; i++)
				syscall(SYS_mkdir, P, 0755);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		return 0;
	}
	if (!strcmp(mode, "kill")) {
		filter(SCMP_SYS(symlink), SCMP_ACT_KILL_PROCESS);
		syscall(SYS_symlink, P, Q);
		return 3; /* not reached */
	}
	if (!strcmp(mode, "trap")) {
		signal(SIGSYS, on_sigsys);
		filter(SCMP_SYS(link), SCMP_ACT_TRAP);
		for (int i = 0; i < 3; i++)
			syscall(SYS_link, P, Q);
		return 0;
	}
	if (!strcmp(mode, "busy")) {
		for (int i = 0; i < 20000; i++)
			syscall(SYS_getppid);
		filter(SCMP_SYS(chmod), SCMP_ACT_ERRNO(EPERM));
		for (int i = 0; i < 20000; i++)
			syscall(SYS_getppid);
		struct timespec ts = {0, 1000000};
		for (int i = 0; i < 20; i++)
			nanosleep(&ts, NULL);
		return 0;
	}
	if (!strcmp(mode, "unconfined") || !strcmp(mode, "confined")) {
		if (!strcmp(mode, "confined"))
			filter(SCMP_SYS(chmod), SCMP_ACT_ERRNO(EPERM));
		for (int i = 0; i < 20000; i++)
			syscall(SYS_getppid);
		return 0;
	}
	fprintf(stderr, "usage: np_wl errno|kill|trap|busy|unconfined|confined\n");
	return 64;
}
