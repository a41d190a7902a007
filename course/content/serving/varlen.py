"""Notebook 01 of `serving`: packed batches without padding (cu_seqlens, pack / unpack, varlen attention)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution

NAME = "01_varlen"

HINTS = {
    "cu_seqlens": (
        "a running total of the lengths, with a 0 in front; the dtype servers use is int32.",
        "长度的累加和，前面加一个 0；推理服务用的 dtype 是 int32。",
    ),
    "pack": (
        "keep the first l_b rows of sequence b, then put the kept rows one after another.",
        "每条序列 b 只保留前 l_b 行，再把保留下来的行一条接一条地拼起来。",
    ),
    "unpack": (
        "sequence b is rows cu[b]:cu[b+1] of the packed tensor; everything else of the padded output is 0.",
        "序列 b 是打包张量的第 cu[b]:cu[b+1] 行；填充后的输出里其余位置都是 0。",
    ),
    "varlen_attention": (
        "one sequence at a time: its queries, its keys, its values, a bottom-right mask when causal,\n"
        "and a query that sees no key returns zeros.",
        "一次处理一条序列：它自己的查询、键和值；causal 时用右下对齐的掩码；\n"
        "看不到任何键的查询返回 0。",
    ),
}

RECIPES = {
    "varlen_attention": (
        """
        1. `cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()`; `out = q.new_zeros(T_q, H, D_v)`.
        2. For each `b`: `qb = q[cq[b]:cq[b+1]]` `[S_q, H, D]`, `kb, vb` likewise with `ck` `[S_k, H_kv, D]`.
        3. Grouped heads: `kb.repeat_interleave(H // H_kv, dim=1)` (query head `h` reads kv head `h // (H / H_kv)`).
        4. `scores = torch.einsum("qhd,khd->hqk", qb, kb) / math.sqrt(D)` `[H, S_q, S_k]`; causal: `-inf` where
           `torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q)` is False.
        5. `torch.softmax(scores, -1).nan_to_num(0.0)` (a row of `-inf` only gives NaN: it becomes 0), then
           `torch.einsum("hqk,khd->qhd", weights, vb)` into `out[cq[b]:cq[b+1]]`.
        """,
        """
        1. `cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()`；`out = q.new_zeros(T_q, H, D_v)`。
        2. 对每个 `b`：`qb = q[cq[b]:cq[b+1]]` `[S_q, H, D]`，`kb, vb` 用 `ck` 同样切出 `[S_k, H_kv, D]`。
        3. 分组的头：`kb.repeat_interleave(H // H_kv, dim=1)`（查询头 `h` 读 kv 头 `h // (H / H_kv)`）。
        4. `scores = torch.einsum("qhd,khd->hqk", qb, kb) / math.sqrt(D)` `[H, S_q, S_k]`；causal 时，在
           `torch.ones(S_q, S_k, dtype=torch.bool).tril(S_k - S_q)` 为 False 的地方填 `-inf`。
        5. `torch.softmax(scores, -1).nan_to_num(0.0)`（整行都是 `-inf` 只会得到 NaN：把它变成 0），再用
           `torch.einsum("hqk,khd->qhd", weights, vb)` 写进 `out[cq[b]:cq[b+1]]`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "cu_seqlens": """IntTensor [B + 1]（int32）：0, l_0, l_0 + l_1, ...（打包批次里每条序列的起点，最后是 T）。""",
    "pack": """右侧填充的 x [B, S, ...] -> [T, ...]：每条序列的真实 token，一条接一条。""",
    "unpack": """打包的 [T, ...] -> [B, max_len, ...]，填充处为 0：pack 的逆操作。""",
    "varlen_attention": """q [T_q, H, D]，k [T_k, H_kv, D]，v [T_k, H_kv, D_v] -> [T_q, H, D_v]：每条序列只关注它自己的键。""",
}


