/* Session backend: the sandbox is made by libnsbox's helper process
 * (helper/helper.h), the only way a multithreaded host may make one. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helper.h"
#include "session-backend.h"

static int helper_start(struct sandbox *sb, const struct sandbox_spec *spec, int *sock_out, struct nsbox_err *err)
{
	struct helper_spawn_opts ho = { .cold = spec->cold, .spare = spec->spare, .warn = spec->warn,
					.warn_ctx = spec->warn_ctx, .net_audit_fds = spec->net_audit_fds,
					.n_net_audit_fds = spec->n_net_audit_fds };
	struct helper_sandbox *hs = calloc(1, sizeof(*hs));

	if (!hs)
		return err_set(err, ENOMEM, "session");
	hs->pidfd = -1;
	hs->ws_expected = spec->policy->workspace && spec->policy->workspace_size;
	sb->priv = hs;
	if (helper_spawn(spec->policy, spec->sock, &ho, hs, sock_out, err) < 0)
		return -1;
	sb->pidfd = hs->pidfd;
	return 0;
}

static void helper_kill_(struct sandbox *sb)
{
	if (!sb->reaped)
		helper_kill(sb->priv);
}

/* A pending write-back, when the session is being freed. */
static void helper_sync(struct sandbox *sb)
{
	struct nsbox_err e = { 0 };

	if (sb->closing && wsync_job_run(&((struct helper_sandbox *)sb->priv)->ws, &e) < 0 && sb->warn)
		sb->warn(sb->warn_ctx, e.msg);
}

static void helper_reap(struct sandbox *sb)
{
	struct helper_sandbox *hs = sb->priv;
	struct nsbox_err e = { 0 };

	/* A failure with no errno: its workspace's write-back (helper.h).
	 * With one, the helper is gone, and a workspace's changes with it:
	 * said, never lost in silence. */
	if (helper_destroy(hs, &sb->st, &e) < 0 && sb->warn && e.msg[0]) {
		if (e.code == 0)
			sb->warn(sb->warn_ctx, e.msg);
		else if (hs->ws_expected)
			sb->warn(sb->warn_ctx, "copy /workspace back: not done: the sandbox's helper failed");
	}
	sb->pidfd = -1;
	sb->reaped = true;
	helper_sync(sb);
}

static int helper_try_reap(struct sandbox *sb)
{
	struct helper_sandbox *hs = sb->priv;
	struct pollfd p = { hs->pidfd, POLLIN, 0 };

	/* pid 1 ended: the helper reaps it and reads the accounting. */
	if (!sb->reaped && (hs->pidfd < 0 || poll(&p, 1, 0) == 1))
		helper_reap(sb);
	return sb->reaped;
}

static void helper_destroy_(struct sandbox *sb)
{
	struct helper_sandbox *hs = sb->priv;

	if (!sb->reaped) {
		helper_kill(hs);
		helper_reap(sb);
		return;
	}
	if (hs->pidfd >= 0) {
		close(hs->pidfd);
		hs->pidfd = -1;
	}
	helper_sync(sb);
}

static void helper_abandon(struct sandbox *sb)
{
	struct helper_sandbox *hs = sb->priv;

	if (hs->pidfd >= 0)
		close(hs->pidfd);
	hs->pidfd = sb->pidfd = -1;
	wsync_job_drop(&hs->ws);
}

static int helper_info_(const struct sandbox *sb, struct session_sandbox_info *info, struct nsbox_err *err)
{
	const struct helper_sandbox *hs = sb->priv;

	info->pid = hs->pid;
	snprintf(info->cgroup, sizeof(info->cgroup), "%s", hs->cgroup);
	if (!sb->reaped && helper_info(hs, &info->memory_current, &info->memory_peak, err) < 0)
		return -1;
	return 0;
}

const struct session_backend_ops session_backend_helper = {
	.name = "helper",
	.start = helper_start,
	.kill = helper_kill_,
	.try_reap = helper_try_reap,
	.destroy = helper_destroy_,
	.abandon = helper_abandon,
	.info = helper_info_,
};
