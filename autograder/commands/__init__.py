"""Commands: what a person runs (the command line, grade-class, grade-gpu, the demo, Gradescope) and the
course's files they read and write (gradebook, lock, resume state, reports).

May import autograder.grading, autograder.sandbox, autograder.foundation and autograder.worker;
nothing imports this package except the entry points (autograder/__main__.py, nbgrader_plugin.py).
"""
