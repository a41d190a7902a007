"""The content of the third assignment's four notebooks, in order (assignment `efficient`).
Each module defines NAME, HINTS, DOCSTRINGS_ZH and cells(), like the other assignments'. The demos print
and plot through `say("English {field}", field=...)`, whose Chinese text is in the visible checks' catalog
(listed in course/efficient_demo_text.py)."""
from . import flash, flex, linear, sliding_window

MODULES = (flash, sliding_window, linear, flex)
