/* Session backend: the sandbox comes from nsboxd (nsboxd(8)), over the
 * service protocol (proto/svc.h, nsbox-protocol(7)).  One control
 * connection per session: OPEN hands over the runner socket (the session
 * then speaks to its sandbox directly, as with any other backend) and a
 * pidfd of its pid 1; KILL, CLOSE and INFO go to the service, which owns
 * the sandbox.  When this process dies, the connection closes and the
 * service kills the sandbox.
 *
 * Host paths never travel: the workspace and binds are opened here, with
 * this process's rights, and sent as descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "egress.h"
#include "session-backend.h"
#include "svc.h"
#include "util.h"

#define CTL_TIMEOUT_MS 30000

struct svc_sandbox {
	int ctl; /* the control connection */
	char handle[SVC_HANDLE_LEN + 1];
	pid_t pid;
	uint32_t next_id;
};

static int ctl_send(struct svc_sandbox *v, uint16_t type, json_t *msg, const int *fds, size_t n_fds, uint32_t *id,
		    struct nsbox_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	struct iovec iov;
	int r;

	r = msg ? svc_encode(type, v->next_id, msg, &buf, &len, err) : err_set(err, ENOMEM, "service message");
	json_decref(msg);
	if (r < 0)
		return -1;
	iov = (struct iovec){ buf, len };
	if (send_with_fds(v->ctl, &iov, 1, fds, n_fds) < 0)
		return err_sys(err, "nsboxd: send %s", svc_type_name(type));
	*id = v->next_id++;
	return 0;
}

/* The answer to request id (EXITED and earlier requests' answers are
 * skipped): its type and message, fds it carried (up to 2). */
static int ctl_wait(struct svc_sandbox *v, uint32_t id, uint16_t *type, json_t **msg, int *fds, size_t *n_fds,
		    struct nsbox_err *err)
{
	/* On the heap, not in thread-local storage: a 64 KiB __thread
	 * buffer in libnsbox is static TLS in every thread of every program
	 * that links it, and made pthread_create with a small stack fail
	 * (pid 1's network thread, jail/net.c). */
	_cleanup_free_ char *buf = malloc(SVC_MAX_MSG);

