"""Notebook 01 of `real_models`: GPT-2's attention as the `transformers` library writes it (Conv1D, fused c_attn)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "01_gpt2"

HINTS = {
    "split_c_attn": (
        "c_attn's weight is stored [in, out]: its columns are the outputs, q first, then k, then v.\n"
        "nn.Linear keeps [out, in]. Cut where the outputs are, and turn each piece around.",
        "c_attn 的权重按 [in, out] 存放：列是输出，先是 q，再是 k，最后是 v。\n"
        "nn.Linear 存的是 [out, in]。在输出所在的维度上切开，再把每一块转过来。",
    ),
    "GPT2StyleAttention.__init__": (
        "four nn.Linear(d_model, d_model), each with its bias (the library's layer has biases).",
        "四个 nn.Linear(d_model, d_model)，都带偏置（库里的这一层有偏置）。",
    ),
    "GPT2StyleAttention.forward": (
        "your multi-head attention of the first assignment, with biases, a causal mask and key_mask together.",
        "就是第一个作业里你写的多头注意力，加上偏置，并把因果掩码和 key_mask 一起用上。",
    ),
    "GPT2StyleAttention.from_hf": (
        "split_c_attn gives the three projections; c_proj is a Conv1D too.",
        "split_c_attn 给出三个投影；c_proj 同样是 Conv1D。",
    ),
    "GPT2StyleAttention.to_hf": (
        "the inverse of from_hf: put the three weights side by side again, in Conv1D's layout.",
        "from_hf 的逆操作：把三个权重重新并排拼起来，按 Conv1D 的存放方式写回去。",
    ),
}

RECIPES = {
    "split_c_attn": (
        """
        1. `weight.T` is `[3 d_model, d_model]` (out x in); `.chunk(3, dim=0)` cuts it into `W_q, W_k, W_v`,
           `[d_model, d_model]` each (or slice the columns of `weight` first and transpose each slice).
        2. `bias.chunk(3)` gives `b_q, b_k, b_v`.
        3. Return the six in that order; `.contiguous()` on the weights keeps later `copy_` calls simple.
        """,
        """
        1. `weight.T` 是 `[3 d_model, d_model]`（out x in）；`.chunk(3, dim=0)` 把它切成 `W_q, W_k, W_v`，
           每块 `[d_model, d_model]`（也可以先切 `weight` 的列，再分别转置）。
        2. `bias.chunk(3)` 给出 `b_q, b_k, b_v`。
        3. 按这个顺序返回六个张量；对权重调用 `.contiguous()`，后面 `copy_` 时更省事。
        """,
    ),
    "GPT2StyleAttention": (
        """
        - `forward`: project, `view(B, S, H, head_dim).transpose(1, 2)`, scores `q @ k^T / sqrt(head_dim)`,
          `allowed = tril(ones(S, S))` and, with a `key_mask`, `& key_mask[:, None, None, :]`; fill `-inf` where
          not allowed, softmax, `@ v`, merge the heads, `W_o`.
        - `from_hf(cls, attn)`: `layer = cls(attn.c_attn.weight.shape[0], attn.num_heads)`; under
          `torch.no_grad()`, `copy_` the six pieces of `split_c_attn(attn.c_attn.weight, attn.c_attn.bias)` and
          `attn.c_proj.weight.T`, `attn.c_proj.bias` into `W_o`.
        - `to_hf(self, attn)`: `torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).T` into `c_attn.weight`,
          the three biases concatenated into `c_attn.bias`, `W_o.weight.T` into `c_proj.weight`; return `attn`.
        """,
        """
        - `forward`：投影，`view(B, S, H, head_dim).transpose(1, 2)`，分数 `q @ k^T / sqrt(head_dim)`，
          `allowed = tril(ones(S, S))`，有 `key_mask` 时再 `& key_mask[:, None, None, :]`；不允许的位置填 `-inf`，
          softmax，`@ v`，合并各头，`W_o`。
        - `from_hf(cls, attn)`：`layer = cls(attn.c_attn.weight.shape[0], attn.num_heads)`；在 `torch.no_grad()` 下，
          把 `split_c_attn(attn.c_attn.weight, attn.c_attn.bias)` 的六块，以及 `attn.c_proj.weight.T`、
          `attn.c_proj.bias` 用 `copy_` 写进对应的层。
        - `to_hf(self, attn)`：把 `torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0).T` 写进 `c_attn.weight`，
          三个偏置拼起来写进 `c_attn.bias`，`W_o.weight.T` 写进 `c_proj.weight`；返回 `attn`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "split_c_attn": """GPT-2 的 Conv1D c_attn（weight [d_model, 3 d_model]，y = x @ weight + bias）-> (W_q, W_k, W_v：nn.Linear 布局的 [d_model, d_model]，b_q, b_k, b_v)。""",
    "GPT2StyleAttention": """GPT-2 的因果多头自注意力，W_q、W_k、W_v、W_o 分开（nn.Linear，带偏置）。""",
    "GPT2StyleAttention.forward": """x [B, S, d_model] -> [B, S, d_model]，因果；key_mask [B, S] 为 bool，True = 真实 token。""",
    "GPT2StyleAttention.from_hf": """构造一个与 transformers 的 GPT2Attention `attn` 等价的 GPT2StyleAttention（把 Conv1D 的权重转置成 nn.Linear 的布局）。""",
    "GPT2StyleAttention.to_hf": """把这一层的权重写回 GPT2Attention `attn`（Conv1D 布局：weight [in, out]）；返回 `attn`。""",
}


