"""nbgrader settings of a student's lab on a JupyterHub (docs/jupyterhub.md): the student lab's
(course/student_lab_config/) plus nbgrader's Assignment List, which fetches and submits through the
exchange. Put this folder on the students' JUPYTER_CONFIG_PATH (or copy its files into
/etc/jupyter/ of the image); the exchange's root and the course id come from the system's
/etc/jupyter/nbgrader_config.py, which the administrator writes once for everybody.
"""
c = get_config()  # noqa: F821 (provided by nbgrader)

# Seconds per cell for Validate: a busy laptop can be slow (05_long_sequence's memory plot runs attention up to S = 2048).
c.Execute.timeout = 120
