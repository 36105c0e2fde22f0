"""The instructor's tools, behind the ``triton-course`` command (:mod:`.cli`): ``sync`` (generated
notebook cells, figures and translations: :mod:`.sync`; student versions: :mod:`.student_versions`),
``grade`` (a class, its students side by side: :mod:`.grade_class`, :mod:`.grade_workers`),
``distribute`` (the students' copy: :mod:`.distribution`) and ``new`` (a problem set: :mod:`.scaffold`).
Nothing here runs in a student's notebook."""
