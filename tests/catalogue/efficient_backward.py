"""The catalogue cases of `efficient`'s part flash_backward (imported into tests/catalogue/efficient.py's CASES):
textual edits of solutions/efficient.py's flash_attention_backward and FlashAttentionFunction, each losing exactly
flash_backward with its mistake named, and right variants written another way (key blocks outside, query blocks
inside, as FlashAttention 2's backward; every causal tile computed and masked, none skipped; each tile's gradients
by torch.func.vjp; @torch.compile)."""
from __future__ import annotations


def cases(Case) -> tuple:
    """The cases, built with tests/catalogue/build.py's Case."""
    return (
        Case("bwd_no_delta", "dS = P * dP: delta = rowsum(grad_out * out) omitted",
             (("flash_attention_backward", "ds = p * (dp - delta[:, :, i0:i1, None])", "ds = p * dp"),),
             lose=("flash_backward",), says="you left delta out"),
        Case("bwd_grad_q_unscaled", "grad_q = dS k without the 1 / sqrt(D)",
             (("flash_attention_backward", "grad_q[:, :, i0:i1] += ds @ k_blk * scale",
               "grad_q[:, :, i0:i1] += ds @ k_blk"),),
             lose=("flash_backward",), says="multiplies grad_q too"),
        Case("bwd_grad_k_unscaled", "grad_k = dS^T q without the 1 / sqrt(D)",
             (("flash_attention_backward", "grad_k[:, :, j0:j1] += ds.transpose(-2, -1) @ q_blk * scale",
               "grad_k[:, :, j0:j1] += ds.transpose(-2, -1) @ q_blk"),),
             lose=("flash_backward",), says="multiplies grad_k too"),
        Case("bwd_tile_softmax", "P recomputed as the softmax of each tile (normalised by its own sum, not the lse)",
             (("flash_attention_backward", "p = torch.exp(s - lse_safe[:, :, i0:i1, None])",
               "p = torch.softmax(s, dim=-1).nan_to_num(0.0)"),),
             lose=("flash_backward",), says="the tile's own sum"),
        Case("bwd_p_scaled_twice", "P = exp(s * scale - lse) on scores s = q k^T * scale that already hold the scale "
             "(notebook 05 section 3's formula read with section 1's S)",
             (("flash_attention_backward", "p = torch.exp(s - lse_safe[:, :, i0:i1, None])",
               "p = torch.exp(s * scale - lse_safe[:, :, i0:i1, None])"),),
             lose=("flash_backward",), says="you scaled the scores twice"),
        Case("bwd_p_unscaled", "P = exp(q k^T - lse): the scores recomputed without the scale (the gradients keep it)",
             (("flash_attention_backward", "s = q_blk @ k_blk.transpose(-2, -1) * scale  # [B, H, bq, bk]",
               "s = q_blk @ k_blk.transpose(-2, -1)  # [B, H, bq, bk]"),),
             lose=("flash_backward",), says="you left the scale out of the recomputed scores"),
        Case("bwd_top_left_causal", "the backward's causal mask is top-left aligned (no S_k - S_q offset)",
             (("flash_attention_backward", "offset = S_k - S_q  #", "offset = 0  #"),),
             lose=("flash_backward",), says="top-left"),
        Case("bwd_nan_on_empty_rows", "lse = -inf used as is: exp(-inf - (-inf)) is NaN for a query that sees no key",
             (("flash_attention_backward",
               'lse_safe = lse.to(acc).masked_fill(lse == float("-inf"), float("inf"))', "lse_safe = lse.to(acc)"),),
             lose=("flash_backward",), says="exp(-inf - (-inf)) is NaN"),
        Case("bwd_half_accumulation", "the backward accumulates in the inputs' dtype (float16)",
             (("flash_attention_backward",
               "acc = torch.float64 if q.dtype == torch.float64 else torch.float32", "acc = q.dtype"),),
             lose=("flash_backward",), says="accumulated in float16"),
        Case("bwd_skips_visible_blocks", "key blocks skipped after the last key of the block's FIRST query",
             (("flash_attention_backward", "kv_stop = min(S_k, i1 + offset) if causal",
               "kv_stop = min(S_k, i0 + 1 + offset) if causal"),),
             lose=("flash_backward",), says="you skipped key blocks"),
        Case("bwd_full_matrix", "MEMORY ONLY: the right gradients from the whole [B, H, S_q, S_k] probabilities",
             (("flash_attention_backward", None, BACKWARD_DENSE),),
             lose=("flash_backward",), says="of tensors at once"),
        Case("fn_saves_probabilities", "FlashAttentionFunction's forward also saves the [S_q, S_k] probabilities",
             (("FlashAttentionFunction", "ctx.save_for_backward(q, k, v, out, lse)",
               "p = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)\n"
               "        ctx.save_for_backward(q, k, v, out, lse, p)"),
              ("FlashAttentionFunction", "q, k, v, out, lse = ctx.saved_tensors",
               "q, k, v, out, lse, p = ctx.saved_tensors")),
             lose=("flash_backward",), says="you kept the [S_q, S_k] probabilities"),
        Case("fn_forgets_causal", "FlashAttentionFunction's backward forgets causal (always the full mask)",
             (("FlashAttentionFunction", "out, lse, grad_out, causal=ctx.causal)", "out, lse, grad_out)"),),
             lose=("flash_backward",), says="against your flash_attention_backward"),
        Case("bwd_half_gradient_buffers", "each tile in float32, but grad_q, grad_k and grad_v summed in float16 buffers",
             (("flash_attention_backward", "grad_q = torch.zeros(q.shape, dtype=acc",
               "grad_q = torch.zeros(q.shape, dtype=q.dtype"),
              ("flash_attention_backward", "grad_k = torch.zeros(k.shape, dtype=acc",
               "grad_k = torch.zeros(k.shape, dtype=k.dtype"),
              ("flash_attention_backward", "grad_v = torch.zeros(v.shape, dtype=acc",
               "grad_v = torch.zeros(v.shape, dtype=v.dtype")),
             lose=("flash_backward",), says="you accumulated the gradients in float16 over 128 query blocks"),
        Case("bwd_causal_named_is_causal", "flash_attention_backward names its flag is_causal (the checks' causal= "
             "fails); FlashAttentionFunction passes it by position and is right",
             (("flash_attention_backward", "    causal: bool = False, block_q", "    is_causal: bool = False, block_q"),
              ("flash_attention_backward", "    B, H, S_q, D = q.shape\n", "    causal = is_causal\n    B, H, S_q, D = q.shape\n"),
              ("FlashAttentionFunction", "out, lse, grad_out, causal=ctx.causal)", "out, lse, grad_out, ctx.causal)")),
             lose=("flash_backward",), says="unexpected keyword argument 'causal'"),
        # ------------------------------------------------------------------ correct variants
        Case("ok_bwd_key_blocks_outside", "FlashAttention 2's order: key blocks outside, query blocks inside",
             (("flash_attention_backward", None, BACKWARD_KEY_OUTER),)),
        Case("ok_bwd_no_skipping", "every tile computed and masked, none skipped (as ok_flash_no_skipping in the "
             "forward): the same gradients, more work; skipping is not graded",
             (("flash_attention_backward", "kv_stop = min(S_k, i1 + offset) if causal else S_k", "kv_stop = S_k"),
              ("flash_attention_backward", "if causal and j1 - 1 > i0 + offset:", "if causal:"))),
        Case("ok_bwd_torch_func", "each tile's gradients by torch.func.vjp of (P v, rowsum P) with lse held fixed",
             (("flash_attention_backward", None, BACKWARD_VJP),)),
        Case("ok_bwd_compiled", "flash_attention_backward decorated with @torch.compile (graded as the same code, "
             "eager in the sandbox: as its plain twin)",
             (("flash_attention_backward", "def flash_attention_backward(",
               "@torch.compile\ndef flash_attention_backward("),)),
    )


