#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"

void cli_warn(void *ctx, const char *msg)
{
	(void)ctx;
	fprintf(stderr, "nsbox: warning: %s\n", msg);
}

int cli_write_status(const char *path, const struct nsbox_run_status *st)
{
	json_t *o, *cg, *ctrls;
	int r;

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
	if (!o)
		return -1;
	if (st->exec_errno)
		json_object_set_new(o, "exec_error", json_string(strerror(st->exec_errno)));
	if (strcmp(path, "-") == 0) {
		r = json_dumpf(o, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		fflush(stdout);
	} else {
		r = json_dump_file(o, path, JSON_COMPACT);
	}
	json_decref(o);
	return r;
}
