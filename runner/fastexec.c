/* The _nsbox module's EXEC fast path (pymod.h).
 *
 * An ordinary EXEC (no REPL display, no completeness check) is run here
 * in C, from recv(): decode, compile, run, capture and answer without
 * the Python serve loop (runner.py's do_exec, which this follows step by
 * step and which stays the reference: what runs everything declined
 * here).  The rare parts call back into runner.py: splitting multi-line
 * REPL code (_split_ast), formatting an exception (_fast_error), encoding
 * a value that is not a plain scalar (_fast_value) and reporting a
 * failure of the runner itself (_fast_failed).  Saves ~15 us of
 * interpreted Python per exec. */
#include "pymod.h"

#include <dirent.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "util.h"

/* Compiled code of recent execs, by source, filename and mode: a REPL
 * host sends the same small snippets again and again, and compiling even
 * "1+1" costs more than the rest of an exec.  Code objects are immutable.
 * Code whose compilation printed anything (a SyntaxWarning) is not kept,
 * so that the warning comes again with every exec, as before. */
#define CODE_CACHE_N 16
/* /out files a stat each can tell unchanged (about 0.5 us each); with
 * more, _rich_collect looks at every exec. */
#define OUT_FILES_CHECKED 4096
#define CODE_CACHE_MAX_SRC 16384
struct code_entry {
	char *src, *filename; /* NULL: a free slot */
	size_t src_len;
	bool repl;	       /* body/last split (want_value), or one exec body */
	PyObject *body, *last; /* either may be NULL */
	unsigned long long used;
};

static struct {
	bool ready;
	PyObject *globals; /* runner.py's module dict (its _in_user flag) */
	PyObject *G, *limits, *sources;
	PyObject *split_ast, *fast_error, *fast_value, *fast_failed;
	PyObject *sysdict;
	PyObject *k_in_user, *k_output, *k_max_frame, *k_builtins, *k_flush, *k_cache, *k_linecache, *k_update;
	PyObject *k_code, *k_filename, *k_want_value, *k_stream, *k_stream_all, *k_display, *k_check_complete, *k_rich;
	PyObject *k_stdout, *k_stderr, *k_modules;
	struct code_entry cache[CODE_CACHE_N];
	unsigned long long cache_clock;
	/* Rich results (runner.py's _rich_collect and _fast_rich): asked
	 * for only when there may be some, so that an ordinary exec pays one
	 * stat() of /out for them. */
	PyObject *displays, *rich, *rich_collect, *fast_rich, *k_pyplot, *k_helpers, *k_gcf, *k_figs, *k_dt, *k_ft;
	bool out_known;	    /* out_st and out_files hold what _rich_collect last saw */
	bool out_probed;    /* out_seed() has looked once */
	struct stat out_st; /* /out itself */
	size_t n_out_files; /* the regular files in it, each checked with a stat */
	size_t cap_out_files;
	struct out_file {
		char name[256];
		unsigned long long ino, size;
		long long mtime_ns;
	} * out_files;
} F;

/* RESULT frames are written with proto_buf (proto/proto.h); on
 * allocation failure the buffer stays bad and the caller raises MemoryError. */

/* v / 10**dec as an exact decimal ("0.000012"): what float(v / 10**dec)
 * reads back as, without the cost of a shortest-repr conversion. */
static void jb_fixed(struct proto_buf *b, unsigned long long v, int dec)
{
	unsigned long long p = 1;
	char n[48];
	int len;

	for (int i = 0; i < dec; i++)
		p *= 10;
	len = snprintf(n, sizeof(n), "%llu.%0*llu", v / p, dec, v % p);
	while (len > 2 && n[len - 1] == '0' && n[len - 2] != '.')
		len--;
	proto_buf_put(b, n, (size_t)len);
}

/* A float as float.__repr__ writes it (what json.dumps uses). */
static void jb_double(struct proto_buf *b, double d)
{
	char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);

	if (!s) {
		PyErr_Clear();
		b->bad = true;
		return;
	}
	proto_buf_puts(b, s);
	PyMem_Free(s);
}

static void jb_ull(struct proto_buf *b, unsigned long long v)
{
	char n[24];

	proto_buf_put(b, n, (size_t)snprintf(n, sizeof(n), "%llu", v));
}

/* fast_setup(module globals, G, _limits, _sources, _split_ast,
 * _fast_error, _fast_value, _fast_failed): runner.py's serve() turns the
 * fast path on. */
