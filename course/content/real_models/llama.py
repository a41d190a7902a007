"""Notebook 03 of `real_models`: Llama's attention, its half-split RoPE and the row permutation of W_q and W_k."""
from course.cells import REPO, Cell, check, demo, graded_cell, md, recipe, setup, solution, solution_source
from course.content.generation import decoder
from course.content.written import written_cells

NAME = "03_llama"

# generation's pieces that from_hf_llama's layer needs (stubs in the release: paste your own from `generation`)
PIECES = ("apply_rope", "decode_causal_mask", "repeat_kv", "DecoderAttention")
# the layer's pieces as this assignment's reference writes them (generation's reference holds them too)
REFERENCE = REPO / "solutions" / "real_models.py"
_PASTE = ("paste your own from the `generation` assignment (its 04_decoder notebook holds all of them).",
          "把你在 `generation` 作业里写好的版本粘贴过来（它的 04_decoder notebook 里全都有）。")

HINTS = {
    **{name: _PASTE for name in ("apply_rope", "decode_causal_mask", "repeat_kv", "DecoderAttention.__init__",
                                 "DecoderAttention.forward")},
    "interleaved_to_half_split": (
        "each head is a block of head_dim rows; inside it, row 2i + j (pair i, member j) moves to row\n"
        "j * head_dim / 2 + i. A view that names (pair, member) and a transpose of the two do it.",
        "每个头是 head_dim 行组成的一块；在块内，第 2i + j 行（第 i 对的第 j 个成员）移到第\n"
        "j * head_dim / 2 + i 行。用一个能区分（对, 成员）的 view，再交换这两个维度即可。",
    ),
    "half_split_to_interleaved": (
        "the inverse: view the rows of each head as (member, pair) and swap the two back.",
        "逆操作：把每个头的行看成（成员, 对），再把这两个维度换回来。",
    ),
    "rope_inv_freq": (
        "base^(-2i / head_dim) first; for rope_type llama3, each frequency's wavelength 2 pi / f decides:\n"
        "longer than original / low_freq_factor: f / factor; shorter than original / high_freq_factor: f; between: a blend.",
        "先算 base^(-2i / head_dim)；rope_type 为 llama3 时，由每个频率的波长 2 pi / f 决定：\n"
        "比 original / low_freq_factor 长：f / factor；比 original / high_freq_factor 短：f 不变；介于两者之间：平滑过渡。",
    ),
    "from_hf_llama": (
        "build your layer from attn.config's sizes and attn.head_dim; W_q and W_k need their rows back in neighbour\n"
        "pairs (each with its own number of heads), W_v and W_o are copied as they are; rope_base or inv_freq.",
        "用 attn.config 里的尺寸和 attn.head_dim 构造你的层；W_q 和 W_k 要把行换回相邻配对的顺序\n"
        "（各自用自己的头数），W_v 和 W_o 原样复制；传入 rope_base 或 inv_freq。",
    ),
}

