"""libnsbox, the C library (issue 4), from the outside: the C API tests
(build/tests/test-api, TAP), the example agent host and the README's demo.
The helper process must go away with its host, leaving no sandbox behind
(the autouse host_intact fixture checks processes, cgroups, fds)."""
import os
import subprocess
import sys
import time

BUILD = os.path.abspath(os.environ.get("NSBOX_BUILD") or os.path.join(os.path.dirname(__file__), "..", "..", "build"))
TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _env():
    e = dict(os.environ)
    e.pop("NSBOX_RUNNER", None)
    return e


def test_c_api_suite():
    t = os.path.join(BUILD, "tests", "test-api")
    assert os.path.exists(t), "build/tests/test-api missing: run make"
    p = subprocess.run([t], capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not ok" not in p.stdout
    assert p.stdout.count("\nok ") > 100


def test_example_agent():
    p = subprocess.run([os.path.join(BUILD, "examples", "agent")], capture_output=True, text=True, timeout=120,
                       env=_env())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "=> 55" in p.stdout                      # ten calc() calls in a loop
    assert "tool said: division by zero" in p.stdout  # a failing tool is a ToolError
    assert '"area\\": 7' in p.stdout                # the key-value store kept state on the host


def test_readme_demo():
    p = subprocess.run([os.path.join(TOP, "examples", "demo.sh")], capture_output=True, text=True, timeout=120,
                       env=dict(_env(), NSBOX_BUILD=BUILD))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "it will be sunny" in p.stdout
    assert "inside the sandbox: uid 1000 host nsbox" in p.stdout


def test_helper_goes_away_with_its_host():
    """The host dies without freeing anything: its helper and sandboxes
    must still go (control socket EOF, not PDEATHSIG)."""
    t = os.path.join(BUILD, "tests", "test-api")
    code = "import time\nprint('up', flush=True)\ntime.sleep(60)"
    p = subprocess.Popen([t, "--run", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.time() + 30
        kids = []
        while time.time() < deadline and not kids:
            kids = _children(p.pid)
            time.sleep(0.05)
        assert kids, "no helper process appeared"
        helper = kids[0]
        sandboxes = _children(helper)
        deadline = time.time() + 30
        while time.time() < deadline and not sandboxes:
            time.sleep(0.05)
            sandboxes = _children(helper)
        assert sandboxes, "the helper made no sandbox"
        p.kill()
        p.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(x) for x in [helper] + sandboxes):
            time.sleep(0.05)
        assert not any(_alive(x) for x in [helper] + sandboxes), "helper or sandbox outlived the host"
    finally:
        p.kill()
        p.communicate()


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
