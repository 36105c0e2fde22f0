"""The GPU benchmark: ``python -m autograder.bench`` (:mod:`.run`) times every sweep of
:mod:`.sweeps` and grades each problem set's reference as a submission, and records the results
in ``results/gpu/``."""
