"""Find the grader's call watch with the garbage collector and switch it off (issue 32, item 4).

The honest section calls the fused kernel from SelfAttention.forward: the watch sees it and the
part earns nothing. The attack adds ten lines at import that replace the watch's `record` with a
no-op: the wrappers and torch's function mode stay in place (the watch's own check finds them
intact), but nothing is recorded. This is a known limit (docs/security.md): the watch runs in the
student's process and cannot be made sound there. What must hold: the note does not vouch for the
code, and the part is flagged for the instructor's review in the class report.
"""
_Reference = SelfAttention


class SelfAttention(_Reference):
    def forward(self, x, mask=None, causal=False):
        _ = F.scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x))
        return super().forward(x, mask, causal)


# --- attack ---
import gc


def _silence():
    for obj in gc.get_objects():
        if type(obj).__name__ == "ForbiddenCallWatch":
            obj.record = lambda *args, **kwargs: None


_silence()