def cells():
    return [
        md(r"""
        # 01 · GPT-2: your attention inside the library's code

        This is the first notebook of the fourth assignment, **your attention inside real models**. You can
        write attention from scratch; yet open a real Transformer and the queries, keys and values are spread
        over base classes, helper functions and modules with unfamiliar names. This assignment opens three of
        them as the Hugging Face `transformers` library writes them, GPT-2 (this notebook), BERT (`02_bert`) and
        Llama (`03_llama`), reads their code next to yours, moves their weights into your layers and back, and
        proves that both compute the same numbers; the last notebook (`04_interface`) plugs your own attention
        function into the library's dispatch (`attn_implementation`).

        | part | functions | what it does |
        |---|---|---|
        | `gpt2` | `split_c_attn`, `GPT2StyleAttention` (`from_hf`, `to_hf`) | GPT-2's fused, transposed projection into your four `nn.Linear` |

        Every model here is *tiny* and built from a configuration with random weights: nothing is downloaded,
        and every claim about the library is printed by a cell, from the version installed on your machine.
        As before: fill in the *solution* cells, run the locked check cell after each one, and leave the
        graded cell to the hidden autograder. Your code gets `math`, `torch`, `nn` and `F` and nothing else:
        the library only supplies weights and the reference, never a piece of your forward pass.
        """, r"""
        # 01 · GPT-2：把你的注意力放进库的代码里

        这是第四个作业 **真实模型里的注意力** 的第一个 notebook。你已经能从零写出注意力；可一旦打开真实的 Transformer 代码，查询、键和值就散落在各种基类、辅助函数和名字陌生的模块里。这个作业按 Hugging Face `transformers` 库的写法打开其中三个模型：GPT-2（本 notebook）、BERT（`02_bert`）和 Llama（`03_llama`），把它们的代码和你的代码对照着读，把它们的权重搬进你的层再搬回去，并证明两边算出的数在 1e-5 以内一致；最后一个 notebook（`04_interface`）把你自己的注意力函数接入库的分派机制（`attn_implementation`）。

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `gpt2` | `split_c_attn`, `GPT2StyleAttention`（`from_hf`, `to_hf`） | 把 GPT-2 融合且转置存放的投影拆进你的四个 `nn.Linear` |

        这里的每个模型都是*迷你*的，由一个配置（config）加随机权重构造出来：什么都不用下载，关于这个库的每一个说法都由单元格打印出来，依据的是你机器上安装的那个版本。和以前一样：填写 *solution* 单元格，每写完一个就运行它后面那个锁定的检查单元格，评分单元格留给隐藏的自动评分器。你的代码只拿到 `math`、`torch`、`nn` 和 `F`：库只负责提供权重和参考结果，绝不能成为你前向计算的一部分。
        """),
        setup(),
        md(r"""
        ### Glossary

        | 中文 | English | in the library |
        |---|---|---|
        | 配置 | configuration | `GPT2Config`, `BertConfig`, `LlamaConfig` |
        | 融合的 QKV 投影 | fused QKV projection | GPT-2's `c_attn`: one layer with `3 d_model` outputs |
        | 一维卷积层（GPT-2 的叫法） | Conv1D | a linear layer whose weight is stored `[in, out]` |
        | 输出投影 | output projection | `c_proj` (GPT-2), `o_proj` (Llama), `BertSelfOutput.dense` (BERT) |
        | 加性掩码 | additive mask | added to the scores: 0 or `torch.finfo(dtype).min` |
        | 前后半配对 / 相邻配对 | half-split / neighbour pairs | `rotate_half` / Meta's checkpoints, this course's `apply_rope` |
        | 行置换 | row permutation | the conversion of Meta's `W_q`, `W_k` to the library's |
        | 词元 | token | one position of `input_ids` |
        | 注意力掩码 | attention mask | `attention_mask`: `[B, S]` of 1/0 given to the model; what a layer receives differs |
        | 旋转位置编码 | rotary position embedding (RoPE) | `LlamaRotaryEmbedding`, `apply_rotary_pos_emb` |
        | 分组查询注意力 | grouped-query attention (GQA) | `num_key_value_heads` < `num_attention_heads`, `repeat_kv` |
        | 键值缓存 | KV cache | `DynamicCache` (`past_key_values`) |
        | 检查点 | checkpoint | trained weights saved to disk (`from_pretrained`) |
        | 注意力实现 | attention implementation | `attn_implementation`: `"eager"`, `"sdpa"`, a name you register |
        """, r"""
        ### 术语表

        | 中文 | English | 在库里 |
        |---|---|---|
        | 配置 | configuration | `GPT2Config`、`BertConfig`、`LlamaConfig` |
        | 融合的 QKV 投影 | fused QKV projection | GPT-2 的 `c_attn`：一个有 `3 d_model` 个输出的层 |
        | 一维卷积层（GPT-2 的叫法） | Conv1D | 权重按 `[in, out]` 存放的线性层 |
        | 输出投影 | output projection | `c_proj`（GPT-2）、`o_proj`（Llama）、`BertSelfOutput.dense`（BERT） |
        | 加性掩码 | additive mask | 加到分数上：0 或 `torch.finfo(dtype).min` |
        | 前后半配对 / 相邻配对 | half-split / neighbour pairs | `rotate_half` / Meta 的 checkpoint、本课程的 `apply_rope` |
        | 行置换 | row permutation | 把 Meta 的 `W_q`、`W_k` 转换成库的格式 |
        | 词元 | token | `input_ids` 里的一个位置（正文里也直接写 token） |
        | 注意力掩码 | attention mask | `attention_mask`：传给模型的取值 1/0 的 `[B, S]`；各层收到的掩码另有形式 |
        | 旋转位置编码 | rotary position embedding (RoPE) | `LlamaRotaryEmbedding`、`apply_rotary_pos_emb` |
        | 分组查询注意力 | grouped-query attention (GQA) | `num_key_value_heads` < `num_attention_heads`，`repeat_kv` |
        | 键值缓存 | KV cache | `DynamicCache`（`past_key_values`） |
        | 检查点 | checkpoint | 存到磁盘上的训练好的权重（`from_pretrained`） |
        | 注意力实现 | attention implementation | `attn_implementation`：`"eager"`、`"sdpa"`，或你注册的名字 |
        """),
        md(r"""
        ## 1. A real model, built from a configuration

        `from_pretrained("gpt2")` would download the trained weights. We do not need them to compare two
        implementations: the same *code* with random weights is enough. A configuration object holds the
        sizes; the model class builds every layer from it. `attn_implementation="eager"` asks for the plain
        PyTorch attention (the library can also send it to fused kernels), which is what you will compare with.
        """, r"""
        ## 1. 由配置构造的真实模型

        `from_pretrained("gpt2")` 会下载训练好的权重。比较两份实现并不需要它们：同样的*代码*配上随机权重就够了。配置对象保存各种尺寸，模型类据此构造出每一层。`attn_implementation="eager"` 要求使用朴素的 PyTorch 注意力实现（库也可以把它交给融合算子），你要对照的正是这一种。
        """),
        demo("""
        import inspect

        import transformers
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

        torch.manual_seed(0)
        d_model, num_heads = 16, 4
        config = GPT2Config(n_embd=d_model, n_head=num_heads, n_layer=1, n_positions=32, vocab_size=50,
                            bos_token_id=0, eos_token_id=0, attn_implementation="eager")
        attn = GPT2Attention(config, layer_idx=0).eval()
        print("transformers", transformers.__version__)
        print("the library's layer, built from the configuration:")
        print(attn)
        for name, parameter in attn.named_parameters():
            print(f"{name:<14} {list(parameter.shape)}")
        """),
        md(r"""
        Four parameters where you would write eight: one fused layer `c_attn` computes the queries, keys and
        values at once (`3 x 16 = 48` outputs), and `c_proj` is the output projection. And the shapes look
        backwards: `c_attn.weight` is `[16, 48]`, while `nn.Linear(16, 48).weight` is `[48, 16]`.

        ## 2. Conv1D: a linear layer stored the other way round

        GPT-2's original code (OpenAI's, in TensorFlow) wrote its linear layers as "1-D convolutions" of width 1,
        whose kernels are stored `[in, out]`. The library kept that layout so that the original checkpoints load
        unchanged. The layer computes $y = x W + b$ with $W$ of shape `[in, out]`; `nn.Linear` computes
        $y = x W^\top + b$ with $W$ of shape `[out, in]`. Same maths, transposed storage. Here is the class:
        """, r"""
        只有四个参数，而你会写八个：一个融合层 `c_attn` 一次算出查询、键和值（`3 x 16 = 48` 个输出），`c_proj` 是输出投影。而且形状看起来是反的：`c_attn.weight` 是 `[16, 48]`，而 `nn.Linear(16, 48).weight` 是 `[48, 16]`。

        ## 2. Conv1D：反过来存放的线性层

        GPT-2 最初的代码（OpenAI，TensorFlow）把线性层写成宽度为 1 的"一维卷积"，卷积核按 `[in, out]` 存放。库保留了这种布局，这样原始 checkpoint 不经改动就能加载。这个层计算 $y = x W + b$，$W$ 的形状是 `[in, out]`；`nn.Linear` 计算 $y = x W^\top + b$，$W$ 的形状是 `[out, in]`。数学相同，存放方式互为转置。下面是这个类：
        """),
        demo("""
        from transformers.pytorch_utils import Conv1D

        show_source(Conv1D)
        """),
        demo("""
        torch.manual_seed(1)
        x = torch.randn(2, 5, d_model)  # [B, S, d_model]
        W, b = attn.c_attn.weight, attn.c_attn.bias  # [d_model, 3 d_model], [3 d_model]
        linear = nn.Linear(d_model, 3 * d_model)
        print("Conv1D weight:", list(W.shape), "  nn.Linear weight:", list(linear.weight.shape))
        with torch.no_grad():
            y = attn.c_attn(x)  # [B, S, 3 d_model]
            print("c_attn(x) == x @ W + b:           ", torch.allclose(y, x @ W + b, atol=1e-6))
            print("c_attn(x) == F.linear(x, W.T, b):  ", torch.allclose(y, F.linear(x, W.T, b), atol=1e-6))
            square = W[:, :d_model]  # the q block, [d_model, d_model]: square, so the wrong layout still runs
            print("q block used without a transpose: off by", f"{(x @ square.T - x @ square).abs().max().item():.2f}")
        """),
        md(r"""
        `F.linear(x, W.T, b)` is `x @ W + b`: the Conv1D weight, transposed, *is* an `nn.Linear` weight. The last
        line is the trap: each of the three blocks is square, so using it without the transpose raises no error
        and gives wrong numbers.

        ## 3. The fused projection and its split

        The columns of `c_attn.weight` are its outputs: columns `0 .. d_model - 1` make the queries, the next
        `d_model` the keys, the last `d_model` the values. The library splits the *output* with
        `.split(d_model, dim=2)`; `.chunk(3, dim=-1)` does the same. Splitting the *weight* along the wrong axis
        cuts the inputs instead, as the shapes show:
        """, r"""
        `F.linear(x, W.T, b)` 就是 `x @ W + b`：Conv1D 的权重转置之后，*就是* `nn.Linear` 的权重。最后一行是陷阱：三块权重都是方阵，不转置也不会报错，只会悄悄算出错误的数。

        ## 3. 融合的投影及其拆分

        `c_attn.weight` 的列就是它的输出：第 `0 .. d_model - 1` 列产生查询，接下来 `d_model` 列产生键，最后 `d_model` 列产生值。库用 `.split(d_model, dim=2)` 拆分的是*输出*；`.chunk(3, dim=-1)` 效果相同。如果沿着错误的维度拆分*权重*，切开的就成了输入，形状说明了一切：
        """),
        demo("""
        with torch.no_grad():
            q, k, v = attn.c_attn(x).split(d_model, dim=2)  # the library's line: three [B, S, d_model]
            q2, k2, v2 = attn.c_attn(x).chunk(3, dim=-1)
            print("split(d_model, dim=2) == chunk(3, dim=-1):", all(torch.equal(a, c) for a, c in ((q, q2), (k, k2), (v, v2))))
            print("keys = x @ W[:, d_model:2 d_model] + b[d_model:2 d_model]:",
                  torch.allclose(k, x @ W[:, d_model:2 * d_model] + b[d_model:2 * d_model], atol=1e-6))
        print("W.chunk(3, dim=1) shapes:", [list(p.shape) for p in W.chunk(3, dim=1)], " (outputs cut: q, k, v)")
        print("W.chunk(3, dim=0) shapes:", [list(p.shape) for p in W.chunk(3, dim=0)], " (inputs cut: wrong)")
        """),
        md(r"""
        Your first function takes `c_attn`'s weight and bias apart into three projections in `nn.Linear`'s
        layout (`[out, in]`), ready to be copied into your `W_q`, `W_k`, `W_v`.
        """, r"""
        你的第一个函数把 `c_attn` 的权重和偏置拆成三个 `nn.Linear` 布局（`[out, in]`）的投影，可以直接复制进你的 `W_q`、`W_k`、`W_v`。
        """),
        recipe("split_c_attn", RECIPES),
        solution("split_c_attn", HINTS),
        check("check_split_c_attn(split_c_attn)", "check_split_c_attn"),
        *written_cells("written_conv1d_axis"),
        md(r"""
        ## 4. Reading `GPT2Attention.forward`

        Now the layer itself, as installed on your machine. Read it once from top to bottom: it also serves
        cross-attention (`q_attn`), a KV cache (the argument is `cache` in 5.x and `past_key_values` in 4.57;
        the cell prints the installed signature) and other attention kernels (`attention_interface`: notebook
        `04_interface` plugs your own function in there). Ignore those branches for now; the path you wrote is the
        self-attention one.
        """, r"""
        ## 4. 读 `GPT2Attention.forward`

        现在来看这个层本身，就是你机器上安装的那份代码。从头到尾读一遍：它还兼顾交叉注意力（`q_attn`）、KV 缓存（参数在 5.x 里叫 `cache`，在 4.57 里叫 `past_key_values`；单元格会打印已安装版本的签名）以及其他注意力算子（`attention_interface`：notebook `04_interface` 会把你自己的函数接到那里）。先忽略这些分支；你写过的是其中自注意力的那条路径。
        """),
        demo("""
        print("forward", inspect.signature(GPT2Attention.forward))
        show_source(GPT2Attention.forward)
        """),
        md(r"""
        The cell below finds, in the installed code (the layer and the library's eager attention function,
        `eager_attention_forward` in the same file), the line that does each step of your own layer. Your
        `GPT2StyleAttention.forward` (section 6) does the same steps in the same order:

        | your step | what to look for in the library's line |
        |---|---|
        | `q, k, v = W_q(x), W_k(x), W_v(x)` | one `c_attn` call, then `.split(self.split_size, dim=2)` |
        | `.view(B, S, H, head_dim).transpose(1, 2)` | `.view(shape_q).transpose(1, 2)`: `shape_q` is `(B, S, -1, head_dim)` |
        | `/ math.sqrt(head_dim)` | `scaling = head_dim**-0.5`, or a division by `value.size(-1) ** 0.5` in 4.x; only when the config's `scale_attn_weights` is True (the default), and further divided by `layer_idx + 1` when `scale_attn_by_inverse_layer_idx` is True (default False) |
        | `q @ k.transpose(-2, -1)` | `torch.matmul(query, key.transpose(-1, -2))` |
        | causal mask and `key_mask` | `attn_weights + attention_mask` (and in 4.x a `torch.where` on the buffer `bias`) |
        | `torch.softmax(scores, dim=-1)` | `nn.functional.softmax(attn_weights, dim=-1)` |
        | merge heads | `attn_output.transpose(1, 2)`, then `reshape(*shape[:-2], -1)` |
        | `W_o` | `self.c_proj(attn_output)`, another Conv1D |
        | (a KV cache, notebook 02 of `generation`) | `update(key_states, value_states, ...)`: the keys and values after the split into heads |
        """, r"""
        下面的单元格在已安装的代码里（这个层，以及同一文件中库的朴素注意力函数 `eager_attention_forward`）找出与你自己那一层每一步对应的那一行。你的 `GPT2StyleAttention.forward`（第 6 节）按同样的顺序做同样的步骤：

        | 你的步骤 | 在库的代码行里找什么 |
        |---|---|
        | `q, k, v = W_q(x), W_k(x), W_v(x)` | 一次 `c_attn` 调用，然后 `.split(self.split_size, dim=2)` |
        | `.view(B, S, H, head_dim).transpose(1, 2)` | `.view(shape_q).transpose(1, 2)`：`shape_q` 是 `(B, S, -1, head_dim)` |
        | `/ math.sqrt(head_dim)` | `scaling = head_dim**-0.5`，4.x 里是除以 `value.size(-1) ** 0.5`；只在配置的 `scale_attn_weights` 为 True（默认）时缩放，`scale_attn_by_inverse_layer_idx` 为 True（默认 False）时还要再除以 `layer_idx + 1` |
        | `q @ k.transpose(-2, -1)` | `torch.matmul(query, key.transpose(-1, -2))` |
        | 因果掩码和 `key_mask` | `attn_weights + attention_mask`（4.x 里还先用 `torch.where` 按缓冲区 `bias` 选出被屏蔽的分数，把它们替换成最小的有限值） |
        | `torch.softmax(scores, dim=-1)` | `nn.functional.softmax(attn_weights, dim=-1)` |
        | 合并各头 | `attn_output.transpose(1, 2)`，然后 `reshape(*shape[:-2], -1)` |
        | `W_o` | `self.c_proj(attn_output)`，又是一个 Conv1D |
        | （KV 缓存，见 `generation` 的 notebook 02） | `update(key_states, value_states, ...)`：存的是拆成多头之后的键和值 |
        """),
        demo("""
        from transformers.models.gpt2 import modeling_gpt2

        show_lines([modeling_gpt2.eager_attention_forward, GPT2Attention], {
            "fused q, k, v, split": "c_attn(hidden_states).split(",
            "split into heads (q)": ".view(shape_q).transpose(1, 2)",
            "the scale": ("self.scaling = self.head_dim**-0.5", "value.size(-1) ** 0.5"),
            "scores": "torch.matmul(query, key.transpose(-1, -2))",
            "causal mask (4.x: own buffer)": "causal_mask = module.bias",
            "mask added": "attn_weights = attn_weights + ",
            "softmax over the keys": "nn.functional.softmax(attn_weights, dim=-1)",
            "merge heads": "attn_output.reshape(*attn_output.shape[:-2], -1)",
            "output projection": "self.c_proj(attn_output)",
            "what the cache stores": ("update(key_states, value_states", "curr_past_key_value.update("),
        })
        """),
        md(r"""
        ## 5. Where the causal mask comes from

        Your layer builds its causal mask itself. Whether the library's layer does depends on its version and
        on the attention kernel. In 5.x (the version pinned for Python 3.11 and newer) the eager layer takes
        causality from the `attention_mask` the model hands it, and called alone without one it lets every token
        see the future, while the SDPA kernel (5.x's default) calls `scaled_dot_product_attention` with
        `is_causal=True` when it gets no mask, and is causal. In 4.57 both are causal without a mask: eager
        applies its own triangular buffer inside `eager_attention_forward` with a `torch.where`. The cell prints what your installed version does,
        then calls the layer with the mask its model would give it: additive, `0` where a key may be seen and
        `torch.finfo(float32).min`, float32's most negative *finite* value, elsewhere (`02_bert` explains why not
        `-inf`). The checks always give the
        library's layer that mask.
        """, r"""
        ## 5. 因果掩码从哪里来

        你的层自己构造因果掩码。库里的层是否这样做，取决于版本，也取决于注意力算子。在 5.x（Python 3.11 及以上锁定的版本）中，eager 层从模型传给它的 `attention_mask` 里获得因果性，不带掩码单独调用时，每个 token 都能看到未来；而 SDPA 算子（5.x 的默认实现）在没拿到掩码时以 `is_causal=True` 调用 `scaled_dot_product_attention`，因此是因果的。在 4.57 中，两者不带掩码时都是因果的：eager 在 `eager_attention_forward` 里用自己的三角形缓冲区，通过 `torch.where` 套上因果掩码。单元格会打印你安装的版本是哪种行为，然后按模型传给它的方式给这个层一个掩码：加性的，能看到的键为 `0`，其余为 `torch.finfo(float32).min`，即 float32 最小的有限值（`02_bert` 会解释为什么不是 `-inf`）。检查总是给库里的层这样一个掩码。
        """),
        demo("""
        changed = x.clone()
        changed[:, -1] += 1.0  # only the last token changes
        S = x.shape[1]
        causal = library_mask(torch.ones(1, 1, S, S, dtype=torch.bool).tril())  # [1, 1, S, S]: 0 on and below the diagonal
        sdpa_config = GPT2Config(n_embd=d_model, n_head=num_heads, n_layer=1, n_positions=32, vocab_size=50,
                                 bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
        sdpa_attn = GPT2Attention(sdpa_config, layer_idx=0).eval()
        sdpa_attn.load_state_dict(attn.state_dict())  # the same weights, the SDPA kernel
        with torch.no_grad():
            alone = (attn(changed)[0] - attn(x)[0])[:, 0].abs().max().item()
            sdpa_alone = (sdpa_attn(changed)[0] - sdpa_attn(x)[0])[:, 0].abs().max().item()
            masked = (attn(changed, attention_mask=causal)[0] - attn(x, attention_mask=causal)[0])[:, 0].abs().max().item()
        print("transformers", transformers.__version__)
        print(f"eager, no mask given: token 0's output moved by {alone:.2e} when the last token changed")
        print(f"SDPA, no mask given:  token 0's output moved by {sdpa_alone:.2e}")
        print(f"eager, causal mask:   token 0's output moved by {masked:.2e}")
        print(causal[0, 0])
        """),
        md(r"""
        ## 6. Your layer, loaded from the library's

        Write `GPT2StyleAttention`: the causal multi-head attention of the first assignment with four separate
        `nn.Linear` *with biases* (GPT-2 has biases everywhere), `forward(x, key_mask=None)` with `key_mask`
        `[B, S]` bool (True = real token), and two converters:

        - `from_hf(attn)`, a classmethod: a new layer whose weights are the library layer's (your `split_c_attn`
          for `c_attn`; `c_proj` is a Conv1D too);
        - `to_hf(attn)`: writes your weights into a library layer, in its layout; it returns `attn`.

        The check loads a library layer with random weights *and random biases* (the library starts its biases
        at zero, where a forgotten bias would go unnoticed), compares the two on a batch padded on the left and on the right, then
        writes a layer back and reads it again.
        """, r"""
        ## 6. 从库的层加载你的层

        编写 `GPT2StyleAttention`：第一个作业里的因果多头注意力，四个独立的 `nn.Linear`，*都带偏置*（GPT-2 处处有偏置），`forward(x, key_mask=None)`，其中 `key_mask` 为 `[B, S]` 的 bool（True = 真实 token），另外还有两个转换函数：

        - `from_hf(attn)`，一个类方法：新建一个层，权重取自库里的层（`c_attn` 用你的 `split_c_attn`；`c_proj` 同样是 Conv1D）；
        - `to_hf(attn)`：把你的权重按库的布局写进库里的层，返回 `attn`。

        检查会加载一个权重*和偏置*都随机的库层（库把偏置初始化为零，这时忘了偏置也看不出来），在一个既有左侧填充又有右侧填充的批次上比较两者，然后把一个层写回去再读出来。
        """),
        recipe("GPT2StyleAttention", RECIPES),
        solution("GPT2StyleAttention", HINTS),
        check("check_gpt2_attention(GPT2StyleAttention)", "check_gpt2_attention"),
        md(r"""
        Your `forward` as you wrote it, to read beside the library's lines of section 4: the same steps, one
        `nn.Linear` where the library has a third of `c_attn`, your mask where it adds `attention_mask`.
        """, r"""
        你写的 `forward`，和第 4 节里库的那些代码行对照着读：步骤相同，库用 `c_attn` 的三分之一的地方，你用一个 `nn.Linear`；库加上 `attention_mask` 的地方，你用自己的掩码。
        """),
        demo("""
        print("your GPT2StyleAttention.forward:")
        print(inspect.getsource(GPT2StyleAttention.forward))
        """),
        md(r"""
        ## 7. Your layer inside the whole model

        The last cell replaces the attention of *both* blocks of a tiny `GPT2LMHeadModel` by your layer (a
        three-line wrapper passes the hidden states in and returns what the block expects) and compares the
        model's logits. The embeddings, layer norms, MLPs and the output head stay the library's: if the logits
        agree, your layer is a drop-in replacement. (The autograder does the same on a right-padded batch: its own
        adapter to the block's call signature, which changes between versions of the library, passes the padding
        to your layer as `key_mask`, and the logits are compared at the real tokens.)
        """, r"""
        ## 7. 整个模型里的你的层

        最后一个单元格把一个迷你 `GPT2LMHeadModel` *两个*块里的注意力都换成你的层（一个三行的包装类把隐藏状态传进去，并按块所期望的格式返回），再比较模型的 logits。嵌入层、层归一化、MLP 和输出头仍然是库的：如果 logits 一致，你的层就能原样替换库的层。（自动评分器在一个右侧填充的批次上做同样的事：它用自己针对块的调用签名写的适配器（这个签名在库的不同版本之间会变），把填充作为 `key_mask` 传给你的层，并只在真实 token 上比较 logits。）
        """),
        demo("""
        from transformers import GPT2LMHeadModel


        class YourAttentionInside(nn.Module):
            # what a GPT2Block calls: (hidden_states, ...) -> (output, attention weights or None)
            def __init__(self, layer):
                super().__init__()
                self.layer = layer

            def forward(self, hidden_states, *args, **kwargs):
                return self.layer(hidden_states), None


        torch.manual_seed(2)
        config2 = GPT2Config(n_embd=d_model, n_head=num_heads, n_layer=2, n_positions=32, vocab_size=50,
                             bos_token_id=0, eos_token_id=0, attn_implementation="eager")
        model = GPT2LMHeadModel(config2).eval()
        tokens = torch.randint(0, 50, (2, 7))  # [B, S]
        with torch.no_grad(), uses_your_code():
            want = model(tokens, use_cache=False).logits  # [B, S, vocab]
            for block in model.transformer.h:
                block.attn = YourAttentionInside(GPT2StyleAttention.from_hf(block.attn).eval())
            got = model(tokens, use_cache=False).logits
            print(f"logits with your layers in both blocks: largest difference {(got - want).abs().max().item():.1e}")
        """),
        graded_cell("gpt2"),
        md(r"""
        ## 8. Pitfalls

        - **The transpose**: Conv1D is `[in, out]`, `nn.Linear` `[out, in]`. The blocks are square: forgetting
          the transpose raises nothing.
        - **The axis of the split**: q, k, v are blocks of *columns* of `c_attn.weight` (of rows after `.T`).
        - **Biases**: `c_attn` and `c_proj` both have them; a library layer freshly built starts them at zero,
          so test with random ones.
        - **The mask**: give the library's layer the additive mask its model would give it; 5.x's eager layer takes
          causality from it.
        - **`to_hf`** writes under `torch.no_grad()` with `copy_`, in place: the model keeps its own parameters.
        """, r"""
        ## 8. 常见错误

        - **转置**：Conv1D 是 `[in, out]`，`nn.Linear` 是 `[out, in]`。各块都是方阵：忘了转置也不会报错。
        - **拆分的维度**：q、k、v 是 `c_attn.weight` 的*列*块（`.T` 之后是行块）。
        - **偏置**：`c_attn` 和 `c_proj` 都有偏置；新构造的库层把偏置初始化为零，所以要用随机偏置来测试。
        - **掩码**：给库里的层一个它的模型会给它的加性掩码；5.x 的 eager 层从这个掩码里获得因果性。
        - **`to_hf`** 在 `torch.no_grad()` 下用 `copy_` 原地写入：模型保留它自己的参数对象。
        """),
    ]


# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    '"your GPT2StyleAttention.forward:"': '"你的 GPT2StyleAttention.forward："',
    '"the library\'s layer, built from the configuration:"': '"由配置构造出的库的层："',
    "# the q block, [d_model, d_model]: square, so the wrong layout still runs":
        "# q 块，[d_model, d_model]：是方阵，所以布局错了也照样能运行",
    '"Conv1D weight:"': '"Conv1D 的权重："',
    '"  nn.Linear weight:"': '"  nn.Linear 的权重："',
    '"q block used without a transpose: off by"': '"q 块不转置直接使用：相差"',
    "# the library's line: three [B, S, d_model]": "# 库里的那一行：三个 [B, S, d_model]",
    '" (outputs cut: q, k, v)"': '" （切的是输出：q、k、v）"',
    '" (inputs cut: wrong)"': '" （切的是输入：错误）"',
    '"W.chunk(3, dim=1) shapes:"': '"W.chunk(3, dim=1) 的形状："',
    '"W.chunk(3, dim=0) shapes:"': '"W.chunk(3, dim=0) 的形状："',
    '"fused q, k, v, split"': '"融合的 q、k、v 及拆分"',
    '"split into heads (q)"': '"拆成多头（q）"',
    '"the scale"': '"缩放"',
    '"scores"': '"分数"',
    '"causal mask (4.x: own buffer)"': '"因果掩码（4.x：自带缓冲区）"',
    '"mask added"': '"加上掩码"',
    '"softmax over the keys"': '"在键上做 softmax"',
    '"merge heads"': '"合并各头"',
    '"output projection"': '"输出投影"',
    '"what the cache stores"': '"缓存里存什么"',
    "# only the last token changes": "# 只改变最后一个 token",
    "# [1, 1, S, S]: 0 on and below the diagonal": "# [1, 1, S, S]：对角线及其下方为 0",
    'f"eager, no mask given: token 0\'s output moved by {alone:.2e} when the last token changed"':
        'f"eager，不给掩码：  token 0 的输出变化了 {alone:.2e}（最后一个 token 改变时）"',
    'f"SDPA, no mask given:  token 0\'s output moved by {sdpa_alone:.2e}"':
        'f"SDPA，不给掩码：   token 0 的输出变化了 {sdpa_alone:.2e}"',
    'f"eager, causal mask:   token 0\'s output moved by {masked:.2e}"':
        'f"eager，给因果掩码：token 0 的输出变化了 {masked:.2e}"',
    "# the same weights, the SDPA kernel": "# 同样的权重，换成 SDPA 算子",
    "# what a GPT2Block calls: (hidden_states, ...) -> (output, attention weights or None)":
        "# GPT2Block 这样调用它：(hidden_states, ...) -> (输出, 注意力权重或 None)",
    'f"logits with your layers in both blocks: largest difference {':
        'f"两个块都换成你的层后的 logits：最大差值 {',
}
