"""Notebook 03 of `serving`: attention that reads its keys through block tables (paged attention, FlashInfer's page table)."""
from course.cells import check, demo, graded_cell, md, recipe, setup
from course.content.serving.cells import solution_cell

NAME = "03_paged_attention"

# the pieces of notebook 01 that this notebook's code calls (stubs in the release: paste your own)
PIECES = ("cu_seqlens",)
_PASTE = ("paste your own from notebook 01.", "把你在 notebook 01 里写好的版本粘贴过来。")

HINTS = {
    "cu_seqlens": _PASTE,
    "paged_attention": (
        "one sequence at a time: gather its first ceil(seq_len / block_size) blocks, keep seq_len keys,\n"
        "and its queries are the last q_len of those positions (bottom-right causal, grouped heads).",
        "一次处理一条序列：取出它前 ceil(seq_len / block_size) 个块，只留 seq_len 个键，\n"
        "它的查询是这些位置中的最后 q_len 个（右下对齐的因果掩码，分组的头）。",
    ),
    "paged_to_csr": (
        "pages per sequence = ceil(seq_len / block_size); indptr is their running total; the last page holds\n"
        "between 1 and block_size tokens.",
        "每条序列的页数 = ceil(seq_len / block_size)；indptr 是它们的累加和；最后一页有\n"
        "1 到 block_size 个 token。",
    ),
}

