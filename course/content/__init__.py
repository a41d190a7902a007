"""The content of the five notebooks, in order. Each module defines NAME, HINTS and cells()."""
from . import n01_scores, n02_masks, n03_module, n04_multihead, n05_long_sequence

MODULES = (n01_scores, n02_masks, n03_module, n04_multihead, n05_long_sequence)
