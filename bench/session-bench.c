/* Session benchmarks through libnsbox (issue 3, "Benchmark"): session
 * create to ready (template fork vs cold exec), exec round trip of 1+1,
 * tool-call round trip (timed inside the sandbox, per call), sessions
 * created, used and destroyed per second, and idle session memory (RSS
 * and PSS of the sandbox's processes, from /proc/PID/smaps_rollup).
 * Built and run by bench/runner.sh.  Timings go to stdout as
 * "label<TAB>us us ..." groups for bench/report.py; the memory and rate
 * table goes to stderr.  Usage: session-bench RUNS
 * `session-bench RUNS spare` prints only the default session's time to
 * ready, and create + exec + destroy, with the helper's warm spare sandbox
 * (the library's default since 0.3.0; the other lines turn it off).
 * `session-bench RUNS connect SOCK` times nsbox_session_new through the
 * nsboxd at SOCK (a hand-off from its warm pool), 50 ms apart so that the
 * pool refills between, and prints only that line (bench/nsboxd.py). */
#include <nsbox.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, nsbox_error_t *e)
{
	fprintf(stderr, "session-bench: %s: %s\n", what, nsbox_error_message(e));
	exit(1);
}

static int noop(void *ud, const char *name, const char *args, char **result, char **error)
{
	(void)ud, (void)name, (void)args, (void)result, (void)error;
	return 0;
}

/* spare: the library's default (a warm spare for the next session); the
 * template and cold lines turn it off to time the paths themselves. */
static nsbox_session_t *new_session(nsbox_policy_t *p, bool cold, bool spare)
{
	struct nsbox_session_opts o = { .struct_size = sizeof(o), .cold = cold, .no_spare = !spare };
	nsbox_session_t *s = NULL;
	nsbox_error_t *e = NULL;

	if (nsbox_session_new(p, &o, &s, &e) < 0)
		die("session_new", e);
	return s;
}

static nsbox_result_t *exec(nsbox_session_t *s, const char *code)
{
	struct nsbox_exec_opts o = { .struct_size = sizeof(o), .repl = true };
	nsbox_result_t *r = NULL;
	nsbox_error_t *e = NULL;

	if (nsbox_exec(s, code, &o, &r, &e) < 0)
		die("exec", e);
	if (nsbox_result_status(r) != NSBOX_OK) {
		fprintf(stderr, "session-bench: %s: %s\n", code, nsbox_result_error_message(r));
		exit(1);
	}
	return r;
}

static void line(const char *label, const double *v, int n)
{
	printf("%s\t", label);
	for (int i = 0; i < n; i++)
		printf("%s%.1f", i ? " " : "", v[i]);
	printf("\n");
}

