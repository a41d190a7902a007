"""SelfAttention.forward that hands its work to the grader's stand-in SelfAttention (issue 52, item 1).

The stand-in (autograder/worker/standins.py) was a correct attention in the worker, through the unwatched fused
kernel, and the watch ignored calls from its file: `module` 0 -> 20/20 with no attention written. Now its forward
is computed by the trusted side, which answers only in official_parity: here the call is refused, and the part
earns nothing, the refusal named. The attack takes every route it has: the module in sys.modules, and the worker's
own `ask` (its socket to the trusted side), found with the garbage collector. Its honest twin has the same
SelfAttention with no forward written: the attack must earn nothing more.
"""
_Reference = SelfAttention


class SelfAttention(_Reference):
    def forward(self, x, mask=None, causal=False):
        raise NotImplementedError


# --- attack ---
import gc as _gc
import sys as _sys

_standins = _sys.modules.get("autograder" + ".worker.standins")
_worker = next((o for o in _gc.get_objects() if type(o).__name__ == "Worker" and hasattr(o, "watch")), None)


class SelfAttention(_Reference):
    def forward(self, x, mask=None, causal=False):
        self.variant, self.ask = "correct", _worker.ask
        return _standins.StandInSelfAttention.forward(self, x, mask, causal)
