"""Notebook 04 of `generation`: a Llama-style decoder's attention, where RoPE, the KV cache and GQA meet."""
from course.cells import Cell, check, demo, graded_cell, md, setup, solution_source
from course.content.written import written_cells

from . import kv_cache, positions

NAME = "04_decoder"

# The pieces of notebooks 01 and 02 that DecoderAttention calls: this notebook stands alone, so its solution cell
# holds them too (stubs in the release: paste your own).
PIECES = ("apply_rope", "decode_causal_mask", "repeat_kv", "KVCache")


def _paste(notebook: str) -> tuple[str, str]:
    return (f"paste your own from {notebook} (the version there is the graded one; this copy only serves\n"
            "DecoderAttention here).",
            f"把你在 {notebook} 里写好的版本粘贴过来（评分的是那边的版本；\n"
            "这份拷贝只供这里的 DecoderAttention 使用）。")


HINTS = {
    "apply_rope": _paste("01_positions"),
    **{name: _paste("02_kv_cache") for name in ("decode_causal_mask", "repeat_kv")},
    "KVCache.__init__": _paste("02_kv_cache"),
    "KVCache.append": ("as in 02_kv_cache.", "与 02_kv_cache 相同。"),
    "KVCache.__len__": ("as in 02_kv_cache.", "与 02_kv_cache 相同。"),
    "DecoderAttention.__init__": (
        "the key and value projections are narrower: num_kv_heads * head_dim outputs each.",
        "键和值的投影更窄：各自输出 num_kv_heads * head_dim 个特征。",
    ),
    "DecoderAttention.forward": (
        "the order matters: positions (len(cache) read before appending), rotate q and k, append the ROTATED\n"
        "keys, repeat the kv heads, then the bottom-right causal mask and key_mask together (recipe above the cell).",
        "顺序很重要：先定位置（在追加之前读 len(cache)），再旋转 q 和 k，把**旋转后**的键追加进缓存，\n"
        "再重复 kv 头，最后把右下对齐的因果掩码和 key_mask 一起用上（具体步骤见单元格上方）。",
    ),
}

DOCSTRINGS_ZH = {
    **{name: text for name, text in {**positions.DOCSTRINGS_ZH, **kv_cache.DOCSTRINGS_ZH}.items()
       if name.split(".")[0] in PIECES},  # the same translations as in 01 and 02
    "DecoderAttention": """Llama 风格解码器在生成时的注意力：每个 token 在自己的位置上做 RoPE，KV 缓存按分组查询存储。""",
    "DecoderAttention.forward": """x [B, S_new, d_model] -> [B, S_new, d_model]；positions 为 [S_new] 或 [B, S_new]（默认接在缓存之后）；key_mask 为 [B, S_k]。""",
}


def solution_cell() -> Cell:
    """The one solution cell: the pieces DecoderAttention calls (stubs to paste into), then DecoderAttention."""
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": "solution_DecoderAttention",
            "schema_version": 3}

    def source(lang):
        return "\n\n\n".join(solution_source(name, HINTS, lang) for name in (*PIECES, "DecoderAttention"))

    return Cell("code", source("en"), role="solution", nbgrader=meta, zh=source("zh"))


