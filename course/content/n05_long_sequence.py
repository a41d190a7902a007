"""Notebook 05: long sequences: the S^2 memory wall, SDPA and chunked attention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "05_long_sequence"

HINTS = {
    "attention_matrix_bytes": "B * H * S * S elements; an empty tensor of the given dtype knows its element size.",
    "sdpa_attention": "SDPA's boolean attn_mask means 'may attend'. Without a padding mask, is_causal=causal keeps the\n"
    "fast kernels available; with one, fold padding ([B, 1, 1, S]) and causality ([S, S]) into one boolean mask.",
    "chunked_attention": "loop over blocks of queries; every block still needs all the keys. For causality compare\n"
    "absolute positions (block start + row), not positions inside the block.",
}


def cells():
    return [
        md(r"""
        # 05 · Long sequences: memory, fused kernels and chunking

        Plain attention builds the whole score matrix `[B, H, S, S]`, so its memory grows with the
        **square** of the sequence length. This notebook measures that wall and two ways around it:

        - `F.scaled_dot_product_attention` (SDPA): PyTorch's fused attention, which picks a kernel that
          never stores the full matrix when it can;
        - **chunked attention**: process the queries in blocks, so only `[B, H, chunk, S]` scores are alive
          at once, with exactly the same result.

        Part `long_sequence`: `attention_matrix_bytes`, `sdpa_attention`, `chunked_attention`
        (`q, k, v` are per-head tensors `[B, H, S, head_dim]`).
        """),
        setup("from memory_meter import LiveMemoryMeter  # peak live CPU tensor memory (see memory_meter.py)"),
        md(r"""
        ## 1. How big is the score matrix?

        One `[B, H, S, S]` matrix holds $B \cdot H \cdot S^2$ numbers, each `element_size` bytes (4 for
        float32, 2 for float16 / bfloat16):

        $$\text{bytes} = B \cdot H \cdot S^2 \cdot \text{element size}$$

        For `B = 1`, `H = 16` in float16: `S = 4096` gives $16 \cdot 4096^2 \cdot 2$ bytes = **512 MiB**;
        `S = 32768` gives **32 GiB**, for one layer's scores alone. Plain attention keeps two such
        matrices at its peak (the scores and their softmax), and a backward pass keeps them for the
        gradients too. Doubling the sequence length quadruples all of this.
        """),
        solution("attention_matrix_bytes", HINTS),
        check("check_attention_matrix_bytes(attention_matrix_bytes)", "check_attention_matrix_bytes"),
        demo("""
        for S in (1024, 4096, 32768):
            for dtype in (torch.float16, torch.float32):
                size = attention_matrix_bytes(1, 16, S, dtype)
                print(f"B=1, H=16, S={S:>6}, {str(dtype):<13}: {size / 2**30:8.3f} GiB per score matrix")
        """),
        md(r"""
        ## 2. `F.scaled_dot_product_attention`

        `F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)` computes
        `softmax(q k^T / sqrt(head_dim) + mask) v` for `[B, H, S, head_dim]` inputs and dispatches to one
        of several backends:

        | backend | what it accepts (CUDA) | memory |
        |---|---|---|
        | **flash** | fp16 / bf16, `is_causal`, **no `attn_mask`** | O(S): never stores the matrix |
        | **memory-efficient** | fp32 / fp16 / bf16, boolean or additive `attn_mask` | O(S) |
        | **cuDNN** | fp16 / bf16 on recent NVIDIA GPUs (e.g. H100/H200); masks depend on the version | O(S) |
        | **math** | anything, any device: the reference fallback | O(S²), more than hand-written code |

        On a CPU there is a CPU "flash" kernel (which does accept boolean masks) and the math backend.
        You can restrict the choice with the context manager `torch.nn.attention.sdpa_kernel`; if none of
        the allowed backends accepts the inputs, SDPA raises an error instead of silently falling back.

        **Mask convention.** A boolean `attn_mask` means *may attend*, the same sense as our padding mask,
        but it must broadcast to `[B, H, S_q, S_k]`: a `[B, S]` mask becomes `[B, 1, 1, S]`. For causality
        without padding, prefer `is_causal=True` over an explicit `[S, S]` mask: it keeps the flash kernel
        available. On a GPU, *any* `attn_mask` (for instance a `[B, 1, 1, S]` padding mask) rules out flash,
        and SDPA falls back to the memory-efficient kernel; that one is still O(S) in memory, just slower.
        """),
        solution("sdpa_attention", HINTS),
        check("check_sdpa_attention(sdpa_attention)", "check_sdpa_attention"),
        md(r"""
        ## 3. Chunked attention: exact, with a fraction of the memory

        Each row of the softmax needs all the keys of *one* query, and nothing from other queries. So we
        can compute the output for queries `start:stop` on their own: scores `[B, H, chunk, S]`, mask,
        softmax, times `v`, and write the block into the output. The result is exactly plain attention;
        only `chunk x S` scores per head are alive at any moment instead of `S x S`. (FlashAttention goes
        further and also splits the keys, combining partial softmaxes on the fly; that needs a running
        maximum and sum per row and is beyond this notebook.)

        Careful with the causal mask: query row `r` of a block is the absolute position `start + r`.
        """),
        solution("chunked_attention", HINTS),
        check("check_chunked_attention(chunked_attention)", "check_chunked_attention"),
        graded_cell("long_sequence"),
        md(r"""
        ## 4. Measuring peak memory on a CPU

        `LiveMemoryMeter` (in `memory_meter.py`, next to this notebook) watches every PyTorch operation
        and records the largest total size of tensors alive at the same time, counting only tensors
        created inside the `with` block: the *extra* memory a function needs. We compare plain attention
        (written inline here), your chunked attention (`chunk_size=128`) and your SDPA version, over a range
        of lengths. Small sizes keep this fast; the shape of the curves is what matters.
        """),
        demo("""
        import matplotlib.pyplot as plt


        def plain_attention(q, k, v):
            return torch.softmax(q @ k.mT * q.shape[-1] ** -0.5, dim=-1) @ v


        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        B, H, head_dim = 1, 4, 32
        lengths = [128, 256, 512, 1024, 2048]
        candidates = {
            "plain": plain_attention,
            "chunked (128)": lambda q, k, v: chunked_attention(q, k, v, chunk_size=128),
            "sdpa": sdpa_attention,
        }
        peaks = {name: [] for name in candidates}
        for S in lengths:
            q, k, v = (torch.randn(B, H, S, head_dim) for _ in range(3))
            for name, fn in candidates.items():
                try:
                    peaks[name].append(peak_mib(fn, q, k, v))
                except NotImplementedError:
                    peaks[name].append(float("nan"))
        print(f"{'S':>6} {'one S x S matrix':>17} " + " ".join(f"{name:>14}" for name in candidates) + "   (MiB)")
        for i, S in enumerate(lengths):
            print(f"{S:>6} {B * H * S * S * 4 / 2**20:>17.2f} " + " ".join(f"{peaks[n][i]:>14.2f}" for n in candidates))
        if any(p != p for values in peaks.values() for p in values):
            print("(nan: that function is not implemented yet)")

        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for name, values in peaks.items():
            ax.plot(lengths, values, marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="sequence length S", ylabel="peak live memory (MiB)",
               title=f"CPU, float32, B={B}, H={H}, head_dim={head_dim}")
        ax.set_xticks(lengths, [str(s) for s in lengths])
        ax.minorticks_off()  # only the measured lengths on the x axis
        ax.legend()
        plt.show()
        """),
        md(r"""
        Plain attention grows by 4x for every doubling of S (the slope-2 line on the log-log plot) and
        peaks at about two score matrices. Chunked attention grows only linearly: its blocks are
        `128 x S`. SDPA's CPU kernel stays close to the size of its output.

        ### Choosing a backend

        The next cell asks SDPA for one backend at a time, with and without a boolean padding mask, and
        reports which ones this machine can run and what they cost. On a CPU, expect the flash and math
        kernels to work and the CUDA-only ones to be refused.
        """),
        demo("""
        import warnings

        from torch.nn.attention import SDPBackend, sdpa_kernel

        torch.manual_seed(0)
        B, H, S, head_dim = 1, 4, 1024, 32
        q, k, v = (torch.randn(B, H, S, head_dim) for _ in range(3))
        keep = torch.arange(S)[None, :] < torch.tensor([900])[:, None]  # [B, S], True = real token
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
            for label, attn_mask in (("no mask", None), ("bool mask [B,1,1,S]", keep[:, None, None, :])):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # SDPA explains refusals through warnings
                        with sdpa_kernel(backend), LiveMemoryMeter() as meter:
                            F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
                    result = f"peak {meter.peak_bytes / 2**20:6.2f} MiB"
                except RuntimeError:
                    result = "refused: no such kernel for these inputs on this machine"
                print(f"{backend.name:<20} {label:<20} {result}")
        print(f"for comparison, one S x S float32 matrix: {B * H * S * S * 4 / 2**20:.2f} MiB")
        """),
        md(r"""
        ### Reference figures on a GPU

        Measured once on one NVIDIA H200 (torch 2.11), `B = 1`, `H = 16`, `head_dim = 64`, float16,
        forward pass only, `S = 32768`:

        | method | extra peak memory | time |
        |---|---|---|
        | plain attention (two `S x S` buffers) | 64 GiB | 64 ms |
        | SDPA (flash) | 64 MiB (its output alone) | 9 ms |
        | chunked, 1024 queries per chunk | 3.1 GiB | 66 ms |
        | SDPA with a boolean padding mask `[B, 1, 1, S]` (flash refuses, memory-efficient runs) | 64 MiB | 15 ms |

        And a warning about the math backend: it uses *more* memory than hand-written code (37 GiB at
        `S = 16384`), because it keeps extra intermediate copies. If SDPA ends up on the math backend on a
        GPU, you get none of the savings.

        ## 5. Two more traps

        **float16 overflow.** The largest float16 is 65504. Raw scores of long, large vectors exceed it
        and become `inf`; a softmax over a row containing `inf` gives NaN. Scaling *before* the product
        (as SDPA does internally), computing the scores in float32, or using SDPA avoids it:
        """),
        demo("""
        q = torch.full((1, 1, 2, 64), 40.0, dtype=torch.float16)  # two identical queries/keys, 64 features of 40
        raw = q @ q.mT  # 64 * 40 * 40 = 102400 > 65504
        print("raw fp16 scores:", raw.flatten().tolist())
        print("softmax of them: ", torch.softmax(raw, dim=-1).flatten().tolist())
        scale = q.shape[-1] ** -0.25  # split 1/sqrt(d) between q and k before multiplying
        print("scaled first:    ", ((q * scale) @ (q * scale).mT).flatten().tolist())
        print("SDPA output finite:", torch.isfinite(F.scaled_dot_product_attention(q, q, q)).all().item())
        """),
        md(r"""
        **Dropout in eval mode.** `F.scaled_dot_product_attention(..., dropout_p=p)` is a plain function:
        it knows nothing about `module.training` and drops weights whenever `p > 0`, even after
        `model.eval()`. Inside a module, pass `dropout_p=self.dropout.p if self.training else 0.0`.
        """),
        demo("""
        class SdpaBlock(nn.Module):
            def __init__(self, p, respect_mode):
                super().__init__()
                self.dropout = nn.Dropout(p)
                self.respect_mode = respect_mode

            def forward(self, q, k, v):
                p = self.dropout.p if (self.training or not self.respect_mode) else 0.0
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p)


        q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
        for respect_mode in (False, True):
            block = SdpaBlock(0.5, respect_mode).eval()
            same = torch.equal(block(q, k, v), block(q, k, v))
            print(f"eval mode, dropout_p {'gated by self.training' if respect_mode else 'always 0.5     '}: two calls identical = {same}")
        """),
        md(r"""
        ## 6. Pitfalls and how to debug them

        - **Out of memory at long S**: estimate `attention_matrix_bytes` first; if two of those do not fit,
          use SDPA or chunk the queries.
        - **SDPA slower or bigger than expected on a GPU**: an explicit mask rules out flash. Use
          `is_causal=True` where you can, and restrict backends with `sdpa_kernel(...)` to find out which
          one runs (it raises when none of the allowed ones fits).
        - **Wrong mask sense**: SDPA's boolean mask is "may attend"; `nn.MultiheadAttention`'s
          `key_padding_mask` is "ignore".
        - **Chunked causal mask**: compare absolute positions; a mask built for one block's local indices
          lets later blocks see the future.
        - **NaN in float16**: overflowing raw scores; see above.
        - **Random outputs at evaluation**: `dropout_p` not gated by `self.training`.
        """),
    ]
