"""The foundation: the course contract (spec), messages (i18n), results and failures, limits, and reading
a submission without running it.

May import autograder.worker only (its names); never a layer above.
"""
