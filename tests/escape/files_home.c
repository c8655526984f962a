/* Read secrets in the invoking user's home and in /root, by path guesses.
 * argv: the host paths of secret files the test planted. */
#include <dirent.h>
#include "escape.h"

int main(int argc, char **argv)
{
	const char *dirs[] = { "/root", "/home", "/root/.ssh", "/var/lib", "/run/user" };

	for (int i = 1; i < argc; i++)
		must_not_open(argv[i], O_RDONLY);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *de;
		if (!d) {
			NOTE("opendir %s: %s", dirs[i], ename(errno));
			continue;
		}
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				ESCAPED("%s lists host entry %s", dirs[i], de->d_name);
		closedir(d);
	}
	must_not_open("/root/.bash_history", O_RDONLY);
	must_not_open("/root/.ssh/id_rsa", O_RDONLY);
	BLOCKED("no home directory or planted secret is visible");
}
