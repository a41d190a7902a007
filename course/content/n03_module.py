"""Notebook 03: the SelfAttention module and parity with nn.MultiheadAttention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "03_module"

HINTS = {
    "SelfAttention.__init__": ("d_k and d_v default to d_model; four bias-free nn.Linear layers and one nn.Dropout.",
                               "d_k 和 d_v 默认等于 d_model；四个不带偏置的 nn.Linear 层和一个 nn.Dropout。"),
    "SelfAttention.forward": ("project, score, mask (padding mask [B, S] -> [B, 1, S]; causal [S, S]),\n"
                              "softmax over the keys, dropout on the weights, weighted sum of V, then W_o.",
                              "投影、算分数、加掩码（填充掩码 [B, S] -> [B, 1, S]；因果掩码 [S, S]），\n"
                              "在键上做 softmax，对权重做 dropout，对 V 加权求和，最后经过 W_o。"),
    "to_official": ("in_proj_weight holds the q, k, v weights stacked along dim 0. Copy under torch.no_grad()\n"
                    "and zero both biases.",
                    "in_proj_weight 把 q、k、v 的权重沿 dim 0 堆叠在一起。在 torch.no_grad() 下复制，\n"
                    "并把两个偏置都置零。"),
    "parity_error": ("compare both modules in eval mode without gradients and convert the mask to key_padding_mask's\n"
                     "convention. (Putting the custom module back in the mode it was in is good manners; not graded.)",
                     "在 eval 模式下、不计算梯度地比较两个模块，并把掩码转换成 key_padding_mask 的约定。\n"
                     "（之后把自定义模块恢复到原来的模式是好习惯；不计分。）"),
}


def cells():
    return [
        md(r"""
        # 03 · A reusable `SelfAttention` module, checked against PyTorch

        The loose functions of notebooks 01 and 02 become one `nn.Module`, the form used inside a
        Transformer block. Then we make sure it computes *the same thing* as PyTorch's own
        `nn.MultiheadAttention`, by copying our weights into it and comparing outputs.

        | part | what you write |
        |---|---|
        | `module` | `class SelfAttention(nn.Module)` |
        | `official_parity` | `to_official(custom)`, `parity_error(custom, x, mask=None)` |

        Each notebook stands alone: write the module from scratch here (you may reuse your code from the
        earlier notebooks by copying it *into* the class; the grader only sees this notebook's solution
        cells).
        """, r"""
        # 03 · 可复用的 `SelfAttention` 模块，并与 PyTorch 对照

        notebook 01 和 02 中零散的函数在这里合成一个 `nn.Module`，也就是 Transformer 块内部使用的形式。然后我们确认它和 PyTorch 自带的 `nn.MultiheadAttention` 计算的是*同一个东西*：把我们的权重复制进去，再比较输出。

        | 评分部分 | 你要写的内容 |
        |---|---|
        | `module` | `class SelfAttention(nn.Module)` |
        | `official_parity` | `to_official(custom)`, `parity_error(custom, x, mask=None)` |

        每个 notebook 都是独立的：请在这里从头写这个模块（可以把前面 notebook 中你写的代码复制*进*类里复用；评分器只看本 notebook 的 solution 单元格）。
        """),
        setup(),
        md(r"""
        ## 1. The forward pass, step by step

        `SelfAttention(d_model, d_k=None, d_v=None, dropout=0.1)` owns `W_q`, `W_k`, `W_v`
        (bias-free, `d_model -> d_k / d_k / d_v`), an output projection `W_o` (`d_v -> d_model`) and an
        `nn.Dropout`. `forward(x, mask=None, causal=False)`:

        | step | computation | shape |
        |---|---|---|
        | 1 | `Q, K, V = W_q(x), W_k(x), W_v(x)` | `[B, S, d_k]`, `[B, S, d_k]`, `[B, S, d_v]` |
        | 2 | scores `Q K^T / sqrt(d_k)` | `[B, S, S]` |
        | 3 | padding: `-inf` at padded keys, mask viewed as `[B, 1, S]` | `[B, S, S]` |
        | 3' | causal (if `causal=True`): `-inf` where key > query | `[B, S, S]` |
        | 4 | softmax over keys, then **dropout on the weights** | `[B, S, S]` |
        | 5 | weights `@ V`, then `W_o` | `[B, S, d_v]` → `[B, S, d_model]` |

        *Why dropout on the weights?* Randomly zeroing attention weights during training stops the model
        from relying on a few fixed links between positions. `nn.Dropout(p)` is active only in `train()`
        mode: it zeroes each weight with probability `p` and multiplies the survivors by `1 / (1 - p)`,
        so in training a row of weights no longer sums to exactly 1 (this is expected), and the larger
        `p`, the noisier each training step's view of the weights. The seed article suggests 0.1 to 0.2.

        *Why `W_o`?* It maps `d_v` back to `d_model`, so the output can be added to the input (residual
        connection), and with several heads it mixes them (notebook 04).
        """, r"""
        ## 1. 前向计算，一步一步来

        `SelfAttention(d_model, d_k=None, d_v=None, dropout=0.1)` 拥有 `W_q`、`W_k`、`W_v`（不带偏置，`d_model -> d_k / d_k / d_v`）、一个输出投影 `W_o`（`d_v -> d_model`）和一个 `nn.Dropout`。`forward(x, mask=None, causal=False)`：

        | 步骤 | 计算 | 形状 |
        |---|---|---|
        | 1 | `Q, K, V = W_q(x), W_k(x), W_v(x)` | `[B, S, d_k]`, `[B, S, d_k]`, `[B, S, d_v]` |
        | 2 | 分数 `Q K^T / sqrt(d_k)` | `[B, S, S]` |
        | 3 | 填充：被填充的键处为 `-inf`，掩码视作 `[B, 1, S]` | `[B, S, S]` |
        | 3' | 因果（若 `causal=True`）：键 > 查询处为 `-inf` | `[B, S, S]` |
        | 4 | 在键上做 softmax，然后**对权重做 dropout** | `[B, S, S]` |
        | 5 | 权重 `@ V`，再经过 `W_o` | `[B, S, d_v]` → `[B, S, d_model]` |

        *为什么对权重做 dropout？* 训练时随机把注意力权重置零，可以防止模型依赖位置之间少数几条固定的连接。`nn.Dropout(p)` 只在 `train()` 模式下生效：它以概率 `p` 把每个权重置零，并把保留下来的乘以 `1 / (1 - p)`，所以训练时一行权重之和不再恰好为 1（这是预期行为）；`p` 越大，每一步训练看到的权重噪声越大。原文建议取 0.1 到 0.2。

        *为什么要 `W_o`？* 它把 `d_v` 映射回 `d_model`，使输出能与输入相加（残差连接）；有多个头时，它还负责把各个头混合起来（notebook 04）。
        """),
        demo("""
        torch.manual_seed(0)
        row = torch.softmax(torch.randn(1, 6), dim=-1)  # one query's weights over 6 keys
        drop = nn.Dropout(p=0.5)
        print("weights:              ", [round(w, 3) for w in row[0].tolist()], " sum", round(row.sum().item(), 3))
        print("dropout(0.5), train:  ", [round(w, 3) for w in drop.train()(row)[0].tolist()], " (survivors doubled)")
        print("dropout(0.5), eval:   ", [round(w, 3) for w in drop.eval()(row)[0].tolist()])
        """),
        solution("SelfAttention", HINTS),
        check("check_self_attention(SelfAttention)", "check_self_attention"),
        demo("""
        with uses_your_code():
            attn = SelfAttention(d_model=16, dropout=0.5)
            x = torch.randn(2, 4, 16)
            attn.train()
            a, b = attn(x), attn(x)
            print("train mode, two calls differ (dropout):", not torch.allclose(a, b))
            attn.eval()
            print("eval mode, two calls agree:            ", torch.allclose(attn(x), attn(x)))
            print("output", list(attn(x).shape))
        """),
        graded_cell("module"),
        md(r"""
        ## 2. Copying our weights into `nn.MultiheadAttention`

        `nn.MultiheadAttention(embed_dim, num_heads, ...)` stores its parameters differently:

        | ours | official | shape |
        |---|---|---|
        | `W_q.weight`, `W_k.weight`, `W_v.weight` | `in_proj_weight` (rows: q, then k, then v) | `[3 * d_model, d_model]` |
        | (no bias) | `in_proj_bias` | `[3 * d_model]`, set to zero |
        | `W_o.weight` | `out_proj.weight` | `[d_model, d_model]` |
        | (no bias) | `out_proj.bias` | `[d_model]`, set to zero |

        It needs `d_k == d_v == d_model` (it has no separate widths for one head) and three traps:

        - `batch_first` defaults to **False**: without `batch_first=True` it reads `[B, S, d]` as
          `[S, B, d]`, mixing up sequences and positions;
        - its `key_padding_mask` uses True = **ignore** (ours is True = keep);
        - it returns a tuple `(output, weights)`; `need_weights=False` skips the weights.

        The seed article copies the stacked weights with `in_proj_weight.view(3, d, d).copy_(cat)`, and
        that line raises. `dst.copy_(src)` writes `src` into `dst` element by element; `src` may be
        smaller only if it *broadcasts* to `dst`'s shape (aligned from the right, size-1 axes stretched).
        The cell below prints the two shapes the seed's line puts together, and the rule at work on two
        small cases. Which source shape would the `[3, d, d]` view accept, and which one would
        `in_proj_weight` itself accept? That is the heart of `to_official`.
        """, r"""
        ## 2. 把我们的权重复制到 `nn.MultiheadAttention`

        `nn.MultiheadAttention(embed_dim, num_heads, ...)` 存放参数的方式不同：

        | 我们的 | 官方的 | 形状 |
        |---|---|---|
        | `W_q.weight`, `W_k.weight`, `W_v.weight` | `in_proj_weight`（各行依次是 q、k、v） | `[3 * d_model, d_model]` |
        | （无偏置） | `in_proj_bias` | `[3 * d_model]`，置零 |
        | `W_o.weight` | `out_proj.weight` | `[d_model, d_model]` |
        | （无偏置） | `out_proj.bias` | `[d_model]`，置零 |

        它要求 `d_k == d_v == d_model`（单头时它没有单独的宽度设置），并且有三个陷阱：

        - `batch_first` 默认为 **False**：不设 `batch_first=True`，它会把 `[B, S, d]` 当作 `[S, B, d]` 读取，把序列和位置搞混；
        - 它的 `key_padding_mask` 中 True = **忽略**（我们的是 True = 保留）；
        - 它返回一个元组 `(output, weights)`；`need_weights=False` 时不计算权重。

        原文用 `in_proj_weight.view(3, d, d).copy_(cat)` 复制堆叠起来的权重，而这一行会报错。`dst.copy_(src)` 把 `src` 逐元素写入 `dst`；只有当 `src` 能*广播*到 `dst` 的形状（从右对齐，大小为 1 的维度被拉伸）时，`src` 才可以更小。下面的单元格打印出原文这一行拼到一起的两个形状，并在两个小例子上演示这条规则。`[3, d, d]` 视图能接受什么形状的源？`in_proj_weight` 本身又能接受什么形状？这正是 `to_official` 的关键。
        """),
        demo("""
        d = 16
        official = nn.MultiheadAttention(d, num_heads=1, batch_first=True)
        W_q, W_k, W_v = (nn.Linear(d, d, bias=False) for _ in range(3))
        stacked = torch.cat([W_q.weight, W_k.weight, W_v.weight], dim=0)
        destination = official.in_proj_weight.view(3, d, d)
        print("in_proj_weight", list(official.in_proj_weight.shape), "| the seed's view", list(destination.shape),
              "| torch.cat of the three weights along dim 0", list(stacked.shape))
        with torch.no_grad():
            try:
                destination.copy_(stacked)  # the seed's line
            except RuntimeError as error:
                print("seed's copy: RuntimeError:", str(error).splitlines()[0])

        grid = torch.zeros(2, 3)
        grid.copy_(torch.tensor([1.0, 2.0, 3.0]))  # [3] broadcasts to [2, 3]: copied into every row
        print("[2, 3].copy_([3]) works:", grid.tolist())
        try:
            grid.copy_(torch.arange(6.0))  # [6] does not broadcast to [2, 3], though it has 6 numbers
        except RuntimeError as error:
            print("[2, 3].copy_([6]): RuntimeError:", str(error).splitlines()[0])
        """),
        solution("to_official", HINTS),
        check("check_to_official(to_official)", "check_to_official"),
        md(r"""
        ## 3. A parity check must be able to fail

        `parity_error(custom, x, mask)` runs both modules on the same input, in eval mode (no dropout) and
        without gradients, with the mask converted to `key_padding_mask`, and returns the largest absolute
        difference. For a correct module it is of the order of float32's rounding step
        (`torch.finfo(torch.float32).eps`, about `1.2e-7`): the two modules add the same numbers in
        different orders. PyTorch's own module differs from itself by as much between its two code
        paths (`need_weights=False` runs a fused kernel); the demo below prints both.

        A check is only worth something if it *can* say no. A tempting but useless check compares the
        module with itself, or builds the "official" module from the same code it is meant to test: it
        returns 0 whatever the bug. Below, the same parity check is run on deliberately broken modules:
        each must give a large error. Run this kind of experiment whenever you write a test.
        """, r"""
        ## 3. 一致性检查必须有可能失败

        `parity_error(custom, x, mask)` 在同一个输入上运行两个模块，处于 eval 模式（没有 dropout）且不计算梯度，掩码转换成 `key_padding_mask` 的约定，然后返回最大的绝对差。对一个正确的模块，这个差值与 float32 的舍入步长同一量级（`torch.finfo(torch.float32).eps`，约 `1.2e-7`）：两个模块以不同的顺序把同样的数相加。PyTorch 自己的模块在它的两条代码路径之间也相差这么多（`need_weights=False` 时走融合内核）；下面的演示把两者都打印出来。

        一个检查只有在*能够*说"不"的时候才有价值。一种诱人却无用的检查是拿模块和它自己比较，或者用被测代码本身去构造"官方"模块：无论有什么 bug，它都返回 0。下面把同一个一致性检查用在故意写坏的模块上：每个都必须给出很大的误差。每当你写测试时，都做一下这类实验。
        """),
        solution("parity_error", HINTS),
        check("check_parity_error(parity_error, SelfAttention)", "check_parity_error"),
        demo("""
        with uses_your_code():
            torch.manual_seed(0)
            x = torch.randn(3, 5, 16)
            mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]  # True = real token


            class ForgetsTheMask(SelfAttention):
                def forward(self, x, mask=None, causal=False):
                    return super().forward(x, None, causal)  # bug: drops the padding mask


            class AlwaysCausal(SelfAttention):
                def forward(self, x, mask=None, causal=False):
                    return super().forward(x, mask, True)  # bug: an encoder that cannot see the future


            good = SelfAttention(16, dropout=0.0)
            print(f"correct module, padding mask:   {parity_error(good, x, mask):.2e}")
            for Broken in (ForgetsTheMask, AlwaysCausal):
                broken = Broken(16, dropout=0.0)
                broken.load_state_dict(good.state_dict())
                print(f"{Broken.__name__ + ',':<15} padding mask:   {parity_error(broken, x, mask):.2e}")

            official = to_official(good).eval()
            with torch.no_grad():
                fused, _ = official(x, x, x, need_weights=False)
                unfused, _ = official(x, x, x, need_weights=True)
            print(f"official module, its two paths: {(fused - unfused).abs().max().item():.2e}   (float32 eps: {torch.finfo(torch.float32).eps:.2e})")

            # The batch_first trap: the same official module reading [B, S, d] as [S, B, d].
            official.batch_first = False
            with torch.no_grad():
                theirs, _ = official(x, x, x, need_weights=False)
                print(f"batch_first=False by mistake:   {(good.eval()(x) - theirs).abs().max().item():.2e}")
        """),
        graded_cell("official_parity"),
        md(r"""
        ## 4. What does a trained attention look at?

        The seed article ends with advice worth following: print the attention weights on real input
        and look where each position reads. Random weights show nothing (the first picture below); a
        trained model does. Below, two tiny models are trained on a toy task each, for 150 small steps
        (the cell prints how long that took). Each is your `SelfAttention` between token-plus-position
        embeddings and a linear read-out that predicts one token per position:

        - **reverse**: output the input sequence backwards, so position `i` needs token `S - 1 - i`;
        - **previous token**, with `causal=True`: position `i` outputs the token at position `i - 1`.

        To see the weights without changing your module, the cell registers a *forward hook* on
        `attn.dropout`: PyTorch calls it with the module's input on every call, and the input of the
        dropout is exactly the weights after the softmax (step 4 of the table in section 1).
        """, r"""
        ## 4. 训练后的注意力在看什么？

        原文最后给出了一条值得照做的建议：在真实输入上打印注意力权重，看看每个位置读的是哪里。随机权重什么也看不出来（下面第一张图）；训练过的模型就不一样了。下面在两个玩具任务上各训练一个很小的模型，每个训练 150 个小步（单元格会打印出花了多长时间）。两个模型都是在 token 嵌入加位置嵌入之后接你的 `SelfAttention`，再接一个线性读出层，为每个位置预测一个 token：

        - **reverse（反转）**：把输入序列倒过来输出，所以位置 `i` 需要 token `S - 1 - i`；
        - **previous token（前一个 token）**，使用 `causal=True`：位置 `i` 输出位置 `i - 1` 上的 token。

        为了在不修改你的模块的前提下看到权重，单元格在 `attn.dropout` 上注册了一个 *forward hook*：每次调用时 PyTorch 都会把该模块的输入传给它，而 dropout 的输入恰好就是 softmax 之后的权重（第 1 节表格中的第 4 步）。
        """),
        demo("""
        import time
        import unicodedata

        import matplotlib.pyplot as plt


        def pad(text, width, align="<"):  # `text` padded to `width` columns on screen (a Chinese character takes two)
            return f"{text:{align}{width - sum(unicodedata.east_asian_width(c) in 'WF' for c in text)}}"


        with uses_your_code():
            torch.manual_seed(0)
            vocab, S, d = 10, 8, 32


            class TinyModel(nn.Module):
                \"\"\"Token and position embeddings, your SelfAttention, a read-out to one token per position.\"\"\"

                def __init__(self, causal):
                    super().__init__()
                    self.causal = causal
                    self.tokens = nn.Embedding(vocab, d)
                    self.positions = nn.Parameter(0.5 * torch.randn(S, d))
                    self.attn = SelfAttention(d, dropout=0.0)
                    self.readout = nn.Linear(d, vocab)

                def forward(self, x):  # x [B, S] token ids -> [B, S, vocab] scores
                    return self.readout(self.attn(self.tokens(x) + self.positions, causal=self.causal))


            def previous_token(x):  # target of position i is x[i - 1]; position 0 has none (-100 is ignored)
                return torch.cat([torch.full_like(x[:, :1], -100), x[:, :-1]], dim=1)


            def attention_map(model, x):  # the weights [S, S] averaged over the sequences x, and the predictions
                seen = []
                hook = model.attn.dropout.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
                with torch.no_grad():
                    predicted = model.eval()(x).argmax(-1)
                hook.remove()
                model.train()
                return seen[0].mean(0), predicted


            tasks = {"reverse": (False, lambda x: x.flip(1), lambda i: S - 1 - i),
                     "previous token": (True, previous_token, lambda i: i - 1)}
            test = torch.randint(0, vocab, (500, S))
            maps = {}
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # tiny matrices: one CPU thread is enough
            try:
                for name, (causal, target_of, needed_key) in tasks.items():
                    model = TinyModel(causal)
                    if not maps:
                        maps["reverse, before training"] = attention_map(model, test)[0]
                    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
                    started = time.perf_counter()
                    for step in range(150):
                        x = torch.randint(0, vocab, (64, S))
                        loss = F.cross_entropy(model(x).reshape(-1, vocab), target_of(x).reshape(-1))
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                    weights, predicted = attention_map(model, test)
                    maps[f"{name}, trained"] = weights
                    target = target_of(test)
                    accuracy = (predicted == target)[target != -100].float().mean().item()
                    on_needed = torch.stack([weights[i, needed_key(i)] for i in range(S) if needed_key(i) >= 0]).mean().item()
                    print(f"{pad(name, 15)} trained in {time.perf_counter() - started:.1f} s: accuracy {accuracy:.3f}, "
                          f"average weight on the key the task needs {on_needed:.2f}")
            finally:
                torch.set_num_threads(threads)

            fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
            for ax, (title, weights) in zip(axes, maps.items()):
                ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
                ax.set(title=title, xlabel="key j", ylabel="query i")
            plt.tight_layout()
            plt.show()
        """),
        md(r"""
        Reversal shows up as the anti-diagonal (query `i` reads key `S - 1 - i`), the previous-token task
        as the line just below the diagonal, which `causal=True` allows. Nothing told the models where to
        look; the read-out only saw the loss. This is what the seed means by checking whether a model
        "looks at the right place": on a real model, pick an input whose answer you know and see whether
        the weights land on the evidence.

        ## 5. Pitfalls and how to debug them

        When your module and the official one disagree, check in this order:

        1. `batch_first=True`? (Otherwise sequences and positions are swapped.)
        2. Mask convention: `key_padding_mask = ~mask`.
        3. Biases zeroed (`in_proj_bias`, `out_proj.bias`)?
        4. Both in `eval()` mode? Dropout makes every call different.
        5. Scale `1/sqrt(d_k)` and softmax over `dim=-1` in your module.

        A difference of a few float32 rounding steps (`1e-7` to `1e-6`) is rounding. Anything above `1e-4`
        is a bug.
        """, r"""
        反转任务表现为反对角线（查询 `i` 读取键 `S - 1 - i`），前一个 token 任务表现为紧贴对角线下方的那条线，而 `causal=True` 允许这条线。没有任何东西告诉模型该看哪里；读出层只看到了损失。这就是原文所说的检查模型是否"看对了地方"：在真实模型上，挑一个你知道答案的输入，看看权重是否落在证据上。

        ## 5. 常见陷阱与调试方法

        当你的模块和官方模块结果不一致时，按以下顺序检查：

        1. 设置了 `batch_first=True` 吗？（否则序列和位置会互换。）
        2. 掩码约定：`key_padding_mask = ~mask`。
        3. 偏置置零了吗（`in_proj_bias`、`out_proj.bias`）？
        4. 两者都处于 `eval()` 模式吗？dropout 会让每次调用的结果都不同。
        5. 你的模块里的缩放 `1/sqrt(d_k)` 和 `dim=-1` 上的 softmax。

        几个 float32 舍入步长的差异（`1e-7` 到 `1e-6`）属于舍入误差。超过 `1e-4` 的都是 bug。
        """),
    ]


# The Chinese docstrings of the solution cells (the build puts them in the Chinese edition).
DOCSTRINGS_ZH = {
    "SelfAttention": "带输出投影的单头自注意力。",
    "SelfAttention.forward": "x [B, S, d_model]，mask [B, S]（True = 真实 token）-> [B, S, d_model]。",
    "to_official": "一个带有 `custom` 权重的 nn.MultiheadAttention（单头，batch_first）。",
    "parity_error": "|custom(x, mask) - official(x)| 的最大值，掩码转换为 key_padding_mask。",
}

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    "# one query's weights over 6 keys": "# 一个查询在 6 个键上的权重",
    '"weights:              "': '"权重：                  "',
    '" sum"': '" 和"',
    '"dropout(0.5), train:  "': '"dropout(0.5)，训练模式："',
    '" (survivors doubled)"': '"（保留下来的翻倍）"',
    '"dropout(0.5), eval:   "': '"dropout(0.5)，评估模式："',
    '"train mode, two calls differ (dropout):"': '"训练模式，两次调用结果不同（dropout）："',
    '"eval mode, two calls agree:            "': '"评估模式，两次调用结果一致：           "',
    '"output"': '"输出"',
    '"| the seed\'s view"': '"| 原文的视图"',
    '"| torch.cat of the three weights along dim 0"': '"| 三个权重沿 dim 0 的 torch.cat"',
    "# the seed's line": "# 原文的那一行",
    '"seed\'s copy: RuntimeError:"': '"原文的复制：RuntimeError："',
    "# [3] broadcasts to [2, 3]: copied into every row": "# [3] 广播到 [2, 3]：复制到每一行",
    '"[2, 3].copy_([3]) works:"': '"[2, 3].copy_([3]) 可以："',
    '"[2, 3].copy_([6]): RuntimeError:"': '"[2, 3].copy_([6]) 报错：RuntimeError："',
    "# [6] does not broadcast to [2, 3], though it has 6 numbers": "# [6] 不能广播到 [2, 3]，尽管它也有 6 个数",
    "# True = real token": "# True = 真实 token",
    "# bug: drops the padding mask": "# 错误：丢掉了填充掩码",
    "# bug: an encoder that cannot see the future": "# 错误：一个看不到后文的编码器",
    'f"correct module, padding mask:   {': 'f"正确的模块，填充掩码：       {',
    "Broken.__name__ + ','": "Broken.__name__ + '，'",
    "padding mask:   {parity_error(broken, x, mask):.2e}": "填充掩码：  {parity_error(broken, x, mask):.2e}",
    'f"official module, its two paths: {': 'f"官方模块自身的两条路径：     {',
    ':.2e}   (float32 eps: {': ':.2e}   （float32 的 eps：{',
    '.eps:.2e})"': '.eps:.2e}）"',
    "# The batch_first trap: the same official module reading [B, S, d] as [S, B, d].":
        "# batch_first 陷阱：同一个官方模块把 [B, S, d] 当成 [S, B, d] 来读。",
    'f"batch_first=False by mistake:   {': 'f"误用 batch_first=False：     {',
    '"""Token and position embeddings, your SelfAttention, a read-out to one token per position."""':
        '"""token 嵌入和位置嵌入、你的 SelfAttention、每个位置读出一个 token。"""',
    "# x [B, S] token ids -> [B, S, vocab] scores": "# x [B, S] 的 token id -> [B, S, vocab] 的分数",
    "# target of position i is x[i - 1]; position 0 has none (-100 is ignored)": "# 位置 i 的目标是 x[i - 1]；位置 0 没有目标（-100 会被忽略）",
    "# the weights [S, S] averaged over the sequences x, and the predictions": "# 在序列 x 上平均的权重 [S, S]，以及预测结果",
    '"reverse": (False': '"反转": (False',
    '"previous token": (True': '"前一个 token": (True',
    '"reverse, before training"': '"反转，训练之前"',
    "# `text` padded to `width` columns on screen (a Chinese character takes two)": "# 把 `text` 补齐到屏幕上的 `width` 列（一个汉字占两列）",
    "# tiny matrices: one CPU thread is enough": "# 矩阵很小：一个 CPU 线程就够了",
    'f"{name}, trained"': 'f"{name}，训练之后"',
    'f"{pad(name, 15)} trained in {time.perf_counter() - started:.1f} s: accuracy {accuracy:.3f}, "':
        'f"{pad(name, 15)} 训练用时 {time.perf_counter() - started:.1f} 秒：准确率 {accuracy:.3f}，"',
    'f"average weight on the key the task needs {on_needed:.2f}"': 'f"任务所需的键上的平均权重 {on_needed:.2f}"',
    'ax.set(title=title, xlabel="key j", ylabel="query i")': 'ax.set(title=title, xlabel="键 j", ylabel="查询 i")',
}
