/* Child step: no capabilities, ever again. */
#include <errno.h>
#include <grp.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "landlock.h"
#include "steps.h"

int caps_lock_bounding(struct nsbox_err *err)
{
	int last = (int)cap_max_bits();

	err_step(err, "capabilities");
	/* Lock securebits first (needs CAP_SETPCAP): an exec as inside uid 0
	 * must not regain capabilities (capabilities(7), "securebits"). */
	if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
					     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
					     SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
		  0, 0, 0) < 0)
		return err_sys(err, "prctl(PR_SET_SECUREBITS)");
	for (int c = 0; c < last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return err_sys(err, "drop capability %d from the bounding set", c);
	return 0;
}

int caps_clear(struct nsbox_err *err)
{
	cap_t empty;

	err_step(err, "capabilities");
	/* One call for the whole ambient set (libcap's cap_reset_ambient
	 * probes each capability first, ~40 system calls). */
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return err_sys(err, "clear the ambient set");
	empty = cap_init();
	if (!empty)
		return err_sys(err, "cap_init");
	if (cap_set_proc(empty) < 0) {
		cap_free(empty);
		return err_sys(err, "clear the permitted, effective and inheritable sets");
	}
	cap_free(empty);
	return 0;
}

int caps_drop_all(struct nsbox_err *err)
{
	if (caps_lock_bounding(err) < 0)
		return -1;
	return caps_clear(err);
}

int confine_proxy(const struct nsbox_policy *p, struct nsbox_err *err)
{
	cap_flag_value_t setpcap = CAP_CLEAR;
	cap_t now = cap_get_proc();

	/* Root's launcher: the bounding set and securebits go too (it may,
	 * with CAP_SETPCAP); an unprivileged one has nothing to drop. */
	if (now) {
		(void)cap_get_flag(now, CAP_SETPCAP, CAP_EFFECTIVE, &setpcap);
		cap_free(now);
	}
	if (setpcap == CAP_SET && caps_lock_bounding(err) < 0)
		return -1;
	/* Root's proxy becomes the sandbox's host user: the pipes and
	 * sockets it makes for the sandbox count against that user's budgets
	 * (not root's, shared by every session of a root nsboxd), and its
	 * connections out carry that uid, not root's, to a firewall's or a
	 * routing rule's owner match. */
	if (geteuid() == 0 && p && p->host_uid && ids_switch(p->host_uid, p->host_gid, true, err) < 0)
		return -1;
	if (caps_clear(err) < 0)
		return -1;
	/* Reads stay open (the resolver's configuration, NSS modules); the
	 * audit log was opened before the fork. */
	return landlock_apply(NULL, 0, -1, WANT_AUTO, NULL, err);
}

int ids_switch(uid_t uid, gid_t gid, bool may_setgroups, struct nsbox_err *err)
{
	err_step(err, "ids");
	/* Only root on the host can keep setgroups allowed; then drop its
	 * supplementary groups, which otherwise keep their host meaning. */
	/* Raw system calls: credentials are per thread in the kernel, and
	 * glibc's wrappers would stop every other thread of pid 1 to change
	 * its ids too (the network namespace thread, mid-unshare).  Only this
	 * thread forks the payload. */
	if (may_setgroups && syscall(SYS_setgroups, 0, NULL) < 0)
		return err_sys(err, "setgroups(0)");
	if (syscall(SYS_setresgid, gid, gid, gid) < 0)
		return err_sys(err, "setresgid(%u)", (unsigned)gid);
	if (syscall(SYS_setresuid, uid, uid, uid) < 0)
		return err_sys(err, "setresuid(%u)", (unsigned)uid);
	return 0;
}
