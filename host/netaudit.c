/* The egress audit pipe's reader.  See netaudit.h. */
#include "netaudit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "util.h"

int netaudit_open(struct netaudit *a, void (*fn)(void *ctx, const char *record, size_t len), void *ctx, int *wr,
		  struct nsbox_err *err)
{
	int pp[2];

	memset(a, 0, sizeof(*a));
	a->fd = -1;
	*wr = -1;
	if (pipe2(pp, O_CLOEXEC) < 0)
		return err_sys(err, "pipe for the network audit");
	/* Room for the records of the tunnels the sandbox's end closes, written
	 * while we stop it; where the limit refuses, the default 64 KiB. */
	(void)fcntl(pp[1], F_SETPIPE_SZ, NETAUDIT_PIPE_SIZE);
	if (fcntl(pp[0], F_SETFL, O_NONBLOCK) < 0) {
		err_sys(err, "fcntl");
		close(pp[0]);
		close(pp[1]);
		return -1;
	}
	a->fd = pp[0];
	a->fn = fn;
	a->ctx = ctx;
	*wr = pp[1];
	return 0;
}

static void line_done(struct netaudit *a)
{
	json_t *v;

	a->line[a->have] = '\0';
	/* Only a JSON object goes on: the callback may parse it as one. */
	v = a->have && memchr(a->line, '\0', a->have) == NULL ? json_loadb(a->line, a->have, 0, NULL) : NULL;
	if (json_is_object(v)) {
		a->delivered++;
		if (a->fn)
			a->fn(a->ctx, a->line, a->have);
	} else {
		a->dropped++;
	}
	json_decref(v);
	a->have = 0;
}

void netaudit_feed(struct netaudit *a, const char *data, size_t len)
{
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl ? (size_t)(nl - data) : len;

		if (!a->skipping) {
			if (a->have + n > EGRESS_AUDIT_LINE_MAX - 1) {
				/* Longer than the proxy ever writes: drop it whole. */
				a->dropped++;
				a->have = 0;
				a->skipping = true;
			} else {
				memcpy(a->line + a->have, data, n);
				a->have += n;
			}
		}
		if (!nl)
			return;
		if (a->skipping)
			a->skipping = false;
		else
			line_done(a);
		data += n + 1;
		len -= n + 1;
	}
}

void netaudit_end(struct netaudit *a)
{
	if (a->have)
		a->dropped++; /* cut short (an oversize one was counted already) */
	a->have = 0;
	a->skipping = false;
	a->eof = true;
}

int netaudit_drain(struct netaudit *a)
{
	char buf[16384];
	size_t total = 0;

	if (a->fd < 0 || a->eof)
		return 1;
	for (;;) {
		ssize_t n = total < NETAUDIT_DRAIN_MAX ? read(a->fd, buf, sizeof(buf)) : (errno = EAGAIN, -1);

		if (n > 0) {
			netaudit_feed(a, buf, (size_t)n);
			total += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		/* EOF, or an error no later read would fix. */
		netaudit_end(a);
		return 1;
	}
}

void netaudit_finish(struct netaudit *a, unsigned long long deadline)
{
	while (a->fd >= 0 && !netaudit_drain(a)) {
		struct pollfd p = { a->fd, POLLIN, 0 };
		unsigned long long now = now_ns();

		if (now >= deadline) {
			a->unfinished = true;
			break;
		}
		(void)poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
	}
	if (!a->eof)
		netaudit_end(a);
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
}

bool netaudit_warning(struct netaudit *a, char *buf, size_t size)
{
	uint64_t n = a->dropped - a->dropped_told;

	if (a->unfinished && !a->unfinished_told) {
		a->unfinished_told = true;
		snprintf(buf, size,
			 "network audit: the proxy's last records did not all arrive within a second of the "
			 "sandbox's end; those later are lost (%llu delivered, %llu dropped)",
			 (unsigned long long)a->delivered, (unsigned long long)a->dropped);
		return true;
	}
	if (!n)
		return false;
	a->dropped_told = a->dropped;
	snprintf(buf, size, "network audit: dropped %llu malformed or oversize record%s (%llu so far)",
		 (unsigned long long)n, n == 1 ? "" : "s", (unsigned long long)a->dropped);
	return true;
}

void netaudit_warn(struct netaudit *a, void (*warn)(void *ctx, const char *msg), void *ctx)
{
	char msg[256];

	if (netaudit_warning(a, msg, sizeof(msg)) && warn)
		warn(ctx, msg);
}
