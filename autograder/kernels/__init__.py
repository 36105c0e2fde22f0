"""The lessons' live kernels, as the lessons print them (:mod:`autograder.instructor.sync`
copies each section marked ``# --- notebook cell: NAME ---`` into its cell). Students get
these; the answers to exercises are in ``solutions/``, which they never get."""