BACKWARD_DENSE = '''def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    S_q, S_k = q.shape[-2], k.shape[-2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    qa, ka, va, do = q.to(acc), k.to(acc), v.to(acc), grad_out.to(acc)
    s = qa @ ka.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, S_q, S_k]: all of it
    if causal:
        s = s.masked_fill(~torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q), float("-inf"))
    p = torch.exp(s - lse.to(acc).masked_fill(lse == float("-inf"), float("inf"))[..., None])
    dp = do @ va.transpose(-2, -1)
    ds = p * (dp - (do * out.to(acc)).sum(-1, keepdim=True))
    scale = 1 / math.sqrt(q.shape[-1])
    return ((ds @ ka * scale).to(q.dtype), (ds.transpose(-2, -1) @ qa * scale).to(k.dtype),
            (p.transpose(-2, -1) @ do).to(v.dtype))
'''

BACKWARD_KEY_OUTER = '''def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale, offset = D ** -0.5, S_k - S_q
    grad_q = torch.zeros(q.shape, dtype=acc)
    grad_k, grad_v = torch.zeros(k.shape, dtype=acc), torch.zeros(v.shape, dtype=acc)
    delta = torch.einsum("bhqd,bhqd->bhq", grad_out.to(acc), out.to(acc))
    lse_safe = torch.where(torch.isinf(lse) & (lse < 0), torch.inf, lse.to(acc))
    for j0 in range(0, S_k, block_k):
        j1 = min(j0 + block_k, S_k)
        first = max(0, j0 - offset) // block_q * block_q if causal else 0  # the first query block that sees key j0
        for i0 in range(first, S_q, block_q):
            i1 = min(i0 + block_q, S_q)
            s = torch.einsum("bhqd,bhkd->bhqk", q[:, :, i0:i1].to(acc), k[:, :, j0:j1].to(acc)) * scale
            if causal:
                hidden = torch.arange(j0, j1)[None, :] - torch.arange(i0, i1)[:, None] > offset
                s = torch.where(hidden, -torch.inf, s)
            p = torch.exp(s - lse_safe[:, :, i0:i1, None])
            grad_v[:, :, j0:j1] += torch.einsum("bhqk,bhqd->bhkd", p, grad_out[:, :, i0:i1].to(acc))
            dp = torch.einsum("bhqd,bhkd->bhqk", grad_out[:, :, i0:i1].to(acc), v[:, :, j0:j1].to(acc))
            ds = p * (dp - delta[:, :, i0:i1, None]) * scale
            grad_q[:, :, i0:i1] += torch.einsum("bhqk,bhkd->bhqd", ds, k[:, :, j0:j1].to(acc))
            grad_k[:, :, j0:j1] += torch.einsum("bhqk,bhqd->bhkd", ds, q[:, :, i0:i1].to(acc))
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)
'''

