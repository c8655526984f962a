#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "hostpath.h"

void cli_warn(void *ctx, const char *msg)
{
	(void)ctx;
	fprintf(stderr, "nsbox: warning: %s\n", msg);
}

int cli_open_status(const char *path, struct cli_err *err)
{
	/* No link in the path is followed (base/hostpath.h): the file often
	 * sits in the workspace, whose links the write-back makes on the
	 * host.  Opened once, here, and written through this descriptor after
	 * the run: never opened by name again once the sandbox has run. */
	/* Non-blocking for the open: a FIFO with no reader waited for one
	 * before anything ran, for ever.  The writes after the run block. */
	int fd = host_path_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_NONBLOCK, 0666), fl;

	if (fd < 0 && errno == ELOOP)
		return cli_err_set(err, ELOOP, "%s: " HOST_PATH_LINK_HINT, path);
	if (fd < 0 && errno == ENXIO)
		return cli_err_set(err, ENXIO, "%s (a FIFO with no reader?)", path);
	if (fd < 0)
		return cli_err_set(err, errno, "%s", path);
	if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		int e = errno;

		close(fd);
		return cli_err_set(err, e, "%s", path);
	}
	return fd;
}

/* A double as the shortest text that reads back as the same double (what
 * Python's repr does), where jansson prints %.17g: 0.1 stays 0.1, not
 * 0.10000000000000001. */
static void put_real(double v, FILE *f)
{
	char buf[40];

	if (!isfinite(v)) {
		fputs("null", f); /* as jansson refuses them: JSON has no NaN */
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	fputs(buf, f);
	/* Still a real when read back: 2.0, not 2. */
	if (!strpbrk(buf, ".eEn"))
		fputs(".0", f);
}

int cli_json_dump(const json_t *v, FILE *f)
{
	const char *key;
	json_t *item;
	size_t i;
	bool first = true;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		fputc('{', f);
		json_object_foreach((json_t *)v, key, item)
		{
			json_t *k = json_string(key);

			if (!first)
				fputc(',', f);
			first = false;
			if (!k || json_dumpf(k, f, JSON_ENCODE_ANY) < 0) {
				json_decref(k);
				return -1;
			}
			json_decref(k);
			fputc(':', f);
			if (cli_json_dump(item, f) < 0)
				return -1;
		}
		fputc('}', f);
		return 0;
	case JSON_ARRAY:
		fputc('[', f);
		json_array_foreach(v, i, item)
		{
			if (i)
				fputc(',', f);
			if (cli_json_dump(item, f) < 0)
				return -1;
		}
		fputc(']', f);
		return 0;
	case JSON_REAL:
		put_real(json_real_value(v), f);
		return 0;
	default:
		return json_dumpf(v, f, JSON_ENCODE_ANY);
	}
}

void cli_json_error(const char *outcome, int status, const char *msg)
{
	json_t *o = json_pack("{s:s, s:i, s:{s:s, s:s}}", "outcome", outcome, "exit_code", status, "error", "type",
			      "NsboxError", "message", msg);

	if (o) {
		cli_json_dump(o, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	json_decref(o);
}

int cli_write_status(const char *path, int fd, const struct nsbox_run_status *st)
{
	json_t *o, *cg, *ctrls;
	int r = 0;

	cg = json_object();
	ctrls = json_pack("{s:b, s:b, s:b}", "memory", st->memory_enforced, "pids", st->pids_enforced, "cpu",
			  st->cpu_enforced);
	json_object_set_new(cg, "mode", json_string(st->cgroup_mode));
	json_object_set_new(cg, "enforced", ctrls);
	/* One key and its value per pair. */
	/* clang-format off */
	o = json_pack("{s:o, s:o, s:b, s:b, s:I, s:f, s:f, s:f, s:i, s:o}",
		      "exit_code", st->exited ? json_integer(st->exit_status) : json_null(),
		      "signal", st->term_signal ? json_integer(st->term_signal) : json_null(),
		      "time_limit", st->time_limit, "oom_killed", st->oom_killed,
		      "peak_memory", (json_int_t)st->peak_memory, "cpu_user", st->cpu_user,
		      "cpu_system", st->cpu_system, "wall", st->wall, "status", st->exit_code,
		      "cgroup", cg);
	/* clang-format on */
	if (!o) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (st->exec_errno)
		json_object_set_new(o, "exec_error", json_string(strerror(st->exec_errno)));
	if (fd < 0) {
		r = cli_json_dump(o, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	} else {
		struct stat fst, lst;
		bool reg = fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode);
		FILE *f;

		/* Emptied again: the command may have written to it. */
		if (reg && (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0))
			r = -1;
		/* The sandbox may have replaced the name meanwhile (a link
		 * written back over it): the status goes to the file opened
		 * before the run all the same, and the caller is told. */
		if (reg && (lstat(path, &lst) < 0 || lst.st_dev != fst.st_dev || lst.st_ino != fst.st_ino))
			fprintf(stderr,
				"nsbox run: warning: --json-status %s was replaced during the run (by the sandbox?); the status "
				"went to the file opened before it, which that name no longer shows\n",
				path);
		f = r == 0 ? fdopen(fd, "w") : NULL;
		if (!f)
			close(fd);
		r = f ? cli_json_dump(o, f) : -1;
		if (f && fputc('\n', f) == EOF)
			r = -1;
		if (f && fclose(f) != 0)
			r = -1;
	}
	json_decref(o);
	return r;
}

/* TimeLimit= of the effective policy (libnsbox has no getter for it). */
double cli_policy_time_limit(const nsbox_policy_t *p)
{
	char *text = nsbox_policy_to_string(p), *line, *save = NULL;
	double t = 0;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, "TimeLimit=", 10))
			t = strtod(line + 10, NULL);
	nsbox_free(text);
	/* "infinity" is none (the policy's own spelling of 0); past ~30
	 * years a deadline in nanoseconds would not fit. */
	return isfinite(t) && t > 0 && t < 1e9 ? t : 0;
}
