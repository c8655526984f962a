/* nsboxd's event loop.  One thread multiplexes the listening socket, every
 * client connection, every sandbox's pidfd and a signalfd with epoll
 * (STYLE 6c).  Clients speak the service protocol (proto/svc.h,
 * nsbox-protocol(7)) over SOCK_SEQPACKET: each read is one bounded packet,
 * each reply one packet; a reply that would block is queued on its
 * connection (bounded), and a connection with queued replies is not read
 * until they are gone, so a client that stops reading only stops itself.
 *
 * Sandboxes come from libnsbox (include/nsbox.h) and are handed over
 * (nsbox_session_handoff): the client gets the runner socket and speaks to
 * its sandbox directly; the service keeps the lifecycle.  A warm pool of
 * ready sandboxes per profile is refilled when the loop is idle. */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <systemd/sd-daemon.h>

#include "cleanup.h"
#include "closer.h"
#include "deputy.h"
#include "nsbox.h"
#include "owncg.h"
#include "svc.h"
#include "worker.h"

#define MAX_OUT 64		/* queued replies per connection before it is dropped */
#define MAX_BATCH 16		/* requests read from one uid's connections per wake-up */
#define MAX_GROUPS 64
#define MAX_RECV_FDS 253	/* SCM_MAX_FD: the most one packet can carry */
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83	/* asm-generic/socket.h, Linux 6.16 */
#endif

enum ev_kind { EV_LISTEN = 1, EV_SIGNAL, EV_CONN, EV_SESS, EV_WORKER, EV_POOLED, EV_CLOSER };

/* A session's life: made by the worker (PENDING), handed over (LIVE), ended
 * and reaped by the worker (ENDING), its status kept for CLOSE (ENDED).  The
 * worker owns the libnsbox session while PENDING or ENDING: the loop does
 * not touch it then. */
enum sess_state { S_PENDING, S_LIVE, S_ENDING, S_ENDED };

struct conn;

struct sess {
	enum ev_kind kind;	/* EV_SESS: epoll data points here */
	struct sess *next;	/* in its connection's list */
	struct sess *all_next, *all_prev;	/* in D.sessions, from OPEN until freed */
	uid_t uid;		/* its client's: charged to it until freed, with or without its connection */
	struct conn *conn;	/* NULL once the connection is gone */
	enum sess_state state;
	uint32_t open_id;	/* PENDING: the OPEN to answer */
	uint64_t reply_serial;	/* ENDING after CLOSE: the connection to answer (conn->serial) */
	uint32_t close_id;
	bool close_wanted;	/* CLOSE arrived: answer CLOSED and free once ended */
	bool pooled;		/* came from the pool */
	char handle[SVC_HANDLE_LEN + 1];
	nsbox_session_t *s;
	int pidfd;		/* -1 once ended */
	int sock;		/* the runner socket's host end, kept to empty it at the end (sess_drain); -1 */
	unsigned host_uid;	/* what the sandbox's user maps to on the host */
	bool uid_owned;		/* host_uid came from uid_alloc: free it with the session (sess_free) */
	uint64_t memory;	/* limits charged to the owner's uid */
	double cpus;
	uint64_t pids;
	bool ended;
	struct svc_status st;
	char *warnings;		/* what its end warned about (malloc'd), for CLOSED; NULL none */
	struct nsbox_session_info info;	/* from the worker, at creation */
};

struct pooled {
	enum ev_kind kind;	/* EV_POOLED: a job's owner */
	struct pooled *next;
	nsbox_session_t *s;
	int ready_fd;		/* the session's nsbox_session_fd: readable once it died */
	struct nsbox_session_info info;
	unsigned host_uid;
	int profile;
	struct sess *waiter;	/* being made: an OPEN that found the pool empty takes it */
};

struct outmsg {
	struct outmsg *next;
	char *buf;
	size_t len;
	int fds[2];
	int n_fds;
};

struct conn {
	enum ev_kind kind;	/* EV_CONN */
	struct conn *next, *prev;
	int fd;
	uint64_t serial;	/* unique for the service's life: completions find their connection by it */
	uid_t uid;
	gid_t gid;
	pid_t pid;
	gid_t groups[MAX_GROUPS];
	size_t n_groups;
	bool hello;
	unsigned long long accepted;	/* mono_ns(): HELLO is due HelloTimeoutSec after */
	bool reading;		/* EPOLLIN armed */
	bool throttled;		/* not read while CLOSER_UID_MAX of its uid's descriptors wait to be closed */
	struct sess *sessions;
	struct outmsg *out, *out_tail;
	unsigned n_out;
};

