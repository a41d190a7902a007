"""Notebook 02 of `serving`: the paged KV cache (block allocator, slot mapping, block tables)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.serving.cells import solution_cell

NAME = "02_paged_cache"

_LATER = ("notebook 04 teaches this (prefix caching, fork): leave it until then; this notebook's checks do not call it.",
          "notebook 04 才讲这一部分（前缀缓存、分叉）：先放着；本 notebook 的检查不会调用它。")

HINTS = {
    "BlockAllocator.__init__": (
        "a queue of free block ids (collections.deque), never-used blocks in order, and a count per block.",
        "一个空闲块编号的队列（collections.deque），从未用过的块按顺序排好，再给每个块一个计数。",
    ),
    "BlockAllocator.allocate": (
        "the head of the free queue, its count set to 1; an empty queue raises RuntimeError.",
        "取空闲队列的队首，计数设为 1；队列为空时抛出 RuntimeError。",
    ),
    "BlockAllocator.incref": (
        "one more owner; a block whose count was 0 sits in the free queue: take it out.",
        "多一个拥有者；计数原本为 0 的块还在空闲队列里：把它取出来。",
    ),
    "BlockAllocator.free": (
        "one owner fewer; at 0 the block joins the tail of the queue; freeing a free block raises.",
        "少一个拥有者；计数到 0 时块排到队尾；释放一个已经空闲的块要报错。",
    ),
    "BlockAllocator.refcount": ("the block's count.", "这个块的计数。"),
    "BlockAllocator.num_free": ("the length of the free queue.", "空闲队列的长度。"),
    "reshape_and_cache": (
        "token i goes to block slot // block_size, row slot % block_size; slots below 0 write nothing.",
        "第 i 个 token 写到第 slot // block_size 块、第 slot % block_size 行；小于 0 的槽位什么都不写。",
    ),
    "PagedKVCache.__init__": (
        "two zero tensors [num_layers, num_blocks, block_size, H_kv, D], an allocator, and per sequence\n"
        "its block table and its length.",
        "两个全零张量 [num_layers, num_blocks, block_size, H_kv, D]、一个分配器，\n"
        "再为每条序列记下它的块表和长度。",
    ),
    "PagedKVCache.add_sequence": (
        "an empty table and length 0 (with prefix caching, notebook 04 adds the hits).",
        "一个空块表，长度为 0（有前缀缓存时，notebook 04 会加上命中的块）。",
    ),
    "PagedKVCache.reserve": (
        "count the blocks the new length needs first and raise before touching anything; then allocate,\n"
        "and compute each new position's slot from the table.",
        "先算出新长度需要多少块，不够就在改动任何东西之前报错；然后分配，\n"
        "再用块表算出每个新位置的槽位。",
    ),
    "PagedKVCache._allocate": (
        "a block from the allocator (notebook 04 adds: a reused block's hash leaves the map).",
        "从分配器取一个块（notebook 04 会加上：重新分出去的块，它的哈希要离开哈希表）。",
    ),
    "PagedKVCache._record": (
        "notebook 04 teaches this (the tokens of each block, for prefix caching): until then `return` at once.",
        "notebook 04 才讲这一部分（为前缀缓存记下每个块的 token）：在那之前直接 `return`。",
    ),
    "PagedKVCache.fork": _LATER,
    "PagedKVCache.free_sequence": (
        "free every block of the table, last to first, and forget the sequence.",
        "从后往前释放块表里的每个块，然后把这条序列删掉。",
    ),
    "PagedKVCache.block_table": ("a copy of the sequence's list of block ids.", "这条序列块编号列表的一个副本。"),
    "PagedKVCache.seq_len": ("how many tokens the sequence holds.", "这条序列有多少个 token。"),
    "PagedKVCache.block_tables_tensor": (
        "one row per sequence, as wide as the longest table, padded (with -1 or any block id), int32.",
        "每条序列一行，宽度取最长的块表，不足的补齐（用 -1 或任意块编号），int32。",
    ),
    "PagedKVCache.seq_lens_tensor": ("the lengths as an int32 tensor.", "把长度做成一个 int32 张量。"),
    "PagedKVCache.gather": (
        "the table's blocks of that layer, joined along the token axis, cut to seq_len.",
        "取出这一层里块表中的那些块，沿 token 维度拼起来，再截到 seq_len。",
    ),
    "PagedKVCache.blocks_used": ("blocks that have an owner.", "有拥有者的块数。"),
}

RECIPES = {
    "reshape_and_cache": (
        """
        `block_size = key_cache.shape[1]`; `slots = torch.as_tensor(slot_mapping).long()`; `real = slots >= 0`;
        then `key_cache[slots[real] // block_size, slots[real] % block_size] = key[real]`, the same for the values.
        Advanced indexing with two index tensors writes row by row, in place.
        """,
        """
        `block_size = key_cache.shape[1]`；`slots = torch.as_tensor(slot_mapping).long()`；`real = slots >= 0`；
        然后 `key_cache[slots[real] // block_size, slots[real] % block_size] = key[real]`，值也一样。
        用两个索引张量做高级索引，就能逐行原地写入。
        """,
    ),
    "PagedKVCache": (
        """
        `reserve(seq_id, n)`: `length = self.seq_len(seq_id)`; the table must hold `ceil((length + n) / block_size)`
        blocks; if the missing ones exceed `allocator.num_free`, raise `RuntimeError` first. Then allocate them,
        and for `p` in `length .. length + n - 1`: `slot = table[p // block_size] * block_size + p % block_size`.
        Store the new length and return the slots as a `LongTensor`.
        """,
        """
        `reserve(seq_id, n)`：`length = self.seq_len(seq_id)`；块表要有 `ceil((length + n) / block_size)` 个块；
        如果缺的块比 `allocator.num_free` 还多，先抛出 `RuntimeError`。然后分配它们，对 `length .. length + n - 1`
        中的每个 `p`：`slot = table[p // block_size] * block_size + p % block_size`。记下新长度，把槽位作为
        `LongTensor` 返回。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "BlockAllocator": """带引用计数的物理 KV 块；空闲块排在一个 LRU 队列里。""",
    "BlockAllocator.__init__": """num_blocks 个块，全部空闲，按编号排队。""",
    "BlockAllocator.allocate": """一个空闲块（队首），引用计数为 1；没有空闲块时抛出 RuntimeError。""",
    "BlockAllocator.incref": """多一个拥有者（已释放的块离开空闲队列：前缀缓存命中）。""",
    "BlockAllocator.free": """少一个拥有者；计数到 0 时块排到空闲队列的队尾；释放空闲块会报错。""",
    "BlockAllocator.refcount": """这个块有几个拥有者。""",
    "BlockAllocator.num_free": """空闲块的个数。""",
    "reshape_and_cache": """把第 i 个 token 的键和值写到槽位 slot_mapping[i]（第 slot // block_size 块，偏移 slot % block_size）；槽位 < 0 不写。""",
    "PagedKVCache": """每层一个 KV 块池，每条序列一张块表；可选前缀缓存和写时复制。""",
    "PagedKVCache.__init__": """k_cache、v_cache [num_layers, num_blocks, block_size, H_kv, D]，一个 BlockAllocator。""",
    "PagedKVCache.add_sequence": """登记一条新序列；返回它的提示词中已经缓存的 token 数。""",
    "PagedKVCache.reserve": """接下来 num_new 个 token 的槽位（按需分配块）；空闲块不够时抛出 RuntimeError，且什么都不改。""",
    "PagedKVCache._allocate": """一个新块；如果它原来是已缓存的前缀块，它那一项就离开哈希表（惰性淘汰）。""",
    "PagedKVCache._record": """记下位置 start..end - 1 的 token；有前缀缓存时，每个刚写满的块登记进哈希表。""",
    "PagedKVCache.fork": """子序列共享父序列的每个块（引用计数 + 1，不复制）。""",
    "PagedKVCache.free_sequence": """从后往前释放这条序列的块。""",
    "PagedKVCache.block_table": """这条序列的物理块，按顺序排列。""",
    "PagedKVCache.seq_len": """这条序列有多少个 token。""",
    "PagedKVCache.block_tables_tensor": """IntTensor [n, max_blocks]（每行不足处补齐）。""",
    "PagedKVCache.seq_lens_tensor": """IntTensor [n]：每条序列的长度。""",
    "PagedKVCache.gather": """这条序列在第 layer 层的 (k, v)，各为 [seq_len, H_kv, D]（供检查用）。""",
    "PagedKVCache.blocks_used": """有拥有者的块数。""",
}


