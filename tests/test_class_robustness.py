"""Grading that survives a whole class: one run of grade_class over a good student and one
student per fault. Each broken submission loses only the points of the tests it breaks, with
a reason in the summary table and in its graded notebook and feedback; everyone else is
graded exactly, and grading again gives the same grades."""
import csv
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.converters import Autograde
from traitlets.config.loader import PyFileConfigLoader

from autograder.grading import confine, judge as judging, sandbox
from autograder.instructor.grade_class import grade_class, table
from conftest import ROOT
from test_nbgrader_pipeline import (PS1, PS1_EXERCISE, cell_scores, expected_unmasked_points, nbgrader,
                                    new_course, reference)

pytestmark = pytest.mark.slow
TIMEOUT_S = 25
"""Per graded test, for the class run: a correct submission's takes 5 s here (2 cores)."""
MEMORY_GB = 2
"""Per grading process, for the class run: the checker itself needs about 0.3 GB."""
REF = reference(PS1)
FULL = {"test_correctness": PS1_EXERCISE.points["correctness"], "test_hidden": PS1_EXERCISE.points["hidden"],
        "test_throughput": 0.0}  # no GPU: throughput 0
ZERO = {"test_correctness": 0.0, "test_hidden": 0.0, "test_throughput": 0.0}

from test_judge import ATTACKS, ZEROS, _as_root_with_nobody, python_for_nobody  # noqa: E402,F401
# Everything the answer cells could use to reach the course: if any is found, they raise.
SNOOP = '''
import os, pathlib, sys
_found = []
try:
    import solutions
    _found.append("import solutions")
except ImportError:
    pass
_here = pathlib.Path.cwd()
_found += [str(p / n) for p in [_here, *_here.parents] for n in ("source", "solutions", "submitted",
           "autograded", "release", "gradebook.db", "nbgrader_config.py") if (p / n).exists()]
_found += [str(f) for f in _here.iterdir() if f.suffix == ".ipynb"]
_found += [k for k in os.environ if k.startswith(("NBGRADER", "JPY", "JUPYTER", "TRITON_COURSE_ISOLATE"))
           or k in ("PWD", "OLDPWD", "VIRTUAL_ENV")]
if _found:
    raise RuntimeError("grading exposed: " + ", ".join(_found))
'''
NOISY = '''
import sys
print(("x" * 99 + "\\n") * 20000)  # 2 MB when the cell runs


def _noisy_add(x, y, _add=add):
    print("y" * 2**20, file=sys.stderr)  # and 1 MB per call
    return _add(x, y)


add = _noisy_add
'''
VANDAL = '''
import os, signal
try:
    os.kill(os.getppid(), 0)  # never on an unconfined grader: the next line would end every process of this user
except PermissionError:
    os.kill(-1, signal.SIGKILL)  # confined, it reaches no process but its own
'''
RIGGED_GRADE = ZEROS + '''

def grade(exercise, fn, part):  # in the tests' kernel this would score every test
    return {"correctness": 3, "hidden": 3, "throughput": 2}[part]
'''

ANSWERS = {
    "ada": REF,
    "exit_at_import": REF + "\nimport os\nos._exit(1)\n",
    "segfault": "import ctypes\n\n\ndef add(x, y):\n    return ctypes.string_at(0)\n",
    # reserves, does not touch: the cap counts reservations (touching made its grading 21 s, not 12 s, here)
    "memory_hog": "def add(x, y):\n    hog = []\n    while True:\n        hog.append(torch.empty(2**28))\n",
    "forever": "def add(x, y):\n    while True:\n        pass\n",
    # right on whole 64-column tiles, raises on the rest: partial credit, like a missing column mask
    "raises": REF.replace("def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:",
                          "def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
                          "    if x.shape[1] % 64:\n        raise ValueError('ragged sizes are next week')"),
    "nosy": REF + NOISY + SNOOP,  # prints megabytes, looks for the course, finds nothing (+ reach())
    # sent as ps1_broadcast_add-Copy1.ipynb (as JupyterLab's "Duplicate" names it), its setup cell
    # edited, beside a link named as the released notebook that points at the source with the answers
    "copied": REF,
    "mallory": RIGGED_GRADE,
    "no_function": "def plus(x, y):\n    return x + y\n",
    "bad_signature": "def add(x):\n    return x\n",
    "syntax_error": "def add(x, y)\n    return x + y\n",
    # two of the judge's attacks (tests/test_judge.py has them all): a kernel that stores zeros,
    # a verdict file written before exiting, and a checker rigged in the answer's own process
    "forger": ZEROS + ATTACKS["writes_a_verdict_file_and_exits"],
    "rigger": ZEROS + ATTACKS["wraps_the_comparison"],
}
if confine.abi() >= 6:  # Landlock, signals scoped: grading must survive this one
    ANSWERS["vandal"] = REF + VANDAL
