/* Under `make SANITIZE=address,...` the runner runs inside the sandbox,
 * where LeakSanitizer can't work (it needs ptrace, which seccomp denies)
 * and ASan's default 256 MiB free-quarantine would count against the
 * sandbox's memory limit; CPython's own tests expect MemoryError, not an abort,
 * from an impossible allocation.  And ASan's start-up lowers RLIMIT_CORE
 * (disable_coredump) and dies when it can't: inside, the limit is 1 and
 * can't be changed (jail/pid1.c, seccomp), which stops every core dump
 * already, so a cold runner died before its handshake.  Compiled to
 * nothing otherwise. */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0:quarantine_size_mb=8:malloc_context_size=8:allocator_may_return_null=1:disable_coredump=0";
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int nsbox_runner_sanitizer_unused;
#endif
