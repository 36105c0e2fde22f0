"""autograder/settings.py is the one place a course variable is read: each has its default when
unset, a bad value gets a sentence naming the variable and what it accepts, and the guide's
table is the one settings.py renders."""
import ast
import getpass
import os
import re
from pathlib import Path

import pytest

from autograder import settings
from conftest import ROOT

PACKAGE = ROOT / "autograder"
ALIASES = {m for path in PACKAGE.rglob("*.py")
           for m in re.findall(r"^(\w+) = settings\.\w+\.name$", path.read_text(encoding="utf-8"), re.M)}
"""Module constants that other code and tests know a variable by (``ISOLATE_VAR``, ...)."""
DEFAULTS = {
    settings.DEVICE: "auto",
    settings.CPU_THROUGHPUT: "fail",
    settings.LANG: "en",
    settings.STUDENT: getpass.getuser(),
    settings.ISOLATE: "0",
    settings.GRADING_TIMEOUT_S: 240.0,
    settings.MEMORY_LIMIT_GB: os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**31,
    settings.GRADING_USER: None,
    settings.PROCESS_LIMIT: 4096,
    settings.READABLE_PATHS: [],
    settings.NOTEBOOK_OUTPUTS: None,
    settings.GRADING_RECORD: None,
    settings.WORKER_CPUS: None,
}
BAD = [(settings.DEVICE, "gpuu"), (settings.CPU_THROUGHPUT, "maybe"), (settings.LANG, "de"),
       (settings.ISOLATE, "yes"), (settings.GRADING_TIMEOUT_S, "soon"), (settings.GRADING_TIMEOUT_S, "0"),
       (settings.MEMORY_LIMIT_GB, "lots"), (settings.MEMORY_LIMIT_GB, "-1"), (settings.MEMORY_LIMIT_GB, "inf"),
       (settings.WORKER_CPUS, "0-3"), (settings.PROCESS_LIMIT, "many"), (settings.PROCESS_LIMIT, "0")]


def course_variables_read(source: str) -> list[str]:
    """What in ``source`` names a course variable outside a docstring, or reads the environment
    by a setting's ``.name`` or one of its :data:`ALIASES`: reads that belong to settings.py."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and "TRITON_COURSE_" in node.value and id(node) not in docstrings]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            key = node.slice
        else:
            continue
        if ast.unparse(key).endswith(".name") or ast.unparse(key).split(".")[-1] in ALIASES:
            found.append(ast.unparse(node))
    return found


def test_the_scan_finds_a_read_and_passes_a_mention():
    assert course_variables_read('import os\nos.environ.get("TRITON_COURSE_DEVICE", "auto")')
    assert course_variables_read("import os\nos.environ[judge.ISOLATE_VAR]")
    assert course_variables_read("import os\nos.getenv(settings.LANG.name)")
    assert not course_variables_read('"""Set TRITON_COURSE_DEVICE=cpu."""\nimport os\nos.environ.get("CC")')


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_but_settings_reads_a_course_variable(path):
    if path != PACKAGE / "settings.py":
        assert course_variables_read(path.read_text(encoding="utf-8")) == []


def test_every_setting_is_a_course_variable_declared_once():
    names = [s.name for s in settings.SETTINGS]
    assert len(set(names)) == len(names) and all(n.startswith("TRITON_COURSE_") for n in names)
    assert set(DEFAULTS) == set(settings.SETTINGS)


@pytest.mark.parametrize("setting", settings.SETTINGS, ids=lambda s: s.name)
@pytest.mark.parametrize("unset", [None, "  "], ids=["unset", "blank"])
def test_each_default_applies_when_unset(setting, unset, monkeypatch):
    if unset is None:
        monkeypatch.delenv(setting.name, raising=False)
    else:
        monkeypatch.setenv(setting.name, unset)
    assert setting.get() == DEFAULTS[setting]


def test_a_value_set_after_import_counts(monkeypatch):
    monkeypatch.setenv(settings.DEVICE.name, " CPU ")
    monkeypatch.setenv(settings.MEMORY_LIMIT_GB.name, "1.5")
    monkeypatch.setenv(settings.READABLE_PATHS.name, f"/opt/cuda{os.pathsep}{os.pathsep}/srv/lib")
    assert settings.DEVICE.get() == "cpu" and settings.MEMORY_LIMIT_GB.get() == 1.5
    assert settings.READABLE_PATHS.get() == [Path("/opt/cuda"), Path("/srv/lib")]


@pytest.mark.parametrize("setting, value", BAD, ids=lambda x: x if isinstance(x, str) else x.name)
def test_a_bad_value_names_the_variable_and_what_it_accepts(setting, value, monkeypatch):
    monkeypatch.setenv(setting.name, value)
    with pytest.raises(ValueError) as raised:
        setting.get()
    assert str(raised.value) == f"{setting.name}={value!r}: use {setting.values}; unset means {setting.default}."


def test_the_cpu_throughput_sentence(monkeypatch):
    monkeypatch.setenv("TRITON_COURSE_CPU_THROUGHPUT", "maybe")
    with pytest.raises(ValueError, match=re.escape(
            "TRITON_COURSE_CPU_THROUGHPUT='maybe': use one of fail, award; unset means fail.")):
        settings.CPU_THROUGHPUT.get()


def test_the_guides_table_is_the_one_settings_renders():
    assert settings.sync_guide(write=False) == []
    for setting in settings.SETTINGS:
        assert f"| `{setting.name}` | {setting.default} | {setting.values} |" in settings.GUIDE.read_text()


def test_a_drifted_table_is_reported_then_rewritten(tmp_path, monkeypatch):
    guide = tmp_path / "guide.md"
    original = settings.GUIDE.read_text(encoding="utf-8")
    guide.write_text(original.replace("| 240 |", "| 300 |"), encoding="utf-8")
    monkeypatch.setattr(settings, "GUIDE", guide)
    assert settings.main(["--check"]) == 1 and guide.read_text(encoding="utf-8") != original
    assert settings.main([]) == 0 and guide.read_text(encoding="utf-8") == original
    guide.write_text("# no table here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no '<!-- settings table"):
        settings.sync_guide(write=False)
