"""Notebook 05 of `serving`: a decoder layer on the paged cache, and a scheduler that batches at every step."""
from course.cells import check, demo, graded_cell, md, recipe, setup
from course.content.generation import decoder
from course.content.serving import paged_attention, paged_cache, prefix_sharing, varlen
from course.content.serving.cells import solution_cell
from course.content.written import written_cells

NAME = "05_continuous_batching"

# the pieces of earlier notebooks that this notebook's code calls (stubs in the release: paste your own)
PIECES = ("apply_rope", "cu_seqlens", "reshape_and_cache", "paged_attention", "block_hashes", "BlockAllocator",
          "PagedKVCache")
_PASTE = ("paste your own from the earlier notebooks (apply_rope: `generation`'s).",
          "把你在前面 notebook 里写好的版本粘贴过来（apply_rope 用 `generation` 里的）。")
_PIECE_HINTS = {**varlen.HINTS, **paged_cache.HINTS, **paged_attention.HINTS, **prefix_sharing.HINTS}

HINTS = {
    **{name: _PASTE for name in ("apply_rope", *_PIECE_HINTS) if name.split(".")[0] in PIECES},
    "PagedDecoderAttention.__init__": (
        "DecoderAttention's four bias-free layers, under the same names; keep layer_idx.",
        "和 DecoderAttention 一样的四个无偏置线性层，名字也相同；记下 layer_idx。",
    ),
    "PagedDecoderAttention.forward": (
        "project to [T, H, D] and [T, H_kv, D]; rotate at `positions` (apply_rope on [H, T, D]); write the\n"
        "rotated keys and the values of your layer; then paged_attention with meta's tensors; W_o.",
        "投影成 [T, H, D] 和 [T, H_kv, D]；在 `positions` 处旋转（对 [H, T, D] 调用 apply_rope）；把旋转后的键\n"
        "和值写进你这一层；再用 meta 里的张量调用 paged_attention；最后 W_o。",
    ),
    "StepMeta.__init__": (
        "keep the four tensors under these names (the layers read them as meta.cu_seqlens_q, ...).",
        "用这四个名字保存这四个张量（各层按 meta.cu_seqlens_q 等名字读取）。",
    ),
    "continuous_batching_generate": (
        "one loop iteration is one model step: decodes first, then prefill chunks, then admissions, under the\n"
        "token budget; sample where a request's last known token was computed; free finished requests at once.",
        "循环的一次迭代就是模型的一步：先解码，再预填充分块，再接纳新请求，都在 token 预算之内；\n"
        "请求最后一个已知 token 在本步算出时就采样；结束的请求立刻释放。",
    ),
    "static_batching_generate": (
        "batches of batch_size in arrival order: one step with the whole prompts, then one token per row\n"
        "until the batch's longest request is done; free the batch, then the next.",
        "按到达顺序每 batch_size 个组成一批：一步算完整个提示词，然后每行每步一个 token，\n"
        "直到这一批里最长的请求完成；释放这一批，再处理下一批。",
    ),
}

