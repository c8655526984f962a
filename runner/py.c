/* CPython behind a narrow boundary: the only file that initialises the
 * interpreter.  Isolated configuration (no PYTHON* environment, no user
 * site, no site import, no .pyc writes, no CPython signal handlers), a
 * fixed sys.path, and the builtin module _nsbox.  Initialisation and the
 * per-session setup are separate so that a template can initialise once
 * and fork sessions from it. */
#include "runner.h"

#include <errno.h>
#include <malloc.h>
#include <marshal.h>
#include <signal.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>

/* Generated from runner/runner.py by the Makefile: nsbox_runner_py[] (the
 * source) and nsbox_runner_pyc[] (its code object, marshalled by the same
 * Python at build time, with the magic number it was made for): loading
 * that takes ~0.2 ms, compiling the source ~6 ms. */
#include "policy.h"
#include "runner_py.h"
#include "runner_pyc.h"

static PyObject *runner_mod;

/* sys.path inside the sandbox, documented in nsbox-protocol(7) and
 * nsbox(1).  The host's /usr is bound read-only, so these are Debian's. */
static const wchar_t *const std_path[] = {
	L"/usr/lib/python311.zip",
	L"/usr/lib/python3.11",
	L"/usr/lib/python3.11/lib-dynload",
};
static const wchar_t dist_path[] = L"/usr/lib/python3/dist-packages";

static int status_err(PyStatus st, const char *what, struct nsbox_err *err)
{
	return err_set(err, 0, "%s: %s%s%s", what, st.func ? st.func : "", st.func ? ": " : "",
		       st.err_msg ? st.err_msg : "failed");
}

static int py_err(const char *what, struct nsbox_err *err)
{
	PyObject *type, *value, *tb, *s = NULL;
	const char *msg = NULL;

	PyErr_Fetch(&type, &value, &tb);
	if (value)
		s = PyObject_Str(value);
	if (s)
		msg = PyUnicode_AsUTF8(s);
	err_set(err, 0, "%s: %s: %s", what, type ? ((PyTypeObject *)type)->tp_name : "error",
		msg ? msg : "?");
	Py_XDECREF(s);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(tb);
	PyErr_Clear();
	return -1;
}

int runner_py_init(bool dist_packages, struct nsbox_err *err)
{
	PyPreConfig pre;
	PyConfig config;
	PyStatus st;
	PyObject *code;

	/* UTF-8 mode: the sandbox has no locale, and the C locale would
	 * otherwise make file names ASCII. */
	PyPreConfig_InitIsolatedConfig(&pre);
	pre.utf8_mode = 1;
	st = Py_PreInitialize(&pre);
	if (PyStatus_Exception(st))
		return status_err(st, "Python pre-initialisation", err);

	if (PyImport_AppendInittab("_nsbox", runner_pymod_init) < 0)
		return err_set(err, 0, "register module _nsbox");

	PyConfig_InitIsolatedConfig(&config);
	config.site_import = 0;
	config.user_site_directory = 0;
	config.write_bytecode = 0;
	/* The runner owns signals: CANCEL's signal gets a Python handler
	 * from runner.py; SIGINT must not become KeyboardInterrupt. */
	config.install_signal_handlers = 0;
	config.parse_argv = 0;
	config.safe_path = 1;
	config.buffered_stdio = 0;
	/* We are exec'd from a sealed memfd or from /run/nsbox/runner: state
	 * where Python lives rather than letting getpath guess from there. */
	st = PyConfig_SetString(&config, &config.home, L"/usr");
	if (!PyStatus_Exception(st))
		st = PyConfig_SetString(&config, &config.executable, L"/usr/bin/python3.11");
	if (!PyStatus_Exception(st))
		st = PyConfig_SetString(&config, &config.program_name, L"python3.11");
	config.module_search_paths_set = 1;
	for (size_t i = 0; i < sizeof(std_path) / sizeof(std_path[0]) && !PyStatus_Exception(st); i++)
		st = PyWideStringList_Append(&config.module_search_paths, std_path[i]);
	if (dist_packages && !PyStatus_Exception(st))
		st = PyWideStringList_Append(&config.module_search_paths, dist_path);
	if (PyStatus_Exception(st)) {
		PyConfig_Clear(&config);
		return status_err(st, "Python configuration", err);
	}
	st = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(st))
		return status_err(st, "Python initialisation", err);

	code = NULL;
	if (PyImport_GetMagicNumber() == nsbox_runner_pyc_magic) {
		code = PyMarshal_ReadObjectFromString((const char *)nsbox_runner_pyc, sizeof(nsbox_runner_pyc));
		if (code && !PyCode_Check(code))
			Py_CLEAR(code);
		PyErr_Clear();
	}
	/* Another CPython 3.11 than the one we were built with: compile. */
	if (!code)
		code = Py_CompileString(nsbox_runner_py, "<nsbox-runner>", Py_file_input);
	if (!code)
		return py_err("compile runner.py", err);
	runner_mod = PyImport_ExecCodeModule("_nsbox_runner", code);
	Py_DECREF(code);
	if (!runner_mod)
		return py_err("load runner.py", err);
	return 0;
}

