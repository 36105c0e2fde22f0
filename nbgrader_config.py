"""nbgrader settings for running the course on one machine (see README, "As an instructor")."""
from pathlib import Path

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file
here = Path(__file__).resolve().parent

c.CourseDirectory.course_id = "triton-course"
c.CourseDirectory.root = str(here)
# Release, fetch, submit and collect through a folder on this machine.
c.Exchange.root = str(here / "exchange")
c.Exchange.path_includes_course = True

# A first call JIT-compiles its kernel (seconds on a GPU) and autotuning times every
# configuration; the interpreter runs one program at a time. 30 s (the default) is too short.
# Above autograder.grading.judge's 240 s per graded test, so a hang is reported by the test.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True

# Triton and PyTorch write warnings to stderr, and nbgrader scores any cell with stderr
# output 0. Failures surface as errors, never as stderr, so drop stderr before grading.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]*"

# Autograde runs the instructor's cells only, each rebuilt from the gradebook: a deleted,
# duplicated, edited or retyped locked cell is graded as released, and nothing the student
# wrote runs in the tests' kernel, which is the judge: each graded cell has the answer cells
# run in a separate runner process and judges what comes back (autograder/grading/).
# (autograder/grading/autograde.py; these are nbgrader 0.9's lists with the two steps swapped in.)
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "autograder.grading.autograde.RestoreLockedCells",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "autograder.grading.autograde.ExecuteInstructorCells",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# TRITON_COURSE_LANG=zh releases the Chinese version (autograder/instructor/translation.py): its
# Markdown and code comments from student/zh/translations/, every graded cell's code, id and
# point as in the English one.
# (nbgrader 0.9's list with the translation first.)
c.GenerateAssignment.preprocessors = [
    "autograder.instructor.translation.Translate",
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.InstantiateTests",
    "nbgrader.preprocessors.LockCells",
    "nbgrader.preprocessors.ClearSolutions",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.SaveCells",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# What a student's version holds where the solution was: a sentence, not a bare exception.
from autograder.instructor.translation import code_stub  # noqa: E402 - after get_config, as nbgrader reads it

c.ClearSolutions.code_stub = code_stub()

# Feedback shows the verdicts of hidden tests but not their code.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
