/* Session backend: the sandbox is made from this process by jail_start()
 * (a clone: single-threaded callers only, as nsbox(1)). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cgroup.h"
#include "session-backend.h"

/* The jail, and its bounded workspace's write-back once taken out of it
 * at the sandbox's end, run when the session is freed (sb->closing). */
struct local {
	struct jail j; /* first: sb->priv is also the jail */
	struct wsync_job ws;
};

static int local_start(struct sandbox *sb, const struct sandbox_spec *spec, int *sock_out, struct nsbox_err *err)
{
	/* The runner is bound read-only into the sandbox and run from there. */
	struct jail_spec js = {
		.policy = spec->policy,
		.argv = spec->argv,
		.exec_fd = -1,
		.exec_file = spec->path,
		.pass_fds = &spec->sock,
		.n_pass_fds = 1,
		.warn = spec->warn,
		.warn_ctx = spec->warn_ctx,
		.net_audit_fds = spec->net_audit_fds,
		.n_net_audit_fds = spec->n_net_audit_fds,
	};
	struct local *l = calloc(1, sizeof(*l));
	struct jail *j = l ? &l->j : NULL;

	*sock_out = -1;
	if (!l)
		return err_set(err, ENOMEM, "session");
	j->pidfd = j->sync_fd = -1;
	sb->priv = j;
	if (jail_start(j, &js, err) != 0)
		return -1;
	sb->pidfd = j->pidfd;
	return 0;
}

static void local_kill(struct sandbox *sb)
{
	jail_kill(sb->priv);
}

static int local_try_reap(struct sandbox *sb)
{
	struct jail *j = sb->priv;
	struct nsbox_err e;

	if (!sb->reaped && jail_try_reap(j, &e) != 0) {
		sb->st = j->status;
		sb->reaped = true;
	}
	return sb->reaped;
}

static void local_destroy(struct sandbox *sb)
{
	struct local *l = sb->priv;
	struct nsbox_err e = { 0 };

	if (!l->ws.pending)
		(void)jail_take_workspace(&l->j, &l->ws);
	jail_destroy(&l->j);
	sb->st = l->j.status;
	sb->reaped = true;
	sb->pidfd = -1;
	if (sb->closing && wsync_job_run(&l->ws, &e) < 0 && sb->warn)
		sb->warn(sb->warn_ctx, e.msg);
}

static void local_abandon(struct sandbox *sb)
{
	struct jail *j = sb->priv;

	if (j->pidfd >= 0)
		close(j->pidfd);
	if (j->sync_fd >= 0)
		close(j->sync_fd);
	if (j->cg) {
		if (j->cg->v2_fd >= 0)
			close(j->cg->v2_fd);
		free(j->cg);
	}
	/* The workspace's write-back is the owner's: a child's copies of its
	 * descriptors would pin the upper layer's tmpfs for the child's life. */
	if (j->ws_upper_fd >= 0)
		close(j->ws_upper_fd);
	if (j->ws_host_fd >= 0)
		close(j->ws_host_fd);
	j->pidfd = j->sync_fd = sb->pidfd = j->ws_upper_fd = j->ws_host_fd = -1;
	j->cg = NULL;
	wsync_job_drop(&((struct local *)sb->priv)->ws);
}

static int local_info(const struct sandbox *sb, struct session_sandbox_info *info, struct nsbox_err *err)
{
	const struct jail *j = sb->priv;

	(void)err;
	info->pid = j->pid;
	if (j->cg)
		snprintf(info->cgroup, sizeof(info->cgroup), "%s", j->cg->v1_dir[0][0] ? j->cg->v1_dir[0] : j->cg->v2_dir);
	return 0;
}

const struct session_backend_ops session_backend_local = {
	.name = "local",
	.start = local_start,
	.kill = local_kill,
	.try_reap = local_try_reap,
	.destroy = local_destroy,
	.abandon = local_abandon,
	.info = local_info,
};