int runner_py_preload(const char *const *mods, size_t n, struct nsbox_err *err)
{
	for (size_t i = 0; i < n; i++) {
		PyObject *m = PyImport_ImportModule(mods[i]);

		if (!m)
			return py_err(mods[i], err);
		Py_DECREF(m);
	}
	return 0;
}

int runner_py_preload_list(const char *list, struct nsbox_err *err)
{
	char name[POLICY_PRELOAD_MAX + 1];

	for (const char *s = list; s && *s;) {
		size_t n;
		s += strspn(s, " ");
		n = strcspn(s, " ");
		if (!n)
			break;
		if (n >= sizeof(name))
			return err_fail(err, "preload", E2BIG, "a module name is too long");
		memcpy(name, s, n);
		name[n] = '\0';
		if (runner_py_preload((const char *const[]){ name }, 1, err) < 0)
			return err_prefix(err, "Preload=");
		s += n;
	}
	return 0;
}

int runner_py_template_stdio(struct nsbox_err *err)
{
	int p[2], saved[3] = { -1, -1, -1 }, r = -1;
	PyObject *res = NULL;

	if (pipe2(p, O_CLOEXEC) < 0)
		return err_sys(err, "pipe2");
	for (int i = 0; i < 3; i++)
		if ((saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 3)) < 0 || dup2(i ? p[1] : p[0], i) < 0) {
			err_sys(err, "dup2 stdio");
			goto out;
		}
	res = PyObject_CallMethod(runner_mod, "template_stdio", NULL);
	if (!res) {
		py_err("template_stdio", err);
		goto out;
	}
	Py_DECREF(res);
	r = 0;
out:
	for (int i = 0; i < 3; i++)
		if (saved[i] >= 0) {
			if (dup2(saved[i], i) < 0)
				r = err_sys(err, "restore fd %d", i);
			close(saved[i]);
		}
	close(p[0]);
	close(p[1]);
	return r;
}

int runner_py_freeze(struct nsbox_err *err)
{
	PyObject *gc = PyImport_ImportModule("gc"), *r = NULL;

	/* Everything alive now goes to the permanent generation: the
	 * collector of a forked session never walks (and so never writes to,
	 * copying the page) the template's objects. */
	if (gc)
		r = PyObject_CallMethod(gc, "collect", NULL);
	if (r) {
		Py_DECREF(r);
		r = PyObject_CallMethod(gc, "freeze", NULL);
	}
	Py_XDECREF(gc);
	if (!r)
		return py_err("gc.freeze", err);
	Py_DECREF(r);
	return 0;
}

int runner_py_session(int fd, struct nsbox_err *err)
{
	/* A forked session does not replay its template's random stream:
	 * random reseeds itself in the child (os.register_at_fork, run by
	 * PyOS_AfterFork_Child).  The str hash seed is fixed at
	 * initialisation: PYTHONHASHSEED cannot change after Py_Initialize. */
	return runner_io_start(fd, err);
}

int runner_py_serve(void)
{
	PyObject *r = PyObject_CallMethod(runner_mod, "serve", NULL);
	long rc;

	if (!r) {
		/* stderr is a capture pipe now: this cannot reach the host's terminal. */
		PyErr_Print();
		return 2;
	}
	rc = PyLong_Check(r) ? PyLong_AsLong(r) : 2;
	Py_DECREF(r);
	return (int)rc;
}

int runner_py_adopt(bool dist_packages, char **env, struct nsbox_err *err)
{
	PyObject *list = PyList_New(0), *r = NULL, *fn;

	if (!list)
		return py_err("environment", err);
	for (char **e = env; e && *e; e++) {
		PyObject *s = PyUnicode_DecodeFSDefault(*e);

		if (!s || PyList_Append(list, s) < 0) {
			Py_XDECREF(s);
			Py_DECREF(list);
			return py_err("environment", err);
		}
		Py_DECREF(s);
	}
	fn = PyObject_GetAttrString(runner_mod, "adopt");
	if (fn)
		r = PyObject_CallFunction(fn, "Oi", list, dist_packages ? 1 : 0);
	Py_XDECREF(fn);
	Py_DECREF(list);
	if (!r)
		return py_err("adopt the sandbox's environment", err);
	Py_DECREF(r);
	return 0;
}

void runner_rlimit_tune(void)
{
	struct rlimit rl;

	/* Without a memory cgroup the jail limits the address space
	 * (RLIMIT_AS).  glibc reserves 64 MiB of it per thread for a malloc
	 * arena, so a few threads would exhaust a 512 MiB limit with almost
	 * nothing in use: share two arenas instead. */
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		mallopt(M_ARENA_MAX, 2);
}
