"""The content of the third assignment's five notebooks, in order (assignment `efficient`).
Each module defines NAME, HINTS, DOCSTRINGS_ZH and cells(), like the other assignments'. The demos print
and plot through `say("English {field}", field=...)`, whose Chinese text is in the visible checks' catalog
(listed in course/efficient_demo_text.py)."""
from . import flash, flash_backward, flex, linear, sliding_window

MODULES = (flash, flash_backward, sliding_window, linear, flex)  # spec.py's order: 05_flash_backward follows 01_flash
