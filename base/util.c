#include "util.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

ssize_t write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int write_file_at(int dirfd, const char *path, const char *data)
{
	int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	size_t len = strlen(data);
	ssize_t n;
	int saved;

	if (fd < 0)
		return -1;
	n = write(fd, data, len);
	saved = errno;
	close(fd);
	if (n < 0) {
		errno = saved;
		return -1;
	}
	if ((size_t)n != len) {
		errno = EIO;
		return -1;
	}
	return 0;
}

int write_file(const char *path, const char *data)
{
	return write_file_at(AT_FDCWD, path, data);
}

ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ssize_t n;
	int saved;

	if (fd < 0)
		return -1;
	if (size == 0) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	n = read_full(fd, buf, size - 1);
	saved = errno;
	close(fd);
	if (n < 0) {
		errno = saved;
		return -1;
	}
	buf[n] = '\0';
	return n;
}

ssize_t read_file(const char *path, char *buf, size_t size)
{
	return read_file_at(AT_FDCWD, path, buf, size);
}

unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

int env_switch(const char *name)
{
	static const char *const on[] = { "1", "yes", "true", "on" }, *const off[] = { "0", "no", "false", "off" };
	const char *v = getenv(name);

	if (!v || !*v)
		return -1;
	for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++) {
		if (!strcasecmp(v, on[i]))
			return 1;
		if (!strcasecmp(v, off[i]))
			return 0;
	}
	return -2;
}