def cells():
    return [
        md(r"""
        # 01 · A batch without padding: packed sequences

        The course so far batched sequences as `[B, H, S, D]`, padding the short ones up to the longest and
        masking the padding away. An **inference server** (vLLM, SGLang, TensorRT-LLM: the software behind
        every hosted model) serves hundreds of requests of very different lengths at once, and does not pay for
        padding: it **packs** the real tokens of all its sequences into one tensor `[T, H, D]`, with
        $T = \sum_b l_b$, and keeps where each sequence starts in a small integer tensor, `cu_seqlens`. This
        assignment builds, on the CPU and in plain torch, the pieces of attention as such a server runs it:

        | notebook | part (points) | what you write |
        |---|---|---|
        | 01 (this one) | `varlen` (15) | `cu_seqlens`, `pack`, `unpack`, `varlen_attention` |
        | 02 | `paged_cache` (20) | `BlockAllocator`, `reshape_and_cache`, `PagedKVCache` |
        | 03 | `paged_attention` (20) | `paged_attention`, `paged_to_csr` |
        | 04 | `prefix_sharing` (15) | `block_hashes`, prefix caching and copy-on-write in `PagedKVCache` |
        | 05 | `continuous_batching` (20) | `PagedDecoderAttention`, `continuous_batching_generate`, `static_batching_generate` |
        | 06 | `attention_sinks` (10) | `SinkKVCache`, `SinkDecoderAttention` |

        The rules are the other assignments': fill in the *solution* cells, run the locked check cell after
        each, leave the graded cell to the hidden autograder. The graded functions use plain torch (SDPA with an
        explicit mask, on one sequence at a time, is allowed); `flash_attn`, `vllm`, `flashinfer`, `xformers`,
        `sglang`, nested tensors and torch's own varlen helpers earn nothing.
        """, r"""
        # 01 · 不带填充的批次：打包的序列

        到目前为止，课程都把序列组成 `[B, H, S, D]` 的批次：把短序列填充到最长的那条，再用掩码把填充遮掉。**推理服务**（vLLM、SGLang、TensorRT-LLM：每个在线大模型背后的软件）同时服务成百上千个长度差别很大的请求，它不为填充付出代价：它把所有序列的真实 token **打包**（packed）成一个张量 `[T, H, D]`，$T = \sum_b l_b$，再用一个小小的整数张量 `cu_seqlens`（累积长度）记下每条序列从哪里开始。本作业在 CPU 上、只用普通的 torch，搭建推理服务运行注意力时用到的各个部件：

        | notebook | 评分部分（分值） | 你要写的内容 |
        |---|---|---|
        | 01（本 notebook） | `varlen`（15） | `cu_seqlens`、`pack`、`unpack`、`varlen_attention` |
        | 02 | `paged_cache`（20） | `BlockAllocator`、`reshape_and_cache`、`PagedKVCache` |
        | 03 | `paged_attention`（20） | `paged_attention`、`paged_to_csr` |
        | 04 | `prefix_sharing`（15） | `block_hashes`，以及 `PagedKVCache` 的前缀缓存和写时复制 |
        | 05 | `continuous_batching`（20） | `PagedDecoderAttention`、`continuous_batching_generate`、`static_batching_generate` |
        | 06 | `attention_sinks`（10） | `SinkKVCache`、`SinkDecoderAttention` |

        规则和其他作业一样：填写 *solution* 单元格，每写完一个就运行它后面那个锁定的检查单元格，评分单元格留给隐藏的自动评分器。评分的函数只用普通的 torch（允许对单条序列使用带显式掩码的 SDPA）；调用 `flash_attn`、`vllm`、`flashinfer`、`xformers`、`sglang`、嵌套张量（nested tensor）或 torch 自带的变长（varlen）辅助函数，该部分不得分。
        """),
        setup(),
        md(r"""
        ### Glossary

        The terms of this assignment in both editions (`serving` and `serving_zh`), with the names of the code:

        | 中文 | English | code |
        |---|---|---|
        | 打包 / 变长 | packed / varlen | `[T, H, D]`, `varlen_attention` |
        | 累积长度 | cumulative sequence lengths | `cu_seqlens`, int32 `[B + 1]` |
        | 分页 KV 缓存 | paged KV cache | `PagedKVCache`, `k_cache [num_layers, num_blocks, block_size, H_kv, D]` |
        | 块（KV 块；物理块 / 逻辑块） | block (KV block; physical / logical block) | a block id / an index into a block table |
        | 块表、块大小 | block table, block size | `block_table(seq_id)`, `block_size` |
        | 槽位映射 | slot mapping | `slot = block * block_size + offset` |
        | 块分配器、空闲队列、引用计数 | block allocator, free queue, reference count | `BlockAllocator`, `refcount(block)` |
        | 分页注意力、页表 | paged attention (PagedAttention), page table (FlashInfer, CSR) | `paged_attention`, `paged_to_csr` |
        | 前缀缓存、前缀共享、链式哈希 | prefix caching, prefix sharing, chained hash | `enable_prefix_caching`, `block_hashes` |
        | 命中 / 未命中 | hit / miss | what `add_sequence` returns |
        | 写时复制、分叉 | copy-on-write, fork | `fork(parent_id, child_id)` |
        | 并行采样 / 束搜索 | parallel sampling / beam search | why a sequence forks |
        | 缓存淘汰（惰性淘汰；LRU 最近最少使用） | eviction (lazy eviction; least recently used) | the free queue's order |
        | 连续批处理 / 静态批处理 | continuous / static batching | `continuous_batching_generate`, `static_batching_generate` |
        | 迭代级调度、调度器 | iteration-level scheduling, scheduler | one decision per model step |
        | 分块预填充、混合步 | chunked prefill, mixed step | a prompt computed in pieces; decodes and prefill in one step |
        | token 预算、抢占、吞吐量 | token budget, preemption, throughput | `token_budget`; tokens/s |
        | 注意力汇点、汇点 token | attention sink, sink token | `SinkKVCache(num_sink, window)` |
        | 最近窗口、缓存内位置 | recent window, positions inside the cache | `window`; `0 .. len(cache) - 1` |

        "Block" always means a KV block here; a piece of a prompt is a *chunk*, and FlashAttention's tile (of
        `efficient`) is a *tile*.
        """, r"""
        ### 术语表

        本作业两个版本（`serving` 和 `serving_zh`）共用的术语，以及代码里对应的名字：

        | 中文 | English | 代码 |
        |---|---|---|
        | 打包 / 变长 | packed / varlen | `[T, H, D]`，`varlen_attention` |
        | 累积长度 | cumulative sequence lengths | `cu_seqlens`，int32 `[B + 1]` |
        | 分页 KV 缓存 | paged KV cache | `PagedKVCache`，`k_cache [num_layers, num_blocks, block_size, H_kv, D]` |
        | 块（KV 块；物理块 / 逻辑块） | block (KV block; physical / logical block) | 块的编号 / 块表里的下标 |
        | 块表、块大小 | block table, block size | `block_table(seq_id)`，`block_size` |
        | 槽位映射 | slot mapping | `slot = block * block_size + offset` |
        | 块分配器、空闲队列、引用计数 | block allocator, free queue, reference count | `BlockAllocator`，`refcount(block)` |
        | 分页注意力（PagedAttention）、页表 | paged attention, page table（FlashInfer，CSR） | `paged_attention`，`paged_to_csr` |
        | 前缀缓存、前缀共享、链式哈希 | prefix caching, prefix sharing, chained hash | `enable_prefix_caching`，`block_hashes` |
        | 命中 / 未命中 | hit / miss | `add_sequence` 的返回值 |
        | 写时复制、分叉 | copy-on-write, fork | `fork(parent_id, child_id)` |
        | 并行采样 / 束搜索 | parallel sampling / beam search | 序列为什么要分叉 |
        | 缓存淘汰（惰性淘汰；LRU 最近最少使用） | eviction (lazy eviction; least recently used) | 空闲队列的顺序 |
        | 连续批处理 / 静态批处理 | continuous / static batching | `continuous_batching_generate`，`static_batching_generate` |
        | 迭代级调度、调度器 | iteration-level scheduling, scheduler | 模型每走一步就做一次决定 |
        | 分块预填充、混合步 | chunked prefill, mixed step | 提示词分几块计算；同一步里既有解码又有预填充 |
        | token 预算、抢占、吞吐量 | token budget, preemption, throughput | `token_budget`；tokens/s |
        | 注意力汇点（attention sink）、汇点 token | attention sink, sink token | `SinkKVCache(num_sink, window)` |
        | 最近窗口、缓存内位置 | recent window, positions inside the cache | `window`；`0 .. len(cache) - 1` |

        在本作业里，"块"总是指 KV 块；提示词的一段叫"分块"（chunk），FlashAttention 的 tile（见 `efficient`）叫"分数块（tile）"。
        """),
        md(r"""
        ## 1. What padding costs

        Three sequences of 4, 6 and 3 tokens, padded to 6, give a score tensor `[B, H, 6, 6]`: $B \cdot H \cdot
        \max_b l_b^2$ scores, of which only $H \sum_b l_b^2$ are real (each sequence attends to itself alone).
        The rest is computed and thrown away. With real traffic, where one request holds 2000 tokens and the
        others 50, nearly everything would be padding. The cell prints both counts in float32 bytes, for
        these lengths and for a batch of one long and 31 short requests.
        """, r"""
        ## 1. 填充的代价

        三条长度为 4、6、3 的序列填充到 6，得到的分数张量是 `[B, H, 6, 6]`：共 $B \cdot H \cdot \max_b l_b^2$ 个分数，其中真正有用的只有 $H \sum_b l_b^2$ 个（每条序列只关注它自己）。其余的都是算了再扔掉。在真实的流量里，一个请求有 2000 个 token、其他的只有 50 个，几乎全部都会是填充。这个单元格以 float32 字节数打印这两个数，一次用上面的长度，一次用一长 31 短的一个批次。
        """),
        demo("""
        H = 8
        for lengths in ([4, 6, 3], [2000] + [50] * 31):
            padded = 4 * len(lengths) * H * max(lengths) ** 2  # float32 scores of [B, H, max_len, max_len]
            packed = 4 * H * sum(n * n for n in lengths)  # each sequence's own [H, l_b, l_b]
            print(f"{len(lengths):>2} sequences, longest {max(lengths):>4}: padded {padded:>11,} bytes, "
                  f"packed {packed:>11,} bytes ({padded / packed:.2f}x)")
        """),
        md(r"""
        ## 2. `cu_seqlens`: where each sequence starts

        A packed batch needs one small piece of metadata: the **cumulative sequence lengths**
        `cu_seqlens = [0, l_0, l_0 + l_1, ..., T]`, `B + 1` integers. Sequence $b$ is rows
        `cu_seqlens[b]:cu_seqlens[b+1]` of the packed tensor. flash-attn's `flash_attn_varlen_func` and
        FlashInfer's ragged tensors take exactly this, as `torch.int32` (their kernels index with 32-bit
        integers): return int32.

        | lengths | `cu_seqlens` |
        |---|---|
        | `[4, 6, 3]` | `[0, 4, 10, 13]` |
        | `[5]` | `[0, 5]` |
        """, r"""
        ## 2. `cu_seqlens`：每条序列从哪里开始

        打包的批次只需要一小份元数据：**累积长度** `cu_seqlens = [0, l_0, l_0 + l_1, ..., T]`，共 `B + 1` 个整数。序列 $b$ 就是打包张量的第 `cu_seqlens[b]:cu_seqlens[b+1]` 行。flash-attn 的 `flash_attn_varlen_func` 和 FlashInfer 的 ragged 张量接受的正是它，dtype 为 `torch.int32`（它们的内核用 32 位整数做索引）：请返回 int32。

        | 长度 | `cu_seqlens` |
        |---|---|
        | `[4, 6, 3]` | `[0, 4, 10, 13]` |
        | `[5]` | `[0, 5]` |
        """),
        solution("cu_seqlens", HINTS),
        check("check_cu_seqlens(cu_seqlens)", "check_cu_seqlens"),
        md(r"""
        ## 3. `pack` and `unpack`

        `pack(x, lengths)` takes a right-padded `x [B, S, ...]` (any trailing shape: tokens, `[H, D]` heads, ...)
        and returns its real tokens `[T, ...]`, sequence after sequence. `unpack(packed, cu, max_len)` is the
        inverse, `[B, max_len, ...]` with zeros at the padding: flash-attn's `bert_padding.unpad_input` and
        `pad_input`, which servers call at the edges of a model written for padded batches.
        """, r"""
        ## 3. `pack` 和 `unpack`

        `pack(x, lengths)` 接收右侧填充的 `x [B, S, ...]`（尾部可以是任意形状：token、`[H, D]` 的多头……），返回它的真实 token `[T, ...]`，一条序列接一条序列。`unpack(packed, cu, max_len)` 是它的逆操作，返回 `[B, max_len, ...]`，填充处为 0：这就是 flash-attn 的 `bert_padding.unpad_input` 和 `pad_input`，推理服务在为填充批次编写的模型两端调用它们。
        """),
        solution("pack", HINTS),
        check("check_pack(pack)", "check_pack"),
        solution("unpack", HINTS),
        check("check_unpack(unpack)", "check_unpack"),
        demo("""
        torch.manual_seed(0)
        lengths = [4, 6, 3]
        x = torch.randn(3, 6, 2, 5)  # [B, S, H, D], right-padded
        with uses_your_code():
            cu = cu_seqlens(lengths)
            packed = pack(x, lengths)
            back = unpack(packed, cu, 6)
            print(f"cu_seqlens {cu.tolist()} ({cu.dtype}); packed {list(packed.shape)}; unpacked {list(back.shape)}")
            real = torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]  # [B, S], True = a real token
            print(f"real tokens equal after the round trip: {torch.equal(back[real], x[real])}; "
                  f"padding is zero: {bool((back[~real] == 0).all())}")
        """),
        md(r"""
        ## 4. Attention over a packed batch

        `varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False)`: `q [T_q, H, D]`,
        `k [T_k, H_kv, D]`, `v [T_k, H_kv, D_v]`, packed. Sequence $b$'s queries are rows
        `cu_seqlens_q[b]:cu_seqlens_q[b+1]`, its keys and values rows `cu_seqlens_k[b]:cu_seqlens_k[b+1]`, and
        **each sequence attends only to its own keys**. Three conventions, flash-attn's:

        - **Grouped heads**: query head $h$ reads key/value head $h \,//\, (H / H_{kv})$ (`generation`'s
          `repeat_kv` order: with 6 query heads and 2 kv heads, query heads 0, 1, 2 read kv head 0).
        - **Causal is bottom-right, per sequence**: with $S_q$ queries and $S_k$ keys in one sequence, query $i$
          sees key $j$ iff $j \le i + S_k - S_q$. The queries are the *last* $S_q$ positions: a chunk of a
          prompt whose earlier part is already in the keys (`S_q < S_k`) is the everyday case on a server.
          `F.scaled_dot_product_attention(..., is_causal=True)` is top-left aligned: wrong whenever `S_q != S_k`.
        - **A query that sees no key returns zeros** (when `S_q > S_k`, the first queries see nothing):
          flash-attn's "If the row of the mask is all zero, the output will be zero". A softmax over a row of
          `-inf` alone gives NaN; replace it.

        Never build one `[T_q, T_k]` score tensor over the whole batch: that is padding again, plus the
        scores between different sequences, which must be masked. Attend sequence by sequence.
        """, r"""
        ## 4. 对打包批次做注意力

        `varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False)`：`q [T_q, H, D]`、`k [T_k, H_kv, D]`、`v [T_k, H_kv, D_v]`，都是打包的。序列 $b$ 的查询是第 `cu_seqlens_q[b]:cu_seqlens_q[b+1]` 行，它的键和值是第 `cu_seqlens_k[b]:cu_seqlens_k[b+1]` 行，**每条序列只关注它自己的键**。三条约定，都和 flash-attn 的一致：

        - **分组的头**：查询头 $h$ 读键/值头 $h \,//\, (H / H_{kv})$（即 `generation` 里 `repeat_kv` 的顺序：6 个查询头、2 个 kv 头时，查询头 0、1、2 读 kv 头 0）。
        - **因果掩码是右下对齐的，按序列分别计算**：一条序列有 $S_q$ 个查询和 $S_k$ 个键时，查询 $i$ 能看到键 $j$ 当且仅当 $j \le i + S_k - S_q$。查询是*最后* $S_q$ 个位置：提示词的一个分块，它前面的部分已经在键里了（`S_q < S_k`），这在推理服务上是家常便饭。`F.scaled_dot_product_attention(..., is_causal=True)` 是左上对齐的：只要 `S_q != S_k` 就错。
        - **看不到任何键的查询返回 0**（`S_q > S_k` 时，最前面的几个查询什么都看不到）：flash-attn 的原话是 "If the row of the mask is all zero, the output will be zero"。对一整行 `-inf` 做 softmax 只会得到 NaN；要把它换掉。

        不要在整个批次上构造一个 `[T_q, T_k]` 的分数张量：那又回到了填充，而且还多出不同序列之间的分数，必须遮掉。请一条序列一条序列地做注意力。
        """),
        recipe("varlen_attention", RECIPES),
        solution("varlen_attention", HINTS),
        check("check_varlen_attention(varlen_attention)", "check_varlen_attention"),
        md(r"""
        The cell compares your `varlen_attention` with padded attention (SDPA with a padding mask, one
        `[B, H, S, S]` batch) on the three sequences above, and shows top-left alignment's error on a chunk.
        """, r"""
        这个单元格把你的 `varlen_attention` 和填充后的注意力（一个 `[B, H, S, S]` 批次上带填充掩码的 SDPA）在上面三条序列上做比较，并展示左上对齐在一个分块上造成的误差。
        """),
        demo("""
        torch.manual_seed(1)
        lengths, H, D = [4, 6, 3], 4, 8
        q, k, v = (torch.randn(3, 6, H, D) for _ in range(3))  # [B, S, H, D], right-padded
        real = torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]  # [B, S]
        mask = real[:, None, None, :] & torch.ones(6, 6, dtype=torch.bool).tril()  # [B, 1, S, S]: causal, real keys
        padded = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_mask=mask).transpose(1, 2)
        with uses_your_code():
            cu = cu_seqlens(lengths)
            out = varlen_attention(pack(q, lengths), pack(k, lengths), pack(v, lengths), cu, cu, causal=True)
            print(f"packed vs padded attention, real tokens: largest difference {(out - pack(padded, lengths)).abs().max().item():.1e}")
            # a chunk: the last 2 queries of a 6-token sequence, its 6 keys
            chunk = varlen_attention(q[1, 4:], k[1], v[1], cu_seqlens([2]), cu_seqlens([6]), causal=True)
            top_left = F.scaled_dot_product_attention(q[1, 4:].transpose(0, 1), k[1].transpose(0, 1),
                                                      v[1].transpose(0, 1), is_causal=True).transpose(0, 1)
            print(f"chunk of 2 queries over 6 keys, yours vs the full pass: {(chunk - out[8:10]).abs().max().item():.1e}")
            print(f"the same chunk with is_causal=True vs the full pass: {(top_left - out[8:10]).abs().max().item():.2f}")
        """),
        graded_cell("varlen"),
        md(r"""
        ## 5. Pitfalls

        - **`cu_seqlens` without its leading 0**, or with `B` entries: sequence 0 then starts at `l_0`.
        - **`is_causal=True` on a chunk**: top-left alignment; the messages name it.
        - **Heads tiled** (`k.repeat(1, n_rep, 1)`) instead of grouped (`repeat_interleave`).
        - **One score matrix over the whole batch**: sequences read each other's keys.
        - **Keys sliced with the query offsets** (`k[cu_q[b]:cu_q[b+1]]`): right only when `S_q == S_k`.
        - **NaN rows** where a query sees no key: the output is zeros there.
        """, r"""
        ## 5. 常见错误

        - **`cu_seqlens` 缺了开头的 0**，或者只有 `B` 个元素：序列 0 就从 `l_0` 开始了。
        - **在分块上用 `is_causal=True`**：左上对齐；评分信息会点出这一点。
        - **头被平铺**（`k.repeat(1, n_rep, 1)`），而不是分组（`repeat_interleave`）。
        - **在整个批次上算一个分数矩阵**：序列之间互相读到对方的键。
        - **用查询的偏移去切键**（`k[cu_q[b]:cu_q[b+1]]`）：只有 `S_q == S_k` 时才对。
        - **看不到任何键的查询得到 NaN 行**：那里的输出应当是 0。
        """),
    ]


