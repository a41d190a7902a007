"""The written questions of the fifth assignment `serving` (graded by hand in formgrader), in both languages;
course/content/written.py numbers and places them like the others'."""
from course.cells import Written

ORDER = ("written_last_token_recomputed", "written_free_same_step", "written_sink_positions")

QUESTIONS = (
    Written(
        "written_last_token_recomputed", 3,
        question=(
            """An 8-token prompt in blocks of 4 is entirely in the prefix cache, yet `add_sequence` reports only 4
            tokens cached, and the scheduler computes 4 tokens for it. Why must the last prompt token be computed
            again, and why does that cost a whole block's worth of tokens here rather than one token? Two or three
            sentences.""",
            """一个 8 个 token 的提示词、块大小为 4，整个都在前缀缓存里，可 `add_sequence` 只报告缓存了 4 个 token，
            调度器要为它计算 4 个 token。为什么最后一个提示词 token 必须重新计算？为什么在这里它要花掉整整一块的 token，
            而不是一个？写两三句话。"""),
        answer=(
            """The cache holds keys and values, not logits: the first output token is sampled from the logits of the
            last prompt token, so that token must go through the model again (vLLM: `max_cache_hit_length =
            num_tokens - 1`). Hits come in whole blocks (only full blocks are hashed and shared), so giving up the last
            token gives up its whole block: tokens 4..7 are recomputed, and the recomputed block is written into a
            fresh block of this sequence, not into the shared one.""",
            """缓存里存的是键和值，不是 logits：第一个输出 token 要从最后一个提示词 token 的 logits 里采样，所以这个
            token 必须再过一遍模型（vLLM：`max_cache_hit_length = num_tokens - 1`）。命中是以整块为单位的（只有满块才有
            哈希、才能共享），所以放弃最后一个 token 就放弃了它所在的整块：token 4..7 都要重算，并且写进这条序列自己的
            新块里，而不是共享的那块。"""),
        full=("logits are not cached, the first output needs the last prompt token's logits; hits are whole blocks, so the "
              "last token's block is recomputed.",
              "答出 logits 不缓存、第一个输出需要最后一个提示词 token 的 logits；命中以整块为单位，所以最后一个 token 所在的块要重算。"),
        half=("one of the two reasons.", "两个原因中答对一个。"),
        none=("no answer, or a claim that the cache might be stale.", "没有作答，或认为缓存可能过期。"),
    ),
    Written(
        "written_free_same_step", 3,
        question=(
            """Rule 5 of the scheduler frees a finished request's blocks in the same step. Suppose instead a request
            were freed one step later, or only when the whole run ends. With the demo's 12-block pool and requests
            that need 22 blocks in all, what happens to admission, and what is the worst case? Two or three
            sentences.""",
            """调度器的第 5 条规则在同一步里释放已完成请求的块。假如一个请求晚一步才释放，或者要等整个运行结束才释放，
            在演示里 12 个块的块池、请求总共需要 22 个块的情况下，接纳新请求会怎样？最坏的情况是什么？写两三句话。"""),
        answer=(
            """Admission counts the free blocks: blocks held by a finished request look taken, so the next request waits
            one step longer (freed a step late: wasted steps and a lower throughput), or forever (freed at the end):
            the 22 blocks the requests need cannot all be held at once in 12, so once the finished requests hold the
            pool no waiting request can be admitted, nothing runs, and the scheduler stalls (a loop that never
            ends).""",
            """接纳新请求要看空闲块数：已完成请求占着的块看起来仍被占用，所以下一个请求要多等一步（晚一步释放：浪费步数，
            吞吐量下降），或者永远等下去（运行结束才释放）：请求需要的 22 个块不可能同时放进 12 个块里，一旦已完成的请求
            占满了块池，就没有等待的请求能被接纳，什么都不运行，调度器停滞（循环永远不结束）。"""),
        full=("admission depends on free blocks; late freeing delays admissions (more steps), never freeing stalls the "
              "scheduler since 22 > 12.",
              "答出接纳取决于空闲块；晚释放推迟接纳（步数变多），不释放会因为 22 > 12 让调度器停滞。"),
        half=("only the delay, or only the stall.", "只答出推迟或只答出停滞。"),
        none=("no answer, or a claim that nothing changes because the outputs are the same.",
              "没有作答，或认为输出相同所以没有影响。"),
    ),
    Written(
        "written_sink_positions", 4,
        question=(
            """`generation` taught to cache keys **after** RoPE, so that each key is rotated once. `SinkKVCache` caches
            them **before** RoPE and rotates every kept key again at every step. Why is the `generation` rule wrong
            here, and what would go wrong with original positions kept instead? Two or three sentences.""",
            """`generation` 教的是在 RoPE **之后**缓存键，这样每个键只旋转一次。`SinkKVCache` 却在 RoPE **之前**缓存，
            每一步都把保留下来的键重新旋转一遍。为什么 `generation` 的规则在这里是错的？如果改为保留原始位置，会出什么问题？
            写两三句话。"""),
        answer=(
            """Here a key's position is its place inside the cache, and that place changes whenever the middle is
            evicted: a key cached at position 5 is at position 4 one step later, so a key rotated once would carry a
            stale angle (rotating cached keys again accumulates rounding; storing them unrotated is exact). With original
            positions the distance from the newest query to the sinks grows without bound (after 16 tokens 15 instead of
            5), far beyond the distances the model was trained on, which is what streaming must avoid.""",
            """在这里，键的位置是它在缓存内的位置，中间一被淘汰，这个位置就会变：在位置 5 缓存的键，一步之后就在位置 4 了，
            所以只旋转一次的键会带着过时的角度（对缓存的键再次旋转会累积舍入误差；存未旋转的键是精确的）。保留原始位置时，
            最新查询到汇点的距离会无限增长（16 个 token 之后是 15 而不是 5），远远超出模型训练时见过的距离，这正是流式生成
            必须避免的。"""),
        full=("positions inside the cache shift on eviction, so rotated keys go stale; original positions make distances "
              "grow beyond training.",
              "答出缓存内位置在淘汰时会移动，所以旋转过的键会过时；原始位置会让距离超出训练范围。"),
        half=("one of the two.", "两者答对一个。"),
        none=("no answer, or a claim that RoPE does not depend on position.", "没有作答，或认为 RoPE 与位置无关。"),
    ),
)