RECIPES = {
    "interleaved_to_half_split": (
        """
        1. `out_features, d_in = weight.shape`; `head_dim = out_features // num_heads`.
        2. `weight.view(num_heads, head_dim // 2, 2, d_in)`: `[head, pair i, member j, d_in]`.
        3. `.transpose(1, 2)`: `[head, member j, pair i, d_in]`, then `.reshape(out_features, d_in)`.
        4. `half_split_to_interleaved`: `view(num_heads, 2, head_dim // 2, d_in)`, the same transpose, reshape.
        """,
        """
        1. `out_features, d_in = weight.shape`；`head_dim = out_features // num_heads`。
        2. `weight.view(num_heads, head_dim // 2, 2, d_in)`：`[头, 第 i 对, 第 j 个成员, d_in]`。
        3. `.transpose(1, 2)`：`[头, 第 j 个成员, 第 i 对, d_in]`，再 `.reshape(out_features, d_in)`。
        4. `half_split_to_interleaved`：`view(num_heads, 2, head_dim // 2, d_in)`，同样的 transpose，再 reshape。
        """,
    ),
    "rope_inv_freq": (
        """
        1. The base: `config.rope_parameters["rope_theta"]` in 5.x, `config.rope_theta` in 4.x; the scaling dictionary:
           `config.rope_parameters` in 5.x, `config.rope_scaling` in 4.x (None for the default).
        2. `head_dim = config.head_dim` when set, else `hidden_size // num_attention_heads`;
           `inv_freq = 1 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)`.
        3. For `rope_type == "llama3"`: `wavelen = 2 * math.pi / inv_freq`; long (`> original / low`): `inv_freq / factor`;
           short (`< original / high`): kept; between: `smooth = (original / wavelen - low) / (high - low)` and
           `(1 - smooth) * inv_freq / factor + smooth * inv_freq`.
        """,
        """
        1. 基数：5.x 是 `config.rope_parameters["rope_theta"]`，4.x 是 `config.rope_theta`；缩放字典：5.x 是
           `config.rope_parameters`，4.x 是 `config.rope_scaling`（默认情况下为 None）。
        2. 配置里设了 `config.head_dim` 就用它，否则 `hidden_size // num_attention_heads`；
           `inv_freq = 1 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)`。
        3. 当 `rope_type == "llama3"`：`wavelen = 2 * math.pi / inv_freq`；长波长（`> original / low`）：`inv_freq / factor`；
           短波长（`< original / high`）：不变；介于之间：`smooth = (original / wavelen - low) / (high - low)`，
           取 `(1 - smooth) * inv_freq / factor + smooth * inv_freq`。
        """,
    ),
    "from_hf_llama": (
        """
        1. `config = attn.config`; `H, H_kv = config.num_attention_heads, config.num_key_value_heads`.
        2. `layer = DecoderAttention(attn.q_proj.in_features, H, H_kv, rope_base=..., head_dim=attn.head_dim,
           inv_freq=inv_freq)` (your `DecoderAttention` needs the two keywords of the second edition).
        3. Under `torch.no_grad()`: `layer.W_q.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, H))`,
           the same for `W_k` with `H_kv`, and `W_v`, `W_o` from `v_proj`, `o_proj` unchanged. Return `layer`.
        """,
        """
        1. `config = attn.config`；`H, H_kv = config.num_attention_heads, config.num_key_value_heads`。
        2. `layer = DecoderAttention(attn.q_proj.in_features, H, H_kv, rope_base=..., head_dim=attn.head_dim,
           inv_freq=inv_freq)`（你的 `DecoderAttention` 需要第二版新增的这两个关键字参数）。
        3. 在 `torch.no_grad()` 下：`layer.W_q.weight.copy_(half_split_to_interleaved(attn.q_proj.weight, H))`，
           `W_k` 同理但用 `H_kv`，`W_v`、`W_o` 原样取自 `v_proj`、`o_proj`。返回 `layer`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    **{name: text for name, text in decoder.DOCSTRINGS_ZH.items() if name.split(".")[0] in PIECES},
    "interleaved_to_half_split": """[num_heads * head_dim, d_in]，每个头的行按相邻配对排列（Meta）-> 按前后半配对排列（库）。""",
    "half_split_to_interleaved": """[num_heads * head_dim, d_in]，每个头的行按前后半配对排列（库）-> 按相邻配对排列（Meta）；前者的逆。""",
    "rope_inv_freq": """库的 LlamaRotaryEmbedding 对 `config` 使用的旋转频率 [head_dim // 2]（float32）：rope_type 为 "default"（base^(-2i / head_dim)）或 "llama3"（Llama 3.1：长波长除以 `factor`，短波长不变，两个阈值之间平滑过渡）。库把基数和缩放参数放在 5.x 的 `config.rope_parameters` 里，4.x 则是 `config.rope_theta` 和 `config.rope_scaling`。""",
    "from_hf_llama": """从 transformers 的 LlamaAttention `attn` 加载你的 DecoderAttention：W_q 和 W_k 的行换回相邻配对的顺序；head_dim 取自模块（可能不等于 hidden_size / num_heads）；用 `rope_base` 旋转，或者改为给定的频率 `inv_freq` [head_dim / 2]（rope_inv_freq(config)：Llama 3.1 及以后）。""",
}


def layer_cell() -> Cell:
    """The solution cell of from_hf_llama: first the pieces of `generation` that its layer is made of, DecoderAttention
    last (stubs in the release: paste your own), then from_hf_llama."""
    meta = {"solution": True, "grade": False, "locked": False, "grade_id": "solution_from_hf_llama",
            "schema_version": 3}

    def source(lang):
        return "\n\n\n".join(solution_source(name, HINTS, lang, REFERENCE) for name in (*PIECES, "from_hf_llama"))

    return Cell("code", source("en"), role="solution", nbgrader=meta, zh=source("zh"))


def cells():
    return [
        md(r"""
        # 03 · Llama: half-split RoPE and the permutation of `W_q` and `W_k`

        The third notebook of **your attention inside real models**. Your `DecoderAttention` of `generation`
        is a Llama layer: RoPE, grouped-query heads, a KV cache. Meta's Llama checkpoints rotate *neighbouring*
        pairs of features, $(x_{2i}, x_{2i+1})$, as your `apply_rope` does; the library's `LlamaAttention` rotates
        *half-split* pairs, $(x_i, x_{i + \text{head\_dim}/2})$. Every conversion of Meta's weights to the library
        therefore reorders the rows of `W_q` and `W_k` inside each head. You write that reordering both ways, then
        load the library's layer into yours and generate with it.

        | part | functions | what it does |
        |---|---|---|
        | `rope_permutation` | `interleaved_to_half_split`, `half_split_to_interleaved`, `rope_inv_freq` | the rows of each head, from one pairing to the other; Llama 3.1's frequencies |
        | `llama` | `from_hf_llama` | your decoder layer, loaded from the library's `LlamaAttention` |
        """, r"""
        # 03 · Llama：前后半配对的 RoPE 与 `W_q`、`W_k` 的行置换

        **真实模型里的注意力** 的第三个 notebook。你在 `generation` 里写的 `DecoderAttention` 就是一个 Llama 层：RoPE、分组查询的多头、KV 缓存。Meta 的 Llama checkpoint 旋转的是*相邻*的特征对 $(x_{2i}, x_{2i+1})$，和你的 `apply_rope` 一样；库的 `LlamaAttention` 旋转的是*前后半*配对 $(x_i, x_{i + \text{head\_dim}/2})$。所以每次把 Meta 的权重转换到库里，都要在每个头内部重排 `W_q` 和 `W_k` 的行。你要写出双向的重排，再把库的层加载进你的层，并用它来生成。

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `rope_permutation` | `interleaved_to_half_split`, `half_split_to_interleaved`, `rope_inv_freq` | 每个头的行，从一种配对换到另一种；Llama 3.1 的频率 |
        | `llama` | `from_hf_llama` | 从库的 `LlamaAttention` 加载你的解码器层 |
        """),
        setup(),
        md(r"""
        ## 1. The library's rotation

        Three pieces of `modeling_llama`: `LlamaRotaryEmbedding` computes the cosines and sines of the angles
        $m \theta_i$ for the positions it is given, `rotate_half` builds the partner of every feature, and
        `apply_rotary_pos_emb` combines them. Read the three:
        """, r"""
        ## 1. 库里的旋转

        `modeling_llama` 里的三段代码：`LlamaRotaryEmbedding` 为给定的位置计算角度 $m \theta_i$ 的余弦和正弦，`rotate_half` 为每个特征构造它的搭档，`apply_rotary_pos_emb` 把两者组合起来。把这三段读一遍：
        """),
        demo("""
        import transformers
        from transformers import LlamaConfig
        from transformers.models.llama import modeling_llama
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

        print("transformers", transformers.__version__)
        show_source(modeling_llama.rotate_half)
        print()
        show_source(modeling_llama.apply_rotary_pos_emb)
        print()
        show_lines(LlamaRotaryEmbedding, {"angles m * theta_i": ("position_ids[..., None].float()",
                                                                 "position_ids[:, None, :].float()"),
                                          "angles -> head_dim": "torch.cat((freqs, freqs), dim=-1)"})
        """),
        md(r"""
        `torch.cat((freqs, freqs), dim=-1)` writes the `head_dim / 2` angles twice, so feature $i$ and feature
        $i + \text{head\_dim}/2$ share an angle, and `rotate_half` pairs exactly those two:
        $x \cos + \text{rotate\_half}(x) \sin$ turns the pair $(x_i, x_{i+\text{head\_dim}/2})$ by $m \theta_i$.
        The cell prints the cosines the library gives one position:
        """, r"""
        `torch.cat((freqs, freqs), dim=-1)` 把 `head_dim / 2` 个角度写了两遍，于是特征 $i$ 与特征 $i + \text{head\_dim}/2$ 共用一个角度，而 `rotate_half` 配对的正是这两个：$x \cos + \text{rotate\_half}(x) \sin$ 把 $(x_i, x_{i+\text{head\_dim}/2})$ 这一对旋转 $m \theta_i$。单元格打印库为某一个位置给出的余弦：
        """),
        demo("""
        torch.manual_seed(0)
        rope_base = 500.0
        config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                             intermediate_size=64, vocab_size=50, rope_theta=rope_base, attn_implementation="eager")
        rotary = LlamaRotaryEmbedding(config)
        x = torch.randn(1, 3, 32)  # [B, S, d_model]
        cos, sin = rotary(x, torch.tensor([[0, 1, 2]]))  # [B, S, head_dim]
        head_dim = 32 // 4
        print("head_dim", head_dim, "  cos at position 1:", [round(c, 4) for c in cos[0, 1].tolist()])
        print("the same as cos(1 * theta_i), i = 0..3, twice:",
              [round(math.cos(rope_base ** (-2 * i / head_dim)), 4) for i in range(head_dim // 2)])
        """),
        md(r"""
        ## 2. One model, two orders of features

        Within one head, a query is a vector of `head_dim` features, the rows of `W_q` that belong to the head.
        Their order is a *convention*: a score $q \cdot k$ is a sum over features, so it does not change if the
        features of $q$ and $k$ are reordered the same way. What RoPE needs is that the two features it turns
        together are the ones the model was trained to turn together. Meta trained with neighbours $(2i, 2i+1)$;
        the library turns $(i, i + \text{head\_dim}/2)$. So the conversion moves, inside every head,

        $$\text{Meta's row } 2i \;\to\; \text{row } i, \qquad \text{Meta's row } 2i + 1 \;\to\; \text{row } i + \text{head\_dim}/2,$$

        for `W_q` (with its `num_heads` heads) and `W_k` (with its `num_key_value_heads`). `W_v` and `W_o` are not
        touched: the values are never rotated. The rows of different heads never mix.
        """, r"""
        ## 2. 同一个模型，两种特征顺序

        在一个头内部，查询是一个 `head_dim` 维的向量，对应 `W_q` 里属于这个头的那些行。它们的顺序只是一种*约定*：分数 $q \cdot k$ 是对各特征求和，只要 $q$ 和 $k$ 的特征按同样的方式重排，分数就不变。RoPE 需要的是：它一起旋转的两个特征，正是模型训练时一起旋转的那两个。Meta 训练时用的是相邻配对 $(2i, 2i+1)$；库旋转的是 $(i, i + \text{head\_dim}/2)$。所以转换时要在每个头内部做如下移动：

        $$\text{Meta 的第 } 2i \text{ 行} \;\to\; \text{第 } i \text{ 行}, \qquad \text{Meta 的第 } 2i + 1 \text{ 行} \;\to\; \text{第 } i + \text{head\_dim}/2 \text{ 行},$$

        `W_q` 按它的 `num_heads` 个头处理，`W_k` 按它的 `num_key_value_heads` 个头处理。`W_v` 和 `W_o` 不动：值从来不旋转。不同头的行永远不会混在一起。
        """),
        md(r"""
        Now the permutation, both ways, for a projection `[num_heads * head_dim, d_in]`. The first check feeds rows
        numbered 0 to 15 (two heads of 8) and reads their new order; the second runs the round trip and compares the
        scores $q \cdot k$ after RoPE on Meta's weights with neighbour pairs against those on your converted weights
        with the library's pairs.
        """, r"""
        现在来写双向的置换，作用于投影 `[num_heads * head_dim, d_in]`。第一个检查输入编号为 0 到 15 的行（两个头，各 8 行），读出它们的新顺序；第二个检查跑一遍往返，再比较两种分数 $q \cdot k$：Meta 的权重配相邻配对的 RoPE，以及你转换后的权重配库的配对。
        """),
        recipe("interleaved_to_half_split", RECIPES),
        solution("interleaved_to_half_split", HINTS),
        check("check_interleaved_to_half_split(interleaved_to_half_split)", "check_interleaved_to_half_split"),
        solution("half_split_to_interleaved", HINTS),
        check("check_rope_permutation(interleaved_to_half_split, half_split_to_interleaved)", "check_rope_permutation"),
        md(r"""
        ## 2b. The frequencies of the Llamas people run

        One base gives every pair its frequency $\theta_i = \text{base}^{-2i/\text{head\_dim}}$. Llama 3.1 and
        later (`rope_type="llama3"` in the configuration) stretch the context they were trained on by changing the
        *low* frequencies only: a pair whose wavelength $2\pi / \theta_i$ is longer than
        `original_max_position_embeddings / low_freq_factor` turns `factor` times slower, a pair whose wavelength is
        shorter than `original_max_position_embeddings / high_freq_factor` keeps its frequency, and the pairs in
        between blend smoothly. No single base expresses that, which is why `from_hf_llama` now also takes the
        frequencies themselves (`inv_freq`). The cell draws the library's frequencies for a Llama 3.1-style
        configuration against the plain ones and prints their ratio:
        """, r"""
        ## 2b. 实际使用的 Llama 的频率

        一个基数就给每一对定下了频率 $\theta_i = \text{base}^{-2i/\text{head\_dim}}$。Llama 3.1 及以后的模型（配置里 `rope_type="llama3"`）为了把训练时的上下文拉长，只改*低*频：波长 $2\pi / \theta_i$ 比 `original_max_position_embeddings / low_freq_factor` 长的那些对，转速慢 `factor` 倍；波长比 `original_max_position_embeddings / high_freq_factor` 短的对，频率不变；介于两者之间的平滑过渡。没有哪个单一的基数能表达这一点，所以 `from_hf_llama` 现在也可以直接接收频率本身（`inv_freq`）。单元格把库为 Llama 3.1 式配置给出的频率和普通频率画在一起，并打印两者之比：
        """),
        demo("""
        import matplotlib.pyplot as plt

        llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}
        sizes = dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_hidden_layers=1,
                     intermediate_size=64, vocab_size=50)
        if hasattr(LlamaConfig(), "rope_parameters"):  # 5.x keeps the base and the scaling in rope_parameters
            config31 = LlamaConfig(**sizes, rope_parameters={**llama3, "rope_theta": 500000.0})
        else:  # 4.x: rope_theta and rope_scaling
            config31 = LlamaConfig(**sizes, rope_theta=500000.0, rope_scaling=llama3)
        scaled = LlamaRotaryEmbedding(config31).inv_freq
        plain_freq = 500000.0 ** (-torch.arange(0, 16, 2).float() / 16)
        print("inv_freq / base^(-2i/d):", [round(r, 3) for r in (scaled / plain_freq).tolist()])
        plt.figure(figsize=(6, 3))
        plt.semilogy(plain_freq.numpy(), "o-", label="base^(-2i/d)")
        plt.semilogy(scaled.numpy(), "s--", label="llama3")
        plt.xlabel("pair i")
        plt.ylabel("frequency")
        plt.legend()
        plt.show()
        """),
        md(r"""
        `rope_inv_freq(config)` returns the frequencies the library's `LlamaRotaryEmbedding` uses, for
        `rope_type` `"default"` and `"llama3"`, read from the configuration where your installed version keeps
        them (`rope_parameters` in 5.x; `rope_theta` and `rope_scaling` in 4.x), with `head_dim` from
        `config.head_dim` when it is set. It belongs to the part `rope_permutation`.
        """, r"""
        `rope_inv_freq(config)` 返回库的 `LlamaRotaryEmbedding` 使用的频率，支持 `rope_type` 为 `"default"` 和 `"llama3"`，从你安装的版本存放它们的位置读取（5.x 是 `rope_parameters`；4.x 是 `rope_theta` 和 `rope_scaling`），配置里设了 `config.head_dim` 就用它。它属于评分部分 `rope_permutation`。
        """),
        recipe("rope_inv_freq", RECIPES),
        solution("rope_inv_freq", HINTS),
        check("check_rope_inv_freq(rope_inv_freq)", "check_rope_inv_freq"),
        graded_cell("rope_permutation"),
        md(r"""
        ## 3. Reading `LlamaAttention.forward`

        The layer on your machine, then each of your layer's steps found in it (and in the file's
        `eager_attention_forward` and `repeat_kv`):

        | your `DecoderAttention` | the library's line |
        |---|---|
        | `W_q(x).view(B, S, H, head_dim).transpose(1, 2)` | `self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)` |
        | `apply_rope(q, positions)`, `apply_rope(k, positions)` | `apply_rotary_pos_emb(query_states, key_states, cos, sin)`: the angles come in, computed once per forward by the model |
        | `cache.append(k, v)`: rotated keys, values | `update(key_states, value_states, ...)`, after RoPE: the cache stores rotated keys too |
        | `repeat_kv(k, H // H_kv)` | `repeat_kv(key, module.num_key_value_groups)`: copies of a head next to each other |
        | `/ math.sqrt(head_dim)`, the mask | `* scaling`, `+ attention_mask` (additive, `finfo.min`) |
        | softmax | `softmax(attn_weights, dim=-1, dtype=torch.float32)`: in float32 even for half-precision models |
        | `W_o` | `self.o_proj(attn_output)` |
        """, r"""
        ## 3. 读 `LlamaAttention.forward`

        先看你机器上的这个层，再在其中（以及同一文件的 `eager_attention_forward` 和 `repeat_kv` 里）找出你的层的每一步：

        | 你的 `DecoderAttention` | 库的代码行 |
        |---|---|
        | `W_q(x).view(B, S, H, head_dim).transpose(1, 2)` | `self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)` |
        | `apply_rope(q, positions)`、`apply_rope(k, positions)` | `apply_rotary_pos_emb(query_states, key_states, cos, sin)`：角度是传进来的，由模型在每次前向计算中算一次 |
        | `cache.append(k, v)`：旋转后的键、值 | `update(key_states, value_states, ...)`，在 RoPE 之后：缓存里存的也是旋转后的键 |
        | `repeat_kv(k, H // H_kv)` | `repeat_kv(key, module.num_key_value_groups)`：同一个头的副本彼此相邻 |
        | `/ math.sqrt(head_dim)`、掩码 | `* scaling`、`+ attention_mask`（加性，`finfo.min`） |
        | softmax | `softmax(attn_weights, dim=-1, dtype=torch.float32)`：即使是半精度模型也用 float32 |
        | `W_o` | `self.o_proj(attn_output)` |
        """),
        demo("""
        show_source(LlamaAttention.forward)
        print()
        show_lines([LlamaAttention, modeling_llama.eager_attention_forward, modeling_llama.repeat_kv], {
            "split into heads (q)": "self.q_proj(hidden_states).view(",
            "RoPE on q and k": "apply_rotary_pos_emb(query_states, key_states",
            "what the cache stores": "update(key_states, value_states",
            "kv heads for GQA": "repeat_kv(key, module.num_key_value_groups)",
            "copies side by side": "hidden_states[:, :, None, :, :].expand(",
            "the scale": "self.scaling = self.head_dim**-0.5",
            "mask added": "attn_weights = attn_weights + ",
            "softmax in float32": "softmax(attn_weights, dim=-1, dtype=torch.float32)",
            "output projection": "self.o_proj(attn_output)",
        })
        """),
        md(r"""
        ## 4. Your layer, loaded from the library's

        `from_hf_llama(attn, rope_base=None, inv_freq=None)` returns your `DecoderAttention` with the library
        layer's weights: `W_q` and `W_k` back to neighbour pairs with `half_split_to_interleaved` (each with its own
        number of heads), `W_v` and `W_o` as they are. Exactly one of `rope_base` and `inv_freq` is given: the base
        is passed in because the library keeps it in a place that changed between versions
        (`config.rope_parameters["rope_theta"]` in 5.x, `config.rope_theta` in 4.x), and `inv_freq` (your
        `rope_inv_freq(config)`) for the Llamas no base describes. `head_dim` comes from the module (`attn.head_dim`):
        it may differ from `hidden_size / num_heads` (notebook `04_interface`), so `W_q` is `[H * head_dim, d_model]`
        and `W_o` `[d_model, H * head_dim]`.

        The check compares your layer with `LlamaAttention` at positions *with gaps* (RoPE depends only on
        $m - n$: a layer that ignores the positions it is given passes any test whose positions are evenly
        shifted) and with left padding, then decodes a few tokens greedily with a KV cache against the library's
        layer rerun on the whole sequence at every step.

        The solution cell starts with the pieces your layer is made of in `generation` (`apply_rope` on neighbour
        pairs, `decode_causal_mask`, `repeat_kv`, `DecoderAttention`): paste yours over the stubs, or write them
        again; `from_hf_llama` comes last. The cache is not among them: the checks and the grader hand your layer a
        cache of their own (`append` and `len`, as your `KVCache`), and pass `positions`, `cache` and `key_mask` by
        name, so the order of `forward`'s arguments in your `generation` version does not matter. These pieces were
        graded in `generation`; here they count only through what `from_hf_llama`'s layer computes.
        """, r"""
        ## 4. 从库的层加载你的层

        `from_hf_llama(attn, rope_base=None, inv_freq=None)` 返回装有库层权重的你的 `DecoderAttention`：`W_q` 和 `W_k` 用 `half_split_to_interleaved` 换回相邻配对（各自用自己的头数），`W_v` 和 `W_o` 原样复制。`rope_base` 和 `inv_freq` 恰好给出其中一个：基数作为参数传入，因为库存放它的位置在不同版本之间变过（5.x 是 `config.rope_parameters["rope_theta"]`，4.x 是 `config.rope_theta`）；`inv_freq`（你的 `rope_inv_freq(config)`）用于没有哪个基数能描述的 Llama。`head_dim` 取自模块（`attn.head_dim`）：它可能不等于 `hidden_size / num_heads`（见 notebook `04_interface`），于是 `W_q` 是 `[H * head_dim, d_model]`，`W_o` 是 `[d_model, H * head_dim]`。

        检查会在*带间隔*的位置上（RoPE 只依赖 $m - n$：一个忽略了传入位置的层，能通过任何位置整体平移的测试）和左侧填充的情况下比较你的层与 `LlamaAttention`，然后用 KV 缓存贪心解码几个 token，与每一步都在整个序列上重新运行的库层对比。

        solution 单元格开头是 `generation` 里组成你这一层的各个部件（相邻配对的 `apply_rope`、`decode_causal_mask`、`repeat_kv`、`DecoderAttention`）：把你自己的版本粘贴到这些桩代码上，或者重新写一遍；`from_hf_llama` 在最后。缓存不在其中：检查和自动评分器会给你的层一个它们自己的缓存（有 `append` 和 `len`，和你的 `KVCache` 一样），并且按参数名传入 `positions`、`cache` 和 `key_mask`，所以你在 `generation` 里写的 `forward` 参数顺序不影响结果。这些部件已经在 `generation` 里评过分；在这里，它们只通过 `from_hf_llama` 返回的层算出的结果来体现。
        """),
        recipe("from_hf_llama", RECIPES),
        layer_cell(),
        check("check_from_hf_llama(from_hf_llama)", "check_from_hf_llama"),
        md(r"""
        The next check loads a layer as current Llamas are configured: `head_dim` 12 set apart from
        `hidden_size / num_heads` (24 / 3 = 8), one key/value head, and Llama 3.1's frequencies, passed as `inv_freq`
        (the library's own, so that this check does not depend on your `rope_inv_freq`).
        """, r"""
        下一个检查按现在的 Llama 的配置方式加载一层：`head_dim` 设为 12，不等于 `hidden_size / num_heads`（24 / 3 = 8），只有一个键/值头，并把 Llama 3.1 的频率作为 `inv_freq` 传入（用的是库自己的频率，所以这个检查不依赖你的 `rope_inv_freq`）。
        """),
        check("check_from_hf_llama_current(from_hf_llama)", "check_from_hf_llama_current"),
        md(r"""
        Your layer's `forward`, to read beside the library's `LlamaAttention.forward` of section 3: the rotation
        where it calls `apply_rotary_pos_emb`, your cache where it calls `update`, your `repeat_kv` where its
        `eager_attention_forward` calls its own.
        """, r"""
        你的层的 `forward`，和第 3 节里库的 `LlamaAttention.forward` 对照着读：库调用 `apply_rotary_pos_emb` 的地方是你的旋转，库调用 `update` 的地方是你的缓存，库的 `eager_attention_forward` 调用它自己的 `repeat_kv` 的地方是你的 `repeat_kv`。
        """),
        demo("""
        import inspect

        print("your DecoderAttention.forward:")
        print(inspect.getsource(DecoderAttention.forward))
        """),
        md(r"""
        With your functions, the cell takes Meta-layout weights of one layer (4 query heads, 2 key/value heads)
        and computes the scores after RoPE at positions with gaps: Meta's way (your `apply_rope`), and the
        library's way (its `apply_rotary_pos_emb`) on weights converted correctly, the wrong way, or not at all.
        Then the values: permuting `W_v` too changes the layer's output, since nothing turns the values back.
        """, r"""
        这个单元格用你的函数，取一层 Meta 布局的权重（4 个查询头，2 个键/值头），在带间隔的位置上计算 RoPE 之后的分数：Meta 的方式（你的 `apply_rope`），以及库的方式（它的 `apply_rotary_pos_emb`），后者分别用正确转换、反向转换和完全不转换的权重。然后看值：把 `W_v` 也置换，层的输出就变了，因为没有任何东西会把值换回来。
        """),
        demo("""
        torch.manual_seed(1)
        H, H_kv, head_dim, d_model = 4, 2, 8, 32
        scale = d_model ** -0.5  # weights of a trained model's size: scores of a few units
        W_q, W_k = scale * torch.randn(H * head_dim, d_model), scale * torch.randn(H_kv * head_dim, d_model)  # Meta's layout
        W_v, W_o = scale * torch.randn(H_kv * head_dim, d_model), scale * torch.randn(d_model, H * head_dim)
        x, positions = torch.randn(1, 5, d_model), torch.tensor([[0, 3, 4, 40, 41]])  # [B, S, d_model], [B, S]


        def heads(x, W, n):  # [B, S, d_model] -> [B, n, S, head_dim]
            return (x @ W.T).view(1, 5, n, head_dim).transpose(1, 2)


        def library_scores(W_q, W_k):  # half-split pairs, as LlamaAttention rotates them
            cos, sin = rotary(x, positions)
            q, k = modeling_llama.apply_rotary_pos_emb(heads(x, W_q, H), heads(x, W_k, H_kv), cos, sin)
            return q @ repeat_kv(k, H // H_kv).transpose(-2, -1)  # [B, H, S, S]


        with torch.no_grad(), uses_your_code():
            q, k = apply_rope(heads(x, W_q, H), positions[0], rope_base), apply_rope(heads(x, W_k, H_kv), positions[0], rope_base)
            meta = q @ repeat_kv(k, H // H_kv).transpose(-2, -1)  # neighbour pairs, Meta's weights
            converted = library_scores(interleaved_to_half_split(W_q, H), interleaved_to_half_split(W_k, H_kv))
            backwards = library_scores(half_split_to_interleaved(W_q, H), half_split_to_interleaved(W_k, H_kv))
            unconverted = library_scores(W_q, W_k)
            print(f"largest |score| {meta.abs().max().item():.3f}")
            print(f"converted W_q, W_k -> off by up to {(converted - meta).abs().max().item():.1e}")
            print(f"converted the wrong way -> off by up to {(backwards - meta).abs().max().item():.3f}")
            print(f"not converted -> off by up to {(unconverted - meta).abs().max().item():.3f}")
            weights = torch.softmax(meta / math.sqrt(head_dim), dim=-1)  # [B, H, S, S]


            def output(W_v):  # the weighted values, heads merged, W_o: [B, S, d_model]
                out = weights @ repeat_kv(heads(x, W_v, H_kv), H // H_kv)
                return out.transpose(1, 2).reshape(1, 5, H * head_dim) @ W_o.T


            moved = (output(interleaved_to_half_split(W_v, H_kv)) - output(W_v)).abs().max().item()
            print(f"W_v permuted as well: the output moves by up to {moved:.3f}")
        """),
        md(r"""
        What the permutation is worth: the cell loads the same library layer with your `from_hf_llama` and with a
        plain copy of `q_proj` and `k_proj`, and prints how far each is from the library's output.
        """, r"""
        置换到底有多重要：单元格用你的 `from_hf_llama` 和直接复制 `q_proj`、`k_proj` 两种方式加载同一个库层，并打印两者与库的输出分别相差多少。
        """),
        demo("""
        torch.manual_seed(2)
        attn = LlamaAttention(config, layer_idx=0).eval()
        x = torch.randn(2, 6, 32)  # [B, S, d_model]
        positions = torch.tensor([[0, 1, 2, 5, 9, 10], [3, 4, 8, 9, 11, 20]])  # [B, S], with gaps
        S = x.shape[1]
        causal = library_mask(torch.ones(1, 1, S, S, dtype=torch.bool).tril())  # [1, 1, S, S], additive
        with torch.no_grad(), uses_your_code():
            want = attn(x, position_embeddings=rotary(x, positions), attention_mask=causal)[0]
            layer = from_hf_llama(attn, rope_base).eval()
            plain = from_hf_llama(attn, rope_base).eval()
            plain.W_q.weight.copy_(attn.q_proj.weight)  # the library's rows as they are: wrong pairs
            plain.W_k.weight.copy_(attn.k_proj.weight)
            print(f"from_hf_llama -> off by up to {(layer(x, positions=positions) - want).abs().max().item():.1e}")
            print(f"q_proj, k_proj copied -> off by up to {(plain(x, positions=positions) - want).abs().max().item():.3f}")
            print(f"largest |output| {want.abs().max().item():.3f}")
        """),
        *written_cells("written_permute_values"),
        graded_cell("llama"),
        md(r"""
        ## 5. Pitfalls

        - **The direction**: the library's row $i$ is Meta's row $2i$; `interleaved_to_half_split` goes from
          Meta to the library, `half_split_to_interleaved` back. A round trip through the same one is not the
          identity.
        - **Per head**: reorder the rows of each head on its own; `W_k` has `num_key_value_heads` heads.
        - **Only `W_q` and `W_k`**: the values are not rotated.
        - **Positions**: pass them on to RoPE; test with gaps, since an even shift hides a layer that ignores them.
        - **`rope_base`**: use the one passed in; Llama 3 uses 500000, not 10000.
        - **The cache**: rotated keys, as in `generation`; a padded query may give NaN with `-inf` masking, which
          the grader's adapter sets to zero (nobody reads it).
        """, r"""
        ## 5. 常见错误

        - **方向**：库的第 $i$ 行是 Meta 的第 $2i$ 行；`interleaved_to_half_split` 从 Meta 转到库，`half_split_to_interleaved` 转回来。用同一个函数走两次并不会回到原样。
        - **按头处理**：每个头的行各自重排；`W_k` 有 `num_key_value_heads` 个头。
        - **只动 `W_q` 和 `W_k`**：值不旋转。
        - **位置**：要把位置传给 RoPE；用带间隔的位置来测试，因为整体平移会掩盖忽略位置的层。
        - **`rope_base`**：用传进来的那个；Llama 3 用的是 500000，不是 10000。
        - **缓存**：和 `generation` 中一样，存旋转后的键；用 `-inf` 掩码时，填充位置上的查询可能得到 NaN，自动评分器的适配器会把它置零（没有人会读它）。
        """),
    ]


# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# 5.x keeps the base and the scaling in rope_parameters": "# 5.x 把基数和缩放参数放在 rope_parameters 里",
    "# 4.x: rope_theta and rope_scaling": "# 4.x：rope_theta 和 rope_scaling",
    '"inv_freq / base^(-2i/d):"': '"llama3 的 inv_freq 与普通频率 base^(-2i/d) 之比："',
    '"pair i"': '"第 i 对"',
    'label="base^(-2i/d)"': 'label="普通频率 base^(-2i/d)"',
    'label="llama3"': 'label="llama3 的频率"',
    '"frequency"': '"频率"',
    '"your DecoderAttention.forward:"': '"你的 DecoderAttention.forward："',
    '"angles m * theta_i"': '"角度 m * theta_i"',
    '"angles -> head_dim"': '"角度 -> head_dim"',
    '"  cos at position 1:"': '"  位置 1 的 cos："',
    '"the same as cos(1 * theta_i), i = 0..3, twice:"': '"与 cos(1 * theta_i)（i = 0..3）写两遍相同："',
    "# Meta's layout": "# Meta 的布局",
    "# weights of a trained model's size: scores of a few units": "# 与训练好的模型量级相当的权重：分数只有几个单位",
    "# half-split pairs, as LlamaAttention rotates them": "# 前后半配对，和 LlamaAttention 的旋转方式一样",
    "# neighbour pairs, Meta's weights": "# 相邻配对，Meta 的权重",
    'f"largest |score| {': 'f"最大 |分数| {',
    'f"converted W_q, W_k -> off by up to {': 'f"转换后的 W_q、W_k -> 最多相差 {',
    'f"converted the wrong way -> off by up to {': 'f"反向转换 -> 最多相差 {',
    'f"not converted -> off by up to {': 'f"不转换 -> 最多相差 {',
    "# the weighted values, heads merged, W_o: [B, S, d_model]": "# 加权后的值，合并各头，再乘 W_o：[B, S, d_model]",
    'f"W_v permuted as well: the output moves by up to {': 'f"把 W_v 也置换：输出最多变化 {',
    '"split into heads (q)"': '"拆成多头（q）"',
    '"RoPE on q and k"': '"对 q 和 k 做 RoPE"',
    '"what the cache stores"': '"缓存里存什么"',
    '"kv heads for GQA"': '"GQA 的 kv 头"',
    '"copies side by side"': '"副本彼此相邻"',
    '"the scale"': '"缩放"',
    '"mask added"': '"加上掩码"',
    '"softmax in float32"': '"float32 下做 softmax"',
    '"output projection"': '"输出投影"',
    "# [B, S], with gaps": "# [B, S]，带间隔",
    "# [1, 1, S, S], additive": "# [1, 1, S, S]，加性",
    "# the library's rows as they are: wrong pairs": "# 原样使用库的行：配对错了",
    'f"from_hf_llama -> off by up to {': 'f"from_hf_llama -> 最多相差 {',
    'f"q_proj, k_proj copied -> off by up to {': 'f"直接复制 q_proj、k_proj -> 最多相差 {',
    'f"largest |output| {': 'f"最大 |输出| {',
}
