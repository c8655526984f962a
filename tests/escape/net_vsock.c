/* AF_VSOCK is not isolated by network namespaces: a sandbox that can
 * open one talks to the hypervisor (CID 2) and to the host's local vsock
 * listeners (CID 1) straight past the empty network namespace.  Docker's
 * default seccomp profile denies AF_VSOCK for this reason.
 * argv[1]: a port to try. */
#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include "escape.h"

int main(int argc, char **argv)
{
	unsigned port = argc > 1 ? (unsigned)atoi(argv[1]) : 9999;
	unsigned cids[] = { VMADDR_CID_HOST, VMADDR_CID_LOCAL };
	int answered = 0;

	int s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		BLOCKED("socket(AF_VSOCK): %s", ename(errno));
	close(s);
	for (size_t i = 0; i < sizeof(cids) / sizeof(cids[0]); i++) {
		struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = cids[i], .svm_port = port };
		struct timeval tv = { 0, 300000 };
		s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			ESCAPED("vsock connect to cid %u port %u", cids[i], port);
		NOTE("vsock cid %u port %u: %s", cids[i], port, ename(errno));
		/* A reset or refusal is an answer from the other side. */
		if (errno == ECONNRESET || errno == ECONNREFUSED)
			answered = 1;
		close(s);
	}
	if (answered)
		ESCAPED("AF_VSOCK reaches the hypervisor past the network namespace (a peer answered)");
	BLOCKED("AF_VSOCK sockets open but no peer answers");
}