PyObject *fastexec_setup(PyObject *args)
{
	PyObject *globals, *G, *limits, *sources, *split_ast, *fast_error, *fast_value, *fast_failed, *sys;

	if (!PyArg_ParseTuple(args, "O!O!O!O!OOOO", &PyDict_Type, &globals, &PyDict_Type, &G, &PyDict_Type, &limits,
			      &PyDict_Type, &sources, &split_ast, &fast_error, &fast_value, &fast_failed))
		return NULL;
	if (F.ready)
		Py_RETURN_NONE;
	/* sys's dict (the one PySys_GetObject reads), for lookups by
	 * interned key. */
	sys = PyImport_AddModule("sys");
	if (!sys || !(F.sysdict = PyModule_GetDict(sys)))
		return NULL;
	Py_INCREF(F.sysdict);
#define KEY(k, s)                                   \
	if (!(F.k = PyUnicode_InternFromString(s))) \
	return NULL
	KEY(k_in_user, "_in_user");
	KEY(k_output, "output");
	KEY(k_max_frame, "max_frame");
	KEY(k_builtins, "__builtins__");
	KEY(k_flush, "flush");
	KEY(k_cache, "cache");
	KEY(k_linecache, "linecache");
	KEY(k_update, "update");
	KEY(k_code, "code");
	KEY(k_filename, "filename");
	KEY(k_want_value, "want_value");
	KEY(k_stream, "stream");
	KEY(k_stream_all, "stream_all");
	KEY(k_display, "display");
	KEY(k_check_complete, "check_complete");
	KEY(k_rich, "rich");
	KEY(k_stdout, "stdout");
	KEY(k_stderr, "stderr");
	KEY(k_modules, "modules");
#undef KEY
	F.globals = Py_NewRef(globals);
	F.G = Py_NewRef(G);
	F.limits = Py_NewRef(limits);
	F.sources = Py_NewRef(sources);
	F.split_ast = Py_NewRef(split_ast);
	F.fast_error = Py_NewRef(fast_error);
	F.fast_value = Py_NewRef(fast_value);
	F.fast_failed = Py_NewRef(fast_failed);
	F.ready = true;
	Py_RETURN_NONE;
}

/* rich_setup(displays, rich, rich_collect, fast_rich) */
PyObject *fastexec_rich_setup(PyObject *args)
{
	PyObject *displays, *rich, *collect, *fast_rich;

	if (!PyArg_ParseTuple(args, "O!O!OO", &PyList_Type, &displays, &PyDict_Type, &rich, &collect, &fast_rich))
		return NULL;
	if (F.rich_collect)
		Py_RETURN_NONE;
	if (!(F.k_dt = PyUnicode_InternFromString("dt")) || !(F.k_ft = PyUnicode_InternFromString("ft")) ||
	    !(F.k_pyplot = PyUnicode_InternFromString("matplotlib.pyplot")) ||
	    !(F.k_helpers = PyUnicode_InternFromString("matplotlib._pylab_helpers")) ||
	    !(F.k_gcf = PyUnicode_InternFromString("Gcf")) || !(F.k_figs = PyUnicode_InternFromString("figs")))
		return NULL;
	F.displays = Py_NewRef(displays);
	F.rich = Py_NewRef(rich);
	F.fast_rich = Py_NewRef(fast_rich);
	F.rich_collect = Py_NewRef(collect);
	Py_RETURN_NONE;
}

/* Values with no rich representation to look for: runner.py's _PLAIN,
 * type for type. */
static bool plain_value(PyObject *v)
{
	return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
	       PyComplex_CheckExact(v) || PyUnicode_CheckExact(v) || PyBytes_CheckExact(v) ||
	       PyByteArray_CheckExact(v) || PyList_CheckExact(v) || PyTuple_CheckExact(v) || PyDict_CheckExact(v) ||
	       PyAnySet_CheckExact(v);
}

/* Whether pyplot may have figures open: matplotlib._pylab_helpers.Gcf.figs
 * is not an empty dict (anything unexpected: yes). */