	if (!buf)
		return err_set(err, ENOMEM, "nsboxd: receive buffer");
	for (;;) {
		union {
			char b[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { buf, SVC_MAX_MSG };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)
		};
		struct pollfd p = { v->ctl, POLLIN, 0 };
		int got[4];
		size_t n_got = 0;
		uint32_t rid;
		ssize_t n;
		int k = poll(&p, 1, CTL_TIMEOUT_MS);

		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			return err_set(err, ETIMEDOUT, "nsboxd did not answer within %d s", CTL_TIMEOUT_MS / 1000);
		n = recvmsg(v->ctl, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		/* nsboxd refuses a user with one ERROR and closes at once, our
		 * HELLO unread: the kernel then reports ECONNRESET before the
		 * queued packet (sock_error first, unix_release_sock), and
		 * clears it, so the ERROR is the next read. */
		if (n < 0 && errno == ECONNRESET && (n = recvmsg(v->ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0)
			errno = ECONNRESET;
		/* Ours whatever n says: a packet of 0 bytes reads as the end
		 * of the connection and may still carry descriptors. */
		for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int) && n_got < 4; i++)
					memcpy(&got[n_got++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		if (n <= 0) {
			for (size_t i = 0; i < n_got; i++)
				close(got[i]);
			return n < 0 ? err_sys(err, "nsboxd: receive")
				     : err_set(err, ECONNRESET, "nsboxd closed the connection");
		}
		if (svc_decode(buf, (size_t)n, type, &rid, msg, err) < 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			for (size_t i = 0; i < n_got; i++)
				close(got[i]);
			return err_set(err, EPROTO, "nsboxd sent a malformed message");
		}
		/* An ERROR with id 0 is about the connection (nsbox-protocol(7)):
		 * the answer to whatever we asked. */
		if ((rid != id && !(rid == 0 && *type == SVC_ERROR)) || *type == SVC_EXITED) {
			for (size_t i = 0; i < n_got; i++)
				close(got[i]);
			json_decref(*msg);
			*msg = NULL;
			continue;
		}
		for (size_t i = 0; i < n_got; i++) {
			if (fds && n_fds && i < 2)
				fds[(*n_fds)++] = got[i];
			else
				close(got[i]);
		}
		return 0;
	}
}

/* One request, one answer; an ERROR answer becomes err with its errno. */
static int ctl_call(struct svc_sandbox *v, uint16_t type, json_t *msg, const int *fds_out, size_t n_out, uint16_t want,
		    json_t **answer, int *fds_in, size_t *n_in, struct nsbox_err *err)
{
	uint32_t id;
	uint16_t t;
	json_t *m = NULL;

	if (ctl_send(v, type, msg, fds_out, n_out, &id, err) < 0) {
		struct nsbox_err e2 = { 0 };

		/* nsboxd may have refused us and closed before we sent: its
		 * ERROR (id 0) still waits in our queue, and says why. */
		if (!err || (err->code != EPIPE && err->code != ECONNRESET) ||
		    ctl_wait(v, 0, &t, &m, NULL, NULL, &e2) < 0 || t != SVC_ERROR) {
			json_decref(m);
			return -1;
		}
	} else if (ctl_wait(v, id, &t, &m, fds_in, n_in, err) < 0) {
		return -1;
	}
	if (t == SVC_ERROR) {
		json_int_t code = json_integer_value(json_object_get(m, "errno"));

		err_set(err, code > 0 && code < 4096 ? (int)code : EIO, "nsboxd: %s",
			json_string_value(json_object_get(m, "message")) ?: "error");
		json_decref(m);
		return -1;
	}
	if (t != want) {
		json_decref(m);
		return err_set(err, EPROTO, "nsboxd answered %s to %s", svc_type_name(t), svc_type_name(type));
	}
	*answer = m;
	return 0;
}

static int ctl_connect(const char *path, struct nsbox_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (!*path)
		return err_set(err, EINVAL, "nsboxd socket path is empty");
	if (strlen(path) >= sizeof(sa.sun_path))
		return err_set(err, ENAMETOOLONG, "nsboxd socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_sys(err, "socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err_sys(err, "connect to nsboxd at %s", path);
		close(fd);
		return -1;
	}
	return fd;
}

_Static_assert(SVC_MAX_NET_RULES == POLICY_MAX_NET_RULES, "OPEN carries every rule a policy can have");

/* [Network]: the allowlist's rules as written (nsboxd parses them again),
 * the limits that differ from profile b's. */
static json_t *net_msg(const struct nsbox_policy *p, const struct nsbox_policy *b)
{
	json_t *n = json_object(), *allow = json_array();

	if (!n || !allow || json_object_set_new(n, "allow", allow) < 0) {
		json_decref(n);
		return NULL;
	}
	for (size_t i = 0; i < p->n_net_allow; i++)
		if (json_array_append_new(allow, json_string(p->net_allow[i])) < 0) {
			json_decref(n);
			return NULL;
		}
#define DIFF_NET(f, key)                                                                       \
	if (p->f != b->f && json_object_set_new(n, key, json_integer((json_int_t)p->f)) < 0) { \
		json_decref(n);                                                                \
		return NULL;                                                                   \
	}
	DIFF_NET(net_max_out, "max_bytes_out")
	DIFF_NET(net_max_in, "max_bytes_in")
	DIFF_NET(net_max_conns, "max_connections")
#undef DIFF_NET
	return n;
}

/* OPEN's "net", and the audit sink's descriptor with it: the Log= file
 * opened here, with this process's rights (nsboxd never opens a client's
 * path), or the one the session already has (net_log_fd, the net_audit
 * callback's pipe: duplicated, as fds[] are closed after the send). */
static int net_add(json_t *m, const struct nsbox_policy *p, const struct nsbox_policy *b,
		   const struct sandbox_spec *spec, int *fds, size_t *n_fds, struct nsbox_err *err)
{
	json_t *n = net_msg(p, b);
	int fd = -1;

	if (!n || json_object_set_new(m, "net", n) < 0)
		return err_set(err, ENOMEM, "OPEN message");
	if (p->net_log) {
		fd = egress_open_log(p->net_log, err);
		if (fd < 0)
			return -1;
	} else if (spec->n_net_audit_fds) {
		fd = fcntl(spec->net_audit_fds[0], F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			return err_sys(err, "network audit descriptor");
	}
	if (fd >= 0) {
		fds[(*n_fds)++] = fd;
		if (json_object_set_new(n, "log", json_pack("{s:i}", "fd", (int)*n_fds - 1)) < 0)
			return err_set(err, ENOMEM, "OPEN message");
	}
	return 0;
}

/* The policy as OPEN's options: a built-in profile plus what differs from
 * it.  What the service protocol can't say is refused here, clearly. */
static json_t *open_msg(const struct nsbox_policy *p, const struct sandbox_spec *spec, int *fds, size_t *n_fds,
			struct nsbox_err *err)
{
	struct nsbox_policy b = { 0 };
	const char *profile = p->name && (!strcmp(p->name, "strict") || !strcmp(p->name, "permissive")) ? p->name
													: "default";
	json_t *m;

	if (policy_init_builtin(&b, profile, err) < 0)
		return NULL;
	for (size_t i = 0; i < p->n_mounts; i++)
		if (!p->mounts[i].src) {
			policy_free(&b);
			return err_set(err, EINVAL, "through nsboxd a policy can't have TmpFS= (%s)", p->mounts[i].dst),
			       NULL;
		}
	for (size_t i = 0; i < p->n_env; i++)
		if (!strchr(p->env[i], '=')) {
			policy_free(&b);
			return err_set(err, EINVAL, "through nsboxd a policy can't have Unset= (%s)", p->env[i]), NULL;
		}
	if (p->n_net_allow && spec->n_net_audit_fds + !!p->net_log > 1) {
		policy_free(&b);
		return err_set(err, EINVAL,
			       "through nsboxd a session has one network audit sink: [Network] Log=, "
			       "net_log_fd or the net_audit callback, not %zu",
			       spec->n_net_audit_fds + !!p->net_log),
		       NULL;
	}
	if (p->workdir) {
		policy_free(&b);
		return err_set(err, EINVAL, "through nsboxd a policy can't have WorkDir= (%s)", p->workdir), NULL;
	}
	if (p->rootfs && p->rootfs[0] == '/') {
		policy_free(&b);
		return err_set(err, EINVAL,
			       "through nsboxd RootFS= names a tree built on the service's host (nsbox rootfs build), "
			       "not a directory (%s)",
			       p->rootfs),
		       NULL;
	}
	if (p->uid != b.uid || p->gid != b.gid || p->seccomp != b.seccomp || p->landlock != b.landlock ||
	    p->cgroups != b.cgroups || (p->hostname && b.hostname && strcmp(p->hostname, b.hostname)) ||
	    p->workspace_size != b.workspace_size) {
		policy_free(&b);
		return err_set(err, EINVAL,
			       "through nsboxd a policy is a profile (default, strict, permissive) with limits, network, "
			       "workspace, binds, environment and a built tree; Uid, Gid, Hostname, Seccomp, Landlock, "
			       "Cgroups and WorkspaceSize (the profile's bounds the workspace) can't be changed"),
		       NULL;
	}
	m = json_pack("{s:s}", "profile", profile);
#define DIFF_U64(f, key)      \
	if (m && p->f != b.f) \
		json_object_set_new(m, key, json_integer((json_int_t)p->f));
	DIFF_U64(memory, "memory")
	DIFF_U64(pids, "pids")
	DIFF_U64(tmp_size, "tmp_size")
	DIFF_U64(file_size, "file_size")
	DIFF_U64(nofile, "open_files")
#undef DIFF_U64
	if (m && p->cpus != b.cpus && p->cpus > 0)
		json_object_set_new(m, "cpus", json_real(p->cpus));
	/* Sent when it differs: permissive shares by default. */
	if (m && p->share_net != b.share_net)
		json_object_set_new(m, "share_net", json_boolean(p->share_net));
	if (m && p->n_net_allow && net_add(m, p, &b, spec, fds, n_fds, err) < 0) {
		policy_free(&b);
		json_decref(m);
		return NULL;
	}
	if (m && p->dist_packages)
		json_object_set_new(m, "dist_packages", json_true());
	if (m && spec->cold)
		json_object_set_new(m, "cold", json_true());
	if (m && p->rootfs)
		json_object_set_new(m, "rootfs", json_string(p->rootfs));
	if (m && spec->output_limit)
		json_object_set_new(m, "output_limit", json_integer((json_int_t)spec->output_limit));
	policy_free(&b);
	if (m && p->n_env) {
		json_t *env = json_array();

		for (size_t i = 0; env && i < p->n_env; i++)
			json_array_append_new(env, json_string(p->env[i]));
		json_object_set_new(m, "env", env);
	}
	/* Opened with our rights: the service never resolves our paths. */
	if (m && p->workspace) {
		int fd = open(p->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0) {
			json_decref(m);
			return err_sys(err, "workspace %s", p->workspace), NULL;
		}
		json_object_set_new(m, "workspace", json_pack("{s:i}", "fd", (int)*n_fds));
		fds[(*n_fds)++] = fd;
	}
	if (m && p->n_mounts) {
		json_t *binds = json_array();

		if (p->n_mounts > SVC_MAX_BINDS) {
			json_decref(m);
			json_decref(binds);
			return err_set(err, EINVAL, "through nsboxd at most %d binds", SVC_MAX_BINDS), NULL;
		}
		for (size_t i = 0; i < p->n_mounts; i++) {
			int fd = open(p->mounts[i].src, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

			if (fd < 0) {
				json_decref(m);
				json_decref(binds);
				return err_sys(err, "bind source %s", p->mounts[i].src), NULL;
			}
			json_array_append_new(binds, json_pack("{s:i,s:s,s:b}", "fd", (int)*n_fds, "dst",
							       p->mounts[i].dst, "writable", p->mounts[i].rw));
			fds[(*n_fds)++] = fd;
		}
		json_object_set_new(m, "binds", binds);
	}
	if (!m)
		err_set(err, ENOMEM, "OPEN message");
	return m;
}

static int service_start(struct sandbox *sb, const struct sandbox_spec *spec, int *sock_out, struct nsbox_err *err)
{
	struct svc_sandbox *v = calloc(1, sizeof(*v));
	int out_fds[SVC_MAX_FDS], in_fds[2];
	size_t n_out = 0, n_in = 0;
	json_t *a = NULL, *m;
	const char *h;
	int r = -1;

	err_step(err, "nsboxd");
	if (!v)
		return err_set(err, ENOMEM, "session");
	v->next_id = 1;
	sb->priv = v;
	v->ctl = ctl_connect(spec->connect, err);
	if (v->ctl < 0)
		return -1;
	if (ctl_call(v, SVC_HELLO, json_pack("{s:i}", "version", SVC_VERSION), NULL, 0, SVC_HELLO, &a, NULL, NULL,
		     err) < 0)
		goto out;
	json_decref(a);
	a = NULL;
	m = open_msg(spec->policy, spec, out_fds, &n_out, err);
	if (!m)
		goto out;
	/* Our descriptors (workspace, binds, the log: opened with our rights)
	 * go only to a service that is root or ourselves: another user's
	 * could not check them (nsboxd(8)), and one who put a socket at the
	 * path we were given would get them. */
	if (n_out) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);

		if (getsockopt(v->ctl, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || (cr.uid != 0 && cr.uid != geteuid())) {
			json_decref(m);
			err_set(err, EACCES, "nsboxd at %s runs as uid %d, neither root nor this user: the workspace, binds "
				"and network log are not handed to it", spec->connect, cl == sizeof(cr) ? (int)cr.uid : -1);
			goto out;
		}
	}
	if (ctl_call(v, SVC_OPEN, m, out_fds, n_out, SVC_OPENED, &a, in_fds, &n_in, err) < 0)
		goto out;
	h = json_string_value(json_object_get(a, "handle"));
	if (n_in != 2 || !svc_handle_valid(h) || !json_is_object(json_object_get(a, "hello"))) {
		err_set(err, EPROTO, "nsboxd's OPENED lacks the handle, the hello or the two descriptors");
		goto out;
	}
	snprintf(v->handle, sizeof(v->handle), "%s", h);
	v->pid = (pid_t)json_integer_value(json_object_get(a, "pid"));
	*sock_out = in_fds[0];
	sb->pidfd = in_fds[1];
	n_in = 0;
	sb->hello = json_incref(json_object_get(a, "hello"));
	r = 0;
out:
	for (size_t i = 0; i < n_out; i++)
		close(out_fds[i]);
	for (size_t i = 0; i < n_in; i++)
		close(in_fds[i]);
	json_decref(a);
	if (r < 0 && v->ctl >= 0) {
		/* Closing the connection ends whatever it opened. */
		close(v->ctl);
		v->ctl = -1;
	}
	return r;
}

static void service_kill(struct sandbox *sb)
{
	struct svc_sandbox *v = sb->priv;
	uint32_t id;
	struct nsbox_err e;

	/* Fire and forget: the answer (OK) is skipped by the next wait. */
	if (!sb->reaped && v->ctl >= 0)
		(void)ctl_send(v, SVC_KILL, json_pack("{s:s}", "handle", v->handle), NULL, 0, &id, &e);
}

/* CLOSE: the service kills (if need be), reaps and says how it ended. */
static void service_close(struct sandbox *sb)
{
	struct svc_sandbox *v = sb->priv;
	struct nsbox_err e;
	json_t *a = NULL;
	struct svc_status st = { .killed = true, .term_signal = 9 };

	if (v->ctl >= 0 && ctl_call(v, SVC_CLOSE, json_pack("{s:s}", "handle", v->handle), NULL, 0, SVC_CLOSED, &a,
				    NULL, NULL, &e) == 0) {
		const char *w = json_string_value(json_object_get(a, "warnings"));

		svc_status_from_json(json_object_get(a, "status"), &st);
		/* What the service's end of it warned about (a workspace's
		 * write-back that failed), one per line, quoted by the service. */
		while (w && *w && sb->warn) {
			char line[NSBOX_ERR_MSG_MAX];
			size_t n = strcspn(w, "\n");

			snprintf(line, sizeof(line), "%.*s", (int)n, w);
			sb->warn(sb->warn_ctx, line);
			w += n + (w[n] == '\n');
		}
	}
	json_decref(a);
	memset(&sb->st, 0, sizeof(sb->st));
	sb->st.exited = st.exited;
	sb->st.exit_code = st.exit_code;
	sb->st.term_signal = st.term_signal;
	sb->st.oom_killed = st.oom_killed;
	sb->st.peak_memory = st.peak_memory;
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	sb->pidfd = -1;
	sb->reaped = true;
	if (v->ctl >= 0)
		close(v->ctl);
	v->ctl = -1;
}

static int service_try_reap(struct sandbox *sb)
{
	struct pollfd p = { sb->pidfd, POLLIN, 0 };

	if (!sb->reaped && (sb->pidfd < 0 || poll(&p, 1, 0) == 1))
		service_close(sb);
	return sb->reaped;
}

static void service_destroy(struct sandbox *sb)
{
	if (!sb->reaped)
		service_close(sb);
}

static void service_abandon(struct sandbox *sb)
{
	struct svc_sandbox *v = sb->priv;

	/* The parent's connection stays open in the parent. */
	if (v->ctl >= 0)
		close(v->ctl);
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	v->ctl = sb->pidfd = -1;
}

static int service_info(const struct sandbox *sb, struct session_sandbox_info *info, struct nsbox_err *err)
{
	struct svc_sandbox *v = sb->priv;
	json_t *a = NULL;

	info->pid = v->pid;
	if (sb->reaped || v->ctl < 0)
		return 0;
	if (ctl_call(v, SVC_INFO, json_pack("{s:s}", "handle", v->handle), NULL, 0, SVC_INFO, &a, NULL, NULL, err) < 0)
		return -1;
	info->memory_current = (uint64_t)json_integer_value(json_object_get(a, "memory_current"));
	info->memory_peak = (uint64_t)json_integer_value(json_object_get(a, "memory_peak"));
	json_decref(a);
	return 0;
}

const struct session_backend_ops session_backend_service = {
	.name = "service",
	.start = service_start,
	.kill = service_kill,
	.try_reap = service_try_reap,
	.destroy = service_destroy,
	.abandon = service_abandon,
	.info = service_info,
};
