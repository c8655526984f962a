/* A small agent host: two host tools (a calculator and a key-value store)
 * and "model-written" code that calls them, run turn after turn in one
 * sandboxed session whose globals persist.  Build: `make` (build/examples/agent)
 * or cc agent.c $(pkg-config --cflags --libs nsbox).  Exit status 0 when
 * every turn ran. */
#define _GNU_SOURCE	/* asprintf */
#include <nsbox.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* calc(expr_a, op, expr_b) -> number.  args_json: {"args":[a,op,b],"kwargs":{}} */
static int calc(void *ud, const char *name, const char *args, char **result, char **error)
{
	double a, b;
	char op;

	(void)ud;
	(void)name;
	if (sscanf(args, "{\"args\":[%lf,\"%c\",%lf]", &a, &op, &b) != 3 || !strchr("+-*/", op))
		return (*error = strdup("usage: calc(a, '+'|'-'|'*'|'/', b)")), 1;
	if (op == '/' && b == 0)
		return (*error = strdup("division by zero")), 1;
	return asprintf(result, "%.17g", op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b) < 0;
}

/* kv(key) reads, kv(key, value) writes: a store that lives on the host. */
struct kv {
	char key[16][64];
	char *val[16];
	int n;
};

static int kv(void *ud, const char *name, const char *args, char **result, char **error)
{
	struct kv *s = ud;
	char key[64];
	int used = 0, i;

	(void)name;
	if (sscanf(args, "{\"args\":[\"%63[^\"]\"%n", key, &used) != 1 || !used)
		return (*error = strdup("usage: kv(key[, value])")), 1;
	for (i = 0; i < s->n && strcmp(s->key[i], key); i++)
		;
	if (args[used] == ',') {	/* write: keep the value's JSON text as is */
		const char *v = args + used + 1, *end = strstr(v, "],\"kwargs\"");

		if (!end || (i == s->n && s->n == 16))
			return (*error = strdup("kv: bad value or store full")), 1;
		if (i == s->n)
			snprintf(s->key[s->n++], sizeof(s->key[0]), "%s", key);
		free(s->val[i]);
		s->val[i] = strndup(v, (size_t)(end - v));
		return 0;	/* None */
	}
	if (i == s->n)
		return asprintf(error, "kv: no key '%s'", key), 1;
	*result = strdup(s->val[i]);
	return 0;
}

static const char *const turns[] = {
	"area = calc(3.5, '*', 2)\nkv('area', area)\nprint('stored area', area)",
	"kv('notes', {'unit': 'm2', 'rooms': [1, 2]})\nkv('notes')['rooms']",
	"total = 0\nfor i in range(1, 11):\n    total = calc(total, '+', i)\ntotal",
	"import nsbox\ntry:\n    calc(1, '/', 0)\nexcept nsbox.ToolError as e:\n    print('tool said:', e)\n'recovered'",
	"import json\njson.dumps({'area': kv('area'), 'total': total})",
};

int main(void)
{
	struct kv store = { .n = 0 };
	struct nsbox_exec_opts xo = { .struct_size = sizeof(xo), .repl = true, .timeout = 10 };
	nsbox_policy_t *p = NULL;
	nsbox_session_t *s = NULL;
	nsbox_error_t *err = NULL;
	int failed = 0;

	if (nsbox_policy_new("default", &p, &err) < 0 || nsbox_policy_set_memory(p, 256 << 20, &err) < 0 ||
	    nsbox_session_new(p, NULL, &s, &err) < 0 ||
	    nsbox_session_add_tool(s, "calc", NULL, "calc(a, op, b): arithmetic on the host.", calc, NULL, &err) < 0 ||
	    nsbox_session_add_tool(s, "kv", NULL, "kv(key[, value]): the host's key-value store.", kv, &store, &err) < 0) {
		fprintf(stderr, "agent: %s\n", nsbox_error_message(err));
		return 1;
	}
	for (size_t t = 0; t < sizeof(turns) / sizeof(turns[0]); t++) {
		nsbox_result_t *r = NULL;

		if (nsbox_exec(s, turns[t], &xo, &r, &err) < 0) {
			fprintf(stderr, "agent: turn %zu: %s\n", t, nsbox_error_message(err));
			failed = 1;
			break;
		}
		printf("--- turn %zu\n%s", t, nsbox_result_stdout(r, NULL));
		if (nsbox_result_status(r) == NSBOX_OK) {
			printf("=> %s\n", nsbox_result_value(r));
		} else {
			printf("!! %s: %s\n", nsbox_result_error_type(r), nsbox_result_error_message(r));
			failed = 1;
		}
		nsbox_result_free(r);
	}
	nsbox_session_free(s);
	nsbox_policy_free(p);
	for (int i = 0; i < store.n; i++)
		free(store.val[i]);
	return failed;
}