static bool figures_open(PyObject *modules)
{
	PyObject *h, *gcf, *figs;
	bool open = true;

	if (!PyDict_GetItemWithError(modules, F.k_pyplot)) {
		PyErr_Clear();
		return false;
	}
	h = PyDict_GetItemWithError(modules, F.k_helpers);
	if (h && (gcf = PyObject_GetAttr(h, F.k_gcf))) {
		figs = PyObject_GetAttr(gcf, F.k_figs);
		open = !figs || !PyDict_Check(figs) || PyDict_GET_SIZE(figs) > 0;
		Py_XDECREF(figs);
		Py_DECREF(gcf);
	}
	PyErr_Clear();
	return open;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Whether /out may hold something new: it changed (an entry came or went),
 * or a file seen last time changed in place, or it can't be told. */
static bool out_changed(const struct stat *st, bool have_st)
{
	char path[300];
	struct stat fs;

	if (!F.out_known || !have_st || !same_stat(st, &F.out_st))
		return true;
	for (size_t i = 0; i < F.n_out_files; i++) {
		const struct out_file *o = &F.out_files[i];

		snprintf(path, sizeof(path), "/out/%s", o->name);
		if (lstat(path, &fs) < 0 || (unsigned long long)fs.st_ino != o->ino ||
		    (unsigned long long)fs.st_size != o->size ||
		    (long long)fs.st_mtim.tv_sec * 1000000000LL + fs.st_mtim.tv_nsec != o->mtime_ns)
			return true;
	}
	return false;
}

/* Before the first fast exec's code runs: an empty /out is known to hold
 * nothing, so an exec that leaves it unchanged needs no _rich_collect
 * (which imports os for its scan: a third of a short session's
 * interpreter time).  Anything the code then writes changes /out's own
 * stat and is scanned as before. */
static void out_seed(void)
{
	DIR *d;
	struct dirent *e;
	struct stat st;
	bool empty = true;

	if (F.out_probed || F.out_known)
		return;
	F.out_probed = true;
	d = opendir("/out");
	if (!d)
		return;
	/* The stat first: a file a thread of earlier (plain) execs makes
	 * meanwhile is then either in the listing or a change after it. */
	if (fstat(dirfd(d), &st) < 0)
		empty = false;
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	if (empty) {
		F.n_out_files = 0;
		F.out_st = st;
		F.out_known = true;
	}
	closedir(d);
}

/* Whether display() flagged this exec's displays or files as truncated
 * without adding one (runner.py's _rich["dt"], ["ft"]). */
static bool rich_flagged(void)
{
	bool r = PyDict_GetItemWithError(F.rich, F.k_dt) == Py_True ||
		 PyDict_GetItemWithError(F.rich, F.k_ft) == Py_True;

	PyErr_Clear();
	return r;
}

/* Whether this exec may have rich results: displays, open figures, a
 * value that may have reprs, or /out changed. */
static bool rich_needed(PyObject *value, struct stat *st, bool *have_st)
{
	PyObject *modules;

	*have_st = stat("/out", st) == 0;
	if (!F.rich_collect)
		return false;
	if (PyList_GET_SIZE(F.displays) || (value && !plain_value(value)) || rich_flagged())
		return true;
	modules = PyDict_GetItemWithError(F.sysdict, F.k_modules);
	if (modules && PyDict_Check(modules) && figures_open(modules))
		return true;
	PyErr_Clear();
	return out_changed(st, *have_st);
}

/* Remember what _rich_collect saw in /out: (name: bytes, ino, mtime_ns,
 * size) for each regular file, or None (then look every time). */
static void remember_out(PyObject *seen, const struct stat *st, bool have_st)
{
	Py_ssize_t n = seen && PyTuple_Check(seen) ? PyTuple_GET_SIZE(seen) : -1;

	F.out_known = false;
	F.n_out_files = 0;
	if (!have_st || n < 0 || n > OUT_FILES_CHECKED)
		return;
	if ((size_t)n > F.cap_out_files) {
		size_t cap = (size_t)n < 16 ? 16 : (size_t)n;
		struct out_file *p = realloc(F.out_files, cap * sizeof(*p));

		if (!p)
			return;
		F.out_files = p;
		F.cap_out_files = cap;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		struct out_file *o = &F.out_files[i];
		const char *name;
		Py_ssize_t len;
		unsigned long long ino, size;
		long long mtime;

		if (!PyArg_ParseTuple(PyTuple_GET_ITEM(seen, i), "y#KLK", &name, &len, &ino, &mtime, &size) ||
		    len <= 0 || (size_t)len >= sizeof(o->name) || memchr(name, '/', (size_t)len) ||
		    memchr(name, '\0', (size_t)len)) {
			PyErr_Clear();
			return;
		}
		memcpy(o->name, name, (size_t)len);
		o->name[len] = '\0';
		o->ino = ino;
		o->size = size;
		o->mtime_ns = mtime;
	}
	F.n_out_files = (size_t)n;
	F.out_st = *st;
	F.out_known = true;
}

/* _rich_collect(value, has_value): whether it found anything to send.
 * Its failures are its own (it reports them as truncation). */
static bool rich_collect(PyObject *value, const struct stat *st, bool have_st)
{
	PyObject *r = PyObject_CallFunctionObjArgs(F.rich_collect, value ? value : Py_None, value ? Py_True : Py_False,
						   NULL);
	bool any = false;

	if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
		any = PyObject_IsTrue(PyTuple_GET_ITEM(r, 0)) == 1;
		remember_out(PyTuple_GET_ITEM(r, 1), st, have_st);
	} else {
		F.out_known = false;
	}
	Py_XDECREF(r);
	PyErr_Clear();
	return any;
}

