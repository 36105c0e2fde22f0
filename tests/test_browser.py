"""What a person sees: JupyterLab in headless Chromium, driven through its menus and widgets.

One JupyterLab server for the module, on a free loopback port with its own token, and every
Jupyter folder (runtime, config, data, settings, workspaces, checkpoints, gradebook) in a
temporary directory, so a run leaves nothing in the checkout. On a failure the page's
screenshot and HTML, and the server's log, go to test-artifacts/browser/.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import exercises, quiz, throughput
from conftest import ROOT, venv_env

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package; Playwright's own download can't run here
# Without the background-networking flags Chromium keeps calling out to Google's services.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
LESSON = "notebooks/02_block_programming_model.ipynb"
QUIZ = "q2_block_model"
ASSIGNMENT = exercises.get("ps1_broadcast_add")
# Whole runs: lesson 2 takes ~5 s in the interpreter, ps1 ~15 s (its checks run 13 cases).
RUN_ALL_TIMEOUT_MS = 300_000
PAGE_TIMEOUT_MS = 60_000

# JupyterLab user settings (JUPYTERLAB_SETTINGS_DIR): no autosave, so running the cells never
# writes outputs into a committed notebook; every cell in the DOM, so a locator finds the last
# one without scrolling; no news pop-up over the page.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false"},
}


def needs(ok: bool, reason: str) -> None:
    """Skip without ``ok`` locally; in CI (CI=true) a missing browser is a failure."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; .ci/run installs it in CI")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    url: str
    """http://127.0.0.1:PORT, no trailing slash."""
    token: str
    log: Path
    """The server's stdout and stderr."""

    def page_url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.url}/{path}{sep}token={self.token}"


def _wait_until_answering(lab: Lab, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{lab.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(lab.page_url("api/status"), timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"JupyterLab did not answer in {timeout_s:.0f} s:\n{lab.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("jupyter")
    for name, values in LAB_SETTINGS.items():
        path = home / "settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = venv_env(
        JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"), IPYTHONDIR=str(home / "ipython"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        # The interpreter even on a GPU box, so the self-check's expected lines hold everywhere.
        TRITON_COURSE_DEVICE="cpu", TRITON_COURSE_LANG="en",
    )
    env.pop(throughput.CPU_POLICY_VAR, None)  # the student's default: no points without a GPU
    lab = Lab(f"http://127.0.0.1:{free_port()}", secrets.token_hex(16), home / "server.log")
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={lab.url.rsplit(':', 1)[1]}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={lab.token}",
        f"--ServerApp.root_dir={ROOT}",
        # Lab checkpoints a notebook when it opens it, and the formgrader creates its
        # gradebook on first view: both would otherwise land (git-ignored) in the checkout.
        f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}",
        f"--CourseDirectory.db_url=sqlite:///{home / 'gradebook.db'}",
    ]
    with open(lab.log, "w") as log:
        # cwd: nbgrader reads nbgrader_config.py from the directory the server starts in.
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_answering(lab, proc)
            yield lab
        finally:
            _stop(lab, proc)