DEMO_ZH = {
    "# float32 scores of [B, H, max_len, max_len]": "# [B, H, max_len, max_len] 的 float32 分数",
    "# each sequence's own [H, l_b, l_b]": "# 每条序列自己的 [H, l_b, l_b]",
    'f"{len(lengths):>2} sequences, longest {max(lengths):>4}: padded {padded:>11,} bytes, "':
        'f"{len(lengths):>2} 条序列，最长 {max(lengths):>4}：填充 {padded:>11,} 字节，"',
    'f"packed {packed:>11,} bytes ({padded / packed:.2f}x)"': 'f"打包 {packed:>11,} 字节（{padded / packed:.2f} 倍）"',
    "# [B, S, H, D], right-padded": "# [B, S, H, D]，右侧填充",
    "# [B, S], True = a real token": "# [B, S]，True = 真实 token",
    'f"cu_seqlens {cu.tolist()} ({cu.dtype}); packed {list(packed.shape)}; unpacked {list(back.shape)}"':
        'f"cu_seqlens {cu.tolist()}（{cu.dtype}）；打包后 {list(packed.shape)}；还原后 {list(back.shape)}"',
    'f"real tokens equal after the round trip: {torch.equal(back[real], x[real])}; "':
        'f"往返之后真实 token 不变：{torch.equal(back[real], x[real])}；"',
    'f"padding is zero: {bool((back[~real] == 0).all())}"': 'f"填充处为 0：{bool((back[~real] == 0).all())}"',
    "# [B, 1, S, S]: causal, real keys": "# [B, 1, S, S]：因果，且只看真实的键",
    'f"packed vs padded attention, real tokens: largest difference {':
        'f"打包与填充的注意力相比（真实 token）：最大差值 {',
    "# a chunk: the last 2 queries of a 6-token sequence, its 6 keys": "# 一个分块：6 个 token 的序列的最后 2 个查询，以及它的 6 个键",
    'f"chunk of 2 queries over 6 keys, yours vs the full pass: {': 'f"2 个查询、6 个键的分块，你的结果与整条序列一次计算相比：{',
    'f"the same chunk with is_causal=True vs the full pass: {': 'f"同一个分块用 is_causal=True，与整条序列一次计算相比：{',
}