/* EXEC rich=false: what display() gathered is dropped and open figures
 * closed, unrendered (_rich_collect's own rule); the value and /out are
 * not looked at, and what the fast path knows of /out stays as it was. */
static void rich_drop(void)
{
	PyObject *modules, *r;

	/* Nothing gathered, no figure open, no truncation flag a failed
	 * display() set: nothing to drop, and no call (the exec round trip
	 * of execute()). */
	if (!F.rich_collect)
		return;
	modules = PyDict_GetItemWithError(F.sysdict, F.k_modules);
	if (!PyList_GET_SIZE(F.displays) && !rich_flagged() &&
	    !(modules && PyDict_Check(modules) && figures_open(modules))) {
		PyErr_Clear();
		return;
	}
	r = PyObject_CallFunctionObjArgs(F.rich_collect, Py_None, Py_False, Py_False, NULL);
	Py_XDECREF(r);
	PyErr_Clear();
}

/* bool(msg.get(key)) for None, True, False or absent; false for
 * anything else (the Python path judges it). */
static bool msg_flag(PyObject *m, PyObject *key, bool *out)
{
	PyObject *v = PyDict_GetItemWithError(m, key);

	*out = v == Py_True;
	return !v || v == Py_None || v == Py_True || v == Py_False;
}

/* msg.get(key) as a str without NUL characters, UTF-8 in *s (owned by
 * the str).  NULL if absent or anything else. */
static PyObject *msg_str(PyObject *m, PyObject *key, const char **s, Py_ssize_t *len)
{
	PyObject *v = PyDict_GetItemWithError(m, key);

	if (!v || !PyUnicode_CheckExact(v) || !(*s = PyUnicode_AsUTF8AndSize(v, len)) || strlen(*s) != (size_t)*len) {
		PyErr_Clear();
		return NULL;
	}
	return v;
}

/* The EXEC message, parsed as runner.py's _loads does: a new dict, or
 * NULL (no exception) for anything unusual. */
static PyObject *parse_exec(const struct proto_frame *f)
{
	PyObject *r;

	if (!f->hdr.len || f->payload[0] != '{')
		return NULL;
	r = pyjson_loads(f->payload, f->hdr.len);
	if (r && !PyDict_CheckExact(r))
		Py_CLEAR(r);
	PyErr_Clear();
	return r;
}

/* A (first, second) pair from one of runner.py's helpers (consumed): new
 * references to its items, NULL for None; a TypeError naming who returned
 * something else. */
static void take_pair(PyObject *pair, const char *who, PyObject **first, PyObject **second)
{
	if (pair && PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
		if (PyTuple_GET_ITEM(pair, 0) != Py_None)
			*first = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
		if (PyTuple_GET_ITEM(pair, 1) != Py_None)
			*second = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
	} else if (pair) {
		PyErr_Format(PyExc_TypeError, "%s: not a pair", who);
	}
	Py_XDECREF(pair);
}

static struct code_entry *cache_find(const char *src, size_t len, const char *filename, bool repl)
{
	for (int i = 0; i < CODE_CACHE_N; i++) {
		struct code_entry *e = &F.cache[i];

		if (e->src && e->repl == repl && e->src_len == len && !memcmp(e->src, src, len) &&
		    !strcmp(e->filename, filename)) {
			e->used = ++F.cache_clock;
			return e;
		}
	}
	return NULL;
}

