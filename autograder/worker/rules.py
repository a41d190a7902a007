"""What the worker says when a student's code reaches for the grader's own helpers: texts the trusted side knows, so
that it reads them back in the submission's language (foundation/failures.py, worker_text). No torch here: the
trusted side imports this before torch."""
from __future__ import annotations

# the name of the grader's stand-in SelfAttention's forward (standins.py): a "piece" message (borrowed.py) that the
# trusted side answers only in the part whose checks hand the stand-in out (checks/self_attention/standin.py)
STANDIN_FORWARD = "attention_standin"
# what a grader's helper that computes attention raises when it is not the grader's own call (standins.builtins: flex_attend)
NOT_THE_GRADERS_CALL = ("the grader's {name} runs only inside the grader's own checks, never for your code: compute "
                        "the attention yourself")
