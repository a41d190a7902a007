"""Notebook 04 of `generation`: a Llama-style decoder's attention, where RoPE, the KV cache and GQA meet."""
from course.cells import Cell, check, demo, graded_cell, md, setup, solution_source
from course.content.written import written_cells

from . import kv_cache, positions

NAME = "04_decoder"

# The pieces of notebooks 01 and 02 that DecoderAttention calls: this notebook stands alone, so its solution cell
# holds them too (stubs in the release: paste your own).
PIECES = ("apply_rope", "decode_causal_mask", "repeat_kv", "KVCache")
PASTE = ("paste your own from notebook 01 or 02 (the graded version is graded there; this copy only serves\n"
         "DecoderAttention here).",
         "把你在 notebook 01 或 02 里写好的版本粘贴过来（那边的版本在那边评分；\n"
         "这份拷贝只供这里的 DecoderAttention 使用）。")
HINTS = {
    **{name: PASTE for name in ("apply_rope", "decode_causal_mask", "repeat_kv")},
    "KVCache.__init__": PASTE,
    "KVCache.append": ("as in notebook 02.", "与 notebook 02 相同。"),
    "KVCache.__len__": ("as in notebook 02.", "与 notebook 02 相同。"),
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

        notebook 01 和 02 分别实现了 RoPE、KV 缓存和分组查询注意力。真实的解码器（Meta Llama 的 `Attention.forward`、Hugging Face 的 `LlamaAttention`）在同一层里同时用到这三样，而大家真正写出来的 bug 恰恰出在它们的接口处：新 token 旋转到了错误的位置、缓存里的键被转了两次、缓存存了太多的头、掩码对齐方向反了、忘了处理填充。本 notebook 实现这一层，并用具体数字展示每一种错误。

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
        your own versions, `apply_rope` with its `base` argument and `[B, S]` positions), then the class.
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

        下面的单元格先放着 notebook 01 和 02 里那些函数的空壳（本 notebook 自成一体：把你自己的版本粘贴进来，`apply_rope` 要带 `base` 参数并支持 `[B, S]` 的位置），然后是这个类。
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
        `0 .. S_k - 1`: what a layer that "applies RoPE to all keys" after reading the cache does.
        """, r"""
        ## 2. 两个位置 bug，用数字说话

        先输入 4 个 token 的提示，再逐个输入 2 个 token，与一次性处理整条序列比较。第一次运行用你的实现。第二次对每个新 token 都传 `positions=[0]`：这就是忘了缓存偏移的层会做的事。第三次用一个缓存，它把返回的键在 `0 .. S_k - 1` 上再旋转一次：这就是读出缓存之后"对所有键做 RoPE"的层会做的事。
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
                    print(f"{label:>38}: largest difference from the full pass {gap:.2e}")
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
        its start after $2\pi / \theta_i$ positions. The slowest pair sets how far apart two tokens can be
        before their angle repeats (and, in practice, how long a context the model can tell apart). The cell
        prints that wavelength for the original base 10000 and for Llama 3's 500000, at head_dim 128.

        Context extension methods change exactly these angles: position interpolation divides the positions
        by a factor (longer inputs squeezed into the trained range), NTK-aware scaling raises the base
        instead (slow pairs stretched, fast pairs kept), and YaRN mixes the two per frequency. Llama 3 simply
        trained with a larger base. In your layer the base is a constructor argument, passed to every
        `apply_rope` call; forgetting it silently uses 10000.
        """, r"""
        ## 4. 为什么 `rope_base` 很重要

        第 $i$ 对每个位置旋转 $\theta_i = \text{base}^{-2i/\text{head\_dim}}$，所以经过 $2\pi / \theta_i$ 个位置它就转回起点。最慢的那一对决定了两个 token 相距多远时角度才会重复（实际上也决定了模型能区分多长的上下文）。下面的单元格在 head_dim 128 时，打印原始底数 10000 和 Llama 3 所用的 500000 对应的这个波长。

        上下文扩展方法改的正是这些角度：位置插值（position interpolation）把位置除以一个系数（把更长的输入压进训练时的范围），NTK-aware 缩放则改为调大底数（拉长慢的对，保留快的对），YaRN 按频率把两种做法混合起来。Llama 3 则直接用更大的底数训练。在你的层里，底数是构造函数的参数，要传给每一次 `apply_rope` 调用；忘了传就会悄悄用上 10000。
        """),
        demo("""
        head_dim = 128
        slowest = (head_dim - 2) / head_dim  # the exponent 2i / head_dim of the last pair
        for base in (10000.0, 500000.0):
            wavelength = 2 * math.pi * base ** slowest
            print(f"base {base:>9,.0f}: the slowest pair turns once every {wavelength:>12,.0f} positions")
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
            print(f"Meta's form vs your apply_rope: largest difference {(meta - apply_rope(x, pos)).abs().max().item():.1e}")
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
        print(f"the two outputs differ by up to {(top_left - bottom_right).abs().max().item():.2f}")
        """),
        md(r"""
        ## 7. Generating a batch: left padding

        To generate for several prompts at once they are padded to one length. Padding goes on the **left**,
        so that every prompt's last token sits in the last column and the next token of each sequence is
        appended in the same place. Two things must then follow each sequence, not the batch:

        - **positions**: a sequence's first real token is its position 0. From the padding mask,
          `positions = mask.cumsum(-1) - 1` (padding gets -1; clamp it to 0, it is masked anyway); each new
          token is one more than its sequence's last position;
        - **`key_mask`**: padded keys must be hidden from every query, at every step: the mask covers the
          cached positions and the new ones, so it grows by one column per generated token.

        The cell builds a tiny model (an embedding, your layer, an output projection), generates 4 tokens
        greedily for three prompts of different lengths in one left-padded batch, then for each prompt alone.
        (A padded query that sees no key at all gets a NaN output; it is never read.)
        """, r"""
        ## 7. 批量生成：左填充

        要同时为几个提示生成，就得把它们填充到同一长度。填充放在**左边**，这样每个提示的最后一个 token 都在最后一列，每条序列的下一个 token 也都追加在同一个位置。于是有两样东西必须按每条序列来算，而不是按整个批次：

        - **位置**：每条序列第一个真实 token 的位置是 0。从填充掩码得到 `positions = mask.cumsum(-1) - 1`（填充处是 -1；把它截到 0，反正会被遮住）；每个新 token 的位置是它所在序列最后一个位置加一；
        - **`key_mask`**：填充的键在每一步都要对所有查询隐藏：掩码覆盖已缓存的位置和新位置，所以每生成一个 token 它就多一列。

        下面的单元格搭一个很小的模型（一个嵌入层、你的这一层、一个输出投影），把三个长度不同的提示放进一个左填充的批次里，贪心地生成 4 个 token，再把每个提示单独生成一遍。（一个什么键都看不到的填充查询会输出 NaN；这个输出从来不会被读取。）
        """),
        demo("""
        torch.manual_seed(4)
        vocab, d_model = 50, 32
        with uses_your_code():
            embed, layer, head = nn.Embedding(vocab, d_model), DecoderAttention(d_model, 4, 2).eval(), nn.Linear(d_model, vocab)


            def generate(tokens, mask, steps=4):
                cache = KVCache()
                positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, S]: 0 at each first real token
                out = layer(embed(tokens), cache, positions, mask)
                generated = []
                for _ in range(steps):
                    nxt = head(out[:, -1]).argmax(-1, keepdim=True)  # [B, 1]: greedy
                    generated.append(nxt)
                    positions = positions[:, -1:] + 1  # one more than each sequence's last position
                    mask = torch.cat([mask, torch.ones_like(nxt, dtype=torch.bool)], dim=1)  # past and new keys
                    out = layer(embed(nxt), cache, positions, mask)
                return torch.cat(generated, dim=1)


            prompts = [torch.randint(vocab, (n,)) for n in (6, 2, 4)]
            width = max(len(p) for p in prompts)
            tokens = torch.zeros(len(prompts), width, dtype=torch.long)  # 0 as the pad token
            mask = torch.zeros(len(prompts), width, dtype=torch.bool)
            for b, p in enumerate(prompts):
                tokens[b, width - len(p):], mask[b, width - len(p):] = p, True  # left padding
            with torch.no_grad():
                batched = generate(tokens, mask)
                for b, p in enumerate(prompts):
                    alone = generate(p[None], torch.ones(1, len(p), dtype=torch.bool))
                    print(f"prompt of {len(p)}: batched {batched[b].tolist()}, alone {alone[0].tolist()}, "
                          f"equal: {torch.equal(batched[b], alone[0])}")
        """),
        *written_cells("written_left_padding"),
        md(r"""
        ## Summary

        - New tokens are at positions `len(cache)`, `len(cache) + 1`, ...; read the length before appending.
        - The cache holds keys rotated once, at their own position; never rotate what it returns.
        - The cache holds `H_kv` heads; `repeat_kv` comes after reading it (4x less memory for Llama-3-8B).
        - `rope_base` sets the slowest pair's wavelength; pass it to every `apply_rope`.
        - Decoding needs the bottom-right causal mask (flash-attn's), not `is_causal=True`'s top-left one.
        - A left-padded batch needs per-sequence positions (`cumsum - 1`) and a key mask over past and new tokens.
        """, r"""
        ## 小结

        - 新 token 的位置是 `len(cache)`、`len(cache) + 1`、……；长度要在追加之前读。
        - 缓存里存的是在各自位置上旋转过一次的键；缓存返回的键永远不要再转。
        - 缓存存 `H_kv` 个头；`repeat_kv` 放在读缓存之后（Llama-3-8B 的缓存因此小 4 倍）。
        - `rope_base` 决定最慢那一对的波长；每次调用 `apply_rope` 都要把它传进去。
        - 解码需要右下对齐的因果掩码（flash-attn 的约定），而不是 `is_causal=True` 的左上对齐。
        - 左填充的批次需要按序列计算的位置（`cumsum - 1`），以及覆盖历史和新 token 的键掩码。
        """),
    ]

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# what a layer that rotates every key it reads from the cache computes": "# 一个把从缓存读出的每个键都再旋转一次的层，算出来的是这个",
    '"positions len(cache), len(cache) + 1"': '"位置为 len(cache)、len(cache) + 1"',
    '"every new token at position 0"': '"每个新 token 都放在位置 0"',
    '"cached keys rotated again"': '"缓存里的键被再次旋转"',
    'f"{label:>38}: largest difference from the full pass {gap:.2e}"': 'f"{label:>30}：与一次性计算相比最大差值 {gap:.2e}"',
    'f"H = 8 query heads, H_kv = 2: the cache receives keys of shape {list(k.shape)}"':
        'f"H = 8 个查询头，H_kv = 2：缓存收到的键形状为 {list(k.shape)}"',
    '"H_kv = 8 heads cached (repeat after reading)"': '"缓存 H_kv = 8 个头（读出后再复制）"',
    '"H = 32 heads cached (repeat before appending)"': '"缓存 H = 32 个头（追加前就复制）"',
    "# keys and values, every layer": "# 键和值，所有层",
    'f"{label}: {total / 2**30:.2f} GiB per sequence"': 'f"{label}：每条序列 {total / 2**30:.2f} GiB"',
    "# the exponent 2i / head_dim of the last pair": "# 最后一对的指数 2i / head_dim",
    'f"base {base:>9,.0f}: the slowest pair turns once every {wavelength:>12,.0f} positions"':
        'f"base {base:>9,.0f}：转得最慢的那一对每 {wavelength:>12,.0f} 个位置转一圈"',
    'f"Meta\'s form vs your apply_rope: largest difference ': 'f"Meta 的复数写法与你的 apply_rope 相比：最大差值 ',
    '"top-left (is_causal=True, tril()):\\n"': '"左上对齐（is_causal=True，tril()）：\\n"',
    '"bottom-right (flash-attn, causal_lower_right):\\n"': '"右下对齐（flash-attn，causal_lower_right）：\\n"',
    'f"the two outputs differ by up to ': 'f"两种输出最多相差 ',
    "# [B, S]: 0 at each first real token": "# [B, S]：每条序列第一个真实 token 处为 0",
    "# [B, 1]: greedy": "# [B, 1]：贪心解码",
    "# one more than each sequence's last position": "# 每条序列上一个位置加一",
    "# past and new keys": "# 过去的键和新的键",
    "# 0 as the pad token": "# 用 0 作填充 token",
    "# left padding": "# 左填充",
    'f"prompt of {len(p)}: batched {batched[b].tolist()}, alone {alone[0].tolist()}, "':
        'f"长度为 {len(p)} 的提示：批量生成 {batched[b].tolist()}，单独生成 {alone[0].tolist()}，"',
    'f"equal: {torch.equal(batched[b], alone[0])}"': 'f"相同：{torch.equal(batched[b], alone[0])}"',
}
