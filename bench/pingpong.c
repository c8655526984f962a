/* The floor under a session's open through nsboxd on this machine: one
 * round trip of a small message over a unix socket between two processes,
 * after the same idle gap bench/nsboxd.py leaves between opens (the pool
 * refills meanwhile): with the two processes left where the scheduler puts
 * them (together, mostly), and pinned to two CPUs (where nsboxd's loop
 * may well be).  On a VM, waking a CPU that went idle is most of the
 * second.
 *
 * Usage: pingpong RUNS GAP_US [split].  Prints one "label<TAB>us ..." line. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 40, gap = argc > 2 ? atoi(argv[2]) : 50000, sp[2];
	int split = argc > 3 && !strcmp(argv[3], "split");
	char b[64];
	pid_t pid;

	if (runs < 1 || gap < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		fprintf(stderr, "usage: pingpong RUNS GAP_US\n");
		return 2;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (split) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(pid == 0 ? 1 : 0, &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0) {
			perror("sched_setaffinity");
			return 1;
		}
	}
	if (pid == 0) {
		close(sp[0]);
		while (recv(sp[1], b, sizeof(b), 0) > 0)
			if (send(sp[1], b, 1, 0) != 1)
				break;
		_exit(0);
	}
	close(sp[1]);
	printf("floor: a unix socket round trip between two processes%s, %d us after the last",
	       split ? " on two CPUs" : "", gap);
	for (int i = 0; i < runs; i++) {
		double t0;

		usleep((useconds_t)gap);
		t0 = now_us();
		if (send(sp[0], "x", 1, 0) != 1 || recv(sp[0], b, sizeof(b), 0) != 1)
			return 1;
		printf("%c%.1f", i ? ' ' : '\t', now_us() - t0);
	}
	printf("\n");
	close(sp[0]);
	waitpid(pid, NULL, 0);
	return 0;
}