# Keeps the shapes it is called with in its compile cache, which a student's tests share; a
# runner that starts with some there raises them, into the visible test's feedback if that ran
# after the hidden one (its cell moved below: the notebook's order would be the judge's).
ANSWERS["reorderer"] = REF + '''
import os, pathlib
_seen_file = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "seen.txt"
_seen = _seen_file.read_text() if _seen_file.exists() else ""


def _telling_add(x, y, _add=add):
    if _seen:
        raise RuntimeError("cases seen by an earlier runner: " + _seen)
    with _seen_file.open("a") as f:
        f.write(f"{tuple(x.shape)} {x.dtype}; ")
    return _add(x, y)


add = _telling_add
'''
ANSWERS["impostor"] = ZEROS  # and, beside the notebook, modules named as the judge's own:
HIJACKED = "hijacked"
"""What any of the impostor's files writes in the course folder when it runs."""


def impostor_files(course: Path) -> dict[str, str]:
    """Files sent beside the notebook, named after what the autograde kernel imports: its
    launcher, the course's package, torch. Each leaves a mark in the course when it runs."""
    mark = f"open({str(course / HIJACKED)!r}, 'a').write(__file__ + '\\n')\n"
    launch = ("import os, runpy, sys\nsys.path = [p for p in sys.path if p not in ('', os.getcwd())]\n"
              "runpy.run_module('ipykernel_launcher', run_name='__main__')\n")  # then the kernel as usual
    return {"ipykernel_launcher.py": mark + launch, "autograder/__init__.py": mark + "def grade(*args):\n    return 3\n",
            "torch.py": mark}


UNREADABLE = {"not_json": '{"cells": [ this is not JSON', "no_cells": None,
              "surrogate": json.dumps({"cells": [{"cell_type": "code", "source": "# \ud83d", "metadata": {},
                                                  "outputs": [], "execution_count": None}],
                                       "metadata": {}, "nbformat": 4, "nbformat_minor": 4}),
              "two_copies": None}  # two readable notebooks, neither of the released name
REGRADED = ["raises", "mallory"]




def reach(course: Path, listing: bool = True) -> str:
    """Answer code that opens the course's files by absolute path (and lists the course, if
    ``listing``) and signals its grader; it raises if any of that works."""
    paths = [course] * listing + [course / "gradebook.db", course / "source" / PS1 / f"{PS1}.ipynb",
                                  course / "submitted" / "ada" / PS1 / f"{PS1}.ipynb",
                                  ROOT / "solutions" / "broadcast_add.py"]
    return f'''
import os
_reached = []
for _path in {[str(p) for p in paths]!r}:
    try:
        os.listdir(_path) if os.path.isdir(_path) else open(_path).close()
        _reached.append(_path)
    except PermissionError:
        pass
try:
    os.kill(os.getppid(), 0)
    _reached.append("signalled the grader")
except PermissionError:
    pass
if _reached:
    raise RuntimeError("grading exposed: " + ", ".join(_reached))
'''


def cell(nb, name):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == name)


def tamper(nb) -> None:
    """Each kind of change to a locked cell, one cell each, and a duplicated answer cell."""
    nb.cells[cell(nb, "test_correctness")].source = "3  # full marks"  # edited
    del nb.cells[cell(nb, "test_hidden")]  # deleted
    throughput = nb.cells[cell(nb, "test_throughput")]  # retyped
    nb.cells[cell(nb, "test_throughput")] = nbformat.v4.new_markdown_cell("2", metadata=throughput.metadata)
    copy = nbformat.from_dict(json.loads(json.dumps(nb.cells[cell(nb, "setup")])))  # duplicated
    copy.source += "\ngrade = lambda *args: 3"
    copy.id = "setup-copy"
    nb.cells.insert(cell(nb, "setup") + 1, copy)
    answer = nbformat.from_dict(json.loads(json.dumps(nb.cells[cell(nb, "add")])))  # the answer twice:
    answer.source, answer.id = REF, "add-copy"  # nbgrader grades the last copy, not this one
    nb.cells.insert(cell(nb, "add"), answer)


