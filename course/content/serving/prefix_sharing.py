"""Notebook 04 of `serving`: shared prompt prefixes (chained block hashes, reference counts, copy-on-write, LRU eviction)."""
from course.cells import check, demo, graded_cell, md, recipe, setup
from course.content.serving import paged_cache
from course.content.serving.cells import solution_cell
from course.content.written import written_cells

NAME = "04_prefix_sharing"

# notebook 02's classes, completed here (stubs in the release: paste yours, then add prefix caching and fork)
PIECES = ("BlockAllocator", "PagedKVCache")
_PASTE = ("paste your own from notebook 02, then complete it here.", "把你在 notebook 02 里写好的版本粘贴过来，再在这里补全。")

HINTS = {
    **{name: _PASTE for name in paged_cache.HINTS if name.split(".")[0] in PIECES},
    "PagedKVCache.add_sequence": (
        "with prefix caching: walk the prompt's block hashes (never the last token's block), take the\n"
        "longest run found in the map, incref each, and return how many tokens that is.",
        "有前缀缓存时：沿着提示词的块哈希往下找（最后一个 token 所在的块不算），取在表里\n"
        "找到的最长一段，对每个块 incref，返回这相当于多少个 token。",
    ),
    "PagedKVCache.reserve": (
        "as in notebook 02, plus: a partly filled last block with refcount > 1 is copied first (all layers),\n"
        "and every block that becomes full enters the map under its hash.",
        "和 notebook 02 一样，再加上：引用计数 > 1 的未满最后一块要先复制（所有层），\n"
        "每个刚写满的块以它的哈希登记进表。",
    ),
    "PagedKVCache._allocate": (
        "a reused block leaves the map (its hash now names other content): lazy eviction.",
        "重新分出去的块要离开哈希表（它的哈希现在对应的是别的内容了）：这就是惰性淘汰。",
    ),
    "PagedKVCache._record": (
        "extend the sequence's recorded tokens; hash them, and let each block that became full enter the map\n"
        "(unless its hash is there already). A reserve without token_ids stops the recording.",
        "把新 token 接到这条序列已记录的 token 后面；算出哈希，让每个刚写满的块登记进哈希表\n"
        "（哈希已经在表里就不登记）。没有 token_ids 的 reserve 会让记录中断。",
    ),
    "PagedKVCache.fork": (
        "the child's table is a copy of the parent's list; every block gets one more owner; nothing is copied.",
        "子序列的块表是父序列列表的副本；每个块多一个拥有者；不复制任何数据。",
    ),
    "block_hashes": (
        "one hash per full block, each made from the previous hash and the block's tokens as a tuple.",
        "每个满块一个哈希，由前一个哈希和这个块的 token（转成 tuple）一起算出。",
    ),
}

RECIPES = {
    "block_hashes": (
        """
        `tokens = [int(t) for t in token_ids]`; `parent = None`; for each `start` in `range(0, len(tokens) -
        block_size + 1, block_size)`: `parent = hash((parent, tuple(tokens[start : start + block_size])))`,
        appended to the list. The partial last block is never reached.
        """,
        """
        `tokens = [int(t) for t in token_ids]`；`parent = None`；对 `range(0, len(tokens) - block_size + 1,
        block_size)` 中的每个 `start`：`parent = hash((parent, tuple(tokens[start : start + block_size])))`，
        追加到列表里。未满的最后一块根本不会被走到。
        """,
    ),
}

DOCSTRINGS_ZH = {
    **{name: text for name, text in paged_cache.DOCSTRINGS_ZH.items() if name.split(".")[0] in PIECES},
    "block_hashes": """每个满块一个链式哈希：h_i = hash((h_{i-1}, tuple(block_i)))。""",
}


