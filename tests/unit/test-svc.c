/* The service protocol (proto/svc.c) and nsboxd.conf(5) (service/config.c),
 * offline: good and bad messages and configurations, as nsboxd reads them;
 * and, as root, the confused-deputy check (service/deputy.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nsbox.h"
#include "config.h"
#include "deputy.h"
#include "svc.h"
#include "tap.h"

static char pkt[SVC_MAX_MSG + 64];

/* A packet: header + payload as given (not necessarily JSON). */
static size_t packet(uint32_t magic, uint16_t type, uint16_t flags, uint32_t id, const char *payload, long len_delta)
{
	uint32_t len = (uint32_t)strlen(payload);
	uint32_t hlen = (uint32_t)((long)len + len_delta);

	memcpy(pkt, &magic, 4);
	memcpy(pkt + 4, &hlen, 4);
	memcpy(pkt + 8, &type, 2);
	memcpy(pkt + 10, &flags, 2);
	memcpy(pkt + 12, &id, 4);
	memcpy(pkt + 16, payload, len);
	return 16 + len;
}

static int decode(size_t n, uint16_t *type, json_t **m)
{
	struct nsbox_err e = { 0 };
	uint32_t id;

	*m = NULL;
	return svc_decode(pkt, n, type, &id, m, &e);
}

