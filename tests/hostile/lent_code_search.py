"""Search the worker for the grader's code of the pieces lent to SelfAttention, and put it in the report."""
def scaled_scores(Q, K):
    return Q @ K.transpose(-2, -1)  # no scale: the module part is graded with the grader's scaled_scores
# --- attack ---
import gc
import inspect
import sys

BORROWED = ("scaled_scores", "attention_weights", "attend", "padding_mask", "causal_mask", "apply_padding_mask",
            "apply_causal_mask")


def _code_of(obj):
    """What the attack can read of a function that is not the student's: its code and its source."""
    if not inspect.isfunction(obj) or obj.__code__.co_filename.startswith("<student:") or obj.__name__ not in BORROWED:
        return []
    found = [f"{obj.__name__}@{obj.__code__.co_filename}:{obj.__code__.co_consts!r}"]
    try:
        found.append(inspect.getsource(obj))
    except (OSError, TypeError):
        pass
    return found


def _search():
    """Every borrowed function that is not the student's, and every text holding a def of one, in the frames
    up to the worker, their globals and whatever the garbage collector tracks (the worker object included)."""
    objects, frame = list(gc.get_objects()), sys._getframe()
    while frame is not None:
        objects += list(frame.f_globals.values()) + list(frame.f_locals.values())
        objects += [vars(v) for v in frame.f_locals.values() if hasattr(v, "__dict__") and not isinstance(v, type)]
        frame = frame.f_back
    found = []
    for obj in objects:
        found += _code_of(obj)
        if isinstance(obj, dict):
            found += [t for t in list(obj) + list(obj.values()) if isinstance(t, str)
                      and any(f"def {name}(" in t for name in BORROWED)]
    return found


class SelfAttention(SelfAttention):
    def forward(self, x, mask=None, causal=False):
        found = _search()
        raise RuntimeError(f"LEAK {len(found)}: " + " || ".join(found)[:400])
