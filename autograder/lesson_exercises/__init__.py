"""One module per lesson exercise, each defining ``EXERCISE`` (found by autograder.exercises)."""
