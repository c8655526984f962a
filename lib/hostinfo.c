/* libnsbox's public API about the host (include/nsbox.h, "the host"):
 * what it supports (nsbox info), a self-test of the sandbox through
 * nsbox_run() (nsbox doctor), and the checks a front end makes before
 * starting a sandbox.  Like api.c: never prints, never exits; compiled with
 * -fvisibility=hidden. */
#include "nsbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api-private.h"
#include "cgroup.h"
#include "error.h"
#include "landlock.h"
#include "locate.h"
#include "proto.h"
#include "util.h"

/* A new error object in *err (when err is not NULL); returns code.  Out of
 * memory, *err stays NULL (nsbox_error_message(NULL) is ""). */
static int fail(nsbox_error_t **err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(nsbox_error_t **err, int code, const char *fmt, ...)
{
	struct nsbox_error *e;
	va_list ap;
	int r;

	if (!err)
		return code;
	e = malloc(sizeof(*e));
	if (!e)
		return code;
	va_start(ap, fmt);
	r = vasprintf(&e->msg, fmt, ap);
	va_end(ap);
	if (r < 0) {
		free(e);
		return code;
	}
	e->code = code;
	*err = e;
	return code;
}

/* The struct the caller compiled against may be older or newer than ours. */
static int check_size(size_t size, size_t min, const char *what, nsbox_error_t **err)
{
	if (size < min)
		return fail(err, -EINVAL, "%s: struct_size is %zu (set it to sizeof(struct %s))", what, size, what);
	return 0;
}

/* ---- nsbox_host_info ---- */

static long read_long(const char *path)
{
	char buf[64];

	if (read_file(path, buf, sizeof(buf)) < 0)
		return -1;
	return strtol(buf, NULL, 10);
}

static void copy_ctrl(struct nsbox_host_cgroup_ctrl *c, const struct cgroup_probe *pr, enum cgroup_ctrl k)
{
	c->enforced = pr->ctrl_ok[k];
	c->v1 = pr->ctrl_v1[k];
	snprintf(c->dir, sizeof(c->dir), "%s", pr->ctrl_dir[k]);
	snprintf(c->why, sizeof(c->why), "%s", pr->why[k]);
}

static const char *const migration_names[] = {
	[CG_MIGRATE_NONE] = "none",
	[CG_MIGRATE_FAST] = "fast",
	[CG_MIGRATE_SLOW] = "slow",
};

int nsbox_host_info(struct nsbox_host_info *out, nsbox_error_t **err)
{
	struct nsbox_host_info h = { 0 };
	struct cgroup_probe pr;
	struct cgroup_migration_info mi;
	struct nsbox_err e = { 0 };
	size_t n;
	char *nl;

	if (!out)
		return fail(err, -EINVAL, "nsbox_host_info: info is NULL");
	memcpy(&n, out, sizeof(n));
	if (check_size(n, offsetof(struct nsbox_host_info, euid), "nsbox_host_info", err) < 0)
		return -EINVAL;
	h.struct_size = n;
	h.euid = geteuid();
	h.max_user_namespaces = read_long("/proc/sys/user/max_user_namespaces");
	h.unprivileged_userns_clone = read_long("/proc/sys/kernel/unprivileged_userns_clone");
	h.apparmor_restrict_unprivileged_userns = read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
	h.userns = h.max_user_namespaces > 0 && h.unprivileged_userns_clone != 0 &&
		   (h.apparmor_restrict_unprivileged_userns <= 0 || h.euid == 0);

	cgroup_probe_host(&pr);
	snprintf(h.cgroup_mode, sizeof(h.cgroup_mode), "%s", cgroup_mode_name(pr.mode));
	snprintf(h.cgroup_v2_root, sizeof(h.cgroup_v2_root), "%s", pr.v2_root);
	snprintf(h.cgroup_v2_self, sizeof(h.cgroup_v2_self), "%s", pr.v2_self);
	if (pr.v2_writable)
		snprintf(h.cgroup_v2_parent, sizeof(h.cgroup_v2_parent), "%s", pr.v2_parent_used);
	h.cgroup_v2_kill = pr.v2_kill;
	copy_ctrl(&h.memory, &pr, CTRL_MEMORY);
	copy_ctrl(&h.pids, &pr, CTRL_PIDS);
	copy_ctrl(&h.cpu, &pr, CTRL_CPU);
	cgroup_migration_probe(&pr, &mi);
	snprintf(h.cgroup_migration, sizeof(h.cgroup_migration), "%s", migration_names[mi.state]);
	if (mi.state == CG_MIGRATE_SLOW)
		cgroup_migration_hint(&mi, h.cgroup_migration_hint, sizeof(h.cgroup_migration_hint));

	h.landlock_abi = landlock_abi();
	if (read_file("/proc/sys/kernel/seccomp/actions_avail", h.seccomp_actions, sizeof(h.seccomp_actions)) < 0)
		h.seccomp_actions[0] = '\0';
	if ((nl = strchr(h.seccomp_actions, '\n')))
		*nl = '\0';
	if (runner_locate(h.runner, sizeof(h.runner), &e) < 0) {
		h.runner[0] = '\0';
		snprintf(h.runner_error, sizeof(h.runner_error), "%s", e.msg);
	}
	memcpy(out, &h, n < sizeof(h) ? n : sizeof(h));
	return 0;
}

/* ---- nsbox_selftest ---- */

/* The probes, run by python3 -I -S in the sandbox after every setup step
 * (seccomp included), one line each: name TAB escaped TAB detail, then
 * "done".  The syscall numbers come first, from this build's headers. */
static const char probe_py[] =
	"import ctypes, errno, os, socket\n"
	"libc = ctypes.CDLL(None, use_errno=True)\n"
	"def report(name, escaped, detail):\n"
	"    print('%s\\t%d\\t%s' % (name, 1 if escaped else 0, detail), flush=True)\n"
	"def status(field):\n"
	"    with open('/proc/self/status') as f:\n"
	"        for line in f:\n"
	"            k, _, v = line.partition(':')\n"
	"            if k == field:\n"
	"                return v.strip()\n"
	"def expect_fail(name, f):\n"
	"    ctypes.set_errno(0)\n"
	"    try:\n"
	"        r = f()\n"
	"        e = ctypes.get_errno()\n"
	"    except OSError as x:\n"
	"        r, e = -1, x.errno\n"
	"    if r is None or r >= 0:\n"
	"        report(name, True, 'succeeded')\n"
	"    else:\n"
	"        report(name, False, errno.errorcode.get(e, 'failed'))\n"
	"report('uid 1000 inside', os.getuid() != 1000, 'uid %d' % os.getuid())\n"
	"report('no capabilities', status('CapEff') != '0' * 16 or status('CapBnd') != '0' * 16,\n"
	"       'effective and bounding sets')\n"
	"report('no_new_privs', status('NoNewPrivs') != '1', 'NoNewPrivs')\n"
	"report('seccomp filter', status('Seccomp') != '2', 'Seccomp mode')\n"
	"ifs = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
	"report('network: only lo', ifs != ['lo'], '%d interface(s)' % len(ifs))\n"
	"report('/etc/shadow hidden', os.access('/etc/shadow', os.F_OK), 'absent')\n"
	"report('host homes hidden', os.access('/home', os.F_OK) or os.access('/root', os.F_OK), 'absent')\n"
	"expect_fail('write /usr', lambda: os.open('/usr/.nsbox-doctor', os.O_WRONLY | os.O_CREAT, 0o600))\n"
	"expect_fail('write /proc/sys', lambda: os.open('/proc/sys/kernel/hostname', os.O_WRONLY))\n"
	"expect_fail('unshare user ns', lambda: libc.unshare(0x10000000))\n"
	"expect_fail('mount', lambda: libc.syscall(SYS_mount, b'none', b'/tmp', b'tmpfs', 0, 0))\n"
	"expect_fail('ptrace', lambda: libc.syscall(SYS_ptrace, 16, 1, 0, 0))\n"
	"expect_fail('bpf', lambda: libc.syscall(SYS_bpf, 0, 0, 0))\n"
	"expect_fail('keyctl', lambda: libc.syscall(SYS_keyctl, 0, 0, 0, 0, 0))\n"
	"expect_fail('io_uring', lambda: libc.syscall(SYS_io_uring_setup, 1, 0))\n"
	"expect_fail('TIOCSTI', lambda: libc.syscall(SYS_ioctl, 0, 0x5412, b'x'))\n"
	"expect_fail('mknod', lambda: os.mknod('/tmp/.null', 0o20600, os.makedev(1, 3)))\n"
	"print('done', flush=True)\n";

#define PROBE_OUT_MAX 16384

struct selftest_state {
	nsbox_probe_fn probe;
	void *userdata;
	unsigned escaped, n;
	bool done;
};

/* Read what the sandbox wrote (it is hostile input: bounded, and only
 * printable ASCII reaches the caller). */
static ssize_t drain(int fd, char *buf, size_t size)
{
	ssize_t n = read_full(fd, buf, size - 1);

	if (n < 0)
		n = 0;
	buf[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] != '\n' && buf[i] != '\t' && (buf[i] < 0x20 || buf[i] > 0x7e))
			buf[i] = '?';
	return n;
}

