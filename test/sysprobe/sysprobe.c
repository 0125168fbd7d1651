/*
 * sysprobe: makes one system call directly (no libc wrapper that could
 * pick another syscall or check the arguments first) and prints "ok" or
 * the errno's name, for the seccomp tests. Built static by the test.
 *
 *   sysprobe unshare-userns    unshare(CLONE_NEWUSER): needs no capability
 *   sysprobe mount DIR         mount("none", DIR, "tmpfs"): CAP_SYS_ADMIN;
 *                              a missing DIR fails ENOENT before that check
 *   sysprobe keyctl            keyctl(KEYCTL_GET_KEYRING_ID, user keyring)
 *   sysprobe ptrace-sibling    PTRACE_ATTACH from one child to its sibling,
 *                              which runs as uid 65534: CAP_SYS_PTRACE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEYCTL_GET_KEYRING_ID 0
#define KEY_SPEC_USER_KEYRING -4

static const char *errname(int e) {
	switch (e) {
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EACCES: return "EACCES";
	case ENOSYS: return "ENOSYS";
	case EINVAL: return "EINVAL";
	case ESRCH: return "ESRCH";
	}
	static char buf[32];
	snprintf(buf, sizeof buf, "errno %d", e);
	return buf;
}

static int report(long r) {
	if (r < 0) {
		printf("%s\n", errname(errno));
		return 1;
	}
	printf("ok\n");
	return 0;
}

/* ptrace_sibling: the tracee sleeps as another uid; the tracer, its
 * sibling, attaches and detaches and exits with 0 or the errno. */
static int ptrace_sibling(void) {
	int ready[2];
	if (pipe(ready) < 0)
		return report(-1);
	pid_t tracee = fork();
	if (tracee == 0) {
		close(ready[0]);
		if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(2);
		write(ready[1], "x", 1);
		for (;;)
			pause();
	}
	close(ready[1]);
	char c;
	if (tracee < 0 || read(ready[0], &c, 1) != 1) {
		fprintf(stderr, "sysprobe: the tracee did not start\n");
		return 2;
	}
	pid_t tracer = fork();
	if (tracer == 0) {
		if (syscall(SYS_ptrace, PTRACE_ATTACH, tracee, 0, 0) < 0)
			_exit(errno);
		waitpid(tracee, NULL, __WALL);
		syscall(SYS_ptrace, PTRACE_DETACH, tracee, 0, 0);
		_exit(0);
	}
	int st = 0;
	waitpid(tracer, &st, 0);
	kill(tracee, SIGKILL);
	waitpid(tracee, NULL, 0);
	if (!WIFEXITED(st))
		return 2;
	errno = WEXITSTATUS(st);
	return report(errno ? -1 : 0);
}

int main(int argc, char **argv) {
	if (argc >= 2 && strcmp(argv[1], "unshare-userns") == 0)
		return report(syscall(SYS_unshare, CLONE_NEWUSER));
	if (argc >= 3 && strcmp(argv[1], "mount") == 0)
		return report(syscall(SYS_mount, "none", argv[2], "tmpfs", 0, NULL));
	if (argc >= 2 && strcmp(argv[1], "keyctl") == 0)
		return report(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0));
	if (argc >= 2 && strcmp(argv[1], "ptrace-sibling") == 0)
		return ptrace_sibling();
	fprintf(stderr, "usage: sysprobe unshare-userns | mount DIR | keyctl | ptrace-sibling\n");
	return 2;
}