RECIPES = {
    "paged_attention": (
        """
        1. `cu = cu_seqlens_q.tolist()` (None: `cu_seqlens([1] * B)`, one query per sequence); `bs = k_cache.shape[1]`.
        2. For each `b` with queries: `n = int(seq_lens[b])`; `blocks = block_tables[b][: -(-n // bs)].long()`.
        3. `k = k_cache[blocks].flatten(0, 1)[:n]` `[n, H_kv, D]` (blocks joined, the unused slots of the last one
           cut: they may hold NaN), `v` likewise.
        4. Attend `q[cu[b]:cu[b+1]]` to them as in `varlen_attention` (grouped heads, mask
           `tril(diagonal=n - q_len)`), into `out[cu[b]:cu[b+1]]`.
        """,
        """
        1. `cu = cu_seqlens_q.tolist()`（为 None 时：`cu_seqlens([1] * B)`，每条序列一个查询）；`bs = k_cache.shape[1]`。
        2. 对每个有查询的 `b`：`n = int(seq_lens[b])`；`blocks = block_tables[b][: -(-n // bs)].long()`。
        3. `k = k_cache[blocks].flatten(0, 1)[:n]` `[n, H_kv, D]`（把块拼起来，截掉最后一块里没用的槽位：那里可能是
           NaN），`v` 也一样。
        4. 像 `varlen_attention` 那样让 `q[cu[b]:cu[b+1]]` 关注它们（分组的头，掩码
           `tril(diagonal=n - q_len)`），写进 `out[cu[b]:cu[b+1]]`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "cu_seqlens": """IntTensor [B + 1]（int32）：0, l_0, l_0 + l_1, ...（打包批次里每条序列的起点，最后是 T）。""",
    "paged_attention": """打包的 q [T, H, D] -> [T, H, D_v]：序列 b 的查询是它最后 q_len_b 个位置，键通过它的块表读取。""",
    "paged_to_csr": """(kv_indptr [B + 1], kv_indices, kv_last_page_len [B])，均为 int32：FlashInfer 的页表。""",
}


def cells():
    return [
        md(r"""
        # 03 · Paged attention

        The keys of a sequence now live in blocks scattered over the pool. **Paged attention** reads them
        through the block table: query after query, block after block. One call serves the whole step of a
        server: sequences that decode one token, prompts computed in one go, and chunks in the middle of a
        long prompt, packed together as in notebook 01 (vLLM's unified attention; flash-attn's
        `flash_attn_varlen_func(..., block_table=)`).

        | part | what you write |
        |---|---|
        | `paged_attention` | `paged_attention`, `paged_to_csr` |

        The solution cell of `paged_attention` starts with your `cu_seqlens` of notebook 01 (a stub here: paste
        yours). It is graded in notebook 01; the grader lends its own answers when yours is wrong, so a mistake
        there costs no points here.
        """, r"""
        # 03 · 分页注意力

        现在一条序列的键分散在块池里的各个块中。**分页注意力**（paged attention）通过块表读取它们：一个查询接一个查询，一个块接一个块。一次调用就能完成推理服务的一整步：只解码一个 token 的序列、一次算完的提示词，以及长提示词中间的分块，像 notebook 01 那样打包在一起（vLLM 的 unified attention；flash-attn 的 `flash_attn_varlen_func(..., block_table=)`）。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `paged_attention` | `paged_attention`、`paged_to_csr` |

        `paged_attention` 的 solution 单元格开头是你在 notebook 01 写的 `cu_seqlens`（这里是桩代码：把你的粘贴过来）。它在 notebook 01 里评分；你的版本有错时，评分器会借给你它自己的答案，所以那里的错误不会在这里再扣分。
        """),
        setup(),
        md(r"""
        ## 1. What one call receives

        `paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q=None) -> [T, H, D_v]`:

        | argument | shape | meaning |
        |---|---|---|
        | `q` | `[T, H, D]` | the new tokens' queries, packed |
        | `k_cache`, `v_cache` | `[num_blocks, block_size, H_kv, D]` | one layer's pool (already written this step) |
        | `block_tables` | `[B, max_blocks]` int32 | sequence b's blocks; rows padded with anything |
        | `seq_lens` | `[B]` int32 | every key of sequence b, new tokens included |
        | `cu_seqlens_q` | `[B + 1]` int32 or None | where b's queries are in `q`; None: one per sequence (decoding) |

        Sequence $b$'s `q_len` queries are its **last** `q_len` positions (`q_len <= seq_len`): query $i$ sits at
        position `seq_len - q_len + i` and sees the keys up to it, bottom-right causal as in notebook 01. Read
        only the first `ceil(seq_len / block_size)` entries of the table and only the first `seq_len` slots: the
        rest of the last block, and the blocks that table padding points to, hold anything, NaN included (a
        real pool holds other sequences' keys there). A sequence with no query is skipped.

        Gathering a sequence's blocks into `[seq_len, H_kv, D]` and attending densely is allowed and is vLLM's own
        reference (`ref_paged_attn` in its kernel tests). The GPU kernels never gather: they run the online
        softmax of `efficient` over the blocks, one block per tile.
        """, r"""
        ## 1. 一次调用收到什么

        `paged_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q=None) -> [T, H, D_v]`：

        | 参数 | 形状 | 含义 |
        |---|---|---|
        | `q` | `[T, H, D]` | 新 token 的查询，打包的 |
        | `k_cache`、`v_cache` | `[num_blocks, block_size, H_kv, D]` | 一层的块池（本步已经写入） |
        | `block_tables` | `[B, max_blocks]` int32 | 序列 b 的块；每行不足处随便补什么 |
        | `seq_lens` | `[B]` int32 | 序列 b 的全部键，包括新 token |
        | `cu_seqlens_q` | `[B + 1]` int32 或 None | b 的查询在 `q` 里的位置；None：每条序列一个（解码） |

        序列 $b$ 的 `q_len` 个查询是它**最后** `q_len` 个位置（`q_len <= seq_len`）：第 $i$ 个查询位于位置 `seq_len - q_len + i`，能看到直到它为止的键，和 notebook 01 一样是右下对齐的因果掩码。只读块表的前 `ceil(seq_len / block_size)` 项，只读前 `seq_len` 个槽位：最后一块的其余部分，以及块表填充项指向的块，里面可能是任何东西，包括 NaN（真实的块池里那里是别的序列的键）。没有查询的序列直接跳过。

        把一条序列的块收集成 `[seq_len, H_kv, D]` 再做稠密注意力是允许的，这也正是 vLLM 自己的参考实现（其内核测试里的 `ref_paged_attn`）。GPU 内核从不收集：它们在块上运行 `efficient` 里的在线 softmax，一个块就是一个分数块（tile）。
        """),
        recipe("paged_attention", RECIPES),
        solution_cell("paged_attention", HINTS, (*PIECES, "paged_attention")),
        check("check_paged_attention(paged_attention)", "check_paged_attention"),
        md(r"""
        One mixed call, the shape of a server's step: chunks `[3, 1, 5, 4, 1]` of sequences `[7, 1, 12, 4, 9]` (a
        fresh prefill of 4, decodes, chunks in the middle of prompts), blocks of 4 scattered over a pool of 24.
        Every slot nobody may read holds NaN. The cell compares your output with dense attention on each sequence's keys
        before they were scattered, and counts what the call reads against a padded `[B, max_len]` cache.
        """, r"""
        一次混合调用，也就是推理服务一步的样子：序列 `[7, 1, 12, 4, 9]` 的分块 `[3, 1, 5, 4, 1]`（一个长度为 4 的全新预填充、若干解码、提示词中间的分块），块大小为 4，分散在 24 个块的块池里。所有不该读的槽位里都是 NaN。这个单元格把你的输出和在每条序列分散写入之前的键上做的稠密注意力做比较，并把这次调用读取的量与填充的 `[B, max_len]` 缓存做对比。
        """),
        demo("""
        torch.manual_seed(0)
        q_lens, seq_lens, bs, H, H_kv, D = [3, 1, 5, 4, 1], [7, 1, 12, 4, 9], 4, 4, 1, 8
        pages = [-(-n // bs) for n in seq_lens]
        order = torch.randperm(24).tolist()  # scattered physical blocks
        tables = [order[sum(pages[:b]) : sum(pages[: b + 1])] for b in range(5)]
        k_cache, v_cache = torch.full((24, bs, H_kv, D), float("nan")), torch.full((24, bs, H_kv, D), float("nan"))
        keys = [torch.randn(n, H_kv, D) for n in seq_lens]  # each sequence's keys and values, as a dense tensor
        values = [torch.randn(n, H_kv, D) for n in seq_lens]
        for b, n in enumerate(seq_lens):  # scattered into the pool, token p at block tables[b][p // bs], row p % bs
            for p in range(n):
                k_cache[tables[b][p // bs], p % bs], v_cache[tables[b][p // bs], p % bs] = keys[b][p], values[b][p]
        block_tables = torch.tensor([t + [0] * (max(pages) - len(t)) for t in tables], dtype=torch.int32)
        q = torch.randn(sum(q_lens), H, D)
        expected = []
        for b, (m, n) in enumerate(zip(q_lens, seq_lens)):  # dense attention on the dense tensors, in float64
            k = keys[b].double().repeat_interleave(H // H_kv, 1)
            v = values[b].double().repeat_interleave(H // H_kv, 1)
            qb = q[sum(q_lens[:b]) : sum(q_lens[: b + 1])].double()
            mask = torch.ones(m, n, dtype=torch.bool).tril(n - m)
            expected.append(F.scaled_dot_product_attention(qb.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                           attn_mask=mask).transpose(0, 1))
        with uses_your_code():
            out = paged_attention(q, k_cache, v_cache, block_tables, torch.tensor(seq_lens, dtype=torch.int32),
                                  cu_seqlens(q_lens))
            print(f"one mixed call vs dense attention per sequence: largest difference "
                  f"{(out.double() - torch.cat(expected)).abs().max().item():.1e}")
        print(f"key slots read: {sum(seq_lens)} in {sum(pages)} blocks; a padded [B, max_len] cache: "
              f"{len(seq_lens) * max(seq_lens)} slots")
        """),
        md(r"""
        ## 2. FlashInfer's page table: `paged_to_csr`

        FlashInfer does not take a padded `[B, max_blocks]` table: it takes the pages of all sequences in one flat
        array, as a sparse matrix in CSR form. `paged_to_csr(block_tables, seq_lens, block_size)` returns, all
        int32:

        - `kv_indptr [B + 1]`: where each sequence's pages start in `kv_indices` (the pages' `cu_seqlens`);
        - `kv_indices`: every sequence's `ceil(seq_len / block_size)` pages, one after another;
        - `kv_last_page_len [B]`: how many tokens the last page holds, with
          `seq_len = block_size * (pages - 1) + last_page_len` and `1 <= last_page_len <= block_size`. A full last
          page holds `block_size`, not `seq_len % block_size` (which is 0).
        """, r"""
        ## 2. FlashInfer 的页表：`paged_to_csr`

        FlashInfer 不接收填充的 `[B, max_blocks]` 块表：它把所有序列的页放进一个扁平数组，即 CSR 形式的稀疏矩阵。`paged_to_csr(block_tables, seq_lens, block_size)` 返回（全部为 int32）：

        - `kv_indptr [B + 1]`：每条序列的页在 `kv_indices` 里从哪里开始（页的 `cu_seqlens`）；
        - `kv_indices`：每条序列的 `ceil(seq_len / block_size)` 个页，一条接一条；
        - `kv_last_page_len [B]`：最后一页有多少个 token，满足 `seq_len = block_size * (pages - 1) + last_page_len`，且 `1 <= last_page_len <= block_size`。最后一页是满的时候，它是 `block_size`，而不是 `seq_len % block_size`（那是 0）。
        """),
        solution_cell("paged_to_csr", HINTS),
        check("check_paged_to_csr(paged_to_csr)", "check_paged_to_csr"),
        demo("""
        with uses_your_code():
            tables = torch.tensor([[5, 2, 9], [7, 0, 0], [1, 3, 0]], dtype=torch.int32)
            indptr, indices, last = paged_to_csr(tables, torch.tensor([10, 4, 5], dtype=torch.int32), 4)
            print(f"seq_lens [10, 4, 5], blocks of 4: kv_indptr {indptr.tolist()}, kv_indices {indices.tolist()}, "
                  f"kv_last_page_len {last.tolist()}")
        """),
        graded_cell("paged_attention"),
        md(r"""
        ## 3. Pitfalls

        - **Top-left alignment**: queries placed at positions `0 .. q_len - 1` instead of the last `q_len`.
        - **Heads tiled** instead of grouped.
        - **A whole last block, or table padding, read**: the NaN in the unused slots shows in every output.
        - **Blocks assumed contiguous** (`k_cache.flatten(0, 1)[table[0] * bs :]`): right only until the first
          free block is reused.
        - **`last_page_len = seq_len % block_size`**: 0 for a full page.
        """, r"""
        ## 3. 常见错误

        - **左上对齐**：把查询放在位置 `0 .. q_len - 1`，而不是最后 `q_len` 个位置。
        - **头被平铺**，而不是分组。
        - **读了整个最后一块，或块表的填充项**：没用的槽位里的 NaN 会出现在每个输出里。
        - **以为序列的块是连续的**（`k_cache.flatten(0, 1)[table[0] * bs :]`）：只在第一个空闲块被重用之前是对的。
        - **`last_page_len = seq_len % block_size`**：页满时得到 0。
        """),
    ]


DEMO_ZH = {
    "# scattered physical blocks": "# 分散的物理块",
    "# each sequence's keys and values, as a dense tensor": "# 每条序列的键和值，先放在一个稠密张量里",
    "# scattered into the pool, token p at block tables[b][p // bs], row p % bs": "# 再分散写进块池：token p 写到第 tables[b][p // bs] 块、第 p % bs 行",
    "# dense attention on the dense tensors, in float64": "# 在稠密张量上做稠密注意力，float64",
    'f"one mixed call vs dense attention per sequence: largest difference "': 'f"一次混合调用与逐序列的稠密注意力相比：最大差值 "',
    'f"key slots read: {sum(seq_lens)} in {sum(pages)} blocks; a padded [B, max_len] cache: "':
        'f"读取的键槽位：{sum(seq_lens)} 个，分布在 {sum(pages)} 个块里；填充的 [B, max_len] 缓存："',
    'f"{len(seq_lens) * max(seq_lens)} slots"': 'f"{len(seq_lens) * max(seq_lens)} 个槽位"',
    'f"seq_lens [10, 4, 5], blocks of 4: kv_indptr {indptr.tolist()}, kv_indices {indices.tolist()}, "':
        'f"seq_lens [10, 4, 5]，块大小 4：kv_indptr {indptr.tolist()}，kv_indices {indices.tolist()}，"',
}
