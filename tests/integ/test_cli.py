"""The command line's consistency: --help everywhere, one-line errors with a
"did you mean", validation up front (exit 120, before anything runs), --json
for every outcome, warnings only where they say something, doctor's
verdicts.  nsbox(1) documents each."""
import json
import os
import re
import subprocess

import pytest

from conftest import MODE, NSBOX, run

USAGE = 120


def as_nobody(args, **kw):
    """nsbox as uid 65534 (setpriv when we are root)."""
    pre = [] if os.geteuid() else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    p = subprocess.run(pre + [NSBOX] + args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=kw.get("timeout", 60), cwd="/")
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("args", [["info", "--help"], ["doctor", "--help"], ["policy", "--help"],
                                  ["policy", "show", "--help"], ["policy", "check", "--help"], ["help", "info"],
                                  ["run", "-h"], ["python", "--help"], ["mcp", "--help"]])
def test_help_exits_zero(args):
    rc, out, err = run(args)
    assert rc == 0 and err == "", (rc, err)
    assert out.startswith("usage: nsbox " + (args[1] if args[0] == "help" else args[0]))


def test_help_command_shows_that_commands_help():
    assert run(["help", "run"]) == run(["run", "--help"])
    assert run(["help", "python"])[1] == run(["python", "--help"])[1]
    rc, out, err = run(["help", "nosuch"])
    assert rc == USAGE and "unknown command 'nosuch'" in err


def test_policy_show_help_lists_the_jail_options():
    rc, out, _ = run(["policy", "show", "--help"])
    assert rc == 0 and "--memory SIZE" in out


def test_extra_arguments_are_named():
    rc, out, err = run(["info", "bogus"])
    assert rc == USAGE and err == "nsbox info: unexpected argument 'bogus' (see nsbox info --help)\n"


def test_no_command_is_a_usage_error():
    # An empty name was a setup failure (125, "nsbox_run: no command given").
    for argv in (["run", "--"], ["run", "--", ""]):
        rc, out, err = run(argv)
        assert rc == USAGE and err.startswith("nsbox run: no command given"), (argv, rc, err)


@pytest.mark.parametrize("cmd,bad,want", [
    (["run"], "--memroy", "--memory"),
    (["run"], "--json-stauts=-", "--json-status"),
    (["python"], "--jsno", "--json"),
    (["python"], "--tol", "--tool"),
    (["policy", "show"], "--hostnme", "--hostname"),
])
def test_unknown_option_is_one_line_with_a_suggestion(cmd, bad, want):
    rc, out, err = run(cmd + [bad, "x", "--", "true"])
    assert rc == USAGE
    assert err.count("\n") == 1, err                   # one line, not the usage
    assert f"unknown option '{bad}'" in err and f"did you mean {want}?" in err
    assert "see nsbox %s --help" % " ".join(cmd) in err


def test_unknown_option_without_a_near_name():
    rc, out, err = run(["run", "--zzqqxxyy", "--", "true"])
    assert rc == USAGE and err == "nsbox run: unknown option '--zzqqxxyy' (see nsbox run --help)\n"


def test_policy_check_reports_every_error(tmp_path):
    f = tmp_path / "bad.policy"
    f.write_text("[Limits]\nMemory=lots\nPids=-1\n[Bogus]\nX=1\nY=2\n[Sandbox]\nnoequals\nUid=abc\n")
    good = tmp_path / "good.policy"
    good.write_text("[Limits]\nMemory=64M\n")
    rc, out, err = run(["policy", "check", str(f), str(good)])
    assert rc == USAGE
    lines = err.splitlines()
    # Four lines wrong (X= and Y= under the unknown section are not
    # reported again), each as FILE:LINE: what.
    assert [ln.split(": ")[0] for ln in lines] == [f"{f}:{n}" for n in (2, 3, 4, 8, 9)], err
    assert "lots" in lines[0] and "[Bogus]" in lines[2] and "abc" in lines[4]
    assert out == f"{good}: ok\n"                     # the next file is still checked


def test_policy_check_many_errors_are_counted(tmp_path):
    f = tmp_path / "many.policy"
    f.write_text("[Limits]\n" + "".join("Memory=bad%d\n" % i for i in range(40)))
    rc, out, err = run(["policy", "check", str(f)])
    assert rc == USAGE
    m = re.search(r"and (\d+) more errors", err)
    assert m and int(m.group(1)) + err.count(": [Limits] Memory=") == 40, err