RECIPES = {
    "PagedDecoderAttention": (
        """
        1. `q = self.W_q(x).view(T, H, D)`, `k`, `v` likewise with `H_kv` heads.
        2. `q = apply_rope(q.transpose(0, 1), positions, self.rope_base).transpose(0, 1)`, the same for `k`.
        3. `key_cache, value_cache = cache.k_cache[self.layer_idx], cache.v_cache[self.layer_idx]`;
           `reshape_and_cache(k, v, key_cache, value_cache, meta.slot_mapping)`.
        4. `out = paged_attention(q, key_cache, value_cache, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q)`;
           return `self.W_o(out.reshape(T, d_model))`.
        """,
        """
        1. `q = self.W_q(x).view(T, H, D)`，`k`、`v` 同理，头数为 `H_kv`。
        2. `q = apply_rope(q.transpose(0, 1), positions, self.rope_base).transpose(0, 1)`，`k` 也一样。
        3. `key_cache, value_cache = cache.k_cache[self.layer_idx], cache.v_cache[self.layer_idx]`；
           `reshape_and_cache(k, v, key_cache, value_cache, meta.slot_mapping)`。
        4. `out = paged_attention(q, key_cache, value_cache, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q)`；
           返回 `self.W_o(out.reshape(T, d_model))`。
        """,
    ),
    "continuous_batching_generate": (
        """
        Keep per request its known tokens (prompt, then outputs), `done` (tokens computed) and `outputs`; `waiting`
        and `running` lists. Each step: build `chunks = [(r, n), ...]` by rules 1-3 (decodes, prompts, admissions,
        with `budget` counting down); reserve each chunk's slots with the tokens `tokens[r][done[r]:done[r] + n]`;
        `positions` are `arange(done[r], done[r] + n)` per chunk; one `model(...)` call with a `StepMeta`; then for
        chunk `i`, `done[r] += n`, and when `done[r] == len(tokens[r])` append the argmax of row `cu[i + 1] - 1`;
        free and remove a request with all its outputs. Count the stats as you go.
        """,
        """
        为每个请求记下它已知的 token（提示词，然后是输出）、`done`（已计算的 token 数）和 `outputs`；再用两个列表
        `waiting` 和 `running`。每一步：按规则 1-3 构造 `chunks = [(r, n), ...]`（解码、提示词、接纳，`budget` 随之递减）；
        用 `tokens[r][done[r]:done[r] + n]` 为每个分块预留槽位；每个分块的 `positions` 是 `arange(done[r], done[r] + n)`；
        带一个 `StepMeta` 调用一次 `model(...)`；然后对第 `i` 个分块 `done[r] += n`，当 `done[r] == len(tokens[r])` 时
        追加第 `cu[i + 1] - 1` 行的 argmax；输出已满的请求释放并移出。统计量边算边记。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "apply_rope": decoder.DOCSTRINGS_ZH["apply_rope"],
    **{name: text for module in (varlen, paged_cache, paged_attention, prefix_sharing)
       for name, text in module.DOCSTRINGS_ZH.items() if name.split(".")[0] in PIECES},
    "PagedDecoderAttention": """打包的 token 和分页 KV 缓存上的 DecoderAttention。""",
    "PagedDecoderAttention.forward": """x [T, d_model]（打包的新 token）-> [T, d_model]；在 positions 处旋转，写入第 layer_idx 层，再做分页注意力。""",
    "StepMeta": """模型一步里各分页层除输入之外要读的东西（由调度器构造）。""",
    "StepMeta.__init__": """cu_seqlens_q [n + 1] int32，slot_mapping [T] int64，block_tables [n, max_blocks] 和 seq_lens [n]（本步之后）。""",
    "continuous_batching_generate": """迭代级调度下对每个请求做贪心生成；返回 (outputs, stats)。""",
    "static_batching_generate": """基线：按到达顺序分批，每批一步预填充，然后解码到这批里最长的请求结束。""",
}


def cells():
    return [
        md(r"""
        # 05 · Continuous batching

        A server's loop is one **model step** after another. Static batching takes a batch of requests,
        prefills them, and decodes until the longest is done: short requests sit finished while the batch runs
        on, and new requests wait for the whole batch. **Continuous batching** (Orca's iteration-level
        scheduling, 2022; vLLM's scheduler) decides again at *every step* which requests advance by how many
        tokens: finished requests leave at once, waiting ones join at once, and a long prompt is computed in
        **chunks** alongside other requests' decodes. vLLM's scheduler: "There's no decoding phase nor prefill
        phase": each request has a number of computed tokens that catches up with its tokens, under a
        **token budget** per step.

        | part | what you write |
        |---|---|
        | `continuous_batching` | `PagedDecoderAttention`, `continuous_batching_generate`, `static_batching_generate` |

        The layer's solution cell starts with the pieces of earlier notebooks this one runs on (stubs here:
        paste yours; `apply_rope` is `generation`'s). They are graded in their own notebooks; when one of yours is
        wrong, the grader lends its answers (never its code) and says so, so that a mistake costs once.
        """, r"""
        # 05 · 连续批处理

        推理服务的主循环就是一个**模型步**接一个模型步。静态批处理取一批请求，做预填充，再一直解码到最长的那个完成：短请求早已结束却只能干等，新请求要等整批结束。**连续批处理**（Orca 的迭代级调度，2022；vLLM 的调度器）在*每一步*重新决定哪些请求前进多少个 token：结束的请求立刻离开，等待的请求立刻加入，长提示词被切成**分块**，和其他请求的解码一起计算。vLLM 调度器的原话是 "There's no decoding phase nor prefill phase"：每个请求有一个"已计算 token 数"，在每一步的 **token 预算**之内追赶它的 token。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `continuous_batching` | `PagedDecoderAttention`、`continuous_batching_generate`、`static_batching_generate` |

        这一层的 solution 单元格开头放的是本 notebook 依赖的前面几个 notebook 的部件（这里是桩代码：把你的粘贴过来；`apply_rope` 用 `generation` 里的）。它们在各自的 notebook 里评分；你的哪个部件有错，评分器就借给你它的答案（绝不借代码），并且会说明，所以一个错误只扣一次分。
        """),
        setup(),
        md(r"""
        ## 1. A decoder layer on the paged cache

        `PagedDecoderAttention(d_model, num_heads, num_kv_heads=None, rope_base=10000.0, layer_idx=0)` has
        `generation`'s `DecoderAttention` weights (`W_q, W_k, W_v, W_o`: its `state_dict` loads) and runs one
        step of a packed batch: `forward(x, positions, meta, cache) -> [T, d_model]`, with

        - `x [T, d_model]`: the new tokens of every sequence, packed; `positions [T]`: each token's position in
          its own sequence (a chunk in the middle of a prompt starts where the previous one stopped, not at 0);
        - `meta`: the step's `cu_seqlens_q`, `slot_mapping`, `block_tables`, `seq_lens` (after this step);
        - `cache`: anything with `k_cache`, `v_cache` `[num_layers, num_blocks, block_size, H_kv, D]`.

        Rotate queries and keys at `positions` (on packed `[T, H, D]`, call `apply_rope` on
        `x.transpose(0, 1)`: its sequence axis is -2), write the **rotated** keys and the values into layer
        `layer_idx` with `reshape_and_cache`, then `paged_attention`. The layer never calls `reserve`: the
        scheduler did, once for the step, and every layer writes the same slots of its own layer.
        """, r"""
        ## 1. 分页缓存上的解码器层

        `PagedDecoderAttention(d_model, num_heads, num_kv_heads=None, rope_base=10000.0, layer_idx=0)` 的权重和 `generation` 的 `DecoderAttention` 相同（`W_q, W_k, W_v, W_o`：它的 `state_dict` 可以直接加载），运行打包批次的一步：`forward(x, positions, meta, cache) -> [T, d_model]`，其中

        - `x [T, d_model]`：所有序列的新 token，打包的；`positions [T]`：每个 token 在它自己序列里的位置（提示词中间的分块从上一块结束的地方接着算，而不是从 0 开始）；
        - `meta`：这一步的 `cu_seqlens_q`、`slot_mapping`、`block_tables`、`seq_lens`（包括本步的 token）；
        - `cache`：任何带有 `k_cache`、`v_cache` `[num_layers, num_blocks, block_size, H_kv, D]` 的对象。

        在 `positions` 处旋转查询和键（对打包的 `[T, H, D]`，在 `x.transpose(0, 1)` 上调用 `apply_rope`：它的序列维度是 -2），用 `reshape_and_cache` 把**旋转后**的键和值写进第 `layer_idx` 层，再调用 `paged_attention`。这一层从不调用 `reserve`：调度器已经为这一步调用过一次，每一层都往它自己那一层的相同槽位里写。
        """),
        recipe("PagedDecoderAttention", RECIPES),
        solution_cell("PagedDecoderAttention", HINTS, (*PIECES, "PagedDecoderAttention")),
        check("check_paged_decoder_attention(PagedDecoderAttention)", "check_paged_decoder_attention"),
        md(r"""
        ## 2. The scheduler

        `continuous_batching_generate(model, prompts, max_new_tokens, cache, token_budget=16, max_num_seqs=4)`
        generates greedily; `model(tokens [T], positions [T], meta, cache) -> logits [T, vocab]`. The policy is
        fixed, so that step counts compare (the grader's reference follows it step for step). Requests are
        numbered in the order of `prompts`; `need(r) = ceil((len(prompt) + max_new_tokens) / block_size)`. Each
        step, with `budget = token_budget`:

        1. every running request that already has an output token gets 1 token (a decode), in running order;
        2. every running request still in its prompt gets `min(budget left, its prompt tokens not yet computed)`;
        3. while budget is left, fewer than `max_num_seqs` run and a request waits, the first waiting request is
           admitted iff the free blocks, minus what the running requests may still need, cover `need(head)`
           (no preemption: an admitted request can always finish). An admitted request calls
           `add_sequence(id, prompt)` (skipping cached prompt tokens) and gets a chunk at once;
        4. each chunk calls `reserve(id, n, token_ids=...)`, in that order; then **one** model call;
        5. a request whose last known token was computed in this step appends the argmax of **that token's**
           logits (a prefill chunk that ends before the prompt does samples nothing); one with
           `max_new_tokens` outputs is finished and **frees its blocks in the same step**.

        The step's `meta` is a small `StepMeta` object (its stub is in the cell, above the scheduler: keep the four
        tensors it is given); the layers read its four fields. `stats`: `steps`, `mixed_steps` (a decode and a prefill chunk in one step), `max_blocks_used`,
        `tokens_per_step`, `prefill_tokens`. The grader counts these itself, from its model's calls.

        `static_batching_generate(model, prompts, max_new_tokens, cache, batch_size=4)` is the baseline: batches
        in arrival order, each prefilled in one step, then decoded until its longest request is done (finished
        rows keep computing), then the next batch. Same outputs, same `stats` keys.
        """, r"""
        ## 2. 调度器

        `continuous_batching_generate(model, prompts, max_new_tokens, cache, token_budget=16, max_num_seqs=4)` 做贪心生成；`model(tokens [T], positions [T], meta, cache) -> logits [T, vocab]`。策略是固定的，这样步数才可以比较（评分器的参考实现一步一步地照着它做）。请求按 `prompts` 的顺序编号；`need(r) = ceil((len(prompt) + max_new_tokens) / block_size)`。每一步，`budget = token_budget`：

        1. 每个已经有输出 token 的运行中请求得到 1 个 token（解码），按运行顺序；
        2. 每个还在提示词里的运行中请求得到 `min(剩余预算, 它还没计算的提示词 token 数)`；
        3. 只要还有预算、运行中的请求少于 `max_num_seqs`、又有请求在等，就看第一个等待的请求：当空闲块减去运行中请求还可能需要的块之后仍够 `need(head)` 时才接纳它（没有抢占：接纳了的请求一定能完成）。接纳的请求调用 `add_sequence(id, prompt)`（跳过已缓存的提示词 token），并立刻得到一个分块；
        4. 每个分块按这个顺序调用 `reserve(id, n, token_ids=...)`；然后调用**一次**模型；
        5. 如果一个请求最后一个已知 token 是在这一步算出来的，就把**那个 token** 的 logits 的 argmax 追加为输出（在提示词结束之前就结束的预填充分块不采样）；输出达到 `max_new_tokens` 个的请求就结束了，并且**在同一步里释放它的块**。

        这一步的 `meta` 是一个小小的 `StepMeta` 对象（它的桩代码在单元格里、调度器的上面：把传给它的四个张量存下来）；各层读取它的四个字段。`stats`：`steps`、`mixed_steps`（同一步里既有解码又有预填充分块）、`max_blocks_used`、`tokens_per_step`、`prefill_tokens`。评分器会根据它的模型被调用的情况自己数一遍。

        `static_batching_generate(model, prompts, max_new_tokens, cache, batch_size=4)` 是基线：按到达顺序分批，每批一步预填充，然后一直解码到这批里最长的请求完成（已完成的行继续计算），再处理下一批。输出相同，`stats` 的键也相同。
        """),
        *written_cells("written_free_same_step"),
        recipe("continuous_batching_generate", RECIPES),
        solution_cell("continuous_batching_generate", HINTS, ("StepMeta", "continuous_batching_generate")),
        check("check_continuous_batching(continuous_batching_generate, PagedDecoderAttention, PagedKVCache)",
              "check_continuous_batching"),
        solution_cell("static_batching_generate", HINTS),
        check("check_static_batching(static_batching_generate, PagedDecoderAttention, PagedKVCache)",
              "check_static_batching"),
        md(r"""
        Six requests of 3 to 13 prompt tokens and 2 to 10 new tokens, a two-layer model with grouped heads,
        blocks of 4: continuous batching with `token_budget=8`, `max_num_seqs=3` on a 12-block pool (the requests
        need 22 blocks in all), static batching with `batch_size=3` on 24 blocks: the same concurrency. The cell
        prints the machine-independent measures (steps, tokens computed, peak blocks) and tokens/s on this
        machine (best of 3; on a CPU and a tiny model it follows Python's overhead, so no ratio is promised).
        """, r"""
        六个请求，提示词 3 到 13 个 token，新 token 2 到 10 个，一个两层、分组头的模型，块大小为 4：连续批处理用 `token_budget=8`、`max_num_seqs=3`，块池 12 个块（这些请求一共需要 22 个块）；静态批处理用 `batch_size=3`、24 个块：并发数相同。这个单元格打印与机器无关的度量（步数、计算的 token 数、峰值块数），以及在这台机器上的 tokens/s（取 3 次中最好的；在 CPU 和小模型上它取决于 Python 的开销，所以不承诺任何比值）。
        """),
        demo("""
        import time

        torch.manual_seed(0)
        vocab, d_model = 64, 32
        prompts = [torch.randint(vocab, (n,)).tolist() for n in (7, 7, 6, 13, 11, 3)]
        max_new = [3, 10, 2, 9, 2, 2]
        with uses_your_code():
            class TinyModel(nn.Module):  # embeddings, two of your layers with residuals, an output head
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(vocab, d_model)
                    self.layers = nn.ModuleList(PagedDecoderAttention(d_model, 4, 2, layer_idx=i) for i in range(2))
                    self.head = nn.Linear(d_model, vocab, bias=False)

                def forward(self, tokens, positions, meta, cache):
                    x = self.embed(tokens)
                    for layer in self.layers:
                        x = x + layer(x, positions, meta, cache)
                    return self.head(x)

            model = TinyModel().eval()
            runs = {"continuous": lambda: continuous_batching_generate(
                        model, prompts, max_new, PagedKVCache(12, 4, 2, 8, num_layers=2), token_budget=8, max_num_seqs=3),
                    "static": lambda: static_batching_generate(
                        model, prompts, max_new, PagedKVCache(24, 4, 2, 8, num_layers=2), batch_size=3)}
            results = {}
            with torch.no_grad():
                for name, run in runs.items():
                    times = []
                    for _ in range(3):
                        started = time.perf_counter()
                        outputs, stats = run()
                        times.append(time.perf_counter() - started)
                    results[name] = outputs
                    print(f"{name:<10}: {stats['steps']:>2} steps ({stats['mixed_steps']} mixed), "
                          f"{sum(stats['tokens_per_step'])} tokens computed for {sum(max_new)} generated, "
                          f"peak {stats['max_blocks_used']} blocks, {sum(max_new) / min(times):,.0f} tokens/s")
            print(f"same tokens both ways: {results['continuous'] == results['static']}")
        """),
        md(r"""
        The same model with prefix caching, on the lengths of the hidden check: six requests that share a 12-token
        system prompt, each with 1 to 4 tokens of its own (85 prompt tokens), on a 16-block pool. The first line counts
        the prompt tokens these six compute one request after another, as notebook 04 does (its figure, 27 of 75, is
        five other requests: 12 + 3 tokens each). Continuous batching computes a few more: requests admitted in the same
        step cannot hit the blocks another of them fills in that step (every `add_sequence` of a step comes before its
        reserves; vLLM does not reuse blocks filled in the same step either).
        """, r"""
        同一个模型加上前缀缓存，用的是隐藏检查的长度：六个请求共享一个 12 个 token 的系统提示词，每个请求自己另有 1 到 4 个 token（一共 85 个提示词 token），块池 16 个块。第一行像 notebook 04 那样，统计这六个请求一个接一个时要计算的提示词 token 数（notebook 04 的 75 个中计算 27 个，是另外五个请求：每个 12 + 3 个 token）。连续批处理要多算几个：同一步里接纳的请求，命中不了其中另一个请求在这一步才填满的块（一步里所有的 `add_sequence` 都在 reserve 之前；vLLM 也不会重用同一步里刚填满的块）。
        """),
        demo("""
        torch.manual_seed(1)
        system = torch.randint(vocab, (12,)).tolist()
        shared = [system + torch.randint(vocab, (n,)).tolist() for n in (3, 1, 2, 4, 2, 1)]
        with uses_your_code(), torch.no_grad():
            cache = PagedKVCache(32, 4, 2, 8, num_layers=2, enable_prefix_caching=True)
            alone = 0
            for i, prompt in enumerate(shared):  # one request after another, as in notebook 04
                cached = cache.add_sequence(i, prompt)
                cache.reserve(i, len(prompt) - cached, token_ids=prompt[cached:])
                alone += len(prompt) - cached
            print(f"one request after another: {alone} of {sum(map(len, shared))} prompt tokens computed")
            model = TinyModel().eval()  # the class of the cell above, fresh weights
            for caching in (False, True):
                cache = PagedKVCache(16, 4, 2, 8, num_layers=2, enable_prefix_caching=caching)
                outputs, stats = continuous_batching_generate(model, shared, max_new, cache, token_budget=8, max_num_seqs=3)
                print(f"prefix caching {str(caching):<5}: {stats['prefill_tokens']} of {sum(map(len, shared))} prompt "
                      f"tokens computed, {stats['steps']} steps")
        """),
        graded_cell("continuous_batching"),
        md(r"""
        ## 3. Pitfalls

        - **Positions restarting at 0 in each chunk**: the keys are rotated at the wrong angles.
        - **Sampling from the chunk's first token**: the next token follows the *last* computed one.
        - **Every layer writing layer 0**: the second layer reads the first one's keys.
        - **Finished requests not freed**: their blocks never come back and the scheduler stalls.
        - **Prefills never mixed with decodes**: the budget is wasted while long prompts wait.
        """, r"""
        ## 3. 常见错误

        - **每个分块的位置都从 0 重新开始**：键被按错误的角度旋转。
        - **从分块的第一个 token 采样**：下一个 token 接在*最后*一个算出的 token 后面。
        - **每一层都写第 0 层**：第二层读到的是第一层的键。
        - **结束的请求没有释放**：它们的块永远回不来，调度器停滞。
        - **预填充从不和解码混在一起**：长提示词等着的时候预算被浪费了。
        """),
    ]


DEMO_ZH = {
    """f"prefix caching {str(caching):<5}: {stats['prefill_tokens']} of {sum(map(len, shared))} prompt \"""":
        """f"前缀缓存 {str(caching):<5}：{sum(map(len, shared))} 个提示词 token 中计算了 {stats['prefill_tokens']} 个，\"""",
    """f"tokens computed, {stats['steps']} steps\"""": """f"{stats['steps']} 步\"""",
    "# the class of the cell above, fresh weights": "# 上面单元格里的类，重新初始化的权重",
    "# one request after another, as in notebook 04": "# 一个请求接一个请求，和 notebook 04 一样",
    'f"one request after another: {alone} of {sum(map(len, shared))} prompt tokens computed"':
        'f"一个接一个：{sum(map(len, shared))} 个提示词 token 中计算了 {alone} 个"',
    "# embeddings, two of your layers with residuals, an output head": "# 嵌入层、两层你的注意力层（带残差）、输出层",
    """f"{name:<10}: {stats['steps']:>2} steps ({stats['mixed_steps']} mixed), \"""":
        """f"{name:<10}：{stats['steps']:>2} 步（{stats['mixed_steps']} 个混合步），\"""",
    """f"{sum(stats['tokens_per_step'])} tokens computed for {sum(max_new)} generated, \"""":
        """f"为生成 {sum(max_new)} 个 token 计算了 {sum(stats['tokens_per_step'])} 个 token，\"""",
    """f"peak {stats['max_blocks_used']} blocks, {sum(max_new) / min(times):,.0f} tokens/s\"""":
        """f"峰值 {stats['max_blocks_used']} 个块，{sum(max_new) / min(times):,.0f} tokens/s\"""",
    """f"same tokens both ways: {results['continuous'] == results['static']}\"""":
        """f"两种方式生成的 token 相同：{results['continuous'] == results['static']}\"""",
}