static struct {
	const struct daemon_opts *o;
	struct conf conf;
	int ep;
	struct { enum ev_kind kind; int fd; } listen, sig, worker, closer;
	int listen_dir;		/* --listen's directory, opened once (listen_on) */
	bool activated;		/* sd_listen_fds */
	bool listen_paused;	/* listen_paused(): not accepting */
	unsigned long long accept_resume;	/* mono_ns(): accept4 ran out of descriptors or memory, retried then */
	bool stopping;
	struct conn *conns;
	unsigned n_conns;
	unsigned n_nohello;	/* connections that have not said HELLO yet */
	unsigned n_sessions;
	struct sess *sessions;	/* every session, whatever its state or connection (sess_count) */
	struct pooled *pool;
	unsigned pool_n[CONF_MAX_PROFILES];
	unsigned refilling;	/* pool creations with the workers (fewer than the workers: OPENs that miss get one) */
	struct pooled *making[WORKER_MAX];	/* those */
	unsigned workers;	/* started with (Workers= is read at start only) */
	uint64_t next_serial;
	unsigned char *uid_used;	/* bitmap over conf.uid_count: a live session's */
	unsigned char *uid_foreign;	/* same: owned by a process or named in passwd/group at start */
	bool host_uids;		/* per-session host uids in use */
	unsigned long long idle_since;
	unsigned long long opened, pool_hits;
	unsigned long long freed;	/* sessions and connections freed: events after one may be stale */
	struct {
		uint64_t memory, pids;
		double cpus;
	} prof[CONF_MAX_PROFILES];	/* each profile's limits, read at start (load_profile_limits) */
} D;

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void vlogmsg(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static void vlogmsg(const char *fmt, va_list ap)
{
	fputs("nsboxd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

/* What one client's uid makes nsboxd log (a malformed message, a refusal):
 * at most CLIENT_LOG_MAX lines a minute per uid, then one line saying how
 * many were not logged.  A client reconnecting with a bad message each
 * time wrote 15,000 lines a second (red team 11), and under journald its
 * rate limit would then have dropped every other line of nsboxd's too. */
#define CLIENT_LOG_MAX 20
#define CLIENT_LOG_UIDS 32
static struct {
	uid_t uid;
	unsigned long long since; /* this window's start, mono_ns(); 0: unused */
	unsigned n, dropped;
} client_log_uids[CLIENT_LOG_UIDS];

static void client_log_said(unsigned k)
{
	if (client_log_uids[k].dropped)
		logmsg("uid %u: %u more lines not logged (at most %d a minute per uid)", (unsigned)client_log_uids[k].uid,
		       client_log_uids[k].dropped, CLIENT_LOG_MAX);
}

static void client_log(uid_t uid, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void client_log(uid_t uid, const char *fmt, ...)
{
	unsigned long long now = mono_ns();
	unsigned k = 0;
	va_list ap;

	for (unsigned i = 0; i < CLIENT_LOG_UIDS; i++) {
		if (client_log_uids[i].since && client_log_uids[i].uid == uid) {
			k = i;
			break;
		}
		if (client_log_uids[i].since < client_log_uids[k].since)
			k = i;
	}
	if (!client_log_uids[k].since || client_log_uids[k].uid != uid ||
	    now - client_log_uids[k].since >= 60000000000ull) {
		/* A new window (or another uid's slot, the oldest). */
		if (client_log_uids[k].since)
			client_log_said(k);
		client_log_uids[k].uid = uid;
		client_log_uids[k].since = now;
		client_log_uids[k].n = client_log_uids[k].dropped = 0;
	}
	if (client_log_uids[k].n >= CLIENT_LOG_MAX) {
		client_log_uids[k].dropped++;
		return;
	}
	client_log_uids[k].n++;
	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

static void notify_status(void)
{
	unsigned pooled = 0;

	for (int i = 0; i < CONF_MAX_PROFILES; i++)
		pooled += D.pool_n[i];
	sd_notifyf(0, "STATUS=%u connections, %u sessions, %u ready in the pool", D.n_conns, D.n_sessions, pooled);
}

/* ---- host uids ---- */

static bool bit(const unsigned char *map, unsigned k)
{
	return map[k / 8] & (1u << (k % 8));
}

static void mark_foreign(unsigned long id)
{
	if (id >= D.conf.uid_first && id - D.conf.uid_first < D.conf.uid_count) {
		unsigned k = (unsigned)(id - D.conf.uid_first);

		D.uid_foreign[k / 8] |= (unsigned char)(1u << (k % 8));
	}
}

/* What HostUidRange must not hand out: uids and gids that name a user or
 * group, and uids that still own a process (a previous nsboxd killed with
 * its sandboxes' stragglers, or someone else's use of the range).  Read
 * once, when the range is applied.  Returns how many were found. */
static unsigned scan_foreign(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	struct passwd *pw;
	struct group *gr;
	unsigned n = 0;

	setpwent();
	while ((pw = getpwent()))
		mark_foreign(pw->pw_uid);
	endpwent();
	setgrent();
	while ((gr = getgrent()))
		mark_foreign(gr->gr_gid);
	endgrent();
	while (d && (de = readdir(d))) {
		char path[64], line[256];
		FILE *f;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		/* Real, effective, saved and fs uid; then the gids. */
		while (fgets(line, sizeof(line), f)) {
			unsigned long id[4];

			if ((!strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4)) &&
			    sscanf(line + 4, "%lu %lu %lu %lu", &id[0], &id[1], &id[2], &id[3]) == 4)
				for (int i = 0; i < 4; i++)
					mark_foreign(id[i]);
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	for (unsigned k = 0; k < D.conf.uid_count; k++)
		n += bit(D.uid_foreign, k);
	return n;
}

/* Whether a client may pass descriptors on fd (SO_PASSRIGHTS, Linux 6.16;
 * a connection inherits the listener's): none before its HELLO is
 * answered, so that a uid nsboxd refuses, or one that never says HELLO,
 * can't put any in flight to nsboxd at all (each would be a close on the
 * closer's lanes, which may wait: closer.h).  An older kernel has no
 * such switch: what comes is closed as before. */
static void set_passrights(int fd, bool on)
{
	static bool said;
	int v = on;

	if (setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &v, sizeof(v)) < 0 && !said) {
		said = true;
		logmsg("SO_PASSRIGHTS: %s (Linux 6.16): descriptors sent before HELLO are received and closed", strerror(errno));
	}
}

/* A host uid (and the gid of the same number) of HostUidRange that no live
 * session holds, or 0: the sandbox's user then maps to ours. */
static unsigned uid_alloc(void)
{
	if (!D.host_uids)
		return 0;
	for (unsigned i = 0; i < D.conf.uid_count; i++) {
		/* Round robin from after the last one handed out: a uid freed
		 * is the last to be reused. */
		static unsigned next;
		unsigned k = (next + i) % D.conf.uid_count;

		if (!bit(D.uid_used, k) && !bit(D.uid_foreign, k)) {
			D.uid_used[k / 8] |= (unsigned char)(1u << (k % 8));
			next = k + 1;
			return D.conf.uid_first + k;
		}
	}
	return 0;
}

static void uid_free(unsigned uid)
{
	unsigned k;

	if (!uid || !D.host_uids || uid < D.conf.uid_first || uid - D.conf.uid_first >= D.conf.uid_count)
		return;
	k = uid - D.conf.uid_first;
	D.uid_used[k / 8] &= (unsigned char)~(1u << (k % 8));
}

/* ---- sandboxes ---- */

static void drop_error(nsbox_error_t *e)
{
	nsbox_error_free(e);
}

/* A policy for profile with the service's own settings: the host ids its
 * user maps to (0: ours).  A root-only policy key, and one that OPEN can't
 * reach: apply_open sets only what the client may choose. */
static int make_policy(const char *profile, unsigned host_uid, unsigned host_gid, nsbox_policy_t **out, char *errbuf,
		       size_t errlen)
{
	nsbox_policy_t *p = NULL;
	nsbox_error_t *e = NULL;
	char v[32];

	if (nsbox_policy_new(profile, &p, &e) < 0) {
		snprintf(errbuf, errlen, "policy %s: %s", profile, nsbox_error_message(e));
		drop_error(e);
		return -1;
	}
	if (host_uid) {
		snprintf(v, sizeof(v), "%u", host_uid);
		if (nsbox_policy_set(p, "Sandbox", "HostUid", v, &e) < 0 ||
		    (snprintf(v, sizeof(v), "%u", host_gid), nsbox_policy_set(p, "Sandbox", "HostGid", v, &e) < 0)) {
			snprintf(errbuf, errlen, "HostUid, HostGid: %s", nsbox_error_message(e));
			drop_error(e);
			nsbox_policy_free(p);
			return -1;
		}
	}
	*out = p;
	return 0;
}

/* Hand the worker a job for owner. */
static struct job *job_new(enum job_kind kind, void *owner)
{
	struct job *j = calloc(1, sizeof(*j));

	if (j) {
		j->kind = kind;
		j->owner = owner;
		j->ready_fd = -1;
		j->net_log_fd = -1;
	}
	return j;
}

/* End and free a session on the worker; nothing waits for the answer.  Only
 * when even that allocation fails does the loop do it itself. */
static void end_detached(nsbox_session_t *s, unsigned host_uid)
{
	struct job *j = job_new(JOB_END, NULL);

	if (!j) {
		struct nsbox_run_status st = { .struct_size = sizeof(st) };

		nsbox_session_end(s, true, &st, NULL);
		nsbox_session_free(s);
		uid_free(host_uid);
		return;
	}
	nsbox_session_kill(s);
	j->s = s;
	j->kill = true;
	/* Its host uid is free once the sandbox is reaped (worker_collect). */
	j->free_uid = host_uid;
	worker_submit(j);
}

static void pooled_drop(struct pooled *p)
{
	end_detached(p->s, p->host_uid);
	free(p);
}

static void pool_drop_all(void)
{
	while (D.pool) {
		struct pooled *p = D.pool;

		D.pool = p->next;
		D.pool_n[p->profile]--;
		pooled_drop(p);
	}
}

/* Ask the worker for one pooled sandbox if a profile is short and none is
 * being made. */
static void pool_refill(void)
{
	/* One worker stays free for OPENs the pool can't serve and for ends. */
	unsigned most = D.workers > 1 ? D.workers - 1 : 1;

	for (int i = 0; i < CONF_MAX_PROFILES && D.refilling < most && !D.stopping; i++) {
		struct pooled *p;
		struct job *j;
		char eb[512];

		unsigned coming = 0;

		for (unsigned k = 0; k < WORKER_MAX; k++)
			coming += D.making[k] && D.making[k]->profile == i;
		if (!D.conf.pool_profile[i] || D.pool_n[i] + coming >= D.conf.pool_size)
			continue;
		if (D.n_sessions + D.pool_n[i] >= D.conf.max_sessions)
			return;
		p = calloc(1, sizeof(*p));
		j = job_new(JOB_CREATE, p);
		if (!p || !j) {
			free(p);
			free(j);
			return;
		}
		p->kind = EV_POOLED;
		p->profile = i;
		p->ready_fd = -1;
		p->host_uid = uid_alloc();
		if (D.host_uids && !p->host_uid) {
			/* Every uid is a live session's: the pool waits for one. */
			free(p);
			free(j);
			return;
		}
		if (make_policy(conf_profiles[i], p->host_uid, p->host_uid, &j->pol, eb, sizeof(eb)) < 0) {
			logmsg("pool (%s): %s", conf_profiles[i], eb);
			uid_free(p->host_uid);
			free(p);
			free(j);
			D.conf.pool_profile[i] = false;	/* until the next reload */
			return;
		}
		D.refilling++;
		for (unsigned k = 0; k < WORKER_MAX; k++)
			if (!D.making[k]) {
				D.making[k] = p;
				break;
			}
		i--;	/* this profile may want more */
		worker_submit(j);
	}
}

static void open_made(struct sess *x, struct job *j);

/* The worker made (or failed to make) a pooled sandbox. */
static void pool_made(struct pooled *p, struct job *j)
{
	D.refilling--;
	for (unsigned k = 0; k < WORKER_MAX; k++)
		if (D.making[k] == p)
			D.making[k] = NULL;
	if (p->waiter) {
		/* An OPEN waited for this one: it is the OPEN's now. */
		struct sess *x = p->waiter;

		x->host_uid = p->host_uid;
		x->uid_owned = p->host_uid != 0;
		x->pooled = j->rc == 0;
		if (j->rc == 0)
			D.pool_hits++;
		free(p);
		open_made(x, j);
		return;
	}
	if (j->rc < 0) {
		static unsigned long long last;

		/* Said once a minute at most: the host may be unable to make
		 * sandboxes at all (then every OPEN says why). */
		if (mono_ns() - last > 60000000000ull || !last)
			logmsg("pool (%s): %s", conf_profiles[p->profile], j->err);
		last = mono_ns();
		D.conf.pool_profile[p->profile] = false;	/* until the next reload */
		uid_free(p->host_uid);
		free(p);
		return;
	}
	p->s = j->s;
	p->info = j->info;
	p->ready_fd = j->ready_fd;
	if (D.stopping || !D.conf.pool_profile[p->profile] || D.pool_n[p->profile] >= D.conf.pool_size) {
		pooled_drop(p);
		return;
	}
	p->next = D.pool;
	D.pool = p;
	D.pool_n[p->profile]++;
	notify_status();
}

/* A pooled sandbox that died meanwhile (or wrote without being asked) is
 * not handed out: its session fd is readable then. */
static bool pooled_usable(const struct pooled *p)
{
	struct pollfd pf = { .fd = p->ready_fd, .events = POLLIN };

	return p->ready_fd >= 0 && p->info.alive && poll(&pf, 1, 0) == 0;
}

static struct pooled *pool_take(int profile)
{
	for (struct pooled **pp = &D.pool; *pp;) {
		struct pooled *p = *pp;

		if (p->profile != profile) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		D.pool_n[profile]--;
		if (pooled_usable(p))
			return p;
		pooled_drop(p);
	}
	return NULL;
}

/* ---- replies ---- */

static void conn_close(struct conn *c);

static void out_free(struct outmsg *m)
{
	for (int i = 0; i < m->n_fds; i++)
		close(m->fds[i]);
	free(m->buf);
	free(m);
}

/* Returns -1 when c had to be closed (its events could not be set: it
 * would stall unseen). */
static int conn_rearm(struct conn *c)
{
	struct epoll_event ev = { .data.ptr = c };
	bool read = c->n_out == 0 && !c->throttled;

	ev.events = (read ? EPOLLIN : 0) | (c->n_out ? EPOLLOUT : 0);
	c->reading = read;
	if (epoll_ctl(D.ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
		logmsg("uid %u pid %d: epoll_ctl: %s; closing", (unsigned)c->uid, (int)c->pid, strerror(errno));
		conn_close(c);
		return -1;
	}
	return 0;
}

/* Send what is queued; 0 when all went or the socket is full, -1 when
 * the connection is dead. */
static int conn_flush(struct conn *c)
{
	while (c->out) {
		struct outmsg *m = c->out;
		struct iovec iov = { m->buf, m->len };
		union {
			char buf[CMSG_SPACE(2 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (m->n_fds) {
			struct cmsghdr *cm;

			memset(&u, 0, sizeof(u));
			mh.msg_control = u.buf;
			mh.msg_controllen = CMSG_SPACE((size_t)m->n_fds * sizeof(int));
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN((size_t)m->n_fds * sizeof(int));
			memcpy(CMSG_DATA(cm), m->fds, (size_t)m->n_fds * sizeof(int));
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		c->out = m->next;
		if (!c->out)
			c->out_tail = NULL;
		c->n_out--;
		out_free(m);
	}
	return 0;
}

/* Queue a reply (fds are the caller's, owned by the queue from here: closed
 * once sent) and try to send it.  Returns -1 when the connection had to be
 * closed (too many replies queued, or dead): c is then freed. */
static int reply_fds(struct conn *c, uint16_t type, uint32_t id, json_t *msg, const int *fds, int n_fds)
{
	struct outmsg *m = calloc(1, sizeof(*m));
	struct nsbox_err e = { 0 };
	bool was_empty = c->n_out == 0;

	if (m)
		for (int i = 0; i < n_fds; i++)
			m->fds[m->n_fds++] = fds[i];
	if (!m || !msg || svc_encode(type, id, msg, &m->buf, &m->len, &e) < 0) {
		if (m)
			out_free(m);
		else
			for (int i = 0; i < n_fds; i++)
				close(fds[i]);
		json_decref(msg);
		logmsg("uid %u: cannot encode %s: %s", (unsigned)c->uid, svc_type_name(type), e.msg);
		conn_close(c);
		return -1;
	}
	json_decref(msg);
	if (c->n_out >= MAX_OUT) {
		out_free(m);
		client_log(c->uid, "uid %u pid %d: does not read its replies; closing", (unsigned)c->uid, (int)c->pid);
		conn_close(c);
		return -1;
	}
	if (c->out_tail)
		c->out_tail->next = m;
	else
		c->out = m;
	c->out_tail = m;
	c->n_out++;
	if (conn_flush(c) < 0) {
		conn_close(c);
		return -1;
	}
	if ((was_empty != (c->n_out == 0) || (c->n_out && c->reading)) && conn_rearm(c) < 0)
		return -1;
	return 0;
}

static int reply(struct conn *c, uint16_t type, uint32_t id, json_t *msg)
{
	return reply_fds(c, type, id, msg, NULL, 0);
}

/* The symbolic name of an errno for ERROR's "error" (its number goes in
 * "errno"): every one, as EXDEV for a FUSE object, not only the common. */
static const char *errno_name(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "EIO";
}

static int reply_error(struct conn *c, uint32_t id, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int reply_error(struct conn *c, uint32_t id, int code, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return reply(c, SVC_ERROR, id, json_pack("{s:i,s:s,s:s}", "errno", code, "error", errno_name(code), "message", buf));
}

/* ---- sessions ---- */

static struct conn *conn_by_serial(uint64_t serial)
{
	for (struct conn *c = D.conns; c; c = c->next)
		if (c->serial == serial)
			return c;
	return NULL;
}

static void sess_unlink(struct conn *c, struct sess *x)
{
	for (struct sess **pp = &c->sessions; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	x->next = NULL;
	x->conn = NULL;
}

/* What the sandbox left queued to its client on the runner socket (theirs,
 * shared), read and dropped once the session is freed: the client is done
 * with it, the sandbox is gone.  A hostile client that never reads, and
 * keeps the socket after CLOSE, held it all on the host past every quota:
 * up to a memory limit of other sockets' buffers passed in, and
 * descriptors in flight, which the kernel counts against the sandbox's
 * host uid (ETOOMANYREFS for the next session given that uid).  Shut
 * first (nothing more comes, whoever holds the sandbox's end), read
 * without waiting, what came with it to the closer (a close may block),
 * within the closer's caps: past them, the socket waits here, its host uid
 * with it, and goes on as the closer catches up (drain_more). */
struct draining {
	struct draining *next;
	int sock;
	uid_t uid;	   /* the client's: its closer lane */
	unsigned host_uid; /* to give back once empty; 0: none */
};
static struct draining *draining;

/* true: sock is empty and closed; false: the closer's caps stopped it. */
static bool drain(int sock, uid_t uid)
{
	static char data[65536];
	union {
		char b[CMSG_SPACE(253 * sizeof(int))];
		struct cmsghdr align;
	} u;

	/* Shut: what is queued is all there is (the sender's buffer). */
	for (;;) {
		struct iovec iov = { data, sizeof(data) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
		ssize_t n;

		if (closer_pending(uid) >= CLOSER_UID_MAX || closer_total() >= CLOSER_TOTAL_MAX)
			return false;
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					int fd;

					memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
					closer_close(fd, uid);
				}
		if (n <= 0) {
			close(sock);
			return true;
		}
	}
}

/* Go on with the sockets the closer's caps stopped (it closed some). */
static void drain_more(void)
{
	for (struct draining **pp = &draining, *d; (d = *pp);) {
		if (!drain(d->sock, d->uid)) {
			pp = &d->next;
			continue;
		}
		if (d->host_uid)
			uid_free(d->host_uid);
		*pp = d->next;
		free(d);
	}
}

static void sess_drain(struct sess *x)
{
	struct draining *d;
	int sock = x->sock;

	if (sock < 0)
		return;
	x->sock = -1;
	(void)shutdown(sock, SHUT_RDWR);
	if (drain(sock, x->uid))
		return;
	if (!(d = malloc(sizeof(*d)))) {
		close(sock); /* what is left stays with the client's copy */
		return;
	}
	*d = (struct draining){ draining, sock, x->uid, x->uid_owned ? x->host_uid : 0 };
	draining = d;
	x->uid_owned = false; /* given back once empty */
}

/* x is not in any list, and the worker is done with it: its sandbox is
 * gone.  Its uid may be reused once what it left queued is gone. */
static void sess_free(struct sess *x)
{
	sess_drain(x);
	free(x->warnings);
	if (x->uid_owned)
		uid_free(x->host_uid);
	if (x->all_prev)
		x->all_prev->all_next = x->all_next;
	else
		D.sessions = x->all_next;
	if (x->all_next)
		x->all_next->all_prev = x->all_prev;
	D.n_sessions--;
	D.freed++;
	free(x);
}

/* The worker reaped x's sandbox (or the loop did, out of memory): keep its
 * status, and answer what waits for it.  x may be freed on return. */
static void sess_ended(struct sess *x, const struct nsbox_run_status *rs, const char *warnings)
{
	if (warnings && *warnings && !x->warnings)
		x->warnings = strdup(warnings);
	x->state = S_ENDED;
	x->ended = true;
	x->st.exited = rs->exited;
	x->st.exit_code = rs->exit_status;
	x->st.term_signal = rs->term_signal;
	x->st.oom_killed = rs->oom_killed;
	x->st.peak_memory = rs->peak_memory;
	/* Its uid is reused once the session is freed (CLOSE, or its
	 * connection gone: sess_free), not before: what the sandbox left
	 * queued to its client is charged to it until then. */
	if (x->close_wanted) {
		struct conn *c = conn_by_serial(x->reply_serial);
		json_t *st = svc_status_json(&x->st);
		char h[SVC_HANDLE_LEN + 1];
		uint32_t id = x->close_id;

		char *w = x->warnings;

		memcpy(h, x->handle, sizeof(h));
		x->warnings = NULL;
		sess_free(x);
		/* A write-back that failed is the client's to know (its data). */
		if (c)
			reply(c, SVC_CLOSED, id, json_pack("{s:s,s:o,s:s*}", "handle", h, "status", st, "warnings", w));
		else
			json_decref(st);
		free(w);
		return;
	}
	if (!x->conn) {
		sess_free(x);
		return;
	}
	/* It ended by itself (OOM, crash, exit): its owner hears now and may
	 * CLOSE it for the status again. */
	if (!x->st.killed)
		reply(x->conn, SVC_EXITED, 0, json_pack("{s:s,s:o}", "handle", x->handle, "status", svc_status_json(&x->st)));
}

/* LIVE -> ENDING: the worker ends (kill: SIGKILLs first) and reaps the
 * sandbox; sess_ended follows.  x may be freed on return. */
static void sess_end_start(struct sess *x, bool kill)
{
	struct job *j;

	if (x->state != S_LIVE)
		return;
	if (x->pidfd >= 0) {
		epoll_ctl(D.ep, EPOLL_CTL_DEL, x->pidfd, NULL);
		close(x->pidfd);
		x->pidfd = -1;
	}
	x->st.killed = kill;
	x->state = S_ENDING;
	/* Killed now: it stops using the host before the worker gets to it. */
	if (kill)
		nsbox_session_kill(x->s);
	j = job_new(JOB_END, x);
	if (!j) {
		struct nsbox_run_status rs = { .struct_size = sizeof(rs) };

		nsbox_session_end(x->s, kill, &rs, NULL);
		nsbox_session_free(x->s);
		x->s = NULL;
		sess_ended(x, &rs, NULL);
		return;
	}
	j->s = x->s;
	j->kill = kill;
	/* Its workspace's write-back, if any, is on its client's share. */
	j->client_uid = x->uid;
	j->for_client = true;
	x->s = NULL;
	worker_submit(j);
}

/* The host uid the sandbox's user maps to (HostUid=0 is ours). */
static json_int_t sess_host_uid(const struct sess *x)
{
	return (json_int_t)(x->host_uid ? x->host_uid : (unsigned)geteuid());
}

static struct sess *sess_find(struct conn *c, const json_t *m, struct sess ***link)
{
	const char *h = json_string_value(json_object_get(m, "handle"));

	if (!svc_handle_valid(h))
		return NULL;
	for (struct sess **pp = &c->sessions; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->handle, h)) {
			if (link)
				*link = pp;
			return *pp;
		}
	return NULL;
}

/* What uid has in use besides except: every session of its until it is
 * freed, also those whose connection is gone (still being made, or being
 * reaped): counted only while their connection lived, a client that
 * closed its connection with OPENs pending and connected again had its
 * MaxSessions anew each time, while the sandboxes were still made. */
static void uid_usage(uid_t uid, const struct sess *except, unsigned *n, uint64_t *mem, double *cpus, uint64_t *pids)
{
	*n = 0;
	*mem = 0;
	*cpus = 0;
	*pids = 0;
	for (struct sess *x = D.sessions; x; x = x->all_next) {
		if (x->uid != uid || x == except)
			continue;
		/* One that ended by itself holds its place (and one of the
		 * service's MaxSessions) until CLOSE: counted, or a uid could
		 * fill the service with ended sessions.  Its memory and CPUs
		 * are back. */
		(*n)++;
		if (x->ended)
			continue;
		*mem += x->memory;
		*cpus += x->cpus;
		*pids += x->pids;
	}
}

/* A new session counts from here (sess_free ends it). */
static void sess_count(struct sess *x)
{
	x->all_prev = NULL;
	x->all_next = D.sessions;
	if (D.sessions)
		D.sessions->all_prev = x;
	D.sessions = x;
	D.n_sessions++;
}

static int net_limit(nsbox_policy_t *p, const char *key, int64_t v, nsbox_error_t **e)
{
	char buf[32];

	if (v < 0)
		return 0;
	if (v == 0)
		snprintf(buf, sizeof(buf), "infinity");
	else
		snprintf(buf, sizeof(buf), "%lld", (long long)v);
	return nsbox_policy_set(p, "Network", key, buf, e);
}

static int apply_open(nsbox_policy_t *p, const struct svc_open *o, const int *fds, char *eb, size_t el)
{
	nsbox_error_t *e = NULL;
	int r = 0;
	char path[64];

	if (o->memory)
		r = nsbox_policy_set_memory(p, o->memory, &e);
	if (!r && o->pids)
		r = nsbox_policy_set_pids(p, o->pids, &e);
	if (!r && o->cpus > 0)
		r = nsbox_policy_set_cpus(p, o->cpus, &e);
	if (!r && o->tmp_size)
		r = nsbox_policy_set_tmp_size(p, o->tmp_size, &e);
	if (!r && o->file_size)
		r = nsbox_policy_set_file_size(p, o->file_size, &e);
	if (!r && o->open_files)
		r = nsbox_policy_set_open_files(p, o->open_files, &e);
	if (!r && o->share_net_given)
		r = nsbox_policy_set_share_net(p, o->share_net, &e);
	/* Each rule parsed again by the policy code: the client's text is
	 * never trusted as checked. */
	for (size_t i = 0; !r && i < o->n_net_allow; i++)
		if ((r = nsbox_policy_set(p, "Network", "Allow", o->net_allow[i], &e)) < 0) {
			snprintf(eb, el, "net.allow %zu (%s): %s", i, o->net_allow[i], nsbox_error_message(e));
			drop_error(e);
			return -1;
		}
	r = r ?: net_limit(p, "MaxBytesOut", o->net_max_out, &e);
	r = r ?: net_limit(p, "MaxBytesIn", o->net_max_in, &e);
	r = r ?: net_limit(p, "MaxConnections", o->net_max_conns, &e);
	if (!r && o->dist_packages)
		r = nsbox_policy_set(p, "Python", "DistPackages", "yes", &e);
	if (!r && o->rootfs)
		r = nsbox_policy_set(p, "Filesystem", "RootFS", o->rootfs, &e);
	/* The sandbox's pid 1 opens these before it leaves the host's mount
	 * namespace: the very objects the client opened, whatever their
	 * paths have become since. */
	if (!r && o->workspace_fd >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), fds[o->workspace_fd]);
		r = nsbox_policy_set_workspace(p, path, &e);
	}
	for (size_t i = 0; !r && i < o->n_binds; i++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), fds[o->binds[i].fd]);
		r = nsbox_policy_add_bind(p, path, o->binds[i].dst, o->binds[i].writable, &e);
	}
	for (size_t i = 0; !r && i < o->n_env; i++) {
		const char *eq = strchr(o->env[i], '=');
		char *name = eq ? strndup(o->env[i], (size_t)(eq - o->env[i])) : NULL;

		if (!name) {
			snprintf(eb, el, "env[%zu]: %s", i, eq ? "out of memory" : "not NAME=VALUE");
			return -1;
		}
		r = nsbox_policy_setenv(p, name, eq + 1, &e);
		free(name);
	}
	if (r < 0)
		snprintf(eb, el, "%s", nsbox_error_message(e));
	drop_error(e);
	return r;
}

static bool poolable(const struct svc_open *o)
{
	return !o->memory && !o->pids && !o->tmp_size && !o->file_size && !o->open_files && !(o->cpus > 0) &&
	       !o->share_net_given && !o->dist_packages && o->workspace_fd < 0 && !o->n_binds && !o->n_env &&
	       !o->output_limit && !o->cold && !o->n_net_allow && !o->rootfs;
}

static void sess_link(struct conn *c, struct sess *x)
{
	x->conn = c;
	x->next = c->sessions;
	c->sessions = x;
}

/* EDQUOT (and why, in eb) when a session with these limits (0: none) would
 * take uid past its rule's MaxMemory, MaxCPUs or MaxPids, given what its
 * other sessions hold (mem, cpus, pids); else 0.  With a cap, a session
 * without that limit is refused. */
static int quota_refused(const struct conf_rule *rule, uid_t uid, uint64_t mem, double cpus, uint64_t pids,
			 uint64_t x_mem, double x_cpus, uint64_t x_pids, char *eb, size_t el)
{
	if (rule->max_memory && (!x_mem || mem + x_mem > rule->max_memory)) {
		snprintf(eb, el, "%s: uid %u would have %llu bytes of memory limits, [%s] MaxMemory is %llu",
			 x_mem ? "memory" : "no memory limit", (unsigned)uid, (unsigned long long)(mem + x_mem), rule->section,
			 (unsigned long long)rule->max_memory);
		return EDQUOT;
	}
	if (rule->max_cpus > 0 && (!(x_cpus > 0) || cpus + x_cpus > rule->max_cpus + 1e-9)) {
		snprintf(eb, el, "%s: uid %u would have %g CPUs, [%s] MaxCPUs is %g", x_cpus > 0 ? "CPUs" : "no CPU limit",
			 (unsigned)uid, cpus + x_cpus, rule->section, rule->max_cpus);
		return EDQUOT;
	}
	if (rule->max_pids && (!x_pids || pids + x_pids > rule->max_pids)) {
		snprintf(eb, el, "%s: uid %u would have %llu processes, [%s] MaxPids is %llu", x_pids ? "pids" : "no pids limit",
			 (unsigned)uid, (unsigned long long)(pids + x_pids), rule->section, (unsigned long long)rule->max_pids);
		return EDQUOT;
	}
	return 0;
}

/* x's sandbox exists (from the pool, or just made): check what the client's
 * uid may have, hand it over, answer OPENED. */
static void finish_open(struct conn *c, struct sess *x)
{
	const struct conf_rule *rule = conf_rule_for(&D.conf, c->uid, c->gid, c->groups, c->n_groups);
	nsbox_error_t *ne = NULL;
	char eb[1024] = "", *hello = NULL;
	int out_fds[2] = { -1, -1 }, code = 0;
	unsigned char rnd[SVC_HANDLE_LEN / 2];
	unsigned n_live;
	uint64_t mem, pids;
	double cpus;
	json_t *hj;

	x->state = S_LIVE;
	x->memory = x->info.memory_limit;
	x->cpus = x->info.cpus_limit;
	x->pids = x->info.pids_limit;
	/* What the uid has besides this one. */
	sess_unlink(c, x);
	uid_usage(c->uid, x, &n_live, &mem, &cpus, &pids);
	code = quota_refused(rule, c->uid, mem, cpus, pids, x->memory, x->cpus, x->pids, eb, sizeof(eb));
	if (!code && nsbox_session_handoff(x->s, &out_fds[0], &out_fds[1], &hello, &ne) < 0)
		code = EIO, snprintf(eb, sizeof(eb), "%s", nsbox_error_message(ne));
	drop_error(ne);
	if (!code && (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd) ||
		      (x->pidfd = fcntl(out_fds[1], F_DUPFD_CLOEXEC, 3)) < 0 ||
		      (x->sock = fcntl(out_fds[0], F_DUPFD_CLOEXEC, 3)) < 0))
		code = EIO, snprintf(eb, sizeof(eb), "getrandom or dup failed");
	/* Its end must be seen (EXITED, its uid and quota back). */
	if (!code && epoll_ctl(D.ep, EPOLL_CTL_ADD, x->pidfd, &(struct epoll_event){ .events = EPOLLIN, .data.ptr = x }) < 0)
		code = EIO, snprintf(eb, sizeof(eb), "epoll_ctl: %s", strerror(errno));
	if (code) {
		uint32_t id = x->open_id;

		for (int i = 0; i < 2; i++)
			if (out_fds[i] >= 0)
				close(out_fds[i]);
		free(hello);
		sess_end_start(x, true);	/* not linked: freed once reaped */
		reply_error(c, id, code, "%s", eb);
		return;
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(x->handle + 2 * i, 3, "%02x", rnd[i]);
	sess_link(c, x);
	D.opened++;
	hj = json_loads(hello, 0, NULL);
	free(hello);
	reply_fds(c, SVC_OPENED, x->open_id,
		  json_pack("{s:s,s:i,s:o,s:{s:I,s:I,s:f},s:I,s:b}", "handle", x->handle, "pid", (int)x->info.pid, "hello",
			    hj ? hj : json_object(), "limits", "memory", (json_int_t)x->info.memory_limit, "pids",
			    (json_int_t)x->info.pids_limit, "cpus", x->info.cpus_limit, "host_uid", sess_host_uid(x),
			    "pooled", x->pooled),
		  out_fds, 2);
}

/* The worker made (or failed to make) x's sandbox. */
static void open_made(struct sess *x, struct job *j)
{
	struct conn *c = x->conn;

	if (j->rc < 0) {
		if (c)
			sess_unlink(c, x);
		if (c)
			reply_error(c, x->open_id, EIO, "%s", j->err);
		sess_free(x); /* its uid too */
		return;
	}
	x->s = j->s;
	x->info = j->info;
	x->state = S_LIVE;
	if (!c) {
		/* Its connection went meanwhile. */
		sess_end_start(x, true);
		return;
	}
	finish_open(c, x);
}

static void handle_open(struct conn *c, uint32_t id, const json_t *m, int *fds, size_t n_fds)
{
	const struct conf_rule *rule = conf_rule_for(&D.conf, c->uid, c->gid, c->groups, c->n_groups);
	struct svc_open o;
	struct nsbox_err e = { 0 };
	struct sess *x = NULL;
	struct pooled *pooled = NULL;
	struct job *j = NULL;
	unsigned host_gid;
	int dup_fds[SVC_MAX_FDS];
	bool dup_failed = false;

	_Static_assert(SVC_MAX_FDS <= sizeof(j->fds) / sizeof(j->fds[0]), "a job holds an OPEN's descriptors");
	unsigned n_live;
	uint64_t mem, pids, x_mem, x_pids;
	double cpus, x_cpus;
	int profile, code = 0;
	bool share_net;
	char eb[1024] = "";

	if (svc_open_parse(m, n_fds, &o, &e) < 0) {
		reply_error(c, id, EINVAL, "%s", e.msg);
		return;
	}
	/* Asked again at each OPEN: a reload (SIGHUP) that took the user
	 * out of AllowUsers/AllowGroups holds for connections already open. */
	if (!conf_allowed(&D.conf, c->uid, c->gid, c->groups, c->n_groups)) {
		reply_error(c, id, EACCES, "uid %u may no longer use nsboxd (nsboxd.conf(5) AllowUsers, AllowGroups)",
			    (unsigned)c->uid);
		return;
	}
	profile = conf_profile_index(o.profile);
	if (profile < 0) {
		reply_error(c, id, EINVAL, "OPEN: unknown profile '%.64s' (default, strict, permissive)", o.profile);
		return;
	}
	/* permissive shares the host's network unless OPEN says otherwise
	 * (nsbox-policy(5)): that is asking for it too. */
	share_net = o.share_net_given ? o.share_net : !strcmp(o.profile, "permissive");
	if (share_net && o.n_net_allow) {
		reply_error(c, id, EINVAL, "OPEN: net needs share_net false (profile %s): in the host's network an "
					   "allowlist would allow everything", o.profile);
		return;
	}
	/* Who may do what: nsboxd.conf(5). */
	if (!rule->profiles[profile])
		code = EACCES, snprintf(eb, sizeof(eb), "profile %s is not allowed for uid %u ([%s])", o.profile,
					(unsigned)c->uid, rule->section);
	else if (share_net && !rule->share_net)
		code = EACCES, snprintf(eb, sizeof(eb), "share_net is not allowed for uid %u ([%s] AllowShareNet=no%s)",
					(unsigned)c->uid, rule->section,
					o.share_net_given ? "" : "; profile permissive shares it unless share_net is false");
	else if (o.n_net_allow && !rule->net)
		code = EACCES, snprintf(eb, sizeof(eb),
					"a network allowlist is not allowed for uid %u ([%s] AllowNet=no): the proxy "
					"would connect with nsboxd's network identity",
					(unsigned)c->uid, rule->section);
	else if (o.n_binds && !rule->binds)
		code = EACCES, snprintf(eb, sizeof(eb), "binds are not allowed for uid %u ([%s] AllowBinds=no)",
					(unsigned)c->uid, rule->section);
	else if (o.workspace_fd >= 0 && !rule->workspace)
		code = EACCES, snprintf(eb, sizeof(eb), "a workspace is not allowed for uid %u ([%s] AllowWorkspace=no)",
					(unsigned)c->uid, rule->section);
	if (code) {
		reply_error(c, id, code, "%s", eb);
		return;
	}
	uid_usage(c->uid, NULL, &n_live, &mem, &cpus, &pids);
	if (n_live >= rule->max_sessions) {
		reply_error(c, id, EDQUOT, "uid %u has %u sessions (ended ones count until CLOSE), the most [%s] MaxSessions allows",
			    (unsigned)c->uid, n_live, rule->section);
		return;
	}
	if (D.n_sessions >= D.conf.max_sessions) {
		reply_error(c, id, EAGAIN, "the service has %u sessions, its MaxSessions", D.n_sessions);
		return;
	}
	/* The limits the session will have (the OPEN's, else its profile's)
	 * are judged before a sandbox is made or taken for it, and charged to
	 * the uid from now on: judged only once the sandbox existed, every
	 * OPEN of a uid at its cap had one made (or a pooled one used) and
	 * killed, and OPENs sent together were each judged without the others
	 * (finish_open judges the sandbox's own again). */
	x_mem = o.memory ? o.memory : D.prof[profile].memory;
	x_cpus = o.cpus > 0 ? o.cpus : D.prof[profile].cpus;
	x_pids = o.pids ? o.pids : D.prof[profile].pids;
	if ((code = quota_refused(rule, c->uid, mem, cpus, pids, x_mem, x_cpus, x_pids, eb, sizeof(eb)))) {
		reply_error(c, id, code, "%s", eb);
		return;
	}
	/* No confused deputy: every host object arrives as the client's own
	 * descriptor and is checked with the client's credentials, all of an
	 * OPEN's in one child (deputy.c). */
	{
		struct deputy_obj objs[DEPUTY_MAX_OBJS];
		size_t n = 0, bad = 0, ws = o.workspace_fd >= 0;

		if (ws)
			objs[n++] = (struct deputy_obj){ fds[o.workspace_fd], true };
		for (size_t i = 0; i < o.n_binds; i++)
			objs[n++] = (struct deputy_obj){ fds[o.binds[i].fd], o.binds[i].writable };
		if (n && (code = deputy_check(objs, n, c->uid, c->gid, c->groups, c->n_groups, &bad, eb, sizeof(eb)))) {
			if (ws && bad == 0)
				reply_error(c, id, code, "workspace refused: %s", eb);
			else
				reply_error(c, id, code, "bind %s refused: %s", o.binds[bad - ws].dst, eb);
			return;
		}
	}
	if (o.net_log_fd >= 0 && (code = deputy_check_log(fds[o.net_log_fd], eb, sizeof(eb)))) {
		reply_error(c, id, code, "net.log refused: %s", eb);
		return;
	}

	x = calloc(1, sizeof(*x));
	if (!x) {
		reply_error(c, id, ENOMEM, "out of memory");
		return;
	}
	x->kind = EV_SESS;
	x->pidfd = -1;
	x->sock = -1;
	x->open_id = id;
	x->uid = c->uid;
	x->memory = x_mem;
	x->cpus = x_cpus;
	x->pids = x_pids;
	if (poolable(&o) && (pooled = pool_take(profile))) {
		x->s = pooled->s;
		x->info = pooled->info;
		x->host_uid = pooled->host_uid;
		x->uid_owned = pooled->host_uid != 0;
		x->pooled = true;
		free(pooled);
		D.pool_hits++;
		sess_link(c, x);
		sess_count(x);
		finish_open(c, x);
		return;
	}
	/* The pool is empty but its next sandbox is being made: that one,
	 * rather than another made after it. */
	for (unsigned k = 0; poolable(&o) && !pooled && k < WORKER_MAX; k++)
		if (D.making[k] && D.making[k]->profile == profile && !D.making[k]->waiter)
			pooled = D.making[k];
	if (pooled) {
		pooled->waiter = x;
		x->state = S_PENDING;
		sess_link(c, x);
		sess_count(x);
		return;
	}
	/* Made by the worker: the loop serves everyone else meanwhile.  Files
	 * the sandbox writes in a workspace or a writable bind belong to
	 * whoever its user maps to, and a picked uid could read none of the
	 * client's: such a session maps to the client's own uid and primary
	 * gid (nsboxd(8), HOST UIDS).  So under any root nsboxd, with or
	 * without HostUidRange: mapped to root's uid, the sandbox could read
	 * the root-owned files of a directory the client can only list. */
	if (geteuid() == 0 && (o.workspace_fd >= 0 || o.n_binds)) {
		x->host_uid = (unsigned)c->uid;
		host_gid = (unsigned)c->gid;
	} else {
		x->host_uid = uid_alloc();
		x->uid_owned = x->host_uid != 0;
		host_gid = x->host_uid;
		if (D.host_uids && !x->host_uid) {
			free(x);
			reply_error(c, id, EAGAIN, "every host uid of HostUidRange is in use");
			return;
		}
	}
	j = job_new(JOB_CREATE, x);
	if (j) {
		j->client_uid = c->uid;
		j->for_client = true;
	}
	/* The policy names the client's descriptors by /proc/self/fd path, and
	 * the worker opens them after this request's own are closed: it gets
	 * copies, closed when it is done. */
	for (size_t i = 0; i < n_fds; i++) {
		dup_fds[i] = j ? fcntl(fds[i], F_DUPFD_CLOEXEC, 3) : -1;
		if (dup_fds[i] < 0)
			dup_failed = true;
		if (j)
			j->fds[j->n_fds++] = dup_fds[i];
	}
	if (!j || dup_failed ||
	    make_policy(o.profile, x->host_uid, host_gid, &j->pol, eb, sizeof(eb)) < 0 ||
	    apply_open(j->pol, &o, dup_fds, eb, sizeof(eb)) < 0) {
		if (!j || dup_failed)
			snprintf(eb, sizeof(eb), "out of memory or descriptors");
		if (j) {
			nsbox_policy_free(j->pol);
			for (int i = 0; i < j->n_fds; i++)
				closer_close(j->fds[i], c->uid);
			free(j);
		}
		if (x->uid_owned)
			uid_free(x->host_uid);
		free(x);
		reply_error(c, id, EINVAL, "%s", eb);
		return;
	}
	j->cold = o.cold;
	j->output_limit = o.output_limit;
	j->net_log_fd = o.net_log_fd >= 0 ? dup_fds[o.net_log_fd] : -1;
	x->state = S_PENDING;
	sess_link(c, x);
	sess_count(x);
	worker_submit(j);
}

static void handle_request(struct conn *c, uint16_t type, uint32_t id, const json_t *m, int *fds, size_t n_fds)
{
	struct sess *x, **link = NULL;

	if (type != SVC_OPEN && n_fds) {
		reply_error(c, id, EINVAL, "%s carries no descriptors", svc_type_name(type));
		return;
	}
	if (!c->hello && type != SVC_HELLO) {
		reply_error(c, id, EPROTO, "HELLO first");
		return;
	}
	switch (type) {
	case SVC_HELLO: {
		const json_t *v = json_object_get(m, "version");
		const struct conf_rule *r = conf_rule_for(&D.conf, c->uid, c->gid, c->groups, c->n_groups);

		if (!json_is_integer(v) || json_integer_value(v) != SVC_VERSION) {
			reply_error(c, id, EPROTONOSUPPORT, "protocol version %lld is not supported (this is version %d)",
				    (long long)json_integer_value(v), SVC_VERSION);
			return;
		}
		/* Once: a second HELLO counted the connection out of those
		 * waiting for theirs again, and the count, wrapped or short,
		 * left other connections' silence unswept. */
		if (!c->hello) {
			c->hello = true;
			D.n_nohello--;
			/* Descriptors from here on (OPEN's): before HELLO is
			 * answered, none (the listener's, set_passrights). */
			set_passrights(c->fd, true);
		}
		reply(c, SVC_HELLO, id,
		      json_pack("{s:i,s:s,s:s,s:{s:i,s:I,s:f,s:I}}", "version", SVC_VERSION, "server", "nsboxd",
				"library", nsbox_version(), "limits", "max_sessions", (int)r->max_sessions, "max_memory",
				(json_int_t)r->max_memory, "max_cpus", r->max_cpus, "max_pids", (json_int_t)r->max_pids));
		return;
	}
	case SVC_OPEN:
		handle_open(c, id, m, fds, n_fds);
		return;
	case SVC_KILL:
	case SVC_CLOSE:
	case SVC_INFO:
		x = sess_find(c, m, &link);
		if (!x) {
			/* Handles are per connection: another connection's handle is
			 * as unknown here as a made-up one. */
			reply_error(c, id, ENOENT, "no such session on this connection");
			return;
		}
		if (type == SVC_KILL) {
			if (x->state == S_LIVE)
				nsbox_session_kill(x->s);
			reply(c, SVC_OK, id, json_object());
		} else if (type == SVC_CLOSE) {
			/* Answered once the worker has reaped it (sess_ended):
			 * the loop serves the others meanwhile. */
			*link = x->next;
			x->next = NULL;
			x->conn = NULL;
			x->close_wanted = true;
			x->close_id = id;
			x->reply_serial = c->serial;
			if (x->state == S_LIVE) {
				sess_end_start(x, true);
			} else if (x->state == S_ENDED) {
				struct nsbox_run_status rs = { .exited = x->st.exited, .exit_status = x->st.exit_code,
							       .term_signal = x->st.term_signal,
							       .oom_killed = x->st.oom_killed,
							       .peak_memory = x->st.peak_memory };

				sess_ended(x, &rs, NULL);
			}
		} else {
			struct nsbox_session_info info = { .struct_size = sizeof(info) };

			/* Only a live session's may be asked (the worker holds an
			 * ending one's).  alive is nsboxd's own record: the
			 * library's is false from the hand-off on (INFO said a
			 * live session was not). */
			if (x->state == S_LIVE)
				nsbox_session_info(x->s, &info, NULL);
			else
				info.pid = x->info.pid;
			reply(c, SVC_INFO, id,
			      json_pack("{s:s,s:b,s:i,s:I,s:I,s:I}", "handle", x->handle, "alive", !x->ended && x->state == S_LIVE,
					"pid", (int)info.pid, "memory_current", (json_int_t)info.memory_current,
					"memory_peak", (json_int_t)(x->ended ? x->st.peak_memory : info.memory_peak),
					"host_uid", sess_host_uid(x)));
		}
		return;
	default:
		reply_error(c, id, EPROTO, "%s is not a request", svc_type_name(type));
		return;
	}
}

/* ---- connections ---- */

static void conn_close(struct conn *c)
{
	/* Every session the connection opened goes with it: a pending or
	 * ending one when the worker is done with it. */
	while (c->sessions) {
		struct sess *x = c->sessions;

		c->sessions = x->next;
		x->next = NULL;
		x->conn = NULL;
		if (x->state == S_LIVE)
			sess_end_start(x, true);
		else if (x->state == S_ENDED)
			sess_free(x);
	}
	while (c->out) {
		struct outmsg *m = c->out;

		c->out = m->next;
		out_free(m);
	}
	epoll_ctl(D.ep, EPOLL_CTL_DEL, c->fd, NULL);
	/* Requests it did not read may carry descriptors: dropped with the
	 * socket, their last close may wait (closer.h). */
	closer_close(c->fd, c->uid);
	if (c->prev)
		c->prev->next = c->next;
	else
		D.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	D.n_conns--;
	if (!c->hello)
		D.n_nohello--;
	D.freed++;
	if (!D.n_conns)
		D.idle_since = mono_ns();
	free(c);
	notify_status();
}

/* No connection is accepted while CLOSER_TOTAL_MAX descriptors wait to be
 * closed (closer.h): each refused or closed one would add its socket; nor
 * until D.accept_resume after accept4 found no descriptor or memory for
 * one.  Pauses or resumes accepting as those say; true while paused. */
static bool listen_paused(void)
{
	static bool closer_full_said;
	bool closer_full = closer_total() >= CLOSER_TOTAL_MAX;
	bool short_of = D.accept_resume && mono_ns() < D.accept_resume;
	bool pause = closer_full || short_of;

	if (!short_of)
		D.accept_resume = 0;
	if (pause != D.listen_paused && D.listen.fd >= 0) {
		struct epoll_event ev = { .events = pause ? 0 : EPOLLIN, .data.ptr = &D.listen };

		if (epoll_ctl(D.ep, EPOLL_CTL_MOD, D.listen.fd, &ev) == 0)
			D.listen_paused = pause;
	}
	/* Said when the closer's state changes (accepting again only once
	 * the shortage's pause is over too). */
	if (closer_full != closer_full_said && (closer_full || !pause) && D.listen_paused == pause) {
		closer_full_said = closer_full;
		logmsg("%s connections: %u client descriptors wait to be closed", closer_full ? "not accepting" : "accepting",
		       closer_total());
	}
	return pause;
}

/* Connections held back while their uid's descriptors waited to be
 * closed: read again once fewer wait. */
static void unthrottle(void)
{
	(void)listen_paused();
	for (struct conn *c = D.conns, *next; c; c = next) {
		next = c->next;
		if (c->throttled && closer_pending(c->uid) < CLOSER_UID_MAX) {
			c->throttled = false;
			conn_rearm(c);
		}
	}
}

/* Requests read per uid in this wake-up of the loop (round_used): at most
 * MAX_BATCH over all of a uid's connections, not per connection, so one
 * uid's many connections get one share of the loop, not one each.  A
 * connection not read is read at a later wake-up (epoll is level-triggered). */
static struct {
	uid_t uid;
	unsigned n;
} round_uids[64];
static unsigned n_round_uids;

static unsigned *round_used(uid_t uid)
{
	for (unsigned i = 0; i < n_round_uids; i++)
		if (round_uids[i].uid == uid)
			return &round_uids[i].n;
	if (n_round_uids == sizeof(round_uids) / sizeof(round_uids[0]))
		return NULL;
	round_uids[n_round_uids].uid = uid;
	round_uids[n_round_uids].n = 0;
	return &round_uids[n_round_uids++].n;
}

/* Read requests while c's uid has some of this wake-up's MAX_BATCH left.
 * Returns -1 when c was closed. */
static int conn_read(struct conn *c)
{
	static char buf[SVC_MAX_MSG];
	unsigned spare = 0, *used = round_used(c->uid);

	if (!used)
		used = &spare;
	for (; *used < MAX_BATCH && c->reading; (*used)++) {
		/* Room for every descriptor a packet can carry (SCM_MAX_FD):
		 * those the kernel can't hand over it closes itself, on this
		 * thread, and such a close may wait (closer.h). */
		union {
			char b[CMSG_SPACE(MAX_RECV_FDS * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
		int fds[MAX_RECV_FDS];
		size_t n_fds = 0;

		/* A uid whose descriptors wait to be closed sends no more
		 * until they are (the closer's eventfd reads it again). */
		if (closer_pending(c->uid) >= CLOSER_UID_MAX) {
			c->throttled = true;
			return conn_rearm(c);
		}
		struct nsbox_err e = { 0 };
		uint16_t type;
		uint32_t id;
		json_t *m;
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		/* The descriptors are ours as soon as recvmsg returns, whatever
		 * n says: a packet of 0 bytes reads as 0, like the end of the
		 * connection, and still carries its descriptors (up to 253 a
		 * packet: closing the connection without them left them open
		 * here for good, and a client that connected again ran nsboxd
		 * out of descriptors). */
		for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				size_t k2 = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < k2; i++) {
					int fd;

					memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
					if (n_fds < MAX_RECV_FDS)
						fds[n_fds++] = fd;
					else
						closer_close(fd, c->uid);
				}
			}
		if (n <= 0) {
			for (size_t i = 0; i < n_fds; i++)
				closer_close(fds[i], c->uid);
			conn_close(c);
			return -1;
		}
		if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n_fds > SVC_MAX_FDS) {
			for (size_t i = 0; i < n_fds; i++)
				closer_close(fds[i], c->uid);
			client_log(c->uid, "uid %u pid %d: message over %u bytes or %d descriptors; closing", (unsigned)c->uid,
			       (int)c->pid, SVC_MAX_MSG, SVC_MAX_FDS);
			/* A reply that could not be sent closed c already. */
			if (reply_error(c, 0, EPROTO, "message over %u bytes or %d descriptors", SVC_MAX_MSG,
					SVC_MAX_FDS) == 0)
				conn_close(c);
			return -1;
		}
		if (svc_decode(buf, (size_t)n, &type, &id, &m, &e) < 0) {
			for (size_t i = 0; i < n_fds; i++)
				closer_close(fds[i], c->uid);
			client_log(c->uid, "uid %u pid %d: %s; closing", (unsigned)c->uid, (int)c->pid, e.msg);
			if (reply_error(c, 0, EPROTO, "%s", e.msg) == 0)
				conn_close(c);
			return -1;
		}
		{
			struct conn *alive = c;
			uid_t uid = c->uid;

			handle_request(c, type, id, m, fds, n_fds);
			json_decref(m);
			for (size_t i = 0; i < n_fds; i++)
				closer_close(fds[i], uid);
			/* A reply that could not be queued closed c. */
			for (alive = D.conns; alive && alive != c; alive = alive->next)
				;
			if (!alive)
				return -1;
		}
	}
	return 0;
}

/* Said in one packet, then closed: a connection refused before it is one. */
static void refuse(int fd, uid_t uid, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void refuse(int fd, uid_t uid, int code, const char *fmt, ...)
{
	char msg[256], *b = NULL;
	size_t bl;
	va_list ap;
	json_t *m;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m = json_pack("{s:i,s:s,s:s}", "errno", code, "error", errno_name(code), "message", msg);
	if (m && svc_encode(SVC_ERROR, 0, m, &b, &bl, NULL) == 0)
		(void)send(fd, b, bl, MSG_NOSIGNAL | MSG_DONTWAIT);
	free(b);
	json_decref(m);
	/* What it sent before it was refused goes with the socket. */
	closer_close(fd, uid);
}

/* False when there was nothing to accept (or accept4 failed). */
static bool accept_one(void)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct conn *c;
	int fd = accept4(D.listen.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct epoll_event ev = { .events = EPOLLIN };
	gid_t groups[MAX_GROUPS];
	socklen_t glen = sizeof(groups);
	size_t n_groups = 0;

	if (fd < 0) {
		/* The connection stays in the backlog and the listener readable:
		 * tried again at once, the loop spun on it (all of a CPU) for as
		 * long as nsboxd had no descriptor to spare.  Tried again in
		 * 100 ms; meanwhile the rest is served, and what ends frees some. */
		int e = errno;

		if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
			static unsigned long long said;

			if (!said || mono_ns() - said > 60000000000ull) {
				logmsg("accept: %s; not accepting for 100 ms at a time until it passes", strerror(e));
				said = mono_ns();
			}
			D.accept_resume = mono_ns() + 100000000ull;
			(void)listen_paused();
		}
		return false;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		closer_close(fd, (uid_t)-1);
		return true;
	}
	/* Every group, or no connection: rules for a group the client is in
	 * must not be skipped because it is in many (over MAX_GROUPS). */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) < 0) {
		client_log(cr.uid, "uid %u pid %d: its groups: %s (over %d?); refused", (unsigned)cr.uid, (int)cr.pid,
		       strerror(errno), MAX_GROUPS);
		closer_close(fd, cr.uid);
		return true;
	}
	n_groups = glen / sizeof(gid_t);
	if (!conf_allowed(&D.conf, cr.uid, cr.gid, groups, n_groups)) {
		refuse(fd, cr.uid, EACCES, "this user may not use nsboxd (nsboxd.conf(5) AllowUsers, AllowGroups)");
		return true;
	}
	if (D.n_conns >= D.conf.max_connections) {
		refuse(fd, cr.uid, EAGAIN, "nsboxd has %u connections, its MaxConnections= (nsboxd.conf(5))", D.n_conns);
		return true;
	}
	/* One user can't hold every connection: root and nsboxd's own user
	 * (who may stop it anyway) only count towards the total. */
	if (cr.uid != 0 && cr.uid != geteuid()) {
		unsigned mine = 0;

		for (struct conn *o = D.conns; o; o = o->next)
			mine += o->uid == cr.uid;
		if (mine >= D.conf.max_conns_per_user) {
			client_log(cr.uid, "uid %u pid %d: refused, it has %u connections (MaxConnectionsPerUser=)", (unsigned)cr.uid,
			       (int)cr.pid, mine);
			refuse(fd, cr.uid, EAGAIN, "uid %u has %u connections to nsboxd, its MaxConnectionsPerUser= (nsboxd.conf(5))",
			       (unsigned)cr.uid, mine);
			return true;
		}
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		closer_close(fd, cr.uid);
		return true;
	}
	/* Those queued before activation set the listener's: the same. */
	set_passrights(fd, false);
	c->kind = EV_CONN;
	c->fd = fd;
	c->serial = ++D.next_serial;
	c->uid = cr.uid;
	c->gid = cr.gid;
	c->pid = cr.pid;
	memcpy(c->groups, groups, n_groups * sizeof(gid_t));
	c->n_groups = n_groups;
	c->reading = true;
	c->accepted = mono_ns();
	ev.data.ptr = c;
	if (epoll_ctl(D.ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		closer_close(fd, cr.uid);
		free(c);
		return true;
	}
	c->next = D.conns;
	if (D.conns)
		D.conns->prev = c;
	D.conns = c;
	D.n_conns++;
	D.n_nohello++;
	notify_status();
	return true;
}

/* Connections that said nothing for HelloTimeoutSec: told why, closed
 * (a silent client must not hold a connection, nor the per-user count).
 * Returns the ms until the next is due, or -1: none waits. */
static int hello_sweep(void)
{
	unsigned long long now = mono_ns(), limit = (unsigned long long)(D.conf.hello_timeout * 1e9), next = 0;
	struct conn *c = D.conns;

	if (!D.n_nohello)
		return -1;
	while (c) {
		struct conn *n = c->next;

		if (!c->hello) {
			if (now - c->accepted >= limit) {
				/* A reply that could not be sent closed c already
				 * (a client that shut its reading side: EPIPE). */
				if (reply_error(c, 0, ETIMEDOUT, "no HELLO in %g s (nsboxd.conf(5) HelloTimeoutSec)",
						D.conf.hello_timeout) == 0) {
					(void)conn_flush(c);
					conn_close(c);
				}
			} else if (!next || c->accepted + limit - now < next) {
				next = c->accepted + limit - now;
			}
		}
		c = n;
	}
	return next ? (int)(next / 1000000 + 1) : -1;
}

/* A sandbox ended by itself (OOM, crash, exit): the worker reaps it, and
 * its owner hears (sess_ended). */
static void sess_died(struct sess *x)
{
	sess_end_start(x, false);
}

/* Jobs the worker finished, in the order they were given. */
static void worker_collect(void)
{
	struct job *j = worker_done();

	while (j) {
		struct job *next = j->next;
		enum ev_kind *k = j->owner;

		if (j->kind == JOB_CREATE && k && *k == EV_POOLED)
			pool_made(j->owner, j);
		else if (j->kind == JOB_CREATE && k)
			open_made(j->owner, j);
		else if (j->kind == JOB_END && k)
			sess_ended(j->owner, &j->st, j->warnings);
		if (j->kind == JOB_END)
			uid_free(j->free_uid);
		free(j);
		j = next;
	}
}

/* ---- setup ---- */

static int load_config(struct conf *c)
{
	char eb[1024];

	conf_defaults(c);
	if (conf_load(c, D.o->config_path, D.o->config_may_be_missing, eb, sizeof(eb)) < 0) {
		logmsg("%s", eb);
		return -1;
	}
	return 0;
}

/* A client's workspace and binds are its descriptors of mounts in its
 * mount namespace, which the kernel lets nsboxd clone only from its own:
 * said once at start when ours is not init's (a unit with ProtectSystem=,
 * ProtectHome=, PrivateTmp= or the like gives nsboxd one of its own).
 * Where init's can't be seen (a container's init outside our user
 * namespace), nothing is said; the error of each refused OPEN says why. */
static void check_mount_ns(void)
{
	struct stat self, init;

	if (stat("/proc/self/ns/mnt", &self) == 0 && stat("/proc/1/ns/mnt", &init) == 0 &&
	    (self.st_dev != init.st_dev || self.st_ino != init.st_ino))
		logmsg("nsboxd runs in a mount namespace other than init's: workspaces and binds of clients in init's "
		       "will be refused (nsboxd(8), SYSTEMD UNIT)");
}

/* Whether the /proc the host's users see hides other users' processes
 * (hidepid=, on its superblock's options in mountinfo): init's mount
 * namespace's, not ours (a unit's ProtectSystem= and the like give nsboxd
 * one of its own); ours where init's can't be read.  -1: can't tell. */
static int proc_hides_pids(void)
{
	FILE *f = fopen("/proc/1/mountinfo", "re");

	if (!f)
		f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int r = -1;

	if (!f)
		return -1;
	/* The last one: a proc mounted over another hides it. */
	while (fgets(line, sizeof(line), f)) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS] - FSTYPE SOURCE SUPER */
		char *sep = strstr(line, " - "), *mp = strchr(line, ' ');

		for (int k = 0; mp && k < 3; k++)
			mp = strchr(mp + 1, ' ');
		if (!sep || !mp || strncmp(mp, " /proc ", 7) || strncmp(sep, " - proc ", 8))
			continue;
		r = strstr(sep, "hidepid=") && !strstr(sep, "hidepid=0") && !strstr(sep, "hidepid=off");
	}
	fclose(f);
	return r;
}

/* Any user of the host reads /proc/PID/cmdline, status, sched and net/ of
 * every process unless /proc hides them: said once at start (and reload)
 * when clients of other uids may connect. */
static void check_proc_hidepid(void)
{
	if ((D.conf.n_allow_uids || D.conf.n_allow_gids) && proc_hides_pids() == 0)
		logmsg("/proc is mounted without hidepid=: every user of this host can read the command lines, status "
		       "and network state of every session's processes (nsboxd(8), SHARED HOSTS)");
}

/* What a session of each profile has unless its OPEN says otherwise: the
 * built-in policies' limits, judged against a uid's quota before a sandbox
 * is made (handle_open). */
static int load_profile_limits(void)
{
	for (int i = 0; i < CONF_MAX_PROFILES; i++) {
		nsbox_policy_t *p = NULL;
		nsbox_error_t *e = NULL;
		char *text = NULL;
		int r = nsbox_policy_new(conf_profiles[i], &p, &e) < 0 || !(text = nsbox_policy_to_string(p)) ? -1
			: conf_policy_limits(text, &D.prof[i].memory, &D.prof[i].pids, &D.prof[i].cpus);

		if (r < 0)
			logmsg("profile %s: can't read its limits: %s", conf_profiles[i],
			       e ? nsbox_error_message(e) : "out of memory or unreadable");
		nsbox_free(text);
		nsbox_policy_free(p);
		drop_error(e);
		if (r < 0)
			return -1;
	}
	return 0;
}

static void apply_config(void)
{
	unsigned n;

	free(D.uid_used);
	free(D.uid_foreign);
	D.uid_used = D.uid_foreign = NULL;
	D.host_uids = false;
	if (!D.conf.uid_count) {
		if (geteuid() == 0)
			logmsg("no HostUidRange: every sandbox's user maps to root's uid (without capabilities)");
		return;
	}
	/* Mapping another host uid needs CAP_SETUID over our user namespace
	 * (user_namespaces(7)). */
	if (geteuid() != 0) {
		logmsg("HostUidRange needs a root nsboxd: every sandbox's user maps to uid %u, ours",
		       (unsigned)geteuid());
		return;
	}
	D.uid_used = calloc(D.conf.uid_count / 8 + 1, 1);
	D.uid_foreign = calloc(D.conf.uid_count / 8 + 1, 1);
	if (!D.uid_used || !D.uid_foreign) {
		logmsg("HostUidRange: out of memory; every sandbox's user maps to root's uid");
		return;
	}
	D.host_uids = true;
	n = scan_foreign();
	if (n)
		logmsg("HostUidRange: %u of its ids name a user or group or own a process; skipped", n);
	if (n == D.conf.uid_count)
		logmsg("HostUidRange: no free uid: every OPEN will fail with EAGAIN");
}

static void handle_signals(void)
{
	struct signalfd_siginfo si;

	while (read(D.sig.fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			struct conf nc;

			sd_notify(0, "RELOADING=1");
			if (load_config(&nc) == 0) {
				/* Live sessions keep their host uids: the range only
				 * changes when none is in use. */
				bool keep_uids = D.n_sessions || D.pool || D.refilling || worker_pending();

				if (keep_uids) {
					nc.uid_first = D.conf.uid_first;
					nc.uid_count = D.conf.uid_count;
				}
				D.conf = nc;
				if (!keep_uids)
					apply_config();
				logmsg("configuration reloaded");
				check_proc_hidepid();
			}
			sd_notify(0, "READY=1");
		} else {
			D.stopping = true;
		}
	}
}

/* --listen PATH: the socket is made with its mode (the umask) and its
 * group (this thread's fsgid) from the start, in the directory opened
 * first, and nothing is done to it by name once it exists: another user
 * who may write that directory could have swapped it for a symlink or a
 * hard link meanwhile (a root nsboxd's chown and chmod of the path
 * followed a symlink to any file: /etc/shadow mode 0666).  An unprivileged
 * nsboxd can't take a supplementary group as its fsgid: it sets the group
 * afterwards, never through a symlink.  Returns the listening socket. */
static int listen_on(const char *path, const char *group, mode_t mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	bool chown_after = false;
	gid_t gid = (gid_t)-1;
	struct stat st;
	mode_t old_umask;
	int dfd = -1, fd = -1, r, e;

	if (!dir || !*base || !strcmp(base, ".") || !strcmp(base, "..") || strlen(path) >= sizeof(sa.sun_path)) {
		logmsg("--listen %s: %s", path, dir ? "not a path to a new socket, or too long" : "out of memory");
		goto fail;
	}
	if (group) {
		struct group *g = getgrnam(group);
		char *end;
		long v = g ? (long)g->gr_gid : strtol(group, &end, 10);

		if (!g && (end == group || *end || v < 0 || v >= (long)UINT32_MAX)) {
			logmsg("--group %s: no such group", group);
			goto fail;
		}
		gid = (gid_t)v;
	}
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st) < 0) {
		logmsg("--listen %s: %s: %s", path, dir, strerror(errno));
		goto fail;
	}
	/* A set-group-ID directory gives its own group to what is made in it. */
	if (group && (st.st_mode & S_ISGID) && st.st_gid != gid) {
		logmsg("--listen %s: %s is set-group-ID (group %u): the socket would get that group, not --group's", path,
		       dir, (unsigned)st.st_gid);
		goto fail;
	}
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, base) >= (int)sizeof(sa.sun_path)) {
		logmsg("--listen %s: path too long", path);
		goto fail;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		logmsg("socket: %s", strerror(errno));
		goto fail;
	}
	/* Before listen(): a connection takes the listener's setting. */
	set_passrights(fd, false);
	(void)unlinkat(dfd, base, 0);
	old_umask = umask(~mode & 0777);
	/* setfsgid answers the fsgid it replaced: asked twice, whether it took. */
	if (group) {
		setfsgid(gid);
		chown_after = (gid_t)setfsgid(gid) != gid;
	}
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	e = errno;
	if (group)
		setfsgid(getegid());
	umask(old_umask);
	if (r < 0 || listen(fd, 128) < 0) {
		logmsg("--listen %s: %s", path, strerror(r < 0 ? e : errno));
		goto fail;
	}
	if (chown_after && fchownat(dfd, base, (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) < 0) {
		logmsg("--group %s: %s", group, strerror(errno));
		goto fail;
	}
	/* What the name holds now: a check (a directory's default ACL may
	 * give another mode), not a repair by name. */
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISSOCK(st.st_mode)) {
		logmsg("--listen %s: not our socket any more (replaced by another user who may write %s?)", path, dir);
		goto fail;
	}
	if ((st.st_mode & 07777) != mode || (group && st.st_gid != gid))
		logmsg("--listen %s: the socket has mode %04o, group %u (--mode %04o%s): a default ACL of %s?", path,
		       (unsigned)(st.st_mode & 07777), (unsigned)st.st_gid, (unsigned)mode, group ? ", --group" : "",
		       dir);
	D.listen_dir = dfd;	/* its socket is removed there at exit */
	free(dir);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	return -1;
}

