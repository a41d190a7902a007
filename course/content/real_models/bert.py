"""Notebook 02 of `real_models`: BERT's self-attention and its additive mask (finfo.min, not -inf)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "02_bert"

HINTS = {
    "extended_attention_mask": (
        "(1 - mask) is 1 exactly where a key is padding; scale it by the most negative finite value of `dtype`,\n"
        "and give it the axes that broadcast against scores [B, H, S_q, S_k].",
        "(1 - mask) 恰好在填充的键上为 1；把它乘以 `dtype` 最小的有限值 finfo(dtype).min，\n"
        "再补上能与分数 [B, H, S_q, S_k] 广播的维度。",
    ),
    "BertStyleSelfAttention.__init__": (
        "three nn.Linear(d_model, d_model) with biases; BERT's output projection is not part of this module.",
        "三个带偏置的 nn.Linear(d_model, d_model)；BERT 的输出投影不属于这个模块。",
    ),
    "BertStyleSelfAttention.forward": (
        "no causal mask: every token sees every real token. Add the extended mask to the scores, as BERT does.",
        "没有因果掩码：每个 token 都能看到所有真实 token。像 BERT 那样，把扩展后的掩码加到分数上。",
    ),
    "BertStyleSelfAttention.from_hf": (
        "query, key and value are nn.Linear already: copy weights and biases as they are.",
        "query、key、value 本来就是 nn.Linear：权重和偏置原样复制。",
    ),
}

RECIPES = {
    "extended_attention_mask": (
        """
        1. `keep = attention_mask.to(dtype).view(B, 1, 1, S)`: 1.0 for a real key, 0.0 for padding.
        2. Return `(1.0 - keep) * torch.finfo(dtype).min`: 0 (or -0.0) where real, `finfo.min` where padding.
        """,
        """
        1. `keep = attention_mask.to(dtype).view(B, 1, 1, S)`：真实的键为 1.0，填充为 0.0。
        2. 返回 `(1.0 - keep) * torch.finfo(dtype).min`：真实处为 0（或 -0.0），填充处为 `finfo.min`。
        """,
    ),
    "BertStyleSelfAttention": (
        """
        - `forward`: project with bias, split into heads `[B, H, S, head_dim]`, scores `q @ k^T / sqrt(head_dim)`;
          with an `attention_mask`, `scores = scores + extended_attention_mask(attention_mask, scores.dtype)`;
          softmax over the keys, `@ v`, merge the heads: `[B, S, d_model]` (no `W_o`).
        - `from_hf(cls, attn)`: `layer = cls(attn.query.in_features, attn.num_attention_heads)`; under
          `torch.no_grad()`, copy `attn.query`'s weight and bias into `W_q`, `attn.key`'s into `W_k`,
          `attn.value`'s into `W_v`.
        """,
        """
        - `forward`：带偏置投影，拆成多头 `[B, H, S, head_dim]`，分数 `q @ k^T / sqrt(head_dim)`；有 `attention_mask` 时
          `scores = scores + extended_attention_mask(attention_mask, scores.dtype)`；在键上做 softmax，`@ v`，
          合并各头：`[B, S, d_model]`（没有 `W_o`）。
        - `from_hf(cls, attn)`：`layer = cls(attn.query.in_features, attn.num_attention_heads)`；在 `torch.no_grad()`
          下，把 `attn.query` 的权重和偏置复制进 `W_q`，`attn.key` 的进 `W_k`，`attn.value` 的进 `W_v`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "extended_attention_mask": """attention_mask [B, S]，取值 1/0（int 或 bool）-> `dtype` 的 [B, 1, 1, S]：真实的键为 0，填充处为 finfo(dtype).min。""",
    "BertStyleSelfAttention": """BERT 的双向多头自注意力（W_q、W_k、W_v 带偏置；没有输出投影：BERT 的输出投影在 BertSelfOutput 里）。""",
    "BertStyleSelfAttention.forward": """x [B, S, d_model] -> [B, S, d_model]；attention_mask [B, S]，取值 1/0（1 = 真实 token），按 BERT 的方式加到分数上。""",
    "BertStyleSelfAttention.from_hf": """构造一个与 transformers 的 BertSelfAttention `attn` 等价的 BertStyleSelfAttention（query、key、value 本来就是 nn.Linear）。""",
}


