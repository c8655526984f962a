/* Session backend for tests only: the runner as a plain child of this
 * process, without any sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "locate.h"
#include "session-backend.h"
#include "util.h"

struct child {
	pid_t pid;
};

static int unjailed_start(struct sandbox *sb, const struct sandbox_spec *spec, int *sock_out, struct nsbox_err *err)
{
	_cleanup_close_ int mfd = runner_sealed_copy(spec->path, err);
	struct child *c = calloc(1, sizeof(*c));
	pid_t pid;

	*sock_out = -1;
	if (!c)
		return err_set(err, ENOMEM, "session");
	sb->priv = c;
	if (mfd < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return err_sys(err, "fork");
	if (pid == 0) {
		char *envp[] = { NULL };
		int keep[1];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		mfd = fcntl(mfd, F_DUPFD_CLOEXEC, 10);
		if (mfd < 0 || dup2(spec->sock, 3) < 0)
			_exit(125);
		keep[0] = mfd;
		close_fds_except(4, keep, 1);
		syscall(SYS_execveat, mfd, "", spec->argv, envp, AT_EMPTY_PATH);
		_exit(127);
	}
	c->pid = pid;
	sb->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (sb->pidfd < 0) {
		err_sys(err, "pidfd_open");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		sb->reaped = true;
		return -1;
	}
	return 0;
}

static void fill_status(struct sandbox *sb, int wst)
{
	memset(&sb->st, 0, sizeof(sb->st));
	sb->st.exited = WIFEXITED(wst);
	sb->st.exit_code = WIFEXITED(wst) ? WEXITSTATUS(wst) : 0;
	sb->st.term_signal = WIFSIGNALED(wst) ? WTERMSIG(wst) : 0;
}

static void unjailed_kill(struct sandbox *sb)
{
	struct child *c = sb->priv;

	if (c->pid > 0 && !sb->reaped) {
		if (sb->pidfd < 0 || syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0)
			kill(c->pid, SIGKILL);
	}
}

static int unjailed_try_reap(struct sandbox *sb)
{
	struct child *c = sb->priv;
	int wst;
	pid_t r;

	if (sb->reaped)
		return 1;
	r = waitpid(c->pid, &wst, WNOHANG);
	if (r == c->pid || (r < 0 && errno == ECHILD)) {
		if (r == c->pid)
			fill_status(sb, wst);
		sb->reaped = true;
	}
	return sb->reaped;
}

static void unjailed_destroy(struct sandbox *sb)
{
	struct child *c = sb->priv;
	int wst;

	if (!sb->reaped && c->pid > 0) {
		unjailed_kill(sb);
		if (waitpid(c->pid, &wst, 0) == c->pid)
			fill_status(sb, wst);
	}
	sb->reaped = true;
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	sb->pidfd = -1;
}

static void unjailed_abandon(struct sandbox *sb)
{
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	sb->pidfd = -1;
}

static int unjailed_info(const struct sandbox *sb, struct session_sandbox_info *info, struct nsbox_err *err)
{
	const struct child *c = sb->priv;

	(void)err;
	info->pid = c->pid;
	return 0;
}

const struct session_backend_ops session_backend_unjailed = {
	.name = "unjailed",
	.start = unjailed_start,
	.kill = unjailed_kill,
	.try_reap = unjailed_try_reap,
	.destroy = unjailed_destroy,
	.abandon = unjailed_abandon,
	.info = unjailed_info,
};
