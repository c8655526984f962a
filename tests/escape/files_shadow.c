/* Read the host's password hashes: /etc/shadow and friends. */
#include "escape.h"

int main(void)
{
	const char *paths[] = { "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/sudoers",
				"/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		must_not_open(paths[i], O_RDONLY);
	BLOCKED("no host secret under /etc is visible");
}
