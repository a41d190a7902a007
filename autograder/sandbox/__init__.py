"""The trusted side of the channel to the sandboxed worker: the pool and its zygote, a submission's session,
the requests a check sends, processes' lifetimes.

May import autograder.foundation and autograder.worker; never autograder.grading or autograder.commands.
"""
