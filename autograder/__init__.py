"""The hidden autograder of the self-attention course.

Keep this file free of imports: the sandboxed worker imports `autograder.worker`
through it, and must find nothing of the grader or the solutions in memory.
"""