static void cache_put(const char *src, size_t len, const char *filename, bool repl, PyObject *body, PyObject *last)
{
	struct code_entry *e = &F.cache[0];
	char *s, *fn;

	if (len > CODE_CACHE_MAX_SRC)
		return;
	for (int i = 1; i < CODE_CACHE_N && e->src; i++)
		if (!F.cache[i].src || F.cache[i].used < e->used)
			e = &F.cache[i];
	s = malloc(len + 1);
	fn = strdup(filename);
	if (!s || !fn) {
		free(s);
		free(fn);
		return;
	}
	memcpy(s, src, len);
	s[len] = '\0';
	free(e->src);
	free(e->filename);
	Py_XDECREF(e->body);
	Py_XDECREF(e->last);
	e->src = s;
	e->src_len = len;
	e->filename = fn;
	e->repl = repl;
	e->body = Py_XNewRef(body);
	e->last = Py_XNewRef(last);
	e->used = ++F.cache_clock;
}

/* _limits[key] as a size, or 0 if it is not a positive int. */
static size_t limit_of(PyObject *key)
{
	PyObject *v = PyDict_GetItemWithError(F.limits, key);
	Py_ssize_t n;

	if (!v || !PyLong_CheckExact(v)) {
		PyErr_Clear();
		return 0;
	}
	n = PyLong_AsSsize_t(v);
	if (n <= 0) {
		PyErr_Clear();
		return 0;
	}
	return (size_t)n;
}