def test_workspace_must_be_a_directory(tmp_path):
    f = tmp_path / "README.md"
    f.write_text("hi\n")
    for cmd in (["run", "--workspace", str(f), "--", "true"], ["python", "--workspace", str(f), "-c", "1"]):
        rc, out, err = run(cmd)
        assert rc == USAGE and f"--workspace {f}: not a directory" in err, (rc, err)


def test_workspace_must_be_accessible():
    rc, out, err = as_nobody(["run", "--workspace", "/root", "--", "true"])
    assert rc == USAGE, (rc, err)
    assert "--workspace /root: not accessible to uid 65534" in err


def test_json_status_unwritable_fails_before_running(tmp_path):
    rc, out, err = run(["run", "--json-status", str(tmp_path / "no" / "such.json"), "--", "echo", "ran"])
    assert rc == USAGE and out == "" and "--json-status" in err and "No such file" in err


def test_host_files_the_cli_writes_follow_no_link_the_sandbox_planted(tmp_path):
    """--json-status and --display-dir often name a path in the workspace,
    whose symlinks the write-back makes on the host.  The status was
    written by opening the name again after the run, so a link the command
    put there had the host overwrite its target (/etc/shadow as root) in one
    run; a link planted by an earlier run, as the name or as a directory
    above it, sent the status or the displays where it pointed.  Now the
    status file is opened once, before the run, and written through that
    descriptor (a warning says the name was replaced), and no link in
    either path is followed (base/hostpath.h): the run is refused, 120."""
    ws, victim, vdir = tmp_path / "ws", tmp_path / "victim", tmp_path / "vdir"
    ws.mkdir()
    ws.chmod(0o777)
    vdir.mkdir()
    victim.write_text("precious\n")
    st = ws / "status.json"
    # A status file in the workspace is refused now (the sandbox could
    # replace it: test_a_status_file_the_sandbox_may_write_is_refused) ...
    rc, _, err = run(["run", "--workspace", str(ws), "--json-status", str(st), "--", "/bin/sh", "-c",
                      f"rm -f /workspace/status.json && ln -s {victim} /workspace/status.json"])
    assert rc == USAGE and "lies beneath" in err and not os.path.lexists(st), err
    # ... so the link comes from a run that did not ask for one.
    rc, _, err = run(["run", "--workspace", str(ws), "--", "/bin/sh", "-c",
                      f"ln -s {victim} /workspace/status.json"])
    assert rc == 0, err
    assert os.readlink(st) == str(victim), "the write-back made the link"
    assert victim.read_text() == "precious\n"
    # The link is there now: the next run refuses it, and so does a link
    # as a directory above the name.
    os.symlink(vdir, ws / "d")
    for path in (st, ws / "d" / "status.json"):
        rc, out, err = run(["run", "--json-status", str(path), "--", "echo", "ran"])
        assert rc == USAGE and out == "" and "a symbolic link in the path (not followed" in err, (path, rc, err)
    assert victim.read_text() == "precious\n" and os.listdir(vdir) == []
    for disp in (ws / "d", ws / "d" / "shown"):
        rc, out, err = run(["python", "--display-dir", str(disp), "-c",
                            "display({'text/plain': 'x'}, raw=True); open('/out/a.txt', 'w').write('y')"])
        assert rc == USAGE and "--display-dir" in err and "a symbolic link in the path" in err, (disp, rc, err)
    assert os.listdir(vdir) == []
    # Without links, both work as before.
    rc, out, err = run(["run", "--json-status", str(tmp_path / "s.json"), "--", "true"])
    assert rc == 0 and json.loads((tmp_path / "s.json").read_text())["exit_code"] == 0, err