static void test_decode(void)
{
	uint16_t t;
	json_t *m;
	struct nsbox_err e = { 0 };
	char *buf = NULL;
	size_t len;
	uint32_t id;
	static const struct {
		uint32_t magic;
		uint16_t type, flags;
		const char *payload;
		long delta;
		const char *what;
	} bad[] = {
		{ 0x4E534258, SVC_HELLO, 0, "{}", 0, "the runner protocol's magic" },
		{ SVC_MAGIC, 0, 0, "{}", 0, "type 0" },
		{ SVC_MAGIC, SVC_TYPE_MAX + 1, 0, "{}", 0, "an unknown type" },
		{ SVC_MAGIC, SVC_HELLO, 1, "{}", 0, "flags set" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{}", 1, "len past the packet" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{}", -1, "len short of the packet" },
		{ SVC_MAGIC, SVC_HELLO, 0, "[]", 0, "an array" },
		{ SVC_MAGIC, SVC_HELLO, 0, "1", 0, "a number" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{\"a\":1,\"a\":2}", 0, "duplicate keys" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{\"a\":\"\\u0000\"}", 0, "a NUL in a string" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{\"a\":\"\xff\"}", 0, "bad UTF-8" },
		{ SVC_MAGIC, SVC_HELLO, 0, "{", 0, "truncated JSON" },
		{ SVC_MAGIC, SVC_HELLO, 0, "", 0, "no payload" },
	};

	ok(decode(packet(SVC_MAGIC, SVC_HELLO, 0, 7, "{\"version\":1}", 0), &t, &m) == 0 && t == SVC_HELLO &&
		   json_integer_value(json_object_get(m, "version")) == 1,
	   "HELLO decodes");
	json_decref(m);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ok(decode(packet(bad[i].magic, bad[i].type, bad[i].flags, 1, bad[i].payload, bad[i].delta), &t, &m) < 0 &&
			   !m,
		   "refused: %s", bad[i].what);
		json_decref(m);
	}
	ok(decode(10, &t, &m) < 0, "refused: a packet shorter than the header");

	/* encode -> decode round trip; and the size cap. */
	m = json_pack("{s:s,s:i}", "handle", "0123456789abcdef0123456789abcdef", "n", 42);
	ok(svc_encode(SVC_INFO, 99, m, &buf, &len, &e) == 0 && len > SVC_HDR_SIZE, "INFO encodes");
	{
		uint16_t t2;
		json_t *m2 = NULL;

		ok(svc_decode(buf, len, &t2, &id, &m2, &e) == 0 && t2 == SVC_INFO && id == 99 && json_equal(m, m2),
		   "and decodes to the same");
		json_decref(m2);
	}
	free(buf);
	json_decref(m);
	{
		char *big = malloc(SVC_MAX_MSG);

		memset(big, 'x', SVC_MAX_MSG - 1);
		big[SVC_MAX_MSG - 1] = '\0';
		m = json_pack("{s:s}", "x", big);
		buf = NULL;
		ok(svc_encode(SVC_ERROR, 1, m, &buf, &len, &e) < 0 && !buf, "a message over SVC_MAX_MSG is not encoded");
		json_decref(m);
		free(big);
	}
	ok(!strcmp(svc_type_name(SVC_OPEN), "OPEN") && !strcmp(svc_type_name(999), "?"), "type names");
	ok(svc_handle_valid("0123456789abcdef0123456789abcdef") && !svc_handle_valid("0123456789ABCDEF0123456789abcdef") &&
		   !svc_handle_valid("0123") && !svc_handle_valid(NULL) &&
		   !svc_handle_valid("0123456789abcdef0123456789abcdef0"),
	   "handles: 32 lowercase hex digits");
}

/* o's strings point into the message: it is kept until the next call. */
static json_t *last_msg;

static int open_parse(const char *json, size_t n_fds, struct svc_open *o, char *msg, size_t msglen)
{
	struct nsbox_err e = { 0 };
	int r;

	json_decref(last_msg);
	last_msg = json_loads(json, JSON_REJECT_DUPLICATES, NULL);
	if (!last_msg)
		return -2;
	r = svc_open_parse(last_msg, n_fds, o, &e);
	snprintf(msg, msglen, "%s", e.msg);
	return r;
}

static void test_open(void)
{
	struct svc_open o;
	char msg[256];
	json_t *m;
	struct nsbox_err e = { 0 };
	static const struct {
		const char *json;
		size_t n_fds;
		const char *what;
	} bad[] = {
		{ "{\"root\":true}", 0, "an unknown key" },
		{ "{\"time_limit\":1}", 0, "time_limit (parsed once and never applied: red team 11)" },
		{ "{\"HostUid\":4242}", 0, "HostUid (not the client's to choose)" },
		{ "{\"host_uid\":4242}", 0, "host_uid" },
		{ "{\"profile\":7}", 0, "a profile that is not a string" },
		{ "{\"memory\":-1}", 0, "negative memory" },
		{ "{\"memory\":\"1G\"}", 0, "memory as a string" },
		{ "{\"cpus\":-0.5}", 0, "negative CPUs" },
		{ "{\"share_net\":1}", 0, "share_net not a boolean" },
		{ "{\"workspace\":{\"fd\":0}}", 0, "a workspace fd that did not come" },
		{ "{\"workspace\":{\"fd\":-1}}", 1, "a negative fd index" },
		{ "{\"workspace\":\"/home/alice\"}", 0, "a workspace path" },
		{ "{\"binds\":[{\"fd\":0,\"dst\":\"relative\"}]}", 1, "a relative bind dst" },
		{ "{\"binds\":[{\"fd\":0,\"dst\":\"/a:b\"}]}", 1, "a bind dst with ':'" },
		{ "{\"binds\":[{\"fd\":1,\"dst\":\"/a\"}]}", 1, "a bind fd past the descriptors" },
		{ "{\"binds\":[{\"src\":\"/etc\",\"dst\":\"/a\"}]}", 0, "a bind by path" },
		{ "{\"binds\":{}}", 0, "binds not an array" },
		{ "{\"env\":[\"NOEQUALS\"]}", 0, "env without '='" },
		{ "{\"env\":[\"=x\"]}", 0, "env without a name" },
		{ "{\"env\":[1]}", 0, "env not strings" },
		{ "{\"cold\":\"yes\"}", 0, "cold not a boolean" },
		{ "{\"net\":[\"example.com\"]}", 0, "net not an object" },
		{ "{\"net\":{}}", 0, "net without rules" },
		{ "{\"net\":{\"allow\":[]}}", 0, "net with an empty allow" },
		{ "{\"net\":{\"allow\":\"example.com\"}}", 0, "net.allow not an array" },
		{ "{\"net\":{\"allow\":[7]}}", 0, "a rule that is not a string" },
		{ "{\"net\":{\"allow\":[\"\"]}}", 0, "an empty rule" },
		{ "{\"net\":{\"allow\":[\"exa mple.com\"]}}", 0, "a rule with a space" },
		{ "{\"net\":{\"allow\":[\"a\\tb.com\"]}}", 0, "a rule with a tab" },
		{ "{\"net\":{\"allow\":[\"\u00e9.com\"]}}", 0, "a rule that is not ASCII" },
		{ "{\"net\":{\"allow\":[\"a.com\"],\"max_bytes_in\":-1}}", 0, "a negative byte limit" },
		{ "{\"net\":{\"allow\":[\"a.com\"],\"max_connections\":\"3\"}}", 0, "a limit as a string" },
		{ "{\"net\":{\"allow\":[\"a.com\"],\"log\":\"/tmp/x\"}}", 0, "a log by path" },
		{ "{\"net\":{\"allow\":[\"a.com\"],\"log\":{\"fd\":0}}}", 0, "a log fd that did not come" },
		{ "{\"net\":{\"allow\":[\"a.com\"],\"log_path\":\"/x\"}}", 0, "an unknown net field" },
		{ "{\"workspace\":{\"fd\":0},\"net\":{\"allow\":[\"a.com\"],\"log\":{\"fd\":0}}}", 1,
		  "the workspace's descriptor as the log" },
		{ "{\"rootfs\":\"/srv/tree\"}", 0, "rootfs a path (a confused deputy)" },
		{ "{\"rootfs\":\"../x\"}", 0, "rootfs with dots and a slash" },
		{ "{\"rootfs\":\"Data\"}", 0, "rootfs with upper case" },
		{ "{\"rootfs\":\"-x\"}", 0, "rootfs starting with -" },
		{ "{\"rootfs\":\"\"}", 0, "an empty rootfs" },
		{ "{\"rootfs\":7}", 0, "rootfs not a string" },
		{ "{\"rootfs\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", 0, "rootfs of 65" },
	};

	ok(open_parse("{}", 0, &o, msg, sizeof(msg)) == 0 && !strcmp(o.profile, "default") && o.workspace_fd == -1 &&
		   !o.n_binds && !o.n_env && !o.memory && !o.share_net,
	   "OPEN {}: the default profile, nothing else");
	ok(open_parse("{\"profile\":\"strict\",\"memory\":268435456,\"pids\":64,\"cpus\":0.5,\"share_net\":true,"
		      "\"workspace\":{\"fd\":1},\"binds\":[{\"fd\":0,\"dst\":\"/data\",\"writable\":true}],"
		      "\"env\":[\"A=1\",\"B=\"],\"output_limit\":4096,\"cold\":true}",
		      2, &o, msg, sizeof(msg)) == 0 &&
		   !strcmp(o.profile, "strict") && o.memory == 268435456 && o.pids == 64 && o.cpus == 0.5 && o.share_net &&
		   o.workspace_fd == 1 && o.n_binds == 1 && o.binds[0].fd == 0 && !strcmp(o.binds[0].dst, "/data") &&
		   o.binds[0].writable && o.n_env == 2 && !strcmp(o.env[1], "B=") && o.output_limit == 4096 && o.cold,
	   "OPEN with every field (%s)", msg);
	ok(open_parse("{\"share_net\":false,\"net\":{\"allow\":[\"*.example.com:8443\",\"10.99.0.0/24\"],"
		      "\"max_bytes_out\":0,\"max_connections\":3,\"log\":{\"fd\":0}}}",
		      1, &o, msg, sizeof(msg)) == 0 &&
		   o.share_net_given && !o.share_net && o.n_net_allow == 2 && !strcmp(o.net_allow[0], "*.example.com:8443") &&
		   o.net_max_out == 0 && o.net_max_in == -1 && o.net_max_conns == 3 && o.net_log_fd == 0,
	   "OPEN with net: rules, limits (absent: -1), the log's descriptor (%s)", msg);
	ok(open_parse("{}", 0, &o, msg, sizeof(msg)) == 0 && !o.share_net_given && !o.n_net_allow && o.net_log_fd == -1 &&
		   o.net_max_out == -1,
	   "OPEN {}: no net, share_net not given");
	ok(open_parse("{\"rootfs\":\"data_science-2\"}", 0, &o, msg, sizeof(msg)) == 0 &&
		   !strcmp(o.rootfs, "data_science-2"),
	   "OPEN with a built tree's name (%s)", msg);
	ok(open_parse("{}", 0, &o, msg, sizeof(msg)) == 0 && !o.rootfs, "OPEN without rootfs: none");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ok(open_parse(bad[i].json, bad[i].n_fds, &o, msg, sizeof(msg)) == -1 && strstr(msg, "OPEN"),
		   "OPEN refused: %s (%s)", bad[i].what, msg);
	{
		/* More binds than SVC_MAX_BINDS. */
		json_t *binds = json_array();

		for (int i = 0; i <= SVC_MAX_BINDS; i++)
			json_array_append_new(binds, json_pack("{s:i,s:s}", "fd", 0, "dst", "/x"));
		m = json_pack("{s:o}", "binds", binds);
		ok(svc_open_parse(m, 1, &o, &e) < 0, "OPEN refused: %d binds", SVC_MAX_BINDS + 1);
		json_decref(m);
	}
	{
		/* More rules than SVC_MAX_NET_RULES, and one too long. */
		json_t *rules = json_array();
		char longname[SVC_NET_RULE_MAX + 2];

		for (int i = 0; i <= SVC_MAX_NET_RULES; i++)
			json_array_append_new(rules, json_string("example.com"));
		m = json_pack("{s:{s:o}}", "net", "allow", rules);
		ok(svc_open_parse(m, 0, &o, &e) < 0 && strstr(e.msg, "1 to 64 rules"), "OPEN refused: %d rules (%s)",
		   SVC_MAX_NET_RULES + 1, e.msg);
		json_decref(m);
		memset(longname, 'a', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = '\0';
		m = json_pack("{s:{s:[s]}}", "net", "allow", longname);
		ok(svc_open_parse(m, 0, &o, &e) < 0 && strstr(e.msg, "net.allow 0"), "OPEN refused: a rule of %zu bytes",
		   strlen(longname));
		json_decref(m);
	}
	{
		struct svc_status st = { .exited = true, .exit_code = 3, .oom_killed = true, .peak_memory = 1 << 20 }, back;
		json_t *j = svc_status_json(&st);

		memset(&back, 0xff, sizeof(back));
		svc_status_from_json(j, &back);
		ok(back.exited && back.exit_code == 3 && !back.term_signal && back.oom_killed && !back.killed &&
			   back.peak_memory == 1 << 20,
		   "status JSON round trip");
		json_decref(j);
		svc_status_from_json(NULL, &back);
		ok(1, "status from NULL does not crash");
	}
}

static int conf(const char *text, struct conf *c, char *eb, size_t el)
{
	conf_defaults(c);
	eb[0] = '\0';
	return conf_parse(c, text, strlen(text), "t.conf", eb, el);
}

static void test_conf(void)
{
	struct conf c;
	char eb[512];
	const struct conf_rule *r;
	gid_t g4242 = 4242;
	static const struct {
		const char *text;
		const char *msg;
	} bad[] = {
		{ "[Service]\nPoolSize=65\n", "t.conf:2: PoolSize" },
		{ "[Service]\nPoolSize=-1\n", "t.conf:2: PoolSize" },
		{ "[Service]\nPoolProfiles=default bogus\n", "unknown profile 'bogus'" },
		{ "[Service]\nIdleExitSec=soon\n", "IdleExitSec" },
		{ "[Service]\nMaxSessions=0\n", "not a positive count" },
		{ "[Service]\nHostUidRange=5000\n", "HostUidRange: '5000' is not FIRST-LAST" },
		{ "[Service]\nHostUidRange=6000-5000\n", "HostUidRange" },
		{ "[Service]\nHostUidRange=0-65535\n", "1000 <= FIRST" },
		{ "[Service]\nHostUidRange=1000-4294967295\n", "HostUidRange" },
		{ "[Service]\nAllowUsers=no-such-user-xyzzy\n", "no such user 'no-such-user-xyzzy'" },
		{ "[Service]\nAllowGroups=no-such-group-xyzzy\n", "no such group" },
		{ "[Service]\nBogus=1\n", "unknown key 'Bogus' in [Service]" },
		{ "[Default]\nMaxMemory=lots\n", "MaxMemory" },
		/* Sizes and numbers as nsbox-policy(5)'s (strtod took these). */
		{ "[Default]\nMaxMemory=1.5G\n", "MaxMemory: '1.5G' is not a size of at least 1M" },
		{ "[Default]\nMaxMemory=0x1p30\n", "MaxMemory" },
		{ "[Default]\nMaxMemory=100\n", "at least 1M" },
		{ "[Default]\nMaxCPUs=0.0000001\n", "MaxCPUs: '0.0000001' is not a number of CPUs of at least 0.01" },
		{ "[Default]\nMaxCPUs=0x2\n", "MaxCPUs" },
		{ "[Service]\nIdleExitSec=0x10\n", "IdleExitSec" },
		{ "[Service]\nIdleExitSec= 5e\n", "IdleExitSec" },
		{ "[Default]\nMaxCPUs=-1\n", "MaxCPUs" },
		{ "[Default]\nMaxPids=0\n", "MaxPids" },
		{ "[Default]\nMaxPids=lots\n", "MaxPids" },
		{ "[Default]\nAllowShareNet=maybe\n", "AllowShareNet" },
		{ "[Default]\nAllowNet=sometimes\n", "AllowNet: 'sometimes' is not yes or no" },
		{ "[Default]\nAllowProfiles=root\n", "unknown profile" },
		{ "[Default]\nHostUid=4242\n", "unknown key 'HostUid' in [Default]" },
		{ "[User:no-such-user-xyzzy]\n", "no such user" },
		{ "[Nope]\n", "unknown section [Nope]" },
		{ "[Service\n", "bad section header" },
		{ "[Service]\njust words\n", "expected KEY=VALUE" },
	};

	ok(conf("", &c, eb, sizeof(eb)) == 0 && c.pool_size == 2 && c.pool_profile[0] && !c.pool_profile[2] &&
		   c.max_connections == 256 && c.max_sessions == 1024 && c.uid_count == 0 && c.dflt.max_sessions == 16 &&
		   c.dflt.workspace && !c.dflt.binds && !c.dflt.share_net && !c.dflt.net && c.dflt.profiles[0] && c.dflt.profiles[1] &&
		   !c.dflt.profiles[2],
	   "an empty file: the documented defaults");
	ok(conf("# comment\n; another\n\n[Service]\n  PoolSize = 4 \nPoolProfiles=strict permissive\n"
		"HostUidRange=524288-589823\nIdleExitSec=0.5\nAllowUsers=0 65534\nAllowGroups=4242\n"
		"[Default]\nMaxSessions=8\nMaxMemory=4G\nMaxCPUs=2.5\nMaxPids=300\nAllowBinds=yes\n"
		"[Group:4242]\nMaxSessions=64\nAllowShareNet=yes\nAllowNet=yes\n[User:65534]\nAllowWorkspace=no\n",
		&c, eb, sizeof(eb)) == 0,
	   "a full file parses (%s)", eb);
	ok(c.pool_size == 4 && !c.pool_profile[0] && c.pool_profile[1] && c.pool_profile[2] && c.idle_exit == 0.5,
	   "[Service] pool and idle settings");
	ok(c.uid_first == 524288 && c.uid_count == 65536, "HostUidRange=524288-589823: 65536 uids from 524288");
	ok(c.dflt.max_memory == 4ull << 30 && c.dflt.max_cpus == 2.5 && c.dflt.max_pids == 300 && c.dflt.binds,
	   "[Default] limits");
	r = conf_rule_for(&c, 1000, 1000, &g4242, 1);
	ok(r && !strcmp(r->section, "Group:4242") && r->max_sessions == 64 && r->share_net && r->net && r->binds &&
		   r->max_memory == 4ull << 30,
	   "a supplementary group's section, on top of [Default] as read so far");
	r = conf_rule_for(&c, 65534, 4242, NULL, 0);
	ok(r && !strcmp(r->section, "User:65534") && !r->workspace, "[User:] before [Group:]");
	r = conf_rule_for(&c, 1000, 1000, NULL, 0);
	ok(r && !strcmp(r->section, "Default"), "else [Default]");
	ok(conf_allowed(&c, 0, 0, NULL, 0) && conf_allowed(&c, 65534, 65534, NULL, 0) &&
		   conf_allowed(&c, 1000, 1000, &g4242, 1) && !conf_allowed(&c, 1000, 1000, NULL, 0) &&
		   conf_allowed(&c, geteuid(), 4, NULL, 0),
	   "AllowUsers, AllowGroups, root and our own uid may connect; others not");
	ok(conf("[Service]\nHostUidRange=524288-589823\nHostUidRange=\n", &c, eb, sizeof(eb)) == 0 && !c.uid_count,
	   "HostUidRange= (empty) turns it off");
	ok(conf("\xef\xbb\xbf[Default]\nMaxMemory=4GB\nMaxCPUs=infinity\n[User:0]\nMaxMemory=4GiB\nMaxCPUs=1e1\n", &c,
		eb, sizeof(eb)) == 0 &&
		   c.dflt.max_memory == 4ull << 30 && c.rules[0].max_memory == 4ull << 30 && c.rules[0].max_cpus == 10,
	   "a byte order mark, 4GB and 4GiB as the policy takes them (%s)", eb);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ok(conf(bad[i].text, &c, eb, sizeof(eb)) < 0 && strstr(eb, bad[i].msg), "refused: %s -> %s",
		   bad[i].msg, eb);
	ok(conf("[User:0]\nMaxSessions=3\n[Group:0]\n[User:root]\n", &c, eb, sizeof(eb)) < 0 &&
		   strstr(eb, ":4: uid 0 has a section already ([User:0])"),
	   "a second section for one uid is refused: %s", eb);
	ok(conf_parse(&c, "[Service]\n\0PoolSize=1\n", 21, "t.conf", eb, sizeof(eb)) < 0 && strstr(eb, "NUL"),
	   "a NUL byte in the file is refused");
	{
		char text[8192] = "";

		/* Each uid its own section (a second for one uid is refused). */
		for (int i = 0; i <= CONF_MAX_RULES; i++)
			snprintf(text + strlen(text), sizeof(text) - strlen(text), "[User:%d]\n", 100000 + i);
		ok(conf(text, &c, eb, sizeof(eb)) < 0 && strstr(eb, "sections"), "more than %d sections refused",
		   CONF_MAX_RULES);
	}
	{
		/* What --check-config prints parses back to the same. */
		struct conf c2;
		char *out = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&out, &len);

		conf("[Service]\nPoolSize=3\nHostUidRange=600000-600009\n[Default]\nMaxMemory=1G\n[User:0]\nMaxCPUs=8\n",
		     &c, eb, sizeof(eb));
		conf_print(&c, f);
		fclose(f);
		ok(conf(out, &c2, eb, sizeof(eb)) == 0 && c2.pool_size == 3 && c2.uid_first == 600000 &&
			   c2.uid_count == 10 && c2.dflt.max_memory == 1ull << 30 && c2.n_rules == 1 &&
			   c2.rules[0].max_cpus == 8,
		   "conf_print parses back (%s)", eb);
		free(out);
	}
}

/* Another thread's ids, watched while the loop's thread checks: the check
 * takes the client's ids in its own thread only. */
static atomic_bool watch_stop;
static atomic_long watch_seen_other, watch_polls;

static void *watch_ids(void *arg)
{
	(void)arg;
	while (!atomic_load(&watch_stop)) {
		uid_t r, e, s;

		/* raw: glibc's getresuid reads the calling thread's ids too,
		 * but say so */
		if (syscall(SYS_getresuid, &r, &e, &s) == 0 && (r || e || s))
			atomic_fetch_add(&watch_seen_other, 1);
		atomic_fetch_add(&watch_polls, 1);
	}
	return NULL;
}

static bool ids_are_root(void)
{
	uid_t r, e, s;
	gid_t gr, ge, gs;

	return getresuid(&r, &e, &s) == 0 && getresgid(&gr, &ge, &gs) == 0 && !r && !e && !s && !gr && !ge && !gs;
}

/* This thread's effective capabilities are its permitted ones. */
static bool effective_caps_whole(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	return syscall(SYS_capget, &hdr, d) == 0 && d[0].effective == d[0].permitted && d[1].effective == d[1].permitted &&
	       d[0].permitted;
}

static void test_deputy(void)
{
	char dir[] = "/tmp/nsbox-deputy-XXXXXX", f640[64], ws[64], errbuf[256];
	gid_t before[64], after[64], g4242 = 4242;
	int nb, na, dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), fd_file, fd_ws, code;
	size_t failed = 99;
	pthread_t th;

	if (geteuid() != 0) {
		ok(1, "# SKIP deputy_check: needs root (it takes a client's ids)");
		return;
	}
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	chmod(dir, 0755);
	snprintf(f640, sizeof(f640), "%s/group-file", dir);
	snprintf(ws, sizeof(ws), "%s/ws", dir);
	close(open(f640, O_CREAT | O_WRONLY, 0640));
	chown(f640, 0, 4242);
	chmod(f640, 0640);
	mkdir(ws, 0700);
	chown(ws, 65534, 65534);
	fd_file = open(f640, O_PATH);
	fd_ws = open(ws, O_PATH);
	nb = getgroups(64, before);

	/* uid 65534 without group 4242 may not read the file; with it, it may */
	code = deputy_check(&(struct deputy_obj){ fd_file, false }, 1, 65534, 65534, NULL, 0, &failed, errbuf,
			    sizeof(errbuf));
	ok(code == EACCES && failed == 0 && strstr(errbuf, "uid 65534 may not read it"), "deputy: refused (%d, %s)",
	   code, errbuf);
	failed = 99;
	code = deputy_check(&(struct deputy_obj){ fd_file, false }, 1, 65534, 65534, &g4242, 1, &failed, errbuf,
			    sizeof(errbuf));
	ok(code == 0, "deputy: a supplementary group counts (%d)", code);
	code = deputy_check(&(struct deputy_obj){ fd_file, true }, 1, 65534, 65534, &g4242, 1, &failed, errbuf,
			    sizeof(errbuf));
	ok(code == EACCES && failed == 0 && strstr(errbuf, "may not write"), "deputy: read, not write (%s)", errbuf);
	/* the first object refused is named: the workspace passes, the file not */
	code = deputy_check((struct deputy_obj[]){ { fd_ws, true }, { fd_file, false } }, 2, 65534, 65534, NULL, 0,
			    &failed, errbuf, sizeof(errbuf));
	ok(code == EACCES && failed == 1, "deputy: the second of two refused (%d, %zu)", code, failed);

	/* Ours back after each, and never another thread's meanwhile. */
	pthread_create(&th, NULL, watch_ids, NULL);
	while (atomic_load(&watch_polls) == 0)
		;
	for (int i = 0; i < 2000; i++)
		deputy_check(&(struct deputy_obj){ fd_file, false }, 1, 65534, 65534, NULL, 0, &failed, errbuf,
			     sizeof(errbuf));
	atomic_store(&watch_stop, true);
	pthread_join(th, NULL);
	ok(atomic_load(&watch_seen_other) == 0, "deputy: another thread kept root's ids (%ld of %ld looks were not)",
	   (long)atomic_load(&watch_seen_other), (long)atomic_load(&watch_polls));
	na = getgroups(64, after);
	ok(ids_are_root() && effective_caps_whole() && na == nb &&
		   (nb <= 0 || !memcmp(before, after, (size_t)nb * sizeof(gid_t))),
	   "deputy: the checking thread's uids, gids, groups and capabilities are root's again");
	ok(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == dumpable, "deputy: dumpable as before (%d)", dumpable);
	/* With SECBIT_NO_SETUID_FIXUP (a unit's SecureBits=, say) a change of
	 * uid keeps the capabilities: CAP_DAC_OVERRIDE would pass everything. */
	{
		int sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);

		if (sb >= 0 && prctl(PR_SET_SECUREBITS, sb | SECBIT_NO_SETUID_FIXUP, 0, 0, 0) == 0) {
			code = deputy_check(&(struct deputy_obj){ fd_file, false }, 1, 65534, 65534, NULL, 0, &failed,
					    errbuf, sizeof(errbuf));
			ok(code == EACCES, "deputy: refused under SECBIT_NO_SETUID_FIXUP too (%d, %s)", code, errbuf);
			ok(ids_are_root() && effective_caps_whole(),
			   "deputy: root's ids and capabilities back under SECBIT_NO_SETUID_FIXUP");
			prctl(PR_SET_SECUREBITS, sb, 0, 0, 0);
		} else {
			ok(0, "PR_SET_SECUREBITS: %s", strerror(errno));
		}
	}
	close(fd_file);
	close(fd_ws);
	unlink(f640);
	rmdir(ws);
	rmdir(dir);
}