def cells():
    return [
        md(r"""
        # 02 · The paged KV cache

        `generation`'s `KVCache` grew each sequence's keys with `torch.cat`. A server cannot: it does not know
        how long a request will run, and reserving `max_model_len` slots for each (2048, 32k, ...) wastes most of
        the GPU's memory on slots never written. Fragmentation is the rest of the waste: requests come and go, and
        the free memory ends up in holes too small for a new contiguous cache.

        vLLM's answer (PagedAttention, 2023) is the operating system's: cut the cache into **blocks** of
        `block_size` tokens (16 on a GPU; 4 here), keep all of them in **one pool** per layer,
        `[num_blocks, block_size, H_kv, D]`, and give each sequence a **block table**: the list of its
        physical blocks, in order. A sequence then wastes at most one partly filled block, and any free block
        serves any sequence.

        | part | what you write |
        |---|---|
        | `paged_cache` | `BlockAllocator`, `reshape_and_cache`, `PagedKVCache` |
        """, r"""
        # 02 · 分页 KV 缓存

        `generation` 里的 `KVCache` 用 `torch.cat` 让每条序列的键不断变长。推理服务不能这样做：它不知道一个请求会运行多久，而给每个请求预留 `max_model_len` 个槽位（2048、32k……）会把 GPU 的大部分显存浪费在永远不会写入的槽位上。另一部分浪费是碎片：请求来来去去，空闲显存最终变成一个个小洞，放不下一个新的连续缓存。

        vLLM 的答案（PagedAttention，2023）来自操作系统：把缓存切成每块 `block_size` 个 token 的**块**（GPU 上是 16；这里用 4），每层把所有块放在**一个块池**里，`[num_blocks, block_size, H_kv, D]`，再给每条序列一张**块表**（block table）：按顺序列出它的物理块。这样一条序列最多浪费一个没填满的块，任何空闲块都可以给任何序列用。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `paged_cache` | `BlockAllocator`、`reshape_and_cache`、`PagedKVCache` |
        """),
        setup(),
        md(r"""
        ## 1. The block allocator

        `BlockAllocator(num_blocks)` hands out block ids and counts their owners (a block shared by two
        sequences, notebook 04, has two). vLLM's v1 KV-cache manager keeps the free blocks in one queue:

        - `allocate()` takes the **head** of the queue and sets its count to 1; an empty queue raises
          `RuntimeError`;
        - `free(block)` removes one owner; at 0 the block joins the **tail** (freeing a free block raises);
        - `incref(block)` adds an owner; on a block whose count is 0 (still holding its old keys, still in the
          queue) it takes the block back out of the queue: a prefix-cache hit on a freed block, notebook 04;
        - `refcount(block)`, `num_free`.

        Head out, tail in: never-used blocks go first, then the **least recently freed** (LRU). A freed block
        keeps its keys until it is handed out again, so the longer it waits, the better: notebook 04 finds
        freed prefixes there.
        """, r"""
        ## 1. 块分配器

        `BlockAllocator(num_blocks)` 分发块的编号，并记录每个块有几个拥有者（两条序列共享的块，见 notebook 04，有两个）。vLLM v1 的 KV 缓存管理器把空闲块放在一个队列里：

        - `allocate()` 取队列的**队首**，把它的计数设为 1；队列为空时抛出 `RuntimeError`；
        - `free(block)` 去掉一个拥有者；计数到 0 时块排到**队尾**（释放一个已经空闲的块要报错）；
        - `incref(block)` 增加一个拥有者；如果块的计数是 0（它还保留着旧的键，也还在队列里），就把它从队列里取出来：这是对一个已释放块的前缀缓存命中，见 notebook 04；
        - `refcount(block)`、`num_free`。

        队首出、队尾进：从未用过的块先出，然后是**最久之前释放的**（LRU，最近最少使用）。一个释放了的块在再次分出去之前一直保留着它的键，所以它等得越久越好：notebook 04 会在那里找回已释放的前缀。
        """),
        solution_cell("BlockAllocator", HINTS),
        check("check_block_allocator(BlockAllocator)", "check_block_allocator"),
        md(r"""
        ## 2. Writing keys into slots: `reshape_and_cache`

        A **slot** is one row of the pool: `slot = block * block_size + offset`. Each step, the server computes
        one **slot mapping** (one slot per new token) and every layer writes its new keys and values there:
        `reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)`, `key [T, H_kv, D]`,
        `key_cache [num_blocks, block_size, H_kv, D]` (vLLM's flash layout, FlashInfer's `NHD`). Token $i$ goes to
        block `slot // block_size`, offset `slot % block_size`. A slot `< 0` marks a padding token (vLLM pads
        batches for its CUDA graphs): it writes nothing. The function returns `None`: it writes in place.
        """, r"""
        ## 2. 把键写进槽位：`reshape_and_cache`

        **槽位**（slot）是块池里的一行：`slot = block * block_size + offset`。每一步，推理服务算出一份**槽位映射**（slot mapping，每个新 token 一个槽位），每一层都把它的新键和新值写到那里：`reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)`，`key [T, H_kv, D]`，`key_cache [num_blocks, block_size, H_kv, D]`（vLLM 的 flash 布局，FlashInfer 的 `NHD`）。第 $i$ 个 token 写到第 `slot // block_size` 块、偏移 `slot % block_size`。槽位 `< 0` 表示填充 token（vLLM 为了 CUDA graph 会填充批次）：什么都不写。函数返回 `None`：它是原地写入的。
        """),
        recipe("reshape_and_cache", RECIPES),
        solution("reshape_and_cache", HINTS),
        check("check_reshape_and_cache(reshape_and_cache)", "check_reshape_and_cache"),
        md(r"""
        ## 3. `PagedKVCache`: block tables

        `PagedKVCache(num_blocks, block_size, num_kv_heads, head_dim, num_layers=1, ...)` holds `k_cache` and
        `v_cache` `[num_layers, num_blocks, block_size, H_kv, D]`, an `allocator` and, per sequence, its block
        table and its length:

        - `add_sequence(seq_id, token_ids=None)`: a new, empty sequence; returns 0 here (notebook 04 returns the
          prompt tokens already cached);
        - `reserve(seq_id, num_new, token_ids=None) -> LongTensor [num_new]`: the slots of positions
          `len .. len + num_new - 1`, `slot = table[p // block_size] * block_size + p % block_size`, allocating
          blocks as needed. When the free blocks do not suffice it raises `RuntimeError` **without changing
          anything** (a scheduler then waits; a half-done reserve would leak blocks forever);
        - `free_sequence(seq_id)`: every block back to the allocator, last to first (vLLM: the tail of a prefix
          is evicted before its head);
        - `block_table`, `seq_len`, `block_tables_tensor`, `seq_lens_tensor` (int32, the inputs of notebook 03's
          attention), `gather(seq_id, layer)` (for checking), `blocks_used()`.

        The split is vLLM's: the scheduler **reserves** once per step (the KV-cache manager), then every layer
        **writes** with `reshape_and_cache` (the model runner). Methods about prefix caching and `fork` come in
        notebook 04: the stub keeps them; leave them for now.
        """, r"""
        ## 3. `PagedKVCache`：块表

        `PagedKVCache(num_blocks, block_size, num_kv_heads, head_dim, num_layers=1, ...)` 保存 `k_cache` 和 `v_cache` `[num_layers, num_blocks, block_size, H_kv, D]`、一个 `allocator`，以及每条序列的块表和长度：

        - `add_sequence(seq_id, token_ids=None)`：一条新的空序列；这里返回 0（notebook 04 里返回提示词中已经缓存的 token 数）；
        - `reserve(seq_id, num_new, token_ids=None) -> LongTensor [num_new]`：位置 `len .. len + num_new - 1` 的槽位，`slot = table[p // block_size] * block_size + p % block_size`，按需分配块。空闲块不够时抛出 `RuntimeError`，**而且什么都不改**（调度器会等一等；做了一半的 reserve 会让块永远泄漏）；
        - `free_sequence(seq_id)`：把所有块还给分配器，从后往前（vLLM：前缀的尾部比头部先被淘汰）；
        - `block_table`、`seq_len`、`block_tables_tensor`、`seq_lens_tensor`（int32，notebook 03 注意力的输入）、`gather(seq_id, layer)`（供检查用）、`blocks_used()`。

        这种分工来自 vLLM：调度器每一步**预留**一次（KV 缓存管理器），然后每一层用 `reshape_and_cache` **写入**（模型执行器）。前缀缓存和 `fork` 相关的部分在 notebook 04：桩代码里保留着它们，先放着。
        """),
        recipe("PagedKVCache", RECIPES),
        solution("PagedKVCache", HINTS),
        check("check_paged_kv_cache(PagedKVCache)", "check_paged_kv_cache"),
        md(r"""
        Three sequences of 8, 4 and 10 tokens, appended in turns over two layers with blocks of 4: the cell
        prints their tables (not contiguous: the appends interleave), the blocks used and the slots a padded
        cache would hold, sized to the longest and to a 2048-token `max_model_len`.
        """, r"""
        三条长度为 8、4、10 的序列，分两层、块大小为 4，轮流追加：这个单元格打印它们的块表（不连续：追加是交错进行的）、用掉的块数，以及填充缓存要占的槽位数：一次按最长的序列，一次按 2048 个 token 的 `max_model_len`。
        """),
        demo("""
        torch.manual_seed(0)
        lengths, rounds = {"a": 8, "b": 4, "c": 10}, [3, 2, 4, 1]  # tokens per turn, until each sequence is full
        with uses_your_code():
            cache = PagedKVCache(num_blocks=12, block_size=4, num_kv_heads=2, head_dim=8, num_layers=2)
            for name in lengths:
                cache.add_sequence(name)
            for n in rounds:
                for name, total in lengths.items():
                    step = min(n, total - cache.seq_len(name))
                    if step > 0:
                        slots = cache.reserve(name, step)
                        for layer in range(2):
                            k, v = torch.randn(step, 2, 8), torch.randn(step, 2, 8)
                            reshape_and_cache(k, v, cache.k_cache[layer], cache.v_cache[layer], slots)
            for name in lengths:
                print(f"sequence {name}: {cache.seq_len(name):>2} tokens, block table {cache.block_table(name)}")
            used = cache.blocks_used()
            print(f"blocks used: {used} = {used * 4} slots; padded to the longest: {3 * max(lengths.values())} slots; "
                  f"padded to max_model_len 2048: {3 * 2048:,} slots")
        """),
        graded_cell("paged_cache"),
        md(r"""
        ## 4. Pitfalls

        - **Block and offset swapped** (`slot % num_blocks`, `slot // num_blocks`): every write lands, in the
          wrong row.
        - **Slot `-1` written**: Python's `x[-1]` is the last row: the last block's last row is overwritten.
        - **A shared block returned to the pool** while another owner holds it: free only at count 0.
        - **A failed reserve that leaks**: allocate after the check, never before.
        """, r"""
        ## 4. 常见错误

        - **块和偏移弄反了**（`slot % num_blocks`、`slot // num_blocks`）：每次写入都能成功，只是写错了行。
        - **写了槽位 `-1`**：Python 的 `x[-1]` 是最后一行：最后一个块的最后一行被覆盖了。
        - **另一个拥有者还在用时就把共享块还回了块池**：只有计数为 0 时才释放。
        - **失败的 reserve 泄漏了块**：先检查，再分配，绝不反过来。
        """),
    ]


DEMO_ZH = {
    "# tokens per turn, until each sequence is full": "# 每轮追加的 token 数，直到每条序列写满",
    'f"sequence {name}: {cache.seq_len(name):>2} tokens, block table {cache.block_table(name)}"':
        'f"序列 {name}：{cache.seq_len(name):>2} 个 token，块表 {cache.block_table(name)}"',
    'f"blocks used: {used} = {used * 4} slots; padded to the longest: {3 * max(lengths.values())} slots; "':
        'f"用掉的块：{used} 个 = {used * 4} 个槽位；按最长序列填充：{3 * max(lengths.values())} 个槽位；"',
    'f"padded to max_model_len 2048: {3 * 2048:,} slots"': 'f"按 max_model_len 2048 填充：{3 * 2048:,} 个槽位"',
}
