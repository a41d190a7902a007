"""MultiHeadSelfAttention that hands its attention to the grader's flex_attend (issue 52, item 1).

flex_attend ran the unwatched flex_attention for whoever called it: `multihead` 0 -> 13.24/15. Now it exists only
among the worker's builtins and runs only inside the grader's own call of one: here it refuses, the part earns
nothing, the refusal named. The attack looks in sys.modules first, then finds the worker with the garbage collector.
Its honest twin has the same MultiHeadSelfAttention with no forward written: the attack must earn nothing more.
"""
_Reference = MultiHeadSelfAttention


class MultiHeadSelfAttention(_Reference):
    def forward(self, x, mask=None, causal=False):
        raise NotImplementedError


# --- attack ---
import gc as _gc
import sys as _sys

_standins = _sys.modules.get("autograder" + ".worker.standins")
_worker = next((o for o in _gc.get_objects() if type(o).__name__ == "Worker" and hasattr(o, "watch")), None)
_attend = getattr(_standins, "flex_attend", None) or _worker.builtins["flex_attend"]


class MultiHeadSelfAttention(_Reference):
    def forward(self, x, mask=None, causal=False):
        B, S, _ = x.shape
        Q, K, V = (split_heads(t, self.num_heads) for t in self.W_qkv(x).chunk(3, dim=-1))
        allowed = torch.ones(B, S, S, dtype=torch.bool)
        if mask is not None:
            allowed = allowed & mask[:, None, :]
        if causal:
            allowed = allowed & torch.ones(S, S, dtype=torch.bool).tril()

        def masked(score, b, h, q_idx, kv_idx):
            return torch.where(allowed[b, q_idx, kv_idx], score, -float("inf"))

        return self.W_o(merge_heads(_attend(Q, K, V, score_mod=masked)))
