"""Notebook 06 of `serving`: StreamingLLM's attention sinks (a bounded cache, positions re-assigned inside it)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.generation import decoder
from course.content.serving.cells import solution_cell
from course.content.written import written_cells

NAME = "06_attention_sinks"

PIECES = ("apply_rope",)
_PASTE = ("paste your own from `generation`.", "把你在 `generation` 里写好的版本粘贴过来。")

HINTS = {
    "apply_rope": _PASTE,
    "SinkKVCache.__init__": ("an empty cache that remembers num_sink and window.", "一个空缓存，记下 num_sink 和 window。"),
    "SinkKVCache.append": (
        "first refuse (ValueError, nothing changed) a piece that would evict its own new keys; then append, and\n"
        "when more than num_sink + window positions are held keep the first num_sink and the last window.",
        "先拒绝（ValueError，什么都不改）会把自己的新键挤掉的输入；然后追加，\n"
        "当保存的位置超过 num_sink + window 个时，只保留前 num_sink 个和最后 window 个。",
    ),
    "SinkKVCache.__len__": ("the kept length.", "保留下来的长度。"),
    "SinkDecoderAttention.__init__": ("DecoderAttention's four bias-free layers.", "和 DecoderAttention 一样的四个无偏置线性层。"),
    "SinkDecoderAttention.forward": (
        "append the UNROTATED keys; then rotate all kept keys at 0 .. n - 1 and the queries at the last S_new\n"
        "of those positions; bottom-right causal, grouped heads.",
        "追加**未旋转**的键；然后把所有保留的键按 0 .. n - 1 旋转，查询按其中最后 S_new 个位置旋转；\n"
        "右下对齐的因果掩码，分组的头。",
    ),
}

RECIPES = {
    "SinkKVCache": (
        """
        `append`: with `S_new = k.shape[-2]`, raise `ValueError` first when `S_new > window` and
        `len(self) + S_new > num_sink + window`. Concatenate along dim -2; when the result holds more than
        `num_sink + window` positions, keep `torch.cat([x[..., :num_sink, :], x[..., -window:, :]], dim=-2)` (keys and
        values). Store and return both. `__len__`: 0 while empty, else `self.k.shape[-2]`.
        """,
        """
        `append`：设 `S_new = k.shape[-2]`，当 `S_new > window` 且 `len(self) + S_new > num_sink + window` 时先抛出
        `ValueError`。沿 dim -2 拼接；结果超过 `num_sink + window` 个位置时，保留
        `torch.cat([x[..., :num_sink, :], x[..., -window:, :]], dim=-2)`（键和值都这样）。存下并返回两者。
        `__len__`：为空时是 0，否则是 `self.k.shape[-2]`。
        """,
    ),
    "SinkDecoderAttention": (
        """
        1. Project and split heads as `DecoderAttention` does (`[B, H, S_new, D]`, `[B, H_kv, S_new, D]`), no RoPE yet.
        2. `k, v = cache.append(k, v)`; `n = k.shape[-2]`; `positions = torch.arange(n)`.
        3. `k = apply_rope(k, positions)`, `q = apply_rope(q, positions[n - S_new:])`.
        4. Grouped heads, scores, the mask `tril(diagonal=n - S_new)`, softmax, `@ v`, merge heads, `W_o`.
        """,
        """
        1. 像 `DecoderAttention` 那样投影并拆分多头（`[B, H, S_new, D]`、`[B, H_kv, S_new, D]`），先不做 RoPE。
        2. `k, v = cache.append(k, v)`；`n = k.shape[-2]`；`positions = torch.arange(n)`。
        3. `k = apply_rope(k, positions)`，`q = apply_rope(q, positions[n - S_new:])`。
        4. 分组的头、分数、掩码 `tril(diagonal=n - S_new)`、softmax、`@ v`、合并多头、`W_o`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "apply_rope": decoder.DOCSTRINGS_ZH["apply_rope"],
    "SinkKVCache": """StreamingLLM 的缓存：前 num_sink 个位置和最后 window 个位置，键不旋转。""",
    "SinkKVCache.__init__": """一个空缓存，保留 num_sink 个汇点位置和一个最近窗口。""",
    "SinkKVCache.append": """k, v [B, H_kv, S_new, D]（未旋转）-> 淘汰之后的 (k_all, v_all)。""",
    "SinkKVCache.__len__": """保留下来的位置数。""",
    "SinkDecoderAttention": """SinkKVCache 上的 DecoderAttention：键按它在缓存内的位置旋转。""",
    "SinkDecoderAttention.forward": """x [B, S_new, d_model] -> [B, S_new, d_model]；缓存未旋转的键，所有键按 0 .. len - 1 旋转，查询按最后 S_new 个位置旋转。""",
}