int parse_size(const char *s, unsigned long long *out)
{
	unsigned long long v, mult = 1;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	if (*end) {
		switch (toupper((unsigned char)*end)) {
		case 'K': mult = 1ULL << 10; break;
		case 'M': mult = 1ULL << 20; break;
		case 'G': mult = 1ULL << 30; break;
		case 'T': mult = 1ULL << 40; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i' && end[1] == 'B')
			end += 2;
		else if (toupper((unsigned char)*end) == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v && mult > ULLONG_MAX / v)
		return -ERANGE;
	*out = v * mult;
	return 0;
}

static locale_t c_numeric;
static pthread_once_t c_numeric_once = PTHREAD_ONCE_INIT;

static void make_c_numeric(void)
{
	/* Kept for the life of the process.  On failure (no memory) the
	 * callers fall back to the current locale. */
	c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

int format_double_c(char *buf, size_t size, const char *fmt, int prec, double v)
{
	locale_t old = (locale_t)0;
	int n;

	pthread_once(&c_numeric_once, make_c_numeric);
	if (c_numeric)
		old = uselocale(c_numeric);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	n = strchr(fmt, '*') ? snprintf(buf, size, fmt, prec, v) : snprintf(buf, size, fmt, v);
#pragma GCC diagnostic pop
	if (c_numeric && old)
		uselocale(old);
	return n;
}

double strtod_c(const char *s, char **end)
{
	pthread_once(&c_numeric_once, make_c_numeric);
	return c_numeric ? strtod_l(s, end, c_numeric) : strtod(s, end);
}

int parse_double(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
		return -EINVAL;
	/* Decimal only: strtod also reads C99 hex floats ("0x1p3" is 8). */
	if (strpbrk(s, "xX"))
		return -EINVAL;
	errno = 0;
	v = strtod_c(s, &end);
	if (errno || *end || !isfinite(v) || v < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*end)
		return -EINVAL;
	/* All digits but past unsigned long: too large, not "not a number". */
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static bool kept(int fd, const int *keep, size_t nkeep)
{
	for (size_t i = 0; i < nkeep; i++)
		if (keep[i] == fd)
			return true;
	return false;
}

int close_fds_except(int lowfd, const int *keep, size_t nkeep)
{
	/* Walk from lowfd upwards closing the gaps between kept fds with
	 * close_range(2); fall back to /proc/self/fd where it is missing. */
	int from = lowfd;
	int sorted[16];
	size_t n = 0;

	for (size_t i = 0; i < nkeep && n < ARRAY_SIZE(sorted); i++)
		if (keep[i] >= lowfd)
			sorted[n++] = keep[i];
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
			int t = sorted[j];
			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	for (size_t i = 0; i <= n; i++) {
		unsigned int to = i < n ? (unsigned int)sorted[i] - 1 : ~0U;
		if (i < n && sorted[i] < from) 
			continue;
		if ((unsigned int)from <= to && syscall(SYS_close_range, (unsigned int)from, to, 0) < 0) {
			if (errno != ENOSYS)
				return -1;
			goto fallback;
		}
		if (i < n)
			from = sorted[i] + 1;
	}
	return 0;

fallback: {
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		long fd = strtol(de->d_name, NULL, 10);
		if (de->d_name[0] == '.' || fd < lowfd || fd == dirfd(d) || kept((int)fd, keep, nkeep))
			continue;
		close((int)fd);
	}
	closedir(d);
	return 0;
}
}

ssize_t send_with_fds(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t nfds)
{
	union {
		char buf[CMSG_SPACE(SEND_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = niov };
	ssize_t n;

	if (nfds > SEND_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83 /* asm-generic/socket.h, Linux 6.16 */
#endif

bool sock_refuse_fds(int fd)
{
	int off = 0;

	return setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) == 0;
}

void close_unasked(int fd)
{
	struct linger no = { .l_onoff = 1, .l_linger = 0 };
	int saved = errno;

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &no, sizeof(no));
	close(fd);
	errno = saved;
}

struct unasked {
	size_t n;
	int fd[];
};

static void *close_unasked_main(void *arg)
{
	struct unasked *u = arg;

	for (size_t i = 0; i < u->n; i++)
		close_unasked(u->fd[i]);
	free(u);
	return NULL;
}

/* Close what a peer sent unasked, off the calling thread: a unix socket
 * among them may hold, queued, more descriptors (a lingering TCP socket
 * in a socket in a socket...), whose last close, made by emptying it,
 * would wait here.  Inline only when no thread can be had. */
static void close_unasked_off(const int *fds, size_t n)
{
	struct unasked *u = malloc(sizeof(*u) + n * sizeof(int));
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t t;
	bool off = false;

	if (u && pthread_attr_init(&attr) == 0) {
		u->n = n;
		memcpy(u->fd, fds, n * sizeof(int));
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		off = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
		      pthread_attr_setstacksize(&attr, 64 * 1024) == 0 &&
		      pthread_create(&t, &attr, close_unasked_main, u) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
	}
	if (off)
		return;
	free(u);
	for (size_t i = 0; i < n; i++)
		close_unasked(fds[i]);
}

ssize_t recv_no_fds(int fd, void *buf, size_t len)
{
	/* Room for all a message can carry (SCM_MAX_FD, 253): the kernel
	 * closes those that don't fit itself, here. */
	int fds[253];
	union {
		char b[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	size_t n_fds = 0;
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);

	if (n < 0)
		return errno == ENOTSOCK ? read(fd, buf, len) : -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int d;

			memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (n_fds < ARRAY_SIZE(fds)) /* always: the buffer holds no more */
				fds[n_fds++] = d;
		}
	}
	if (n_fds)
		close_unasked_off(fds, n_fds);
	if (n_fds || (mh.msg_flags & MSG_CTRUNC)) {
		errno = EBADMSG;
		return -1;
	}
	return n;
}

int sealed_copy_fd(int in)
{
	_cleanup_close_ int mfd = (int)syscall(SYS_memfd_create, "nsbox-runner", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct stat st;
	off_t off = 0;
	char buf[65536];

	if (mfd < 0 || fstat(in, &st) < 0)
		return -1;
	/* In the kernel, page cache to page cache: a copy through a user
	 * buffer took twice as long.  An explicit offset leaves in's
	 * position alone (another process may share it). */
	while (off < st.st_size) {
		ssize_t k = sendfile(mfd, in, &off, (size_t)(st.st_size - off));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
	}
	/* Where sendfile can't, and anything past the size we saw. */
	for (;;) {
		ssize_t k = pread(in, buf, sizeof(buf), off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			break;
		if (pwrite(mfd, buf, (size_t)k, off) != k)
			return -1;
		off += k;
	}
	if (fchmod(mfd, 0555) < 0 ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -1;
	return take_fd(&mfd);
}

int deadline_ms(unsigned long long deadline)
{
	unsigned long long now = now_ns();

	if (!deadline)
		return -1;
	if (now >= deadline)
		return 0;
	if ((deadline - now) / 1000000 > INT_MAX - 1)
		return INT_MAX;
	return (int)((deadline - now + 999999) / 1000000);
}

uint64_t fs_block_size(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) == 0 && sfs.f_bsize > 0 && sfs.f_bsize <= (1 << 20))
		return (uint64_t)sfs.f_bsize;
	return 4096;
}

int block_charge(uint64_t *left, uint64_t len, uint64_t block)
{
	uint64_t cost;

	if (len > UINT64_MAX - block)
		return -1;
	cost = len ? (len + block - 1) / block * block : block;
	if (cost > *left)
		return -1;
	*left -= cost;
	return 0;
}

static bool tree_stopped(pid_t pid, int *budget)
{
	char path[64], buf[512];
	const char *c;
	ssize_t n;

	if (--*budget < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = read_file(path, buf, sizeof(buf));
	if (n <= 0 || !(c = strrchr(buf, ')')) || c[1] != ' ')
		return false;
	if (c[2] == 'T')
		return true;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	bool stopped = false;

	if (!d)
		return false;
	/* Each thread's children (CONFIG_PROC_CHILDREN): a sandbox's pid 1
	 * has a thread for the network. */
	for (struct dirent *e; !stopped && (e = readdir(d));) {
		char kids[256];

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "%s/children", e->d_name);
		if (read_file_at(dirfd(d), path, kids, sizeof(kids)) <= 0)
			continue;
		for (char *k = kids, *end; !stopped && *k; k = end) {
			long kid = strtol(k, &end, 10);

			if (end == k)
				break;
			stopped = tree_stopped((pid_t)kid, budget);
		}
	}
	closedir(d);
	return stopped;
}

bool proc_tree_stopped(pid_t pid)
{
	int budget = 64;

	return tree_stopped(pid, &budget);
}

pid_t pidfd_pid(int pidfd)
{
	char path[64], buf[2048];
	const char *l;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	if (pidfd < 0 || read_file(path, buf, sizeof(buf)) <= 0 || !(l = strstr(buf, "\nPid:")))
		return -1;
	return (pid_t)strtol(l + 5, NULL, 10);
}

void nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}