def test_a_policy_file_the_sandbox_may_write_is_refused(tmp_path):
    """A policy file kept in the workspace it grants (nsbox python --policy
    proj/nsbox.policy --workspace proj), or under a writable bind, was read
    as it was: the sandbox rewrote it, and the next run of the same command
    had the sandbox's policy, a rw bind of any host directory included.
    Refused now, whichever path reaches it; outside, or under a read-only
    bind, it works as before."""
    proj, victim = tmp_path / "proj", tmp_path / "victim"
    (proj / "sub").mkdir(parents=True)
    victim.mkdir()
    proj.chmod(0o777)
    rc, text, err = run(["policy", "show", "--policy", "default"])
    assert rc == 0, err
    for pol in (proj / "nsbox.policy", proj / "sub" / "nsbox.policy"):
        pol.write_text(text)
        for argv in (["python", "--workspace", str(proj), "--policy", str(pol), "-c", "print('ran')"],
                     ["run", "--workspace", str(tmp_path / "proj" / "." / "sub" / ".."), "--policy", str(pol),
                      "--", "echo", "ran"],
                     ["run", "--bind", f"{proj}:/data", "--policy", str(pol), "--", "echo", "ran"]):
            rc, out, err = run(argv)
            assert rc == USAGE and "ran" not in out, (argv, rc, out, err)
            assert "holds the policy file" in err and "could rewrite the policy" in err, err
    # The attack this stops: the sandbox adds a bind of a host directory.
    pol = proj / "nsbox.policy"
    pol.write_text(text.replace("[Filesystem]", f"[Filesystem]\nBind={victim}:/victim", 1))
    rc, out, err = run(["python", "--workspace", str(proj), "--policy", str(pol), "-c",
                        "open('/victim/x', 'w').write('x')"])
    assert rc == USAGE and os.listdir(victim) == [], (rc, err)
    # Reached through a link on the way in the workspace (the sandbox could
    # replace proj/lnk with a directory of its own, and a policy in it).
    (tmp_path / "pols").mkdir()
    (tmp_path / "pols" / "p.policy").write_text(text)
    (proj / "lnk").symlink_to(tmp_path / "pols")
    rc, out, err = run(["python", "--workspace", str(proj), "--policy", str(proj / "lnk" / "p.policy"), "-c",
                        "print('ran')"])
    assert rc == USAGE and "holds the policy file" in err, (rc, out, err)
    # Outside the workspace, or under a read-only bind: as before.
    outside = tmp_path / "outside.policy"
    outside.write_text(text)
    rc, out, err = run(["python", "--workspace", str(proj), "--policy", str(outside), "-c", "print('ran')"])
    assert rc == 0 and out == "ran\n", err
    rc, out, err = run(["run", "--ro-bind", f"{proj}:/data", "--policy", str(pol), "--", "echo", "ran"])
    assert rc == 0 and out == "ran\n", err


def test_a_tool_program_the_sandbox_may_write_is_refused(tmp_path):
    """A --tool command runs on the host, outside any sandbox.  Kept in the
    workspace (--tool t=proj/tool.sh --workspace proj), the code inside
    rewrote it and called the tool: with a live workspace its text ran on
    the host in the same run (as root, for a root nsbox); bounded, in the
    next.  The command's program (its first word, as found through PATH)
    beneath the workspace or a writable bind is refused, nsbox python and
    nsbox mcp alike (an --mcp-server's too); elsewhere it works as before."""
    proj, ran = tmp_path / "proj", tmp_path / "host-ran"
    proj.mkdir()
    proj.chmod(0o777)
    tool = proj / "tool.sh"
    tool.write_text("#!/bin/sh\ncat >/dev/null; echo 1\n")
    tool.chmod(0o755)
    code = ("open('/workspace/tool.sh', 'w').write('#!/bin/sh\\ncat >/dev/null; touch %s; echo 1\\n')\n"
            "print(t())" % ran)
    for argv in (["python", "--workspace", str(proj), "--workspace-size", "infinity", "--tool", f"t={tool}",
                  "-c", code],
                 ["python", "--workspace", str(proj), "--tool", f"t={tool} --flag", "-c", code],
                 ["python", "--bind", f"{tmp_path}:/data", "--tool", f"t={tool}", "-c", "print(t())"],
                 ["mcp", "--workspace", str(proj), "--tool", f"t={tool}"],
                 ["mcp", "--workspace", str(proj), "--mcp-server", f"t={tool}"]):
        rc, out, err = run(argv, input=b"")
        assert rc != 0 and " t: " in err and "lies beneath" in err and "could rewrite it" in err, (argv, rc, err)
        assert not ran.exists(), argv
    # Through PATH too.
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{proj}:{env_path}"
    try:
        rc, out, err = run(["python", "--workspace", str(proj), "--tool", "t=tool.sh", "-c", "print(t())"])
    finally:
        os.environ["PATH"] = env_path
    assert rc == USAGE and "lies beneath" in err, (rc, err)
    # A link on the way in the workspace (proj/bin -> a host directory), or a
    # PATH entry sh looks in first there (not made yet), is as much the
    # sandbox's to change: refused too (the real path alone missed both).
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tool2.sh").write_text(tool.read_text())
    (outside / "tool2.sh").chmod(0o755)
    (proj / "bin").symlink_to(outside)
    rc, out, err = run(["python", "--workspace", str(proj), "--tool", f"t={proj}/bin/tool2.sh", "-c", "print(t())"])
    assert rc == USAGE and "lies beneath" in err and "could rewrite it" in err, (rc, err)
    for path, want in ((f"{proj}/sub:{outside}", USAGE), (f"{outside}", 0)):
        os.environ["PATH"] = f"{path}:{env_path}"
        try:
            rc, out, err = run(["python", "--workspace", str(proj), "--tool", "t=tool2.sh", "-c", "print(t())"])
        finally:
            os.environ["PATH"] = env_path
        assert rc == want and ("lies beneath" in err if want else out == "1\n"), (path, rc, err)
    # Outside what the sandbox may write: as before.
    safe = tmp_path / "safe.sh"
    safe.write_text(tool.read_text())
    safe.chmod(0o755)
    rc, out, err = run(["python", "--workspace", str(proj), "--tool", f"t={safe}", "-c", "print(t())"])
    assert rc == 0 and out == "1\n", err