/* CPU time of this process in microseconds (and its peak RSS). */
static unsigned long long cpu_us(unsigned long long *max_rss)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0) {
		if (max_rss)
			*max_rss = 0;
		return 0;
	}
	if (max_rss)
		*max_rss = (unsigned long long)ru.ru_maxrss * 1024;
	return (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000ull +
	       (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* As do_exec: the exec's source for tracebacks, in linecache's cache or,
 * until linecache is imported, in _sources.  Best effort: a user who
 * broke linecache gets tracebacks without source lines. */
static void remember_source(PyObject *code, PyObject *filename)
{
	PyObject *lines = PyUnicode_Splitlines(code, 1), *entry = NULL, *modules, *lc, *cache = NULL;
	Py_ssize_t n;

	if (!lines)
		goto out;
	/* Each line ends with a newline, as linecache keeps a file's (3.11's
	 * traceback puts its carets one column right on a last line without). */
	n = PyList_GET_SIZE(lines);
	if (n > 0) {
		PyObject *last = PyList_GET_ITEM(lines, n - 1);
		Py_ssize_t k = PyUnicode_GET_LENGTH(last);

		if (k == 0 || PyUnicode_READ_CHAR(last, k - 1) != '\n') {
			PyObject *nl = PyUnicode_FromFormat("%U\n", last);

			if (!nl || PyList_SetItem(lines, n - 1, nl) < 0)
				goto out;
		}
	}
	entry = Py_BuildValue("(nOOO)", PyUnicode_GET_LENGTH(code), Py_None, lines, filename);
	if (!entry)
		goto out;
	modules = PyDict_GetItemWithError(F.sysdict, F.k_modules);
	lc = modules && PyDict_Check(modules) ? PyDict_GetItemWithError(modules, F.k_linecache) : NULL;
	if (!lc || lc == Py_None) {
		if (!PyErr_Occurred())
			PyDict_SetItem(F.sources, filename, entry);
		goto out;
	}
	cache = PyObject_GetAttr(lc, F.k_cache);
	if (!cache)
		goto out;
	if (PyDict_GET_SIZE(F.sources)) {
		PyObject *r = PyObject_CallMethodOneArg(cache, F.k_update, F.sources);

		if (!r)
			goto out;
		Py_DECREF(r);
		PyDict_Clear(F.sources);
	}
	PyObject_SetItem(cache, filename, entry);
out:
	PyErr_Clear();
	Py_XDECREF(cache);
	Py_XDECREF(entry);
	Py_XDECREF(lines);
}

/* Compile as the builtin compile() of a str does: the source is UTF-8
 * whatever a coding cookie in it says; no inherited __future__ flags.
 * Fresh flags each time: the compiler adds the source's own __future__
 * imports to them. */
PyObject *fastexec_compile(const char *src, PyObject *filename, int start)
{
	PyCompilerFlags flags = { .cf_flags = PyCF_IGNORE_COOKIE, .cf_feature_version = PY_MINOR_VERSION };

	return Py_CompileStringObject(src, filename, start, &flags, -1);
}

/* "\n" not in code.rstrip() (ASCII whitespace only: code ending in other
 * whitespace takes the AST path, which gives the same result). */
static bool one_line(const char *code, size_t len)
{
	while (len && (code[len - 1] == ' ' || (code[len - 1] >= '\t' && code[len - 1] <= '\r') ||
		       (code[len - 1] >= 0x1c && code[len - 1] <= 0x1f)))
		len--;
	return !memchr(code, '\n', len);
}

/* exec(co, G) / eval(co, G): the builtins put back if user code removed
 * them, as those builtins do. */
static PyObject *run_code(PyObject *co)
{
	if (!PyCode_Check(co)) {
		PyErr_SetString(PyExc_TypeError, "not a code object");
		return NULL;
	}
	if (!PyDict_GetItemWithError(F.G, F.k_builtins)) {
		if (PyErr_Occurred() || PyDict_SetItem(F.G, F.k_builtins, PyEval_GetBuiltins()) < 0)
			return NULL;
	}
	return PyEval_EvalCode(co, F.G, F.G);
}

/* encode(v) as JSON: plain scalars here, the rest by runner.py. */
static int value_json(PyObject *v, struct proto_buf *b)
{
	PyObject *r;

	if (v == Py_None) {
		proto_buf_puts(b, "null");
		return 0;
	}
	if (v == Py_True || v == Py_False) {
		proto_buf_puts(b, v == Py_True ? "true" : "false");
		return 0;
	}
	if (PyLong_CheckExact(v)) {
		int over;
		long long n = PyLong_AsLongLongAndOverflow(v, &over);

		/* INT_EXACT: beyond 2**53 ints travel as {"$int": ...}. */
		if (!over && n >= -(1LL << 53) && n <= (1LL << 53)) {
			char s[24];

			proto_buf_put(b, s, (size_t)snprintf(s, sizeof(s), "%lld", n));
			return 0;
		}
		PyErr_Clear();
	} else if (PyFloat_CheckExact(v)) {
		double d = PyFloat_AS_DOUBLE(v);

		if (d == d && d - d == 0.0) {
			jb_double(b, d);
			return 0;
		}
	} else if (PyUnicode_CheckExact(v)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(v, &n);

		if (s) {
			proto_buf_json_str(b, s, (size_t)n);
			return 0;
		}
		PyErr_Clear(); /* lone surrogates: encode() says so */
	}
	r = PyObject_CallOneArg(F.fast_value, v);
	if (!r)
		return -1;
	if (!PyBytes_Check(r)) {
		Py_DECREF(r);
		PyErr_SetString(PyExc_TypeError, "_fast_value did not return bytes");
		return -1;
	}
	proto_buf_put(b, PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r));
	Py_DECREF(r);
	return 0;
}

/* Run one EXEC the way do_exec does (0: declined, not touched). */
int fastexec_run(const struct proto_frame *f)
{
	PyObject *m, *code, *filename, *fv;
	const char *src, *fname = "<exec>";
	Py_ssize_t clen, flen;
	bool want, stream, all, flag, rich = false, plain;
	size_t limit, max_frame;
	PyObject *body = NULL, *lastc = NULL, *value = NULL, *err = NULL, *exit_code = NULL;
	struct proto_buf res = { 0 }, val = { 0 }, tails[2] = { { 0 } };
	bool trunc[2] = { false, false };
	uint64_t total[2];
	unsigned long long t0, c0, cpu, max_rss;
	int r = 0, k;

	if (!F.ready || !(m = parse_exec(f)))
		return 0;
	/* A NUL in the code: the builtin compile()'s error, from Python. */
	if (!msg_flag(m, F.k_want_value, &want) || !msg_flag(m, F.k_stream, &stream) ||
	    !msg_flag(m, F.k_stream_all, &all) || !msg_flag(m, F.k_display, &flag) || flag ||
	    !msg_flag(m, F.k_check_complete, &flag) || flag || !msg_flag(m, F.k_rich, &flag) ||
	    !(code = msg_str(m, F.k_code, &src, &clen)))
		goto decline;
	plain = PyDict_GetItemWithError(m, F.k_rich) == Py_False; /* absent: rich */
	fv = PyDict_GetItemWithError(m, F.k_filename);
	filename = fv ? msg_str(m, F.k_filename, &fname, &flen) : NULL;
	if (fv && fv != Py_None && !filename)
		goto decline;
	if (!filename || !flen) {
		fname = "<exec>";
		filename = NULL;
	}
	limit = limit_of(F.k_output);
	max_frame = limit_of(F.k_max_frame);
	if (!limit || !max_frame)
		goto decline;
	if (!filename && !(filename = PyUnicode_FromString(fname))) {
		PyErr_Clear();
		goto decline;
	} else if (fv == filename) {
		Py_INCREF(filename);
	}
	Py_INCREF(code);
	if (!plain)
		out_seed();

	Py_BEGIN_ALLOW_THREADS k = capture_begin(f->hdr.id, stream, all, limit);
	Py_END_ALLOW_THREADS t0 = now_ns();
	c0 = cpu_us(NULL);
	if (k < 0) {
		PyErr_SetString(PyExc_OSError, "cannot start the output thread");
	} else {
		struct code_entry *ce = cache_find(src, (size_t)clen, fname, want);
		uint64_t mark = ce ? 0 : capture_stderr_mark();

		remember_source(code, filename);
		if (ce) {
			body = Py_XNewRef(ce->body);
			lastc = Py_XNewRef(ce->last);
		} else if (want) {
			if (one_line(src, (size_t)clen)) {
				lastc = fastexec_compile(src, filename, Py_eval_input);
				if (!lastc && (PyErr_ExceptionMatches(PyExc_SyntaxError) ||
					       PyErr_ExceptionMatches(PyExc_ValueError)))
					PyErr_Clear();
			}
			if (!lastc && !PyErr_Occurred()) {
				take_pair(PyObject_CallFunctionObjArgs(F.split_ast, code, filename, NULL), "_split_ast",
					  &body, &lastc);
			}
		} else {
			body = fastexec_compile(src, filename, Py_file_input);
		}
		if (!ce && !PyErr_Occurred() && mark != (uint64_t)-1 && capture_stderr_mark() == mark)
			cache_put(src, (size_t)clen, fname, want, body, lastc);
		if (!PyErr_Occurred() && PyDict_SetItem(F.globals, F.k_in_user, Py_True) == 0) {
			PyObject *x = body ? run_code(body) : Py_NewRef(Py_None);

			if (x && lastc)
				value = run_code(lastc);
			Py_XDECREF(x);
			/* Keep the exception of user code across this. */
			{
				PyObject *et, *ev, *etb;

				PyErr_Fetch(&et, &ev, &etb);
				PyDict_SetItem(F.globals, F.k_in_user, Py_False);
				PyErr_Clear();
				PyErr_Restore(et, ev, etb);
			}
		}
	}
	if (PyErr_Occurred()) {
		PyObject *et, *ev, *etb, *pair;

		PyErr_Fetch(&et, &ev, &etb);
		PyErr_NormalizeException(&et, &ev, &etb);
		if (etb && ev)
			PyException_SetTraceback(ev, etb);
		pair = ev ? PyObject_CallOneArg(F.fast_error, ev) : NULL;
		Py_XDECREF(et);
		Py_XDECREF(ev);
		Py_XDECREF(etb);
		bool answered = pair != NULL;

		take_pair(pair, "_fast_error", &err, &exit_code);
		if (answered && !PyErr_Occurred() &&
		    (!err || !PyBytes_Check(err) || (exit_code && !PyLong_Check(exit_code)))) {
			PyErr_SetString(PyExc_TypeError, "_fast_error: not (bytes, int|None)");
			Py_CLEAR(err);
			Py_CLEAR(exit_code);
		}
		if (!err)
			r = -1; /* formatting failed: the runner's failure */
	}
	if (r == 0 && !PyErr_Occurred()) {
		struct stat st;
		bool have_st;

		if (plain)
			rich_drop();
		else if (rich_needed(value, &st, &have_st))
			rich = rich_collect(value, &st, have_st);
	}
	/* do_exec's finally: flush, then collect the output. */
	{
		PyObject *et, *ev, *etb;

		PyErr_Fetch(&et, &ev, &etb);
		for (int s = 0; s < 2; s++) {
			PyObject *fo = PyDict_GetItemWithError(F.sysdict, s ? F.k_stderr : F.k_stdout), *x;

			x = fo ? PyObject_CallMethodNoArgs(fo, F.k_flush) : NULL;
			Py_XDECREF(x);
			PyErr_Clear();
		}
		PyErr_Restore(et, ev, etb);
	}
	if (r == 0) {
		proto_buf_puts(&res, "{\"error\":");
		if (err)
			proto_buf_put(&res, PyBytes_AS_STRING(err), (size_t)PyBytes_GET_SIZE(err));
		else
			proto_buf_puts(&res, "null");
	}
	/* The capture ends whatever happened; its output goes into the
	 * result only when there is one. */
	if (capture_end_json(r == 0 ? &res : NULL, limit, tails, trunc, total) < 0)
		r = -1;
	if (r < 0)
		goto out;
	for (int s = 0; s < 2; s++) {
		proto_buf_puts(&res, s ? ",\"stderr_truncated\":" : ",\"stdout_truncated\":");
		proto_buf_puts(&res, trunc[s] ? "true" : "false");
	}
	for (int s = 0; s < 2; s++) {
		proto_buf_puts(&res, s ? ",\"stderr_bytes\":" : ",\"stdout_bytes\":");
		jb_ull(&res, total[s]);
	}
	for (int s = 0; s < 2; s++)
		if (trunc[s]) {
			proto_buf_puts(&res, s ? ",\"stderr_tail\":" : ",\"stdout_tail\":");
			proto_buf_put(&res, tails[s].p ? tails[s].p : "", tails[s].len);
		}
	if (exit_code) {
		long ec = PyLong_AsLong(exit_code);

		if (ec == -1 && PyErr_Occurred()) {
			r = -1;
			goto out;
		}
		proto_buf_puts(&res, ",\"exit_code\":");
		jb_ull(&res, (unsigned long long)ec);
	}
	proto_buf_puts(&res, ",\"duration\":");
	jb_fixed(&res, now_ns() - t0, 9);
	cpu = cpu_us(&max_rss);
	proto_buf_puts(&res, ",\"usage\":{\"cpu\":");
	jb_fixed(&res, cpu >= c0 ? cpu - c0 : 0, 6);
	proto_buf_puts(&res, ",\"max_rss\":");
	jb_ull(&res, max_rss);
	proto_buf_puts(&res, "}");
	if (value && value_json(value, &val) < 0) {
		r = -1;
		goto out;
	}
	if (rich) {
		size_t used = res.len + val.len + 4096;
		PyObject *frag = PyObject_CallFunction(F.fast_rich, "n",
						       (Py_ssize_t)(used < max_frame ? max_frame - used : 0));

		if (!frag || !PyBytes_Check(frag)) {
			Py_XDECREF(frag);
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_TypeError, "_fast_rich did not return bytes");
			r = -1;
			goto out;
		}
		if (PyBytes_GET_SIZE(frag)) {
			proto_buf_puts(&res, ",");
			proto_buf_put(&res, PyBytes_AS_STRING(frag), (size_t)PyBytes_GET_SIZE(frag));
		}
		Py_DECREF(frag);
	}
	if (value) {
		size_t before = res.len;

		proto_buf_puts(&res, ",\"value\":");
		proto_buf_put(&res, val.p ? val.p : "", val.len);
		proto_buf_puts(&res, "}");
		/* send_result: a value too large for a frame is named, not sent. */
		if (!res.bad && res.len > max_frame) {
			char repr[160];

			snprintf(repr, sizeof(repr),
				 ",\"value\":{\"$repr\":\"<value too large to send: %zu bytes>\","
				 "\"$type\":\"builtins.object\",\"$why\":\"too large\"}}",
				 res.len);
			res.len = before;
			proto_buf_puts(&res, repr);
		}
	} else {
		proto_buf_puts(&res, "}");
	}
	if (res.bad) {
		PyErr_NoMemory();
		r = -1;
		goto out;
	}
	if (res.len > NSBOX_PROTO_MAX_FRAME) {
		PyErr_SetString(PyExc_ValueError, "bad frame type or size");
		r = -1;
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS k = io_send_frame(PROTO_RESULT, f->hdr.id, res.p, res.len);
	Py_END_ALLOW_THREADS if (k < 0)
	{
		PyErr_SetFromErrno(PyExc_OSError);
		r = -2;
	}
	else
	{
		r = 1;
	}
out:
	Py_XDECREF(value);
	Py_XDECREF(body);
	Py_XDECREF(lastc);
	Py_XDECREF(err);
	Py_XDECREF(exit_code);
	Py_XDECREF(code);
	Py_XDECREF(filename);
	free(res.p);
	free(val.p);
	free(tails[0].p);
	free(tails[1].p);
	Py_DECREF(m);
	return r;
decline:
	PyErr_Clear();
	Py_DECREF(m);
	return 0;
}

/* The fast path failed after running (or trying to run) the code. */
int fastexec_failed(uint32_t id)
{
	PyObject *et, *ev, *etb, *r = NULL;

	PyErr_Fetch(&et, &ev, &etb);
	PyErr_NormalizeException(&et, &ev, &etb);
	if (etb && ev)
		PyException_SetTraceback(ev, etb);
	if (ev)
		r = PyObject_CallFunction(F.fast_failed, "IO", id, ev);
	Py_XDECREF(et);
	Py_XDECREF(ev);
	Py_XDECREF(etb);
	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}
