/* The kernel keyring is not namespaced: reading or joining the host
 * user's keyrings leaks secrets (CVE-2016-0728 was a keyring refcount
 * overflow). */
#include <linux/keyctl.h>
#include "escape.h"

int main(void)
{
	must_fail_with("add_key(user)", syscall(SYS_add_key, "user", "nsbox", "x", 1, KEY_SPEC_SESSION_KEYRING), EPERM);
	must_fail_with("request_key", syscall(SYS_request_key, "user", "nsbox", NULL, 0), EPERM);
	must_fail_with("keyctl(JOIN_SESSION_KEYRING)", syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "_ses"), EPERM);
	must_fail_with("keyctl(GET_KEYRING_ID, user)",
		       syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0), EPERM);
	must_fail_with("keyctl(READ, user)",
		       syscall(SYS_keyctl, KEYCTL_READ, KEY_SPEC_USER_KEYRING, (char[256]){ 0 }, 256), EPERM);
	BLOCKED("the keyring syscalls are denied");
}
