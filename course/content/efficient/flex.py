"""Notebook 04 of `efficient`: FlexAttention's mask_mod and score_mod, block sparsity, and what torch.compile adds."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "04_flex"

HINTS = {
    "document_causal_mask_mod": (
        "look up the document of the query and of the key for sample b (tensor indexing), and keep causality.",
        "对样本 b 分别查出查询和键所属的文档（用张量索引），同时保持因果。",
    ),
    "prefix_lm_mask_mod": (
        "two ways to be visible: the key is in sample b's prefix, or it is not in the future.",
        "两种情况可见：键在样本 b 的前缀里，或者键不在未来。",
    ),
    "sliding_window_mask_mod": (
        "the condition of sliding_window_mask, written on q_idx and kv_idx.",
        "把 sliding_window_mask 的条件写在 q_idx 和 kv_idx 上。",
    ),
    "alibi_score_mod": (
        "one slope per head, computed once outside the inner function as a tensor, indexed with h inside it\n"
        "(h arrives as a tensor of head indices, not as one int).",
        "每个头一个斜率，在内层函数外面一次算成张量，在里面用 h 索引\n"
        "（h 传进来的是由头的编号组成的张量，而不是一个 int）。",
    ),
    "softcap_score_mod": (
        "a smooth function that is close to the identity near 0 and flattens at +-cap.",
        "一个光滑的函数：在 0 附近接近恒等，在 +-cap 处变平。",
    ),
}

DOCSTRINGS_ZH = {
    "document_causal_mask_mod": "打包序列的 mask_mod，document_ids [B, S]：同一文档内因果，跨文档不可见。",
    "prefix_lm_mask_mod": "前缀语言模型的 mask_mod，prefix_lengths [B]：每个查询都能看到整个前缀，前缀之后按因果。",
    "sliding_window_mask_mod": "sliding_window_mask 的 mask_mod：q_idx - window < kv_idx <= q_idx 处为 True。",
    "alibi_score_mod": "ALiBi 的 score_mod：score + slope_h * (kv_idx - q_idx)，斜率取 ALiBi 论文代码的：num_heads 为 2 的幂时 2^(-8 (h + 1) / num_heads)；否则先取不超过它的最大 2 的幂 n 的斜率，再取 2n 个头的斜率中每隔一个的那些。",
    "softcap_score_mod": "logit 软上限（soft-capping）的 score_mod：cap * tanh(score / cap)，分数小时接近原值，永远不超过 +-cap。",
}


def cells():
    return [
        md(r"""
        # 04 · FlexAttention: masks and biases as small functions

        Every variant so far needed its own kernel: causal, sliding window, packed documents, ALiBi,
        soft-capping... FlexAttention (`torch.nn.attention.flex_attention`, PyTorch 2.5+) takes instead two
        small functions and builds the kernel from them:

        - `mask_mod(b, h, q_idx, kv_idx) -> bool`: may query `q_idx` attend to key `kv_idx` (in sample `b`,
          head `h`)? True = yes;
        - `score_mod(score, b, h, q_idx, kv_idx) -> score`: the new value of one (already scaled) score.

        Both receive **tensors** and must use tensor operations only (no `if`, no `.item()`): they are
        vectorised with `vmap` and, under `torch.compile`, traced into the kernel.

        | part | what you write |
        |---|---|
        | `flex` | `document_causal_mask_mod`, `prefix_lm_mask_mod`, `sliding_window_mask_mod`, `alibi_score_mod`, `softcap_score_mod` |

        Each takes its parameters and **returns** the mod (a function defined inside it).
        """, r"""
        # 04 · FlexAttention：把掩码和偏置写成小函数

        到目前为止，每种变体都要有自己的内核：因果、滑动窗口、打包的文档、ALiBi、logit 软上限……FlexAttention（`torch.nn.attention.flex_attention`，PyTorch 2.5+）改为接收两个小函数，并由它们生成内核：

        - `mask_mod(b, h, q_idx, kv_idx) -> bool`：（在样本 `b`、头 `h` 中）查询 `q_idx` 能否关注键 `kv_idx`？True = 能；
        - `score_mod(score, b, h, q_idx, kv_idx) -> score`：一个（已经缩放过的）分数的新值。

        两者接收的都是**张量**，只能用张量运算（不能用 `if`，不能用 `.item()`）：它们会被 `vmap` 向量化，在 `torch.compile` 下还会被追踪进内核。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `flex` | `document_causal_mask_mod`、`prefix_lm_mask_mod`、`sliding_window_mask_mod`、`alibi_score_mod`、`softcap_score_mod` |

        每个函数接收自己的参数，并**返回**一个 mod（在它内部定义的函数）。
        """),
        setup(),
        md(r"""
        ## 1. A first mask_mod, drawn and applied

        `create_mask(mask_mod, B, H, S_q, S_k)` evaluates a mask_mod on every (query, key) pair and returns
        the boolean mask `[B, H, S_q, S_k]`: the way to **see** a mask_mod. `flex_attention(q, k, v,
        block_mask=..., score_mod=...)` applies it. On a CPU without `torch.compile`, flex_attention runs
        **eagerly**: it works, warns, and builds the whole score matrix (section 7 says what compiling
        changes). The cell draws the causal mask_mod, applies it, and compares with SDPA's causal attention.
        """, r"""
        ## 1. 第一个 mask_mod：画出来，再用上

        `create_mask(mask_mod, B, H, S_q, S_k)` 在每一对（查询，键）上求 mask_mod 的值，返回布尔掩码 `[B, H, S_q, S_k]`：这是**看见**一个 mask_mod 的方法。`flex_attention(q, k, v, block_mask=..., score_mod=...)` 则把它用上。在没有 `torch.compile` 的 CPU 上，flex_attention 以 **eager 模式（急切执行）**运行：逐个算子立即执行，不经编译。结果正确，但会发出警告，并构造整个分数矩阵（第 7 节说明编译改变了什么）。下面的单元格画出因果 mask_mod，用上它，并与 SDPA 的因果注意力比较。
        """),
        demo("""
        import warnings

        import matplotlib.pyplot as plt
        from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention


        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx


        def draw(masks, titles):
            fig, axes = plt.subplots(1, len(masks), figsize=(3.2 * len(masks), 3.2), squeeze=False)
            for ax, mask, title in zip(axes[0], masks, titles):
                ax.imshow(mask.int(), cmap="Greens", vmin=0, vmax=1)
                ax.set(title=title, xlabel=say("key position kv_idx"), ylabel=say("query position q_idx"))
            plt.show()


        draw([create_mask(causal, None, None, 12, 12, device="cpu")[0, 0]], [say("causal mask_mod")])
        torch.manual_seed(0)
        q, k, v = (torch.randn(2, 4, 256, 16) for _ in range(3))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = flex_attention(q, k, v, block_mask=create_block_mask(causal, None, None, 256, 256, device="cpu"))
        said = [str(w.message).splitlines()[0] for w in caught]
        print(say("PyTorch warned: {text}", text=said[0] if said else say("(nothing)")))
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")  # said once is enough
        print(say("flex_attention with the causal mask_mod vs SDPA is_causal=True: largest difference {gap:.1e}",
                  gap=(out - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max().item()))
        """),
        md(r"""
        ## 2. Packed documents

        Training batches are often **packed**: several short documents concatenated into one sequence of
        length S, to waste no padding. A token must then attend causally **within its own document** and
        never to the previous documents. `document_ids [B, S]` gives the document of each token;
        `document_causal_mask_mod(document_ids)` returns the mask_mod. Inside it, `document_ids[b, q_idx]` is
        the query's document (tensor indexing works on the tensors the mod receives).
        """, r"""
        ## 2. 打包的文档

        训练批次常常是**打包**的：把几篇短文档拼成一条长度为 S 的序列，以免浪费填充。于是一个 token 只能在**自己的文档内**按因果关注，绝不能关注前面的文档。`document_ids [B, S]` 给出每个 token 所属的文档；`document_causal_mask_mod(document_ids)` 返回相应的 mask_mod。在 mod 内部，`document_ids[b, q_idx]` 就是查询所属的文档（对 mod 收到的张量可以直接做索引）。
        """),
        solution("document_causal_mask_mod", HINTS),
        check("check_document_causal_mask_mod(document_causal_mask_mod)", "check_document_causal_mask_mod"),
        md(r"""
        The cell draws your mask for a sequence of 16 tokens holding documents of 5, 3 and 8 tokens, then
        checks the promise of packing: flex_attention over the packed sequence equals attention run on each
        document alone.
        """, r"""
        下面的单元格画出你的掩码：一条 16 个 token 的序列，装着长度为 5、3、8 的三篇文档；然后验证打包不改变结果：对打包序列做 flex_attention，与对每篇文档单独做注意力完全相同。
        """),
        demo("""
        lengths = [5, 3, 8]
        document_ids = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))[None]  # [1, 16]
        torch.manual_seed(1)
        q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
        with uses_your_code():
            mask_mod = document_causal_mask_mod(document_ids)
            draw([create_mask(mask_mod, 1, None, 16, 16, device="cpu")[0, 0]], [say("packed documents 5 + 3 + 8")])
            packed = flex_attention(q, k, v, block_mask=create_block_mask(mask_mod, 1, None, 16, 16, device="cpu"))
            alone = torch.cat([F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], is_causal=True)
                               for s, e in zip([0, 5, 8], [5, 8, 16])], dim=2)
            print(say("packed with your mask_mod vs each document alone: largest difference {gap:.1e}",
                      gap=(packed - alone).abs().max().item()))
        """),
        md(r"""
        ## 3. Prefix-LM and sliding window

        A **prefix-LM** (T5's decoder-only variant, many vision-language models) reads a prefix (a prompt,
        an image) bidirectionally and generates the rest causally: every query sees the whole prefix
        (`kv_idx < prefix_lengths[b]`), and after it the usual causal rule. `prefix_lm_mask_mod(prefix_lengths)`
        takes one prefix length per sample. `sliding_window_mask_mod(window)` is the mask of
        `sliding_window_mask` from notebook 02 as a mask_mod.
        """, r"""
        ## 3. 前缀语言模型与滑动窗口

        **前缀语言模型**（prefix-LM：T5 的纯解码器变体、许多视觉-语言模型）双向地读入一段前缀（提示、图像），然后按因果生成其余部分：每个查询都能看到整个前缀（`kv_idx < prefix_lengths[b]`），前缀之后是通常的因果规则。`prefix_lm_mask_mod(prefix_lengths)` 为每个样本接收一个前缀长度。`sliding_window_mask_mod(window)` 就是 02 号 notebook 中 `sliding_window_mask` 的 mask_mod 形式。
        """),
        solution("prefix_lm_mask_mod", HINTS),
        check("check_prefix_lm_mask_mod(prefix_lm_mask_mod)", "check_prefix_lm_mask_mod"),
        solution("sliding_window_mask_mod", HINTS),
        check("check_sliding_window_mask_mod(sliding_window_mask_mod)", "check_sliding_window_mask_mod"),
        demo("""
        with uses_your_code():
            prefix = create_mask(prefix_lm_mask_mod(torch.tensor([4, 9])), 2, None, 12, 12, device="cpu")[:, 0]
            window = create_mask(sliding_window_mask_mod(4), None, None, 12, 12, device="cpu")[0, 0]
            draw([prefix[0], prefix[1], window], [say("prefix-LM, prefix 4"), say("prefix-LM, prefix 9"),
                                                  say("sliding window 4")])
            print(say("keys seen per query, prefix 4: {counts}", counts=prefix[0].sum(-1).tolist()))
        """),
        md(r"""
        ## 4. score_mod: ALiBi

        ALiBi (Press et al., 2022) uses no position embedding at all: each head adds to every score a
        penalty proportional to the distance, $\text{slope}_h \cdot (\text{kv\_idx} - \text{q\_idx})$ (negative
        for past keys), with a geometric sequence of slopes $\text{slope}_h = 2^{-8(h+1)/H}$ when $H$ is a power
        of two: head 0 looks near, the last head far. For another $H$ the paper's code (`get_slopes`) takes the
        $n$ slopes of the largest power of two $n$ below $H$, then the first $H - n$ of the slopes for $2n$ heads
        at even indices (`slopes_2n[0::2]`): for 12 heads, $2^{-1}, \dots, 2^{-8}$, then $2^{-0.5}, 2^{-1.5},
        2^{-2.5}, 2^{-3.5}$ (the formula alone, for every $H$, matches only powers of two).
        `alibi_score_mod(num_heads)` returns the score_mod. Compute the slopes once, as a tensor, outside the
        inner function, and index them with `h` inside.
        """, r"""
        ## 4. score_mod：ALiBi

        ALiBi（Press 等，2022）完全不用位置编码：每个头给每个分数加上一个与距离成正比的惩罚 $\text{slope}_h \cdot (\text{kv\_idx} - \text{q\_idx})$（对过去的键为负），当 $H$ 是 2 的幂时，斜率是一个等比数列 $\text{slope}_h = 2^{-8(h+1)/H}$：头 0 看得近，最后一个头看得远。$H$ 不是 2 的幂时，论文的代码（`get_slopes`）先取小于 $H$ 的最大 2 的幂 $n$ 的 $n$ 个斜率，再取 $2n$ 个头的斜率中偶数下标的前 $H - n$ 个（`slopes_2n[0::2]`）：12 个头时是 $2^{-1}, \dots, 2^{-8}$，然后是 $2^{-0.5}, 2^{-1.5}, 2^{-2.5}, 2^{-3.5}$（只用那个公式算所有 $H$，只有 2 的幂时才对）。`alibi_score_mod(num_heads)` 返回这个 score_mod。在内层函数外面把斜率一次算成张量，在里面用 `h` 索引。
        """),
        solution("alibi_score_mod", HINTS),
        check("check_alibi_score_mod(alibi_score_mod)", "check_alibi_score_mod"),
        md(r"""
        A score_mod applied to every score is an additive bias here. The cell evaluates your score_mod on a
        zero score for every (head, query, key) at once (the mod is made of tensor operations, so it
        broadcasts), plots the bias of query 31 for 8 heads, and checks that flex_attention with your
        score_mod and the causal mask equals SDPA given that bias as a float mask.
        """, r"""
        这里对每个分数施加的 score_mod 就是一个加性偏置。下面的单元格一次性在每个（头，查询，键）上对零分数求你的 score_mod 的值（mod 由张量运算组成，所以可以广播），画出 8 个头中查询 31 的偏置，并验证：带着你的 score_mod 和因果掩码的 flex_attention，等于把这个偏置作为浮点掩码传给 SDPA 的结果。
        """),
        demo("""
        H, S = 8, 32
        h, q_idx, kv_idx = torch.arange(H)[:, None, None], torch.arange(S)[None, :, None], torch.arange(S)[None, None, :]
        torch.manual_seed(2)
        q, k, v = (torch.randn(1, H, S, 16) for _ in range(3))
        with uses_your_code():
            score_mod = alibi_score_mod(H)
            bias = score_mod(torch.zeros(H, S, S), torch.tensor(0), h, q_idx, kv_idx)  # [H, S, S]
            fig, ax = plt.subplots(figsize=(5.5, 3.4))
            for head in range(H):
                ax.plot(range(S), bias[head, S - 1], label=say("head {h}", h=head))
            ax.set(xlabel=say("key position kv_idx"), ylabel=say("bias added to the score"), title=say("ALiBi, query 31"))
            ax.legend(fontsize=7, ncol=2)
            plt.show()
            causal_mask = create_block_mask(causal, None, None, S, S, device="cpu")
            out = flex_attention(q, k, v, score_mod=score_mod, block_mask=causal_mask)
            dense_bias = bias.masked_fill(q_idx < kv_idx, float("-inf"))[None]  # [1, H, S, S]
            print(say("flex_attention with your ALiBi vs SDPA with the same bias: largest difference {gap:.1e}",
                      gap=(out - F.scaled_dot_product_attention(q, k, v, attn_mask=dense_bias)).abs().max().item()))
        """),
        md(r"""
        ## 5. score_mod: soft-capping

        Gemma 2 keeps attention logits from growing without bound by **soft-capping** them:
        $\text{cap} \cdot \tanh(\text{score} / \text{cap})$, close to the score when it is small, never beyond
        $\pm\text{cap}$, and smooth (a clamp would have zero gradient beyond the cap). `softcap_score_mod(cap)`
        returns the score_mod. The cell plots it next to a clamp.
        """, r"""
        ## 5. score_mod：logit 软上限

        Gemma 2 用 **logit 软上限**（soft-capping）防止注意力 logit 无限增大：$\text{cap} \cdot \tanh(\text{score} / \text{cap})$，分数小时接近原值，永远不超过 $\pm\text{cap}$，并且处处光滑。与之相对的**硬截断**（clamp）取值范围相同，但超过上限后梯度为零。`softcap_score_mod(cap)` 返回这个 score_mod。下面的单元格把软上限和硬截断画在一起。
        """),
        solution("softcap_score_mod", HINTS),
        check("check_softcap_score_mod(softcap_score_mod)", "check_softcap_score_mod"),
        demo("""
        scores = torch.linspace(-120, 120, 241)
        zero = torch.tensor(0)
        with uses_your_code():
            capped = softcap_score_mod(50.0)(scores, zero, zero, zero, zero)
            fig, ax = plt.subplots(figsize=(5, 3.2))
            ax.plot(scores, capped, label=say("soft-cap, cap 50"))
            ax.plot(scores, scores.clamp(-50, 50), "--", label=say("clamp to +-50"))
            ax.set(xlabel=say("score"), ylabel=say("new score"), title=say("logit soft-capping"))
            ax.legend()
            plt.show()
            print(say("score 10 -> {a:.2f}, score 100 -> {b:.2f}, score 1000 -> {c:.2f}",
                      a=capped[130].item(), b=capped[220].item(),
                      c=softcap_score_mod(50.0)(torch.tensor(1000.0), zero, zero, zero, zero).item()))
        """),
        graded_cell("flex"),
        md(r"""
        ## 6. Block sparsity: what a BlockMask lets a kernel skip

        `create_block_mask(mask_mod, B, H, S_q, S_k)` evaluates the mask_mod once and summarises it per
        tile of 128 x 128: a tile is **empty** (skipped), **full** (computed without evaluating the mask), or
        **partial** (computed and masked), exactly the three kinds of notebook 01. The fused kernel only
        visits the non-empty tiles, so the work follows the mask: the cell counts the tiles computed for
        S = 4096 with the causal mask, your sliding window of 256, and your packed documents of 1024 tokens
        each, and draws the tiles of the last one.
        """, r"""
        ## 6. 块稀疏：BlockMask 让内核跳过什么

        `create_block_mask(mask_mod, B, H, S_q, S_k)` 只对 mask_mod 求一次值，并按 128 x 128 的分块做汇总：一个分块要么是**空的**（跳过），要么是**满的**（计算时不必再求掩码），要么是**部分的**（计算后加掩码）——正是 01 号 notebook 中的三类分块。融合内核只访问非空的分块，所以计算量随掩码变化：下面的单元格统计 S = 4096 时，因果掩码、你的宽度为 256 的滑动窗口、以及你的每篇 1024 个 token 的打包文档各自需要计算的分块数，并画出最后一种的分块。
        """),
        demo("""
        S = 4096
        with uses_your_code():
            documents = torch.arange(S)[None] // 1024  # [1, S]: four documents of 1024 tokens
            masks = {say("causal"): create_block_mask(causal, None, None, S, S, device="cpu"),
                     say("sliding window 256"): create_block_mask(sliding_window_mask_mod(256), None, None, S, S, device="cpu"),
                     say("4 packed documents"): create_block_mask(document_causal_mask_mod(documents), 1, None, S, S, device="cpu")}
            for name, block_mask in masks.items():
                tiles = block_mask.to_dense()[0, 0]  # [query blocks, key blocks]: 1 where the tile is computed
                print(say("{computed:>4} of {total} tiles computed ({skipped:5.1%} skipped): {name}",
                          name=name, computed=int(tiles.sum()), total=tiles.numel(),
                          skipped=1 - tiles.sum().item() / tiles.numel()))
            draw([tiles], [say("tiles computed, 4 packed documents")])
        """),
        md(r"""
        ## 7. What torch.compile adds

        Eager flex_attention is a reference implementation: it evaluates the mods on the full score matrix.
        `torch.compile(flex_attention)` generates a **fused kernel** (Triton on a GPU, C++ on a CPU) in which
        your mods are inlined into the inner loop of an online-softmax kernel like notebook 01's: no score
        matrix, and the empty tiles of the BlockMask are never visited. Its first call in a process pays for
        that, in one of two ways: **cold**, nothing in the compiler's cache (`TORCHINDUCTOR_CACHE_DIR`, by
        default a folder in your temporary directory), it writes and compiles the C++ kernel, which needs a C++
        compiler and is the slow case; **warm**, an earlier run left the kernel in the cache, and it is traced
        again and loaded. The cell reads the compiler's own counters to say which of the two this run was. To
        time a cold compile yourself, start Jupyter with `TORCHINDUCTOR_CACHE_DIR` set to an empty folder.

        This is the notebook's long cell: a cold compile can take longer than the rest of the notebook together
        on a small CPU (the cell prints which case it was and how long it took); warm, it takes seconds. A single
        call's time on a busy machine varies from run to run, so the cell reports the **median** of the calls
        after the first (the first also pays for warming up), and the individual times. Note that the
        compiler traces your mods, and reads the module they were defined in: in a notebook that is
        `__main__`, which is fine. Where it cannot compile, the cell says why.
        """, r"""
        ## 7. torch.compile 带来了什么

        eager 模式的 flex_attention 是一个参考实现：它在完整的分数矩阵上求 mod 的值。`torch.compile(flex_attention)` 会生成一个**融合内核**（GPU 上是 Triton，CPU 上是 C++），把你的 mod 内联到一个与 01 号 notebook 类似的在线 softmax 内核的内层循环里：没有分数矩阵，BlockMask 中空的分块也从不被访问。进程里的第一次调用要为此付出代价，分两种情况：**冷启动**，编译器的缓存（`TORCHINDUCTOR_CACHE_DIR`，默认在临时目录下）里什么也没有，它要生成并编译 C++ 内核，这需要 C++ 编译器，是慢的情况；**热启动**，之前的运行已经把内核留在缓存里，只需重新追踪并加载。下面的单元格读取编译器自己的计数器，说明这次运行属于哪一种。想自己测一次冷启动的编译时间，可以把 `TORCHINDUCTOR_CACHE_DIR` 设为一个空文件夹再启动 Jupyter。

        这是本 notebook 里耗时最长的单元格：在小型 CPU 上，冷启动编译可能比 notebook 其余部分加起来还慢（单元格会打印这次属于哪种情况、花了多长时间）；热启动只要几秒。在繁忙的机器上，单次调用的耗时每次运行都不一样，所以单元格报告第一次之后各次调用的**中位数**（第一次还包含预热的开销），并列出每次的耗时。注意编译器会追踪你的 mod，并读取定义它们的模块：在 notebook 中那就是 `__main__`，没有问题。无法编译时，单元格会说明原因。
        """),
        demo("""
        import os
        import shutil
        import statistics
        import tempfile
        import time

        from torch._dynamo.utils import counters


        def timed(fn, calls):
            seconds = []
            for _ in range(calls):
                started = time.perf_counter()
                result = fn()
                seconds.append(time.perf_counter() - started)
            return seconds, result


        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", tempfile.gettempdir())
        if os.environ.get("COURSE_SKIP_COMPILE"):
            reason = say("COURSE_SKIP_COMPILE is set (the course's tests set it, to stay fast)")
        elif not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
            reason = say("no C++ compiler (g++, c++ or clang++) on this machine")
        elif not os.access(cache, os.W_OK):
            reason = say("the compiler's cache folder {folder} is not writable", folder=cache)
        else:
            reason = None
        if reason:
            print(say("torch.compile skipped: {reason}", reason=reason))
        else:
            S = 512
            torch.manual_seed(3)
            q, k, v = (torch.randn(1, 4, S, 32) for _ in range(3))
            with uses_your_code():
                block_mask = create_block_mask(sliding_window_mask_mod(128), None, None, S, S, device="cpu")
                eager_calls, eager = timed(lambda: flex_attention(q, k, v, block_mask=block_mask), 3)
                try:
                    compiled_flex = torch.compile(flex_attention)
                    misses = counters["inductor"]["fxgraph_cache_miss"]
                    first, _ = timed(lambda: compiled_flex(q, k, v, block_mask=block_mask), 1)
                    cold = counters["inductor"]["fxgraph_cache_miss"] > misses  # compiled, not found in the cache
                    compiled_calls, compiled = timed(lambda: compiled_flex(q, k, v, block_mask=block_mask), 5)
                    print(say("compiled vs eager: largest difference {gap:.1e}", gap=(compiled - eager).abs().max().item()))
                    print(say("eager: median {median:.3f} s of calls 2 and 3 ({calls}; the first took {first:.3f} s)",
                              median=statistics.median(eager_calls[1:]), calls=", ".join(f"{t:.3f}" for t in eager_calls[1:]),
                              first=eager_calls[0]))
                    print(say("compiled, first call: {first:.1f} s, {how}", first=first[0],
                              how=say("cold: the kernel was compiled from scratch") if cold else
                              say("warm: the kernel came from the compiler's cache")))
                    print(say("compiled, after it: median {median:.4f} s of 5 calls ({calls})",
                              median=statistics.median(compiled_calls), calls=", ".join(f"{t:.4f}" for t in compiled_calls)))
                except Exception as error:  # a compiler that fails: say so in one line, the notebook goes on
                    print(say("torch.compile skipped: {reason}", reason=f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"))
        """),
        md(r"""
        ## 8. Pitfalls

        - **Python control flow in a mod** (`if q_idx >= kv_idx:`, `.item()`): the mods receive tensors and are
          vmapped; use `&`, `|`, `torch.where`.
        - **Forgetting `b`**: `document_ids[q_idx]` uses sample 0's documents for every sample.
        - **ALiBi's slopes in a Python list**: `slopes[h]` works while `h` is one number, but flex_attention (and
          the demo's grid of every head at once) hands the mod a tensor of head indices; keep the slopes in a tensor.
        - **ALiBi's sign**: past keys are penalised, `slope * (kv_idx - q_idx)` is negative for them; head 0 has
          the steepest slope $2^{-8/H}$.
        - **Clamp instead of tanh**: same range, no gradient beyond the cap.
        - **A mod defined where the compiler cannot import it**: torch.compile reads the module that defines
          the mod; code loaded under a name that is not in `sys.modules` fails with `ModuleNotFoundError`.
        """, r"""
        ## 8. 常见错误

        - **在 mod 里用 Python 控制流**（`if q_idx >= kv_idx:`、`.item()`）：mod 收到的是张量，并且会被 vmap；请用 `&`、`|`、`torch.where`。
        - **忘了 `b`**：`document_ids[q_idx]` 会让每个样本都用样本 0 的文档划分。
        - **把 ALiBi 的斜率放在 Python 列表里**：`h` 只是一个数时 `slopes[h]` 能用，但 flex_attention（以及演示单元格里一次算所有头的网格）传给 mod 的是由头的编号组成的张量；斜率要存成张量。
        - **ALiBi 的符号**：过去的键要受惩罚，`slope * (kv_idx - q_idx)` 对它们是负的；头 0 的斜率最陡，为 $2^{-8/H}$。
        - **用硬截断（clamp）代替 tanh**：取值范围相同，但超过上限后没有梯度。
        - **mod 定义在编译器无法导入的地方**：torch.compile 会读取定义 mod 的模块；以不在 `sys.modules` 中的名字加载的代码会报 `ModuleNotFoundError`。
        """),
    ]


DEMO_ZH = {
    '# said once is enough': '# 提醒一次就够了',
    '# [1, S]: four documents of 1024 tokens': '# [1, S]：四篇文档，每篇 1024 个 token',
    '# [query blocks, key blocks]: 1 where the tile is computed': '# [查询块, 键块]：要计算的分块处为 1',
    '# a compiler that fails: say so in one line, the notebook goes on': '# 编译器出错：用一行说明，notebook 继续运行',
    '# compiled, not found in the cache': '# 缓存里没有，重新编译了',
}