static void parse_probes(char *out, struct selftest_state *st)
{
	char *save = NULL;

	for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *t1 = strchr(line, '\t');
		char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;

		if (strcmp(line, "done") == 0) {
			st->done = true;
			break;
		}
		if (t2 && t2 == t1 + 2 && (t1[1] == '0' || t1[1] == '1')) {
			bool escaped = t1[1] == '1';

			*t1 = '\0';
			st->n++;
			st->escaped += escaped;
			if (st->probe)
				st->probe(st->userdata, line, escaped, t2 + 1);
		}
	}
}

int nsbox_selftest(const struct nsbox_selftest_opts *uopts, unsigned *escaped, nsbox_error_t **err)
{
	struct nsbox_selftest_opts o = { 0 };
	struct nsbox_run_opts ro = { .struct_size = sizeof(ro) };
	struct nsbox_run_status rs = { .struct_size = sizeof(rs) };
	struct selftest_state st = { 0 };
	nsbox_policy_t *own = NULL;
	const nsbox_policy_t *p;
	_cleanup_free_ char *code = NULL;
	_cleanup_free_ char *out = NULL;
	char errbuf[2048];
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, stdio[3];
	int r;

	if (uopts) {
		size_t n;

		memcpy(&n, uopts, sizeof(n));
		if (check_size(n, sizeof(size_t), "nsbox_selftest_opts", err) < 0)
			return -EINVAL;
		memcpy(&o, uopts, n < sizeof(o) ? n : sizeof(o));
	}
	p = o.policy;
	if (!p) {
		if ((r = nsbox_policy_new("default", &own, err)) < 0 ||
		    (r = nsbox_policy_set_time_limit(own, 20, err)) < 0)
			goto out;
		p = own;
	}
	if (asprintf(&code,
		     "SYS_mount, SYS_ptrace, SYS_bpf, SYS_keyctl, SYS_io_uring_setup, SYS_ioctl = "
		     "%d, %d, %d, %d, %d, %d\n%s",
		     SYS_mount, SYS_ptrace, SYS_bpf, SYS_keyctl, SYS_io_uring_setup, SYS_ioctl, probe_py) < 0) {
		code = NULL;
		r = fail(err, -ENOMEM, "nsbox_selftest: out of memory");
		goto out;
	}
	out = malloc(PROBE_OUT_MAX);
	if (!out) {
		r = fail(err, -ENOMEM, "nsbox_selftest: out of memory");
		goto out;
	}
	/* Both outputs are far below a pipe's capacity: read after the run. */
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		r = fail(err, -errno, "nsbox_selftest: pipe: %s", strerror(errno));
		goto out;
	}
	/* The caller's stdin: TIOCSTI is probed against what may be its terminal. */
	stdio[0] = fcntl(0, F_GETFD) >= 0 ? 0 : po[1];
	stdio[1] = po[1];
	stdio[2] = pe[1];
	ro.stdio = stdio;
	ro.warn = o.warn;
	ro.warn_userdata = o.warn_userdata;
	ro.in_process = o.in_process;
	{
		char *argv[] = { "python3", "-I", "-S", "-c", code, NULL };

		r = nsbox_run(p, argv, &ro, &rs, err);
	}
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	if (r < 0)
		goto out;
	drain(po[0], out, PROBE_OUT_MAX);
	drain(pe[0], errbuf, sizeof(errbuf));
	st.probe = o.probe;
	st.userdata = o.probe_userdata;
	parse_probes(out, &st);
	if (rs.exec_errno) {
		r = fail(err, -rs.exec_errno, "the self-test runs python3 in the sandbox: %s", strerror(rs.exec_errno));
		goto out;
	}
	if (!st.done || !rs.exited || rs.exit_status != 0) {
		char how[64];
		char *last = errbuf + strlen(errbuf);

		/* The last line of its stderr says most. */
		while (last > errbuf && last[-1] == '\n')
			*--last = '\0';
		while (last > errbuf && last[-1] != '\n')
			last--;
		if (rs.time_limit)
			snprintf(how, sizeof(how), "killed by the time limit");
		else if (rs.oom_killed)
			snprintf(how, sizeof(how), "killed by the memory limit");
		else if (!rs.exited)
			snprintf(how, sizeof(how), "killed by signal %d", rs.term_signal);
		else
			snprintf(how, sizeof(how), "exit status %d", rs.exit_status);
		r = fail(err, -EPROTO, "the self-test did not complete (%s, %u probes ran)%s%s", how, st.n,
			 *last ? ": " : "", last);
		goto out;
	}
	if (escaped)
		*escaped = st.escaped;
	r = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	nsbox_policy_free(own);
	return r;
}

/* ---- checks for front ends ---- */

int nsbox_parse_size(const char *s, uint64_t *bytes, nsbox_error_t **err)
{
	unsigned long long v;

	if (!s || !bytes)
		return fail(err, -EINVAL, "nsbox_parse_size: NULL argument");
	if (parse_size(s, &v) < 0)
		return fail(err, -EINVAL, "'%s': expected a size (e.g. 4096, 64K, 256M, 2G)", s);
	*bytes = v;
	return 0;
}

int nsbox_check_tool_name(const char *name, nsbox_error_t **err)
{
	if (!name)
		return fail(err, -EINVAL, "nsbox_check_tool_name: name is NULL");
	if (!proto_is_tool_name(name))
		return fail(err, -EINVAL,
			    "'%s': not a Python identifier (or two joined by a dot) of at most %d characters", name,
			    PROTO_TOOL_NAME_MAX);
	if (proto_tool_name_reserved(name))
		return fail(err, -EINVAL, "'%s': a Python keyword, builtin or dunder (a tool would replace it inside)",
			    name);
	return 0;
}