def cells():
    return [
        md(r"""
        # 04 · Shared prefixes

        Most requests to a hosted model start with the same tokens: a system prompt, a few-shot preamble, the
        earlier turns of a chat. Their keys and values are the same for every request (a causal model's key at
        position $p$ depends on tokens $0 \dots p$ only), so a server computes them once and lets requests
        **share the blocks**. This notebook adds vLLM's prefix caching to your `PagedKVCache`: chained block
        hashes, reference counts, lazy eviction, and copy-on-write for sequences that fork.

        | part | what you write |
        |---|---|
        | `prefix_sharing` | `block_hashes`, and in `PagedKVCache`: `enable_prefix_caching`, `add_sequence`'s hits, `fork`, copy-on-write |

        The classes come from notebook 02: paste your `BlockAllocator` and `PagedKVCache` into their solution
        cell, and complete them here. `paged_cache` and `prefix_sharing` grade one class: paste the completed
        version back into notebook 02 too. A paging mistake (slots, tables, allocator) can fail checks of both.
        """, r"""
        # 04 · 共享前缀

        发给在线模型的请求，大多以相同的 token 开头：系统提示词、few-shot 示例、聊天里之前的几轮。它们的键和值对每个请求都一样（因果模型在位置 $p$ 的键只依赖 token $0 \dots p$），所以推理服务只算一次，让请求**共享这些块**。本 notebook 给你的 `PagedKVCache` 加上 vLLM 的前缀缓存：链式哈希、引用计数、惰性淘汰，以及分叉序列的写时复制。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `prefix_sharing` | `block_hashes`，以及 `PagedKVCache` 里的 `enable_prefix_caching`、`add_sequence` 的命中、`fork`、写时复制 |

        这两个类来自 notebook 02：把你的 `BlockAllocator` 和 `PagedKVCache` 粘贴到它们的 solution 单元格里，在这里补全。`paged_cache` 和 `prefix_sharing` 评的是同一个类：把补全后的版本也粘贴回 notebook 02。分页上的错误（槽位、块表、分配器）可能让两部分的检查都失败。
        """),
        setup(),
        md(r"""
        ## 1. Chained hashes of full blocks

        The cache finds a prefix by the hash of its blocks. Block $i$'s hash covers its own tokens **and** every
        token before it, through the previous hash:

        $$h_i = \text{hash}\big((h_{i-1}, \text{tuple}(\text{block}_i))\big), \qquad h_{-1} = \text{None}.$$

        Chaining matters: the same four tokens after a different prefix have different keys (RoPE and the
        layers below mixed the earlier tokens in), so they must hash differently. Only **full** blocks get a
        hash: a partly filled block will receive more tokens (the sequence goes on), and another request with the
        same first tokens may continue it differently; vLLM: "We only cache full blocks".

        Python's `hash` of a tuple of ints is fine here. vLLM starts the chain from a random `NONE_HASH` (so that
        nobody can craft a colliding prompt; reproducible with `PYTHONHASHSEED`) and adds a per-request
        `cache_salt` to isolate tenants: hash values are never graded, only equalities.
        """, r"""
        ## 1. 满块的链式哈希

        缓存通过块的哈希找到前缀。第 $i$ 块的哈希既包含它自己的 token，**也**通过前一个哈希包含它之前的所有 token：

        $$h_i = \text{hash}\big((h_{i-1}, \text{tuple}(\text{block}_i))\big), \qquad h_{-1} = \text{None}.$$

        链式很重要：同样的四个 token 跟在不同的前缀后面，它们的键是不同的（RoPE 和下面各层把前面的 token 混了进来），所以哈希也必须不同。只有**满块**才有哈希：未满的块还会收到更多 token（序列还在继续），而另一个前几个 token 相同的请求可能用不同的方式把它续下去；vLLM 的原话是 "We only cache full blocks"。

        这里用 Python 对整数 tuple 的 `hash` 就可以。vLLM 从一个随机的 `NONE_HASH` 开始这条链（这样谁也造不出一个故意碰撞的提示词；用 `PYTHONHASHSEED` 可以复现），并给每个请求加上 `cache_salt` 来隔离不同租户：哈希的具体值从不评分，只评相等关系。
        """),
        md(r"""
        ## 2. Prefix caching in `PagedKVCache`

        With `enable_prefix_caching=True` the cache keeps a map **hash -> block**:

        - `reserve(seq_id, n, token_ids=new_tokens)` records the tokens; every block that becomes full enters the
          map (if its hash is not there yet: this cache keeps the first block of a hash; vLLM v1 keeps
          duplicates under one hash);
        - `add_sequence(seq_id, prompt)` walks the prompt's hashes, takes the longest run found in the map,
          `incref`s each block (reviving freed ones) and returns the number of cached tokens: a multiple of
          `block_size` and **at most `len(prompt) - 1`**. The last prompt token is always computed, even when the
          whole prompt is cached: its logits give the first output token, and logits are not cached (vLLM:
          `max_cache_hit_length = request.num_tokens - 1`). An 8-token prompt in blocks of 4, fully cached, hits 4;
        - a block leaves the map only when `allocate` hands it out again for other content (**lazy eviction**): a
          freed cached block stays findable until it is reused, and the LRU free queue of notebook 02 reuses the
          freshest prefixes last.
        """, r"""
        ## 2. `PagedKVCache` 里的前缀缓存

        `enable_prefix_caching=True` 时，缓存维护一张 **哈希 -> 块** 的表：

        - `reserve(seq_id, n, token_ids=new_tokens)` 记下这些 token；每个刚写满的块登记进表（如果它的哈希还不在表里：这个缓存只保留某个哈希的第一个块；vLLM v1 会在同一个哈希下保留重复的块）；
        - `add_sequence(seq_id, prompt)` 沿着提示词的哈希往下找，取在表里找到的最长一段，对每个块 `incref`（让已释放的块复活），返回已缓存的 token 数：它是 `block_size` 的整数倍，并且**至多为 `len(prompt) - 1`**。最后一个提示词 token 总是要计算的，哪怕整个提示词都已缓存：它的 logits 给出第一个输出 token，而 logits 是不缓存的（vLLM：`max_cache_hit_length = request.num_tokens - 1`）。一个 8 个 token 的提示词，块大小为 4，全部已缓存时命中 4 个；
        - 只有当 `allocate` 把一个块重新分出去装别的内容时，它才离开这张表（**惰性淘汰**）：一个已释放的缓存块在被重用之前一直能被找到，而 notebook 02 的 LRU 空闲队列最后才重用最新的前缀。
        """),
        *written_cells("written_last_token_recomputed"),
        md(r"""
        ## 3. Fork and copy-on-write

        `fork(parent_id, child_id)` starts a sequence that shares **every** block of its parent (parallel
        sampling: n answers to one prompt; beam search): refcounts + 1, no copy. When one of them appends to a
        partly filled last block that has refcount > 1, `reserve` first **copies** that block (all layers) into a
        fresh one and drops its reference to the old one: **copy-on-write**. A sole owner writes in place; full
        shared blocks are never copied (appends go to new blocks). This is vLLM v0's block manager
        (`cow_block_if_not_appendable`); vLLM v1 shares full blocks only and has no copy-on-write.

        The first solution cell below is `block_hashes`; the second holds notebook 02's classes: paste yours over
        the stubs and add the three pieces (the map and the hits, copy-on-write in `reserve`, `fork`).
        """, r"""
        ## 3. 分叉与写时复制

        `fork(parent_id, child_id)` 新建一条序列，它共享父序列的**每一个**块（并行采样：同一个提示词要 n 个回答；束搜索）：引用计数 + 1，不复制。当其中一条要往引用计数 > 1 的未满最后一块里追加时，`reserve` 先把这个块（所有层）**复制**到一个新块里，并放弃对旧块的引用：这就是**写时复制**。唯一的拥有者就地写入；满的共享块从不复制（追加会写到新块里）。这是 vLLM v0 的块管理器（`cow_block_if_not_appendable`）；vLLM v1 只共享满块，没有写时复制。

        下面第一个 solution 单元格是 `block_hashes`；第二个是 notebook 02 的两个类：把你的版本粘贴到桩代码上，再加上这三部分（哈希表和命中、`reserve` 里的写时复制、`fork`）。
        """),
        recipe("block_hashes", RECIPES),
        solution_cell("block_hashes", HINTS),
        check("check_block_hashes(block_hashes)", "check_block_hashes"),
        solution_cell("PagedKVCache", HINTS, PIECES),
        check("check_prefix_caching(PagedKVCache)", "check_prefix_caching"),
        md(r"""
        Prompt A has 11 tokens, prompt B 12, the first 9 shared; blocks of 4. The first cell prints B's hit, the
        blocks both hold with and without sharing, and what a fork costs. The second runs five requests that
        share a 12-token system prompt (each with 3 tokens of its own) and counts the prompt tokens the model must
        compute, one request after another. (Notebook 05 counts the same for the hidden check's six requests, with 1
        to 4 tokens of their own, one after another and through its scheduler.)
        """, r"""
        提示词 A 有 11 个 token，提示词 B 有 12 个，前 9 个相同；块大小为 4。第一个单元格打印 B 的命中数、共享与不共享时两者占用的块，以及一次分叉的代价。第二个单元格运行五个共享 12 个 token 系统提示词的请求（每个请求自己另有 3 个 token），一个接一个地统计模型必须计算的提示词 token 数。（notebook 05 对隐藏检查的六个请求——每个自己另有 1 到 4 个 token——做同样的统计：一个接一个，以及经过它的调度器。）
        """),
        demo("""
        A = list(range(100, 111))  # 11 tokens
        B = A[:9] + [7, 8, 9]  # 12 tokens, the first 9 shared
        with uses_your_code():
            for sharing in (False, True):
                cache = PagedKVCache(16, 4, 1, 4, enable_prefix_caching=sharing)
                cache.add_sequence("A", A)
                cache.reserve("A", len(A), token_ids=A)
                hit = cache.add_sequence("B", B)
                cache.reserve("B", len(B) - hit, token_ids=B[hit:])
                print(f"prefix caching {str(sharing):<5}: B hits {hit} tokens; blocks used for A + B: {cache.blocks_used()}")
            used = cache.blocks_used()
            cache.fork("A", "A2")
            print(f"fork of A: blocks used {used} -> {cache.blocks_used()}, refcount of A's first block "
                  f"{cache.allocator.refcount(cache.block_table('A')[0])}")
            cache.reserve("A2", 1, token_ids=[1])
            print(f"A2 appends one token: its last block {cache.block_table('A2')[-1]} (A's is {cache.block_table('A')[-1]}): copied")
        """),
        demo("""
        system = list(range(1, 13))  # a 12-token system prompt: 3 full blocks of 4
        prompts = [system + [50 + i] * 3 for i in range(5)]  # five requests, 3 tokens of their own each
        with uses_your_code():
            cache = PagedKVCache(32, 4, 1, 4, enable_prefix_caching=True)
            computed = 0
            for i, prompt in enumerate(prompts):
                cached = cache.add_sequence(i, prompt)
                cache.reserve(i, len(prompt) - cached, token_ids=prompt[cached:])
                computed += len(prompt) - cached
            total = sum(len(p) for p in prompts)
            print(f"{computed} of {total} prompt tokens computed with a shared system prompt ({total - computed} from the cache)")
        """),
        graded_cell("prefix_sharing"),
        md(r"""
        ## 4. Pitfalls

        - **Unchained hashes** (`hash(tuple(block))`): the same tokens after another prefix hit wrongly.
        - **The partial block hashed**: a later request reads keys that another sequence goes on writing.
        - **The whole prompt reported cached**: no logits for the first output token.
        - **No copy-on-write**: the child writes into the parent's block. **Fork without incref**: the parent's
          free returns blocks the child still reads. **Full blocks copied**: memory for nothing.
        - **A stale hash after reuse**: a block handed out again must leave the map.
        - **A LIFO free list**: evicts the freshest prefix first.
        """, r"""
        ## 4. 常见错误

        - **哈希没有链起来**（`hash(tuple(block))`）：同样的 token 跟在别的前缀后面也会错误地命中。
        - **给未满的块算了哈希**：后来的请求会读到另一条序列还在继续写的键。
        - **报告整个提示词都已缓存**：第一个输出 token 就没有 logits 了。
        - **没有写时复制**：子序列写进了父序列的块。**分叉时没有 incref**：父序列释放时会把子序列还在读的块还回去。**复制了满块**：白白占用显存。
        - **块重用之后哈希还留着**：重新分出去的块必须离开这张表。
        - **后进先出（LIFO）的空闲列表**：最先淘汰最新的前缀。
        """),
    ]


