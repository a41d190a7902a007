"""The content of the fifth assignment's six notebooks, in order (assignment `serving`: attention as inference servers
run it). Each module defines NAME, HINTS, DOCSTRINGS_ZH, DEMO_ZH and cells(), like the other assignments'; a notebook
whose graded code or demos call a function of an earlier notebook carries the student's copy (its PIECES)."""
from . import attention_sinks, continuous_batching, paged_attention, paged_cache, prefix_sharing, varlen

MODULES = (varlen, paged_cache, paged_attention, prefix_sharing, continuous_batching, attention_sinks)
