"""What each lesson's live kernel (:mod:`autograder.kernels`) is checked against: cases,
tolerances and the throughput the benchmark measures. Not graded: no points, no hidden cases."""
