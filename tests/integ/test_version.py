"""One version, set once: the Makefile's NSBOX_VERSION.  Everything that
states a version must say the same, and this fails naming the one that
drifted: nsbox_version(), `nsbox --version`, the generated man pages'
.TH lines, nsbox.pc, the Python SDK (python/nsbox/_version.py, which
`make sync-version` writes, and the package metadata read from it)."""
import ctypes
import os
import re
import subprocess
import sys

from conftest import BUILD, NSBOX, sdk_env

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEMVER = r"[0-9]+\.[0-9]+\.[0-9]+"


def makefile_version():
    text = open(os.path.join(TOP, "Makefile")).read()
    found = re.findall(r"^NSBOX_VERSION\s*[:?]?=\s*(\S+)\s*$", text, re.M)
    assert len(found) == 1, f"the Makefile sets NSBOX_VERSION {len(found)} times: {found}"
    assert re.fullmatch(SEMVER, found[0]), found[0]
    return found[0]


VERSION = makefile_version()


def test_cli_version():
    p = subprocess.run([NSBOX, "--version"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and p.stdout == f"nsbox {VERSION}\n", p.stdout + p.stderr


def test_library_version():
    # In a child: a sanitized libnsbox can't be loaded into pytest itself.
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.nsbox_version.restype = ctypes.c_char_p; "
            "print(lib.nsbox_version().decode())")
    p = subprocess.run([sys.executable, "-c", code, os.path.join(BUILD, "libnsbox.so.0")], capture_output=True,
                       text=True, env=sdk_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == VERSION


def test_pkgconfig_version():
    text = open(os.path.join(BUILD, "nsbox.pc")).read()
    assert f"\nVersion: {VERSION}\n" in text


def test_man_pages():
    pages = sorted(f for f in os.listdir(os.path.join(TOP, "man")) if re.search(r"\.[1-8]$", f))
    assert pages
    for page in pages:
        gen = os.path.join(BUILD, "man", page)
        assert os.path.exists(gen), f"{gen} was not generated (make)"
        th = [l for l in open(gen) if l.startswith(".TH ")]
        assert len(th) == 1 and f'"nsbox {VERSION}"' in th[0], f"{gen}: {th}"
        # A version written into the checked-in page must not disagree either.
        for line in open(os.path.join(TOP, "man", page)):
            if line.startswith(".TH "):
                for v in re.findall(r"nsbox (" + SEMVER + ")", line):
                    assert v == VERSION, f"man/{page}: {line.strip()}"


def test_python_sdk_version():
    src = open(os.path.join(TOP, "python", "nsbox", "_version.py")).read()
    m = re.search(r'^__version__ = "([^"]*)"$', src, re.M)
    assert m and m.group(1) == VERSION, \
        f"python/nsbox/_version.py says {m and m.group(1)}, the Makefile {VERSION}: make sync-version"
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
    p = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import nsbox; print(nsbox.__version__)", os.path.join(TOP, "python")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == VERSION, p.stdout + p.stderr


def test_python_metadata_reads_the_same_file():
    text = open(os.path.join(TOP, "python", "pyproject.toml")).read()
    project = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, re.M | re.S).group(1)
    assert not re.search(r"^version\s*=", project, re.M), "pyproject.toml's [project] states a version"
    assert re.search(r'^dynamic = \[.*"version".*\]', project, re.M)
    assert 'version = {attr = "nsbox._version.__version__"}' in text
