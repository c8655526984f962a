/* Setuid binaries from the host's /usr: su, passwd, newgrp, mount,
 * chfn, sudo.  nosuid mounts and no_new_privs must keep every one of
 * them at our uid; each is run with a command that would show uid 0.
 * Also setuid(0) and friends directly. */
#include <sys/stat.h>
#include <sys/wait.h>
#include "escape.h"

static void run(char *const argv[])
{
	int p[2];
	char out[4096] = "";
	size_t n = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		BLOCKED("pipe: %s", ename(errno));
	pid_t c = fork();
	if (c == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		alarm(5);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	ssize_t r;
	while (n < sizeof(out) - 1 && (r = read(p[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	close(p[0]);
	int st;
	waitpid(c, &st, 0);
	out[n] = '\0';
	NOTE("%s: status %#x: %.200s", argv[0], st, out);
	if (strstr(out, "uid=0(") || strstr(out, "UID0"))
		ESCAPED("%s ran a command as uid 0", argv[0]);
}

int main(void)
{
	struct stat st;

	if (stat("/usr/bin/su", &st) == 0 && (st.st_mode & S_ISUID))
		run((char *[]){ "/usr/bin/su", "root", "-c", "/usr/bin/id", NULL });
	if (stat("/usr/bin/sudo", &st) == 0)
		run((char *[]){ "/usr/bin/sudo", "-n", "/usr/bin/id", NULL });
	if (stat("/usr/bin/newgrp", &st) == 0)
		run((char *[]){ "/usr/bin/newgrp", "root", NULL });
	if (stat("/usr/bin/passwd", &st) == 0)
		run((char *[]){ "/usr/bin/passwd", "-S", "root", NULL });
	if (stat("/usr/bin/mount", &st) == 0)
		run((char *[]){ "/usr/bin/mount", "-t", "tmpfs", "none", "/tmp", NULL });
	/* A setuid program that reports its euid: the shell, after a setuid exec, would show it. */
	must_fail("setuid(0)", setuid(0));
	must_fail("seteuid(0)", seteuid(0));
	must_fail("setresuid(0,0,0)", setresuid(0, 0, 0));
	must_fail("setgid(0)", setgid(0));
	if (getuid() == 0 || geteuid() == 0)
		ESCAPED("uid %d euid %d", getuid(), geteuid());
	BLOCKED("no setuid binary or call gives uid 0 (uid %d)", getuid());
}