def test_a_status_file_the_sandbox_may_write_is_refused(tmp_path):
    """--json-status is the run's outcome as the caller reads it.  In the
    workspace, the sandbox replaced the file (the write-back renamed its
    own over it) and the caller read exit_code 0 for a command that
    failed; the host wrote the real status into the replaced file, and only
    a warning said so.  A status file beneath the workspace or a writable
    bind is refused (120); elsewhere and "-" as before."""
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o777)
    st = ws / "status.json"
    forge = ("rm -f /workspace/status.json; echo '{\"exit_code\": 0, \"time_limit\": false}' "
             "> /workspace/status.json; exit 3")
    for argv in (["--workspace", str(ws)], ["--workspace", str(ws), "--workspace-size", "infinity"],
                 ["--bind", f"{ws}:/workspace"]):
        rc, _, err = run(["run"] + argv + ["--json-status", str(st), "--", "/bin/sh", "-c", forge])
        assert rc == USAGE and "--json-status" in err and "lies beneath" in err, (argv, rc, err)
        assert not st.exists(), argv
    rc, _, err = run(["run", "--workspace", str(ws), "--json-status", str(tmp_path / "st.json"), "--",
                      "/bin/sh", "-c", forge])
    assert rc == 3 and json.loads((tmp_path / "st.json").read_text())["exit_code"] == 3, err
    rc, out, err = run(["run", "--workspace", str(ws), "--json-status", "-", "--", "/bin/sh", "-c", "exit 4"])
    assert rc == 4 and json.loads(out.strip().splitlines()[-1])["exit_code"] == 4, (out, err)


def test_policy_given_twice_is_refused(tmp_path):
    """The first --policy won and a later one was never loaded or checked:
    `--policy strict --policy /nonexistent` ran strict, status 0.  Every
    other flag lets the later one win; a second --policy is refused, as a
    second --tool of one name is."""
    for args in (["--policy", "strict", "--policy", "/nonexistent"], ["--policy=strict", "--policy=permissive"]):
        rc, out, err = run(["policy", "show"] + args)
        assert rc == USAGE and "--policy given twice" in err, (args, rc, err)
        rc, out, err = run(["run"] + args + ["--", "true"])
        assert rc == USAGE and "--policy given twice" in err, (args, rc, err)
    # After -c, it is the code's argv.  (The default policy: strict needs
    # a cgroup, which pass 3 does not have.)
    rc, out, err = run(["python", "--policy", "default", "-c", "import sys; print(sys.argv)", "--policy", "x"])
    assert rc == 0 and "'--policy', 'x'" in out, err


def test_json_status_fifo_without_a_reader_does_not_hang(tmp_path):
    """It waited for a reader, before anything ran, for ever."""
    fifo = tmp_path / "st"
    os.mkfifo(fifo)
    rc, out, err = run(["run", "--json-status", str(fifo), "--", "echo", "ran"], timeout=20)
    assert rc == USAGE and "a FIFO with no reader" in err and out == "", err


def test_tool_given_twice():
    rc, out, err = run(["python", "--tool", "t=cat", "--tool", "t=cat", "-c", "1"])
    assert rc == USAGE and "--tool t: given twice" in err


