/* The cost of loading the seccomp filter, the kernel's part of it: a fresh
 * child sets no_new_privs and times its seccomp(SECCOMP_SET_MODE_FILTER)
 * call (the kernel checks the program, converts it to eBPF and JITs it).
 * Three programs, interleaved: a one-instruction filter (the floor),
 * libseccomp's compile of the rule table (the reference) and nsbox's, the
 * one the jail loads.  Prints "label<TAB>us us ..." lines for bench/report.py.
 * Usage: seccomp-load RUNS */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "seccomp-prebuilt.h"
#include "seccomp-rules.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One load in a fresh child; its time in us, or -1. */
static double load_once(const struct seccomp_prog *p)
{
	struct sock_fprog f = { .len = p->len, .filter = p->insns };
	double t = -1;
	int fds[2], st;
	pid_t c;

	if (pipe(fds) < 0)
		return -1;
	c = fork();
	if (c == 0) {
		double a, b;

		close(fds[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			_exit(1);
		a = now_us();
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f) < 0)
			_exit(1);
		b = now_us() - a;
		_exit(write(fds[1], &b, sizeof(b)) == sizeof(b) ? 0 : 1);
	}
	close(fds[1]);
	if (c > 0 && read(fds[0], &t, sizeof(t)) != sizeof(t))
		t = -1;
	close(fds[0]);
	if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return t;
}

int main(int argc, char **argv)
{
	static struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct nsbox_policy pol = { .seccomp = SECCOMP_ENFORCE };
	struct seccomp_prog progs[3] = { { &allow, 1 } };
	const char *labels[3] = { "seccomp: load a 1-instruction filter (floor)", NULL, NULL };
	char l1[96], l2[96];
	struct nsbox_err err = { 0 };
	int runs = argc > 1 ? atoi(argv[1]) : 0;
	double *t[3];

	if (runs <= 0) {
		fprintf(stderr, "usage: seccomp-load RUNS\n");
		return 2;
	}
	if (seccomp_prog_build(&pol, &progs[1], &err) < 0) {
		fprintf(stderr, "seccomp-load: %s\n", err.msg);
		return 1;
	}
	seccomp_prog_prebuilt(SECCOMP_ENFORCE, &progs[2]);
	snprintf(l1, sizeof(l1), "*seccomp: load libseccomp's program (%u insns)", progs[1].len);
	snprintf(l2, sizeof(l2), "seccomp: load nsbox's program (%u insns, the jail's)", progs[2].len);
	labels[1] = l1;
	labels[2] = l2;
	for (int k = 0; k < 3; k++)
		if (!(t[k] = calloc((size_t)runs, sizeof(double))))
			return 1;
	for (int i = -3; i < runs; i++) /* 3 warm-up rounds */
		for (int k = 0; k < 3; k++) {
			double v = load_once(&progs[k]);

			if (v < 0) {
				fprintf(stderr, "seccomp-load: loading %s failed\n", labels[k]);
				return 1;
			}
			if (i >= 0)
				t[k][i] = v;
		}
	for (int k = 0; k < 3; k++) {
		printf("%s\t", labels[k]);
		for (int i = 0; i < runs; i++)
			printf("%s%.1f", i ? " " : "", t[k][i]);
		printf("\n");
		free(t[k]);
	}
	seccomp_prog_free(&progs[1]);
	return 0;
}
