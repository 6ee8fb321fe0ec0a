/* The kernel matrix's denial workload (agent/tests/trace_kernels.rs), built
 * static with libseccomp so it runs in a bare initramfs. Each mode installs
 * its own filter and makes a known number of calls:
 *   errno  mkdir -> EPERM x5, rmdir -> EACCES x3, chmod -> ENOSPC x2, then two
 *          threads with mkdir x4 each and a forked child that execs
 *          `np_wl execd` (the filter inherited): mkdir x3 (EPERM 16 in all)
 *   killthread  a thread under KILL_THREAD on rename dies at its call; the
 *          process lives on
 *   nested a filter (unlink -> EPERM), then a second one (mknod -> EEXIST):
 *          unlink x2, mknod x2
 *   notify USER_NOTIF on chdir, answered -EIO by an unconfined supervisor
 *          thread of the same process: chdir x2
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

static void *killed_thread(void *arg)
{
	(void)arg;
	filter(SCMP_SYS(rename), SCMP_ACT_KILL_THREAD);
	syscall(SYS_rename, P, Q);
	return NULL; /* not reached */
}

static int notify_pipe[2];

/* Started before the filter, so unconfined: answers two notifications with
 * -EIO, at once. */
static void *supervisor(void *arg)
{
	int fd;
	(void)arg;
	if (read(notify_pipe[0], &fd, sizeof(fd)) != sizeof(fd))
		return NULL;
	for (int i = 0; i < 2; i++) {
		struct seccomp_notif *req;
		struct seccomp_notif_resp *resp;
		if (seccomp_notify_alloc(&req, &resp))
			return NULL;
		if (seccomp_notify_receive(fd, req) == 0) {
			/* At once, often before the caller sleeps: the pairing
			 * strategies tell a notified call by this RECV, not by a sleep
			 * (an answer that beat the sleep was once counted as errno on
			 * 6.12 under tp_btf with two vCPUs). */
			resp->id = req->id;
			resp->error = -EIO;
			resp->val = 0;
			resp->flags = 0;
			seccomp_notify_respond(fd, resp);
		}
		seccomp_notify_free(req, resp);
	}
	return NULL;
}

static int notify(void)
{
	pthread_t t;
	if (pipe(notify_pipe))
		return 2;
	pthread_create(&t, NULL, supervisor, NULL);
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(chdir), 0) || seccomp_load(ctx))
		return 2;
	int fd = seccomp_notify_fd(ctx);
	if (write(notify_pipe[1], &fd, sizeof(fd)) != sizeof(fd))
		return 2;
	int failed = 0;
	for (int i = 0; i < 2; i++)
		failed += syscall(SYS_chdir, P) == -1 && errno == EIO;
	pthread_join(t, NULL);
	return failed == 2 ? 0 : 5;
}

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
			execl("/bin/np_wl", "np_wl", "execd", (char *)NULL); /* the guest's path */
			_exit(4);
		}
		waitpid(pid, NULL, 0);
		return 0;
	}
	if (!strcmp(mode, "execd")) {
		for (int i = 0; i < 3; i++)
			syscall(SYS_mkdir, P, 0755);
		return 0;
	}
	if (!strcmp(mode, "killthread")) {
		pthread_t t;
		pthread_create(&t, NULL, killed_thread, NULL);
		pthread_join(t, NULL);
		return 0;
	}
	if (!strcmp(mode, "nested")) {
		filter(SCMP_SYS(unlink), SCMP_ACT_ERRNO(EPERM));
		filter(SCMP_SYS(mknod), SCMP_ACT_ERRNO(EEXIST));
		for (int i = 0; i < 2; i++) {
			syscall(SYS_unlink, P);
			syscall(SYS_mknod, P, 0644, 0);
		}
		return 0;
	}
	if (!strcmp(mode, "notify"))
		return notify();
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