@pytest.mark.parametrize("command,word,why", [
    ("no-such-command-xyz --flag", "no-such-command-xyz", "command not found in PATH"),
    ("/etc/passwd", "/etc/passwd", "not an executable file"),
    ("/no/such/tool", "/no/such/tool", "No such file"),
])
def test_tool_command_is_resolved_up_front(command, word, why):
    rc, out, err = run(["python", "--tool", "t=" + command, "-c", "print('ran')"])
    assert rc == USAGE and "ran" not in out
    assert f"--tool t: {word}: {why}" in err, err


def test_mcp_tools_are_checked_alike():
    rc, out, err = run(["mcp", "--tool", "t=no-such-command-xyz"])
    assert rc == USAGE and "--tool t: no-such-command-xyz: command not found in PATH" in err
    rc, out, err = run(["mcp", "--tool", "t=cat", "--tool", "t=cat"])
    assert rc == USAGE and "--tool t: given twice" in err


def test_tool_shell_words_are_accepted():
    rc, out, err = run(["python", "--tool", "a=exec cat", "--tool", "b=(cat)", "--tool", "c=X=1 cat", "-c",
                        "print(a(1)['args'], b(2)['args'], c(3)['args'])"])
    assert rc == 0 and out == "[1] [2] [3]\n", err


def _one_json(out):
    lines = out.splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_json_flag_errors_are_json():
    rc, out, err = run(["python", "--json", "--memroy", "1G", "-c", "1"])
    o = _one_json(out)
    assert rc == USAGE and err == ""
    assert o["outcome"] == "usage_error" and o["exit_code"] == USAGE
    assert "did you mean --memory?" in o["error"]["message"]
    # --json after the bad flag counts too.
    rc, out, err = run(["python", "--memory", "lots", "--json", "-c", "1"])
    assert rc == USAGE and _one_json(out)["error"]["message"].startswith("--memory")


def test_json_setup_errors_are_json():
    p = subprocess.run([NSBOX, "python", "--json", "-c", "1"], capture_output=True, text=True,
                       env=dict(os.environ, NSBOX_RUNNER="/nonexistent"), stdin=subprocess.DEVNULL, timeout=60)
    o = _one_json(p.stdout)
    assert p.returncode == 125 and o["outcome"] == "setup_error" and o["exit_code"] == 125
    assert "NSBOX_RUNNER" in o["error"]["message"]


def test_json_sys_exit_outcome():
    rc, out, _ = run(["python", "--json", "-c", "import sys; sys.exit(5)"])
    o = _one_json(out)
    assert rc == 5 and o["outcome"] == "exit" and o["exit_code"] == 5 and o["error"]["type"] == "SystemExit"
    rc, out, _ = run(["python", "--json", "-c", "import sys; sys.exit(0)"])
    o = _one_json(out)
    assert rc == 0 and o["outcome"] == "ok" and o["exit_code"] == 0 and o["error"] is None


def test_json_objects_have_the_same_keys():
    rc, out, _ = run(["python", "--json", "-c", "1 + 1"])
    ok = _one_json(out)
    rc, out, _ = run(["python", "--json", "-c", "raise ValueError(3)"])
    exc = _one_json(out)
    rc, out, _ = run(["python", "--json", "--time-limit", "1", "-c", "while True: pass"], timeout=60)
    slow = _one_json(out)
    assert ok["outcome"] == "ok" and exc["outcome"] == "exception" and slow["outcome"] == "timeout"
    objs = [ok, exc, slow]
    if MODE != "nodeleg":   # the RLIMIT_AS fallback makes it a MemoryError exception
        rc, out, _ = run(["python", "--json", "--memory", "64M", "-c", "x = bytearray(1 << 30)"])
        mem = _one_json(out)
        assert rc == 123 and mem["outcome"] == "memory" and mem["exit_code"] == 123
        assert mem["usage"]["max_rss"] is None          # the runner could not say
        objs.append(mem)
    for o in objs:
        assert set(o) == set(ok), (o["outcome"], set(o) ^ set(ok))
        assert set(o["usage"]) == set(ok["usage"]), (o["outcome"], set(o["usage"]) ^ set(ok["usage"]))


FLOAT = re.compile(r"(?<![\w.\"])-?\d+\.\d+(?:e[-+]\d+)?|(?<![\w.\"])-?\d+e[-+]\d+")