BACKWARD_VJP = '''def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    S_q, S_k, D = q.shape[-2], k.shape[-2], q.shape[-1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    offset = S_k - S_q
    grads = [torch.zeros(t.shape, dtype=acc) for t in (q, k, v)]
    delta = (grad_out.to(acc) * out.to(acc)).sum(-1)
    lse_safe = lse.to(acc).masked_fill(lse == float("-inf"), float("inf"))
    for i0 in range(0, S_q, block_q):
        i1 = min(i0 + block_q, S_q)
        for j0 in range(0, min(S_k, i1 + offset) if causal else S_k, block_k):
            j1 = min(j0 + block_k, S_k)
            hidden = torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None] + offset

            def tile(q_t, k_t, v_t):  # the tile's share of out and of the row sums, lse held fixed
                s = q_t @ k_t.transpose(-2, -1) / math.sqrt(D)
                p = torch.exp(s.masked_fill(hidden & causal, -math.inf) - lse_safe[:, :, i0:i1, None])
                return p @ v_t, p.sum(-1)

            parts = (q[:, :, i0:i1].to(acc), k[:, :, j0:j1].to(acc), v[:, :, j0:j1].to(acc))
            _, pull = torch.func.vjp(tile, *parts)
            # d out / d lse brings -delta: the cotangent of the row sums
            for grad, piece, rows in zip(grads, pull((grad_out[:, :, i0:i1].to(acc), -delta[:, :, i0:i1])),
                                         ((i0, i1), (j0, j1), (j0, j1))):
                grad[:, :, rows[0]:rows[1]] += piece
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))
'''
