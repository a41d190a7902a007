"""Notebook 02 of `generation`: the KV cache, its causal mask, its memory, and grouped-query attention."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "02_kv_cache"

HINTS = {
    "decode_causal_mask": (
        "the S_q queries are the *last* S_q of the S_k positions: each may read every key up to its own position.",
        "S_q 个查询是 S_k 个位置中的*最后* S_q 个：每个查询能读取直到它自己位置为止的所有键。",
    ),
    "repeat_kv": (
        "each kv head must appear n_rep times in a row (kv 0, kv 0, kv 1, kv 1, ...), nothing else changes.",
        "每个 kv 头要连续出现 n_rep 次（kv 0, kv 0, kv 1, kv 1, ...），其他一概不变。",
    ),
    "KVCache.__init__": (
        "what does the cache hold before the first append, and how will append and len tell?",
        "第一次 append 之前缓存里有什么？append 和 len 又怎样知道这一点？",
    ),
    "KVCache.append": (
        "the cached keys and the new ones are one sequence, older positions first: which axis of\n"
        "[B, H, S, head_dim] grows?",
        "缓存中的键和新来的键属于同一个序列，旧位置在前：\n"
        "[B, H, S, head_dim] 的哪个维度在增长？",
    ),
    "KVCache.__len__": (
        "the number of positions, not the number of calls.",
        "是位置数，不是调用次数。",
    ),
    "CachedSelfAttention.__init__": (
        "the same two layers as MultiHeadSelfAttention: W_qkv (rows q, k, v) and W_o.",
        "与 MultiHeadSelfAttention 相同的两层：W_qkv（行依次是 q、k、v）和 W_o。",
    ),
    "CachedSelfAttention.forward": (
        "project and split the new tokens; with a cache, append k and v first and use what\n"
        "append returns; scores [B, H, S_new, S_k] masked with decode_causal_mask(S_new, S_k).",
        "对新 token 做投影并拆分多头；有缓存时，先追加 k 和 v，再使用\n"
        "append 返回的结果；分数 [B, H, S_new, S_k] 用 decode_causal_mask(S_new, S_k) 加掩码。",
    ),
    "kv_cache_bytes": (
        "count what the cache stores, as it stores it: which tensors, in how many layers, of which shape, in which dtype.",
        "按缓存实际存储的方式来数：存了哪些张量、有多少层、每个张量什么形状、用什么 dtype。",
    ),
}

# The Chinese docstrings of the solution functions, classes and methods (the build puts them in the Chinese
# edition's stubs).
DOCSTRINGS_ZH = {
    "decode_causal_mask": """BoolTensor [S_q, S_k]：查询是 S_k 个位置中的最后 S_q 个；键 j <= i + (S_k - S_q) 处为 True。""",
    "repeat_kv": """[B, H_kv, S, head_dim] -> [B, H_kv * n_rep, S, head_dim]：kv 头 h 服务于查询头 h * n_rep ... (h + 1) * n_rep - 1。""",
    "KVCache": """到目前为止见过的每个位置的键和值，各为 [B, H, S_cached, head_dim]。""",
    "KVCache.__init__": """一个空缓存。""",
    "KVCache.append": """把 k, v [B, H, S_new, head_dim] 加到已缓存的位置之后；返回全部位置的键和值。""",
    "KVCache.__len__": """缓存的位置数（已缓存的键在序列维度上的长度）。""",
    "CachedSelfAttention": """因果多头自注意力，可以借助 KVCache 一次生成一个 token。""",
    "CachedSelfAttention.forward": """x [B, S_new, d_model]（新 token）-> [B, S_new, d_model]；键和值经由 `cache` 存取。""",
    "kv_cache_bytes": """所有层缓存的键和值的字节数：2（K 和 V）* B * layers * H_kv * S * head_dim * 每个元素的字节数。""",
}


# The second hints, folded above their stubs (course.cells.recipe): the recipe, for after the first hint.
RECIPES = {
    "decode_causal_mask": (
        "Query `i` sits at position `S_k - S_q + i`, so it keeps key `j` when `j <= i + (S_k - S_q)`: the lower "
        "triangle shifted right by `S_k - S_q`, `torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=S_k - S_q)`.",
        "查询 `i` 位于位置 `S_k - S_q + i`，所以当 `j <= i + (S_k - S_q)` 时保留键 `j`：也就是向右平移 `S_k - S_q` "
        "的下三角，`torch.ones(S_q, S_k, dtype=torch.bool).tril(diagonal=S_k - S_q)`。",
    ),
    "KVCache": (
        "`__init__`: `self.k = self.v = None`. `append`: the first time, store `k` and `v`; afterwards "
        "`torch.cat([self.k, k], dim=2)` (dim 2 is the sequence axis of `[B, H, S, head_dim]`), the same for `v`; "
        "return both. `__len__`: 0 while empty, else `self.k.shape[2]`.",
        "`__init__`：`self.k = self.v = None`。`append`：第一次直接存下 `k` 和 `v`；之后用 "
        "`torch.cat([self.k, k], dim=2)`（dim 2 是 `[B, H, S, head_dim]` 的序列维度），`v` 也一样；"
        "返回两者。`__len__`：为空时是 0，否则是 `self.k.shape[2]`。",
    ),
    "kv_cache_bytes": (
        "Keys and values (2) x `layers` x `batch` x `kv_heads` x `seq_len` x `head_dim` elements, times "
        "`torch.empty(0, dtype=dtype).element_size()` bytes each.",
        "键和值（2）x `layers` x `batch` x `kv_heads` x `seq_len` x `head_dim` 个元素，每个元素 "
        "`torch.empty(0, dtype=dtype).element_size()` 字节。",
    ),
    "repeat_kv": (
        "`x[:, :, None]` is `[B, H_kv, 1, S, head_dim]`; `.expand(B, H_kv, n_rep, S, head_dim)` repeats it without "
        "copying; `.reshape(B, H_kv * n_rep, S, head_dim)` merges the two head axes, kv head `h` first. "
        "(`torch.repeat_interleave(x, n_rep, dim=1)` does the same in one call.)",
        "`x[:, :, None]` 是 `[B, H_kv, 1, S, head_dim]`；`.expand(B, H_kv, n_rep, S, head_dim)` 不复制数据就完成重复；"
        "`.reshape(B, H_kv * n_rep, S, head_dim)` 把两个头的维度合并，kv 头 `h` 的副本排在一起。"
        "（`torch.repeat_interleave(x, n_rep, dim=1)` 一次调用就能做到同样的事。）",
    ),
}


def cells():
    return [
        md(r"""
        # 02 · Generating one token at a time: the KV cache

        A language model writes text one token at a time: it reads the prompt, predicts the next token,
        appends it, and repeats. This notebook makes that loop cheap with a **KV cache**, gets its causal
        mask right (a classic bug hides there), measures what the cache costs in memory, and shrinks it
        with **grouped-query attention**.

        | part | what you write |
        |---|---|
        | `kv_cache` | `decode_causal_mask`, `class KVCache`, `class CachedSelfAttention`, `kv_cache_bytes`, `repeat_kv` |

        Per-head tensors are `[B, H, S, head_dim]` as in the first assignment. `S_q` counts the queries of a
        call (the new tokens), `S_k` the keys they may look at (everything cached, new tokens included).
        """, r"""
        # 02 · 一次生成一个 token：KV 缓存

        语言模型是一个 token 一个 token 地写出文本的：读入提示词（prompt），预测下一个 token，把它接到后面，然后重复。本 notebook 用 **KV 缓存** 省掉这个循环里的重复计算，把它的因果掩码写对（一个经典 bug 就藏在这里），测量缓存占用多少显存，再用 **分组查询注意力**（grouped-query attention）把它缩小。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `kv_cache` | `decode_causal_mask`, `class KVCache`, `class CachedSelfAttention`, `kv_cache_bytes`, `repeat_kv` |

        和第一个作业一样，每个头的张量形状是 `[B, H, S, head_dim]`。`S_q` 是一次调用中查询的个数（新 token），`S_k` 是它们可以看的键的个数（缓存里的全部位置，包括新 token）。
        """),
        setup(),
        md(r"""
        ## 1. Why generation recomputes nothing with a cache

        In a decoder every token attends only to itself and the tokens before it (causal attention). So
        when token $t + 1$ arrives, nothing about tokens $0 \dots t$ changes: not their keys, not their
        values, not their outputs. Recomputing them at every step is pure waste. The **KV cache** keeps the
        keys and values of every position seen so far; each step then

        1. projects only the new token(s) to `q, k, v`;
        2. appends the new `k, v` to the cache;
        3. lets the new queries attend over everything in the cache.

        The first cell checks the claim with PyTorch's own causal attention: the outputs of the first four
        tokens are the same whether two more tokens follow or not. The second counts how many token
        projections a whole generation needs, without and with a cache.
        """, r"""
        ## 1. 为什么有了缓存，生成时什么都不用重算

        在解码器里，每个 token 只关注它自己和它之前的 token（因果注意力）。所以当第 $t + 1$ 个 token 到来时，token $0 \dots t$ 的一切都不会变：它们的键、值和输出都不变。每一步都把它们重算一遍纯属浪费。**KV 缓存** 保存到目前为止见过的每个位置的键和值；于是每一步：

        1. 只把新 token 投影成 `q, k, v`；
        2. 把新的 `k, v` 追加到缓存里；
        3. 让新的查询对缓存中的全部内容做注意力。

        第一个单元格用 PyTorch 自带的因果注意力验证这个说法：无论后面是否还跟着两个 token，前四个 token 的输出都一样。第二个单元格统计完整生成一次所需的 token 投影次数，对比不用缓存和使用缓存两种情况。
        """),
        demo("""
        torch.manual_seed(0)
        attention = nn.MultiheadAttention(16, 4, bias=False, batch_first=True).eval()
        x = torch.randn(1, 6, 16)


        def causal_out(x):
            S = x.shape[1]
            future = torch.ones(S, S, dtype=torch.bool).triu(1)  # True = may NOT attend (nn.MultiheadAttention)
            with torch.no_grad():
                return attention(x, x, x, attn_mask=future, need_weights=False)[0]


        gap = (causal_out(x)[:, :4] - causal_out(x[:, :4])).abs().max().item()
        print(f"outputs of tokens 0..3, with and without tokens 4 and 5 after them: largest difference {gap:.1e}")
        """),
        demo("""
        for T in (100, 1000, 4000):
            without = T * (T + 1) // 2  # step t recomputes the keys and values of all t tokens
            print(f"{T:>5} generated tokens: {without:>10,} token projections without a cache, {T:>5,} with one "
                  f"({without / T:,.0f}x fewer)")
        """),
        md(r"""
        The attention itself still grows with the length (each new query reads all cached keys), but the
        projections, and every layer's work on the old tokens, are done once.

        ## 2. The causal mask when queries are fewer than keys

        Generation calls attention with fewer queries than keys. The first call (the **prefill**) runs the
        whole prompt: `S_q = S_k`. Every later call (**decoding**) has `S_q` new tokens, often one, and
        `S_k = ` cached + new positions. The queries are the **last** `S_q` positions, so query $i$ of the
        call sits at absolute position $i + (S_k - S_q)$ and may see the keys

        $$j \le i + (S_k - S_q).$$

        Drawn as a matrix, the lower triangle ends in the bottom-right corner: the mask is
        **bottom-right aligned**. For `S_q = 2, S_k = 5`, query 0 is position 3 and sees keys 0..3; query
        1 is position 4 and sees all five.

        **The trap.** `F.scaled_dot_product_attention(q, k, v, is_causal=True)` uses the lower triangle of
        the `[S_q, S_k]` matrix aligned to the **top-left** corner: query 0 sees key 0 only. When `S_q = S_k`
        the two alignments agree, which is why the bug hides until decoding; with one new token and a
        cache of five, top-left alignment lets the newest token see only the first token of the prompt.
        The cell prints the mask `is_causal=True` behaves like, and shows that SDPA's output equals
        attention with that mask.
        """, r"""
        注意力本身的计算量仍然随长度增长（每个新查询都要读所有缓存的键），但投影，以及每一层对旧 token 的所有计算，都只做一次。

        ## 2. 查询比键少时的因果掩码

        生成时调用注意力，查询比键少。第一次调用（**预填充**，prefill）处理整个提示词：`S_q = S_k`。之后的每次调用（**解码**）有 `S_q` 个新 token，常常只有一个，而 `S_k = ` 缓存的位置数 + 新位置数。查询是**最后** `S_q` 个位置，所以这次调用的第 $i$ 个查询位于绝对位置 $i + (S_k - S_q)$，可以看到满足下式的键

        $$j \le i + (S_k - S_q).$$

        画成矩阵的话，下三角在右下角结束：这个掩码是**右下对齐**的。以 `S_q = 2, S_k = 5` 为例，查询 0 位于位置 3，能看到键 0..3；查询 1 位于位置 4，五个键全都能看到。

        **陷阱。** `F.scaled_dot_product_attention(q, k, v, is_causal=True)` 使用的是 `[S_q, S_k]` 矩阵中与 **左上**角对齐的下三角：查询 0 只能看到键 0。当 `S_q = S_k` 时两种对齐方式一致，所以这个 bug 一直藏到解码时才出现；在一个新 token、缓存里有五个位置的情况下，左上对齐会让最新的 token 只能看到提示词的第一个 token。这个单元格打印 `is_causal=True` 实际等价的掩码，并验证 SDPA 的输出与使用这个掩码的注意力相同。
        """),
        demo("""
        torch.manual_seed(1)
        S_q, S_k = 2, 5
        q, k, v = torch.randn(1, 1, S_q, 4), torch.randn(1, 1, S_k, 4), torch.randn(1, 1, S_k, 4)
        top_left = torch.ones(S_q, S_k, dtype=torch.bool).tril()  # True = may attend
        print("the mask of is_causal=True for S_q=2, S_k=5 (top-left aligned):")
        print(top_left.int())
        same = torch.allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              F.scaled_dot_product_attention(q, k, v, attn_mask=top_left))
        print("SDPA with is_causal=True equals SDPA with this mask:", same)
        """),
        *written_cells("written_decode_alignment"),
        recipe("decode_causal_mask", RECIPES),
        solution("decode_causal_mask", HINTS),
        check("check_decode_causal_mask(decode_causal_mask)", "check_decode_causal_mask"),
        md(r"""
        With `F.scaled_dot_product_attention` the fix is `attn_mask=torch.nn.attention.bias.causal_lower_right(S_q, S_k)`:
        an object that stands for the bottom-right mask without building it, so that the fused kernels
        stay available on a GPU. The cell compares it with your mask, on the mask and on SDPA's output.
        """, r"""
        用 `F.scaled_dot_product_attention` 时，正确的写法是 `attn_mask=torch.nn.attention.bias.causal_lower_right(S_q, S_k)`：这个对象代表右下对齐的掩码，但并不真的把它构造出来，因此在 GPU 上仍然可以用融合内核。这个单元格把它和你的掩码做比较，既比较掩码本身，也比较 SDPA 的输出。
        """),
        demo("""
        from torch.nn.attention.bias import causal_lower_right

        torch.manual_seed(1)
        S_q, S_k = 2, 5
        q, k, v = torch.randn(1, 1, S_q, 4), torch.randn(1, 1, S_k, 4), torch.randn(1, 1, S_k, 4)
        with uses_your_code():
            yours = decode_causal_mask(S_q, S_k)
            print("your decode_causal_mask(2, 5):")
            print(yours.int())
            official = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(S_q, S_k))
            mine = F.scaled_dot_product_attention(q, k, v, attn_mask=yours)
            top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            print(f"SDPA with your mask vs causal_lower_right: largest difference {(mine - official).abs().max().item():.1e}")
            print(f"SDPA with is_causal=True vs causal_lower_right: largest difference {(top_left - official).abs().max().item():.2f}"
                  f" (largest |output| {official.abs().max().item():.2f})")
        """),
        md(r"""
        ## 3. The cache

        `KVCache` holds the keys and the values of every position seen so far, each `[B, H, S_cached, head_dim]`.
        `append(k, v)` takes the keys and values of the new tokens, `[B, H, S_new, head_dim]`, stores them
        **after** the cached ones, along the sequence axis, and returns everything, keys first:

        | call | stored keys | returned `k_all` |
        |---|---|---|
        | `KVCache()` | nothing, `len(cache) == 0` | |
        | `append(k, v)` with 4 prompt tokens | `[B, H, 4, head_dim]` | `[B, H, 4, head_dim]` |
        | `append(k, v)` with 1 new token | `[B, H, 5, head_dim]` | `[B, H, 5, head_dim]` |

        `len(cache)` is the number of cached positions. (Concatenating copies the whole cache at every
        step; inference servers allocate `[B, H, S_max, head_dim]` once and write into it, or split the
        cache into pages. The simple version is enough here.)
        """, r"""
        ## 3. 缓存

        `KVCache` 保存到目前为止见过的每个位置的键和值，各为 `[B, H, S_cached, head_dim]`。`append(k, v)` 接收新 token 的键和值 `[B, H, S_new, head_dim]`，沿序列维度把它们存到已缓存内容的**后面**，然后返回全部内容，键在前：

        | 调用 | 存储的键 | 返回的 `k_all` |
        |---|---|---|
        | `KVCache()` | 什么都没有，`len(cache) == 0` | |
        | 提示词有 4 个 token 时 `append(k, v)` | `[B, H, 4, head_dim]` | `[B, H, 4, head_dim]` |
        | 1 个新 token 时 `append(k, v)` | `[B, H, 5, head_dim]` | `[B, H, 5, head_dim]` |

        `len(cache)` 是缓存的位置数。（拼接在每一步都会复制整个缓存；推理服务会一次性分配 `[B, H, S_max, head_dim]` 然后往里写，或者把缓存分成若干页。这里用简单版本就够了。）
        """),
        recipe("KVCache", RECIPES),
        solution("KVCache", HINTS),
        check("check_kv_cache(KVCache)", "check_kv_cache"),
        md(r"""
        ## 4. Cached causal self-attention

        `CachedSelfAttention(d_model, num_heads)` has the layers of the first assignment's
        `MultiHeadSelfAttention` (`W_qkv`, rows q, k, v, and `W_o`, both bias-free) and runs causal
        attention of the new tokens `x [B, S_new, d_model]`:

        | step | shape (`B=2, S_new=1, d_model=16, H=4`, 5 positions cached before) |
        |---|---|
        | `W_qkv(x)`, cut into q, k, v, split into heads | three `[2, 4, 1, 4]` |
        | with a cache: `k, v = cache.append(k, v)` | `[2, 4, 6, 4]` each (`S_k = 6`) |
        | scores `q k^T / sqrt(head_dim)` | `[2, 4, 1, 6]` |
        | `-inf` where `decode_causal_mask(S_new, S_k)` is False | `[2, 4, 1, 6]` |
        | softmax over keys, `@ v`, merge heads, `W_o` | `[2, 1, 16]` |

        Without a cache it is ordinary causal self-attention (`S_k = S_new`). The promise: a prompt
        followed by one token at a time, through one cache, gives exactly the outputs of the whole
        sequence run at once.
        """, r"""
        ## 4. 带缓存的因果自注意力

        `CachedSelfAttention(d_model, num_heads)` 的层与第一个作业的 `MultiHeadSelfAttention` 相同（`W_qkv`，行依次是 q、k、v，以及 `W_o`，两者都没有偏置），对新 token `x [B, S_new, d_model]` 做因果注意力：

        | 步骤 | 形状（`B=2, S_new=1, d_model=16, H=4`，之前已缓存 5 个位置） |
        |---|---|
        | `W_qkv(x)`，切成 q、k、v，拆分成多头 | 三个 `[2, 4, 1, 4]` |
        | 有缓存时：`k, v = cache.append(k, v)` | 各为 `[2, 4, 6, 4]`（`S_k = 6`） |
        | 分数 `q k^T / sqrt(head_dim)` | `[2, 4, 1, 6]` |
        | 在 `decode_causal_mask(S_new, S_k)` 为 False 处填 `-inf` | `[2, 4, 1, 6]` |
        | 对键做 softmax，`@ v`，合并多头，`W_o` | `[2, 1, 16]` |

        没有缓存时，它就是普通的因果自注意力（`S_k = S_new`）。它保证：先输入提示词，再一次一个 token，全程用同一个缓存，得到的输出与把整条序列一次性算出来的输出完全相同。
        """),
        solution("CachedSelfAttention", HINTS),
        check("check_cached_self_attention(CachedSelfAttention, KVCache)", "check_cached_self_attention"),
        md(r"""
        The first cell checks the promise for every split of an 8-token sequence into a prompt and tokens
        generated one by one. The second times a generation loop of a toy one-layer model, once
        re-running the whole prefix at every step and once with the cache.
        """, r"""
        第一个单元格验证这一点：把一条 8 个 token 的序列按所有可能的方式切成一段提示词和逐个生成的 token。第二个单元格对一个单层玩具模型的生成循环计时，一次在每一步都把整个前缀重跑一遍，一次使用缓存。
        """),
        demo("""
        torch.manual_seed(2)
        with uses_your_code():
            layer = CachedSelfAttention(32, 4).eval()
            x = torch.randn(2, 8, 32)
            with torch.no_grad():
                full = layer(x)
                for prompt in range(1, 8):
                    cache = KVCache()
                    outs = [layer(x[:, :prompt], cache)] + [layer(x[:, t : t + 1], cache) for t in range(prompt, 8)]
                    gap = (torch.cat(outs, dim=1) - full).abs().max().item()
                    print(f"prompt of {prompt}, then {8 - prompt} token{'s' if prompt < 7 else ''} one at a time: "
                          f"largest difference from the full pass {gap:.1e}, len(cache) = {len(cache)}")
        """),
        demo("""
        import time

        torch.manual_seed(3)
        with uses_your_code():
            layer = CachedSelfAttention(64, 4).eval()
            prompt, steps = torch.randn(1, 16, 64), 120


            def next_input(out):  # a stand-in for "embed the predicted token": the last output, rescaled
                return out[:, -1:] / out[:, -1:].norm(dim=-1, keepdim=True) * 64 ** 0.5


            with torch.no_grad():
                started = time.perf_counter()
                seq = prompt
                for _ in range(steps):  # no cache: the whole prefix again at every step
                    seq = torch.cat([seq, next_input(layer(seq))], dim=1)
                no_cache = time.perf_counter() - started

                started = time.perf_counter()
                cache = KVCache()
                new, pieces = prompt, [prompt]
                for _ in range(steps):  # with the cache: only the newest token
                    new = next_input(layer(new, cache))
                    pieces.append(new)
                with_cache = time.perf_counter() - started
            print(f"{steps} steps without a cache: {no_cache:.2f} s; with the cache: {with_cache:.2f} s "
                  f"({no_cache / with_cache:.1f}x faster)")
            print(f"same tokens both ways: largest difference {(torch.cat(pieces, dim=1) - seq).abs().max().item():.1e}")
        """),
        md(r"""
        ## 5. What the cache costs

        The cache stores, for every layer, a key and a value vector for every kv head and every position:

        $$\text{bytes} = 2 \times B \times \text{layers} \times H_{kv} \times S \times \text{head\_dim} \times \text{element size}$$

        (2: keys and values; 2 bytes per element in float16 / bfloat16, 4 in float32). `kv_cache_bytes`
        computes it; `dtype` defaults to float16.
        """, r"""
        ## 5. 缓存的代价

        缓存为每一层、每个 kv 头、每个位置各存一个键向量和一个值向量：

        $$\text{bytes} = 2 \times B \times \text{layers} \times H_{kv} \times S \times \text{head\_dim} \times \text{element size}$$

        （2：键和值；float16 / bfloat16 每个元素 2 字节，float32 为 4 字节。）`kv_cache_bytes` 计算这个值；`dtype` 默认为 float16。
        """),
        recipe("kv_cache_bytes", RECIPES),
        solution("kv_cache_bytes", HINTS),
        check("check_kv_cache_bytes(kv_cache_bytes)", "check_kv_cache_bytes"),
        md(r"""
        Now a real model size: 32 layers, 32 heads of `head_dim = 128` (`d_model = 4096`; the shape of
        LLaMA-2-7B), float16. The cell computes the cache for one sequence of 4k and of 128k tokens, for a
        batch of 8 sequences of 4k, and, for comparison, the float16 weights of such a model, counted from
        its configuration.
        """, r"""
        现在换成真实模型的规模：32 层，32 个头，`head_dim = 128`（`d_model = 4096`；即 LLaMA-2-7B 的形状），float16。这个单元格计算一条 4k token 的序列和一条 128k token 的序列的缓存、一个由 8 条 4k 序列组成的批次的缓存，并作为对比，根据配置算出这样一个模型的 float16 权重大小。
        """),
        demo("""
        layers, heads, head_dim, d_model, d_ffn, vocab = 32, 32, 128, 4096, 11008, 32000
        per_layer = 4 * d_model * d_model + 3 * d_model * d_ffn + 2 * d_model  # attention, MLP, two norms
        parameters = 2 * vocab * d_model + layers * per_layer + d_model  # embeddings in and out, layers, final norm
        GiB = 2**30
        print(f"weights: {parameters / 1e9:.2f} billion parameters = {parameters * 2 / GiB:.1f} GiB in float16")
        with uses_your_code():
            per_token = kv_cache_bytes(1, layers, heads, head_dim, 1)
            print(f"KV cache per token: {per_token / 2**10:.0f} KiB")
            for batch, seq_len in ((1, 4096), (1, 131072), (8, 4096)):
                size = kv_cache_bytes(batch, layers, heads, head_dim, seq_len)
                print(f"KV cache, batch {batch}, {seq_len:>7,} tokens: {size / GiB:5.1f} GiB "
                      f"({size / (parameters * 2):.2f}x the weights)")
        """),
        md(r"""
        At long contexts or large batches the cache, not the weights, fills the GPU.

        ## 6. Grouped-query attention: fewer key/value heads

        The cache grows with the number of **key/value heads** $H_{kv}$. Grouped-query attention (GQA)
        keeps $H$ query heads but only $H_{kv} < H$ key/value heads; each kv head serves a *group* of
        $n_\text{rep} = H / H_{kv}$ consecutive query heads. $H_{kv} = 1$ is multi-query attention (MQA);
        $H_{kv} = H$ is ordinary multi-head attention. LLaMA-3-8B, for example, has 32 query heads and 8
        key/value heads, a cache 4x smaller than the same model with 32 kv heads.

        The cache stores $H_{kv}$ heads. At attention time the simplest code repeats each kv head
        $n_\text{rep}$ times, so that the usual `[B, H, S, head_dim]` attention applies:
        `repeat_kv(x, n_rep)` turns `[B, H_kv, S, head_dim]` into `[B, H_kv * n_rep, S, head_dim]`, each
        head copied $n_\text{rep}$ times **consecutively**: kv head $h$ becomes heads $h \cdot n_\text{rep} \dots (h + 1) \cdot n_\text{rep} - 1$.

        | kv heads in | query heads served (`n_rep = 2`) |
        |---|---|
        | kv 0 | 0, 1 |
        | kv 1 | 2, 3 |
        | kv 2 | 4, 5 |

        The order matters: a model trained with groups of consecutive heads gives wrong scores with the
        tiled order kv 0, 1, 2, 0, 1, 2 (what `x.repeat(1, n_rep, 1, 1)` produces), without any error.
        """, r"""
        在长上下文或大批次下，占满 GPU 显存的是缓存，而不是权重。

        ## 6. 分组查询注意力：更少的键/值头

        缓存随**键/值头**的个数 $H_{kv}$ 增长。分组查询注意力（GQA）保留 $H$ 个查询头，但只有 $H_{kv} < H$ 个键/值头；每个 kv 头服务于由 $n_\text{rep} = H / H_{kv}$ 个连续查询头组成的一*组*。$H_{kv} = 1$ 就是多查询注意力（MQA）；$H_{kv} = H$ 就是普通的多头注意力。例如 LLaMA-3-8B 有 32 个查询头和 8 个键/值头，缓存只有同一个模型用 32 个 kv 头时的 1/4。

        缓存里存的是 $H_{kv}$ 个头。计算注意力时，最简单的写法是把每个 kv 头重复 $n_\text{rep}$ 次，这样就能用常规的 `[B, H, S, head_dim]` 注意力：`repeat_kv(x, n_rep)` 把 `[B, H_kv, S, head_dim]` 变成 `[B, H_kv * n_rep, S, head_dim]`，每个头**连续复制** $n_\text{rep}$ 份：kv 头 $h$ 变成头 $h \cdot n_\text{rep} \dots (h + 1) \cdot n_\text{rep} - 1$。

        | 输入的 kv 头 | 服务的查询头（`n_rep = 2`） |
        |---|---|
        | kv 0 | 0, 1 |
        | kv 1 | 2, 3 |
        | kv 2 | 4, 5 |

        顺序很重要：一个按连续头分组训练的模型，如果用平铺顺序 kv 0, 1, 2, 0, 1, 2（`x.repeat(1, n_rep, 1, 1)` 的结果），得到的分数就是错的，而且不会有任何报错。
        """),
        recipe("repeat_kv", RECIPES),
        solution("repeat_kv", HINTS),
        check("check_repeat_kv(repeat_kv)", "check_repeat_kv"),
        md(r"""
        PyTorch's SDPA does the grouping itself with `enable_gqa=True` (the key/value heads must divide the
        query heads); the first cell compares it with your `repeat_kv`. The second plots the cache of the
        32-layer model against the context length for $H_{kv} = H = 32$, $H/4 = 8$ and $1$.
        """, r"""
        PyTorch 的 SDPA 在 `enable_gqa=True` 时会自己完成分组（键/值头数必须能整除查询头数）；第一个单元格把它和你的 `repeat_kv` 做比较。第二个单元格画出那个 32 层模型的缓存随上下文长度的变化，分别取 $H_{kv} = H = 32$、$H/4 = 8$ 和 $1$。
        """),
        demo("""
        torch.manual_seed(4)
        B, H, H_kv, S, head_dim = 2, 8, 2, 5, 16
        q = torch.randn(B, H, S, head_dim)
        k, v = torch.randn(B, H_kv, S, head_dim), torch.randn(B, H_kv, S, head_dim)
        with uses_your_code():
            grouped = F.scaled_dot_product_attention(q, repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv))
            official = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            print(f"attention with your repeat_kv vs SDPA's enable_gqa=True: largest difference "
                  f"{(grouped - official).abs().max().item():.1e}")
        """),
        demo("""
        import matplotlib.pyplot as plt

        lengths = [2**p for p in range(10, 18)]  # 1k ... 128k tokens
        with uses_your_code():
            curves = {label: [kv_cache_bytes(1, 32, kv_heads, 128, s) / 2**30 for s in lengths]
                      for kv_heads, label in ((32, "MHA, H_kv = H = 32"), (8, "GQA, H_kv = H/4 = 8"), (1, "MQA, H_kv = 1"))}
            fig, ax = plt.subplots(figsize=(6, 3.8))
            for label, sizes in curves.items():
                ax.plot(lengths, sizes, marker="o", label=label)
                print(f"{label:<20} at {lengths[-1]:,} tokens: {sizes[-1]:6.2f} GiB")
            ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="KV cache (GiB)",
                   title="32 layers, head_dim 128, float16, batch 1")
            ax.set_xticks(lengths, [f"{s // 1024}k" for s in lengths])
            ax.minorticks_off()
            ax.legend()
            plt.show()
        """),
        graded_cell("kv_cache"),
        md(r"""
        ## 7. Pitfalls and how to debug them

        - **Top-left causal mask in decoding**: `is_causal=True` or `tril()` of `[S_q, S_k]`; the newest
          token then sees only the first one. Use `decode_causal_mask` / `causal_lower_right`. Test with a
          prompt followed by single tokens *and* with several new tokens at once.
        - **No mask after the prompt**: one new token may see everything, but two new tokens at once must
          not see each other's future.
        - **Wrong axis**: the cache grows along the sequence axis, dim 2 of `[B, H, S, head_dim]`.
        - **Attending before appending**: the new tokens must see themselves; append first.
        - **`len(cache)`**: positions, not calls (it is the position of the next token, for RoPE).
        - **`repeat_kv` order**: each kv head copied consecutively (`repeat_interleave`), not tiled (`repeat`).
        - **Memory**: 2 x layers x kv heads x head_dim x bytes per token; it is usually the cache, not the
          weights, that limits the batch size and the context length.
        """, r"""
        ## 7. 常见错误与调试方法

        - **解码时用了左上对齐的因果掩码**：`is_causal=True` 或对 `[S_q, S_k]` 取 `tril()`；这样最新的 token 只能看到第一个 token。请用 `decode_causal_mask` / `causal_lower_right`。测试时既要用"提示词加逐个 token"，*也要*用一次输入多个新 token 的情况。
        - **提示词之后不加掩码**：一个新 token 可以看到所有位置，但一次输入两个新 token 时，它们不能看到对方的未来。
        - **维度错了**：缓存沿序列维度增长，即 `[B, H, S, head_dim]` 的 dim 2。
        - **先做注意力再追加**：新 token 必须能看到自己；要先追加。
        - **`len(cache)`**：是位置数，不是调用次数（它就是下一个 token 的位置，RoPE 要用）。
        - **`repeat_kv` 的顺序**：每个 kv 头连续复制（`repeat_interleave`），而不是平铺（`repeat`）。
        - **显存**：每个 token 占 2 x 层数 x kv 头数 x head_dim x 每元素字节数；限制批大小和上下文长度的，通常是缓存而不是权重。
        """),
    ]

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# True = may NOT attend (nn.MultiheadAttention)": "# True = 不能关注（nn.MultiheadAttention）",
    'f"outputs of tokens 0..3, with and without tokens 4 and 5 after them: largest difference {gap:.1e}"':
        'f"token 0..3 的输出，后面有和没有 token 4、5 时：最大差值 {gap:.1e}"',
    "# step t recomputes the keys and values of all t tokens": "# 第 t 步要重新计算全部 t 个 token 的键和值",
    'f"{T:>5} generated tokens: {without:>10,} token projections without a cache, {T:>5,} with one "':
        'f"生成 {T:>5} 个 token：不用缓存要做 {without:>10,} 次 token 投影，用缓存只要 {T:>5,} 次"',
    'f"({without / T:,.0f}x fewer)"': 'f"（变为原来的 1/{without / T:,.0f}）"',
    "# True = may attend": "# True = 可以关注",
    '"the mask of is_causal=True for S_q=2, S_k=5 (top-left aligned):"': '"S_q=2、S_k=5 时 is_causal=True 的掩码（左上对齐）："',
    '"SDPA with is_causal=True equals SDPA with this mask:"': '"is_causal=True 的 SDPA 等于用这个掩码的 SDPA："',
    '"your decode_causal_mask(2, 5):"': '"你的 decode_causal_mask(2, 5)："',
    'f"SDPA with your mask vs causal_lower_right: largest difference {': 'f"用你的掩码的 SDPA 与 causal_lower_right 相比：最大差值 {',
    'f"SDPA with is_causal=True vs causal_lower_right: largest difference {': 'f"is_causal=True 的 SDPA 与 causal_lower_right 相比：最大差值 {',
    'f" (largest |output| {official.abs().max().item():.2f})"': 'f"（最大 |输出| 为 {official.abs().max().item():.2f}）"',
    """f"prompt of {prompt}, then {8 - prompt} token{'s' if prompt < 7 else ''} one at a time: \"""":
        """f"先输入 {prompt} 个 token 的提示词，再逐个输入 {8 - prompt} 个 token{'' if prompt < 7 else ''}：\"""",
    'f"largest difference from the full pass {gap:.1e}, len(cache) = {len(cache)}"': 'f"与一次性计算相比最大差值 {gap:.1e}，len(cache) = {len(cache)}"',
    '# a stand-in for "embed the predicted token": the last output, rescaled': "# 代替“嵌入预测出的 token”：把最后一个输出重新缩放",
    "# no cache: the whole prefix again at every step": "# 不用缓存：每一步都重新计算整个前缀",
    "# with the cache: only the newest token": "# 用缓存：只计算最新的 token",
    'f"{steps} steps without a cache: {no_cache:.2f} s; with the cache: {with_cache:.2f} s "':
        'f"{steps} 步，不用缓存：{no_cache:.2f} 秒；用缓存：{with_cache:.2f} 秒"',
    'f"({no_cache / with_cache:.1f}x faster)"': 'f"（耗时变为原来的 1/{no_cache / with_cache:.1f}）"',
    'f"same tokens both ways: largest difference {': 'f"两种方式得到的 token 相同：最大差值 {',
    "# attention, MLP, two norms": "# 注意力、MLP、两个归一化层",
    "# embeddings in and out, layers, final norm": "# 输入输出嵌入、各层、最后的归一化层",
    'f"weights: {parameters / 1e9:.2f} billion parameters = {parameters * 2 / GiB:.1f} GiB in float16"':
        'f"权重：{parameters / 1e9:.2f} × 10⁹ 个参数 = float16 下 {parameters * 2 / GiB:.1f} GiB"',
    'f"KV cache per token: {': 'f"每个 token 的 KV 缓存：{',
    'f"KV cache, batch {batch}, {seq_len:>7,} tokens: {size / GiB:5.1f} GiB "': 'f"KV 缓存，批大小 {batch}，{seq_len:>7,} 个 token：{size / GiB:5.1f} GiB"',
    'f"({size / (parameters * 2):.2f}x the weights)"': 'f"（权重的 {size / (parameters * 2):.2f} 倍）"',
    'f"attention with your repeat_kv vs SDPA\'s enable_gqa=True: largest difference "': 'f"用你的 repeat_kv 的注意力与 SDPA 的 enable_gqa=True 相比：最大差值 "',
    "# 1k ... 128k tokens": "# 1k ... 128k 个 token",
    'f"{label:<20} at {lengths[-1]:,} tokens: {sizes[-1]:6.2f} GiB"': 'f"{label:<20} {lengths[-1]:,} 个 token 时：{sizes[-1]:6.2f} GiB"',
    'xlabel="context length (tokens)", ylabel="KV cache (GiB)"': 'xlabel="上下文长度（token 数）", ylabel="KV 缓存（GiB）"',
    'title="32 layers, head_dim 128, float16, batch 1"': 'title="32 层，head_dim 128，float16，批大小 1"',
}
