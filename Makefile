# nsbox build.  GNU make.  `make` builds everything into build/; the tools run
# from the tree (build/nsbox).  See README.md for targets.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
LIBEXECDIR ?= $(PREFIX)/libexec/nsbox
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
SBINDIR ?= $(PREFIX)/sbin
DATADIR ?= $(PREFIX)/share
UNITDIR ?= $(PREFIX)/lib/systemd/system
PYTHON ?= /usr/bin/python3.11

CC ?= cc
B ?= build
PKGS := libseccomp libcap jansson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
PY_CFLAGS := $(shell pkg-config --cflags python3-embed)
PY_LIBS := $(shell pkg-config --libs python3-embed)
# The runner links Debian's libpython3.11 statically (libpython3.11.a, from
# libpython3.11-dev) into a position-dependent executable that exports
# CPython's symbols to lib-dynload's extension modules (runner/exports.list):
# how Debian builds /usr/bin/python3.11 itself.  Against libpython3.11.so every start paid
# ~27,000 relocations and ran the interpreter's PIC code: ~10% of a whole
# `print(1)` here (README, "Design notes").  Sanitizer builds keep the
# shared library.
PY_STATIC := $(shell $(PYTHON) -c 'import sysconfig as s; v=s.get_config_var; print(v("LIBPL") + "/" + v("LIBRARY"), v("MODLIBS"), v("LIBS"), v("SYSLIBS"))')

WARN := -Wall -Wextra -Werror -Wshadow -Werror=missing-prototypes -Wformat=2 -Werror=format-nonliteral \
	-Wno-missing-field-initializers -Wno-format-truncation
CFLAGS ?= -O2 -g
LDFLAGS ?= -Wl,--as-needed
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
# The layers, lowest first (README, "Layout"; scripts/check-layers.py checks
# that no file includes from a layer above its own: make check-layers).
LAYERS := base proto policy egress jail runner helper host lib
LAYER_INC := $(addprefix -I,$(LAYERS))
ALL_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) -fPIC -D_GNU_SOURCE -Iinclude $(LAYER_INC) -I$(B)/gen $(PKG_CFLAGS) \
	-DNSBOX_LIBEXECDIR='"$(LIBEXECDIR)"' -MMD -MP