def test_json_floats_are_shortest():
    rc, out, _ = run(["python", "--json", "-c", "[0.1, 1/3, 2.0, 1e300, 0.1 + 0.2, 1.5e-7, 123456789012345678.0]"])
    o = _one_json(out)
    assert rc == 0 and '"value":[0.1,0.3333333333333333,2.0,1e+300,0.30000000000000004,1.5e-07,' \
        '1.2345678901234568e+17]' in out, out
    # Every real printed, the host's timings too, is Python's repr of itself.
    for tok in FLOAT.findall(out):
        assert repr(float(tok)) == tok, tok
    rc, out, _ = run(["run", "--json-status", "-", "--", "true"])
    for tok in FLOAT.findall(out):
        assert repr(float(tok)) == tok, tok
    assert json.loads(out)["wall"] > 0


# ASan's shadow reservation can't live under the RLIMIT_AS fallback that a
# sandbox without a cgroup gets (scripts/run-integ.sh skips the nodeleg pass
# under SANITIZE for the same reason).
@pytest.mark.skipif(bool(os.environ.get("NSBOX_SANITIZE")), reason="Cgroups=off means the RLIMIT_AS fallback, where "
                    "a sanitized runner can't start (run unsanitized in every make check)")
def test_cgroups_off_is_silent():
    rc, out, err = run(["run", "--cgroups", "off", "--", "true"])
    assert rc == 0 and err == ""
    rc, out, err = run(["python", "--cgroups", "off", "-c", "print(1)"])
    assert rc == 0 and out == "1\n" and err == ""


def test_quiet():
    rc, out, err = run(["run", "--quiet", "--", "true"])
    assert rc == 0 and err == ""
    rc, out, err = run(["python", "-q", "-c", "print(1)"])
    assert rc == 0 and out == "1\n" and err == ""
    if MODE == "nodeleg":   # without --quiet: the fallbacks are warned about
        rc, out, err = run(["run", "--", "true"])
        assert rc == 0 and err.count("nsbox: warning: ") == 3, err


def test_run_memory_message_in_mib():
    if MODE == "nodeleg":
        pytest.skip("no memory cgroup: RLIMIT_AS makes it a MemoryError, not a kill")
    rc, out, err = run(["run", "--memory", "32M", "--", "python3.11", "-c", "x = bytearray(1 << 30)"])
    assert rc == 123 and re.search(r"memory limit exceeded \(peak \d+\.\d MiB\)", err), err


def test_doctor_verdicts():
    rc, out, err = run(["doctor"], timeout=120)
    verdict = out.rstrip("\n").splitlines()[-1]
    assert rc == 0 and verdict.startswith("FIT"), out + err
    assert "ok   the runner starts in a sandbox and runs Python" in out
    assert "ok   library " in out
    assert ("WARN" in out) == verdict.startswith("FIT, WITH ")
    p = subprocess.run([NSBOX, "doctor"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NSBOX_RUNNER="/nonexistent"), stdin=subprocess.DEVNULL)
    verdict = p.stdout.rstrip("\n").splitlines()[-1]
    assert p.returncode == 2 and verdict.startswith("NOT FIT"), p.stdout
    assert "FIX  no runner: NSBOX_RUNNER=/nonexistent" in p.stdout


