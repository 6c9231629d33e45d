"""A headless JupyterLab server and Debian's Chromium (through Playwright) for the browser tests.

One server and one browser serve every notebook of the module (both are module fixtures).
The tests never skip silently: without Chromium or Playwright it fails and says how to install
them (``bash scripts/dev/install_browser.sh``; Playwright comes with the notebook extra). Set
``PEAGLE_LAB_SKIP_BROWSER=1`` to skip it on purpose on a machine that cannot run a browser.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
# Headless, sandbox-free (CI runs as root) and quiet on a closed network.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_S = 90


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (tests/browser)")


@dataclass
class Lab:
    url: str  # base URL, e.g. http://127.0.0.1:8899
    token: str
    root: Path  # the folder JupyterLab serves (a copy, so autosave never touches notebooks/)
    log: Path

    def serve(self, notebook: Path) -> str:
        """Copy ``notebook`` into the served folder's ``notebooks/``; return its path there.

        The served folder also links to the checkout's ``docs/``, so the copy's relative
        paths (``../docs/results/…``) read the committed results as the original does.
        """
        (self.root / "notebooks").mkdir(exist_ok=True)
        docs = self.root / "docs"
        if not docs.exists():
            docs.symlink_to(REPO / "docs", target_is_directory=True)
        shutil.copy(notebook, self.root / "notebooks" / notebook.name)
        return f"notebooks/{notebook.name}"

    def shutdown_kernels(self) -> None:
        """Stop every kernel the server runs (each notebook's, once its test is done)."""
        def call(method: str, path: str):
            req = urllib.request.Request(f"{self.url}{path}?token={self.token}", method=method)
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")
        for kernel in call("GET", "/api/kernels"):
            call("DELETE", f"/api/kernels/{kernel['id']}")

    def log_tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])


def require_browser() -> None:
    """Fail (or skip, when asked to) if Chromium or Playwright is missing."""
    if os.environ.get("PEAGLE_LAB_SKIP_BROWSER") == "1":
        pytest.skip("PEAGLE_LAB_SKIP_BROWSER=1: browser test skipped on purpose")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: run `bash scripts/dev/install_browser.sh` "
                    "(or set PEAGLE_LAB_SKIP_BROWSER=1 to skip this test on purpose)", pytrace=False)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[notebook]' "
                    "(never `playwright install`; the test uses Debian's Chromium)", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, token: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {proc.returncode} before serving; its log:\n"
                        f"{log.read_text(errors='replace')[-4000:]}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer at {url} within {SERVER_START_S} s; its log:\n"
                f"{log.read_text(errors='replace')[-4000:]}", pytrace=False)


def _stop(proc: subprocess.Popen) -> None:
    """End the server and the kernels it started: they share the session it leads."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    """JupyterLab on a free localhost port, serving a temporary folder, with private settings."""
    require_browser()
    root = tmp_path_factory.mktemp("lab")
    settings = root / ".settings"
    # Render every cell into the DOM (JupyterLab 4 virtualises long notebooks by default).
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    # No news toast: that comes from the project's own override (scripts/setup.sh installs
    # scripts/jupyterlab/overrides.json), which the tests check, so no user setting hides it here.
    token, port = secrets.token_hex(16), _free_port()
    log = root / ".jupyterlab.log"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(root / ".runtime"), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={root / '.workspaces'}",
           # Nothing that reaches for the network: no news, no update checks, no PyPI extension manager.
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(url, token, proc, log)
        yield Lab(url, token, root, log)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, launched by Playwright (never a downloaded browser)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()

