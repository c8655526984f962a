"""The README's Python quick start runs as written."""
import os
import re
import subprocess
from conftest import BUILD

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_readme_python_quick_start():
    text = open(os.path.join(TOP, "README.md")).read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"), NSBOX_LIB=os.path.join(BUILD, "libnsbox.so.0"))
    if os.environ.get("NSBOX_ASAN_PRELOAD"):  # make check SANITIZE=...: see scripts/run-integ.sh
        env.update(LD_PRELOAD=os.environ["NSBOX_ASAN_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
    p = subprocess.run(["/usr/bin/python3.11", "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "42"
    assert "lookup(city: str)" in p.stdout
