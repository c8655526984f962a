/* JSON <-> Python for the runner's frames, in C.
 *
 * dumps(obj) is json.dumps(obj, ensure_ascii=False, allow_nan=False,
 * separators=(",", ":")).encode("utf-8", "replace"): the same types, key
 * conversions, float reprs, escapes and errors as CPython's _json encoder
 * with those settings.  loads(data) parses what the host sends, with
 * jansson (as the host wrote it with jansson: no NaN, no integer beyond 64
 * bits, no lone surrogate; anything else is a ValueError).
 *
 * runner.py used CPython's _json for both.  _json lives in lib-dynload, and
 * the first import from there (the directory scan, dlopen) cost ~0.5 ms of
 * every cold start: of `nsbox python`, of a cold session. */
#include "runner.h"

#include <jansson.h>

#include "proto.h"

/* ---- encode ---- */

static int put_obj_text(struct proto_buf *b, PyObject *text)
{
	Py_ssize_t n;
	const char *s;

	if (!text)
		return -1;
	s = PyUnicode_AsUTF8AndSize(text, &n);
	if (!s) {
		Py_DECREF(text);
		return -1;
	}
	proto_buf_put(b, s, (size_t)n);
	Py_DECREF(text);
	return 0;
}

/* A str as a JSON string; lone surrogates become '?' (errors="replace").
 * ASCII text is read in place; other text through a temporary UTF-8 copy
 * (PyUnicode_AsUTF8 would keep one attached to the str for its life). */
static int put_str(struct proto_buf *b, PyObject *o)
{
	PyObject *bytes;

	if (PyUnicode_READY(o) < 0)
		return -1;
	if (PyUnicode_IS_ASCII(o)) {
		proto_buf_json_str(b, (const char *)PyUnicode_DATA(o), (size_t)PyUnicode_GET_LENGTH(o));
		return 0;
	}
	bytes = PyUnicode_AsEncodedString(o, "utf-8", "replace");
	if (!bytes)
		return -1;
	proto_buf_json_str(b, PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
	Py_DECREF(bytes);
	return 0;
}

static int put_float(struct proto_buf *b, PyObject *o)
{
	if (!isfinite(PyFloat_AS_DOUBLE(o))) {
		PyErr_SetString(PyExc_ValueError, "Out of range float values are not JSON compliant");
		return -1;
	}
	return put_obj_text(b, PyFloat_Type.tp_repr(o));
}

static int enc(struct proto_buf *b, PyObject *o);

static int enc_seq(struct proto_buf *b, PyObject *o)
{
	PyObject *seq = PySequence_Fast(o, "expected a sequence");
	int r = 0;

	if (!seq)
		return -1;
	proto_buf_put(b, "[", 1);
	for (Py_ssize_t i = 0; r == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));

		if (i)
			proto_buf_put(b, ",", 1);
		r = enc(b, item);
		Py_DECREF(item);
	}
	proto_buf_put(b, "]", 1);
	Py_DECREF(seq);
	return r;
}

/* A key as _json converts it: str as is; float, True/False/None, int by
 * their JSON text; anything else is a TypeError. */
static int put_key(struct proto_buf *b, PyObject *k)
{
	struct proto_buf t = { 0 };
	int r;

	if (PyUnicode_Check(k))
		return put_str(b, k);
	if (PyFloat_Check(k))
		r = put_float(&t, k);
	else if (k == Py_True || k == Py_False || k == Py_None)
		r = (proto_buf_puts(&t, k == Py_True ? "true" : k == Py_False ? "false" : "null"), 0);
	else if (PyLong_Check(k))
		r = put_obj_text(&t, PyLong_Type.tp_repr(k));
	else {
		PyErr_Format(PyExc_TypeError, "keys must be str, int, float, bool or None, not %.100s",
			     Py_TYPE(k)->tp_name);
		return -1;
	}
	if (r == 0 && t.bad) {
		PyErr_NoMemory();
		r = -1;
	}
	if (r == 0)
		proto_buf_json_str(b, t.p, t.len);
	free(t.p);
	return r;
}

