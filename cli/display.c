/* nsbox python --display-dir DIR: an exec's rich results as files.
 *
 * Every name is chosen here, never by the sandbox: display-NNN.EXT for a
 * bundle's MIME types (NNN counts the displays of the whole run), and the
 * /out files under DIR/out with their names checked again (libnsbox
 * checked them on receipt; a name is data from the sandbox).  Each file
 * is created relative to the directory's fd with O_CREAT | O_EXCL |
 * O_NOFOLLOW: nothing is overwritten and no link is followed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "hostpath.h"

static const struct {
	const char *mime, *ext;
} exts[] = {
	{ "image/png", "png" },	 { "image/jpeg", "jpg" },      { "image/gif", "gif" },	{ "image/svg+xml", "svg" },
	{ "text/html", "html" }, { "text/markdown", "md" },    { "text/latex", "tex" }, { "application/json", "json" },
	{ "text/plain", "txt" }, { "application/pdf", "pdf" },
};

int cli_display_open(const char *dir, char *eb, size_t el)
{
	/* No link in the path is followed (base/hostpath.h): DIR may sit in
	 * the workspace, whose links the write-back makes on the host, and the
	 * sandbox's displays and /out files would land where one points. */
	int fd = host_path_mkdir_open(dir, 0755);

	if (fd < 0)
		snprintf(eb, el, "--display-dir %s: %s", dir, errno == ELOOP ? HOST_PATH_LINK_HINT : strerror(errno));
	return fd;
}

bool cli_text_inert(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		unsigned c = *p, n = c < 0x80		  ? 0
				     : (c & 0xe0) == 0xc0 ? 1
				     : (c & 0xf0) == 0xe0 ? 2
				     : (c & 0xf8) == 0xf0 ? 3
							  : 9;
		uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1f : n == 2 ? c & 0x0f : c & 0x07;

		if (n == 9 || (n == 1 && c < 0xc2))
			return false;
		for (unsigned i = 1; i <= n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		/* C0, DEL, C1; LRE..RLO, LRI..PDI (text that reorders what the
		 * terminal shows after it) */
		if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
		    (cp >= 0x2066 && cp <= 0x2069))
			return false;
		p += n + 1;
	}
	return true;
}

/* A name from the sandbox that may become a file name here. */
bool cli_out_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > 255 || !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/') || name[0] == '-')
		return false;
	return cli_text_inert(name);
}

static int write_new(int dirfd, const char *dir, const char *sub, const char *name, const void *data, size_t len)
{
	const char *p = data;
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0) {
		fprintf(stderr, "nsbox python: --display-dir: cannot create %s/%s%s: %s\n", dir, sub, name,
			strerror(errno));
		return -1;
	}
	while (len) {
		ssize_t k = write(fd, p, len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			fprintf(stderr, "nsbox python: --display-dir: writing %s/%s%s: %s\n", dir, sub, name,
				k < 0 ? strerror(errno) : "short write");
			close(fd);
			return -1;
		}
		p += k;
		len -= (size_t)k;
	}
	if (close(fd) < 0) {
		fprintf(stderr, "nsbox python: --display-dir: writing %s/%s%s: %s\n", dir, sub, name, strerror(errno));
		return -1;
	}
	return 0;
}

int cli_display_save(int dirfd, const char *dir, const nsbox_result_t *r, unsigned *seq)
{
	size_t nd = nsbox_result_display_count(r), nf = nsbox_result_file_count(r);
	int rc = 0, outfd = -1;
	char name[64];

	for (size_t i = 0; i < nd; i++) {
		unsigned k = ++*seq;

		for (size_t j = 0; j < nsbox_result_display_mime_count(r, i); j++) {
			const char *mime = nsbox_result_display_mime(r, i, j), *ext = NULL;
			const void *data;
			size_t len;

			for (size_t x = 0; x < ARRAY_SIZE(exts) && !ext; x++)
				if (!strcmp(exts[x].mime, mime))
					ext = exts[x].ext;
			if (ext)
				snprintf(name, sizeof(name), "display-%03u.%s", k, ext);
			else
				snprintf(name, sizeof(name), "display-%03u-%zu.bin", k, j + 1);
			data = nsbox_result_display_data(r, i, mime, &len);
			if (data && write_new(dirfd, dir, "", name, data, len) < 0)
				rc = -1;
		}
	}
	if (nsbox_result_displays_truncated(r))
		fprintf(stderr, "nsbox python: some displays were left out or cut down (caps: nsbox-protocol(7))\n");
	if (nf && (mkdirat(dirfd, "out", 0755) < 0 && errno != EEXIST)) {
		fprintf(stderr, "nsbox python: --display-dir: cannot create %s/out: %s\n", dir, strerror(errno));
		return -1;
	}
	if (nf && (outfd = openat(dirfd, "out", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		fprintf(stderr, "nsbox python: --display-dir: cannot open %s/out: %s\n", dir, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < nf; i++) {
		const char *fname = nsbox_result_file_name(r, i);
		size_t len;
		uint64_t size;
		const void *data = nsbox_result_file_data(r, i, &len, &size);

		if (!cli_out_name_ok(fname)) {
			fprintf(stderr, "nsbox python: --display-dir: /out file %zu has a name not allowed here\n", i);
			rc = -1;
			continue;
		}
		if (!data) {
			fprintf(stderr, "nsbox python: /out/%s (%llu bytes) is too large to come with the result\n",
				fname, (unsigned long long)size);
			continue;
		}
		if (write_new(outfd, dir, "out/", fname, data, len) < 0)
			rc = -1;
	}
	if (nsbox_result_files_truncated(r))
		fprintf(stderr, "nsbox python: some /out files were left out or came without their data\n");
	if (outfd >= 0)
		close(outfd);
	return rc;
}
