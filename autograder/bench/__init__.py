"""The GPU benchmark: ``python -m autograder.bench`` (:mod:`.run`) times every sweep of
:mod:`.sweeps` and checks and times each problem set's reference with the self-check a student
runs, and records the results in ``results/gpu/``."""