static int open_listener(void)
{
	int n = sd_listen_fds(1);

	if (n < 0) {
		logmsg("sd_listen_fds: %s", strerror(-n));
		return -1;
	}
	if (n > 1) {
		logmsg("socket activation passed %d sockets; nsboxd takes one (ListenSequentialPacket=)", n);
		return -1;
	}
	if (n == 1) {
		D.listen.fd = SD_LISTEN_FDS_START;
		if (sd_is_socket_unix(D.listen.fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
			logmsg("the activation socket is not a listening AF_UNIX SOCK_SEQPACKET socket");
			return -1;
		}
		D.activated = true;
		fcntl(D.listen.fd, F_SETFD, FD_CLOEXEC);
		fcntl(D.listen.fd, F_SETFL, O_NONBLOCK);
		set_passrights(D.listen.fd, false);
		return 0;
	}
	if (!D.o->listen_path) {
		logmsg("no socket: use --listen PATH, or socket activation (nsboxd.socket)");
		return -1;
	}
	D.listen.fd = listen_on(D.o->listen_path, D.o->listen_group, (mode_t)D.o->listen_mode);
	return D.listen.fd < 0 ? -1 : 0;
}

static void shutdown_all(void)
{
	sd_notify(0, "STOPPING=1");
	D.stopping = true;
	while (D.conns)
		conn_close(D.conns);
	pool_drop_all();
	/* The worker ends what it was given (and makes what it was asked to:
	 * those are ended here, the worker gone). */
	worker_stop();
	D.refilling = 0;
	for (struct job *j = worker_done(); j;) {
		struct job *next = j->next;

		if (j->kind == JOB_CREATE && j->rc == 0) {
			struct nsbox_run_status st = { .struct_size = sizeof(st) };

			nsbox_session_end(j->s, true, &st, NULL);
			nsbox_session_free(j->s);
		}
		/* Owners are in no list any more: every connection is gone. */
		free(j->owner);
		free(j);
		j = next;
	}
}

/* Each live session holds about five descriptors here (its pidfd, and
 * its session's socket, pidfd, ready fd...), so MaxSessions=1024 needs
 * thousands.  The unit sets LimitNOFILE=65536, but started by hand from a
 * shell whose soft limit is 1024, OPENs failed from the ~200th session
 * (EIO, "getrandom or dup failed"): take the hard limit (the sandboxes
 * get their own, OpenFiles=), and say so if that is still short. */
static void raise_nofile(void)
{
	struct rlimit rl;
	unsigned long long need = (unsigned long long)D.conf.max_sessions * 6 + 256;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && (unsigned long long)rl.rlim_cur < need)
		logmsg("RLIMIT_NOFILE is %llu: MaxSessions=%u may need %llu descriptors (raise the hard limit, or "
		       "LimitNOFILE= in the unit)",
		       (unsigned long long)rl.rlim_cur, D.conf.max_sessions, need);
}