def cells():
    return [
        md(r"""
        # 06 · Attention sinks: a stream with a bounded cache

        A chat that runs for hours outgrows any cache. The obvious fix, a window of the last $w$ tokens, breaks
        the model the moment the first token is evicted: Xiao et al. (StreamingLLM, 2023) found that models put
        a large share of their attention on the first few tokens, whatever they say (**attention sinks**: the
        softmax must put its weight somewhere). Keep those few **sink tokens** and a **recent window**, evict the
        middle, and a model trained on a finite context streams on without fine-tuning.

        | part | what you write |
        |---|---|
        | `attention_sinks` | `SinkKVCache`, `SinkDecoderAttention` |

        The layer's solution cell starts with `generation`'s `apply_rope` (a stub here: paste yours).
        """, r"""
        # 06 · 注意力汇点：用有界的缓存处理无限的流

        一段持续几个小时的对话，迟早会超出任何缓存。最直接的做法是只保留最近 $w$ 个 token 的窗口，但第一个 token 一被淘汰，模型就坏了：Xiao 等人（StreamingLLM，2023）发现，模型会把很大一部分注意力放在最前面的几个 token 上，不管它们是什么内容（**注意力汇点（attention sink）**：softmax 总得把权重放在某个地方）。保留这几个**汇点 token** 和一个**最近窗口**，淘汰中间的部分，一个在有限上下文上训练的模型不用微调就能一直流式生成下去。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `attention_sinks` | `SinkKVCache`、`SinkDecoderAttention` |

        这一层的 solution 单元格开头是 `generation` 里的 `apply_rope`（这里是桩代码：把你的粘贴过来）。
        """),
        setup(),
        md(r"""
        ## 1. The cache: sinks and a window

        `SinkKVCache(num_sink=4, window=60)`; `append(k, v) -> (k_all, v_all)` with **unrotated** keys
        `[B, H_kv, S_new, D]`: it appends, then, when more than `num_sink + window` positions are held, keeps the
        first `num_sink` positions ever seen and the last `window` (the new ones included), in order: StreamingLLM's
        `StartRecentKVCache`. `len(cache)` is the kept length. Eviction happens **before** attention, so a query
        sees at most `num_sink + window` keys, itself included.

        A piece that would evict some of its own new keys (more than `window` new tokens once the cache would
        overflow) raises `ValueError` before changing anything: a first prompt of up to `num_sink + window` tokens
        is accepted whole, a longer one is fed in pieces of at most `window` tokens. (In a multi-layer model,
        pieces give slightly piece-dependent results: a later layer's keys depend on which tokens the earlier
        layer still saw.)
        """, r"""
        ## 1. 缓存：汇点和窗口

        `SinkKVCache(num_sink=4, window=60)`；`append(k, v) -> (k_all, v_all)`，键是**未旋转**的 `[B, H_kv, S_new, D]`：先追加，然后当保存的位置超过 `num_sink + window` 个时，保留有史以来的前 `num_sink` 个位置和最后 `window` 个位置（包括新的），顺序不变：这就是 StreamingLLM 的 `StartRecentKVCache`。`len(cache)` 是保留下来的长度。淘汰发生在注意力**之前**，所以一个查询最多看到 `num_sink + window` 个键，包括它自己。

        如果一段输入会把它自己的一部分新键淘汰掉（缓存将要溢出时，新 token 多于 `window` 个），就在改动任何东西之前抛出 `ValueError`：第一段提示词最多 `num_sink + window` 个 token 可以整段接受，更长的要分段输入，每段至多 `window` 个 token。（在多层模型里，分段会让结果略微依赖于怎么分段：后面一层的键取决于前面一层当时还能看到哪些 token。）
        """),
        recipe("SinkKVCache", RECIPES),
        solution("SinkKVCache", HINTS),
        check("check_sink_kv_cache(SinkKVCache)", "check_sink_kv_cache"),
        md(r"""
        ## 2. Positions inside the cache

        Which position does a kept key have? Two answers:

        - **original positions**: token 1000 keeps position 1000. The distance from the newest query to the sinks
          then grows without bound, beyond anything the model saw in training: exactly what streaming must avoid.
        - **positions inside the cache** (StreamingLLM's code, `pos_shift/modify_llama.py`): the kept keys are
          rotated at `0 .. n - 1`, the query at its place among them. Distances never exceed the cache size.

        This assignment follows StreamingLLM: the cache stores keys **before** RoPE, and every step
        `SinkDecoderAttention` rotates all kept keys at `0 .. len(cache) - 1` and the `S_new` queries at the last
        `S_new` of those positions, bottom-right causal, with grouped heads. Each step then equals a fresh dense
        pass over the kept tokens at positions `0 .. n - 1`: an exact oracle. This is the one place in the course
        where `generation`'s rule "cache the rotated keys" is wrong: a kept key changes position when the middle
        is evicted. (Hugging Face's former `SinkCache` kept rotated keys and rotated them again at each shift,
        which accumulates rounding.) Keeping original positions is what a model *trained* with sliding windows
        (Mistral) does: `efficient`'s `sliding_window` plus sinks; here it is a mistake the checks name.
        """, r"""
        ## 2. 缓存内位置

        保留下来的键是什么位置？有两种答案：

        - **原始位置**：第 1000 个 token 保持位置 1000。这样最新查询到汇点的距离会无限增长，超出模型在训练中见过的任何距离：这恰恰是流式生成必须避免的。
        - **缓存内位置**（StreamingLLM 的代码，`pos_shift/modify_llama.py`）：保留的键按 `0 .. n - 1` 旋转，查询按它在其中的位置旋转。距离永远不超过缓存的大小。

        本作业照 StreamingLLM 的做法：缓存存的是 RoPE **之前**的键，每一步 `SinkDecoderAttention` 把所有保留的键按 `0 .. len(cache) - 1` 旋转，把 `S_new` 个查询按其中最后 `S_new` 个位置旋转，右下对齐的因果掩码，分组的头。于是每一步都等于在保留的 token 上、按位置 `0 .. n - 1` 重新做一次稠密计算：这是一个精确的对照。这是课程里唯一一处 `generation` 的规则"缓存旋转后的键"是错的地方：中间被淘汰时，保留下来的键的位置会变。（Hugging Face 以前的 `SinkCache` 缓存旋转后的键，每次移位时再旋转一次，舍入误差会累积。）保留原始位置，是*训练时*就用滑动窗口的模型（Mistral）的做法：即 `efficient` 的 `sliding_window` 再加上汇点；在这里，它是检查会点名的错误。
        """),
        *written_cells("written_sink_positions"),
        recipe("SinkDecoderAttention", RECIPES),
        solution_cell("SinkDecoderAttention", HINTS, (*PIECES, "SinkDecoderAttention")),
        check("check_sink_decoder_attention(SinkDecoderAttention, SinkKVCache)", "check_sink_decoder_attention"),
        md(r"""
        Sixteen tokens, a 3-token prompt and then one at a time, 2 sinks and a window of 4: the cell prints the
        cache's length and the largest query-key distance at the last step, against a full cache, and compares
        each step with a dense pass over the kept tokens.
        """, r"""
        十六个 token，先是 3 个 token 的提示词，然后一次一个，2 个汇点、窗口为 4：这个单元格打印最后一步时缓存的长度和最大的查询-键距离，与完整缓存对比，并把每一步和在保留 token 上的一次稠密计算做比较。
        """),
        demo("""
        torch.manual_seed(0)
        d_model, S = 16, 16
        x = torch.randn(2, S, d_model)
        with uses_your_code():
            layer = SinkDecoderAttention(d_model, 4, 2).eval()
            cache = SinkKVCache(num_sink=2, window=4)
            kept, gap = [], 0.0
            with torch.no_grad():
                for start, stop in [(0, 3)] + [(t, t + 1) for t in range(3, S)]:
                    out = layer(x[:, start:stop], cache)
                    kept = (kept + list(range(start, stop)))
                    kept = kept if len(kept) <= 6 else kept[:2] + kept[-4:]
                    dense = layer(x[:, kept], SinkKVCache(num_sink=2, window=len(kept)))  # a fresh pass, 0 .. n-1
                    gap = max(gap, (out - dense[:, -(stop - start):]).abs().max().item())
            print(f"cache length {len(cache)} vs a full cache {S}; largest query-key distance {len(cache) - 1} "
                  f"vs {S - 1}; kept positions {kept}")
            print(f"every step vs a dense pass over the kept tokens: largest difference {gap:.1e}")
        """),
        graded_cell("attention_sinks"),
        md(r"""
        ## 3. Pitfalls

        - **Original positions kept**: the distance to the sinks grows without bound.
        - **Cached keys rotated, and rotated again**: rotate the unrotated keys once per step.
        - **Sinks evicted** (a pure window): the model loses the tokens it leans on.
        """, r"""
        ## 3. 常见错误

        - **保留原始位置**：到汇点的距离无限增长。
        - **缓存旋转后的键，又旋转一次**：每一步只对未旋转的键旋转一次。
        - **把汇点淘汰了**（纯窗口）：模型失去了它依赖的那几个 token。
        """),
    ]


DEMO_ZH = {
    "# a fresh pass, 0 .. n-1": "# 重新计算一次，位置 0 .. n-1",
    'f"cache length {len(cache)} vs a full cache {S}; largest query-key distance {len(cache) - 1} "':
        'f"缓存长度 {len(cache)}，完整缓存 {S}；最大查询-键距离 {len(cache) - 1}，"',
    'f"vs {S - 1}; kept positions {kept}"': 'f"完整缓存为 {S - 1}；保留的位置 {kept}"',
    'f"every step vs a dense pass over the kept tokens: largest difference {gap:.1e}"':
        'f"每一步与在保留 token 上的稠密计算相比：最大差值 {gap:.1e}"',
}