def cells():
    return [
        md(r"""
        # 02 · BERT: an encoder's self-attention and its additive mask

        The second notebook of **your attention inside real models**. BERT is an *encoder*: every token sees
        every other token (no causal mask), and the only mask is the padding mask. The library does not fill
        the scores of padded keys with `-inf`, as your first assignment did: it *adds* a mask whose entries are `0` or the most negative *finite* value
        the dtype can hold (`torch.finfo(dtype).min`), of shape `[B, 1, 1, S]` in 4.57's eager BERT and
        `[B, 1, S, S]` in 5.x. This notebook shows
        why, and what changes when a row has nothing but padding.

        | part | functions | what it does |
        |---|---|---|
        | `bert` | `extended_attention_mask`, `BertStyleSelfAttention` (`from_hf`) | BERT's additive mask; its self-attention in your code |
        """, r"""
        # 02 · BERT：编码器的自注意力与加性掩码

        **真实模型里的注意力** 的第二个 notebook。BERT 是一个*编码器*：每个 token 都能看到所有其他 token（没有因果掩码），唯一的掩码是填充掩码。库并不像你在第一个作业里那样把填充键的分数填成 `-inf`：它*加上*一个掩码，其中的元素是 `0`，或者该 dtype 最小的有限值（`torch.finfo(dtype).min`）；在 4.57 的 eager BERT 里它的形状是 `[B, 1, 1, S]`，在 5.x 里是 `[B, 1, S, S]`。本 notebook 说明这样做的原因，以及当一行里全是填充时会发生什么变化。

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `bert` | `extended_attention_mask`, `BertStyleSelfAttention`（`from_hf`） | BERT 的加性掩码；用你的代码实现它的自注意力 |
        """),
        setup(),
        md(r"""
        ## 1. Where BERT's attention lives

        GPT-2 kept its whole attention in one module. BERT splits it in two: `BertSelfAttention` (the queries,
        keys and values, the scores, the weighted sum) and `BertSelfOutput` (the output projection `dense`, then
        dropout and a residual layer norm). `query`, `key` and `value` are ordinary `nn.Linear` layers, with
        biases: nothing is transposed here.
        """, r"""
        ## 1. BERT 的注意力在哪里

        GPT-2 把整个注意力放在一个模块里。BERT 把它拆成两部分：`BertSelfAttention`（查询、键和值，分数，加权求和）和 `BertSelfOutput`（输出投影 `dense`，然后是 dropout 和带残差的层归一化）。`query`、`key` 和 `value` 都是普通的带偏置的 `nn.Linear`：这里没有任何转置。
        """),
        demo("""
        import transformers
        from transformers import BertConfig, BertModel
        from transformers.models.bert.modeling_bert import BertAttention, BertSelfAttention

        torch.manual_seed(0)
        d_model, num_heads = 12, 3
        config = BertConfig(hidden_size=d_model, num_attention_heads=num_heads, num_hidden_layers=1,
                            intermediate_size=2 * d_model, vocab_size=50, attention_probs_dropout_prob=0.0,
                            attn_implementation="eager")
        print("transformers", transformers.__version__)
        print("BERT's attention block, built from the configuration:")
        print(BertAttention(config))
        """),
        demo("""
        show_source(BertSelfAttention.forward)
        """),
        md(r"""
        The same steps as your layer, in the library's words (the cell below finds each line in the installed
        code; in 5.x the scores, the mask and the softmax happen in the file's `eager_attention_forward`, in 4.x in
        the layer's own `forward`):
        """, r"""
        与你的层步骤相同，只是换成了库的写法（下面的单元格在已安装的代码里找出每一行；5.x 中分数、掩码和 softmax 在同一文件的 `eager_attention_forward` 里，4.x 中则在这个层自己的 `forward` 里）：
        """),
        demo("""
        from transformers.models.bert import modeling_bert

        scores_function = getattr(modeling_bert, "eager_attention_forward", None)  # 4.x computes them in the layer
        show_lines([BertSelfAttention, scores_function], {
            "q, split into heads": ("self.query(hidden_states).view(", "self.query(hidden_states)"),
            "the scale": ("self.scaling = self.attention_head_size**-0.5", "math.sqrt(self.attention_head_size)"),
            "scores": ("torch.matmul(query, key.transpose(", "torch.matmul(query_layer, key_layer.transpose("),
            "mask added": ("attn_weights = attn_weights + ", "attention_scores = attention_scores + attention_mask"),
            "softmax over the keys": ("nn.functional.softmax(attn_weights, dim=-1", "softmax(attention_scores, dim=-1"),
            "merge heads": ("attn_output.reshape(*input_shape, -1)", "context_layer.view("),
        })
        """),
        md(r"""
        ## 2. The mask the model hands its layers

        The model receives `attention_mask` `[B, S]` of 1 (real token) and 0 (padding), the same for every
        layer and every head. It turns it into an *additive* mask once: `0` where a key is real,
        `torch.finfo(dtype).min` (about $-3.4 \times 10^{38}$ in float32) where it is padding, with singleton
        axes so that it broadcasts against the scores `[B, H, S_q, S_k]`: `[B, 1, 1, S]` is the classic shape
        (4.x's `get_extended_attention_mask`), while 5.x expands it over the queries to `[B, 1, S, S]` with the
        same values (the SDPA kernel, 5.x's default, gets booleans instead: notebook `04_interface`). The cell
        catches the mask the model passes to its eager self-attention, in your installed version.
        """, r"""
        ## 2. 模型传给各层的掩码

        模型收到的 `attention_mask` 是 `[B, S]`，1 表示真实 token，0 表示填充，对每一层、每个头都一样。模型只把它转换一次，变成*加性*掩码：真实的键为 `0`，填充处为 `torch.finfo(dtype).min`（float32 下约为 $-3.4 \times 10^{38}$），并带上长度为 1 的维度，以便与分数 `[B, H, S_q, S_k]` 广播：经典的形状是 `[B, 1, 1, S]`（4.x 的 `get_extended_attention_mask`），5.x 则把它沿查询方向展开成 `[B, 1, S, S]`，数值相同（SDPA 算子，即 5.x 的默认实现，收到的则是布尔掩码：见 notebook `04_interface`）。单元格截获了在你安装的版本里，模型传给 eager 自注意力的掩码。
        """),
        demo("""
        model = BertModel(config).eval()
        seen = {}


        def grab(module, args, kwargs):  # runs before the self-attention's forward: keep the mask it receives
            seen["mask"] = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)


        model.encoder.layer[0].attention.self.register_forward_pre_hook(grab, with_kwargs=True)
        tokens = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])  # 0 = padding
        attention_mask = (tokens != 0).long()  # [B, S]: 1 = real token
        with torch.no_grad():
            model(tokens, attention_mask=attention_mask)
        mask = seen["mask"]
        print("attention_mask given to the model:", attention_mask.tolist())
        print("the mask the self-attention gets:  ", list(mask.shape), mask.dtype, "values", sorted(set(mask.flatten().tolist())))
        print("torch.finfo(torch.float32).min =    ", torch.finfo(torch.float32).min)
        if hasattr(model, "get_extended_attention_mask"):  # 4.x
            print("get_extended_attention_mask:        ", list(model.get_extended_attention_mask(attention_mask, tokens.shape).shape))
        """),
        md(r"""
        ## 3. Why `finfo.min` and not `-inf`

        Adding `finfo.min` to a score of ordinary size gives `finfo.min` again (the score is far below the last
        digit float32 keeps), and after the softmax's subtraction of the row's maximum, $e^{\text{finfo.min}}$
        underflows to exactly 0: a padded key gets weight 0, as with `-inf`. The two differ on a row where
        *every* key is padding. With `-inf` the softmax computes $-\infty - (-\infty)$ = NaN, and NaN spreads
        through every later layer. With `finfo.min` every score of the row becomes the same finite number and the
        softmax gives equal weights: a meaningless but finite output for a position nobody reads.
        """, r"""
        ## 3. 为什么用 `finfo.min` 而不是 `-inf`

        给一个普通大小的分数加上 `finfo.min`，结果还是 `finfo.min`（这个分数远小于 float32 所保留的最后一位有效数字），softmax 减去这一行的最大值之后，$e^{\text{finfo.min}}$ 下溢为精确的 0：填充的键得到权重 0，和 `-inf` 一样。两者的区别出现在*所有*键都是填充的那一行。用 `-inf` 时，softmax 要计算 $-\infty - (-\infty)$ = NaN，而 NaN 会扩散到之后的每一层。用 `finfo.min` 时，这一行的每个分数都变成同一个有限数，softmax 给出相等的权重：对一个没人会读的位置来说，这是一个没有意义但有限的输出。
        """),
        demo("""
        lowest = torch.finfo(torch.float32).min
        scores = torch.tensor([1.0, 2.0, 3.0, 0.5])  # one query's scores over 4 keys
        print("finfo.min + 3.0 == finfo.min:", (torch.tensor(lowest) + 3.0 == lowest).item())
        some = torch.tensor([0.0, 0.0, 0.0, lowest])  # key 3 is padding
        print("key 3 padded, + finfo.min:  ", torch.softmax(scores + some, -1).tolist())
        print("key 3 padded, -inf:         ", torch.softmax(scores.masked_fill(torch.tensor([False, False, False, True]), float("-inf")), -1).tolist())
        print("every key padded, + finfo.min:", torch.softmax(scores + lowest, -1).tolist())
        print("every key padded, -inf:       ", torch.softmax(torch.full((4,), float("-inf")), -1).tolist())
        print("finfo.min + finfo.min =", (torch.tensor(lowest) + lowest).item())
        print("float32's finfo.min stored as float16:", torch.tensor(lowest).half().item(),
              "  float16's own finfo.min:", torch.finfo(torch.float16).min)
        """),
        md(r"""
        Two more lines to read: two masks of `finfo.min` *added* to the same score overflow to `-inf`, and each
        dtype has its own `finfo.min` (float32's overflows to `-inf` in float16): `extended_attention_mask` takes
        the dtype of the scores. When does the overflow matter? Only on a row where *every* key gets `-inf`. A
        causal mask and a padding mask added together never make one (4.57's GPT-2 adds both): the key at
        position 0 is never hidden by the causal mask. The same padding mask added twice does, on a sample of
        padding only. The cell counts and shows both:
        """, r"""
        还有两行值得细读：两个 `finfo.min` 的掩码*相加*到同一个分数上会溢出成 `-inf`；每种 dtype 都有自己的 `finfo.min`（float32 的 `finfo.min` 转成 float16 会溢出为 `-inf`）：`extended_attention_mask` 接收分数的 dtype。溢出什么时候才有影响？只在*所有*键都得到 `-inf` 的那一行上。因果掩码和填充掩码相加永远不会造成这样的行（4.57 的 GPT-2 就是把两者相加的）：位置 0 的键从不会被因果掩码屏蔽。同一个填充掩码加两次却会，出现在全是填充的样本上。下面的单元格把两种情况都数出来、打印出来：
        """),
        demo("""
        import itertools

        hidden_by_causal = ~torch.ones(6, 6, dtype=torch.bool).tril()  # [S_q, S_k]: True = hidden
        rows = 0
        for S in range(1, 7):
            for pattern in itertools.product([0, 1], repeat=S):  # every padding pattern of length S
                hidden_by_padding = torch.tensor(pattern) == 0  # [S_k]
                rows += int((hidden_by_causal[:S, :S] & hidden_by_padding).all(dim=-1).sum())
        print("rows whose every key is hidden by both the causal and the padding mask, S <= 6:", rows)
        padding_only = torch.full((4,), lowest)  # a sample of padding only: every key hidden
        print("padding only, mask added once: ", torch.softmax(scores + padding_only, -1).tolist())
        print("padding only, mask added twice:", torch.softmax(scores + padding_only + padding_only, -1).tolist())
        """),
        *written_cells("written_double_mask"),
        recipe("extended_attention_mask", RECIPES),
        solution("extended_attention_mask", HINTS),
        check("check_extended_attention_mask(extended_attention_mask)", "check_extended_attention_mask"),
        md(r"""
        ## 4. Your BERT self-attention

        `BertStyleSelfAttention(d_model, num_heads)`: `W_q`, `W_k`, `W_v` with biases, no output projection
        (BERT's is in `BertSelfOutput`), `forward(x, attention_mask=None)` with `attention_mask` `[B, S]` of 1/0,
        *added* to the scores through your `extended_attention_mask` in the scores' dtype. `from_hf(attn)` copies
        a `BertSelfAttention`'s weights. The check compares your layer with the library's on a batch whose last
        sample is all padding: the library's output there is finite, and yours must be the same.
        """, r"""
        ## 4. 你的 BERT 自注意力

        `BertStyleSelfAttention(d_model, num_heads)`：带偏置的 `W_q`、`W_k`、`W_v`，没有输出投影（BERT 的输出投影在 `BertSelfOutput` 里），`forward(x, attention_mask=None)`，其中 `attention_mask` 是取值 1/0 的 `[B, S]`，通过你的 `extended_attention_mask`（使用分数的 dtype）*加*到分数上。`from_hf(attn)` 复制一个 `BertSelfAttention` 的权重。检查会在一个最后一条样本全是填充的批次上比较你的层和库的层：库在那里的输出是有限的，你的也必须一样。
        """),
        recipe("BertStyleSelfAttention", RECIPES),
        solution("BertStyleSelfAttention", HINTS),
        check("check_bert_self_attention(BertStyleSelfAttention)", "check_bert_self_attention"),
        md(r"""
        A sample of padding only: equal weights on its keys means that every query's output is the *mean* of the
        value vectors of that sample. That is the eager kernel's answer, the one your layer matches; the cell
        checks it on your layer, then runs the same BERT with the SDPA kernel (5.x's default): in 5.x it hands its
        layers a boolean mask and a row with no key to see comes out as 0, while 4.57's SDPA gets the float mask
        and gives the mean too. Nobody reads that output, but two kernels of one model disagree there.
        """, r"""
        一条全是填充的样本：它的各个键权重相等，意味着每个查询的输出都是这条样本所有值向量的*平均*。这是 eager 算子给出的结果，也是你的层要对上的结果；单元格先在你的层上验证这一点，再用 SDPA 算子（5.x 的默认实现）运行同一个 BERT：5.x 会给各层一个布尔掩码，一行里没有可看的键时输出为 0；而 4.57 的 SDPA 拿到的是浮点掩码，给出的也是平均值。没有人会读这个输出，但同一个模型的两种算子在这里给出不同的结果。
        """),
        demo("""
        torch.manual_seed(3)
        x = torch.randn(2, 4, d_model)
        all_padding = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])
        with torch.no_grad(), uses_your_code():
            layer = BertStyleSelfAttention.from_hf(BertSelfAttention(config).eval()).eval()
            out = layer(x, all_padding)
            mean_of_values = layer.W_v(x[1]).mean(dim=0)  # [d_model]: equal weights on the 4 keys of sample 1
            print("sample 1 finite:", torch.isfinite(out[1]).all().item(),
                  "  every query = mean of the values:", torch.allclose(out[1], mean_of_values.expand(4, -1), atol=1e-5))
        outputs = {}
        for kernel in ("eager", "sdpa"):
            kernel_config = BertConfig(**{**config.to_dict(), "attn_implementation": kernel})
            bert = BertModel(kernel_config).eval()
            bert.load_state_dict(model.state_dict())  # the same weights, another kernel
            self_attention = bert.encoder.layer[0].attention.self
            self_attention.register_forward_hook(lambda module, args, out, kernel=kernel: outputs.__setitem__(kernel, out[0]))
            with torch.no_grad():
                bert(torch.tensor([[5, 6, 7, 8], [0, 0, 0, 0]]), attention_mask=all_padding)
            print(f"{kernel:>5}: the padding-only sample's largest |output| {outputs[kernel][1].abs().max().item():.4f}")
        """),
        graded_cell("bert"),
        md(r"""
        ## 5. Pitfalls

        - **`-inf` versus `finfo.min`**: equal on ordinary rows; on a row of padding only, NaN versus equal
          weights. The library's outputs are finite there.
        - **The dtype**: `finfo(dtype).min` of the scores' dtype; float32's overflows in float16.
        - **The shape**: `[B, 1, 1, S]` masks *keys* (the last axis of the scores); `[B, 1, S, 1]` would mask
          queries, and `[B, S, 1]` lines `B` up with the heads: an error unless `B` equals `H`, silently wrong when
          it does (the cell below prints both).
        - **The direction**: 1 in `attention_mask` is a real token and adds 0.
        - **No causal mask**: BERT is an encoder.
        - **The same mask twice**: `finfo.min + finfo.min` is `-inf`, and a sample of padding only becomes NaN;
          combine masks as booleans and add `finfo.min` once.
        """, r"""
        ## 5. 常见错误

        - **`-inf` 与 `finfo.min`**：普通的行上两者相同；全是填充的行上，一个得到 NaN，一个得到相等的权重。库在那里的输出是有限的。
        - **dtype**：用分数的 dtype 的 `finfo(dtype).min`；float32 的那个值放到 float16 里会溢出。
        - **形状**：`[B, 1, 1, S]` 屏蔽的是*键*（分数的最后一维）；`[B, 1, S, 1]` 屏蔽的会是查询，而 `[B, S, 1]` 会让 `B` 与头的维度对齐：`B` 不等于 `H` 时报错，相等时悄悄算错（下面的单元格把两种情况都打印出来）。
        - **方向**：`attention_mask` 里的 1 是真实 token，加 0。
        - **没有因果掩码**：BERT 是编码器。
        - **同一个掩码加两次**：`finfo.min + finfo.min` 等于 `-inf`，全是填充的样本会变成 NaN；先把掩码按布尔值合并，再只加一次 `finfo.min`。
        """),
        demo("""
        for B, H in ((2, 3), (3, 3)):
            scores = torch.zeros(B, H, 4, 4)  # [B, H, S_q, S_k]
            for shape in ([B, 1, 1, 4], [B, 1, 4, 1], [B, 4, 1]):
                try:
                    print(f"B={B}, H={H}: scores + mask {shape} -> {list((scores + torch.zeros(shape)).shape)}")
                except RuntimeError as error:
                    print(f"B={B}, H={H}: scores + mask {shape} -> RuntimeError: {str(error).splitlines()[0][:60]}")
        """),
    ]


# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    '"BERT\'s attention block, built from the configuration:"': '"由配置构造出的 BERT 注意力块："',
    '"q, split into heads"': '"q，拆成多头"',
    "# 4.x computes them in the layer": "# 4.x 在层里直接计算分数",
    '"the scale"': '"缩放"',
    '"scores"': '"分数"',
    '"mask added"': '"加上掩码"',
    '"softmax over the keys"': '"在键上做 softmax"',
    '"merge heads"': '"合并各头"',
    "# runs before the self-attention's forward: keep the mask it receives":
        "# 在自注意力的 forward 之前运行：记下它收到的掩码",
    "# 0 = padding": "# 0 = 填充",
    "# [B, S]: 1 = real token": "# [B, S]：1 = 真实 token",
    '"attention_mask given to the model:"': '"传给模型的 attention_mask："',
    '"the mask the self-attention gets:  "': '"自注意力收到的掩码：       "',
    '"values"': '"取值"',
    "# one query's scores over 4 keys": "# 一个查询在 4 个键上的分数",
    "# key 3 is padding": "# 键 3 是填充",
    '"key 3 padded, + finfo.min:  "': '"键 3 是填充，+ finfo.min：  "',
    '"key 3 padded, -inf:         "': '"键 3 是填充，-inf：         "',
    '"every key padded, + finfo.min:"': '"所有键都是填充，+ finfo.min："',
    '"every key padded, -inf:       "': '"所有键都是填充，-inf：       "',
    '"float32\'s finfo.min stored as float16:"': '"float32 的 finfo.min 存成 float16："',
    '"  float16\'s own finfo.min:"': '"  float16 自己的 finfo.min："',
    "# [d_model]: equal weights on the 4 keys of sample 1": "# [d_model]：样本 1 的 4 个键权重相等",
    "# the same weights, another kernel": "# 同样的权重，换一种算子",
    ": scores + mask {shape} -> ": "：分数 + 掩码 {shape} -> ",
    'f"{kernel:>5}: the padding-only sample\'s largest |output| {': 'f"{kernel:>5}：全是填充的样本，最大 |输出| {',
    "# [S_q, S_k]: True = hidden": "# [S_q, S_k]：True = 被屏蔽",
    "# every padding pattern of length S": "# 长度为 S 的每一种填充模式",
    '"rows whose every key is hidden by both the causal and the padding mask, S <= 6:"':
        '"所有键都被因果掩码和填充掩码同时屏蔽的行数（S <= 6）："',
    "# a sample of padding only: every key hidden": "# 全是填充的样本：每个键都被屏蔽",
    '"padding only, mask added once: "': '"全是填充，掩码加一次："',
    '"padding only, mask added twice:"': '"全是填充，掩码加两次："',
    '"sample 1 finite:"': '"样本 1 是有限值："',
    '"  every query = mean of the values:"': '"  每个查询 = 值的平均："',
}