# The core: everything but front ends and the runner binary's own code.
CORE_SRCS := $(wildcard base/*.c proto/*.c policy/*.c egress/*.c jail/*.c host/*.c lib/*.c) helper/client.c helper/locate.c
CORE_OBJS := $(CORE_SRCS:%.c=$(B)/obj/%.o)
CLI_SRCS := $(wildcard cli/*.c)
CLI_OBJS := $(CLI_SRCS:%.c=$(B)/obj/%.o)
# The CLI alone uses libedit (BSD licence; Debian's libedit-dev): line
# editing, history and completion for nsbox python's REPL.  It is opened
# with dlopen when the REPL starts (cli/python.c, edit_open): linked, its
# libraries cost every nsbox start.
CLI_LIBS :=
# Front ends see the public header and their own, nothing of the core
# (scripts/check-layers.py says so too).
FRONT_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) -fPIC -D_GNU_SOURCE -Iinclude $(PKG_CFLAGS) -MMD -MP
# nsboxd, the service (service/, nsboxd(8)): libnsbox's public API, the
# service protocol (proto/svc.c) and libsystemd (sd_listen_fds, sd_notify).
SVC_SRCS := $(wildcard service/*.c)
SVC_OBJS := $(SVC_SRCS:%.c=$(B)/obj/%.o)
# nsbox-runner: the sandbox side (runner/) and, in the same binary, libnsbox's
# helper process (helper/helper.c), which forks the runner's initialised CPython.
RUNNER_SRCS := $(wildcard runner/*.c) helper/helper.c helper/main.c
RUNNER_OBJS := $(RUNNER_SRCS:%.c=$(B)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/test-*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)
PROBE_SRCS := $(wildcard tests/probe/*.c tests/escape/*.c)
PROBE_BINS := $(PROBE_SRCS:tests/%.c=$(B)/tests/%)
# Preload shims for the tests (tests/shim/*.c -> build/tests/shim/*.so).
SHIM_SRCS := $(wildcard tests/shim/*.c)
SHIM_LIBS := $(SHIM_SRCS:tests/%.c=$(B)/tests/%.so)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz-*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(B)/fuzz/%)

TARGETS := $(B)/libnsbox-core.a $(B)/nsbox $(B)/nsboxd $(B)/nsbox-rootfs $(B)/rootfs/python.version \
	$(B)/rootfs/runner.packages \
	$(patsubst rootfs/%,$(B)/rootfs/%,$(wildcard rootfs/*.tree))
ifneq ($(RUNNER_SRCS),)
TARGETS += $(B)/nsbox-runner
endif
# libnsbox (include/nsbox.h, lib/api.c), its static archive, pkg-config
# file and the C example agent host.
# The version, set here only: nsbox_version() (api.c gets it as
# -DNSBOX_VERSION), `nsbox --version`, the man pages' .TH lines (generated
# into $(B)/man), nsbox.pc; python/nsbox/_version.py is checked against it
# (tests/integ/test_version.py; `make sync-version` rewrites it).
NSBOX_VERSION := 0.5.0
MAN_SRCS := $(wildcard man/*.[1-8])
MAN_GEN := $(MAN_SRCS:man/%=$(B)/man/%)
LIB_TARGETS := $(B)/libnsbox.so.0 $(B)/libnsbox.so $(B)/libnsbox.a $(B)/nsbox.pc
TARGETS += $(LIB_TARGETS) $(B)/examples/agent

.PHONY: soak all clean check check-unit check-integ check-vm bench fuzz fuzz-bins install deps man check-valgrind install-lib \
	check-layers check-format sync-version uninstall
all: $(TARGETS) $(UNIT_BINS) $(PROBE_BINS) $(SHIM_LIBS) $(MAN_GEN)

$(B)/obj/runner/%.o: runner/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(PY_CFLAGS) -I$(B)/gen -c -o $@ $<
$(B)/obj/helper/helper.o $(B)/obj/helper/main.o: $(B)/obj/helper/%.o: helper/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(PY_CFLAGS) -I$(B)/gen -c -o $@ $<
# The runner's Python half, embedded as a C string (ASCII only).
$(B)/obj/runner/py.o: $(B)/gen/runner_py.h
$(B)/gen/runner_py.h: runner/runner.py
	@mkdir -p $(dir $@)
	$(PYTHON) -c 'import json,sys; s=open(sys.argv[1],encoding="ascii").read(); print("static const char nsbox_runner_py[] = " + json.dumps(s) + ";")' $< >$@.tmp && mv $@.tmp $@
# ... and its code object, marshalled by the Python the runner embeds.
$(B)/obj/runner/py.o: $(B)/gen/runner_pyc.h
$(B)/gen/runner_pyc.h: runner/runner.py
	@mkdir -p $(dir $@)
	$(PYTHON) -c 'import sys,marshal,importlib.util as u; c=marshal.dumps(compile(open(sys.argv[1],encoding="ascii").read(),"<nsbox-runner>","exec",dont_inherit=True,optimize=0)); print("static const long nsbox_runner_pyc_magic = %d;\nstatic const unsigned char nsbox_runner_pyc[] = {%s};" % (int.from_bytes(u.MAGIC_NUMBER,"little"), ",".join(map(str,c))))' $< >$@.tmp && mv $@.tmp $@
$(B)/obj/cli/%.o: cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(FRONT_CFLAGS) -Icli -Ibase -c -o $@ $<
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The seccomp filter is compiled once at build time (scripts/gen-seccomp.c).
GEN_SECCOMP_SRCS := scripts/gen-seccomp.c base/error.c base/util.c policy/policy.c policy/netrule.c \
	policy/seccomp-rules.c policy/seccomp-compile.c
$(B)/gen-seccomp: $(GEN_SECCOMP_SRCS) policy/seccomp-rules.h policy/policy.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O1 -D_GNU_SOURCE -Ibase -Ipolicy -o $@ $(GEN_SECCOMP_SRCS) $(PKG_LIBS)
$(B)/gen/seccomp-bpf.gen.h: $(B)/gen-seccomp
	@mkdir -p $(dir $@)
	$(B)/gen-seccomp > $@.tmp && mv $@.tmp $@
$(B)/obj/policy/seccomp-prebuilt.o: $(B)/gen/seccomp-bpf.gen.h

$(B)/libnsbox-core.a: $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(B)/nsbox: $(CLI_OBJS) $(B)/libnsbox-core.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(B)/libnsbox-core.a $(PKG_LIBS) $(CLI_LIBS)
$(B)/obj/service/%.o: ALL_CFLAGS += $(shell pkg-config --cflags libsystemd)
$(B)/nsboxd: $(SVC_OBJS) $(B)/libnsbox-core.a
	$(CC) $(LDFLAGS) -o $@ $(SVC_OBJS) $(B)/libnsbox-core.a $(PKG_LIBS) $(shell pkg-config --libs libsystemd) -lm
# Debug information goes to nsbox-runner.debug beside it (found through
# .gnu_debuglink by gdb, valgrind and addr2line where the runner runs from
# its file; the symbol table stays, for the helper, which runs from a
# memfd).  Sanitizer builds keep it all inline for their reports.
# Bound at load (-z now): the helper's template has every symbol resolved
# before it forks, where lazy binding made each sandbox resolve (and write
# to the GOT pages of) the ones its own code first calls.
$(B)/nsbox-runner: $(RUNNER_OBJS) $(B)/libnsbox-core.a runner/exports.list
	$(CC) $(LDFLAGS) -Wl,-z,now -o $@$(if $(SANITIZE),,.full) $(RUNNER_OBJS) $(B)/libnsbox-core.a $(PKG_LIBS) \
		$(if $(SANITIZE),$(PY_LIBS),-no-pie -Wl,--dynamic-list=runner/exports.list $(PY_STATIC))
ifeq ($(SANITIZE),)
	objcopy --only-keep-debug $@.full $@.debug
	objcopy --strip-debug --add-gnu-debuglink=$@.debug $@.full $@
	rm -f $@.full
endif
# libnsbox.so: only nsbox_* is exported (hidden visibility in the API
# object, and the version script for the core objects linked in with it).
$(B)/obj/lib/api.o: ALL_CFLAGS += -fvisibility=hidden
$(B)/obj/lib/hostinfo.o $(B)/obj/lib/handoff.o $(B)/obj/lib/rootfs.o: ALL_CFLAGS += -fvisibility=hidden
# A `#define NSBOX_VERSION` left in api.c that disagrees is a build error
# (macro redefined, -Werror).
$(B)/obj/lib/api.o: ALL_CFLAGS += -DNSBOX_VERSION='"$(NSBOX_VERSION)"'
$(B)/obj/lib/api.o: Makefile
# The Debian version of the libpython3.11 the runner links: a built tree
# must carry the same (lib/rootfs.c checks its info file).
PY_DEBVERSION := $(shell dpkg-query -W -f='$${Version}' libpython3.11-dev 2>/dev/null)
$(B)/obj/lib/rootfs.o: ALL_CFLAGS += -DNSBOX_PY_DEBVERSION='"$(PY_DEBVERSION)"'
$(B)/obj/lib/rootfs.o: Makefile
$(B)/libnsbox.so.0: $(CORE_OBJS) lib/libnsbox.sym
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libnsbox.so.0 -Wl,--version-script=lib/libnsbox.sym -Wl,-z,defs \
		-o $@ $(CORE_OBJS) $(PKG_LIBS)
$(B)/libnsbox.so: $(B)/libnsbox.so.0
	ln -sf libnsbox.so.0 $@
$(B)/libnsbox.a: $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(B)/nsbox.pc: Makefile
	@mkdir -p $(dir $@)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' 'Name: nsbox' \
		'Description: run Python in kernel-isolated sandboxes (libnsbox(3))' 'Version: $(NSBOX_VERSION)' \
		'Requires.private: $(PKGS)' 'Libs: -L$${libdir} -lnsbox' 'Libs.private: -lpthread' \
		'Cflags: -I$${includedir}' > $@
# The API tests and the examples link the shared library, as a host does.
$(B)/tests/test-hostinfo: tests/unit/test-hostinfo.c $(B)/libnsbox.so include/nsbox.h tests/unit/tap.h
	@mkdir -p $(dir $@)
	$(CC) $(FRONT_CFLAGS) $(LDFLAGS) -o $@ $< -L$(B) -lnsbox -Wl,-rpath,'$$ORIGIN/..'
$(B)/tests/test-api: tests/unit/test-api.c $(B)/libnsbox.so include/nsbox.h tests/unit/tap.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< -L$(B) -lnsbox -Wl,-rpath,'$$ORIGIN/..' -lpthread
$(B)/examples/%: examples/%.c $(B)/libnsbox.so include/nsbox.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(CFLAGS) -Iinclude $(LDFLAGS) -o $@ $< -L$(B) -lnsbox -Wl,-rpath,'$$ORIGIN/..'
# The front end's argument parsing, over the shared library like the CLI's
# own view of it: the public header and cli/ only.
$(B)/tests/test-args: tests/unit/test-args.c cli/args.c cli/args.h cli/cli.h $(B)/libnsbox.so include/nsbox.h \
		tests/unit/tap.h
	@mkdir -p $(dir $@)
	$(CC) $(FRONT_CFLAGS) -Icli $(LDFLAGS) -o $@ $< cli/args.c -L$(B) -lnsbox -Wl,-rpath,'$$ORIGIN/..'
# nsboxd's configuration parser is service/, not the core: linked in.
$(B)/tests/test-svc: tests/unit/test-svc.c service/config.c service/config.h service/deputy.c service/deputy.h \
		$(B)/libnsbox-core.a tests/unit/tap.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Iservice $(LDFLAGS) -o $@ $< service/config.c service/deputy.c $(B)/libnsbox-core.a \
		$(PKG_LIBS) -lm -pthread
$(B)/tests/test-%: tests/unit/test-%.c $(B)/libnsbox-core.a tests/unit/tap.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libnsbox-core.a $(PKG_LIBS)
$(B)/tests/shim/%.so: tests/shim/%.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(ALL_CFLAGS)) -shared -o $@ $< -ldl
# Probes run inside the sandbox: static where possible so they need nothing from /usr.
# Probes and hostile test programs are payloads, not nsbox: never sanitized
# (ASan's runtime can't work under the sandbox's seccomp filter).
$(B)/tests/%: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(ALL_CFLAGS)) -o $@ $<

FUZZ_CC ?= clang
# The core's sources built whole, lib/api.c with its version as in its own rule.
FUZZ_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -DNSBOX_VERSION='"$(NSBOX_VERSION)"' \
	-Iinclude $(LAYER_INC) -I$(B)/gen $(PKG_CFLAGS)
$(B)/fuzz/fuzz-%: tests/fuzz/fuzz-%.c $(CORE_SRCS) $(B)/gen/seccomp-bpf.gen.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(CORE_SRCS) $(PKG_LIBS)
# nsboxd's configuration parser is service/, not the core: built in.
$(B)/fuzz/fuzz-svc: tests/fuzz/fuzz-svc.c service/config.c service/config.h $(CORE_SRCS) $(B)/gen/seccomp-bpf.gen.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -Iservice -o $@ $< service/config.c $(CORE_SRCS) $(PKG_LIBS) -lm
FUZZ_TIME ?= 20
fuzz-bins: $(FUZZ_BINS)
fuzz: $(FUZZ_BINS)
	@set -e; for f in $(FUZZ_BINS); do n=$$(basename $$f); mkdir -p $(B)/fuzz/corpus-$$n; \
		echo "== $$n ($(FUZZ_TIME) s)"; \
		$$f -max_total_time=$(FUZZ_TIME) -timeout=5 $(B)/fuzz/corpus-$$n tests/fuzz/corpus/$${n#fuzz-} >$(B)/fuzz/$$n.log 2>&1 \
		|| { tail -40 $(B)/fuzz/$$n.log; exit 1; }; tail -1 $(B)/fuzz/$$n.log; done

# Man pages with the version in their .TH line ("nsbox X.Y.Z" as the
# source, man-pages(7)), whatever the checked-in ones say there.
$(B)/man/%: man/% Makefile
	@mkdir -p $(dir $@)
	sed -E '/^\.TH /s/^(\.TH +[^ ]+ +[^ ]+ +("[^"]*"|[^ ]+) +)("[^"]*"|[^ ]+)/\1"nsbox $(NSBOX_VERSION)"/' $< >$@.tmp
	grep -q '^\.TH .*"nsbox $(NSBOX_VERSION)"' $@.tmp && mv $@.tmp $@
man: $(MAN_GEN)
# Rewrite the checked-in copies of the version from NSBOX_VERSION.
sync-version:
	printf '%s\n__version__ = "%s"\n' '# Written by make sync-version from NSBOX_VERSION in the Makefile: change it there.' \
		'$(NSBOX_VERSION)' >python/nsbox/_version.py

check: all check-layers check-format check-unit $(if $(SANITIZE),,check-valgrind) check-integ
# No file includes from a layer above its own; front ends only nsbox.h.
check-layers:
	$(PYTHON) scripts/check-layers.py
# clang-format (Debian's 14) on the files listed in .clang-format-files:
# those already formatted; the list grows as files are.
CLANG_FORMAT ?= clang-format
check-format:
	$(CLANG_FORMAT) --dry-run -Werror $$(grep -v '^#' .clang-format-files)
check-unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done
# memcheck of the API tests; the sandboxes themselves are not followed.
check-valgrind: $(B)/tests/test-api
	NSBOX_UNDER_VALGRIND=1 valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--error-exitcode=1 --trace-children=no $(B)/tests/test-api
check-integ: all
	NSBOX_BUILD=$(CURDIR)/$(B) NSBOX_SANITIZE=$(SANITIZE) scripts/run-integ.sh
check-vm: all
	tests/vm/run-vm.sh
# The kernel's cost of loading the seccomp filter: libseccomp's program against nsbox's.
$(B)/seccomp-load: bench/seccomp-load.c $(B)/libnsbox-core.a
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< $(B)/libnsbox-core.a $(PKG_LIBS)
bench: all $(B)/seccomp-load
	bench/run.sh

# 20,000 sessions opened, used and closed through one nsboxd; its fds and
# memory must be back where they started (nsboxd(8)).  Minutes: not in check.
SOAK ?= 20000
soak: all
	NSBOXD_SOAK=$(SOAK) NSBOX_BUILD=$(abspath $(B)) /usr/bin/python3.11 -m pytest -q -p no:cacheprovider \
		tests/integ/test_nsboxd.py -k soak

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 0755 $(B)/nsbox $(DESTDIR)$(BINDIR)/nsbox
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(B)/nsboxd $(DESTDIR)$(SBINDIR)/nsboxd
	install -m 0644 service/nsboxd.socket $(DESTDIR)$(UNITDIR)/nsboxd.socket
	sed 's|@BINDIR@|$(SBINDIR)|' service/nsboxd.service > $(DESTDIR)$(UNITDIR)/nsboxd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/nsboxd.service
	if [ -f $(B)/nsbox-runner ]; then install -m 0755 $(B)/nsbox-runner $(DESTDIR)$(LIBEXECDIR)/nsbox-runner; fi
	if [ -f $(B)/nsbox-runner.debug ]; then install -m 0644 $(B)/nsbox-runner.debug $(DESTDIR)$(LIBEXECDIR)/nsbox-runner.debug; fi
	for m in $(MAN_GEN); do s=$${m##*.}; install -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/; done
	install -d $(DESTDIR)$(DATADIR)/nsbox/rootfs
	sed 's|@DATADIR@|$(DATADIR)|' rootfs/nsbox-rootfs > $(DESTDIR)$(LIBEXECDIR)/nsbox-rootfs
	chmod 0755 $(DESTDIR)$(LIBEXECDIR)/nsbox-rootfs
	install -m 0644 rootfs/*.tree $(B)/rootfs/python.version $(B)/rootfs/runner.packages \
		$(DESTDIR)$(DATADIR)/nsbox/rootfs/

install: install-lib
install-lib: $(LIB_TARGETS) $(B)/man/libnsbox.3
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man3
	install -m 0755 $(B)/libnsbox.so.0 $(DESTDIR)$(LIBDIR)/libnsbox.so.0
	ln -sf libnsbox.so.0 $(DESTDIR)$(LIBDIR)/libnsbox.so
	install -m 0644 $(B)/libnsbox.a $(DESTDIR)$(LIBDIR)/libnsbox.a
	install -m 0644 include/nsbox.h $(DESTDIR)$(INCLUDEDIR)/nsbox.h
	install -m 0644 $(B)/nsbox.pc $(DESTDIR)$(LIBDIR)/pkgconfig/nsbox.pc
	install -m 0644 $(B)/man/libnsbox.3 $(DESTDIR)$(MANDIR)/man3/libnsbox.3

# What install put in place (the units stopped first when systemd runs).
uninstall:
	-systemctl disable --now nsboxd.socket nsboxd.service 2>/dev/null
	rm -f $(DESTDIR)$(BINDIR)/nsbox $(DESTDIR)$(SBINDIR)/nsboxd $(DESTDIR)$(UNITDIR)/nsboxd.socket \
		$(DESTDIR)$(UNITDIR)/nsboxd.service $(DESTDIR)$(LIBEXECDIR)/nsbox-runner $(DESTDIR)$(LIBEXECDIR)/nsbox-runner.debug \
		$(DESTDIR)$(LIBDIR)/libnsbox.so.0 $(DESTDIR)$(LIBDIR)/libnsbox.so $(DESTDIR)$(LIBDIR)/libnsbox.a \
		$(DESTDIR)$(INCLUDEDIR)/nsbox.h $(DESTDIR)$(LIBDIR)/pkgconfig/nsbox.pc $(DESTDIR)$(MANDIR)/man3/libnsbox.3
	for m in man/*.[1-8]; do s=$${m##*.}; rm -f $(DESTDIR)$(MANDIR)/man$$s/$${m##*/}; done
	rm -f $(DESTDIR)$(LIBEXECDIR)/nsbox-rootfs
	rm -rf $(DESTDIR)$(DATADIR)/nsbox/rootfs
	-rmdir $(DESTDIR)$(LIBEXECDIR)