def cells():
    return [
        md(r"""
        # 04 · A decoder layer: RoPE, the KV cache and grouped-query attention together

        Notebooks 01 and 02 built RoPE, the KV cache and grouped-query attention one at a time. A real
        decoder (Meta's Llama `Attention.forward`, Hugging Face's `LlamaAttention`) uses all three in one
        layer, and the bugs people actually ship live where they meet: the new token rotated at the wrong
        position, cached keys rotated twice, a cache with too many heads, a mask aligned the wrong way,
        padding forgotten. This notebook builds that layer and shows each of those errors with numbers.

        | part | what you write |
        |---|---|
        | `decoder` | `class DecoderAttention` (plus your `apply_rope`, `decode_causal_mask`, `repeat_kv`, `KVCache` pasted from 01 and 02) |

        Shapes: `x` is `[B, S_new, d_model]` (the new tokens of a call), per-head tensors
        `[B, heads, S, head_dim]`, `H` query heads and `H_kv` key/value heads.
        """, r"""
        # 04 · 解码器层：把 RoPE、KV 缓存和分组查询注意力合在一起

        notebook 01 和 02 分别实现了 RoPE、KV 缓存和分组查询注意力。真实的解码器（Meta Llama 的 `Attention.forward`、Hugging Face 的 `LlamaAttention`）在同一层里同时用到这三样，而实际代码里常见的 bug 恰恰出在它们的衔接处：新 token 旋转到了错误的位置、缓存里的键被转了两次、缓存存了太多的头、掩码对齐方向反了、忘了处理填充。本 notebook 实现这一层，并用具体数字展示每一种错误。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `decoder` | `class DecoderAttention`（外加从 01、02 粘贴过来的 `apply_rope`、`decode_causal_mask`、`repeat_kv`、`KVCache`） |

        形状约定：`x` 是 `[B, S_new, d_model]`（一次调用里的新 token），每个头的张量是 `[B, heads, S, head_dim]`，`H` 个查询头，`H_kv` 个键/值头。
        """),
        setup(),
        md(r"""
        ## 1. The layer, step by step

        `DecoderAttention(d_model, num_heads, num_kv_heads=None, rope_base=10000.0)` has four bias-free
        layers: `W_q` (d_model → d_model), `W_k` and `W_v` (d_model → `num_kv_heads * head_dim`, narrower
        when `H_kv < H`), `W_o`. `forward(x, cache=None, positions=None, key_mask=None)` does, in this order:

        1. project the new tokens; split `q` into `H` heads, `k` and `v` into `H_kv` heads;
        2. **positions**: the ones given, else `len(cache) + arange(S_new)`. The new tokens come *after*
           everything cached, so the first new token is at position `len(cache)`, not 0 (read the length
           before appending);
        3. rotate `q` **and** `k` with `apply_rope(..., positions, base=self.rope_base)`;
        4. append the **rotated** keys and the values (`H_kv` heads) to the cache, and use what it returns;
        5. `repeat_kv` so that each kv head serves `H // H_kv` query heads;
        6. scores `[B, H, S_new, S_k]`, masked by `decode_causal_mask(S_new, S_k)` (the new queries are the
           last positions) and by `key_mask [B, S_k]` (True = real token, over every cached and new position);
           softmax, weighted sum, merge heads, `W_o`.

        Why the cache stores *rotated* keys: RoPE turns a key by an angle that depends only on its own
        position, which never changes. Rotated once when it arrives, a key is final; the cache can hand it
        back as is at every later step. Rotating what the cache returns again turns every old key a second
        time and breaks the scores (section 2 measures by how much).

        The cell below holds the pieces from notebooks 01 and 02 as stubs (this notebook stands alone: paste
        your own versions, `apply_rope` from `01_positions`, with its `base` argument and `[B, S]` positions,
        and `decode_causal_mask`, `repeat_kv`, `KVCache` from `02_kv_cache`), then the class. The check below
        runs your layer with its own copies of `apply_rope`, `decode_causal_mask` and `repeat_kv`, as the grader
        does: a mistake in one of them costs points once, in its own notebook, and the check names it in a note.
        """, r"""
        ## 1. 逐步拆解这一层

        `DecoderAttention(d_model, num_heads, num_kv_heads=None, rope_base=10000.0)` 有四个无偏置的线性层：`W_q`（d_model → d_model），`W_k` 和 `W_v`（d_model → `num_kv_heads * head_dim`，`H_kv < H` 时更窄），以及 `W_o`。`forward(x, cache=None, positions=None, key_mask=None)` 按下面的顺序计算：

        1. 对新 token 做投影；把 `q` 拆成 `H` 个头，`k` 和 `v` 拆成 `H_kv` 个头；
        2. **位置**：有传入就用传入的，否则用 `len(cache) + arange(S_new)`。新 token 排在缓存里所有内容*之后*，所以第一个新 token 的位置是 `len(cache)`，而不是 0（长度要在追加之前读）；
        3. 用 `apply_rope(..., positions, base=self.rope_base)` 同时旋转 `q` **和** `k`；
        4. 把**旋转后**的键和值（`H_kv` 个头）追加进缓存，并使用缓存返回的结果；
        5. 用 `repeat_kv` 让每个 kv 头服务 `H // H_kv` 个查询头；
        6. 分数 `[B, H, S_new, S_k]` 用 `decode_causal_mask(S_new, S_k)`（新查询是最后的那些位置）和 `key_mask [B, S_k]`（True = 真实 token，覆盖所有已缓存的位置和新位置）加掩码；然后 softmax、加权求和、合并多头、`W_o`。

        为什么缓存里存的是*旋转后*的键：RoPE 旋转一个键的角度只取决于它自己的位置，而这个位置永远不会变。键一到达就旋转一次，之后就定型了；以后每一步缓存都可以原样把它交回来。如果再把缓存返回的键旋转一遍，每个旧键都会被转第二次，分数就坏了（第 2 节测量坏了多少）。

        下面的单元格先放着 notebook 01 和 02 里那些函数的空壳（本 notebook 自成一体：把你自己的版本粘贴进来：`apply_rope` 来自 `01_positions`，要带 `base` 参数并支持 `[B, S]` 的位置；`decode_causal_mask`、`repeat_kv`、`KVCache` 来自 `02_kv_cache`），然后是这个类。下面的检查和自动评分器一样，用它自己的 `apply_rope`、`decode_causal_mask` 和 `repeat_kv` 来运行你的层：这些函数里的错误只在它们自己的 notebook 里扣一次分，检查会在一行说明里指出来。
        """),
        md(r"""
        <details><summary>Hint: the recipe of <code>forward</code>, if you are stuck</summary>

        `q` `[B, H, S_new, hd]`, `k` and `v` `[B, H_kv, S_new, hd]`; when `positions` is None,
        `start = len(cache)` (0 without a cache) and `positions = arange(start, start + S_new)`;
        `q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)`;
        `k, v = cache.append(k, v)`; `k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)`;
        `allowed = decode_causal_mask(S_new, S_k)`, and with a key mask `allowed & key_mask[:, None, None, :]`;
        `masked_fill(~allowed, -inf)`, softmax over the keys, `@ v`, merge the heads, `W_o`.
        </details>
        """, r"""
        <details><summary>提示：<code>forward</code> 的具体步骤（卡住时再看）</summary>

        `q` 为 `[B, H, S_new, hd]`，`k` 和 `v` 为 `[B, H_kv, S_new, hd]`；`positions` 为 None 时，`start = len(cache)`（没有缓存时为 0），`positions = arange(start, start + S_new)`；`q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)`；`k, v = cache.append(k, v)`；`k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)`；`allowed = decode_causal_mask(S_new, S_k)`，有键掩码时再 `allowed & key_mask[:, None, None, :]`；`masked_fill(~allowed, -inf)`，对键做 softmax，`@ v`，合并多头，`W_o`。
        </details>
        """),
        solution_cell(),
        check("check_decoder_attention(DecoderAttention)", "check_decoder_attention"),
        graded_cell("decoder"),
        md(r"""
        ## 2. The two position bugs, measured

        A prompt of 4 tokens, then 2 tokens one at a time, against the whole sequence at once. The first
        run is yours. The second passes `positions=[0]` for every new token: what a layer that forgets the
        cache's offset does. The third uses a cache that rotates the keys it returns once more at
        `0 .. S_k - 1`: what a layer that "applies RoPE to all keys" after reading the cache does. Each line
        prints the largest difference from the full pass, and that difference relative to the largest output.
        """, r"""
        ## 2. 两个位置 bug，用数字说话

        先输入 4 个 token 的提示词，再逐个输入 2 个 token，与一次性处理整条序列比较。第一次运行用你的实现。第二次对每个新 token 都传 `positions=[0]`，模拟忘了加上缓存偏移量的层。第三次用的缓存会把返回的键在 `0 .. S_k - 1` 上再旋转一次，模拟读出缓存之后又"对所有键做一遍 RoPE"的层。每一行打印与一次性计算的最大差值，以及它相对于最大输出的比例。
        """),
        demo("""
        torch.manual_seed(0)
        with uses_your_code():
            layer = DecoderAttention(32, 4, 2).eval()
            x = torch.randn(1, 6, 32)


            class RotatesAgain(KVCache):  # what a layer that rotates every key it reads from the cache computes
                def append(self, k, v):
                    k_all, v_all = super().append(k, v)
                    return apply_rope(k_all, torch.arange(k_all.shape[-2]), layer.rope_base), v_all


            with torch.no_grad():
                full = layer(x)
                for label, cache, fixed in (("positions len(cache), len(cache) + 1", KVCache(), None),
                                            ("every new token at position 0", KVCache(), torch.tensor([0])),
                                            ("cached keys rotated again", RotatesAgain(), None)):
                    outs = [layer(x[:, :4], cache)]
                    outs += [layer(x[:, t : t + 1], cache, None if fixed is None else fixed) for t in (4, 5)]
                    gap = (torch.cat(outs, dim=1) - full).abs().max().item()
                    print(f"{gap:.2e} ({gap / full.abs().max().item():.0e} of the largest |output|): {label}")
        """),
        *written_cells("written_rotated_keys"),
        md(r"""
        ## 3. A cache of `H_kv` heads, repeated after reading

        Grouped-query attention exists to shrink the cache, so the cache must hold the `H_kv` key/value
        heads, and `repeat_kv` comes *after* reading it. Repeating before appending gives the same outputs
        and throws the saving away. The first cell shows the cache's shape in your layer; the second
        computes what the choice means for a Llama-3-8B-sized model (32 layers, 32 query heads, 8 kv heads,
        head_dim 128) at 8192 tokens in float16.
        """, r"""
        ## 3. 缓存存 `H_kv` 个头，读出之后再重复

        分组查询注意力的意义就在于缩小缓存，所以缓存必须存 `H_kv` 个键/值头，而 `repeat_kv` 要放在读缓存*之后*。如果在追加之前就重复，输出不变，省下的显存却全没了。第一个单元格展示你的层里缓存的形状；第二个单元格计算这个选择对一个 Llama-3-8B 规模的模型（32 层、32 个查询头、8 个 kv 头、head_dim 128）在 8192 个 token、float16 下意味着什么。
        """),
        demo("""
        torch.manual_seed(1)
        with uses_your_code():
            class ShowsWhatIsCached(KVCache):
                def append(self, k, v):
                    print(f"H = 8 query heads, H_kv = 2: the cache receives keys of shape {list(k.shape)}")
                    return super().append(k, v)


            layer = DecoderAttention(32, 8, 2).eval()
            with torch.no_grad():
                layer(torch.randn(1, 5, 32), ShowsWhatIsCached())
        """),
        demo("""
        layers, H, H_kv, head_dim, tokens = 32, 32, 8, 128, 8192
        fp16 = torch.empty((), dtype=torch.float16).element_size()
        for heads, label in ((H_kv, "H_kv = 8 heads cached (repeat after reading)"),
                             (H, "H = 32 heads cached (repeat before appending)")):
            keys = torch.empty(1, heads, tokens, head_dim, dtype=torch.float16, device="meta")
            total = 2 * layers * keys.numel() * fp16  # keys and values, every layer
            print(f"{label}: {total / 2**30:.2f} GiB per sequence")
        """),
        md(r"""
        ## 4. Why `rope_base` matters

        Pair $i$ turns by $\theta_i = \text{base}^{-2i/\text{head\_dim}}$ per position, so it comes back to
        its start after $2\pi / \theta_i$ positions, its wavelength. The slowest pair's wavelength is *not*
        the context a model can use: that is set by the lengths it was trained on (Llama 2 was trained on
        4096 tokens, with base 10000). What the wavelengths tell is which pairs saw every angle in training: a
        pair whose wavelength is longer than the training length only ever saw part of its turn, and past
        that length it meets angles it never saw. The cell prints the slowest wavelength for the original
        base 10000 and for Llama 3's 500000 at head_dim 128, and how many of the 64 pairs do not complete one
        turn in 8192 tokens (Llama 3's training length).

        Context extension methods change exactly these angles: position interpolation divides the positions
        by the extension factor $s$ (longer inputs squeezed into the trained range), NTK-aware scaling raises
        the base instead (slow pairs stretched, fast pairs kept), and YaRN interpolates only the pairs whose
        wavelength is long against the training length (fast pairs kept, a ramp between) and also sharpens the
        softmax: it multiplies $q$ and $k$ each by $0.1 \ln s + 1$. Llama 3 simply trained with a larger base.
        In your layer the base is a constructor argument, passed to every `apply_rope` call; forgetting it
        silently uses 10000.
        """, r"""
        ## 4. 为什么 `rope_base` 很重要

        第 $i$ 对每个位置旋转 $\theta_i = \text{base}^{-2i/\text{head\_dim}}$，所以经过 $2\pi / \theta_i$ 个位置（它的波长）就转回起点。最慢那一对的波长*并不是*模型能用的上下文长度：那是由训练时的序列长度决定的（Llama 2 用 4096 个 token 训练，底数为 10000）。波长告诉我们的是：哪些对在训练中见过所有角度。波长比训练长度还长的对，训练时只转过一圈中的一部分，超过这个长度后就会遇到从没见过的角度。下面的单元格在 head_dim 128 时，打印原始底数 10000 和 Llama 3 所用的 500000 对应的最慢波长，以及 64 对里有多少对在 8192 个 token（Llama 3 的训练长度）内转不满一圈。

        上下文扩展方法改的正是这些角度：位置插值（position interpolation）把位置除以扩展倍数 $s$（把更长的输入压进训练时的范围）；NTK-aware 缩放则改为调大底数（拉长慢的对，保留快的对）；YaRN 只对波长相对训练长度较长的那些对做插值（快的对保持不变，中间用一段斜坡过渡），同时让 softmax 更尖锐：把 $q$ 和 $k$ 各乘以 $0.1 \ln s + 1$。Llama 3 则直接用更大的底数训练。在你的层里，底数是构造函数的参数，要传给每一次 `apply_rope` 调用；忘了传就会悄悄用上 10000。
        """),
        demo("""
        head_dim, trained = 128, 8192
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # 2i / head_dim of every pair
        for base in (10000.0, 500000.0):
            wavelengths = 2 * math.pi * base ** exponents  # positions per full turn, pair by pair
            longer = int((wavelengths > trained).sum())
            print(f"base {base:>9,.0f}: slowest pair turns once every {wavelengths[-1].item():>12,.0f} positions; "
                  f"{longer:>2} of {len(wavelengths)} pairs turn less than once in {trained:,} tokens")
        """),
        md(r"""
        ## 5. Meta's complex-number RoPE is your RoPE

        Meta's Llama code writes RoPE with complex numbers: each pair $(a, b)$ is $a + ib$, and rotating it by
        $t$ is multiplying by $e^{it}$ (`freqs_cis`). The three lines below are that form (its
        `apply_rotary_emb`); the last one compares it with your `apply_rope` on the same input.
        """, r"""
        ## 5. Meta 的复数形式 RoPE 就是你的 RoPE

        Meta 的 Llama 代码用复数写 RoPE：每一对 $(a, b)$ 看成 $a + ib$，旋转角度 $t$ 就是乘以 $e^{it}$（即 `freqs_cis`）。下面三行就是这种写法（它的 `apply_rotary_emb`）；最后一行把它和你的 `apply_rope` 在同一输入上比较。
        """),
        demo("""
        x, pos = torch.randn(2, 4, 7, 16), torch.arange(7)
        freqs_cis = torch.polar(torch.ones(7, 8), pos[:, None] * 10000.0 ** (-torch.arange(0, 16, 2) / 16))
        meta = torch.view_as_real(torch.view_as_complex(x.reshape(2, 4, 7, 8, 2)) * freqs_cis).flatten(-2)
        with uses_your_code():
            gap = (meta - apply_rope(x, pos)).abs().max().item()
            print(f"Meta's form vs your apply_rope: largest difference {gap:.1e}, largest |x| {x.abs().max().item():.1f}")
        """),
        md(r"""
        ## 6. Two causal conventions: which one decoding needs

        With $S_q < S_k$ (new tokens after a cache) "causal" can be aligned two ways. PyTorch's
        `is_causal=True` (and `tril()` of `[S_q, S_k]`) is **top-left**: query 0 sees key 0 only.
        flash-attn (since 2.1) and `torch.nn.attention.bias.causal_lower_right` are **bottom-right**: the
        queries are the last $S_q$ positions. Decoding needs bottom-right; the cell prints both for 2 new
        tokens after 3 cached ones, and SDPA's output with each.
        """, r"""
        ## 6. 两种因果约定：解码需要哪一种

        当 $S_q < S_k$（缓存之后来了新 token）时，"因果"可以有两种对齐方式。PyTorch 的 `is_causal=True`（以及 `[S_q, S_k]` 的 `tril()`）是**左上对齐**：查询 0 只能看到键 0。flash-attn（2.1 版起）和 `torch.nn.attention.bias.causal_lower_right` 是**右下对齐**：查询是最后的 $S_q$ 个位置。解码需要右下对齐；下面的单元格对"缓存 3 个、新来 2 个"的情况打印两种掩码，以及 SDPA 分别用它们时的输出差异。
        """),
        demo("""
        from torch.nn.attention.bias import causal_lower_right

        S_q, S_k = 2, 5
        print("top-left (is_causal=True, tril()):\\n", torch.ones(S_q, S_k, dtype=torch.bool).tril().int())
        print("bottom-right (flash-attn, causal_lower_right):\\n", causal_lower_right(S_q, S_k)._materialize().int())
        q, k, v = torch.randn(1, 1, S_q, 8), torch.randn(1, 1, S_k, 8), torch.randn(1, 1, S_k, 8)
        top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bottom_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(S_q, S_k))
        print(f"the two outputs differ by up to {(top_left - bottom_right).abs().max().item():.2f}"
              f" (largest |output| {bottom_right.abs().max().item():.2f})")
        """),
        md(r"""
        ## 7. Generating a batch: left padding

        To generate for several prompts at once they are padded to one length. Padding goes on the **left**,
        so that every prompt's last token sits in the last column and the next token of each sequence is
        appended in the same place. What makes the padded batch right is the **`key_mask`**: padded keys must
        be hidden from every query, at every step; the mask covers the cached positions and the new ones, so
        it grows by one column per generated token.

        **Positions.** Real stacks also count each sequence's positions from its first real token:
        `positions = mask.cumsum(-1) - 1` (padding gets -1; clamp it to 0, it is masked anyway), and each new
        token one more than its sequence's last position (Hugging Face's `position_ids` does this). With RoPE
        alone this changes nothing that is computed: a score depends on $m - n$ only, and shifting a whole
        sequence by its number of pads shifts $m$ and $n$ together. The cell checks it: it builds a tiny
        model (an embedding, your layer, an output projection), generates 4 tokens greedily for three prompts
        of different lengths in one left-padded batch, then for each prompt alone, first with per-sequence
        positions, then with positions counted from the padded row's first column (the default,
        `len(cache) + arange(S_new)`), both with the key mask.

        Per-sequence positions matter wherever the position enters other than through $m - n$:
        **absolute or learned position embeddings** added to the input (the original Transformer, GPT-2's
        learned table; the last two lines of the cell add a learned table to the same model), **scaling that
        depends on the absolute position** (Llama 4 scales its queries by a function of the position), and
        **rounding**: a float angle $m \theta_i$ is rounded, so a shift is exact only up to that rounding
        (the difference of about $10^{-7}$ the cell prints), a gap that grows with the positions and in
        low precision.
        """, r"""
        ## 7. 批量生成：左填充

        要同时为几个提示词生成，就得把它们填充到同一长度。填充放在**左边**，这样每个提示词的最后一个 token 都在最后一列，每条序列的下一个 token 也都追加在同一个位置。让填充后的批次算对的是 **`key_mask`**：填充的键在每一步都要对所有查询隐藏；掩码覆盖已缓存的位置和新位置，所以每生成一个 token 它就多一列。

        **位置。** 实际的模型还会让每条序列的位置从它第一个真实 token 开始计数：`positions = mask.cumsum(-1) - 1`（填充处是 -1；截到 0 即可，反正会被遮住），每个新 token 的位置是所在序列上一个位置加一（Hugging Face 的 `position_ids` 就是这样做的）。只用 RoPE 时，这不会改变任何计算结果：分数只取决于 $m - n$，而把一整条序列按它的填充个数平移，$m$ 和 $n$ 会一起平移。下面的单元格验证这一点：它搭一个很小的模型（一个嵌入层、你的这一层、一个输出投影），把三个长度不同的提示词放进一个左填充的批次里，贪心地生成 4 个 token，再把每个提示词单独生成一遍；先用按序列计算的位置，再用从填充后那一行第一列开始数的位置（即默认的 `len(cache) + arange(S_new)`），两种都带键掩码。

        只要位置不是仅通过 $m - n$ 起作用，按序列计算的位置就很重要：加到输入上的**绝对位置编码或可学习的位置嵌入**（原始 Transformer、GPT-2 的可学习位置表；单元格最后两行给同一个模型加上一张可学习的位置表）、**随绝对位置变化的缩放**（Llama 4 按位置的某个函数缩放查询），以及**舍入误差**：浮点角度 $m \theta_i$ 是舍入过的，所以平移只在舍入误差范围内精确（单元格打印的约 $10^{-7}$ 的差值），位置越大、精度越低，这个差距越大。
        """),
        demo("""
        torch.manual_seed(4)
        vocab, d_model = 50, 32
        with uses_your_code():
            embed, layer, head = nn.Embedding(vocab, d_model), DecoderAttention(d_model, 4, 2).eval(), nn.Linear(d_model, vocab)
            learned = nn.Embedding(64, d_model)  # a learned absolute position table, as in GPT-2


            def generate(tokens, mask, per_sequence=True, absolute=False, steps=4):
                cache = KVCache()
                if per_sequence:
                    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, S]: 0 at each first real token
                else:
                    positions = torch.arange(tokens.shape[1]).expand_as(tokens)  # [B, S]: from the first column
                h = embed(tokens) + (learned(positions) if absolute else 0)
                out = layer(h, cache, positions, mask)
                generated, logits = [], []
                for _ in range(steps):
                    logits.append(head(out[:, -1]))  # [B, vocab]
                    nxt = logits[-1].argmax(-1, keepdim=True)  # [B, 1]: greedy
                    generated.append(nxt)
                    positions = positions[:, -1:] + 1  # one more than each sequence's last position
                    mask = torch.cat([mask, torch.ones_like(nxt, dtype=torch.bool)], dim=1)  # past and new keys
                    out = layer(embed(nxt) + (learned(positions) if absolute else 0), cache, positions, mask)
                return torch.cat(generated, dim=1), torch.stack(logits, dim=1)


            prompts = [torch.randint(vocab, (n,)) for n in (6, 2, 4)]
            width = max(len(p) for p in prompts)
            tokens = torch.zeros(len(prompts), width, dtype=torch.long)  # 0 as the pad token
            mask = torch.zeros(len(prompts), width, dtype=torch.bool)
            for b, p in enumerate(prompts):
                tokens[b, width - len(p):], mask[b, width - len(p):] = p, True  # left padding
            with torch.no_grad():
                batched, logits = generate(tokens, mask)
                for b, p in enumerate(prompts):
                    alone = generate(p[None], torch.ones(1, len(p), dtype=torch.bool))[0]
                    print(f"prompt of {len(p)}: batched {batched[b].tolist()}, alone {alone[0].tolist()}, "
                          f"equal: {torch.equal(batched[b], alone[0])}")
                shared, shared_logits = generate(tokens, mask, per_sequence=False)
                gap, scale = (shared_logits - logits).abs().max().item(), logits.abs().max().item()
                print(f"RoPE, positions from the first column: same tokens {torch.equal(shared, batched)}, "
                      f"logits differ by up to {gap:.1e} (largest |logit| {scale:.2f}, relative {gap / scale:.0e})")
                alone = [generate(p[None], torch.ones(1, len(p), dtype=torch.bool), absolute=True)[0][0] for p in prompts]
                for per_sequence, label in ((True, "per-sequence positions"), (False, "positions from the first column")):
                    got = generate(tokens, mask, per_sequence, absolute=True)[0]
                    same = all(torch.equal(got[b], alone[b]) for b in range(len(prompts)))
                    print(f"a learned position table, {label}: every prompt as if alone {same}")
        """),
        md(r"""
        ## 8. A padded query sees no key: what a stack of layers does with it

        In the left-padded batch, a padded query's causal keys are all padding. With a $-\infty$ fill (the
        reference's `masked_fill(~allowed, float("-inf"))`) its softmax row is $0 / 0$ and its output is NaN.
        In one layer that row is never read (the next token comes from the last column). In a real model it
        is: with residual connections the layer's output becomes the next layer's input, so the NaN rows become
        the next layer's keys and values there. A masked key gets weight 0, and
        $0 \times \text{NaN} = \text{NaN}$: every real token of that sequence turns NaN.

        A large finite fill such as `-1e9` (both checks accept it: wherever a row sees a key it gives the same
        weights) hides this: a row whose scores are all `-1e9` has a uniform softmax over its keys, no NaN, and
        the padded query averages whatever keys it has (harmless, since its row is never read). So the cell
        shows NaN only if your layer fills with $-\infty$: its first line says which fill your layer behaves
        like, and the next cell prints both fills side by side.

        So real stacks never leave a fully masked row as NaN. They compute 0 for it inside the attention, as
        flash-attn, PyTorch's SDPA since 2.5 (the cell prints it) and the `flash_attention` of the `efficient`
        assignment do, or let it attend to something (Hugging Face lets such a row attend to every key before
        calling SDPA, but only for torch older than 2.5, whose SDPA returned NaN there). The cell stacks your
        layer twice with residuals, first as it is, then with the padded rows of each layer's output set to 0.
        """, r"""
        ## 8. 看不到任何键的填充查询：多层堆叠时会怎样

        在左填充的批次里，一个填充查询按因果掩码能看到的键全是填充。用 $-\infty$ 填充时（参考实现的 `masked_fill(~allowed, float("-inf"))`），它的 softmax 那一行是 $0 / 0$，输出是 NaN。只有一层时，这一行从来不会被读取（下一个 token 取自最后一列）。但在真实的模型里它会被读取：有残差连接时，这一层的输出就是下一层的输入，于是这些 NaN 行在下一层成了键和值。被遮住的键权重为 0，而 $0 \times \text{NaN} = \text{NaN}$：这条序列的每一个真实 token 都会变成 NaN。

        用一个很大的有限数（比如 `-1e9`）填充时（两种检查都接受它：只要一行能看到某个键，权重就完全一样），这个现象就看不到了：分数全是 `-1e9` 的一行，softmax 在它的键上是均匀分布，没有 NaN，填充查询只是把它那些键平均了一下（无害，因为这一行从来不会被读取）。所以只有你的层用 $-\infty$ 填充时，下面的单元格才会出现 NaN：它的第一行告诉你，你的层的行为像哪一种填充；再下一个单元格把两种填充并排打印出来。

        所以实际的模型从不让一整行都被遮住的查询输出 NaN。做法是在注意力内部直接给它算出 0（flash-attn、2.5 版起的 PyTorch SDPA（单元格会打印）以及 `efficient` 作业里的 `flash_attention` 都这样做），或者让它关注某些键（Hugging Face 在调用 SDPA 之前让这样的行关注所有键，但只在 torch 低于 2.5 时这样做，那些版本的 SDPA 在这里会返回 NaN）。下面的单元格把你的层叠两层、带残差连接，先原样运行，再把每一层输出中填充位置的行置为 0。
        """),
        demo("""
        torch.manual_seed(5)
        with uses_your_code():
            layers = [DecoderAttention(d_model, 4, 2).eval() for _ in range(2)]


            def stack(tokens, mask, zero_padded_rows, show=False):
                h = embed(tokens)  # [B, S, d_model]
                positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
                for depth, block in enumerate(layers, 1):
                    out = block(h, None, positions, mask)
                    if zero_padded_rows:
                        out = out.masked_fill(~mask[..., None], 0.0)  # a query that sees no key gives 0
                    h = h + out  # the residual connection: the next layer's input
                    nan_real = [int(torch.isnan(h[b][mask[b]]).any(-1).sum()) for b in range(len(h))]
                    if show:
                        print(f"  after layer {depth}: real tokens with NaN per sequence {nan_real}")
                return h


            with torch.no_grad():
                first = layers[0](embed(tokens), None, (mask.long().cumsum(-1) - 1).clamp(min=0), mask)
                print(f"your layer: a padded query that sees no key gives NaN: {torch.isnan(first[~mask]).any().item()}"
                      " (True: a -inf fill; False: a finite fill such as -1e9, or 0 computed for it)")
                for zero in (False, True):
                    print("padded rows zeroed" if zero else "padded rows left as they are")
                    h = stack(tokens, mask, zero, show=True)
                gaps = [(h[b][mask[b]] - stack(p[None], torch.ones(1, len(p), dtype=torch.bool), True)[0]).abs().max()
                        for b, p in enumerate(prompts)]
                print(f"zeroed, two layers, batched vs each prompt alone: largest difference {max(gaps).item():.1e}, "
                      f"largest |h| {h[mask].abs().max().item():.1f}")
            q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
            sees_nothing = torch.zeros(2, 3, dtype=torch.bool)
            print("SDPA, queries that see no key:", F.scaled_dot_product_attention(q, k, v, attn_mask=sees_nothing)[0, 0].tolist())
        """),
        md(r"""
        ### Zeroing after the layer is enough to generate, not to train

        Setting the padded rows to 0 *after* the layer repairs the forward pass, and generation runs no
        backward pass. Training does: the gradient of `masked_fill` is 0 on the zeroed rows, but the softmax's
        backward multiplies that 0 by the row's NaN weights, and $0 \times \text{NaN} = \text{NaN}$ reaches
        the weights of the projections. The cell builds a two-layer stack of plain single-head attention
        (its own, so that it can choose the fill) over the same left padding, runs a loss over the real tokens
        only, and counts, for each way of handling the row, the real tokens with NaN and the parameters
        (8: four projections per layer) whose gradient holds a NaN. "0 inside" computes 0 for a row that sees
        no key inside the attention, as flash-attn does: its scores are replaced by 0 before the softmax and
        its weights multiplied by 0 after, so no NaN is ever made. Its last line is why Hugging Face fills
        with `torch.finfo(dtype).min` rather than `-1e9`: in float16, `-1e9` is $-\infty$ again.
        """, r"""
        ### 在层之后置零：生成时够用，训练时不够

        在层*之后*把填充行置为 0，修好的是前向传播；生成不做反向传播，所以够用。训练要做：`masked_fill` 在被置零的行上梯度为 0，可是 softmax 的反向传播会把这个 0 乘上该行为 NaN 的权重，$0 \times \text{NaN} = \text{NaN}$ 于是传到了各个投影的权重上。下面的单元格在同样的左填充上搭一个两层的单头朴素注意力（它自己写的，这样才能选择填充值），只在真实 token 上算损失，然后对每一种处理方式统计：含 NaN 的真实 token 个数，以及梯度中含 NaN 的参数个数（共 8 个：每层四个投影）。"内部给 0"是在注意力内部给看不到任何键的行算出 0，和 flash-attn 一样：softmax 之前把这一行的分数换成 0，之后把它的权重乘以 0，于是从头到尾不会产生 NaN。最后一行说明了 Hugging Face 为什么用 `torch.finfo(dtype).min` 而不是 `-1e9` 来填充：在 float16 中，`-1e9` 又变成了 $-\infty$。
        """),
        demo("""
        torch.manual_seed(6)
        B, S, d = 3, 6, 8
        keep = torch.arange(S) >= S - torch.tensor([6, 2, 4])[:, None]  # [B, S]: left padding, True = real token
        allowed = torch.ones(S, S, dtype=torch.bool).tril() & keep[:, None, :]  # [B, S, S]: causal, pads hidden
        x = torch.randn(B, S, d)
        blocks = [nn.ModuleDict({name: nn.Linear(d, d, bias=False) for name in "qkvo"}) for _ in range(2)]
        params = [p for block in blocks for p in block.parameters()]


        def attend(block, h, how):
            q, k, v = block["q"](h), block["k"](h), block["v"](h)  # [B, S, d] each
            scores = q @ k.mT / math.sqrt(d)  # [B, S, S] scores
            if how == "-1e9":
                weights = torch.softmax(scores.masked_fill(~allowed, -1e9), dim=-1)
            elif how == "0 inside":
                sees_some = allowed.any(-1, keepdim=True)  # [B, S, 1]
                scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~sees_some, 0.0)
                weights = torch.softmax(scores, dim=-1) * sees_some
            else:
                weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            out = block["o"](weights @ v)
            return out.masked_fill(~keep[..., None], 0.0) if how == "-inf, zeroed after" else out


        for how in ("-inf", "-1e9", "-inf, zeroed after", "0 inside"):
            h = x
            for block in blocks:
                h = h + attend(block, h, how)  # residual connection
            nan_real = [int(torch.isnan(h[b][keep[b]]).any(-1).sum()) for b in range(B)]
            grads = torch.autograd.grad(h[keep].pow(2).mean(), params)  # a loss over the real tokens only
            nan_grads = sum(bool(g.isnan().any()) for g in grads)
            print(f"{how}: real tokens with NaN per sequence {nan_real}, "
                  f"parameters with a NaN gradient {nan_grads} of {len(params)}")
        print(f"-1e9 in float16: {torch.tensor(-1e9).half().item()}; torch.finfo(torch.float16).min: "
              f"{torch.finfo(torch.float16).min}")
        """),
        *written_cells("written_left_padding"),
        md(r"""
        ## Summary

        - New tokens are at positions `len(cache)`, `len(cache) + 1`, ...; read the length before appending.
        - The cache holds keys rotated once, at their own position; never rotate what it returns.
        - The cache holds `H_kv` heads; `repeat_kv` comes after reading it (4x less memory for Llama-3-8B).
        - `rope_base` sets the pairs' wavelengths (not the usable context, which training sets); pass it to every
          `apply_rope`.
        - Decoding needs the bottom-right causal mask (flash-attn's), not `is_causal=True`'s top-left one.
        - A left-padded batch needs a key mask over past and new tokens; with RoPE alone, per-sequence positions
          (`cumsum - 1`) and positions from the first column generate the same tokens; with absolute or learned
          position embeddings only per-sequence positions do.
        - A padded query that sees no key gives NaN with a $-\infty$ fill (a `-1e9` fill hides it), which a second
          layer spreads to every real token: compute 0 for it inside the attention (flash-attn, SDPA) or let it
          attend to something; zeroing its row after the layer is enough to generate, not to train (NaN gradients).
        """, r"""
        ## 小结

        - 新 token 的位置是 `len(cache)`、`len(cache) + 1`、……；长度要在追加之前读。
        - 缓存里存的是在各自位置上旋转过一次的键；缓存返回的键永远不要再转。
        - 缓存存 `H_kv` 个头；`repeat_kv` 放在读缓存之后（Llama-3-8B 的缓存因此变为原来的 1/4）。
        - `rope_base` 决定各对的波长（而不是模型能用的上下文长度，那由训练决定）；每次调用 `apply_rope` 都要把它传进去。
        - 解码需要右下对齐的因果掩码（flash-attn 的约定），而不是 `is_causal=True` 的左上对齐。
        - 左填充的批次需要覆盖历史和新 token 的键掩码；只用 RoPE 时，按序列计算的位置（`cumsum - 1`）和从第一列数起的位置生成的 token 相同；用绝对位置编码或可学习的位置嵌入时，只有按序列计算的位置才对。
        - 用 $-\infty$ 填充时，看不到任何键的填充查询会输出 NaN（用 `-1e9` 填充则看不出来），第二层会把它扩散到每个真实 token：在注意力内部直接给它算出 0（flash-attn、SDPA 的做法），或者让它关注某些键；在层之后把它那一行置零，生成时够用，训练时不够（梯度里有 NaN）。
        """),
    ]

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# what a layer that rotates every key it reads from the cache computes": "# 一个把从缓存读出的每个键都再旋转一次的层，算出来的是这个",
    '"positions len(cache), len(cache) + 1"': '"位置为 len(cache)、len(cache) + 1"',
    '"every new token at position 0"': '"每个新 token 都放在位置 0"',
    '"cached keys rotated again"': '"缓存里的键被再次旋转"',
    'f"{gap:.2e} ({gap / full.abs().max().item():.0e} of the largest |output|): {label}"':
        'f"{gap:.2e}（最大 |输出| 的 {gap / full.abs().max().item():.0e}）：{label}"',
    'f"H = 8 query heads, H_kv = 2: the cache receives keys of shape {list(k.shape)}"':
        'f"H = 8 个查询头，H_kv = 2：缓存收到的键形状为 {list(k.shape)}"',
    '"H_kv = 8 heads cached (repeat after reading)"': '"缓存 H_kv = 8 个头（读出后再复制）"',
    '"H = 32 heads cached (repeat before appending)"': '"缓存 H = 32 个头（追加前就复制）"',
    "# keys and values, every layer": "# 键和值，所有层",
    'f"{label}: {total / 2**30:.2f} GiB per sequence"': 'f"{label}：每条序列 {total / 2**30:.2f} GiB"',
    "# 2i / head_dim of every pair": "# 每一对的 2i / head_dim",
    "# positions per full turn, pair by pair": "# 每一对转一整圈所需的位置数",
    'f"base {base:>9,.0f}: slowest pair turns once every {wavelengths[-1].item():>12,.0f} positions; "':
        'f"base {base:>9,.0f}：最慢的一对每 {wavelengths[-1].item():>12,.0f} 个位置转一圈；"',
    'f"{longer:>2} of {len(wavelengths)} pairs turn less than once in {trained:,} tokens"':
        'f"{len(wavelengths)} 对中有 {longer:>2} 对在 {trained:,} 个 token 内转不满一圈"',
    'f"Meta\'s form vs your apply_rope: largest difference {gap:.1e}, largest |x| {x.abs().max().item():.1f}"':
        'f"Meta 的复数写法与你的 apply_rope 相比：最大差值 {gap:.1e}，最大 |x| 为 {x.abs().max().item():.1f}"',
    '"top-left (is_causal=True, tril()):\\n"': '"左上对齐（is_causal=True，tril()）：\\n"',
    '"bottom-right (flash-attn, causal_lower_right):\\n"': '"右下对齐（flash-attn，causal_lower_right）：\\n"',
    'f"the two outputs differ by up to ': 'f"两种输出最多相差 ',
    'f" (largest |output| {bottom_right.abs().max().item():.2f})"': 'f"（最大 |输出| 为 {bottom_right.abs().max().item():.2f}）"',
    "# [B, S]: 0 at each first real token": "# [B, S]：每条序列第一个真实 token 处为 0",
    "# a learned absolute position table, as in GPT-2": "# 一张可学习的绝对位置表，和 GPT-2 一样",
    "# [B, S]: from the first column": "# [B, S]：从第一列开始数",
    "# [B, vocab]": "# [B, vocab]：下一个 token 的 logits",
    'f"RoPE, positions from the first column: same tokens {torch.equal(shared, batched)}, "':
        'f"RoPE，位置从第一列数起：生成的 token 相同 {torch.equal(shared, batched)}，"',
    'f"logits differ by up to {gap:.1e} (largest |logit| {scale:.2f}, relative {gap / scale:.0e})"':
        'f"logits 最多相差 {gap:.1e}（最大 |logit| 为 {scale:.2f}，相对误差 {gap / scale:.0e}）"',
    '"per-sequence positions"': '"按序列计算的位置"',
    '"positions from the first column"': '"从第一列数起的位置"',
    'f"a learned position table, {label}: every prompt as if alone {same}"':
        'f"可学习的位置表，{label}：每个提示词都与单独生成时相同 {same}"',
    "# [B, S, d_model]": "# [B, S, d_model]：嵌入",
    "# a query that sees no key gives 0": "# 看不到任何键的查询输出 0",
    "# the residual connection: the next layer's input": "# 残差连接：下一层的输入",
    'f"  after layer {depth}: real tokens with NaN per sequence {nan_real}"':
        'f"  第 {depth} 层之后：每条序列中含 NaN 的真实 token 个数 {nan_real}"',
    '"padded rows zeroed"': '"填充位置的行置零"',
    '"padded rows left as they are"': '"填充位置的行保持原样"',
    'f"zeroed, two layers, batched vs each prompt alone: largest difference {max(gaps).item():.1e}, "':
        'f"置零、两层：批量生成与每个提示词单独生成相比，最大差值 {max(gaps).item():.1e}，"',
    'f"largest |h| {h[mask].abs().max().item():.1f}"': 'f"最大 |h| 为 {h[mask].abs().max().item():.1f}"',
    '"SDPA, queries that see no key:"': '"SDPA 中看不到任何键的查询："',
    'f"your layer: a padded query that sees no key gives NaN: {torch.isnan(first[~mask]).any().item()}"':
        'f"你的层：看不到任何键的填充查询输出 NaN：{torch.isnan(first[~mask]).any().item()}"',
    '" (True: a -inf fill; False: a finite fill such as -1e9, or 0 computed for it)"':
        '"（True：用 -inf 填充；False：用 -1e9 这样的有限数填充，或者直接给它算出 0）"',
    "# [B, S]: left padding, True = real token": "# [B, S]：左填充，True 表示真实 token",
    "# [B, S, S]: causal, pads hidden": "# [B, S, S]：因果，并遮住填充",
    "# [B, S, d] each": "# 各为 [B, S, d]",
    "# [B, S, S] scores": "# [B, S, S]：分数",
    "# [B, S, 1]": "# [B, S, 1]：这一行能否看到某个键",
    '"0 inside"': '"内部给 0"',
    '"-inf, zeroed after"': '"-inf，之后置零"',
    "# residual connection": "# 残差连接",
    "# a loss over the real tokens only": "# 只在真实 token 上算的损失",
    'f"{how}: real tokens with NaN per sequence {nan_real}, "': 'f"{how}：每条序列中含 NaN 的真实 token 个数 {nan_real}，"',
    'f"parameters with a NaN gradient {nan_grads} of {len(params)}"': 'f"梯度含 NaN 的参数 {nan_grads} 个（共 {len(params)} 个）"',
    'f"-1e9 in float16: {torch.tensor(-1e9).half().item()}; torch.finfo(torch.float16).min: "':
        'f"-1e9 在 float16 中为 {torch.tensor(-1e9).half().item()}；torch.finfo(torch.float16).min 为 "',
    "# [B, 1]: greedy": "# [B, 1]：贪心解码",
    "# one more than each sequence's last position": "# 每条序列上一个位置加一",
    "# past and new keys": "# 过去的键和新的键",
    "# 0 as the pad token": "# 用 0 作填充 token",
    "# left padding": "# 左填充",
    'f"prompt of {len(p)}: batched {batched[b].tolist()}, alone {alone[0].tolist()}, "':
        'f"长度为 {len(p)} 的提示词：批量生成 {batched[b].tolist()}，单独生成 {alone[0].tolist()}，"',
    'f"equal: {torch.equal(batched[b], alone[0])}"': 'f"相同：{torch.equal(batched[b], alone[0])}"',
}
