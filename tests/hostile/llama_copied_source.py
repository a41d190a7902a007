"""`llama` graded on the library's own repeat_kv, copied into the student's namespace at load time (issue 52, item 2).

Compiled in the student's namespace, the library's code would run under the student's name, unseen by the watch:
the part earned 30/30. In the worker the library is absent: its files are covered (the disk route finds nothing)
and `transformers` is the grader's shell (the import route raises the rule at once). The student's own repeat_kv
was deleted first, so the part earns nothing, and the load note names the rule.
"""
# --- attack ---
import inspect
import os
import sys

del repeat_kv
for _entry in sys.path:  # the library's file, read from the disk
    try:
        with open(os.path.join(_entry, "transformers", "models", "llama", "modeling_llama.py")) as _file:
            _source = _file.read()
    except OSError:
        continue
    _start = _source.index("def repeat_kv(")
    exec(_source[_start:_source.index("\n\n\n", _start)], globals())
    break
else:  # the import route
    from transformers.models.llama import modeling_llama

    exec(inspect.getsource(modeling_llama.repeat_kv), globals())