static int enc_dict(struct proto_buf *b, PyObject *o)
{
	/* _json walks items(): a subclass's own items() counts. */
	PyObject *items;
	int r = 0;

	/* _json writes an empty dict without calling items(). */
	if (PyDict_GET_SIZE(o) == 0) {
		proto_buf_put(b, "{}", 2);
		return 0;
	}
	items = PyDict_CheckExact(o) ? PyDict_Items(o) : PyMapping_Items(o);
	if (!items)
		return -1;
	proto_buf_put(b, "{", 1);
	for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(items); i++) {
		PyObject *kv = PyList_GET_ITEM(items, i);

		if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
			PyErr_SetString(PyExc_ValueError, "items must return 2-tuples");
			r = -1;
			break;
		}
		if (i)
			proto_buf_put(b, ",", 1);
		r = put_key(b, PyTuple_GET_ITEM(kv, 0));
		if (r == 0) {
			proto_buf_put(b, ":", 1);
			r = enc(b, PyTuple_GET_ITEM(kv, 1));
		}
	}
	proto_buf_put(b, "}", 1);
	Py_DECREF(items);
	return r;
}

static int enc(struct proto_buf *b, PyObject *o)
{
	int r;

	if (o == Py_None) {
		proto_buf_put(b, "null", 4);
		return 0;
	}
	if (o == Py_True || o == Py_False) {
		proto_buf_puts(b, o == Py_True ? "true" : "false");
		return 0;
	}
	if (PyUnicode_Check(o))
		return put_str(b, o);
	if (PyLong_Check(o))
		return put_obj_text(b, PyLong_Type.tp_repr(o));
	if (PyFloat_Check(o))
		return put_float(b, o);
	if (!PyList_Check(o) && !PyTuple_Check(o) && !PyDict_Check(o)) {
		/* As json's default(): the type's __name__, not its tp_name. */
		PyObject *name = PyType_GetName(Py_TYPE(o));

		if (name) {
			PyErr_Format(PyExc_TypeError, "Object of type %U is not JSON serializable", name);
			Py_DECREF(name);
		}
		return -1;
	}
	if (Py_EnterRecursiveCall(" while encoding a JSON object"))
		return -1;
	r = PyDict_Check(o) ? enc_dict(b, o) : enc_seq(b, o);
	Py_LeaveRecursiveCall();
	return r;
}

PyObject *pyjson_dumps(PyObject *o)
{
	struct proto_buf b = { 0 };
	PyObject *r = NULL;

	if (enc(&b, o) == 0) {
		if (b.bad)
			PyErr_NoMemory();
		else
			r = PyBytes_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.len);
	}
	free(b.p);
	return r;
}

/* ---- decode ---- */

static PyObject *to_py(json_t *j)
{
	PyObject *r = NULL;

	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		const char *key;
		size_t klen;
		json_t *v;

		if (Py_EnterRecursiveCall(" while decoding a JSON object"))
			return NULL;
		r = PyDict_New();
		json_object_keylen_foreach(j, key, klen, v) {
			PyObject *k, *pv;

			if (!r)
				break;
			k = PyUnicode_DecodeUTF8(key, (Py_ssize_t)klen, NULL);
			pv = k ? to_py(v) : NULL;
			if (!pv || PyDict_SetItem(r, k, pv) < 0)
				Py_CLEAR(r);
			Py_XDECREF(k);
			Py_XDECREF(pv);
		}
		Py_LeaveRecursiveCall();
		return r;
	}
	case JSON_ARRAY:
		if (Py_EnterRecursiveCall(" while decoding a JSON array"))
			return NULL;
		r = PyList_New((Py_ssize_t)json_array_size(j));
		for (size_t i = 0; r && i < json_array_size(j); i++) {
			PyObject *pv = to_py(json_array_get(j, i));

			if (!pv)
				Py_CLEAR(r);
			else
				PyList_SET_ITEM(r, (Py_ssize_t)i, pv);
		}
		Py_LeaveRecursiveCall();
		return r;
	case JSON_STRING:
		return PyUnicode_DecodeUTF8(json_string_value(j), (Py_ssize_t)json_string_length(j), NULL);
	case JSON_INTEGER:
		return PyLong_FromLongLong(json_integer_value(j));
	case JSON_REAL:
		return PyFloat_FromDouble(json_real_value(j));
	case JSON_TRUE:
		Py_RETURN_TRUE;
	case JSON_FALSE:
		Py_RETURN_FALSE;
	case JSON_NULL:
		Py_RETURN_NONE;
	}
	PyErr_SetString(PyExc_ValueError, "unknown JSON value");
	return NULL;
}

PyObject *pyjson_loads(const char *s, size_t n)
{
	json_error_t e;
	json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	PyObject *r;

	if (!j) {
		PyErr_Format(PyExc_ValueError, "invalid JSON: %s (at character %d)", e.text, e.position);
		return NULL;
	}
	r = to_py(j);
	json_decref(j);
	return r;
}
