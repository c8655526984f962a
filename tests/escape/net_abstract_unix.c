/* Connect to an abstract unix socket the test listens on at the host
 * (abstract names belong to the network namespace), and to a path-named
 * one.  argv[1]: abstract name; argv[2]: host socket path. */
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "escape.h"

static int try(const char *name, int abstract)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -1;
	snprintf(sa.sun_path + (abstract ? 1 : 0), sizeof(sa.sun_path) - 1, "%s", name);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (abstract ? 1 : 0) + strlen(name) + (abstract ? 0 : 1));
	int r = connect(s, (struct sockaddr *)&sa, len);
	int e = errno;
	close(s);
	errno = e;
	return r;
}

int main(int argc, char **argv)
{
	const char *known[] = { "/run/systemd/private", "/run/dbus/system_bus_socket", "/var/run/docker.sock",
				"/run/containerd/containerd.sock", "/tmp/.X11-unix/X0" };

	if (argc < 3)
		ESCAPED("usage: net_abstract_unix NAME PATH (test bug)");
	if (try(argv[1], 1) == 0)
		ESCAPED("connected to the host's abstract socket @%s", argv[1]);
	NOTE("abstract @%s: %s", argv[1], ename(errno));
	if (try(argv[2], 0) == 0)
		ESCAPED("connected to the host's socket %s", argv[2]);
	NOTE("path %s: %s", argv[2], ename(errno));
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (try(known[i], 0) == 0)
			ESCAPED("connected to %s", known[i]);
	if (try("/tmp/.X11-unix/X0", 1) == 0)
		ESCAPED("connected to abstract X11 socket");
	BLOCKED("host unix sockets are unreachable");
}