def test_doctor_runner_that_does_not_start(tmp_path):
    fake = tmp_path / "nsbox-runner"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    p = subprocess.run([NSBOX, "doctor"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NSBOX_RUNNER=str(fake)), stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "FIX  the runner does not start" in p.stdout, p.stdout


def test_chdir():
    rc, out, err = run(["run", "--chdir", "/usr/bin", "--", "sh", "-c", "pwd; echo $PWD"])
    assert rc == 0 and out == "/usr/bin\n/usr/bin\n", err
    rc, out, err = run(["python", "--chdir", "/usr/lib", "-c", "import os; print(os.getcwd())"])
    assert rc == 0 and out == "/usr/lib\n", err
    rc, out, err = run(["run", "--chdir", "/no/such/dir", "--", "true"])
    assert rc == 125 and "--chdir /no/such/dir" in err and "No such file" in err
    rc, out, err = run(["run", "--chdir", "relative", "--", "true"])
    assert rc == USAGE and "--chdir" in err


def test_env_passes_and_unsets():
    p = subprocess.run([NSBOX, "run", "--env", "NSBOX_T_PASS", "--env", "NSBOX_T_ABSENT", "--env", "B=2",
                        "--unsetenv", "LANG", "--unsetenv", "TERM", "--setenv", "C=3", "--unsetenv", "C", "--",
                        "env"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                       env=dict(os.environ, NSBOX_T_PASS="a b=c", TERM="xterm"))
    env = dict(line.split("=", 1) for line in p.stdout.splitlines())
    assert p.returncode == 0, p.stderr
    assert env["NSBOX_T_PASS"] == "a b=c" and env["B"] == "2"
    assert "NSBOX_T_ABSENT" not in env and "LANG" not in env and "TERM" not in env and "C" not in env
    assert env["PATH"] and env["HOME"] == "/tmp"
    rc, out, err = run(["run", "--unsetenv", "PATH", "--", "/usr/bin/env"])
    assert rc == 0 and "PATH=" not in out


def test_tmpfs(tmp_path):
    script = ("set -e; id -u; df -k /scratch /opt/cache | tail -2 | awk '{print $2}';"
              "echo hi > /scratch/f; cat /scratch/f; echo x > /opt/cache/y;"
              "head -c 3M /dev/zero > /scratch/big 2>/dev/null && echo NOT-BOUNDED || echo bounded")
    rc, out, err = run(["run", "--tmp-size", "16M", "--tmpfs", "/scratch:2M", "--tmpfs", "/opt/cache", "--", "sh",
                        "-c", script])
    lines = out.split()
    assert rc == 0, err
    assert lines[0] == "1000" and lines[1] == "2048" and lines[2] == str(16 * 1024)   # default: --tmp-size's
    assert lines[3:] == ["hi", "bounded"]
    assert not os.path.exists("/scratch")                 # the host never saw it
    # The same from a policy file, with WorkDir= and Unset=.
    pol = tmp_path / "t.policy"
    pol.write_text("[Sandbox]\nWorkDir=/data\n[Filesystem]\nTmpFS=/data:4M\n[Environment]\nUnset=LANG\n")
    rc, out, err = run(["run", "--policy", str(pol), "--", "sh", "-c", "pwd; echo \"L=$LANG\"; touch x && ls"])
    assert rc == 0 and out == "/data\nL=\nx\n", err


def test_tmpfs_counts_toward_memory():
    if MODE == "nodeleg":
        pytest.skip("no memory cgroup: nothing charges tmpfs pages")
    # Which process the OOM killer picks varies (the pages belong to none):
    # what holds is that the run ends as a memory kill.
    rc, out, err = run(["run", "--memory", "48M", "--tmpfs", "/big:256M", "--", "sh", "-c",
                        "head -c 128M /dev/zero > /big/f"])
    assert rc == 123 and "memory limit exceeded" in err, (rc, out, err)


def _pty_session(argv, steps, tmo=20):
    """Run argv on a fresh pty (its controlling terminal, like a login
    shell's), send each input of steps, (data, seconds[, pattern]), and
    collect what comes back for that long, or until the pattern (a bytes
    regex) shows up in it."""
    import pty
    import re
    import select
    import time
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    outs = []

    def read_for(t, until=None):
        out, end = b"", time.monotonic() + t
        while time.monotonic() < end and not (until and re.search(until, out)):
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    d = os.read(fd, 4096)
                except OSError:
                    break
                if not d:
                    break
                out += d
        return out.decode(errors="replace")
    try:
        outs.append(read_for(10, rb"[$#] $"))      # the first prompt
        for data, wait, *until in steps:
            os.write(fd, data)
            outs.append(read_for(wait, *until))
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), outs


def test_run_shell_on_a_terminal_has_job_control():
    rc, outs = _pty_session([NSBOX, "run", "--quiet", "--", "sh", "-i"], [
        (b"python3.11 -c 'import os; print(\"FG\", os.tcgetpgrp(0) == os.getpgrp())'\n", 10, rb"FG (True|False)"),
        (b"sleep 100\n", 0.5), (b"\x03", 10, rb"[$#] $"),   # ^C: SIGINT inside, through the pty's own line discipline
        (b"echo status $?\n", 10, rb"status \d+"),
        (b"python3.11 -c 'import fcntl, termios\ntry: fcntl.ioctl(0, termios.TIOCSTI, b\"x\")\n"
         b"except OSError as e: print(\"TIOCSTI\", e.errno)'\n", 10, rb"TIOCSTI -?\d+"),
        (b"exit 7\n", 10)])
    text = "".join(outs)
    assert rc == 7, text
    assert "can't access tty" not in text and "job control turned off" not in text, text
    assert "FG True" in text and "status 130" in text
    assert "TIOCSTI 1" in text                          # EPERM: seccomp, whatever the terminal


def test_run_restores_the_terminal(tmp_path):
    script = (f"stty -g > {tmp_path}/before; {NSBOX} run --quiet -- sh -c 'stty -g; exit 3'; echo rc=$?;"
              f"stty -g > {tmp_path}/after")
    rc, outs = _pty_session(["/bin/sh", "-c", script], [], tmo=20)
    text = "".join(outs)
    assert rc == 0 and "rc=3" in text, text
    before = (tmp_path / "before").read_text()
    assert before == (tmp_path / "after").read_text()
    assert before.strip() in text                      # the command saw the caller's settings


def test_run_with_a_terminal_on_output_only_gets_a_pty_of_its_own():
    # stdin a pipe, stdout and stderr a terminal (`... | nsbox run -- cmd` in a
    # shell): the command got the caller's terminal as fd 1 and 2, and its
    # ioctls there outlived it (here: echo off; TIOCEXCL, every later open
    # EBUSY; TCXONC, output stopped).  Now a pty of its own, relayed out
    # (red team 4).
    import pty
    import termios
    master, slave = pty.openpty()
    try:
        code = ("import os, sys, termios\n"
                "a = termios.tcgetattr(1); a[3] &= ~termios.ECHO; termios.tcsetattr(1, termios.TCSANOW, a)\n"
                "print('RDEV', os.fstat(1).st_rdev, os.fstat(2).st_rdev, os.isatty(0), os.isatty(1), os.isatty(2))\n"
                "print('IN', sys.stdin.read().strip())\n")
        p = subprocess.run([NSBOX, "run", "--quiet", "--", "/usr/bin/python3.11", "-S", "-c", code], input=b"piped\n",
                           stdout=slave, stderr=slave, timeout=60)
        assert termios.tcgetattr(slave)[3] & termios.ECHO       # the caller's terminal as it was
        out = b""
        while True:
            import select
            if not select.select([master], [], [], 1)[0]:
                break
            out += os.read(master, 65536)
        text = out.decode(errors="replace")
        assert p.returncode == 0, text
        words = text.split("RDEV", 1)[1].split()
        assert int(words[0]) != os.fstat(slave).st_rdev and words[0] == words[1], text
        assert words[2:5] == ["False", "True", "True"] and "IN piped" in text, text
    finally:
        os.close(master)
        os.close(slave)


def test_json_exit_code_is_nsbox_status():
    # nsbox(1): exit_code is nsbox's exit status, KeyboardInterrupt's 130 too.
    p = subprocess.run([NSBOX, "python", "--json", "-c", "raise KeyboardInterrupt"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 130 and json.loads(p.stdout)["exit_code"] == 130, (p.stdout, p.stderr)


def test_code_over_the_frame_limit_is_a_usage_error(tmp_path):
    # The same status (120, naming the limit) for FILE, stdin and -c.
    f = tmp_path / "big.py"
    f.write_text("x = 1\n" * 3_000_000)
    for args, stdin in [([str(f)], None), (["-"], f.read_bytes())]:
        p = subprocess.run([NSBOX, "python", *args], input=stdin, capture_output=True, timeout=60)
        assert p.returncode == 120 and b"exceeds the frame limit" in p.stderr, (args, p.stderr[-300:])


def test_json_display_dir_error_is_json(tmp_path):
    bad = str(tmp_path / "missing" / "deeper")
    p = subprocess.run([NSBOX, "python", "--json", "--display-dir", bad, "-c", "1"], capture_output=True, text=True,
                       timeout=60)
    o = json.loads(p.stdout)
    assert p.returncode == 120 and o["outcome"] == "usage_error" and "--display-dir" in o["error"]["message"], p


def test_run_ends_at_its_time_limit_on_a_terminal_nobody_reads():
    """stdout on a terminal that takes nothing (^S, a paused pane, a pty
    master no one reads): the limit killed the command, but nsbox run
    waited for good for its relay to write what the pty still held (red
    team 13).  Past a time limit the relay gets a second, then is killed."""
    import pty
    import time
    master, slave = pty.openpty()
    p = subprocess.Popen([NSBOX, "run", "--quiet", "--time-limit", "2", "--", "/bin/sh", "-c", "yes"],
                         stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    try:
        rc = p.wait(timeout=30)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()
        os.close(master)
    assert rc == 124, (rc, err)
    assert "time limit exceeded" in err
