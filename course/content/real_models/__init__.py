"""The content of the fourth assignment's three notebooks, in order (assignment `real_models`).
Each module defines NAME, HINTS, RECIPES, DOCSTRINGS_ZH, DEMO_ZH and cells(), like the other assignments'."""
from . import bert, gpt2, interface, llama

MODULES = (gpt2, bert, llama, interface)
