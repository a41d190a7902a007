"""Notebook 01: queries, keys, values and the scaled dot-product scores."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "01_scores"

HINTS = {
    "make_projections": ("nn.Linear(in_features, out_features, bias=...) is one projection; you need three separate ones.",
                         "一个 nn.Linear(in_features, out_features, bias=...) 就是一个投影；你需要三个彼此独立的投影。"),
    "project_qkv": ("each projection is a module: call it on x.",
                    "每个投影都是一个模块：直接用它作用在 x 上。"),
    "scaled_scores": ("d_k is the size of the last axis of Q. Swap only the last two axes of K,\nso that 3-D and 4-D inputs both work.",
                      "d_k 是 Q 最后一个维度的大小。只交换 K 的最后两个维度，\n这样三维和四维输入都能正确处理。"),
    "attention_weights": ("which axis of scores [..., S_q, S_k] indexes the keys?",
                          "scores [..., S_q, S_k] 的哪个维度对应键？"),
    "attend": ("output i is an average of the value vectors, weighted by row i of the weights.",
               "输出 i 是各个值向量的加权平均，权重就是权重矩阵的第 i 行。"),
}

# The second hints, folded above their stubs (course.cells.recipe): the recipe, for after the first hint.
RECIPES = {
    "attend": ("All rows at once are one batched matrix product, `weights @ V`: `[..., S_q, S_k] @ [..., S_k, d_v]` "
               "gives `[..., S_q, d_v]`, whatever the leading axes.",
               "所有行一起算就是一次批量矩阵乘法 `weights @ V`：`[..., S_q, S_k] @ [..., S_k, d_v]` 得到 "
               "`[..., S_q, d_v]`，前面有多少个维度都适用。"),
}


def cells():
    return [
        md(r"""
        # 01 · Queries, keys, values and scaled dot-product scores

        Self-attention lets every position of a sequence decide, from the content of the sequence
        itself, which other positions it should read from. This notebook builds the core of it:

        $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$

        You will write five small functions, in two graded parts:

        | part | functions | what it does |
        |---|---|---|
        | `qkv_projection` | `make_projections`, `project_qkv` | turn each token into a query, a key and a value |
        | `scaled_scores` | `scaled_scores`, `attention_weights`, `attend` | compare queries with keys, normalise, mix the values |

        **How these notebooks work.** Cells marked *solution* hold a signature and a docstring with the
        shapes; replace the `raise NotImplementedError(...)` with your code. The locked cell after each
        one runs a quick visible check (✓ when the basics hold). The graded cells are scored by the
        course's hidden autograder, which runs many more cases. Write each solution cell as whole
        `def` / `class` definitions: the autograder takes exactly those cells, together with
        `math`, `torch`, `nn` and `F` (the imports of the setup cell below) and nothing else.
        *Run All* works before you write anything: a check or a demo that needs a function you have
        not written yet prints one line saying so.

        Conventions of the whole course: batch first, `x` is `[B, S, d_model]`; per-head tensors are
        `[B, H, S, head_dim]`.
        """, r"""
        # 01 · 查询、键、值与缩放点积分数

        自注意力让序列中的每个位置根据序列本身的内容，自己决定应该从哪些其他位置读取信息。本 notebook 搭建它的核心：

        $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$

        你将编写五个小函数，分成两个评分部分：

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `qkv_projection` | `make_projections`, `project_qkv` | 把每个 token 变成一个查询、一个键和一个值 |
        | `scaled_scores` | `scaled_scores`, `attention_weights`, `attend` | 用查询和键做比较、归一化，再对值加权求和 |

        **这些 notebook 怎么用。** 标为 *solution* 的单元格里给出了函数签名和写明张量形状的 docstring；把其中的 `raise NotImplementedError(...)` 换成你的代码。每个这样的单元格后面都有一个锁定的单元格，运行一项快速的可见检查（基本要求满足时显示 ✓）。评分单元格由课程的隐藏自动评分器打分，它会跑多得多的用例。每个 solution 单元格请写成完整的 `def` / `class` 定义：自动评分器只拿这些单元格，再加上 `math`、`torch`、`nn` 和 `F`（即下面 setup 单元格里的导入），其他一概不带。还什么都没写的时候，*Run All* 也能跑通：需要一个你尚未实现的函数的检查或演示，只会打印一行说明。

        整门课的约定：批次维在最前，`x` 的形状是 `[B, S, d_model]`；按头拆分后的张量是 `[B, H, S, head_dim]`。
        """),
        setup(),
        md(r"""
        ### Glossary

        The seed article this course grew from is written in Chinese, and the course has a Chinese edition
        (the assignment `self_attention_zh`). The terms both use, with the symbols and names of the code:

        | 中文 | English | symbol / code |
        |---|---|---|
        | 查询 / 键 / 值 | query / key / value | `Q`, `K`, `V` (one token: `q`, `k`, `v`) |
        | 投影 | projection | `W_q`, `W_k`, `W_v`, output projection `W_o` |
        | 注意力分数 | attention score | `scores` $= Q K^\top / \sqrt{d_k}$, `[..., S_q, S_k]` |
        | 注意力权重 | attention weights | `weights = softmax(scores, dim=-1)` |
        | 缩放点积注意力 | scaled dot-product attention | $\mathrm{softmax}(Q K^\top / \sqrt{d_k})\, V$, `F.scaled_dot_product_attention` (SDPA) |
        | 批次 / 批大小 | batch / batch size | `B` |
        | 序列长度 | sequence length | `S` (queries `S_q`, keys `S_k`) |
        | 模型维度、键维度、值维度 | model width, key width, value width | `d_model`, `d_k`, `d_v` |
        | 张量形状 | tensor shape | `x.shape`, e.g. `[B, S, d_model]` |
        | 维度 | dimension / axis | `dim=-1` |
        | 广播 | broadcasting | `mask[:, None, :]` |
        | 掩码 | mask | boolean, `True` = keep (this course) |
        | 填充掩码 | padding mask | `mask` `[B, S]`; `key_padding_mask` in `nn.MultiheadAttention` |
        | 因果掩码 | causal mask | `[S, S]`, key `j <= query i`; `is_causal=True` |
        | 多头注意力 / 头 | multi-head attention / head | `H` heads of width `head_dim = d_model // H` |
        | 交叉注意力 | cross-attention | queries from one sequence, keys and values from another (so often, not necessarily, `S_q != S_k`) |
        | 残差连接 | residual connection | `x + attn(x)` |
        | 分块 | chunk | `chunk_size` |
        | 显存 / 内存 | GPU memory / CPU memory | `attention_matrix_bytes` |
        | 可见检查 / 隐藏检查 | visible check / hidden check | `check_...(...)` cells / the autograder |
        | 自动评分器、评分部分、分 | autograder, graded part, points | `graded_part("...")` cells |
        """, r"""
        ### 术语表

        本课程源自一篇中文文章，课程本身也有中文版（作业 `self_attention_zh`）。下表列出两版共用的术语，以及代码里对应的符号和名字：

        | 中文 | English | 符号 / 代码 |
        |---|---|---|
        | 查询 / 键 / 值 | query / key / value | `Q`、`K`、`V`（单个 token：`q`、`k`、`v`） |
        | 投影 | projection | `W_q`、`W_k`、`W_v`，输出投影 `W_o` |
        | 注意力分数 | attention score | `scores` $= Q K^\top / \sqrt{d_k}$，`[..., S_q, S_k]` |
        | 注意力权重 | attention weights | `weights = softmax(scores, dim=-1)` |
        | 缩放点积注意力 | scaled dot-product attention | $\mathrm{softmax}(Q K^\top / \sqrt{d_k})\, V$，`F.scaled_dot_product_attention`（SDPA） |
        | 批次 / 批大小 | batch / batch size | `B` |
        | 序列长度 | sequence length | `S`（查询 `S_q`，键 `S_k`） |
        | 模型维度、键维度、值维度 | model width, key width, value width | `d_model`、`d_k`、`d_v` |
        | 张量形状 | tensor shape | `x.shape`，例如 `[B, S, d_model]` |
        | 维度 | dimension / axis | `dim=-1` |
        | 广播 | broadcasting | `mask[:, None, :]` |
        | 掩码 | mask | 布尔类型，本课程中 `True` 表示保留 |
        | 填充掩码 | padding mask | `mask` `[B, S]`；`nn.MultiheadAttention` 中的 `key_padding_mask` |
        | 因果掩码 | causal mask | `[S, S]`，键 `j <= 查询 i`；`is_causal=True` |
        | 多头注意力 / 头 | multi-head attention / head | `H` 个头，每个头宽 `head_dim = d_model // H` |
        | 交叉注意力 | cross-attention | 查询来自一个序列，键和值来自另一个序列（所以常常、但不一定有 `S_q != S_k`） |
        | 残差连接 | residual connection | `x + attn(x)` |
        | 分块 | chunk | `chunk_size` |
        | 显存 / 内存 | GPU memory / CPU memory | `attention_matrix_bytes` |
        | 可见检查 / 隐藏检查 | visible check / hidden check | `check_...(...)` 单元格 / 自动评分器 |
        | 自动评分器、评分部分、分 | autograder, graded part, points | `graded_part("...")` 单元格 |
        """),
        md(r"""
        ### Where the seed article's sections are taught

        The seed article (in Chinese) has five chapters. Each section, by number and title, and where this
        course teaches it (notebook, section):

        | § | seed section | taught in |
        |---|---|---|
        | 1.1 | 从"找重点"到"自己找重点" (from attention, which finds what matters, to *self*-attention, where a sequence finds it in its own content) | 01 §1 |
        | 1.2 | Q、K、V 三个角色怎么理解 (the three roles) | 01 §2 |
        | 1.3 | 为什么这套机制能成为主流 (why it won) | 01 §1 |
        | 2.1 | 缩放点积注意力的完整过程 (the whole computation) | 01: the formula above, §3–§5 |
        | 2.2 | 缩放因子为什么是 sqrt(d_k) (why the scale) | 01 §3. **Corrected:** the seed explains the growth of the dot product by high-dimensional vectors becoming *harder* to make orthogonal; the opposite holds (random vectors get closer to orthogonal as `d_k` grows), and the reason is the variance of a sum of `d_k` terms; 01 §3 prints both |
        | 2.3 | Softmax 为什么作用在最后一个维度 (why the last axis) | 01 §4 |
        | 2.4 | Mask 的两种基本类型 (the two kinds of mask) | 02: introduction and §3 |
        | 3.1 | 输入形状与初始参数约定 (conventions for the input shapes and settings) | 01: the shape table after `qkv_projection`, §6 |
        | 3.2 | 初始化三个投影层 (three projections) | 01: `make_projections` |
        | 3.3 | 一次性计算 Q、K、V (Q, K, V at once) | 01: `project_qkv` |
        | 3.4 | 计算注意力分数 (the scores) | 01 §3: `scaled_scores` |
        | 3.5 | Mask 怎么写（以 Padding Mask 为例） (writing a padding mask) | 02 §2: `apply_padding_mask`. **Corrected:** the seed's mask view `[B, 1, 1, S]` on single-head scores `[B, S, S]` broadcasts silently to `[B, B, S, S]`; 02 §2 shows it and uses `[B, 1, S]`. **Corrected:** the seed says a `[B, S, 1]` mask (`mask.unsqueeze(-1)`) cannot match the scores; it broadcasts without an error and hides whole query rows instead of keys; 02 §2 shows the rows it hides |
        | 3.6 | Softmax 与注意力输出 (softmax and output) | 01 §4–§5: `attention_weights`, `attend` |
        | 3.7 | 封装成完整模块 (a complete module) | 03 §1: `SelfAttention` |
        | 3.8 | 用内置接口验证手写版本 (checking against the built-in module) | 03 §2–§3: `to_official`, `parity_error`. **Corrected:** the seed copies the weights with `in_proj_weight.view(3, d, d).copy_(...)` of the three weights concatenated along dim 0, and that line raises a RuntimeError; 03 §2 runs it and explains the broadcasting rule of `copy_` |
        | 4.1 | 从输入到输出的维度变化全梳理 (every shape, input to output) | 01 §6, 03 §1, 04 §2 (the shape tables) |
        | 4.2 | 多头实现时最容易踩的维度坑 (multi-head shape traps) | 04 §1–§2. **Corrected:** the seed says that permuting before the view silently gives wrong heads; written with `.view`, that order raises an error (unless `S` equals `head_dim`), and the silent bug needs `.reshape` or `.contiguous().view`; 04 §1 runs all three |
        | 4.3 | 官方接口里两种 Mask 的区别 (the built-in module's two masks) | 02 §1 |
        | 4.4 | 数值稳定性与显存控制 (numerical stability and memory) | 02 introduction (`-inf`, float16), 05 |
        | 5.1 | 症状一：训练 Loss 完全不下降 (the loss does not move) | 01 §3, §7 |
        | 5.2 | 症状二：Shape 报错永远找不到源头 (shape errors) | 01 §7, 04 §4 |
        | 5.3 | 症状三：注意力权重看起来都差不多 (uniform-looking weights) | 01 §7, 02 §5, 03 §1 (dropout) |
        | 5.4 | 症状四：和内置实现输出差异巨大 (far from the built-in module) | 03 §3, §5 |
        | 5.5 | 工程实践中的一点体会 (a note from practice: look at the weights) | 03 §4 |
        """, r"""
        ### 原文各节在课程中的位置

        本课程的起点是一篇中文文章，共五章。下表按编号和标题列出每一节，以及本课程在哪里讲授它（notebook 与小节）：

        | § | 原文小节 | 课程中的位置 |
        |---|---|---|
        | 1.1 | 从"找重点"到"自己找重点" | 01 §1 |
        | 1.2 | Q、K、V 三个角色怎么理解 | 01 §2 |
        | 1.3 | 为什么这套机制能成为主流 | 01 §1 |
        | 2.1 | 缩放点积注意力的完整过程 | 01：上面的公式，§3–§5 |
        | 2.2 | 缩放因子为什么是 sqrt(d_k) | 01 §3。**订正：** 原文把点积变大归因于高维向量*更难*彼此正交；事实正相反（`d_k` 越大，随机向量越接近正交），真正的原因是 `d_k` 个项之和的方差随 `d_k` 增长；01 §3 把两者都打印出来 |
        | 2.3 | Softmax 为什么作用在最后一个维度 | 01 §4 |
        | 2.4 | Mask 的两种基本类型 | 02：开头与 §3 |
        | 3.1 | 输入形状与初始参数约定 | 01：`qkv_projection` 之后的形状表，§6 |
        | 3.2 | 初始化三个投影层 | 01：`make_projections` |
        | 3.3 | 一次性计算 Q、K、V | 01：`project_qkv` |
        | 3.4 | 计算注意力分数 | 01 §3：`scaled_scores` |
        | 3.5 | Mask 怎么写（以 Padding Mask 为例） | 02 §2：`apply_padding_mask`。**订正：** 原文把多头用的掩码视图 `[B, 1, 1, S]` 用在单头分数 `[B, S, S]` 上，会被悄悄广播成 `[B, B, S, S]`；02 §2 演示了这个问题，并改用 `[B, 1, S]`。**订正：** 原文说 `[B, S, 1]` 的掩码（`mask.unsqueeze(-1)`）与分数无法匹配；其实它能正常广播、不报错，屏蔽的是整行查询而不是键；02 §2 展示了被屏蔽的行 |
        | 3.6 | Softmax 与注意力输出 | 01 §4–§5：`attention_weights`、`attend` |
        | 3.7 | 封装成完整模块 | 03 §1：`SelfAttention` |
        | 3.8 | 用内置接口验证手写版本 | 03 §2–§3：`to_official`、`parity_error`。**订正：** 原文用 `in_proj_weight.view(3, d, d).copy_(...)` 复制沿 dim 0 拼接的三个权重，这一行会抛出 RuntimeError；03 §2 运行了这一行，并讲解 `copy_` 的广播规则 |
        | 4.1 | 从输入到输出的维度变化全梳理 | 01 §6、03 §1、04 §2（各张形状表） |
        | 4.2 | 多头实现时最容易踩的维度坑 | 04 §1–§2。**订正：** 原文说先 permute 再 view 会悄悄得到错误的头；用 `.view` 写时，这个顺序会直接报错（除非 `S` 等于 `head_dim`），只有用 `.reshape` 或 `.contiguous().view` 才会悄无声息地出错；04 §1 把三种情况都运行了一遍 |
        | 4.3 | 官方接口里两种 Mask 的区别 | 02 §1 |
        | 4.4 | 数值稳定性与显存控制 | 02 开头（`-inf`、float16），05 |
        | 5.1 | 症状一：训练 Loss 完全不下降 | 01 §3、§7 |
        | 5.2 | 症状二：Shape 报错永远找不到源头 | 01 §7、04 §4 |
        | 5.3 | 症状三：注意力权重看起来都差不多 | 01 §7、02 §5、03 §1（dropout） |
        | 5.4 | 症状四：和内置实现输出差异巨大 | 03 §3、§5 |
        | 5.5 | 工程实践中的一点体会 | 03 §4 |
        """),
        md(r"""
        ## 1. Why attention: one step to any position

        Before attention, sequence models were mostly *recurrent* (RNN, LSTM): the state at position `t`
        is computed from the state at position `t - 1`. Two consequences:

        - information from token 0 reaches position `S - 1` only through `S - 1` steps, and each step
          can shrink it;
        - the steps run one after another, because each needs the previous one.

        Self-attention lets every position read every other position **directly, in one step**, and
        computes all positions at once with matrix products, which parallel hardware is built for. The
        price is a table of `S x S` scores (notebook 05 deals with it).

        The experiment: how strongly does the output at the last position depend on a token `d`
        positions earlier? We measure the size of the gradient for a random recurrent cell (the loop
        makes the one-after-another steps visible) and for one random attention layer.
        """, r"""
        ## 1. 为什么要注意力：一步到达任意位置

        在注意力出现之前，序列模型大多是*循环*的（RNN、LSTM）：位置 `t` 的状态由位置 `t - 1` 的状态算出。这带来两个后果：

        - token 0 的信息要经过 `S - 1` 步才能到达位置 `S - 1`，而每一步都可能让它衰减；
        - 这些步骤只能一个接一个地执行，因为每一步都依赖上一步。

        自注意力让每个位置**一步之内直接**读取其他所有位置，并且用矩阵乘法一次算出所有位置，而并行硬件正是为矩阵乘法而生的。代价是一张 `S x S` 的分数表（notebook 05 专门处理它）。

        实验：最后一个位置的输出，对 `d` 个位置之前的某个 token 依赖有多强？我们分别对一个随机的循环单元（用循环把逐步计算写出来）和一个随机的注意力层，测量梯度的大小。
        """),
        demo("""
        torch.manual_seed(0)
        S, d = 64, 16
        x = torch.randn(1, S, d, requires_grad=True)

        # A recurrent cell: the state of step t needs the state of step t - 1.
        W_x, W_h = torch.randn(d, d) / math.sqrt(d), torch.randn(d, d) / math.sqrt(d)
        h = torch.zeros(1, d)
        for t in range(S):
            h = torch.tanh(x[:, t] @ W_x + h @ W_h)
        rnn_grad, = torch.autograd.grad(h.sum(), x)

        # One attention layer (PyTorch's fused function): all S positions in one call.
        W_q, W_k, W_v = (torch.randn(d, d) / math.sqrt(d) for _ in range(3))
        out = F.scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)
        att_grad, = torch.autograd.grad(out[:, -1].sum(), x)

        print("size of d(output at the last position) / d(token d positions earlier)")
        print(f"{'distance d':>10} {'recurrent':>10} {'attention':>10}")
        for dist in (0, 1, 4, 16, 32, 63):
            t = S - 1 - dist
            print(f"{dist:>10} {rnn_grad[0, t].norm().item():>10.1e} {att_grad[0, t].norm().item():>10.1e}")
        """),
        md(r"""
        The recurrent column falls by orders of magnitude as the distance grows; the attention column
        goes up and down with the content of the tokens but has no trend with distance: a token 63
        positions back is one step away, like its neighbour.

        ## 2. Three roles for every token

        Think of a search engine. You type a **query**; every document has an index entry, its **key**;
        what you actually read is the document's content, its **value**. Attention works the same way
        with one difference: matching is not hit-or-miss. Every key gets a similarity score with the
        query, and the result is a *weighted average* of all values.

        In *self*-attention the queries, keys and values all come from the same sequence `x`. They are
        three linear maps of the same vectors:

        $$Q = x W_q^\top,\quad K = x W_k^\top,\quad V = x W_v^\top$$

        Why three separate weight matrices? A token needs to describe *what it is looking for* (query)
        differently from *what it offers to others* (key) and *what it hands over when chosen* (value).
        With one shared matrix for queries and keys, every token's query equals its key, and the score
        matrix becomes **symmetric** (a Gram matrix): token `i` scores token `j` exactly as `j` scores `i`.
        That is exact for the *scores* and only for them. The *weights* come from a softmax over each row
        on its own, so they are not symmetric: if `j` stands out in `i`'s row while `i` is one of many
        strong keys in `j`'s row, `i` puts most of its weight on `j` and `j` almost none on `i`. What a
        shared matrix does lose is the freedom to score the two directions differently, which separate
        `W_q` and `W_k` give. Each token's score with itself is then $|q_i|^2$, never negative and often,
        but not always, the largest of its row.

        **Biases.** The projections of this course have no bias, like the seed article's. What would a
        bias do? With biases a score is

        $$(q_i + b_q)\cdot(k_j + b_k) = q_i\cdot k_j + q_i\cdot b_k + b_q\cdot k_j + b_q\cdot b_k .$$

        The softmax runs over the keys `j`, and a term that is the same for every key of a row cancels
        in it: that is $q_i\cdot b_k$ and $b_q\cdot b_k$. The term $b_q\cdot k_j$ changes from key to key
        and does **not** cancel: it adds the same preference for some keys to every query. So a bias on
        the keys alone leaves the weights unchanged, and a bias on the queries changes them. PyTorch's
        `nn.MultiheadAttention` has biases by default (`bias=True`).

        The cell below checks these statements on one sequence of 16 tokens (2-D tensors, so the
        plain `.T` transpose is safe here).
        """, r"""
        循环单元那一列随距离增大下降了好几个数量级；注意力那一列随 token 的内容上下起伏，但和距离没有趋势关系：63 个位置之前的 token 和紧挨着的邻居一样，都只差一步。

        ## 2. 每个 token 的三种角色

        想想搜索引擎。你输入一个**查询**（query）；每篇文档都有一条索引，也就是它的**键**（key）；你真正读到的是文档的内容，也就是它的**值**（value）。注意力的工作方式一样，只有一点不同：匹配不是"命中/未命中"二选一。每个键都会和查询算出一个相似度分数，结果是所有值的*加权平均*。

        在*自*注意力中，查询、键和值都来自同一个序列 `x`，它们是同一组向量的三个线性映射：

        $$Q = x W_q^\top,\quad K = x W_k^\top,\quad V = x W_v^\top$$

        为什么要三个独立的权重矩阵？一个 token 需要用不同的方式描述*它在找什么*（查询）、*它能提供什么*（键）以及 *被选中时交出什么*（值）。如果查询和键共用一个矩阵，每个 token 的查询就等于它的键，分数矩阵就变成**对称**的（一个 Gram 矩阵）：token `i` 给 token `j` 打的分正好等于 `j` 给 `i` 打的分。这一点只对*分数*严格成立。*权重*是对每一行单独做 softmax 得到的，并不对称：如果 `j` 在 `i` 那一行里一枝独秀，而 `i` 在 `j` 那一行里只是众多高分键之一，那么 `i` 会把大部分权重给 `j`，`j` 却几乎不看 `i`。共用矩阵真正失去的，是给两个方向打出不同分数的自由，而独立的 `W_q`、`W_k` 提供了这种自由。此时每个 token 与自己的分数是 $|q_i|^2$，永远非负，而且常常（但并不总是）是所在行中最大的。

        **偏置。** 本课程的投影和原文一样不带偏置。偏置会起什么作用？有偏置时，一个分数是

        $$(q_i + b_q)\cdot(k_j + b_k) = q_i\cdot k_j + q_i\cdot b_k + b_q\cdot k_j + b_q\cdot b_k .$$

        softmax 是在键 `j` 上做的，对同一行所有键都相同的项会在 softmax 中抵消：也就是 $q_i\cdot b_k$ 和 $b_q\cdot b_k$。而 $b_q\cdot k_j$ 随键而变，**不会**抵消：它给每个查询都加上了对某些键的同一种偏好。所以只给键加偏置，注意力权重不变；给查询加偏置，权重就会改变。PyTorch 的 `nn.MultiheadAttention` 默认带偏置（`bias=True`）。

        下面的单元格在一个 16 个 token 的序列上验证这些说法（这里是二维张量，所以直接用 `.T` 转置是安全的）。
        """),
        demo("""
        torch.manual_seed(0)
        S, d_model, d_k = 16, 16, 8
        x = torch.randn(S, d_model)  # one sequence of 16 tokens
        W_q, W_k = torch.randn(d_model, d_k), torch.randn(d_model, d_k)

        shared = (x @ W_q) @ (x @ W_q).T  # one matrix for queries and keys
        separate = (x @ W_q) @ (x @ W_k).T
        print("shared matrix:    scores symmetric:", torch.allclose(shared, shared.T),
              f"| rows whose largest score is the token itself: {(shared.argmax(-1) == torch.arange(S)).sum().item()} of {S}")
        print("separate matrices: scores symmetric:", torch.allclose(separate, separate.T))
        shared_weights = torch.softmax(shared / math.sqrt(d_k), dim=-1)  # [S, S], rows sum to 1
        i, j = divmod((shared_weights - shared_weights.T).argmax().item(), S)  # the most one-sided pair
        print(f"shared matrix, weights: token {i} puts {shared_weights[i, j]:.3f} of its weight on token {j}, "
              f"token {j} puts {shared_weights[j, i]:.3f} on token {i}")

        def weights_of(Q, K):  # softmax over the keys of one sequence's scaled scores
            return torch.softmax(Q @ K.T / math.sqrt(d_k), dim=-1)

        Q, K = x @ W_q, x @ W_k
        b_q, b_k = torch.randn(d_k), torch.randn(d_k)
        print(f"bias on the keys only:    the weights change by at most {(weights_of(Q, K + b_k) - weights_of(Q, K)).abs().max():.1e} (rounding)")
        print(f"bias on the queries only: the weights change by up to   {(weights_of(Q + b_q, K) - weights_of(Q, K)).abs().max():.2f}")
        mha = nn.MultiheadAttention(d_model, num_heads=1)
        print("nn.MultiheadAttention(16, num_heads=1) has in_proj_bias", list(mha.in_proj_bias.shape), "and out_proj.bias", list(mha.out_proj.bias.shape))
        """),
        md(r"""
        `d_k` (queries and keys) must be shared so the dot product exists; `d_v` may differ.
        """, r"""
        `d_k`（查询和键的维度）必须相同，点积才有定义；`d_v` 可以不同。
        """),
        solution("make_projections", HINTS),
        check("check_make_projections(make_projections)", "check_make_projections"),
        solution("project_qkv", HINTS),
        check("check_project_qkv(project_qkv)", "check_project_qkv"),
        graded_cell("qkv_projection"),
        md(r"""
        Shapes for a batch of two sequences of four tokens with `d_model = 16`, `d_k = 8`, `d_v = 6`:

        | tensor | shape | meaning |
        |---|---|---|
        | `x` | `[2, 4, 16]` | 2 sequences, 4 tokens, 16 features |
        | `Q`, `K` | `[2, 4, 8]` | one query and one key per token |
        | `V` | `[2, 4, 6]` | one value per token |
        """, r"""
        一个批次包含两个序列、每个序列四个 token，且 `d_model = 16`、`d_k = 8`、`d_v = 6` 时的张量形状：

        | 张量 | 形状 | 含义 |
        |---|---|---|
        | `x` | `[2, 4, 16]` | 2 个序列，4 个 token，16 个特征 |
        | `Q`, `K` | `[2, 4, 8]` | 每个 token 一个查询、一个键 |
        | `V` | `[2, 4, 6]` | 每个 token 一个值 |
        """),
        demo("""
        # Your projections on a small batch.
        with uses_your_code():
            x = torch.randn(2, 4, 16)
            W_q, W_k, W_v = make_projections(16, 8, 6)
            Q, K, V = project_qkv(x, W_q, W_k, W_v)
            print("x", list(x.shape), "-> Q", list(Q.shape), "K", list(K.shape), "V", list(V.shape))
        """),
        md(r"""
        ## 3. Scores: every query against every key

        The score of query `i` against key `j` is the dot product of their vectors. For all pairs at
        once this is one matrix product, `Q @ K^T`, with `K` transposed on its **last two** axes:
        `K` is `[..., S_k, d_k]`, `K^T` is `[..., d_k, S_k]` and the product is `[..., S_q, S_k]`:
        row `i` holds query `i`'s scores against every key. Writing `K.T` instead would reverse *all*
        axes, batch and heads included, which only happens to work for 2-D tensors; on a tensor of more
        than two axes PyTorch also warns that `.T` is deprecated there and will become an error. The
        first cell below shows both.

        ### Why divide by $\sqrt{d_k}$?

        If the entries of `q` and `k` are independent with mean 0 and variance 1, their dot product is a
        sum of `d_k` such products, so its variance is `d_k`: the typical raw score grows like
        $\sqrt{d_k}$. Large scores push the softmax into saturation: almost all the weight lands on one
        key, the others get nearly zero, and the gradients through the softmax shrink, so training
        slows down. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the width.
        The experiment below measures all three: the variance, the largest weight and the size of the
        gradient that flows back through the softmax.
        """, r"""
        ## 3. 分数：每个查询对每个键

        查询 `i` 对键 `j` 的分数就是二者向量的点积。所有配对一起算就是一次矩阵乘法 `Q @ K^T`，其中 `K` 在**最后两个**维度上转置：`K` 是 `[..., S_k, d_k]`，`K^T` 是 `[..., d_k, S_k]`，乘积是 `[..., S_q, S_k]`：第 `i` 行是查询 `i` 对所有键的分数。如果写成 `K.T`，会把*所有*维度（包括批次和头）都反转过来，只有二维张量时才碰巧正确；对超过两个维度的张量，PyTorch 还会警告：`.T` 在这种用法下已被弃用，将来会直接报错。下面第一个单元格把这两点都展示出来。

        ### 为什么要除以 $\sqrt{d_k}$？

        如果 `q` 和 `k` 的各个分量相互独立、均值为 0、方差为 1，它们的点积就是 `d_k` 个这样的乘积之和，方差为 `d_k`：原始分数的典型大小按 $\sqrt{d_k}$ 增长。分数太大会让 softmax 饱和：几乎全部权重都落在一个键上，其他键接近 0，经过 softmax 回传的梯度也随之变小，训练就慢下来。除以 $\sqrt{d_k}$ 能让方差回到 1，与宽度无关。下面的实验把三者都测出来：方差、最大的权重，以及经过 softmax 回传的梯度大小。
        """),
        demo("""
        import warnings

        K = torch.randn(2, 5, 4)  # keys [B, S_k, d_k]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reversed_keys = K.T
        print("K", list(K.shape), "-> K.T", list(reversed_keys.shape), "(every axis reversed);",
              "K.transpose(-2, -1)", list(K.transpose(-2, -1).shape))
        print("PyTorch's warning for K.T:", str(caught[0].message).split(" and it will")[0])
        """),
        *written_cells("written_scale_prediction"),
        demo("""
        # Variance of raw dot products grows with d_k; the softmax saturates unless we scale.
        n_pairs, n_keys = 2000, 8
        print(f"{'d_k':>5} {'mean |cos|':>10} {'var(q.k)':>9} {'var(q.k/sqrt(d_k))':>19} {'max weight raw':>15} {'max weight scaled':>18} {'grad raw':>9} {'grad scaled':>12}")
        for d_k in (4, 16, 64, 256, 1024):
            q = torch.randn(n_pairs, 1, d_k)
            k = torch.randn(n_pairs, n_keys, d_k)
            raw = (q * k).sum(-1)  # [n_pairs, n_keys] raw dot products
            scaled = raw / math.sqrt(d_k)
            upstream = torch.randn(n_pairs, n_keys)  # some gradient arriving from above
            grads = []
            for s in (raw, scaled):
                s = s.clone().requires_grad_()
                (torch.softmax(s, dim=-1) * upstream).sum().backward()
                grads.append(s.grad.abs().mean().item())  # how much reaches the scores
            max_raw = torch.softmax(raw, dim=-1).max(-1).values.mean()
            max_scaled = torch.softmax(scaled, dim=-1).max(-1).values.mean()
            cos = F.cosine_similarity(q, k, dim=-1).abs().mean()  # how far from orthogonal q and k are
            print(f"{d_k:>5} {cos.item():>10.3f} {raw.var().item():>9.1f} {scaled.var().item():>19.2f} {max_raw.item():>15.3f} {max_scaled.item():>18.3f} {grads[0]:>9.4f} {grads[1]:>12.4f}")
        print("With 8 keys a uniform softmax gives 0.125 to each; 1.000 means one key takes everything.")
        torch.manual_seed(0)
        x = torch.randn(8, 128, 64)  # 8 sequences of 128 tokens, d_model = d_k = 64
        W_q, W_k = nn.Linear(64, 64, bias=False), nn.Linear(64, 64, bias=False)  # PyTorch's default initialisation
        with torch.no_grad():
            raw = W_q(x) @ W_k(x).transpose(-2, -1)  # [8, 128, 128]
        for name, s in (("unscaled", raw), ("scaled", raw / math.sqrt(64))):
            print(f"nn.Linear projections at initialisation, d_k = 64, 128 keys, {name}: "
                  f"mean largest weight {torch.softmax(s, dim=-1).max(-1).values.mean():.3f} (uniform: {1 / 128:.3f})")
        x = torch.randn(10_000)
        print(f"x / math.sqrt(d_k) and x * d_k ** -0.5 (d_k = 8) differ by at most {(x / math.sqrt(8) - x * 8 ** -0.5).abs().max().item():.1e}: rounding")
        """),
        md(r"""
        The raw variance tracks `d_k`, although random vectors get *closer* to orthogonal as `d_k` grows
        (the `mean |cos|` column falls): the dot product is a sum of `d_k` terms of random sign, and its
        spread grows like $\sqrt{d_k}$ even though the terms cancel on average. As `d_k` grows the unscaled softmax gives more and more of the
        weight to one key, and the gradient that reaches the scores shrinks. After scaling, the variance
        stays near 1 and the weights and gradients stay the same whatever the width. (Some code
        multiplies by `d_k ** -0.5` instead of dividing by `math.sqrt(d_k)`: the same up to rounding, as
        the last line shows.)
        """, r"""
        原始方差跟着 `d_k` 走，尽管 `d_k` 越大，随机向量反而*越接近*正交（“平均 |cos|”这一列在下降）：点积是 `d_k` 个正负随机的项之和，这些项平均起来相互抵消，但和的波动幅度仍按 $\sqrt{d_k}$ 增长。`d_k` 越大，不缩放的 softmax 就把越来越多的权重交给一个键，传到分数上的梯度也越来越小。缩放之后，方差保持在 1 附近，权重和梯度也不随宽度变化。（有些代码用乘以 `d_k ** -0.5` 代替除以 `math.sqrt(d_k)`：两者只差舍入误差，最后一行就说明了这一点。）
        """),
        *written_cells("written_scale_sqrt"),
        solution("scaled_scores", HINTS),
        check("check_scaled_scores(scaled_scores)", "check_scaled_scores"),
        md(r"""
        ## 4. Softmax over the keys

        For a fixed query, the weights over all keys must form a probability distribution: non-negative
        and summing to 1. The keys are the **last** axis of `[..., S_q, S_k]`, so the softmax runs over
        `dim=-1`. Use `-1` rather than a positive index: the same code then works for `[B, S, S]` and
        `[B, H, S, S]`.

        A wrong axis does not raise any error; it silently normalises over the *queries* instead. Each key
        then distributes weight over the queries, and the rows (what each query reads) no longer sum to 1.
        The demo shows what that looks like.
        """, r"""
        ## 4. 在键上做 softmax

        对固定的一个查询，它在所有键上的权重必须构成一个概率分布：非负且和为 1。键是 `[..., S_q, S_k]` 的**最后一个**维度，所以 softmax 在 `dim=-1` 上做。用 `-1` 而不是正数下标：这样同一段代码对 `[B, S, S]` 和 `[B, H, S, S]` 都适用。

        维度选错不会报任何错；它只是悄悄地改成在*查询*上归一化。于是每个键把权重分配给各个查询，而各行（每个查询读到的内容）的和不再是 1。下面的演示展示了这是什么样子。
        """),
        demo("""
        scores = torch.randn(1, 3, 5)  # 3 queries, 5 keys
        right = torch.softmax(scores, dim=-1)
        wrong = torch.softmax(scores, dim=-2)  # over the queries: a silent bug
        print("row sums, softmax over keys (dim=-1):   ", right.sum(-1).squeeze().tolist())
        print("row sums, softmax over queries (dim=-2):", [round(v, 3) for v in wrong.sum(-1).squeeze().tolist()])
        print("column sums with dim=-2 (each key's weights over the queries):", [round(v, 3) for v in wrong.sum(-2).squeeze().tolist()])
        """),
        solution("attention_weights", HINTS),
        check("check_attention_weights(attention_weights)", "check_attention_weights"),
        md(r"""
        ## 5. Mixing the values

        With weights `[..., S_q, S_k]` and values `[..., S_k, d_v]`, the output of query `i` is
        $\sum_j w_{ij} v_j$: again one matrix product, giving `[..., S_q, d_v]`. If `d_v` differs from
        `d_model`, a final output projection (notebook 03) maps it back, so that the result can be added
        to the input in a residual connection.
        """, r"""
        ## 5. 对值加权求和

        权重是 `[..., S_q, S_k]`，值是 `[..., S_k, d_v]`，查询 `i` 的输出就是 $\sum_j w_{ij} v_j$：又是一次矩阵乘法，结果为 `[..., S_q, d_v]`。如果 `d_v` 与 `d_model` 不同，最后还有一个输出投影（notebook 03）把它映射回去，这样结果才能在残差连接中与输入相加。
        """),
        recipe("attend", RECIPES),
        solution("attend", HINTS),
        check("check_attend(attend)", "check_attend"),
        graded_cell("scaled_scores"),
        md(r"""
        ### Self-attention and cross-attention

        Everything so far takes `Q`, `K` and `V` from the same sequence `x`: that is *self*-attention.
        In *cross*-attention the queries come from one sequence and the keys and values from another.
        A translation model is the classic case: the decoder, writing the target sentence, sends the
        queries, and the encoder's output for the source sentence provides the keys and values. Your
        three functions already allow it, because nothing in them asks `S_q` to equal `S_k`: the scores
        are `[B, S_q, S_k]`, one row per token that asks, one column per token that is read.
        """, r"""
        ### 自注意力与交叉注意力

        到目前为止，`Q`、`K` 和 `V` 都取自同一个序列 `x`：这就是*自*注意力。在*交叉*注意力中，查询来自一个序列，键和值来自另一个序列。翻译模型是典型例子：解码器在写目标句子时发出查询，编码器对源句子的输出提供键和值。你写的三个函数已经支持这种用法，因为其中没有任何地方要求 `S_q` 等于 `S_k`：分数是 `[B, S_q, S_k]`，每个提问的 token 一行，每个被读取的 token 一列。
        """),
        demo("""
        with uses_your_code():
            torch.manual_seed(1)
            target = torch.randn(2, 3, 16)  # the sequence that asks: 3 tokens
            source = torch.randn(2, 5, 16)  # the sequence that is read: 5 tokens
            W_q, W_k, W_v = make_projections(16, 8, 8)
            Q = W_q(target)  # [2, 3, 8]: queries from the first sequence
            K, V = W_k(source), W_v(source)  # [2, 5, 8]: keys and values from the second
            weights = attention_weights(scaled_scores(Q, K))
            print("cross-attention weights", list(weights.shape), "(3 queries x 5 keys), row sums", [round(v, 4) for v in weights[0].sum(-1).tolist()])
            print("output", list(attend(weights, V).shape), ": one vector per token of the asking sequence")
        """),
        md(r"""
        ## 6. The whole pipeline, and a picture

        | step | tensor | shape (`B=2, S=4, d_model=16, d_k=d_v=16`) |
        |---|---|---|
        | input | `x` | `[2, 4, 16]` |
        | projections | `Q`, `K`, `V` | `[2, 4, 16]` each |
        | transposed keys | `K.transpose(-2, -1)` | `[2, 16, 4]` |
        | scores | `Q K^T / sqrt(d_k)` | `[2, 4, 4]` |
        | weights | `softmax(scores, dim=-1)` | `[2, 4, 4]`, rows sum to 1 |
        | output | `weights @ V` | `[2, 4, 16]` |

        The heatmap shows the weights of the first sequence: row `i` is what query `i` reads.
        """, r"""
        ## 6. 完整流程，再画一张图

        | 步骤 | 张量 | 形状（`B=2, S=4, d_model=16, d_k=d_v=16`） |
        |---|---|---|
        | 输入 | `x` | `[2, 4, 16]` |
        | 投影 | `Q`, `K`, `V` | 各为 `[2, 4, 16]` |
        | 转置后的键 | `K.transpose(-2, -1)` | `[2, 16, 4]` |
        | 分数 | `Q K^T / sqrt(d_k)` | `[2, 4, 4]` |
        | 权重 | `softmax(scores, dim=-1)` | `[2, 4, 4]`，每行和为 1 |
        | 输出 | `weights @ V` | `[2, 4, 16]` |

        热力图显示第一个序列的注意力权重：第 `i` 行是查询 `i` 读取的内容。
        """),
        demo("""
        import matplotlib.pyplot as plt

        with uses_your_code():
            torch.manual_seed(42)
            x = torch.randn(2, 4, 16)
            Q, K, V = project_qkv(x, *make_projections(16, 16, 16))
            with torch.no_grad():
                weights = attention_weights(scaled_scores(Q, K))
                out = attend(weights, V)
            print("weights", list(weights.shape), "output", list(out.shape))
            print("row sums:", weights[0].sum(-1).tolist())

            fig, ax = plt.subplots(figsize=(3.6, 3.2))
            im = ax.imshow(weights[0], cmap="viridis", vmin=0, vmax=1)
            ax.set(xlabel="key j", ylabel="query i", title="attention weights, sequence 0")
            ax.set_xticks(range(4)); ax.set_yticks(range(4))
            fig.colorbar(im, ax=ax, fraction=0.046)
            plt.show()
        """),
        md(r"""
        ## 7. Pitfalls and how to debug them

        - **Print shapes first.** Before looking at numbers, print the shape of `Q`, `K`, `V`, the scores
          and the weights and compare them with the table above. A shape bug makes every later number
          meaningless.
        - **Uniform test.** With all-zero queries and keys every score is 0, so every weight must be
          exactly `1 / S_k`. If not, the softmax axis or the masking is wrong.
        - **Rows sum to 1.** `weights.sum(-1)` must be all ones (up to rounding); a softmax over the wrong
          axis breaks this without raising anything.
        - **Forgotten scale.** Training that barely moves, with weights that get peakier the wider `d_k`
          is, often means the $1/\sqrt{d_k}$ is missing. At initialisation they need not be one-hot yet
          (PyTorch's default `nn.Linear` gives a largest weight of about a third over 128 keys, as §3's
          cell prints); how far the softmax saturates depends on the size of the scores.
        - **`K.T` on a batch.** Use `K.transpose(-2, -1)` (or `K.mT`); `.T` reverses every axis. On
          `[B, S, d_k]` keys it usually raises a size mismatch, after PyTorch's deprecation warning; the
          visible check names the mistake in one sentence.
        """, r"""
        ## 7. 常见陷阱与调试方法

        - **先打印张量形状。** 在看具体数值之前，先打印 `Q`、`K`、`V`、分数和权重的形状，并和上面的表格对照。形状一旦出错，后面所有数字都没有意义。
        - **均匀测试。** 查询和键全为 0 时，每个分数都是 0，所以每个权重必须恰好是 `1 / S_k`。如果不是，说明 softmax 的维度或掩码写错了。
        - **每行和为 1。** `weights.sum(-1)` 必须全为 1（允许舍入误差）；softmax 维度选错会破坏这一点，却不会报任何错。
        - **忘了缩放。** 训练几乎不动，而且 `d_k` 越大权重越尖锐，往往意味着漏掉了 $1/\sqrt{d_k}$。刚初始化时权重未必已经接近 one-hot（PyTorch 默认初始化的 `nn.Linear` 在 128 个键上给出的最大权重约为三分之一，见 §3 单元格的输出）；softmax 饱和到什么程度，取决于分数有多大。
        - **对批次用 `K.T`。** 请用 `K.transpose(-2, -1)`（或 `K.mT`）；`.T` 会反转所有维度。对 `[B, S, d_k]` 的键，PyTorch 先发出弃用警告，接着通常会报尺寸不匹配的错误；可见检查会用一句话点明这个错误。
        """),
    ]


# The Chinese docstrings of the solution cells (the build puts them in the Chinese edition).
DOCSTRINGS_ZH = {
    "make_projections": "三个相互独立、不带偏置的投影：W_q、W_k：d_model -> d_k，W_v：d_model -> d_v。",
    "project_qkv": "输入 x [B, S, d_model] -> 查询 Q [B, S, d_k]，键 K [B, S, d_k]，值 V [B, S, d_v]。",
    "scaled_scores": "Q [..., S_q, d_k]，K [..., S_k, d_k] -> 分数 scores [..., S_q, S_k] = Q K^T / sqrt(d_k)。",
    "attention_weights": "在键所在的维度（最后一个维度）上做 softmax：每一行的和为 1。",
    "attend": "权重 weights [..., S_q, S_k] 乘以 V [..., S_k, d_v] -> 输出 out [..., S_q, d_v]。",
}

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# A recurrent cell: the state of step t needs the state of step t - 1.": "# 循环单元：第 t 步的状态需要第 t - 1 步的状态。",
    "# One attention layer (PyTorch's fused function): all S positions in one call.":
        "# 一个注意力层（PyTorch 的融合函数）：一次调用算出全部 S 个位置。",
    '"size of d(output at the last position) / d(token d positions earlier)"': '"d(最后一个位置的输出) / d(d 个位置之前的 token) 的大小"',
    "{'distance d':>10} {'recurrent':>10} {'attention':>10}": "{'距离 d':>8} {'循环单元':>6} {'注意力':>7}",
    "# one sequence of 16 tokens": "# 一个 16 个 token 的序列",
    "# one matrix for queries and keys": "# 查询和键共用一个矩阵",
    '"shared matrix:    scores symmetric:"': '"共用矩阵：  分数对称："',
    'f"| rows whose largest score is the token itself: {': 'f"| 最大分数落在 token 自己身上的行：{',
    '.sum().item()} of {S}"': '.sum().item()} / {S}"',
    '"separate matrices: scores symmetric:"': '"独立矩阵：  分数对称："',
    "# [S, S], rows sum to 1": "# [S, S]，每行和为 1",
    "# the most one-sided pair": "# 最不对等的一对",
    'f"shared matrix, weights: token {i} puts {shared_weights[i, j]:.3f} of its weight on token {j}, "':
        'f"共用矩阵，权重：token {i} 把 {shared_weights[i, j]:.3f} 的权重给了 token {j}，"',
    'f"token {j} puts {shared_weights[j, i]:.3f} on token {i}"': 'f"token {j} 给 token {i} 的权重是 {shared_weights[j, i]:.3f}"',
    "# softmax over the keys of one sequence's scaled scores": "# 对一个序列的缩放分数在键上做 softmax",
    'f"bias on the keys only:    the weights change by at most {': 'f"只给键加偏置：  权重的变化最多为 {',
    ':.1e} (rounding)"': ':.1e}（舍入误差）"',
    'f"bias on the queries only: the weights change by up to   {': 'f"只给查询加偏置：权重的变化可达   {',
    '"nn.MultiheadAttention(16, num_heads=1) has in_proj_bias"': '"nn.MultiheadAttention(16, num_heads=1) 带有 in_proj_bias"',
    '"and out_proj.bias"': '"和 out_proj.bias"',
    "# Your projections on a small batch.": "# 用一个小批次试试你的投影。",
    "# keys [B, S_k, d_k]": "# 键 [B, S_k, d_k]",
    '"(every axis reversed);"': '"（所有维度都反转了）；"',
    '"PyTorch\'s warning for K.T:"': '"PyTorch 对 K.T 的警告："',
    "# Variance of raw dot products grows with d_k; the softmax saturates unless we scale.":
        "# 原始点积的方差随 d_k 增长；不缩放的话，softmax 会饱和。",
    "# [n_pairs, n_keys] raw dot products": "# [n_pairs, n_keys] 原始点积",
    "# some gradient arriving from above": "# 从上游传来的某个梯度",
    "# how much reaches the scores": "# 有多少传到了分数上",
    "# how far from orthogonal q and k are": "# q 和 k 离正交有多远",
    "{'mean |cos|':>10}": "{'平均 |cos|':>8}",
    "{'max weight raw':>15} {'max weight scaled':>18} {'grad raw':>9} {'grad scaled':>12}":
        "{'最大权重(原始)':>11} {'最大权重(缩放)':>11} {'梯度(原始)':>10} {'梯度(缩放)':>10}",
    "{max_raw.item():>15.3f} {max_scaled.item():>18.3f} {grads[0]:>9.4f} {grads[1]:>12.4f}":
        "{max_raw.item():>15.3f} {max_scaled.item():>15.3f} {grads[0]:>12.4f} {grads[1]:>12.4f}",
    '"With 8 keys a uniform softmax gives 0.125 to each; 1.000 means one key takes everything."':
        '"8 个键时，均匀的 softmax 给每个键 0.125；1.000 表示一个键拿走了全部权重。"',
    "# 8 sequences of 128 tokens, d_model = d_k = 64": "# 8 个序列，每个 128 个 token，d_model = d_k = 64",
    "# PyTorch's default initialisation": "# PyTorch 的默认初始化",
    '(("unscaled", raw), ("scaled", raw / math.sqrt(64)))': '(("不缩放", raw), ("缩放", raw / math.sqrt(64)))',
    'f"nn.Linear projections at initialisation, d_k = 64, 128 keys, {name}: "': 'f"刚初始化的 nn.Linear 投影，d_k = 64，128 个键，{name}："',
    'f"mean largest weight {torch.softmax(s, dim=-1).max(-1).values.mean():.3f} (uniform: {1 / 128:.3f})"':
        'f"最大权重的平均值 {torch.softmax(s, dim=-1).max(-1).values.mean():.3f}（均匀分布：{1 / 128:.3f}）"',
    'f"x / math.sqrt(d_k) and x * d_k ** -0.5 (d_k = 8) differ by at most {': 'f"x / math.sqrt(d_k) 与 x * d_k ** -0.5（d_k = 8）最多相差 {',
    ':.1e}: rounding"': ':.1e}：舍入误差"',
    "# 3 queries, 5 keys": "# 3 个查询，5 个键",
    "# over the queries: a silent bug": "# 在查询上做：错了却不报错",
    '"row sums, softmax over keys (dim=-1):   "': '"每行之和，在键上做 softmax（dim=-1）：  "',
    '"row sums, softmax over queries (dim=-2):"': '"每行之和，在查询上做 softmax（dim=-2）："',
    '"column sums with dim=-2 (each key\'s weights over the queries):"': '"dim=-2 时每列之和（每个键分给各个查询的权重）："',
    "# the sequence that asks: 3 tokens": "# 发出查询的序列：3 个 token",
    "# the sequence that is read: 5 tokens": "# 被读取的序列：5 个 token",
    "# [2, 3, 8]: queries from the first sequence": "# [2, 3, 8]：查询来自第一个序列",
    "# [2, 5, 8]: keys and values from the second": "# [2, 5, 8]：键和值来自第二个序列",
    '"cross-attention weights"': '"交叉注意力权重"',
    '"(3 queries x 5 keys), row sums"': '"（3 个查询 x 5 个键），每行之和"',
    '"output"': '"输出"',
    '": one vector per token of the asking sequence"': '"：提问序列的每个 token 一个向量"',
    '"weights"': '"权重"',
    '"row sums:"': '"每行之和："',
    'ax.set(xlabel="key j", ylabel="query i", title="attention weights, sequence 0")':
        'ax.set(xlabel="键 j", ylabel="查询 i", title="注意力权重，序列 0")',
}
