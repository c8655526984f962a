/* Small helpers shared by every part: cleanup attributes, safe fd handling,
 * full reads and writes.  Pure or thin syscall wrappers only. */
#ifndef NSBOX_UTIL_H
#define NSBOX_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void freep(void *p)
{
	free(*(void **)p);
}
static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
#define _cleanup_free_ __attribute__((cleanup(freep)))
#define _cleanup_close_ __attribute__((cleanup(closep)))

/* Move ownership out of a cleanup variable. */
static inline int take_fd(int *fd)
{
	int r = *fd;
	*fd = -1;
	return r;
}
/* A child process owned by a variable: SIGKILLed and reaped when it goes
 * out of scope (crun's cleanup_pid, bubblewrap's utils.h), or now by
 * calling kill_reap() on it; *pid is 0 afterwards.  Only for a child that
 * nothing else reaps: once it is waited for, its pid may be reused.
 * take_pid() moves ownership out (then nothing is killed).  errno is kept. */
static inline void kill_reap(pid_t *pid)
{
	if (*pid > 0) {
		int saved = errno;
		kill(*pid, SIGKILL);
		while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
			;
		errno = saved;
	}
	*pid = 0;
}
#define _cleanup_pid_ __attribute__((cleanup(kill_reap)))
static inline pid_t take_pid(pid_t *pid)
{
	pid_t r = *pid;
	*pid = 0;
	return r;
}
#define TAKE_PTR(p)                        \
	({                                 \
		__typeof__(p) _tp_ = (p);  \
		(p) = NULL;                \
		_tp_;                      \
	})

/* write()/read() the whole buffer, retrying on EINTR and short transfers.
 * read_full returns bytes read (short only at EOF) or -1. */
ssize_t write_full(int fd, const void *buf, size_t len);
ssize_t read_full(int fd, void *buf, size_t len);
/* Write a small string to a file (O_WRONLY|O_CLOEXEC, no O_CREAT); -1 + errno. */
int write_file(const char *path, const char *data);
/* Same, relative to dirfd. */
int write_file_at(int dirfd, const char *path, const char *data);
/* Read up to size-1 bytes of a file into buf, NUL-terminated; returns length or -1. */
/* poll()'s timeout for an absolute deadline on now_ns()'s clock (-1 for
 * deadline 0, none), rounded up: a poll that wakes early only polls again. */
int deadline_ms(unsigned long long deadline);
ssize_t read_file(const char *path, char *buf, size_t size);
ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size);
/* Whether process pid or one below it (at most 64 looked at) is stopped
 * by a signal: state T in /proc/PID/stat (not t, a tracer's stop: strace -f
 * stops them at every call).  Processes that run as a user who may stop
 * them, and that the caller waits for, are checked with this while it
 * waits (the launcher's setup, the handshake). */
bool proc_tree_stopped(pid_t pid);
/* The pid a pidfd refers to as /proc numbers it (its fdinfo's Pid: line),
 * which is what proc_tree_stopped looks up; -1 unknown. */
pid_t pidfd_pid(int pidfd);
/* Monotonic clock in nanoseconds. */
unsigned long long now_ns(void);
/* An on/off environment variable: 1 for 1, yes, true or on; 0 for 0, no,
 * false or off (any case); -1 unset or empty; -2 anything else. */
int env_switch(const char *name);
/* Parse "123", "64K", "256M", "2G", "1T" (binary units) into bytes. */
int parse_size(const char *s, unsigned long long *out);
/* Parse a non-negative decimal (e.g. "1.5") into a double; rejects junk. */
int parse_double(const char *s, double *out);
/* snprintf(buf, size, fmt, ...) for one double in the C locale, whatever
 * LC_NUMERIC the host set (a "1,5" would be neither JSON nor a policy
 * value).  fmt holds one conversion, e.g. "%.17g" or "%.*f" (then prec is
 * used).  Returns snprintf's result. */
int format_double_c(char *buf, size_t size, const char *fmt, int prec, double v)
	__attribute__((format(printf, 3, 0)));
/* strtod() in the C locale. */
double strtod_c(const char *s, char **end);
/* Parse an unsigned decimal integer: -EINVAL if s is not all digits,
 * -ERANGE above max (or above what unsigned long holds). */
int parse_ulong(const char *s, unsigned long max, unsigned long *out);
/* sendmsg() of iov[0..niov) with fds[0..nfds) attached as SCM_RIGHTS
 * (unix(7)), MSG_NOSIGNAL, retried on EINTR.  At most SEND_FDS_MAX fds.
 * Returns the bytes sent, or -1 with errno. */
#define SEND_FDS_MAX 16	/* nsboxd's OPEN: a workspace and binds (SVC_MAX_FDS) */
struct iovec;
ssize_t send_with_fds(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t nfds);
/* Turn off descriptor passing to the socket fd (SO_PASSRIGHTS = 0, Linux
 * 6.16): a peer's SCM_RIGHTS then fails in its sendmsg() with EPERM, and
 * nothing it sends can land here.  false (errno ENOPROTOOPT) on an older
 * kernel: read with recv_no_fds() anyway. */
bool sock_refuse_fds(int fd);
/* Close a descriptor a peer sent without being asked, without waiting on
 * it: a socket is made to reset rather than linger (a lingering TCP
 * socket's last close waits up to its linger time for the peer to read),
 * as nsboxd's closer does. */
void close_unasked(int fd);
/* read() from a socket whose peer must send no descriptors: any that come
 * anyway (a kernel without SO_PASSRIGHTS, or a peer that turned it back on)
 * are closed with close_unasked() on a detached thread of their own (a
 * unix socket among them may hold more, lingering ones, queued: emptying
 * it on the caller's thread would wait out their linger), and the call
 * fails with EBADMSG.  A descriptor dropped unread would be closed by the
 * kernel on this thread, lingering sockets included.  Falls back to read()
 * on a non-socket. */
ssize_t recv_no_fds(int fd, void *buf, size_t len);
/* Close every fd >= lowfd except those listed in keep[] (close_range with a
 * /proc/self/fd fallback). */
int close_fds_except(int lowfd, const int *keep, size_t nkeep);
/* A sealed (no write, grow, shrink or further seals), mode 0555 memfd copy
 * of the regular file open on fd in, read from offset 0 whatever in's
 * position: what runs from it can never write back to the file.  Returns
 * the memfd (close-on-exec) or -1 with errno. */
int sealed_copy_fd(int in);

/* Copying into a host directory under a byte limit counts what the host's
 * file system pays, not the bytes: fs_block_size is the block size of the
 * file system fd is on (4096 if it can't be told), and block_charge takes
 * len bytes of data in whole blocks, or one block for len 0 (a directory,
 * a symlink), from *left.  Returns 0, or -1 with *left unchanged when it
 * does not fit.  An empty regular file takes no block: callers skip it. */
uint64_t fs_block_size(int fd);
int block_charge(uint64_t *left, uint64_t len, uint64_t block);

/* RLIMIT_NOFILE's soft limit raised to its hard one, in nsbox's own
 * processes that pass descriptors over unix sockets (the helper, pid 1,
 * nsboxd): the kernel refuses a sender (ETOOMANYREFS) once its user has
 * more descriptors in flight than the sender's soft limit, a count kept
 * per host user that a sandbox of the same user can raise to its own
 * limit plus 253.  None of them uses select(); what they start sets its
 * own limits. */
void nofile_raise(void);

#endif