def _stop(lab: Lab, proc: subprocess.Popen) -> None:
    """Ask the server to shut down (it stops its kernels), then insist."""
    try:
        request = urllib.request.Request(lab.page_url("api/shutdown"), method="POST")
        urllib.request.urlopen(request, timeout=10).close()
        proc.wait(timeout=30)
    except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    needs(CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        needs(False, "playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS, headless=True, viewport={"width": 1400, "height": 900})
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        expect.set_options(timeout=PAGE_TIMEOUT_MS)  # expect's own default is 5 s
        try:
            yield context
        finally:
            context.close()


@contextmanager
def open_page(browser, lab: Lab, name: str, path: str):
    """A page at ``path`` on the server; on any failure, screenshot + HTML + server log saved."""
    for old in ARTIFACTS.glob(f"{name}.*"):
        old.unlink()
    page = browser.new_page()
    try:
        page.goto(lab.page_url(path))
        page.wait_for_selector("#jp-main-statusbar")  # the Lab shell is up
        yield page
    except Exception as error:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        saved = [ARTIFACTS / f"{name}.{ext}" for ext in ("png", "html", "server.log")]
        try:
            page.screenshot(path=saved[0], full_page=True)
            saved[1].write_text(page.content())
        except Exception as shot_error:  # a crashed page: say so, keep the real error
            saved[1].write_text(f"could not save the page: {shot_error}")
        shutil.copy(lab.log, saved[2])
        listing = ", ".join(str(p.relative_to(ROOT)) for p in saved if p.exists())
        raise AssertionError(f"{error}\n\nSaved for a look: {listing}") from error
    finally:
        page.close()


def open_notebook(browser, lab: Lab, name: str, notebook: str):
    # A workspace per page: the default one would reopen the tabs of the previous test.
    return open_page(browser, lab, name, f"lab/workspaces/{name}/tree/{notebook}")


def run_all_cells(page):
    """Run → Run All Cells, then wait until no cell is queued and the kernel is idle."""
    from playwright.sync_api import expect

    notebook = page.locator(".jp-NotebookPanel:visible .jp-Notebook")
    notebook.locator(".jp-Cell").first.wait_for()
    # The status bar's "Python 3 (ipykernel) | Idle": a Run All before the kernel is up asks
    # which kernel to start instead of running anything.
    kernel = page.locator("#jp-main-statusbar [title^='Change kernel']")
    expect(kernel).to_have_text(re.compile(r"\| Idle$"))
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    # A queued or running cell shows [*]; the first code cell shows a number once it has run.
    page.wait_for_function("""(nb) => {
        const prompts = [...nb.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
        return prompts.length > 0 && /\\d/.test(prompts[0]) && !prompts.some(p => p.includes('*'));
    }""", arg=notebook.element_handle(), timeout=RUN_ALL_TIMEOUT_MS)
    expect(kernel).to_have_text(re.compile(r"\| Idle$"))
    prompts = notebook.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    not_run = [i for i, p in enumerate(prompts) if not re.search(r"\d", p)]
    assert not not_run, f"code cells {not_run} did not run (an earlier cell raised?): {prompts}"
    return notebook


def code_cell(notebook, source: str):
    """The code cell whose source contains ``source``."""
    return notebook.locator(".jp-CodeCell").filter(has=notebook.page.locator(".jp-InputArea", has_text=source))


def plain(text: str) -> str:
    """Text as a page shows it: `code` spans lose their backticks, whitespace collapses."""
    return " ".join(text.replace("`", "").split())


def test_lesson_quiz_answers_a_click(browser, lab):
    from playwright.sync_api import expect

    question = quiz.load_quizzes()["questions"][QUIZ]
    right, wrong = question["correct"], next(i for i in range(len(question["en"]["options"]))
                                             if i != question["correct"])
    committed = (ROOT / LESSON).read_bytes()
    with open_notebook(browser, lab, "lesson-quiz", LESSON) as page:
        notebook = run_all_cells(page)
        cell = code_cell(notebook, f'ask("{QUIZ}")')
        expect(cell).to_have_count(1)
        verdict = cell.locator(".widget-html-content").last  # under the Check button
        for choice, mark, explanation in ((right, "✅", "right"), (wrong, "❌", "wrong")):
            cell.get_by_label(question["en"]["options"][choice], exact=True).check()
            cell.get_by_role("button", name="Check").click()
            expect(verdict).to_contain_text(mark)
            shown = verdict.inner_text()  # "✅ Correct!", a line break, the explanation
            verdict_line, _, explained = shown.partition("\n")
            assert verdict_line.startswith(mark), shown
            why_not = question["en"].get("why_not", [None] * len(question["en"]["options"]))[choice]
            said = [why_not] * (choice == wrong and bool(why_not)) + [question["en"][explanation]]
            assert plain(explained) == plain(" ".join(said)), shown
    assert (ROOT / LESSON).read_bytes() == committed, f"{LESSON} was saved with outputs"


def test_assignment_self_check_reports(browser, lab):
    notebook_path = f"source/{ASSIGNMENT.name}/{ASSIGNMENT.name}.ipynb"
    cases = len(ASSIGNMENT.cases("visible", "cpu"))
    with open_notebook(browser, lab, "assignment-self-check", notebook_path) as page:
        notebook = run_all_cells(page)
        cell = code_cell(notebook, f'check("{ASSIGNMENT.name}", {ASSIGNMENT.function})')
        output = plain(cell.locator(".jp-OutputArea").inner_text())
        assert f"{ASSIGNMENT.name}: correctness {cases}/{cases} cases passed" in output, output
        assert plain(throughput.not_measured().message) in output, output


def test_formgrader_lists_the_assignments(browser, lab):
    assignments = sorted(p.parent.name for p in (ROOT / "source").glob("*/*.ipynb"))
    assert ASSIGNMENT.name in assignments
    with open_page(browser, lab, "formgrader", "lab/workspaces/formgrader") as page:
        page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
        page.get_by_role("menuitem", name="Formgrader", exact=True).click()
        frame = page.frame_locator("iframe[src*='formgrader']")
        for name in assignments:
            frame.get_by_role("link", name=name, exact=True).wait_for()


def test_assignment_list_answers(browser, lab):
    from playwright.sync_api import expect

    with open_page(browser, lab, "assignment-list", "lab/workspaces/assignment-list") as page:
        page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
        with page.expect_response(lambda r: urlparse(r.url).path == "/courses") as reply:
            page.get_by_role("menuitem", name="Assignment List", exact=True).click()
        assert reply.value.status == 200, f"{reply.value.url} answered {reply.value.status}"
        assert "success" in reply.value.json(), reply.value.text()
        released = page.locator("#released_assignments_list")
        expect(released.locator(".list_loading")).to_be_hidden()
        if (ROOT / "exchange").exists():  # after a release_assignment: a list, maybe empty
            expect(released.locator(".list_placeholder:visible, .list_item:visible").first).to_be_visible()
        else:  # README: "reports a missing exchange until the first release_assignment"
            expect(released.locator(".list_error")).to_contain_text("exchange directory does not exist")
