"""The nbgrader assignments' declarations, one module each, named as the assignment."""
