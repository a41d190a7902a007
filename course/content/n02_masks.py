"""Notebook 02: padding and causal masks."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "02_masks"

HINTS = {
    "padding_mask": ("position p of sequence b is a real token exactly when p comes before that sequence's length.",
                     "序列 b 的位置 p 是真实 token，当且仅当 p 小于这个序列的长度。"),
    "causal_mask": ("query i may read key j exactly when j <= i: which part of an [S, S] table is that?",
                    "查询 i 能读取键 j，当且仅当 j <= i：这是 [S, S] 表格中的哪一部分？"),
    "apply_padding_mask": ("give the mask singleton axes so that its key axis lines up with the last axis of scores\n"
                           "(3-D and 4-D scores); masked_fill writes a value where its boolean argument is True.",
                           "给掩码插入大小为 1 的维度，使它的键维度与 scores 的最后一个维度对齐\n"
                           "（三维和四维的 scores 都要处理）；masked_fill 在布尔参数为 True 的位置写入给定的值。"),
    "apply_causal_mask": ("the forbidden places (key j > query i) form the strict upper triangle of the last two axes,\n"
                          "[S_q, S_k]: build it from both sizes, since the scores need not be square.",
                          "被禁止的位置（键 j > 查询 i）构成最后两个维度 [S_q, S_k] 上的严格上三角：\n"
                          "要同时用这两个大小来构造，因为 scores 不一定是方阵。"),
}


# The second hints, folded above their stubs (course.cells.recipe): the recipe, for after the first hint.
RECIPES = {
    "padding_mask": ("Compare a row of positions, `torch.arange(seq_len)[None, :]` (`[1, seq_len]`), with a column "
                     "of lengths, `lengths[:, None]` (`[B, 1]`), using `<`: broadcasting gives the `[B, seq_len]` "
                     "booleans.",
                     "用 `<` 比较一行位置 `torch.arange(seq_len)[None, :]`（`[1, seq_len]`）和一列长度 "
                     "`lengths[:, None]`（`[B, 1]`）：广播得到 `[B, seq_len]` 的布尔张量。"),
    "causal_mask": ("It is the lower triangle, diagonal included: `torch.ones(seq_len, seq_len, dtype=torch.bool).tril()` "
                    "(`tril` keeps the lower triangle, `triu` the upper one).",
                    "它就是包含对角线的下三角：`torch.ones(seq_len, seq_len, dtype=torch.bool).tril()`"
                    "（`tril` 保留下三角，`triu` 保留上三角）。"),
}


def cells():
    return [
        md(r"""
        # 02 · Masks: padding and causality

        Two situations require hiding some keys from some queries:

        1. **Padding.** Sequences in a batch have different lengths; the short ones are filled up at the
           end (right padding) with dummy tokens. Those pad tokens carry no meaning and no query may read
           them.
        2. **Causality.** A decoder that predicts token `t` must not peek at tokens after `t`. Query `i`
           may read keys `j <= i` only (the *look-ahead* or *causal* mask).

        Both work the same way: set the forbidden scores to `-inf` **before** the softmax. Since
        $e^{-\infty} = 0$, those keys get weight exactly 0 and the remaining weights still sum to 1.
        Setting weights to 0 *after* the softmax breaks the normalisation. Some code writes a large
        negative number such as `-1e9` instead of `-inf`: in float32 that gives the same weights as long
        as a row keeps at least one key. On a row whose keys are *all* masked they differ: `-1e9`
        everywhere gives a uniform row (every key equally, padding included), `-inf` everywhere gives
        `0/0 = NaN`. That is why Hugging Face's models fill with `torch.finfo(dtype).min`, the most
        negative finite number of the type: no NaN, whatever the row. And `masked_fill` with `-1e9` on a
        float16 tensor raises an error, because float16 cannot hold it (its most negative finite number
        is -65504). `-inf` exists in every floating type. The cell below shows all of this.

        Part `masks` (four functions): `padding_mask`, `causal_mask`, `apply_padding_mask`,
        `apply_causal_mask`.
        """, r"""
        # 02 · 掩码：填充与因果

        有两种情况需要对某些查询屏蔽某些键：

        1. **填充。** 一个批次中的序列长度不同；短的序列在末尾用占位 token 补齐（右填充）。这些填充 token 没有任何含义，任何查询都不应该读取它们。
        2. **因果性。** 预测第 `t` 个 token 的解码器不能偷看 `t` 之后的 token。查询 `i` 只能读取 `j <= i` 的键（*前瞻*掩码，也叫*因果*掩码）。

        两者的做法相同：在 softmax **之前**把被禁止的分数设为 `-inf`。因为 $e^{-\infty} = 0$，这些键的权重恰好为 0，其余权重之和仍然是 1。在 softmax *之后*再把权重置 0 会破坏归一化。有些代码用 `-1e9` 这样很大的负数代替 `-inf`：只要每一行至少保留一个键，在 float32 下两者给出的权重完全一样。但如果一行的键*全部*被屏蔽，两者就不同了：全是 `-1e9` 的一行得到均匀分布（每个键一样多，包括填充），全是 `-inf` 的一行得到 `0/0 = NaN`。所以 Hugging Face 的模型用 `torch.finfo(dtype).min`（该类型最小的有限值）来填充：无论哪一行都不会出现 NaN。另外，在 float16 张量上用 `-1e9` 调用 `masked_fill` 会报错，因为 float16 表示不了这个数（它能表示的最小有限值是 -65504）。`-inf` 在所有浮点类型中都存在。下面的单元格演示了以上所有内容。

        评分部分 `masks`（四个函数）：`padding_mask`、`causal_mask`、`apply_padding_mask`、`apply_causal_mask`。
        """),
        setup(),
        demo("""
        scores = torch.tensor([[1.0, 2.0, 0.5, 3.0]])  # one query, four keys
        keep = torch.tensor([[True, True, True, False]])  # key 3 is padding
        before = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        after = torch.softmax(scores, dim=-1).masked_fill(~keep, 0.0)
        print("-inf before the softmax:", [round(w, 3) for w in before[0].tolist()], " sum", round(before.sum().item(), 3))
        print("0 after the softmax:    ", [round(w, 3) for w in after[0].tolist()], " sum", round(after.sum().item(), 3))
        print("float32, -1e9 instead of -inf gives the same weights:", torch.equal(torch.softmax(scores.masked_fill(~keep, -1e9), dim=-1), before))
        none = torch.zeros_like(keep)  # a row whose keys are all masked
        for name, fill in (("-1e9", -1e9), ("-inf", float("-inf")), ("finfo.min", torch.finfo(scores.dtype).min)):
            print(f"every key masked, filled with {name}:", [round(w, 3) for w in torch.softmax(scores.masked_fill(~none, fill), dim=-1)[0].tolist()])
        try:
            scores.half().masked_fill(~keep, -1e9)
        except RuntimeError as error:
            print("float16, masked_fill with -1e9: RuntimeError:", error)
        print("float16, masked_fill with -inf:", scores.half().masked_fill(~keep, float("-inf")).tolist(),
              "| most negative finite float16:", torch.finfo(torch.float16).min)
        """),
        md(r"""
        ## 1. Three boolean conventions, side by side

        A boolean mask can mean "keep" or "hide", and PyTorch uses both:

        | who | argument | shape | `True` means |
        |---|---|---|---|
        | **this course** | `mask` | `[B, S]` | real token: **keep** |
        | `nn.MultiheadAttention` | `key_padding_mask` | `[B, S]` | padding: **ignore** |
        | `nn.MultiheadAttention` | `attn_mask`, boolean | `[S_q, S_k]` or `[B * H, S_q, S_k]` | **blocked** (float: added to the scores) |
        | `F.scaled_dot_product_attention` | `attn_mask`, boolean | broadcastable to `[B, H, S_q, S_k]` | **may attend** |

        So ours and SDPA's agree (after reshaping), while `key_padding_mask` is the negation of ours.
        Passing our mask where the negation is expected hides the real tokens and keeps the padding. How
        that shows depends on who receives it: a sequence without padding then has *every* key hidden,
        and `nn.MultiheadAttention` returns NaN for all of its positions (loud), while
        `F.scaled_dot_product_attention` on the CPU returns zeros for them (silent). Sequences with
        padding read only their padding, in both. The cell below shows both.
        Masks are booleans (`torch.bool`): `masked_fill` refuses a mask of 0/1 integers.
        """, r"""
        ## 1. 三种布尔约定，放在一起比较

        布尔掩码既可以表示"保留"，也可以表示"屏蔽"，而 PyTorch 两种都在用：

        | 谁 | 参数 | 形状 | `True` 表示 |
        |---|---|---|---|
        | **本课程** | `mask` | `[B, S]` | 真实 token：**保留** |
        | `nn.MultiheadAttention` | `key_padding_mask` | `[B, S]` | 填充：**忽略** |
        | `nn.MultiheadAttention` | `attn_mask`，布尔型 | `[S_q, S_k]` 或 `[B * H, S_q, S_k]` | **屏蔽**（浮点型：加到分数上） |
        | `F.scaled_dot_product_attention` | `attn_mask`，布尔型 | 可广播到 `[B, H, S_q, S_k]` | **可以关注** |

        所以我们的约定和 SDPA 的一致（调整形状之后），而 `key_padding_mask` 正好是我们的取反。在需要取反的地方传入我们的掩码，会屏蔽真实 token、保留填充。表现如何取决于谁接收它：没有填充的序列的*每一个*键都被屏蔽，`nn.MultiheadAttention` 对它的所有位置返回 NaN（一眼就能发现），而 `F.scaled_dot_product_attention` 在 CPU 上对它们返回全零（悄无声息）。有填充的序列在两者中都只读到填充。下面的单元格把两种情况都展示出来。掩码是布尔类型（`torch.bool`）：`masked_fill` 不接受由 0/1 整数构成的掩码。
        """),
        demo("""
        ours = torch.tensor([[True, True, True, False, False],  # lengths 3 and 5: sequence 0 has 2 pad tokens
                             [True, True, True, True, True]])  # this course: True = real token
        print("this course (True = keep):\\n", ours.int())
        print("nn.MultiheadAttention key_padding_mask (True = ignore):\\n", (~ours).int())
        print("F.scaled_dot_product_attention attn_mask (True = may attend), shape", list(ours[:, None, None, :].shape))
        try:
            torch.zeros(2, 5).masked_fill(ours.int(), 1.0)
        except RuntimeError as error:
            print("an integer mask: RuntimeError:", error)

        torch.manual_seed(0)
        x = torch.randn(2, 5, 8)
        mha = nn.MultiheadAttention(8, num_heads=1, batch_first=True).eval()
        with torch.no_grad():
            mixed_up, _ = mha(x, x, x, key_padding_mask=ours)  # the mistake: True = keep where True = ignore is expected
        print("ours passed as key_padding_mask, NaN per sequence:", mixed_up.isnan().all(-1).all(-1).tolist(),
              "(sequence 1 has no padding)")
        q = x[:, None]  # [B, H=1, S, d]
        sdpa = F.scaled_dot_product_attention(q, q, q, attn_mask=~ours[:, None, None, :])  # the negation passed to SDPA
        print("the negation passed to SDPA, sequence 1: NaN", sdpa[1].isnan().any().item(),
              "| largest |output|", sdpa[1].abs().max().item())
        """),
        md(r"""
        `nn.MultiheadAttention` has **two** masks with different jobs, and the seed article warns about
        mixing them up:

        - `key_padding_mask`, `[B, S_k]`: which keys of *each sequence* are padding (True = ignore);
        - `attn_mask`: which (query, key) *pairs* are blocked, the same for every sequence as
          `[S_q, S_k]` (a causal mask, for instance, or any fixed pattern) or given per sequence and head
          as `[B * H, S_q, S_k]`. A boolean `attn_mask` means True = **blocked**, the opposite of SDPA's;
          a float `attn_mask` is **added** to the scores, so `-inf` blocks and `0` allows.

        The trap is to pass a `[B, S]` padding mask as `attn_mask`. With `B != S` it raises, with a
        message about a 2-D `attn_mask` that says nothing about padding. With `B == S` it is silently
        taken as an `[S_q, S_k]` mask: row `b` of the padding mask now blocks keys of *query* `b` in every
        sequence.
        """, r"""
        `nn.MultiheadAttention` 有**两个**作用不同的掩码，原文也提醒过不要混用：

        - `key_padding_mask`，`[B, S_k]`：*每个序列*中哪些键是填充（True = 忽略）；
        - `attn_mask`：哪些（查询，键）*配对*被屏蔽，可以是对所有序列都相同的 `[S_q, S_k]`（例如因果掩码，或任何固定模式），也可以按序列和头分别给出，形状为 `[B * H, S_q, S_k]`。布尔型 `attn_mask` 中 True = **屏蔽**，与 SDPA 的含义相反；浮点型 `attn_mask` 会被**加到**分数上，所以 `-inf` 表示屏蔽，`0` 表示允许。

        陷阱在于把 `[B, S]` 的填充掩码当作 `attn_mask` 传进去。当 `B != S` 时会报错，报错信息说的是二维 `attn_mask`，对填充只字未提。当 `B == S` 时，它会被悄悄当成 `[S_q, S_k]` 的掩码：填充掩码的第 `b` 行现在会在每个序列中屏蔽 *查询* `b` 的键。
        """),
        demo("""
        torch.manual_seed(0)
        d = 8
        mha = nn.MultiheadAttention(d, num_heads=1, batch_first=True).eval()
        x = torch.randn(2, 5, d)
        blocked = torch.eye(5, dtype=torch.bool)  # a structural mask: no token reads itself (True = blocked)
        additive = torch.zeros(5, 5).masked_fill(blocked, float("-inf"))  # the same mask as numbers to add
        with torch.no_grad():
            a, _ = mha(x, x, x, attn_mask=blocked)
            b, _ = mha(x, x, x, attn_mask=additive)
            c, _ = mha(x, x, x, attn_mask=blocked.expand(2 * 1, 5, 5))  # [B * H, S_q, S_k], one head
        print("boolean attn_mask (True = blocked) and float attn_mask (added) agree:", torch.allclose(a, b),
              "| the same mask as [B * H, S_q, S_k]:", torch.allclose(a, c))

        keep = ours  # [B=2, S=5] from the cell above, True = real token
        try:
            with torch.no_grad():
                mha(x, x, x, attn_mask=~keep)  # the trap: a padding mask passed as attn_mask
        except RuntimeError as error:
            print("padding mask as attn_mask, B=2, S=5: RuntimeError:", error)

        x4 = torch.randn(4, 4, d)  # B == S == 4
        keep4 = torch.tensor([[True, True, False, False], [True] * 4, [True, True, True, False], [True] * 4])
        with torch.no_grad():
            right, _ = mha(x4, x4, x4, key_padding_mask=~keep4)
            wrong, _ = mha(x4, x4, x4, attn_mask=~keep4)  # accepted as an [S_q, S_k] mask: no error
        print(f"padding mask as attn_mask, B=S=4: no error, outputs differ by up to {(right - wrong).abs().max().item():.2f}")
        """),
        recipe("padding_mask", RECIPES),
        solution("padding_mask", HINTS),
        check("check_padding_mask(padding_mask)", "check_padding_mask"),
        md(r"""
        ## 2. Broadcasting a `[B, S]` mask onto the scores

        The padding mask marks **keys**, the last axis of the scores. To compare it element by element
        with the scores, PyTorch broadcasts: shapes are aligned *from the right*, and size-1 axes are
        stretched. So the mask needs singleton axes *between* the batch axis and the key axis:

        | scores | mask view | broadcast result |
        |---|---|---|
        | `[B, S_q, S_k]` (one head) | `mask[:, None, :]` → `[B, 1, S_k]` | `[B, S_q, S_k]` |
        | `[B, H, S_q, S_k]` (multi-head) | `mask[:, None, None, :]` → `[B, 1, 1, S_k]` | `[B, H, S_q, S_k]` |

        The number of `None`s depends on the number of axes of the scores. A classic bug (found in many
        tutorials) uses the multi-head view `[B, 1, 1, S]` on single-head scores `[B, S, S]`. Aligned from
        the right, `[B, 1, 1, S]` against `[B, S, S]` becomes `[B, B, S, S]`: every sequence's scores are
        masked with *every* sequence's mask. `masked_fill` raises no error; it just returns a bigger
        tensor, and the bug surfaces much later, or not at all when `B = 1`.
        """, r"""
        ## 2. 把 `[B, S]` 掩码广播到分数上

        填充掩码标记的是**键**，也就是分数的最后一个维度。要把它和分数逐元素对应，PyTorch 会做广播：形状*从右边*对齐，大小为 1 的维度被拉伸。所以掩码需要在批次维和键维*之间*插入大小为 1 的维度：

        | 分数 | 掩码视图 | 广播结果 |
        |---|---|---|
        | `[B, S_q, S_k]`（单头） | `mask[:, None, :]` → `[B, 1, S_k]` | `[B, S_q, S_k]` |
        | `[B, H, S_q, S_k]`（多头） | `mask[:, None, None, :]` → `[B, 1, 1, S_k]` | `[B, H, S_q, S_k]` |

        `None` 的个数取决于分数有几个维度。一个经典 bug（很多教程里都有）是把多头用的视图 `[B, 1, 1, S]` 用在单头分数 `[B, S, S]` 上。从右对齐后，`[B, 1, 1, S]` 与 `[B, S, S]` 广播成 `[B, B, S, S]`：每个序列的分数都被*每一个*序列的掩码屏蔽了一遍。`masked_fill` 不会报错，只是返回一个更大的张量，bug 要很久以后才暴露出来，而 `B = 1` 时则根本不会暴露。
        """),
        demo("""
        B, S = 2, 4
        scores = torch.randn(B, S, S)  # single-head scores [B, S, S]
        keep = torch.tensor([[True, True, True, False], [True, True, True, True]])  # [B, S]

        buggy = scores.masked_fill(~keep[:, None, None, :], float("-inf"))  # [B, 1, 1, S] on [B, S, S]
        print("scores", list(scores.shape), "-> with the [B, 1, 1, S] mask:", list(buggy.shape), " (silently 4-D!)")

        fixed = scores.masked_fill(~keep[:, None, :], float("-inf"))  # [B, 1, S] on [B, S, S]
        print("scores", list(scores.shape), "-> with the [B, 1, S] mask:   ", list(fixed.shape))
        print("sequence 0, key 3 is -inf in every row:", torch.isneginf(fixed[0, :, 3]).all().item())
        """),
        md(r"""
        The other classic mistake puts the new axis on the wrong side: `mask[:, :, None]` is `[B, S, 1]`
        and hides **queries** (whole rows) instead of keys. A row that is entirely `-inf` has no valid
        entry, and a hand-written softmax gives `0/0 = NaN` for it, which then spreads to everything it
        touches. `F.scaled_dot_product_attention` treats such a row differently: in the run below
        (PyTorch's CPU kernels) it returns zeros for it. No NaN, but still a query that read nothing;
        do not count on either behaviour, and keep at least one key per row.
        """, r"""
        另一个经典错误是把新维度加在了错误的一侧：`mask[:, :, None]` 是 `[B, S, 1]`，它屏蔽的是**查询**（整行），而不是键。一整行都是 `-inf` 时没有任何有效元素，手写的 softmax 对这一行会得到 `0/0 = NaN`，并传染给它接触到的一切。`F.scaled_dot_product_attention` 对这种行的处理不同：在下面的运行中（PyTorch 的 CPU 内核）它对这一行返回全零。没有 NaN，但这个查询仍然什么都没读到；两种行为都不要依赖，要保证每一行至少保留一个键。
        """),
        demo("""
        torch.manual_seed(0)
        scores = torch.randn(2, 4, 4)
        keep = torch.tensor([[True, True, True, False], [True, True, True, True]])
        rows_hidden = scores.masked_fill(~keep[:, :, None], float("-inf"))  # [B, S, 1]: hides query 3
        print("hand-written softmax, sequence 0:")
        print(torch.softmax(rows_hidden, dim=-1)[0])

        q, k, v = (torch.randn(2, 4, 8) for _ in range(3))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, :, None])  # query 3 of sequence 0 may attend nothing
        print(f"F.scaled_dot_product_attention (torch {torch.__version__}, {q.device}): output of that query:", out[0, 3].tolist())
        """),
        solution("apply_padding_mask", HINTS),
        check("check_apply_padding_mask(apply_padding_mask)", "check_apply_padding_mask"),
        md(r"""
        ## 3. The causal mask

        For `S = 4` the allowed pairs (key `j <= query i`) form the lower triangle:

        ```
                 key 0  key 1  key 2  key 3
        query 0    ✓      ·      ·      ·
        query 1    ✓      ✓      ·      ·
        query 2    ✓      ✓      ✓      ·
        query 3    ✓      ✓      ✓      ✓
        ```

        An `[S, S]` mask broadcasts against `[B, S, S]` and `[B, H, S, S]` with no reshaping, because it
        lines up with the last two axes. Every row keeps at least the diagonal, so causal masking never
        produces an all-`-inf` row; neither does padding here, since every length is at least 1.
        """, r"""
        ## 3. 因果掩码

        `S = 4` 时，允许的配对（键 `j <= 查询 i`）构成下三角：

        ```
                 key 0  key 1  key 2  key 3
        query 0    ✓      ·      ·      ·
        query 1    ✓      ✓      ·      ·
        query 2    ✓      ✓      ✓      ·
        query 3    ✓      ✓      ✓      ✓
        ```

        `[S, S]` 的掩码不需要任何变形就能与 `[B, S, S]` 和 `[B, H, S, S]` 广播，因为它与最后两个维度对齐。每一行至少保留对角线，所以因果掩码永远不会产生全为 `-inf` 的行；这里的填充也不会，因为每个长度都至少为 1。
        """),
        recipe("causal_mask", RECIPES),
        solution("causal_mask", HINTS),
        check("check_causal_mask(causal_mask)", "check_causal_mask"),
        solution("apply_causal_mask", HINTS),
        check("check_apply_causal_mask(apply_causal_mask)", "check_apply_causal_mask"),
        graded_cell("masks"),
        md(r"""
        ## 4. What the masks do to the weights

        Three heatmaps of the same scores (one sequence of length 6 padded to 8): plain, with padding, and
        with padding plus causality. Padded keys (the two right-most columns) get weight 0; with the causal
        mask, everything above the diagonal is 0 too.
        """, r"""
        ## 4. 掩码对权重做了什么

        同一组分数的三张热力图（一个长度为 6 的序列，填充到 8）：不加掩码、加填充掩码、加填充掩码再加因果掩码。被填充的键（最右边两列）权重为 0；加上因果掩码后，对角线以上的部分也全为 0。
        """),
        demo("""
        import matplotlib.pyplot as plt

        with uses_your_code():
            torch.manual_seed(3)
            S = 8
            scores = torch.randn(1, S, S) * 1.5
            keep = padding_mask(torch.tensor([6]), S)
            panels = {
                "plain": scores,
                "padding (length 6)": apply_padding_mask(scores, keep),
                "padding + causal": apply_causal_mask(apply_padding_mask(scores, keep)),
            }
            fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
            for ax, (title, s) in zip(axes, panels.items()):
                ax.imshow(torch.softmax(s, dim=-1)[0], cmap="viridis", vmin=0, vmax=1)
                ax.set(title=title, xlabel="key j", ylabel="query i")
            plt.tight_layout()
            plt.show()
        """),
        *written_cells("written_padding_keys"),
        md(r"""
        ## 5. Pitfalls and how to debug them

        - **Convention mix-up.** If the weights look uniform over the *padding* and zero over real tokens,
          the mask is inverted. Print one row of weights for a short sequence.
        - **Silent broadcasting.** After masking, assert `masked.shape == scores.shape`.
        - **NaN rows.** A NaN in the output usually means a row with every key masked (a hand-written
          softmax; SDPA gave zeros above).
        - **In place.** `masked_fill_` (with the underscore) overwrites its input; `masked_fill` returns a
          new tensor. Overwriting scores that something else still uses leads to confusing bugs.
        - **Integer masks.** A mask of 0/1 integers must be turned into booleans (`mask.bool()` or
          `mask == 0`) before `masked_fill`, which raises otherwise (section 1); this course always uses
          `torch.bool`.
        - **Padding mask as `attn_mask`** in `nn.MultiheadAttention`: it raises when `B != S` and is
          silently wrong when `B == S`; padding goes to `key_padding_mask`.
        """, r"""
        ## 5. 常见陷阱与调试方法

        - **约定混淆。** 如果权重在*填充*上看起来很均匀、在真实 token 上却为 0，说明掩码取反了。对一个短序列打印一行权重看看。
        - **悄无声息的广播。** 加掩码之后，断言 `masked.shape == scores.shape`。
        - **NaN 行。** 输出中出现 NaN，通常意味着有一行的所有键都被屏蔽了（手写 softmax 的情况；上面 SDPA 给出的是零）。
        - **原地操作。** `masked_fill_`（带下划线）会覆盖输入；`masked_fill` 返回新张量。覆盖掉别处还在使用的分数，会导致令人困惑的 bug。
        - **整数掩码。** 由 0/1 整数构成的掩码必须先转成布尔类型（`mask.bool()` 或 `mask == 0`）再交给 `masked_fill`，否则它会报错（见第 1 节）；本课程始终使用 `torch.bool`。
        - **在 `nn.MultiheadAttention` 中把填充掩码当作 `attn_mask`**：`B != S` 时报错，`B == S` 时悄悄出错；填充应该交给 `key_padding_mask`。
        """),
    ]


# The Chinese docstrings of the solution cells (the build puts them in the Chinese edition).
DOCSTRINGS_ZH = {
    "padding_mask": "lengths [B] -> BoolTensor [B, seq_len]，位置 < 长度（真实 token）处为 True。",
    "causal_mask": "BoolTensor [S, S]，键 j <= 查询 i（过去和当前）处为 True。",
    "apply_padding_mask": "scores [B, S_q, S_k] 或 [B, H, S_q, S_k]，mask [B, S_k] -> 形状不变，被填充的键处为 -inf。",
    "apply_causal_mask": "凡是键 j > 查询 i 的位置都设为 -inf；前面有多少个维度都适用。",
}

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# one query, four keys": "# 一个查询，四个键",
    "# key 3 is padding": "# 键 3 是填充",
    '"-inf before the softmax:"': '"softmax 之前填 -inf："',
    '"0 after the softmax:    "': '"softmax 之后置 0：   "',
    '" sum"': '" 和"',
    '"float32, -1e9 instead of -inf gives the same weights:"': '"float32 下用 -1e9 代替 -inf，权重相同："',
    "# a row whose keys are all masked": "# 所有键都被屏蔽的一行",
    'f"every key masked, filled with {name}:"': 'f"所有键都被屏蔽，填充 {name}："',
    '"float16, masked_fill with -1e9: RuntimeError:"': '"float16 下用 -1e9 调用 masked_fill： RuntimeError："',
    '"float16, masked_fill with -inf:"': '"float16 下用 -inf 调用 masked_fill："',
    '"| most negative finite float16:"': '"| float16 最小的有限值："',
    "# lengths 3 and 5: sequence 0 has 2 pad tokens": "# 长度为 3 和 5：序列 0 有 2 个填充 token",
    "# this course: True = real token": "# 本课程：True = 真实 token",
    '"this course (True = keep):\\n"': '"本课程（True = 保留）：\\n"',
    '"nn.MultiheadAttention key_padding_mask (True = ignore):\\n"': '"nn.MultiheadAttention 的 key_padding_mask（True = 忽略）：\\n"',
    '"F.scaled_dot_product_attention attn_mask (True = may attend), shape"': '"F.scaled_dot_product_attention 的 attn_mask（True = 可以关注），形状"',
    '"an integer mask: RuntimeError:"': '"整数掩码：RuntimeError："',
    "# the mistake: True = keep where True = ignore is expected": "# 错误：在要求 True = 忽略的地方传入了 True = 保留",
    '"ours passed as key_padding_mask, NaN per sequence:"': '"把我们的掩码当作 key_padding_mask 传入，各序列是否为 NaN："',
    '"(sequence 1 has no padding)"': '"（序列 1 没有填充）"',
    "# the negation passed to SDPA": "# 把取反后的掩码传给 SDPA",
    '"the negation passed to SDPA, sequence 1: NaN"': '"把取反后的掩码传给 SDPA，序列 1：有 NaN"',
    '"| largest |output|"': '"| 最大的 |输出|"',
    "# a structural mask: no token reads itself (True = blocked)": "# 一个结构性掩码：没有 token 读取自己（True = 屏蔽）",
    "# the same mask as numbers to add": "# 同一个掩码，写成要加上的数",
    "# [B * H, S_q, S_k], one head": "# [B * H, S_q, S_k]，一个头",
    '"boolean attn_mask (True = blocked) and float attn_mask (added) agree:"': '"布尔型 attn_mask（True = 屏蔽）与浮点型 attn_mask（相加）结果一致："',
    '"| the same mask as [B * H, S_q, S_k]:"': '"| 同一个掩码写成 [B * H, S_q, S_k]："',
    "# [B=2, S=5] from the cell above, True = real token": "# 上一个单元格的 [B=2, S=5]，True = 真实 token",
    "# the trap: a padding mask passed as attn_mask": "# 陷阱：把填充掩码当作 attn_mask 传入",
    '"padding mask as attn_mask, B=2, S=5: RuntimeError:"': '"把填充掩码当作 attn_mask，B=2，S=5：RuntimeError："',
    "# accepted as an [S_q, S_k] mask: no error": "# 被当成 [S_q, S_k] 掩码接受：不报错",
    'f"padding mask as attn_mask, B=S=4: no error, outputs differ by up to {': 'f"把填充掩码当作 attn_mask，B=S=4：不报错，输出最多相差 {',
    "# single-head scores [B, S, S]": "# 单头分数 [B, S, S]",
    "# [B, 1, 1, S] on [B, S, S]": "# [B, 1, 1, S] 的掩码作用在 [B, S, S] 上",
    "# [B, 1, S] on [B, S, S]": "# [B, 1, S] 的掩码作用在 [B, S, S] 上",
    '"-> with the [B, 1, 1, S] mask:"': '"-> 用 [B, 1, 1, S] 的掩码："',
    '" (silently 4-D!)"': '"（悄悄变成了四维！）"',
    '"-> with the [B, 1, S] mask:   "': '"-> 用 [B, 1, S] 的掩码：   "',
    '"sequence 0, key 3 is -inf in every row:"': '"序列 0 中，键 3 在每一行都是 -inf："',
    "# [B, S, 1]: hides query 3": "# [B, S, 1]：屏蔽了查询 3",
    '"hand-written softmax, sequence 0:"': '"手写 softmax，序列 0："',
    "# query 3 of sequence 0 may attend nothing": "# 序列 0 的查询 3 什么都不能关注",
    'f"F.scaled_dot_product_attention (torch {torch.__version__}, {q.device}): output of that query:"':
        'f"F.scaled_dot_product_attention（torch {torch.__version__}，{q.device}）：这个查询的输出："',
    '"scores"': '"分数"',
    '"plain": scores,': '"不加掩码": scores,',
    '"padding (length 6)"': '"填充（长度 6）"',
    '"padding + causal"': '"填充 + 因果"',
    'ax.set(title=title, xlabel="key j", ylabel="query i")': 'ax.set(title=title, xlabel="键 j", ylabel="查询 i")',
}