/* Each profile's limits, as nsboxd reads them to judge a quota before it
 * makes a sandbox: from the policy's own text. */
static void test_profile_limits(void)
{
	static const struct { const char *name; uint64_t mem, pids; double cpus; } want[] = {
		{ "default", 512ULL << 20, 128, 1 }, { "strict", 256ULL << 20, 32, 0.5 },
		{ "permissive", 2ULL << 30, 1024, 2 },
	};
	uint64_t mem, pids;
	double cpus;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		nsbox_policy_t *p = NULL;
		char *text = NULL;
		int r = nsbox_policy_new(want[i].name, &p, NULL) < 0 || !(text = nsbox_policy_to_string(p)) ? -1 :
			conf_policy_limits(text, &mem, &pids, &cpus);

		ok(r == 0 && mem == want[i].mem && pids == want[i].pids && cpus == want[i].cpus,
		   "profile %s: its limits read from its text", want[i].name);
		if (p && nsbox_policy_set(p, "Limits", "Memory", "infinity", NULL) == 0) {
			nsbox_free(text);
			text = nsbox_policy_to_string(p);
			ok(text && conf_policy_limits(text, &mem, &pids, &cpus) == 0 && mem == 0,
			   "profile %s with Memory=infinity: 0", want[i].name);
		}
		nsbox_free(text);
		nsbox_policy_free(p);
	}
	mem = 7;
	ok(conf_policy_limits("[Limits]\nMemory=1G\nPids=3\n", &mem, &pids, &cpus) < 0 && mem == 7,
	   "a text without CPUs=: refused, nothing written");
	ok(conf_policy_limits("[Other]\nMemory=1G\nPids=3\nCPUs=1\n", &mem, &pids, &cpus) < 0,
	   "keys outside [Limits] are not limits");
}

int main(void)
{
	test_decode();
	test_open();
	json_decref(last_msg);
	test_conf();
	test_profile_limits();
	test_deputy();
	tap_done();
}
