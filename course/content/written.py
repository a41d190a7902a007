"""The written questions of the assignments (graded by hand in formgrader), in both languages.

Each sits where the student has just seen the evidence (or, for a prediction, right before the cell that
shows it), and asks for a prediction or an explanation that the notebook's own output can confirm. A content
module places one with `*written_cells("grade_id")`. Their points come on top of the autograded 100 of the
assignment (course/cells.py: Written; README: "Written questions").
"""
from course.cells import Cell, Written, written
from course.content import written_serving

# The questions of each assignment, in the order they are numbered in its notebooks.
ASSIGNMENT_QUESTIONS = {
    "self_attention": ("written_scale_prediction", "written_scale_sqrt", "written_padding_keys"),
    "generation": ("written_decode_alignment", "written_rotated_keys", "written_left_padding"),
    "efficient": ("written_online_rescale", "written_memory_prediction", "written_recompute"),
    "real_models": ("written_conv1d_axis", "written_double_mask", "written_permute_values", "written_mask_function"),
    "serving": written_serving.ORDER,
}

QUESTIONS = {q.grade_id: q for q in (
    # ------------------------------------------------------------------ self_attention
    Written(
        "written_scale_prediction", 4,
        question=(
            """*Predict before you run the next cell.* It draws 8 random keys per query and prints, for
            `d_k` from 4 to 1024, the mean largest softmax weight of the raw scores (`max weight raw`) and of the
            scaled ones (`max weight scaled`). How large do you expect the largest raw weight to be at `d_k = 16`,
            and at `d_k = 256`? Will the scaled column change with `d_k`? Write your guess first; then run the
            cell and explain in two sentences what you see.""",
            """*先预测，再运行下一个单元格。* 它为每个查询随机取 8 个键，对 `d_k` 从 4 到 1024 打印原始分数的
            softmax 最大权重的平均值（`最大权重(原始)`）和缩放后分数的（`最大权重(缩放)`）。你估计 `d_k = 16` 时
            原始分数的最大权重大约是多少？`d_k = 256` 时呢？缩放后的那一列会随 `d_k` 变化吗？先写下你的猜测，
            再运行单元格，用两句话解释你看到的结果。"""),
        answer=(
            """My guess: unscaled, the largest weight climbs towards 1 as `d_k` grows; scaled, it stays put. The
            table agrees: `max weight raw` rises with `d_k` while `max weight scaled` is flat. A raw dot product is
            a sum of `d_k` random terms, so its variance is `d_k` (the `var(q.k)` column) and the scores spread
            like $\\sqrt{d_k}$: the softmax then gives almost everything to the largest one. Dividing by
            $\\sqrt{d_k}$ brings the variance back to 1, so the weights no longer depend on the width.""",
            """我的猜测：不缩放时，最大权重随 `d_k` 增大而趋近 1；缩放后基本不变。表格印证了这一点：`最大权重(原始)`
            随 `d_k` 上升，`最大权重(缩放)` 几乎不动。原始点积是 `d_k` 个随机项之和，方差等于 `d_k`（见
            `var(q.k)` 一列），分数的离散程度按 $\\sqrt{d_k}$ 增长，softmax 于是几乎把全部权重给了最大的那个分数。
            除以 $\\sqrt{d_k}$ 把方差拉回 1，权重就不再随宽度变化。"""),
        full=("a prediction written down before the table, and an explanation that names the variance (or spread) of "
              "the dot product growing with `d_k` and the softmax saturating, with scaling restoring variance 1. "
              "The prediction is not graded for being right: a wrong prediction that the answer corrects against "
              "the table earns full marks (yes).",
              "写了看表之前的预测，并且解释里说出点积的方差（或离散程度）随 `d_k` 增长、softmax 饱和，而缩放让方差回到 1。"
              "预测对不对不计分：预测错了、但答案对照表格更正了它，照样得满分（是）。"),
        half=("the right direction (raw weights grow towards 1, scaled stay flat) without the variance argument; or "
              "the argument without reading the table; or a full explanation with no prediction written down, or a "
              "wrong prediction left uncorrected.",
              "方向对（原始权重趋近 1，缩放后不变），但没有方差的论证；或者有论证，却没有对照表格；或者解释完整，"
              "却没有写预测，或者错误的预测没有更正。"),
        none=("no answer, or the wrong direction (for example: larger `d_k` spreads the weights more evenly).",
              "没有作答，或方向错误（例如认为 `d_k` 越大权重越平均）。"),
    ),
    Written(
        "written_scale_sqrt", 3,
        question=(
            """Why divide the scores by $\\sqrt{d_k}$ and not by $d_k$? Use the `var(q.k)` column of the table
            above: what would the variance of $q \\cdot k / d_k$ be at `d_k = 256`, and what would the softmax over
            the 8 keys look like then? Two or three sentences.""",
            """为什么分数要除以 $\\sqrt{d_k}$，而不是除以 $d_k$？用上面表格里 `var(q.k)` 这一列来回答：`d_k = 256`
            时 $q \\cdot k / d_k$ 的方差是多少？这时 8 个键上的 softmax 会是什么样子？写两三句话。"""),
        answer=(
            """Dividing by $d_k$ divides the variance by $d_k^2$: $\\mathrm{var}(q \\cdot k)/d_k^2 \\approx 1/d_k$,
            about $1/256$ at `d_k = 256`. The scores then all sit near 0, and the softmax is almost uniform (close to
            1/8 for each key): attention can no longer prefer any key, and the wider the head, the worse. The
            standard deviation is $\\sqrt{d_k}$, so dividing by it is what keeps the variance at 1 for every width
            (the `var(q.k/sqrt(d_k))` column).""",
            """除以 $d_k$ 相当于把方差除以 $d_k^2$：$\\mathrm{var}(q \\cdot k)/d_k^2 \\approx 1/d_k$，`d_k = 256`
            时约为 $1/256$。这样所有分数都挤在 0 附近，softmax 几乎是均匀分布（每个键都接近 1/8）：注意力没法再偏向
            任何一个键，而且头越宽越严重。点积的标准差是 $\\sqrt{d_k}$，除以它才能让方差在任何宽度下都保持为 1
            （见 `var(q.k/sqrt(d_k))` 一列）。"""),
        full=("variance $\\approx 1/d_k$ when dividing by $d_k$, hence a near-uniform softmax, and $\\sqrt{d_k}$ as "
              "the standard deviation that keeps the variance at 1.",
              "指出除以 $d_k$ 后方差约为 $1/d_k$、softmax 接近均匀，并说明 $\\sqrt{d_k}$ 是标准差，除以它方差保持为 1。"),
        half=("one of the two halves: the near-uniform softmax without the variance, or the variance without its "
              "consequence for the weights.",
              "只答到一半：说了 softmax 接近均匀却没讲方差，或讲了方差却没说它对权重的影响。"),
        none=("no answer, or a reason that is not about the size of the scores (for example: $\\sqrt{}$ is cheaper).",
              "没有作答，或理由与分数大小无关（例如“开方算得更快”）。"),
    ),
    Written(
        "written_padding_keys", 3,
        question=(
            """In the `padding (length 6)` panel, the two padded *key* columns are 0, but the two padded *query*
            rows (6 and 7) still hold weights. Why does the padding mask hide keys and not queries, and why is it
            harmless that a padded query still gets an output? Two or three sentences.""",
            """在 `填充（长度 6）` 这张图里，两个被填充的*键*（最右两列）权重为 0，可是两个被填充的*查询*
            （第 6、7 行）仍然有权重。为什么填充掩码遮的是键而不是查询？被填充的查询照样得到一个输出，为什么
            没有害处？写两三句话。"""),
        answer=(
            """A query's output is the weighted average of the values of the keys it attends to, so a padded key
            would mix a pad token's value into the output of every real token: it must get weight 0 ($-\\infty$
            before the softmax). A padded query only produces its own row, which nothing else reads (the next
            layers mask it as a key again, and the loss ignores pad positions); masking that row too would leave
            it with no key at all: with a $-\\infty$ fill its softmax is $0/0$, NaN (PyTorch's SDPA returns 0 for
            such a row instead, as `04_decoder` of `generation` prints).""",
            """查询的输出是它所关注的那些键对应的值的加权平均，所以一个被填充的键会把填充 token 的值混进每个真实
            token 的输出：它的权重必须为 0（softmax 之前设为 $-\\infty$）。被填充的查询只产生它自己那一行输出，
            没有别的东西会读它（后面的层会再次把它当作键遮住，损失也忽略填充位置）；如果把这一行也遮住，它就一个键
            都看不到：用 $-\\infty$ 填充时它的 softmax 是 $0/0$，即 NaN（PyTorch 的 SDPA 则对这样的行返回 0，
            `generation` 作业的 `04_decoder` 会打印出来）。"""),
        full=("keys are masked because their values flow into every real query's output; a padded query's row is "
              "never read (and masking it too would give an all-masked row: NaN with a $-\\infty$ fill, 0 from SDPA; "
              "either answer is right).",
              "说明遮键是因为键的值会流入每个真实查询的输出；被填充查询的那一行从来不会被读取（再遮它反而会得到全被遮住的行：用 $-\\infty$ 填充时是 NaN，SDPA 给出 0；两种说法都对）。"),
        half=("only one of the two: why keys are masked, or why padded queries do no harm.",
              "只答了其中一点：为什么遮键，或者为什么填充的查询无害。"),
        none=("no answer, or the claim that the padded rows are a bug to fix.",
              "没有作答，或认为填充的那两行是需要修正的 bug。"),
    ),
    # ------------------------------------------------------------------ generation
    Written(
        "written_decode_alignment", 3,
        question=(
            """The cell above printed the mask of `is_causal=True` for `S_q = 2` new queries and `S_k = 5` keys.
            Which keys may the newest token (the last row) see under that mask, and which should it see? Then
            explain in two sentences why this bug stays hidden during the prefill.""",
            """上面的单元格打印了 `S_q = 2` 个新查询、`S_k = 5` 个键时 `is_causal=True` 用的掩码。在这个掩码下，
            最新的 token（最后一行）能看到哪些键？它本应看到哪些键？再用两句话解释：为什么这个 bug 在预填充阶段
            不会暴露。"""),
        answer=(
            """Under the printed (top-left aligned) mask the last query sees keys 0 and 1 only, but it is the token
            at absolute position 4 and should see keys 0 to 4: decoding needs the bottom-right alignment,
            $j \\le i + (S_k - S_q)$. During the prefill $S_q = S_k$, where both alignments are the same lower
            triangle, so the outputs are right until the first call with fewer queries than keys.""",
            """在打印出来的（左上对齐的）掩码下，最后一个查询只能看到键 0 和 1；可它是绝对位置 4 上的 token，本应
            看到键 0 到 4：解码需要右下对齐，即 $j \\le i + (S_k - S_q)$。预填充时 $S_q = S_k$，两种对齐是同一个
            下三角，所以输出一直是对的，直到第一次出现查询比键少的调用。"""),
        full=("keys 0-1 seen versus 0-4 needed (bottom-right alignment), and $S_q = S_k$ in the prefill making both "
              "alignments agree.",
              "答出看到的是键 0-1、应看到键 0-4（右下对齐），并指出预填充时 $S_q = S_k$，两种对齐一致。"),
        half=("the right keys without the reason the prefill hides it, or the reason without reading the mask.",
              "键答对了但没解释预填充为何不暴露，或解释了原因却没读懂掩码。"),
        none=("no answer, or a reading of the mask in which the newest token sees every key.",
              "没有作答，或把掩码读成最新 token 能看到所有键。"),
    ),
    Written(
        "written_rotated_keys", 4,
        question=(
            """In the cell above, the third run uses a cache that rotates every key it returns once more, at
            positions `0 .. S_k - 1`. Why does the cache store keys already rotated, each at its own position, and
            what exactly goes wrong in the third run? Two or three sentences; use the printed differences.""",
            """上面的单元格里，第三次运行用的缓存会把它返回的每个键在位置 `0 .. S_k - 1` 上再旋转一次。为什么缓存
            里存的是已经按各自位置旋转过的键？第三次运行到底错在哪里？写两三句话，并引用打印出来的差值。"""),
        answer=(
            """RoPE makes a score depend only on $m - n$ when the key at position $n$ is rotated by its own angle
            exactly once; rotating at append time makes each cached key final, so later steps reuse it as it is
            and never redo work on old tokens. The third cache rotates keys that are already rotated, so key $n$
            ends up turned by $2n$: the relative positions are wrong and its output drifts far from the full pass
            (its difference is many orders of magnitude above rounding, unlike the first line's). Rotating every
            key again at each step would also cost work that grows with the cache.""",
            """只有位置 $n$ 上的键恰好按自己的角度旋转一次，RoPE 才能让分数只依赖于 $m - n$；在追加时就旋转，缓存里的
            键就是最终结果，之后每一步直接拿来用，不必再为旧 token 重新计算。第三次运行的缓存把已经旋转过的键又转了
            一次，位置 $n$ 的键实际转了 $2n$：相对位置全错，输出与整段一次性计算的结果差得很远（差值比第一行的舍入
            误差大好几个数量级）。每一步都把所有键再转一遍，计算量还会随缓存长度增长。"""),
        full=("the relative-position property needs each key rotated once at its own position; the third run rotates "
              "twice ($2n$), read off the large printed difference; cost of re-rotating mentioned or not.",
              "说明相对位置性质要求每个键只按自己的位置旋转一次；第三次运行旋转了两次（$2n$），并引用打印出的大差值；是否提到重复旋转的开销均可。"),
        half=("says the keys are rotated twice without why that breaks the scores, or explains storing rotated keys "
              "only as a saving of work.",
              "只说键被转了两次却没说明为什么会破坏分数，或只把存旋转后的键解释成省计算。"),
        none=("no answer, or the claim that the cache should store unrotated keys and rotate them when read.",
              "没有作答，或主张缓存应存未旋转的键、读出时再旋转。"),
    ),
    Written(
        "written_left_padding", 3,
        question=(
            """*Predict before you change anything.* If `generate` passed `None` instead of `mask` as the
            `key_mask` of its two calls of `layer`, which of the three prompts could generate different tokens?
            Write your prediction, then try it (edit the cell, run it, put `mask` back) and explain in two
            sentences why a left-padded batch needs the key mask.""",
            """*先预测，再动手。* 如果 `generate` 在两次调用 `layer` 时把 `key_mask` 从 `mask` 换成 `None`，三个
            提示词中哪些生成的 token 可能会变？先写下预测，再试一试（改单元格、运行，然后把 `mask` 改回来），用两句话
            解释：为什么左填充的批次必须有键掩码。"""),
        answer=(
            """The prompt of 6 has no padding, so it cannot change. The two shorter prompts (2 and 4 tokens) can:
            without the mask their queries attend to the pad tokens' keys on the left, which stay in the cache for
            every later step, so the pad embedding's values leak into each output and their logits change. Whether
            their greedy tokens change too depends on the weights (with this cell's seed both do; with other seeds
            a small change of the logits can leave the argmax as it was). The key mask hides those columns at every
            step, and each sequence then sees only its own tokens, as when it is generated alone.""",
            """长度为 6 的提示词没有填充，不可能变。较短的两个提示词（2 个和 4 个 token）可能会变：没有掩码时，
            它们的查询会关注左边填充 token 的键，而这些键此后每一步都留在缓存里，填充嵌入的值于是混进了每个输出，
            它们的 logits 随之改变。生成的 token 是否也跟着变取决于权重（在这个单元格的随机种子下两个都变了；换一个
            种子，logits 的小变化可能不改变 argmax）。键掩码在每一步都把这些列遮住，每条序列就只看到自己的 token，
            与单独生成时一样。"""),
        full=("the principle: the unpadded prompt cannot change and the padded ones are exposed, because their queries "
              "see the pad keys (kept in the cache at every step) unless the key mask hides them. Which padded "
              "prompts' tokens actually change depends on the seed: \"both change\", \"they may change\" and an "
              "observed \"only one changed\" all earn full marks with that reason.",
              "答出原理：没有填充的提示词不可能变，有填充的会受影响，原因是不加键掩码时它们的查询会看到填充的键（而且这些键"
              "每一步都在缓存里）。有填充的提示词生成的 token 实际变不变取决于随机种子：答“两个都变”“可能会变”，或者观察到"
              "“只有一个变了”，只要原因对，都得满分。"),
        half=("the right prompts without the reason, or the reason with a wrong prediction left uncorrected.",
              "提示词判断对了但没说原因，或原因对了但错误的预测没有更正。"),
        none=("no answer, or the claim that the unpadded prompt changes too, or that no prompt can change.",
              "没有作答，或认为没有填充的提示词也会变，或认为哪个提示词都不可能变。"),
    ),
    # ------------------------------------------------------------------ efficient
    Written(
        "written_online_rescale", 3,
        question=(
            """In the cell above, the running sum is multiplied by `exp(m - m_new)` whenever a block brings a
            larger maximum. Predict what the last line would print without that factor, try it (delete the factor,
            run, put it back), and explain in two sentences why the factor is needed.""",
            """上面的单元格里，每当一个块带来更大的最大值，累计和就要乘以 `exp(m - m_new)`。先预测：去掉这个因子，
            最后一行会打印什么？再试一试（删掉因子、运行、再改回来），用两句话解释为什么需要这个因子。"""),
        answer=(
            """Without it `m + log(l)` no longer equals `torch.logsumexp` of the row: it comes out too large. Each
            term of the running sum is $e^{s - m}$, measured against the maximum seen so far; when the maximum
            becomes `m_new`, the old terms must be re-expressed against it, and
            $e^{s - m} \\cdot e^{m - m_{\\mathrm{new}}} = e^{s - m_{\\mathrm{new}}}$ does exactly that. Left out, the old block's terms count
            as if they were as large as the new maximum's.""",
            """去掉之后，`m + log(l)` 就不再等于这一行的 `torch.logsumexp`：结果偏大。累计和里的每一项都是
            $e^{s - m}$，是相对于当时见到的最大值算的；最大值变成 `m_new` 后，旧的各项必须改成相对于新最大值，
            $e^{s - m} \\cdot e^{m - m_{\\mathrm{new}}} = e^{s - m_{\\mathrm{new}}}$ 做的正是这件事。漏掉它，旧块的那些项就被当成和新最大值
            附近的项一样大。"""),
        full=("the result no longer matches logsumexp (too large), and the old terms are relative to the old maximum "
              "and must be rescaled to the new one.",
              "答出结果不再等于 logsumexp（偏大），并说明旧的项是相对旧最大值计算的，必须换算到新最大值。"),
        half=("the right effect without the reason, or the reason without the prediction checked.",
              "只说对了结果而没有原因，或讲了原因但没有验证预测。"),
        none=("no answer, or a claim that the factor only prevents overflow and changes nothing when left out.",
              "没有作答，或认为这个因子只是防溢出，去掉也没有影响。"),
    ),
    Written(
        "written_memory_prediction", 3,
        question=(
            """*Predict before you run the next cell.* Each time $S$ doubles, by what factor should the peak memory
            of plain attention grow, and by what factor that of your `flash_attention`? Write the two factors and
            your reason; then run the cell and compare with the printed peaks.""",
            """*先预测，再运行下一个单元格。* $S$ 每翻一倍，朴素注意力的峰值内存应该变为原来的几倍？你的
            `flash_attention` 呢？写下这两个倍数和理由，再运行单元格，和打印出来的峰值对比。"""),
        answer=(
            """Plain attention holds the whole `[B, H, S, S]` score matrix, so doubling $S$ multiplies its peak by
            about 4, as the printed rows show. `flash_attention` holds one `block_q x block_k` tile of scores per
            head, whose size does not depend on $S$, plus the output and lse, which grow linearly: its peak is a
            fixed part plus a linear one, so each doubling multiplies it by a factor between 1 and 2, close to 1
            while the tiles dominate (the printed rows: about 1.1 to 1.3) and tending to 2 only once the output
            dominates.""",
            """朴素注意力要存下整个 `[B, H, S, S]` 分数矩阵，所以 $S$ 翻倍时峰值大约变成 4 倍，打印的各行正是如此。
            `flash_attention` 每个头只存一个 `block_q x block_k` 的分数块，它的大小与 $S$ 无关；再加上输出和 lse，
            它们随 $S$ 线性增长。峰值是固定部分加上线性部分，所以每翻一倍，峰值变为原来的 1 到 2 倍之间：分块占大头时
            接近 1 倍（打印的各行约为 1.1 到 1.3 倍），只有输出占大头时才趋向 2 倍。"""),
        full=("about 4x for plain attention (the $S^2$ matrix), and for the tiled version any factor from about 1x "
              "to 2x with the reason that the tiles do not grow with $S$ while the output does: \"about 1x, the "
              "tiles are fixed\" earns full marks (yes), and so does \"below 2x, tending to 2x\".",
              "答出朴素注意力约 4 倍（$S^2$ 的矩阵）；分块版本答 1 倍到 2 倍之间的任何倍数都可以，只要理由是分块不随 $S$ "
              "增长、输出随 $S$ 增长：答“约 1 倍，分块大小固定”得满分（是），答“不到 2 倍、趋向 2 倍”也得满分。"),
        half=("the two factors without reasons; or one factor right with its reason; or \"2x, everything linear in "
              "$S$\" without the fixed tiles and without reconciling it with the printed rows.",
              "两个倍数对但没有理由；或只有一个倍数及其理由是对的；或答“2 倍，全都与 $S$ 成线性关系”，既没提分块大小固定，"
              "也没有与打印的各行对照。"),
        none=("no answer, or the same factor for both.", "没有作答，或认为两者增长倍数相同。"),
    ),
    Written(
        "written_recompute", 4,
        question=(
            """Why does FlashAttention's backward pass recompute the probabilities $P$ from `q`, `k` and `lse`
            instead of keeping them from the forward pass? Answer with the sizes the cell above printed, and say
            what the recomputation costs. Two or three sentences.""",
            """FlashAttention 的反向传播为什么要用 `q`、`k` 和 `lse` 重新计算概率 $P$，而不是把前向传播算出的
            $P$ 保存下来？结合上面单元格打印的大小来回答，并说明重算要付出什么代价。写两三句话。"""),
        answer=(
            """Keeping $P$ means keeping $S_q \\times S_k$ numbers per head: the printed sizes of plain attention grow
            about 16-fold when $S$ grows 4-fold, to gigabytes at 16k, while `FlashAttentionFunction` keeps only `q`, `k`,
            `v`, `out` and `lse`, which grow 4-fold. With `lse` saved, each tile's $P = e^{S - lse}$ ($S$ the scaled
            scores of the tile) is recomputed already normalised, to the precision of the float32 `lse`; the price
            is one more $QK^\\top$ product per tile in the backward pass, extra arithmetic that costs far less than
            storing and reading back a quadratic tensor.""",
            """保存 $P$ 就得为每个头保存 $S_q \\times S_k$ 个数：打印的结果里，$S$ 变成 4 倍时朴素注意力保存的量变成
            约 16 倍，到 16k 时已是 GB 级；而 `FlashAttentionFunction` 只保存 `q`、`k`、`v`、`out` 和 `lse`，只变成
            4 倍。有了 `lse`，每个块的 $P = e^{S - lse}$（$S$ 是这个块缩放后的分数）可以重算出来，而且已经归一化，
            精度取决于 float32 的 `lse`；代价是反向传播里每个块多做一次 $QK^\\top$ 乘法，多出的这点计算远比存下再读回
            一个平方级的张量便宜。"""),
        full=("three elements, added up as 2 + 1 + 1: quadratic memory of $P$ versus linear memory of what is kept, "
              "read off the printed sizes (2 points); `lse` making the recomputation one normalised step (1 point); "
              "the cost named as extra compute, one more $QK^\\top$ per tile (1 point). Two of them: their points "
              "(for example memory and cost, 3).",
              "三个要点，按 2 + 1 + 1 相加：对照打印的大小说明 $P$ 占平方级内存、保存的量是线性的（2 分）；指出 `lse` 让重算"
              "一步得到归一化的 $P$（1 分）；说出代价是额外计算，每块多一次 $QK^\\top$（1 分）。只答到其中两点，就得这两点的"
              "分（例如内存和代价，3 分）。"),
        half=("the memory argument alone (2 points), without the role of `lse` or the cost; `lse` and the cost "
              "without the memory argument also make 2.",
              "只讲了内存（2 分），没有讲 `lse` 的作用或重算的代价；只讲了 `lse` 和代价、没讲内存，也是 2 分。"),
        none=("no answer, or a reason that is not about memory (for example: recomputing is more accurate).",
              "没有作答，或理由与内存无关（例如“重算更精确”）。"),
    ),
    # ------------------------------------------------------------------ real_models
    Written(
        "written_conv1d_axis", 3,
        question=(
            """A classmate writes `W_q, W_k, W_v = attn.c_attn.weight.chunk(3, dim=0)` and then copies each piece into
            an `nn.Linear(d_model, d_model)` without a transpose. Using the shapes the cell printed above
            (`d_model = 16`), say what each of their two mistakes does: which axis of the Conv1D weight holds the
            inputs and which the outputs, what `chunk(3, dim=0)` cuts, and why the missing transpose alone would raise
            no error. Three sentences.""",
            """一位同学写了 `W_q, W_k, W_v = attn.c_attn.weight.chunk(3, dim=0)`，然后把每一块不经转置地复制进一个
            `nn.Linear(d_model, d_model)`。结合上面单元格打印的形状（`d_model = 16`），说明他的两个错误各自造成了什么：
            Conv1D 权重的哪一维是输入、哪一维是输出，`chunk(3, dim=0)` 切开的是什么，以及为什么单单漏掉转置不会报错。
            写三句话。"""),
        answer=(
            """Conv1D stores `[in, out]` = `[16, 48]`: rows are the 16 input features, columns the 48 outputs (q, k, v
            side by side), so `chunk(3, dim=0)` cuts the *inputs* into pieces of shapes `[6, 48]`, `[6, 48]`,
            `[4, 48]`, each mixing the q, k and v outputs of a few inputs; the split belongs on the columns
            (`dim=1`). Each correct block `[16, 16]` must then be transposed, because `nn.Linear` stores
            `[out, in]` and computes `x @ W.T`. The blocks are square, so an untransposed copy has the right shape,
            loads and runs without any error, and silently computes `x @ W.T` instead of `x @ W` (the cell printed
            how far off that is).""",
            """Conv1D 按 `[in, out]` = `[16, 48]` 存放：行是 16 个输入特征，列是 48 个输出（q、k、v 并排），所以
            `chunk(3, dim=0)` 切开的是*输入*，得到形状为 `[6, 48]`、`[6, 48]`、`[4, 48]` 的三块，每块都混着若干输入对应的
            q、k、v 输出；应该沿列（`dim=1`）拆分。正确拆出的每个 `[16, 16]` 块还要转置，因为 `nn.Linear` 存的是
            `[out, in]`，计算的是 `x @ W.T`。这些块都是方阵，所以不转置的复制形状也对，加载和运行都不会报错，只是悄悄地
            算成了 `x @ W.T` 而不是 `x @ W`（单元格打印了差多少）。"""),
        full=("states that rows are inputs and columns outputs (q, k, v as column blocks), that `chunk(3, dim=0)` "
              "cuts the inputs (shapes `[6, 48]`, `[6, 48]`, `[4, 48]` or an equivalent statement), and that the "
              "blocks are square so the missing transpose still runs. Full marks for all three points in any words; "
              "the exact shapes are not required.",
              "说出行是输入、列是输出（q、k、v 是列块），`chunk(3, dim=0)` 切的是输入（形状 `[6, 48]`、`[6, 48]`、"
              "`[4, 48]` 或等价的表述），并指出各块是方阵，所以漏掉转置照样能运行。三点都答到即得满分，"
              "用什么措辞都行；不要求写出确切的形状。"),
        half=("two of these three points, in any words.", "上述三点答对两点，用什么措辞都行。"),
        none=("no answer, or one of the three points or none: one point alone earns nothing.",
              "没有作答，或三点中最多答对一点：只答对一点不得分。"),
    ),
    Written(
        "written_double_mask", 2,
        question=(
            """*Predict, then check with the cell above.* A layer adds the padding mask its model hands it to the
            float32 scores, then adds its own `extended_attention_mask` of the same padding again (the same mask
            twice, each `0` or `finfo.min`). What value does the score of a padded key get? What do the weights of
            a query in a sample of padding only become, and what happens to the later layers? How do you build the
            mask so that this cannot happen? Two or three sentences.""",
            """*先预测，再用上面的单元格验证。* 一个层先把模型交给它的填充掩码加到 float32 分数上，又把自己用
            `extended_attention_mask` 算出的同一个填充掩码再加一次（同一个掩码加了两次，元素都是 `0` 或 `finfo.min`）。
            一个填充键的分数变成多少？一条全是填充的样本里，查询的权重会变成什么，之后的各层会怎样？怎样构造掩码才能
            避免这种情况？写两三句话。"""),
        answer=(
            """`finfo.min + finfo.min` overflows float32 and gives `-inf`, as the cell printed, so every padded key's
            score is `-inf`. A real token's row still has real keys and its weights stay right (padded keys get 0
            either way), but in a sample of padding only every score of the row is `-inf`, the softmax returns NaN,
            and the NaN spreads through every later layer (where a single `finfo.min` gave equal weights). Combine
            every mask as booleans first (allowed = causal AND real) and add `finfo.min` once where not allowed, or
            add the model's mask and nothing else: every score stays finite.""",
            """`finfo.min + finfo.min` 超出 float32 的范围，得到 `-inf`，和单元格打印的一样，所以每个填充键的分数都是
            `-inf`。真实 token 那一行仍有真实的键，权重依然正确（填充键的权重反正都是 0）；但在全是填充的样本里，
            一整行的分数都是 `-inf`，softmax 返回 NaN，NaN 还会扩散到之后的每一层（而只加一次 `finfo.min` 时得到的是
            相等的权重）。先把所有掩码按布尔值合并（允许 = 因果 且 真实），再在不允许的位置只加一次 `finfo.min`，或者
            只用模型给的那个掩码：每个分数都保持有限。"""),
        full=("three points, in any words: the sum overflows to `-inf`; the padding-only sample's rows become NaN (and "
              "spread to later layers); the fix adds `finfo.min` once per score (masks combined as booleans first, or "
              "only the model's mask used). Saying that real tokens' rows are unaffected is welcome, not required.",
              "三点，用什么措辞都行：相加溢出成 `-inf`；全是填充的样本那几行变成 NaN（并扩散到之后的层）；解决办法是"
              "每个分数只加一次 `finfo.min`（先按布尔值合并掩码，或只用模型给的掩码）。指出真实 token 的行不受影响很好，"
              "但不是必需的。"),
        half=("two of the three points (for example `-inf` and NaN without a fix, or the fix without the overflow).",
              "三点中答对两点（例如答出 `-inf` 和 NaN 但没有给出解决办法，或给出了解决办法却没有说出溢出）。"),
        none=("no answer, at most one of the three points, or a claim that the sum stays finite (for example "
              "`2 * finfo.min` as a valid float32 number).",
              "没有作答，最多答对一点，或认为相加后仍是有限数（例如把 `2 * finfo.min` 当作一个合法的 float32 数）。"),
    ),
    Written(
        "written_permute_values", 2,
        question=(
            """The conversion of Meta's checkpoints permutes the rows of `W_q` and `W_k` but leaves `W_v` and `W_o`
            alone. Explain why the permutation of `W_q` and `W_k` changes no score $q \\cdot k$, and why permuting the
            rows of `W_v` alone would change the layer's output (the demo above printed both). Two or three
            sentences.""",
            """Meta 的 checkpoint 转换时置换了 `W_q` 和 `W_k` 的行，却不动 `W_v` 和 `W_o`。解释为什么置换 `W_q` 和 `W_k`
            不会改变任何分数 $q \\cdot k$，以及为什么只置换 `W_v` 的行会改变这一层的输出（上面的演示把两者都打印了）。
            写两三句话。"""),
        answer=(
            """Permuting the rows of `W_q` and `W_k` in the same way inside each head reorders the features of every
            query and key alike, and a dot product is a sum over features, so it does not depend on their order; the
            permutation only makes the library's half-split RoPE turn the same pairs that Meta's neighbour RoPE turned,
            so the scores after RoPE are unchanged. The values are not rotated and are not compared with anything:
            their features go straight into `W_o`, whose columns expect them in the original order, so permuting `W_v`
            alone feeds `W_o` scrambled features and the output changes (it would take the same permutation of
            `W_o`'s columns to undo it).""",
            """在每个头内部按同样的方式置换 `W_q` 和 `W_k` 的行，就是对每个查询和键的特征做同样的重排，而点积是对各特征
            求和，与特征的顺序无关；置换的作用只是让库的前后半配对 RoPE 转动的正好是 Meta 相邻配对 RoPE 转动的那些对，所以
            RoPE 之后的分数不变。值不旋转，也不和任何东西做点积：它的特征直接进入 `W_o`，而 `W_o` 的列是按原来的顺序
            对应这些特征的，所以只置换 `W_v` 会把打乱的特征喂给 `W_o`，输出就变了（要复原，得对 `W_o` 的列做同样的置换）。"""),
        full=("the dot product is a sum over features, unchanged by one common reordering of q and k (the pairs RoPE "
              "turns stay matched); the values feed `W_o`, whose columns expect the original order, so permuting "
              "`W_v` alone changes the output. Both explanations, in any words, earn full marks.",
              "答出点积是对特征求和，q 和 k 同样重排不改变它（RoPE 转动的对仍然对应）；值进入 `W_o`，`W_o` 的列按原顺序"
              "对应，所以只置换 `W_v` 会改变输出。两个解释都答到，用什么措辞都行，即得满分。"),
        half=("one of the two explanations, in any words.", "两个解释中答对一个，用什么措辞都行。"),
        none=("no answer, neither explanation, or a claim that the values are rotated too.",
              "没有作答，两个解释都不对，或认为值也被旋转。"),
    ),
    Written(
        "written_mask_function", 3,
        question=(
            """The cell above registered your `course_attention` alone, with SDPA's mask function, and with the one
            `register_course_attention` chose, and printed how far each is from eager. Explain why a registered
            attention function needs a mask function registered under the same name: what does the model hand your
            function without one, on a padded batch and on a batch without padding? Why is SDPA's mask function wrong
            for a function like yours on the second batch, and what does the eager mask function guarantee? Two or
            three sentences.""",
            """上面的单元格把你的 `course_attention` 单独注册、配 SDPA 的掩码函数注册、配 `register_course_attention`
            选的那个掩码函数注册，并打印了每种情况与 eager 相差多少。解释为什么注册的注意力函数需要以同一个名字注册一个
            掩码函数：没有它时，模型在有填充的批次上和没有填充的批次上分别交给你的函数什么？为什么在第二种批次上 SDPA 的
            掩码函数对你这样的函数是错的？eager 的掩码函数保证了什么？写两三句话。"""),
        answer=(
            """The model builds the mask with the mask function registered under the kernel's name; with none, it hands
            the function `attention_mask=None` on every batch, and a function that reads `None` as "every key" (as
            `eager_attention_forward` does) lets padded keys and future tokens in: wrong on both batches, silently.
            SDPA's mask function returns `None` for a causal batch without padding because `scaled_dot_product_attention`
            then runs with `is_causal=True`; your function gets no such flag, so it attends to the future there. The
            eager mask function always hands over the float `[B, 1, S_q, S_k]` mask with causality and padding in it,
            so the function only has to add it, and the logits equal eager's.""",
            """模型用在算子名字下注册的掩码函数来构造掩码；没有掩码函数时，它在每个批次上都把 `attention_mask=None`
            交给你的函数，而一个把 `None` 理解为"所有键都可见"的函数（`eager_attention_forward` 就是这样）会把填充的键和
            未来的词元都放进来：两种批次上都悄悄算错。SDPA 的掩码函数在没有填充的因果批次上返回 `None`，因为那时
            `scaled_dot_product_attention` 以 `is_causal=True` 运行；你的函数拿不到这样的标志，于是在那里看到了未来。
            eager 的掩码函数总是交出包含因果性和填充的浮点 `[B, 1, S_q, S_k]` 掩码，函数只要把它加上，logits 就与
            eager 的一致。"""),
        full=("three points, in any words: without a mask function the function receives `None` (both batches wrong: "
              "padding and the future visible); SDPA's mask function gives `None` on an unpadded causal batch, meant "
              "for `is_causal`, which the function never sees; the eager mask function always gives the full additive "
              "mask (causality and padding), so the results equal eager's.",
              "三点，用什么措辞都行：没有掩码函数时函数收到 `None`（两种批次都错：填充和未来都可见）；SDPA 的掩码函数在"
              "没有填充的因果批次上给出 `None`，本意是交给 `is_causal`，而函数看不到它；eager 的掩码函数总是给出完整的"
              "加性掩码（因果性和填充），所以结果与 eager 一致。"),
        half=("two of the three points, in any words.", "三点中答对两点，用什么措辞都行。"),
        none=("no answer, at most one of the three points, or a claim that the model builds the causal mask for any "
              "function by itself.",
              "没有作答，最多答对一点，或认为模型会为任何函数自己构造好因果掩码。"),
    ),
    *written_serving.QUESTIONS,
)}


def written_cells(grade_id: str) -> list[Cell]:
    """The question and answer cells of one written question, numbered within its assignment."""
    number = next(order.index(grade_id) + 1 for order in ASSIGNMENT_QUESTIONS.values() if grade_id in order)
    return written(QUESTIONS[grade_id], number)


def written_points(assignment: str) -> float:
    """The hand-graded points of an assignment (an edition's id, such as generation_zh, names its assignment)."""
    base = assignment.removesuffix("_zh")
    return sum(QUESTIONS[g].points for g in ASSIGNMENT_QUESTIONS.get(base, ()))