def submit(course, student: str, listing: bool = True) -> None:
    folder = course / "submitted" / student / PS1
    folder.mkdir(parents=True)
    path = folder / (f"{PS1}-Copy1.ipynb" if student == "copied" else f"{PS1}.ipynb")
    if student == "two_copies":
        for name in ("a.ipynb", "b.ipynb"):
            shutil.copy(course / "release" / PS1 / f"{PS1}.ipynb", folder / name)
        return
    if student in UNREADABLE:
        path.write_text(UNREADABLE[student] or json.dumps(
            {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        return
    nb = nbformat.read(course / "release" / PS1 / f"{PS1}.ipynb", as_version=4)
    nb.cells[cell(nb, PS1_EXERCISE.function)].source = ANSWERS[student] + (reach(course, listing) if student == "nosy" else "")
    if student == "mallory":
        tamper(nb)
    if student == "reorderer":  # the hidden test above the visible one
        nb.cells.insert(cell(nb, "test_correctness"), nb.cells.pop(cell(nb, "test_hidden")))
    nbformat.write(nb, path)
    if student == "copied":
        nb = nbformat.read(path, as_version=4)
        nb.cells[cell(nb, "setup")].source += "\n# edited"
        nbformat.write(nb, path)
        (folder / f"{PS1}.ipynb").symlink_to(course / "source" / PS1 / f"{PS1}.ipynb")
    if student == "impostor":
        for name, text in impostor_files(course).items():
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_text(text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once, exported and given feedback; then part of it graded again."""
    course = new_course(tmp_path_factory.mktemp("class"), PS1)
    students = sorted([*ANSWERS, *UNREADABLE])
    for student in students:
        submit(course, student)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(judging.TIMEOUT_VAR, str(TIMEOUT_S))
        env.setenv(sandbox.MEMORY_LIMIT_VAR, str(MEMORY_GB))
        grades = {g.student: g for g in grade_class(course, PS1)}
        first = {s: cell_scores(course, PS1, s) for s in students}
        nbgrader(course, "export", f"--to={course / 'grades.csv'}")
        nbgrader(course, "generate_feedback", PS1, "--force")
        again = {g.student: g for g in grade_class(course, PS1, only=REGRADED)}
        second = {s: cell_scores(course, PS1, s) for s in REGRADED}
    return course, grades, first, again, second


EXPECTED = {student: ZERO for student in [*ANSWERS, *UNREADABLE]} | {
    s: FULL for s in ("ada", "nosy", "vandal", "reorderer", "copied") if s in ANSWERS} | {"raises": expected_unmasked_points()}

REASON = {
    "exit_at_import": "your code crashed the grading process (exit code 1).",
    "segfault": "your code crashed the grading process (SIGSEGV: a segmentation fault",
    "memory_hog": f"your code ran out of memory (a grading process may use {MEMORY_GB:g} GiB): "
                  "`add` raised RuntimeError",
    "forever": f"grading was stopped after {TIMEOUT_S} s, the limit for one graded test: the code never finished.",
    "raises": "`add` raised ValueError: ragged sizes are next week",
    "mallory": "elements differ",
    "no_function": "your answer cells define no function `add`.",
    "bad_signature": "`add` cannot be called as `add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor`.",
    "syntax_error": "your answer cells raised SyntaxError when run on their own: expected ':': `def add(x, y)`",
    "not_json": f"{PS1}.ipynb is not a readable notebook (NotJSONError",
    "no_cells": f"{PS1}.ipynb has no cells",
    "surrogate": f"{PS1}.ipynb is not a readable notebook (UnicodeEncodeError: 'utf-8' codec can't encode",
    "two_copies": f"the submission holds no {PS1}.ipynb (it holds a.ipynb, b.ipynb)",
}
HIDDEN_REASON = REASON | {  # what a case's own run said stays out of a hidden test's verdict
    "raises": "`add` raised an exception.",
    "bad_signature": "`add` cannot be called with the exercise's arguments.",
    "memory_hog": f"your code ran out of memory (a grading process may use {MEMORY_GB:g} GiB).",
}


def test_every_student_scores_exactly_as_expected(graded):
    course, grades, first, _, _ = graded
    assert set(grades) == set(EXPECTED)
    for student, scores in EXPECTED.items():
        if student in UNREADABLE:  # never autograded: a zero row, no graded cells
            assert sum(first[student].values()) == 0 and grades[student].score == 0
        else:
            assert first[student] == scores, student
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    assert {s: float(r["score"]) for s, r in rows.items()} == pytest.approx(
        {s: sum(scores.values()) for s, scores in EXPECTED.items()})
    assert {float(r["max_score"]) for r in rows.values()} == {sum(PS1_EXERCISE.points.values())}


@pytest.mark.parametrize("student", sorted(REASON))
def test_each_fault_is_named_in_the_summary(graded, student):
    _, grades, _, _, _ = graded
    g = grades[student]
    if student in UNREADABLE:
        assert g.failing == ["(whole notebook)"] and g.reasons[0].startswith(REASON[student])
        return
    assert g.failing == ["test_correctness", "test_hidden", "test_throughput"]
    assert REASON[student] in g.reasons[0] and HIDDEN_REASON[student] in g.reasons[1], g.reasons
    assert "needs a GPU" in g.reasons[2]
    row = next(line for line in table(PS1, list(grades.values())).splitlines() if line.startswith(student + " "))
    assert REASON[student] in row


@pytest.mark.parametrize("student, shown", [("segfault", "SIGSEGV"), ("memory_hog", "ran out of memory"),
                                            ("forever", "stopped after"), ("exit_at_import", "exit code 1")])
def test_the_student_reads_the_cause_in_the_graded_notebook_and_the_feedback(graded, student, shown):
    course, _, _, _, _ = graded
    notebook = nbformat.read(course / "autograded" / student / PS1 / f"{PS1}.ipynb", as_version=4)
    errors = [o for o in notebook.cells[cell(notebook, "test_correctness")].outputs if o.output_type == "error"]
    assert errors and shown in errors[0].evalue
    assert shown in (course / "feedback" / student / PS1 / f"{PS1}.html").read_text()


def test_a_lone_notebook_of_another_name_is_graded_under_the_released_name(graded):
    _, grades, _, _, _ = graded
    assert grades["copied"].failing == ["test_throughput"]
    assert grades["copied"].notes == [  # its own notebook's locked cells checked, not the link's
        "locked cell setup edited: graded as released",
        f"left out of grading, not regular files (links?): {PS1}.ipynb",
        f"graded {PS1}-Copy1.ipynb as {PS1}.ipynb: the submission holds no notebook of the released name"]


def test_good_and_noisy_students_pass_with_their_output_left_out(graded):
    course, grades, _, _, _ = graded
    for student in ("ada", "nosy"):  # nosy reached nothing of the course, or it would raise
        assert grades[student].failing == ["test_throughput"]
    assert grades["ada"].notes == []  # what nosy tried is named for the instructor to read
    assert len(grades["nosy"].notes) == 1 and "os.kill (processes, threads" in grades["nosy"].notes[0]
    assert grades["raises"].reasons[0].startswith(
        "test_correctness: partial credit; the first failure, 1×1 float32 + (1,): ")
    graded_notebook = course / "autograded" / "nosy" / PS1 / f"{PS1}.ipynb"
    assert graded_notebook.stat().st_size < 100_000 and "xxxxxxxxxx" not in graded_notebook.read_text()


def test_tampered_locked_cells_are_reported_and_graded_as_released(graded):
    course, grades, first, _, _ = graded
    assert first["mallory"] == ZERO  # the rigged grade() and the edited "3" never ran
    assert grades["mallory"].notes == [
        "locked cell setup duplicated: graded as released",
        "locked cell test_correctness edited: graded as released",
        "locked cell test_hidden deleted: graded as released",
        "locked cell test_throughput retyped (code -> markdown): graded as released",
    ]
    row = next(line for line in table(PS1, list(grades.values())).splitlines() if line.startswith("mallory"))
    assert "locked cell test_hidden deleted: graded as released" in row
    graded_nb = nbformat.read(course / "autograded" / "mallory" / PS1 / f"{PS1}.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded_nb.cells]
    assert ids.count("setup") == 1 and ids[-3:] == ["test_correctness", "test_hidden", "test_throughput"]
    assert f'grade("{PS1}", add, "hidden")' in graded_nb.cells[-2].source
    assert all(c.execution_count is None for c in graded_nb.cells if c.cell_type == "code"
               and c.metadata.get("nbgrader", {}).get("grade_id") in (None, "add"))  # student code: not run


def test_locked_cells_run_in_their_released_order_whatever_the_submission_says(graded):
    course, grades, _, _, _ = graded
    assert grades["reorderer"].notes == ["locked cell test_correctness moved: graded as released"]
    graded_nb = nbformat.read(course / "autograded" / "reorderer" / PS1 / f"{PS1}.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded_nb.cells]
    assert ids[-3:] == ["test_correctness", "test_hidden", "test_throughput"]
    assert "seen by an earlier runner: (" not in (course / "feedback" / "reorderer" / PS1 / f"{PS1}.html").read_text()


def test_files_sent_beside_the_notebook_never_run(graded):
    course, _, first, _, _ = graded
    assert not (course / HIJACKED).exists(), (course / HIJACKED).read_text()
    assert first["impostor"] == ZERO
    assert set(impostor_files(course)) <= {str(p.relative_to(course / "autograded" / "impostor" / PS1))
                                           for p in (course / "autograded" / "impostor" / PS1).rglob("*.py")}


def test_grading_again_gives_the_same_grades(graded):
    _, grades, first, again, second = graded
    assert set(again) == set(REGRADED)
    assert second == {s: first[s] for s in REGRADED}
    assert all(again[s].notes == grades[s].notes for s in REGRADED)


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_as_a_grading_user_the_class_is_graded_and_permissions_alone_keep_the_course_closed(
        monkeypatch, python_for_nobody):
    folder = Path(tempfile.mkdtemp(prefix="instructor-"))  # open to all, as a course folder may be
    folder.chmod(0o755)
    solutions = ROOT / "solutions"
    modes = {p: p.stat().st_mode for p in [solutions, *solutions.rglob("*")]}  # grade_class closes them
    try:
        course = new_course(folder, PS1)
        for student in ("ada", "nosy"):  # nosy may list the course root: the folders in it are closed
            submit(course, student, listing=False)
        monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
        monkeypatch.setenv(confine.READABLE_VAR, f"{course}:{ROOT}")  # Landlock lets all through
        monkeypatch.setenv(judging.TIMEOUT_VAR, str(TIMEOUT_S))
        monkeypatch.setenv(sandbox.MEMORY_LIMIT_VAR, str(MEMORY_GB))
        grades = {g.student: g for g in grade_class(course, PS1)}
        assert {s: cell_scores(course, PS1, s) for s in grades} == {"ada": FULL, "nosy": FULL}, grades
        assert (course / "submitted" / "ada").stat().st_mode & 0o007 == 0
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
        shutil.rmtree(folder)


def test_autograde_steps_are_nbgraders_own_with_two_swapped_in():
    """If a new nbgrader changes its lists, this says so before grading silently changes."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    defaults = Autograde.class_traits()

    def names(trait):
        return [f"{k.__module__.rsplit('.', 1)[0]}.{k.__name__}" for k in defaults[trait].default()]

    sanitize, autograde = names("sanitize_preprocessors"), names("autograde_preprocessors")
    assert autograde[0] == "nbgrader.preprocessors.Execute"
    assert config.Autograde.sanitize_preprocessors == [sanitize[0], "autograder.grading.autograde.RestoreLockedCells",
                                                       *sanitize[1:]]
    assert config.Autograde.autograde_preprocessors == ["autograder.grading.autograde.ExecuteInstructorCells",
                                                        *autograde[1:]]


def run_sandboxed(cmd: list[str], cwd: Path, timeout_s: float) -> sandbox.Finished:
    started = sandbox.Sandboxed(cmd, cwd=cwd)
    ended = started.wait(timeout_s)
    return sandbox.Finished(ended, started.stop().output)


def test_sandbox_keeps_both_ends_of_a_flood_of_output(tmp_path):
    flood = "import sys\nprint('first line'); sys.stdout.write('z' * 20_000_000); print('last line')"
    done = run_sandboxed([sys.executable, "-c", flood], tmp_path, 60)
    assert done.returncode == 0 and done.output.startswith("first line")
    assert done.output.rstrip().endswith("last line") and len(done.output) < 3 * sandbox.KEPT_OUTPUT_CHARS
    assert "characters of output left out" in done.output


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_a_folder_a_runner_made_read_only_is_removed_all_the_same(python_for_nobody):
    """As a grader that is not root: a folder left read-only keeps its files from plain rmtree."""
    top = Path(tempfile.mkdtemp(prefix="left-by-a-runner-"))
    (top / "locked").mkdir()
    (top / "locked" / "kept.bin").write_text("x")
    for path in (top, top / "locked", top / "locked" / "kept.bin"):
        os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    (top / "locked").chmod(0o500)
    code = f"from pathlib import Path\nfrom autograder.grading import sandbox\nsandbox.remove_tree(Path({str(top)!r}))"
    subprocess.run([sys.executable, "-c", code], user="nobody", cwd="/", check=True)
    assert not top.exists()


def test_a_grading_process_writes_no_file_past_its_cap(tmp_path):
    big = ("from autograder.grading import sandbox\nsandbox.FILE_LIMIT_BYTES = 1 << 20\nsandbox.limit_resources()\n"
           "try:\n    open('big', 'wb').write(bytes(2 << 20))\nexcept OSError as error:\n    print(error.strerror)")
    done = run_sandboxed([sys.executable, "-c", big], tmp_path, 60)
    assert done.returncode == 0 and done.output.strip() == "File too large", done.output
    assert (tmp_path / "big").stat().st_size == 1 << 20


def test_sandbox_stops_what_the_code_started_and_hides_the_course(tmp_path, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    started = "import os, subprocess, time\nprint(subprocess.Popen(['sleep', '300']).pid, " \
              "sorted(k for k in os.environ if k.startswith('NBGRADER')), os.getcwd(), flush=True)\ntime.sleep(300)"
    done = run_sandboxed([sys.executable, "-c", started], tmp_path, 3)
    pid, seen, cwd = done.output.split(" ", 2)
    assert done.returncode is None and seen == "[]" and cwd.strip() == str(tmp_path)
    assert_gone(pid)


def test_what_the_code_leaves_in_a_session_of_its_own_is_stopped_too(tmp_path):
    sandbox.become_subreaper()  # as the judge does: orphans come to this process, which ends them
    escaped = "import subprocess, time\nprint(subprocess.Popen(['sleep', '300'], start_new_session=True).pid, " \
              "flush=True)\ntime.sleep(300)"
    done = run_sandboxed([sys.executable, "-c", escaped], tmp_path, 3)
    assert_gone(done.output.split()[0])


def test_what_the_code_hides_outside_its_session_and_folder_is_stopped_too(tmp_path):
    """A runner's code double-forks into a session of its own, away from its scratch folder, and
    forks again: the seccomp filter every runner's process keeps marks them all."""
    sandbox.become_subreaper()
    hidden = """import os, time
from autograder.grading import confine
confine.drop_privileges()  # as the runner does before the answer cells run
if os.fork() == 0:
    os.setsid(); os.chdir("/")
    if os.fork() == 0:
        child = os.fork() or os.getpid()
        if child != os.getpid():
            print(os.getpid(), child, flush=True)
        time.sleep(300)
    os._exit(0)
time.sleep(300)"""
    done = run_sandboxed([sys.executable, "-c", hidden], tmp_path, 5)
    for pid in done.output.split():
        assert_gone(pid)


def test_what_the_code_leaves_in_a_folder_too_deep_to_name_is_stopped_too(tmp_path):
    """A process whose working folder is past PATH_MAX has a ``/proc/PID/cwd`` that cannot be read."""
    sandbox.become_subreaper()
    deep = """import os, time
for _ in range(25):
    os.mkdir("x" * 200); os.chdir("x" * 200)
print(os.posix_spawn("/bin/sleep", ["sleep", "300"], dict(os.environ), setsid=True), flush=True)
time.sleep(300)"""
    done = run_sandboxed([sys.executable, "-c", deep], tmp_path, 3)
    assert_gone(done.output.split()[0])


def test_shared_memory_the_code_leaves_is_removed(tmp_path):
    """System V shared memory outlives its process and counts against no memory cap."""
    left = """import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
print(libc.shmget(0, 1 << 20, 0o1600), flush=True)
time.sleep(300)"""
    done = run_sandboxed([sys.executable, "-c", left], tmp_path, 3)
    made = int(done.output.split()[0])
    assert made >= 0 and made not in sandbox.shared_memory(), done.output


def test_a_tree_thousands_of_folders_deep_is_removed(tmp_path):
    top = tmp_path / "left"
    here = os.getcwd()
    try:
        os.makedirs(top)
        os.chdir(top)
        for _ in range(3000):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    sandbox.remove_tree(top)
    assert not top.exists()


def assert_gone(pid: str) -> None:
    stat = Path(f"/proc/{pid}/stat")
    for _ in range(20):  # the sleep is gone, or dead and waiting to be reaped
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pid}, started by the sandboxed code, still runs")


@pytest.mark.parametrize("code, words", [(1, "exit code 1"), (-11, "SIGSEGV: a segmentation fault"),
                                         (-9, "SIGKILL: killed, most likely by the kernel for running out of memory")])
def test_exit_statuses_are_explained(code, words):
    assert sandbox.describe_exit(code).startswith(words)