# Root trees (rootfs/, nsbox rootfs): the builder beside nsbox, the
# definitions and the Debian version of the libpython3.11 the runner links
# in $(B)/rootfs (a built tree must carry the same one).
$(B)/nsbox-rootfs: rootfs/nsbox-rootfs
	@mkdir -p $(B)
	cp $< $@ && chmod 0755 $@
$(B)/rootfs/%.tree: rootfs/%.tree
	@mkdir -p $(B)/rootfs
	cp $< $@
$(B)/rootfs/python.version: $(B)/nsbox-runner
	@mkdir -p $(B)/rootfs
	printf '%s' '$(PY_DEBVERSION)' >$@.tmp && mv $@.tmp $@
# The Debian packages of the libraries the runner links (NEEDED; apt brings
# their own dependencies), with libpython3.11's whether the runner links it
# statically or not, which a tree must carry too: libc6 is essential,
# libpython3.11 pinned by python.version, the sanitizers' runtimes left out
# (a sanitized runner does not run on a tree), so that a sanitizer build
# finds the same tree.
PY_SHARED := $(shell $(PYTHON) -c 'import sysconfig as s; print(s.get_config_var("LIBDIR") + "/" + s.get_config_var("INSTSONAME"))' 2>/dev/null)
$(B)/rootfs/runner.packages: $(B)/nsbox-runner
	@mkdir -p $(B)/rootfs
	for f in $< $(PY_SHARED); do \
		ldd $$f | awk -v need="$$(readelf -d $$f | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')" \
			'BEGIN { n = split(need, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 } \
			 $$1 in want && /=> \// { print $$3 }'; done | while read -r l; do \
		dpkg -S "$$l" 2>/dev/null || dpkg -S "$$(realpath "$$l")"; done | cut -d: -f1 | tr ',' '\n' | \
		tr -d ' ' | grep -Ev '^(libc6|libpython3\.11|libasan[0-9]*|libubsan[0-9]*|liblsan[0-9]*)$$' | \
		sort -u | tr '\n' ' ' >$@.tmp && mv $@.tmp $@

deps:
	scripts/install-deps.sh

clean:
	rm -rf $(B)

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
