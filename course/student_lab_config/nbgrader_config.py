"""nbgrader settings of the student's lab (course/lab.py puts this folder on JUPYTER_CONFIG_PATH).

Read by the Validate button, which runs the whole notebook in a fresh kernel before it reports.
"""
c = get_config()  # noqa: F821 (provided by nbgrader)

# Seconds per cell: a busy laptop can be slow (05_long_sequence's memory plot runs attention up to S = 2048).
c.Execute.timeout = 120

# `nbgrader validate NOTEBOOK` in a terminal: its frame in the notebook's language. The Chinese edition's folders end in
# _zh; validating only such notebooks gives the frame below in Chinese (what each failing cell says is already the
# notebook's language). The success line "Success! Your notebook passes all the tests." is no setting of nbgrader's
# (nbgrader/validator.py, Validator._print_num_failed; the Validate button's dialog is its lab extension's): README,
# "Students", says what it means in both languages.
import sys  # noqa: E402 - a config file: its settings first
from pathlib import Path  # noqa: E402

_notebooks = [Path(arg) for arg in sys.argv[1:] if arg.endswith(".ipynb")]
if _notebooks and all(p.resolve().parent.name.endswith("_zh") for p in _notebooks):
    c.Validator.failed_warning = "验证没有通过：有 {num_failed} 个单元格失败！照现在的样子提交，你拿不到满分。\n"
    c.Validator.changed_warning = "有 {num_changed} 个检查单元格的内容被改过！即使现在能通过，评分时也可能通不过。\n"
    c.Validator.type_changed_warning = "有 {num_changed} 个单元格的类型被改过！即使现在能通过，评分时也可能通不过。\n"