int daemon_run(const struct daemon_opts *o)
{
	sigset_t mask;
	struct epoll_event ev;

	memset(&D, 0, sizeof(D));
	D.o = o;
	/* nsboxd makes its sandboxes itself.  An NSBOX_CONNECT inherited from
	 * the shell that started it (set there for its agents) had its
	 * workers ask a service for each: its own socket (every OPEN hung,
	 * the pool never filled) or another nsboxd, as root, which then saw
	 * root's rights instead of the client's.  Before any thread or helper. */
	if (getenv("NSBOX_CONNECT")) {
		logmsg("NSBOX_CONNECT=%s ignored: nsboxd makes its sandboxes itself", getenv("NSBOX_CONNECT"));
		unsetenv("NSBOX_CONNECT");
	}
	D.listen.kind = EV_LISTEN;
	D.sig.kind = EV_SIGNAL;
	D.listen.fd = D.sig.fd = D.listen_dir = -1;
	if (load_config(&D.conf) < 0)
		return 2;
	if (load_profile_limits() < 0)
		return 1;
	apply_config();
	raise_nofile();
	/* Before any thread or helper process exists: cgroup.procs moves the
	 * whole process, and the helpers are forked into nsboxd's cgroup. */
	{
		char cgmsg[PATH_MAX + 256];
		int r = owncg_enter_leaf(cgmsg, sizeof(cgmsg));

		if (r != 0 || o->verbose)
			logmsg("%s", cgmsg);
	}
	/* What a SIGKILLed previous instance left: cgroups whose launcher is
	 * gone, with whatever still runs in them. */
	cleanup_stale_cgroups(o->verbose);
	if (open_listener() < 0)
		return 1;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	signal(SIGPIPE, SIG_IGN);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	D.sig.fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	D.ep = epoll_create1(EPOLL_CLOEXEC);
	if (D.sig.fd < 0 || D.ep < 0) {
		logmsg("signalfd/epoll: %s", strerror(errno));
		return 1;
	}
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &D.listen };
	epoll_ctl(D.ep, EPOLL_CTL_ADD, D.listen.fd, &ev);
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &D.sig };
	epoll_ctl(D.ep, EPOLL_CTL_ADD, D.sig.fd, &ev);
	/* After the signals are blocked: the worker thread inherits that. */
	{
		int r = worker_start(D.conf.workers);

		D.workers = D.conf.workers;

		if (r < 0) {
			logmsg("cannot start %u worker threads: %s", D.conf.workers, strerror(-r));
			return 1;
		}
	}
	D.worker.kind = EV_WORKER;
	D.worker.fd = worker_fd();
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &D.worker };
	epoll_ctl(D.ep, EPOLL_CTL_ADD, D.worker.fd, &ev);
	/* After the signals are blocked, like the workers. */
	{
		int r = closer_start();

		if (r < 0) {
			logmsg("cannot start the closer thread: %s", strerror(-r));
			return 1;
		}
	}
	D.closer.kind = EV_CLOSER;
	D.closer.fd = closer_fd();
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &D.closer };
	epoll_ctl(D.ep, EPOLL_CTL_ADD, D.closer.fd, &ev);
	D.idle_since = mono_ns();
	sd_notify(0, "READY=1");
	check_mount_ns();
	check_proc_hidepid();
	logmsg("ready (%s, pool %u per profile, %u workers%s)", D.activated ? "socket-activated" : o->listen_path,
	       D.conf.pool_size, D.conf.workers, D.host_uids ? ", per-session host uids" : "");
	notify_status();

	while (!D.stopping) {
		struct epoll_event evs[64];
		int timeout = -1, n;

		/* The worker refills the pool one sandbox at a time; its
		 * completion wakes the loop for the next. */
		pool_refill();
		if (D.activated && D.conf.idle_exit > 0 && !D.n_conns)
			timeout = 1000;
		{
			int h = hello_sweep();

			if (h >= 0 && (timeout < 0 || h < timeout))
				timeout = h;
		}
		if (D.accept_resume)
			(void)listen_paused();	/* accepting again once its time has come */
		if (D.accept_resume) {
			unsigned long long now = mono_ns();
			int a = now < D.accept_resume ? (int)((D.accept_resume - now) / 1000000 + 1) : 0;

			if (timeout < 0 || a < timeout)
				timeout = a;
		}
		n = epoll_wait(D.ep, evs, 64, timeout);
		n_round_uids = 0;
		if (n < 0 && errno != EINTR) {
			logmsg("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n && !D.stopping; i++) {
			enum ev_kind *k = evs[i].data.ptr;
			unsigned long long freed = D.freed;

			if (*k == EV_LISTEN) {
				/* Up to 16 a wake-up, and no accept4 after the
				 * first that finds none (it cost a syscall a
				 * connection, 15 of them). */
				for (int j = 0; j < 16 && !listen_paused() && accept_one(); j++)
					;
			} else if (*k == EV_SIGNAL) {
				handle_signals();
			} else if (*k == EV_CONN) {
				struct conn *c = (struct conn *)k;

				if (evs[i].events & EPOLLOUT) {
					if (conn_flush(c) < 0)
						conn_close(c);
					else if (c->n_out == 0)
						conn_rearm(c);
				}
				if (freed == D.freed && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && c->reading)
					conn_read(c);
				/* Hung up while not read (throttled): epoll says so
				 * whatever it was asked, at every wake-up, until the
				 * connection is closed. */
				else if (freed == D.freed && (evs[i].events & (EPOLLHUP | EPOLLERR)) && !c->n_out)
					conn_close(c);
			} else if (*k == EV_SESS) {
				sess_died((struct sess *)k);
			} else if (*k == EV_WORKER) {
				worker_collect();
			} else if (*k == EV_CLOSER) {
				closer_drain();
				drain_more();
				unthrottle();
			}
			/* Later events of this batch may name what was freed; epoll
			 * is level-triggered, so they come again. */
			if (freed != D.freed)
				break;
		}
		if (D.activated && D.conf.idle_exit > 0 && !D.n_conns &&
		    mono_ns() - D.idle_since > (unsigned long long)(D.conf.idle_exit * 1e9)) {
			logmsg("idle for %g s: exiting (socket activation starts it again)", D.conf.idle_exit);
			break;
		}
	}
	shutdown_all();
	logmsg("stopped: %llu sessions served (%llu from the pool)", D.opened, D.pool_hits);
	/* In the directory opened at the start, and only our socket: the
	 * path's directories may name other ones by now. */
	if (!D.activated && o->listen_path && D.listen_dir >= 0) {
		const char *base = strrchr(o->listen_path, '/') ? strrchr(o->listen_path, '/') + 1 : o->listen_path;
		struct stat st;

		if (fstatat(D.listen_dir, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode))
			(void)unlinkat(D.listen_dir, base, 0);
		close(D.listen_dir);
	}
	close(D.ep);
	close(D.sig.fd);
	close(D.listen.fd);
	free(D.uid_used);
	free(D.uid_foreign);
	return 0;
}