/* Rss and Pss in KiB of pid and its descendants. */
static void mem_of(pid_t pid, double *rss, double *pss)
{
	char path[96], buf[4096];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	if ((f = fopen(path, "re"))) {
		while (fgets(buf, sizeof(buf), f)) {
			unsigned long kb;

			if (sscanf(buf, "Rss: %lu kB", &kb) == 1)
				*rss += kb;
			else if (sscanf(buf, "Pss: %lu kB", &kb) == 1)
				*pss += kb;
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	if ((f = fopen(path, "re"))) {
		int kid;

		while (fscanf(f, "%d", &kid) == 1)
			mem_of(kid, rss, pss);
		fclose(f);
	}
}

static void idle_memory(nsbox_policy_t *p, bool cold, int n)
{
	nsbox_session_t *s[16];
	double rss = 0, pss = 0;

	for (int i = 0; i < n; i++) {
		s[i] = new_session(p, cold, false);
		nsbox_result_free(exec(s[i], "1+1"));
	}
	/* Once all n exist: PSS divides shared pages among the processes
	 * mapping them at the time it is read. */
	for (int i = 0; i < n; i++) {
		struct nsbox_session_info info = { .struct_size = sizeof(info) };

		if (nsbox_session_info(s[i], &info, NULL) == 0)
			mem_of(info.pid, &rss, &pss);
	}
	fprintf(stderr, "idle session, %-9s (%2d at once)  RSS %6.2f MiB  PSS %6.2f MiB  per session\n",
		cold ? "cold" : "template", n, rss / n / 1024, pss / n / 1024);
	for (int i = 0; i < n; i++)
		nsbox_session_free(s[i]);
}

static void count_record(void *ud, const char *record, size_t len)
{
	(void)record, (void)len;
	++*(unsigned long *)ud;
}

/* The exec round trip with an egress allowlist, without and with a
 * net_audit callback (libnsbox(3), NETWORK AUDIT), against none: the
 * callback's pipe is polled and read at each step; without an allow rule
 * there is no pipe. */
static void net_audit_round_trips(nsbox_policy_t *p, int n)
{
	nsbox_policy_t *q = NULL;
	nsbox_error_t *e = NULL;
	nsbox_session_t *s[3];
	unsigned long records = 0;
	double *t[3];
	int k = 4 * n < 1000 ? 4 * n : 1000;

	if (nsbox_policy_new("default", &q, &e) < 0 ||
	    nsbox_policy_set(q, "Network", "Allow", "allowed.invalid", &e) < 0)
		die("policy with an allowlist", e);
	for (int j = 0; j < 3; j++) {
		struct nsbox_session_opts o = { .struct_size = sizeof(o), .no_spare = true };

		if (j == 2) {
			o.net_audit = count_record;
			o.net_audit_userdata = &records;
		}
		if (nsbox_session_new(j ? q : p, &o, &s[j], &e) < 0)
			die("session_new", e);
		t[j] = calloc((size_t)k, sizeof(double));
		if (!t[j])
			die("calloc", NULL);
		for (int i = 0; i < 20; i++)
			nsbox_result_free(exec(s[j], "1+1"));
	}
	/* In turns of 20 execs each: one session's spin-wait stays warm, as
	 * in the plain line above, and a busy moment of the host is shared. */
	for (int i0 = 0; i0 < k; i0 += 20)
		for (int j = 0; j < 3; j++)
			for (int i = i0; i < i0 + 20 && i < k; i++) {
				double t0 = now_us();

				nsbox_result_free(exec(s[j], "1+1"));
				t[j][i] = now_us() - t0;
			}
	line("exec round trip of 1+1, no allowlist", t[0], k);
	line("exec round trip of 1+1, allowlist", t[1], k);
	line("exec round trip of 1+1, allowlist + net_audit callback", t[2], k);
	printf("\n");
	for (int j = 0; j < 3; j++) {
		nsbox_session_free(s[j]);
		free(t[j]);
	}
	nsbox_policy_free(q);
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 60;
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	nsbox_session_t *s;
	double *a, *b;
	int n = runs < 50 ? 50 : runs;

	a = calloc((size_t)(n > 1000 ? n : 1000), sizeof(double));
	b = calloc((size_t)(n > 1000 ? n : 1000), sizeof(double));
	if (!a || !b || nsbox_policy_new("default", &p, &e) < 0)
		die("policy", e);
	if (argc > 3 && !strcmp(argv[2], "connect")) {
		struct nsbox_session_opts o = { .struct_size = sizeof(o), .connect = argv[3] };

		for (int i = 0; i < n; i++) {
			double t0;

			usleep(50000);
			t0 = now_us();
			if (nsbox_session_new(p, &o, &s, &e) < 0)
				die("session_new through nsboxd", e);
			b[i] = now_us() - t0;
			nsbox_session_free(s);
		}
		line("nsboxd: session open from the warm pool, libnsbox (nsbox_session_new with connect)", b, n);
		nsbox_policy_free(p);
		free(a);
		free(b);
		return 0;
	}
	nsbox_session_free(new_session(p, false, false));	/* start the helper */
	if (argc > 2 && !strcmp(argv[2], "spare")) {
		/* The same interleaving as below, so that the helper has the
		 * same idle time to make its spare. */
		for (int i = 0; i < n; i++) {
			double t0;

			nsbox_session_free(new_session(p, true, false));
			t0 = now_us();
			s = new_session(p, false, true);
			b[i] = now_us() - t0;
			nsbox_session_free(s);
		}
		line("session ready: default (template, warm spare)", b, n);
		for (int i = 0; i < n; i++) {
			double t0 = now_us();

			s = new_session(p, false, true);
			nsbox_result_free(exec(s, "1+1"));
			nsbox_session_free(s);
			b[i] = now_us() - t0;
		}
		line("session create + exec 1+1 + destroy, warm spare", b, n);
		printf("\n");
		nsbox_policy_free(p);
		free(a);
		free(b);
		return 0;
	}

	/* session create to ready, interleaved */
	for (int i = 0; i < n; i++) {
		double t0 = now_us();

		s = new_session(p, true, false);
		a[i] = now_us() - t0;
		nsbox_session_free(s);
		t0 = now_us();
		s = new_session(p, false, false);
		b[i] = now_us() - t0;
		nsbox_session_free(s);
	}
	line("session ready: cold (helper execs the runner)", a, n);
	line("session ready: template (fork of the helper)", b, n);
	printf("\n");

	s = new_session(p, false, false);
	if (nsbox_session_add_tool(s, "noop", NULL, NULL, noop, NULL, &e) < 0)
		die("add_tool", e);
	for (int i = 0; i < 20; i++)
		nsbox_result_free(exec(s, "1+1"));
	for (int i = 0; i < 4 * n; i++) {
		double t0 = now_us();

		nsbox_result_free(exec(s, "1+1"));
		a[i % 1000] = now_us() - t0;
	}
	line("exec round trip of 1+1", a, 4 * n < 1000 ? 4 * n : 1000);
	printf("\n");
	{
		/* Timed inside, around each call: the round trip to the host. */
		nsbox_result_t *r = exec(s, "import time\nd = []\nfor i in range(1000):\n"
					    "    t = time.perf_counter_ns(); noop(); d.append(time.perf_counter_ns() - t)\n"
					    "' '.join('%.1f' % (x / 1000) for x in d)");
		const char *v = nsbox_result_value(r);

		printf("tool-call round trip (per call, timed inside)\t%.*s\n\n", (int)strlen(v) - 2, v + 1);
		nsbox_result_free(r);
	}
	nsbox_session_free(s);
	net_audit_round_trips(p, n);

	{
		double t0 = now_us(), t;
		int k = 0;

		while ((t = now_us()) - t0 < 3e6 && k < 1000) {
			s = new_session(p, false, false);
			nsbox_result_free(exec(s, "1+1"));
			nsbox_session_free(s);
			a[k++] = now_us() - t;
		}
		line("session create + exec 1+1 + destroy (template)", a, k);
		printf("\n");
		fprintf(stderr, "sessions created, used and destroyed per second (template): %.0f\n",
			k / ((now_us() - t0) / 1e6));
	}
	idle_memory(p, false, 1);
	idle_memory(p, false, 10);
	idle_memory(p, true, 1);
	idle_memory(p, true, 10);
	nsbox_policy_free(p);
	free(a);
	free(b);
	return 0;
}