DEMO_ZH = {
    "# 11 tokens": "# 11 个 token",
    "# 12 tokens, the first 9 shared": "# 12 个 token，前 9 个相同",
    'f"prefix caching {str(sharing):<5}: B hits {hit} tokens; blocks used for A + B: {cache.blocks_used()}"':
        'f"前缀缓存 {str(sharing):<5}：B 命中 {hit} 个 token；A + B 用掉的块：{cache.blocks_used()}"',
    'f"fork of A: blocks used {used} -> {cache.blocks_used()}, refcount of A\'s first block "':
        'f"分叉 A：用掉的块 {used} -> {cache.blocks_used()}，A 第一个块的引用计数 "',
    """f"A2 appends one token: its last block {cache.block_table('A2')[-1]} (A's is {cache.block_table('A')[-1]}): copied\"""":
        """f"A2 追加一个 token：它的最后一块是 {cache.block_table('A2')[-1]}（A 的是 {cache.block_table('A')[-1]}）：已复制\"""",
    "# a 12-token system prompt: 3 full blocks of 4": "# 12 个 token 的系统提示词：3 个大小为 4 的满块",
    "# five requests, 3 tokens of their own each": "# 五个请求，各自另有 3 个 token",
    'f"{computed} of {total} prompt tokens computed with a shared system prompt ({total - computed} from the cache)"':
        'f"共享系统提示词时，{total} 个提示词 token 中计算了 {computed} 个（{total - computed} 个来自缓存）"',
}
