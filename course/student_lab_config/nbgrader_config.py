"""nbgrader settings of the student's lab (course/lab.py puts this folder on JUPYTER_CONFIG_PATH).

Read by the Validate button, which runs the whole notebook in a fresh kernel before it reports.
"""
c = get_config()  # noqa: F821 (provided by nbgrader)

# Seconds per cell: a busy laptop can be slow (05_long_sequence's memory plot runs attention up to S = 2048).
c.Execute.timeout = 120
