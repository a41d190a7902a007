"""Notebook 04 of `real_models`: your attention through the library's own seam (`attn_implementation`), the masks
each kernel receives, and what a practitioner meets next (`_from_config`, `head_dim`, the cache API, GPT-2's knobs)."""
from course.cells import check, demo, graded_cell, md, recipe, setup, solution
from course.content.written import written_cells

NAME = "04_interface"

HINTS = {
    "course_attention": (
        "query [B, H, S_q, D], key/value [B, H_kv, S_k, D]: repeat each kv head H // H_kv times next to itself,\n"
        "scores * scaling, the mask as it comes (bool: fill finfo.min where False; float: add it), softmax, dropout,\n"
        "weights @ value, and hand back [B, S_q, H, D]: the library reshapes that layout itself.",
        "query [B, H, S_q, D]，key/value [B, H_kv, S_k, D]：把每个 kv 头就地重复 H // H_kv 次，\n"
        "分数乘以 scaling，掩码按传进来的样子用（bool：False 处填 finfo.min；浮点：直接相加），softmax，dropout，\n"
        "weights @ value，最后交回 [B, S_q, H, D]：库自己会把这个布局 reshape 回去。",
    ),
    "register_course_attention": (
        "two registries, one name: AttentionInterface.register(name, course_attention) and\n"
        "AttentionMaskInterface.register(name, <the mask function whose masks course_attention expects>).",
        "两个注册表，同一个名字：AttentionInterface.register(name, course_attention)，以及\n"
        "AttentionMaskInterface.register(name, <course_attention 所期望的那种掩码的掩码函数>)。",
    ),
}

RECIPES = {
    "course_attention": (
        """
        1. `H, H_kv, D = query.shape[1], key.shape[1], query.shape[-1]`; `key = key.repeat_interleave(H // H_kv,
           dim=1)`, the same for `value` (copies of a head side by side, as `repeat_kv` of `generation`; never
           `repeat`, which tiles).
        2. `scale = D ** -0.5 if scaling is None else scaling`; `scores = query @ key.transpose(-2, -1) * scale`.
        3. A bool mask: `scores.masked_fill(~mask, torch.finfo(scores.dtype).min)`; a float mask: `scores + mask`;
           `None`: every key.
        4. `weights = torch.softmax(scores, dim=-1)`, then `F.dropout(weights, p=dropout, training=module.training)`.
        5. Return `(weights @ value).transpose(1, 2).contiguous()` (`[B, S_q, H, D]`) and `weights`.
        """,
        """
        1. `H, H_kv, D = query.shape[1], key.shape[1], query.shape[-1]`；`key = key.repeat_interleave(H // H_kv,
           dim=1)`，`value` 同理（同一个头的副本彼此相邻，和 `generation` 的 `repeat_kv` 一样；不能用 `repeat`，那是整体平铺）。
        2. `scale = D ** -0.5 if scaling is None else scaling`；`scores = query @ key.transpose(-2, -1) * scale`。
        3. bool 掩码：`scores.masked_fill(~mask, torch.finfo(scores.dtype).min)`；浮点掩码：`scores + mask`；
           `None`：所有键都可见。
        4. `weights = torch.softmax(scores, dim=-1)`，然后 `F.dropout(weights, p=dropout, training=module.training)`。
        5. 返回 `(weights @ value).transpose(1, 2).contiguous()`（`[B, S_q, H, D]`）和 `weights`。
        """,
    ),
    "register_course_attention": (
        """
        1. `from transformers import AttentionInterface, AttentionMaskInterface` and
           `from transformers.masking_utils import eager_mask` inside the function.
        2. `AttentionInterface.register(name, course_attention)`;
           `AttentionMaskInterface.register(name, eager_mask)` (always a float `[B, 1, S_q, S_k]` mask, never `None`).
        3. `return name`.
        """,
        """
        1. 在函数内部 `from transformers import AttentionInterface, AttentionMaskInterface`，以及
           `from transformers.masking_utils import eager_mask`。
        2. `AttentionInterface.register(name, course_attention)`；
           `AttentionMaskInterface.register(name, eager_mask)`（总是给出浮点的 `[B, 1, S_q, S_k]` 掩码，从不是 `None`）。
        3. `return name`。
        """,
    ),
}

DOCSTRINGS_ZH = {
    "course_attention": """库的注意力函数签名：query [B, H, S_q, D]，key/value [B, H_kv, S_k, D]（H_kv 整除 H），attention_mask 为 None（所有键）、bool 的 [B, 1, S_q, S_k]（True = 可见）或浮点加性掩码（0 / finfo.min）-> (输出 [B, S_q, H, D]，即库会自己 reshape 的布局；权重 [B, H, S_q, S_k]，dropout 之后)。""",
    "register_course_attention": """把 course_attention 以 `name` 注册到库的 AttentionInterface，并以同一个名字把它所期望的掩码函数注册到 AttentionMaskInterface；之后 `attn_implementation=name` 会让每一层都运行它。返回 `name`。""",
}


def cells():
    return [
        md(r"""
        # 04 · The library's own seam: your attention behind `attn_implementation`

        The last notebook of **your attention inside real models**. Notebooks 01 to 03 took your layers into the
        library by swapping modules and moving weights. A practitioner does it another way: they write one
        function with the signature of the library's `eager_attention_forward`, register it under a name, and
        build any model with `attn_implementation=name`; every attention layer of every model then calls it. This
        notebook writes that function, shows which mask each of the library's kernels receives (and why your
        function needs a *mask function* registered beside it), and runs the library's own `generate()` with your
        attention. Then four things a practitioner meets in the next model they open: `_from_config`'s shared
        configuration, `head_dim` as a field of its own, the cache API of the two pinned versions, and GPT-2's
        scaling and dropout knobs.

        | part | functions | what it does |
        |---|---|---|
        | `attention_interface` | `course_attention`, `register_course_attention` | your attention as the library calls it, registered with its mask function |
        """, r"""
        # 04 · 库自己的接口：`attn_implementation` 背后的你的注意力

        **真实模型里的注意力** 的最后一个 notebook。notebook 01 到 03 通过替换模块、搬运权重，把你的层放进了库里。实际工作中的做法不一样：写一个与库的 `eager_attention_forward` 签名相同的函数，用一个名字注册它，再用 `attn_implementation=name` 构造任意模型；此后每个模型的每一个注意力层都会调用它。本 notebook 写出这个函数，展示库的每种算子各自收到什么样的掩码（以及为什么你的函数需要在旁边注册一个*掩码函数*），并用你的注意力运行库自己的 `generate()`。最后是打开下一个模型时会遇到的四件事：`_from_config` 共用的配置、作为独立字段的 `head_dim`、两个锁定版本的缓存 API，以及 GPT-2 的缩放和 dropout 开关。

        | 评分部分 | 函数 | 作用 |
        |---|---|---|
        | `attention_interface` | `course_attention`, `register_course_attention` | 按库的调用方式写的你的注意力，连同它的掩码函数一起注册 |
        """),
        setup(),
        md(r"""
        ## 1. The function every layer calls

        A model of the library does not compute attention in its layers. Each layer projects the queries, keys
        and values, rotates them if it uses RoPE, updates the cache, and then calls one function, looked up by the
        name in `config._attn_implementation`: `eager_attention_forward` (plain PyTorch), `sdpa`
        (`F.scaled_dot_product_attention`), `flex_attention`, `flash_attention_2`, ... Read the eager one: it
        receives `query [B, H, S_q, D]` and `key`/`value` with fewer heads (`repeat_kv` makes up the difference),
        the `attention_mask` the model built, `scaling` and `dropout`, and returns the output as
        `[B, S_q, H, D]`: the layer reshapes it and applies its output projection.
        """, r"""
        ## 1. 每一层都调用的那个函数

        库里的模型并不在各层里自己计算注意力。每一层先做查询、键、值的投影，用 RoPE 的话再旋转它们，更新缓存，然后调用一个函数，这个函数按 `config._attn_implementation` 里的名字查找：`eager_attention_forward`（朴素的 PyTorch 实现）、`sdpa`（`F.scaled_dot_product_attention`）、`flex_attention`、`flash_attention_2` 等等。读一下 eager 这个：它收到 `query [B, H, S_q, D]`，以及头数更少的 `key`/`value`（`repeat_kv` 补上差额）、模型构造好的 `attention_mask`、`scaling` 和 `dropout`，返回 `[B, S_q, H, D]` 布局的输出：层会把它 reshape，再做输出投影。
        """),
        demo("""
        import copy
        import inspect

        import transformers
        from transformers import (AttentionInterface, AttentionMaskInterface, BertConfig, BertModel, GPT2Config,
                                  GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM)
        from transformers import masking_utils
        from transformers.models.llama import modeling_llama

        print("transformers", transformers.__version__)
        show_source(modeling_llama.eager_attention_forward)
        print()
        for kernel in ("eager", "sdpa", "flex_attention", "flash_attention_2"):
            mask_function = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS[kernel]
            print(f"{kernel:<18} its mask function: {mask_function.__name__}")
        """),
        md(r"""
        Each kernel comes with a *mask function*, registered under the same name in a second registry,
        `AttentionMaskInterface`: the model calls it once per forward to turn the `attention_mask [B, S]` you give
        it (and causality) into the mask that kernel wants. The cell registers a function that only records what
        it receives, once with each kernel's mask function, and runs a tiny Llama on a left-padded batch and on a
        batch without padding (no `attention_mask` at all). `flex_attention`'s mask function builds a
        `BlockMask` (its return type is printed; building one compiles for half a minute, so it is not run).
        """, r"""
        每种算子都配有一个*掩码函数*，以同一个名字注册在第二个注册表 `AttentionMaskInterface` 里：模型在每次前向计算时调用它一次，把你给的 `attention_mask [B, S]`（以及因果性）变成这个算子想要的掩码。单元格注册一个只记录自己收到了什么的函数，分别配上每种算子的掩码函数，在一个左侧填充的批次和一个没有填充（完全不给 `attention_mask`）的批次上运行一个迷你 Llama。`flex_attention` 的掩码函数构造的是 `BlockMask`（下面打印它的返回类型；构造一个要编译半分钟，所以这里不运行）。
        """),
        demo("""
        received = []


        def describe(mask):  # what a mask is, in one short string
            if mask is None:
                return "None"
            if not torch.is_tensor(mask):
                return type(mask).__name__
            values = "True/False" if mask.dtype == torch.bool else f"0 / {mask.min().item():.3g}"
            return f"{mask.dtype} {list(mask.shape)} {values}"


        def peek(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):  # records, returns zeros
            received.append(describe(attention_mask))
            B, H, S, D = query.shape
            return query.new_zeros(B, S, H, D), None


        small = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                     intermediate_size=64, vocab_size=50)
        tokens = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 7, 8, 9]])  # sample 1 is left-padded
        padding = (tokens != 0).long()  # [B, S]: 1 = real token
        for kernel in ("eager", "sdpa", "flash_attention_2"):
            name = "peek_" + kernel.replace("flash_attention_2", "fa2")  # a name without "flash": no kernel is looked up
            AttentionInterface.register(name, peek)
            AttentionMaskInterface.register(name, masking_utils.ALL_MASK_ATTENTION_FUNCTIONS[kernel])
            model = LlamaForCausalLM(LlamaConfig(**small, attn_implementation=name)).eval()
            received.clear()
            with torch.no_grad():
                model(tokens, attention_mask=padding)
                model(tokens)
            print(f"{kernel:<18} padded: {received[0]:<38} no padding: {received[1]}")
        flex_mask = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["flex_attention"]
        print(f"{'flex_attention':<18} both: {inspect.signature(flex_mask).return_annotation.__name__}")
        """),
        md(r"""
        Four kernels, four kinds of mask: **eager** gets the float additive mask `[B, 1, S_q, S_k]` (0 or
        `finfo.min`, the most negative finite value) every time; **SDPA** gets booleans on a padded batch but
        `None` on a batch without padding, because it calls `scaled_dot_product_attention(..., is_causal=True)`
        then; **flash** gets no `[B, 1, S_q, S_k]` mask at all (`None`, or the model's `[B, S]` padding mask, from
        which it removes the padding: causality is built into the kernel); **flex** gets a `BlockMask`. The same on
        both pinned versions (5.x and 4.57).

        What the difference does: a row whose every key is hidden, here BERT's sample of padding only. Eager's
        `finfo.min` gives that row equal weights, so its output is the mean of the values (notebook `02_bert`);
        5.x's SDPA gets `False` everywhere and returns 0 (4.57's SDPA gets BERT's float mask and gives the mean
        too). The cell runs one BERT with both kernels:
        """, r"""
        四种算子，四种掩码：**eager** 每次都拿到浮点加性掩码 `[B, 1, S_q, S_k]`（0 或 `finfo.min`，即最小的有限值）；**SDPA** 在有填充的批次上拿到布尔掩码，在没有填充的批次上却拿到 `None`，因为那时它以 `scaled_dot_product_attention(..., is_causal=True)` 调用；**flash** 根本拿不到 `[B, 1, S_q, S_k]` 的掩码（要么是 `None`，要么是模型的 `[B, S]` 填充掩码，算子据此去掉填充：因果性内置在算子里）；**flex** 拿到一个 `BlockMask`。两个锁定版本（5.x 和 4.57）都是如此。

        这种差别会造成什么：一行里所有的键都被屏蔽，这里是 BERT 全是填充的那条样本。eager 的 `finfo.min` 让这一行权重相等，于是输出是值的平均（见 notebook `02_bert`）；5.x 的 SDPA 拿到的全是 `False`，返回 0（4.57 的 SDPA 拿到的是 BERT 的浮点掩码，给出的也是平均值）。单元格用两种算子运行同一个 BERT：
        """),
        demo("""
        bert_sizes = dict(hidden_size=12, num_attention_heads=3, num_hidden_layers=1, intermediate_size=24,
                          vocab_size=50, attention_probs_dropout_prob=0.0)
        torch.manual_seed(0)
        bert_eager = BertModel(BertConfig(**bert_sizes, attn_implementation="eager")).eval()
        outputs = {}
        for kernel in ("eager", "sdpa"):
            bert = BertModel(BertConfig(**bert_sizes, attn_implementation=kernel)).eval()
            bert.load_state_dict(bert_eager.state_dict())  # the same weights, another kernel
            bert.encoder.layer[0].attention.self.register_forward_hook(
                lambda module, args, out, kernel=kernel: outputs.__setitem__(kernel, out[0]))
            with torch.no_grad():
                bert(torch.tensor([[5, 6, 7, 8], [0, 0, 0, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]))
            print(f"{kernel:>5}: the padding-only sample's largest |output| {outputs[kernel][1].abs().max().item():.4f}")
        """),
        md(r"""
        ## 2. Your attention function

        `course_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)` has
        the library's signature and returns `(attn_output [B, S_q, H, D], attn_weights [B, H, S_q, S_k])`:

        - grouped heads from the shapes: `key`/`value` have `H_kv` heads, and query head `h` reads kv head
          `h // (H / H_kv)` (copies side by side, as `repeat_kv`);
        - `attention_mask` as it comes: `None` (every key, as `eager_attention_forward` reads it), a bool
          `[B, 1, S_q, S_k]` (True = attend) or a float additive one (0 / `finfo.min`). Do not build a causal mask
          yourself: the mask (or the mask function) decides, and `S_q` may differ from `S_k` (a cache);
        - `scaling` when given (GPT-2 and others pass their own), else `D ** -0.5`;
        - `dropout` on the weights when the module is training; the library passes `0.0` in eval;
        - `**kwargs` ignored (the library passes more: `sliding_window`, `position_ids`, ...).

        Plain torch: no function of the library inside. The check tries several head counts (one and several kv
        heads), head dims, `S_q != S_k`, each mask form, a given `scaling`, and bfloat16.
        """, r"""
        ## 2. 你的注意力函数

        `course_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs)` 与库的签名相同，返回 `(attn_output [B, S_q, H, D], attn_weights [B, H, S_q, S_k])`：

        - 分组的头由形状决定：`key`/`value` 有 `H_kv` 个头，查询头 `h` 读取第 `h // (H / H_kv)` 个 kv 头（同一个头的副本彼此相邻，和 `repeat_kv` 一样）；
        - `attention_mask` 按传进来的样子用：`None`（所有键都可见，`eager_attention_forward` 就是这样理解的）、bool 的 `[B, 1, S_q, S_k]`（True = 可见），或浮点的加性掩码（0 / `finfo.min`）。不要自己构造因果掩码：由掩码（或掩码函数）决定，而且 `S_q` 可能不等于 `S_k`（有缓存时）；
        - 给了 `scaling` 就用它（GPT-2 等模型会传入自己的值），否则用 `D ** -0.5`；
        - 模块处于训练模式时对权重做 `dropout`；eval 时库传入 `0.0`；
        - `**kwargs` 忽略（库还会传入别的东西：`sliding_window`、`position_ids` 等）。

        只用朴素的 torch：里面不能调用库的任何函数。检查会尝试不同的头数（一个和多个 kv 头）、不同的 head_dim、`S_q != S_k`、每一种掩码形式、给定的 `scaling`，以及 bfloat16。
        """),
        recipe("course_attention", RECIPES),
        solution("course_attention", HINTS),
        check("check_course_attention(course_attention)", "check_course_attention"),
        md(r"""
        ## 3. Registering it, with its mask function

        `register_course_attention(name="course")` registers `course_attention` with `AttentionInterface` and,
        under the same name, the mask function whose masks it expects with `AttentionMaskInterface`; it returns
        `name`. Which one? The cell below measures the three choices with your function inside a tiny Llama
        (grouped heads, 2 layers), against the eager model, on a left-padded batch (at real tokens) and on a batch
        without padding: registered alone, with SDPA's mask function, and with yours.
        """, r"""
        ## 3. 连同掩码函数一起注册

        `register_course_attention(name="course")` 把 `course_attention` 注册到 `AttentionInterface`，并以同一个名字把它所期望的那种掩码的掩码函数注册到 `AttentionMaskInterface`；返回 `name`。该选哪一个？下面的单元格把你的函数放进一个迷你 Llama（分组的头，2 层），与 eager 模型对比，测量三种选择在左侧填充的批次上（只看真实 token）和没有填充的批次上的差距：单独注册、配 SDPA 的掩码函数、配你选的掩码函数。
        """),
        solution("register_course_attention", HINTS),
        check("check_register_course_attention(register_course_attention)", "check_register_course_attention"),
        demo("""
        with uses_your_code():
            name = register_course_attention("course")
        AttentionInterface.register("alone", course_attention)  # no mask function under this name
        AttentionInterface.register("with_sdpa_mask", course_attention)
        AttentionMaskInterface.register("with_sdpa_mask", masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        llama_sizes = dict(small, num_hidden_layers=2, bos_token_id=1, eos_token_id=None, pad_token_id=0)
        torch.manual_seed(1)
        eager = LlamaForCausalLM(LlamaConfig(**llama_sizes, attn_implementation="eager")).eval()
        prompts = torch.tensor([[3, 4, 5, 6, 7, 8], [0, 0, 5, 6, 7, 8], [0, 0, 0, 0, 7, 8]])  # left-padded
        padding = (prompts != 0).long()
        with torch.no_grad():
            want, want_unpadded = eager(prompts, attention_mask=padding).logits, eager(prompts).logits
            for implementation in ("alone", "with_sdpa_mask", name):
                model = LlamaForCausalLM(LlamaConfig(**llama_sizes, attn_implementation=implementation)).eval()
                model.load_state_dict(eager.state_dict())
                with uses_your_code():
                    padded = (model(prompts, attention_mask=padding).logits - want)[padding.bool()].abs().max().item()
                    unpadded = (model(prompts).logits - want_unpadded).abs().max().item()
                print(f"{implementation:<15} left-padded: off by {padded:.2e}   no padding: off by {unpadded:.2e}")
        """),
        md(r"""
        Registered alone, your function receives `attention_mask=None` and attends to every key, padding and
        future included: wrong on both batches, without any error. With SDPA's mask function it is right on the
        padded batch and wrong without padding, where it receives `None` and SDPA's `is_causal` would have done
        the work. With the eager mask function it always receives the float mask, and the logits are eager's.
        Now the library's own `generate()`, with its own cache, on the three left-padded prompts:
        """, r"""
        单独注册时，你的函数收到的是 `attention_mask=None`，会关注所有的键，包括填充和未来的词元：在两个批次上都算错，而且不报任何错误。配上 SDPA 的掩码函数时，在有填充的批次上是对的，在没有填充的批次上是错的：那里它收到 `None`，本该由 SDPA 的 `is_causal` 来完成因果屏蔽。配上 eager 的掩码函数时，它总是收到浮点掩码，logits 与 eager 的一致。下面用库自己的 `generate()`（使用库自己的缓存）在这三个左侧填充的提示上生成：
        """),
        demo("""
        with torch.no_grad():
            want = eager.generate(prompts, attention_mask=padding, max_new_tokens=16, do_sample=False)
            with uses_your_code():
                got = model.generate(prompts, attention_mask=padding, max_new_tokens=16, do_sample=False)
        print("generate() with your attention gives eager's 16 tokens:", torch.equal(got, want))
        print(got[:, prompts.shape[1]:].tolist())
        """),
        *written_cells("written_mask_function"),
        graded_cell("attention_interface"),
        md(r"""
        ## 4. The `_from_config` trap

        `Model._from_config(config, attn_implementation=...)` builds a model from a configuration object, and
        writes the choice of kernel *into that object*. Two models built from one configuration then share it: the
        "eager" reference you built first runs the last model's attention, and a comparison of the two compares
        your function with itself.
        """, r"""
        ## 4. `_from_config` 的陷阱

        `Model._from_config(config, attn_implementation=...)` 用一个配置对象构造模型，并把所选的算子*写进这个对象*。于是用同一个配置构造的两个模型共用它：你先构造的 "eager" 参考模型运行的是最后那个模型的注意力，两者的比较其实是你的函数在和自己比。
        """),
        demo("""
        shared = LlamaConfig(**small)
        reference = LlamaForCausalLM._from_config(shared, attn_implementation="eager")
        yours = LlamaForCausalLM._from_config(shared, attn_implementation=name)
        print("the reference built with eager now runs:", reference.config._attn_implementation)
        print("one configuration object for both:", reference.config is yours.config)
        reference = LlamaForCausalLM._from_config(copy.deepcopy(shared), attn_implementation="eager")
        print("with a copy of the configuration, the reference runs:", reference.config._attn_implementation)
        """),
        md(r"""
        ## 5. `head_dim`, a field of its own

        Notebook 03 derived `head_dim = hidden_size / num_attention_heads`. Current models (Mistral-NeMo, Gemma,
        Qwen3) set `head_dim` in the configuration, and it need not divide anything: `q_proj` is then
        `[H * head_dim, hidden_size]` and `o_proj` `[hidden_size, H * head_dim]`, not square. A layer that computes
        `d_model // H` breaks on them; `from_hf_llama` takes `head_dim` from the module. `LlamaConfig` fills the
        field in on both pinned versions:
        """, r"""
        ## 5. `head_dim`：一个独立的字段

        notebook 03 用 `head_dim = hidden_size / num_attention_heads` 推出了 head_dim。现在的模型（Mistral-NeMo、Gemma、Qwen3）在配置里直接设定 `head_dim`，它不必整除任何东西：这时 `q_proj` 是 `[H * head_dim, hidden_size]`，`o_proj` 是 `[hidden_size, H * head_dim]`，都不是方阵。一个计算 `d_model // H` 的层遇到它们就会出错；`from_hf_llama` 从模块里读取 `head_dim`。两个锁定版本的 `LlamaConfig` 都会填上这个字段：
        """),
        demo("""
        for extra in ({}, {"head_dim": 16}):
            config = LlamaConfig(**small, **extra)
            attn = modeling_llama.LlamaAttention(config, layer_idx=0)
            print(f"head_dim={config.head_dim:<3} q_proj {list(attn.q_proj.weight.shape)}  k_proj "
                  f"{list(attn.k_proj.weight.shape)}  o_proj {list(attn.o_proj.weight.shape)}  (hidden_size 32, 4 heads)")
        """),
        md(r"""
        ## 6. The cache API between the two pinned versions

        The library changed its cache interface between 4.57 and 5.x, and code written against one breaks on the
        other. The cell prints, on your installed version: the model's and the layer's arguments (the cache is
        `past_key_values` in 4.57 and `cache` in 5.x; `cache_position` is an argument of the attention layer in
        4.57 only), `DynamicCache.update`'s signature (4.57 takes a `cache_kwargs` dictionary), and where
        `position_ids` come from: the model counts them after the cache when none are given, while `generate()`
        derives them from the `attention_mask` (`cumsum - 1`), so that a left-padded prompt starts at position 0.
        """, r"""
        ## 6. 两个锁定版本之间的缓存 API

        库在 4.57 和 5.x 之间改了缓存接口，按其中一个版本写的代码在另一个版本上会出错。单元格打印你安装的版本中：模型和层的参数（缓存在 4.57 里叫 `past_key_values`，在 5.x 里叫 `cache`；`cache_position` 只在 4.57 里是注意力层的参数）、`DynamicCache.update` 的签名（4.57 接收一个 `cache_kwargs` 字典），以及 `position_ids` 从哪里来：不传时，模型从缓存的长度往后数；而 `generate()` 根据 `attention_mask` 推出它们（`cumsum - 1`），这样左侧填充的提示也从位置 0 开始。
        """),
        demo("""
        from transformers.cache_utils import DynamicCache
        from transformers.generation.utils import GenerationMixin

        print("LlamaForCausalLM.forward:", list(inspect.signature(LlamaForCausalLM.forward).parameters)[1:])
        print("LlamaAttention.forward:  ", list(inspect.signature(modeling_llama.LlamaAttention.forward).parameters)[1:])
        print("DynamicCache.update", inspect.signature(DynamicCache.update))
        show_lines([modeling_llama.LlamaModel.forward, GenerationMixin], {
            "positions counted by the model": ("torch.arange(inputs_embeds.shape[1]", "position_ids = cache_position.unsqueeze(0)"),
            "positions in generate()": "position_ids = attention_mask.long().cumsum(-1) - 1",
        })
        """),
        md(r"""
        ## 7. GPT-2's scaling and dropout, as your function receives them

        GPT-2's configuration has two knobs the other models lack: `scale_attn_by_inverse_layer_idx` divides the
        scale of layer `i` by `i + 1` (off by default), and `attn_pdrop` is the dropout on the attention weights
        (0.1 by default), active whenever the model is in training mode: forget `.eval()` and every comparison is
        off at random. How the scale reaches your function depends on the version: 5.x passes each layer's
        `scaling` (`head_dim ** -0.5`, divided by `layer_idx + 1` with the knob on), while 4.57 passes
        `scaling=None` and computes GPT-2's scale inside its own `eager_attention_forward`, so a registered
        function falls back to `D ** -0.5` and layer 1 is off there when the knob is on. The cell registers a
        function that records what it receives and then calls yours, and runs a 2-layer GPT-2 with both knobs
        set, in training and in eval mode:
        """, r"""
        ## 7. GPT-2 的缩放与 dropout：你的函数收到的样子

        GPT-2 的配置里有两个别的模型没有的开关：`scale_attn_by_inverse_layer_idx` 把第 `i` 层的缩放再除以 `i + 1`（默认关闭），`attn_pdrop` 是注意力权重上的 dropout（默认 0.1），只要模型处于训练模式就生效：忘了 `.eval()`，每次比较都会随机地对不上。缩放怎样传到你的函数里，取决于版本：5.x 会传入每一层的 `scaling`（`head_dim ** -0.5`，打开开关时再除以 `layer_idx + 1`）；4.57 传入的是 `scaling=None`，GPT-2 的缩放在它自己的 `eager_attention_forward` 里计算，于是注册的函数只能退回到 `D ** -0.5`，打开开关时第 1 层就会算错。单元格注册一个函数，记录它收到的参数后再调用你的函数，然后在训练模式和 eval 模式下运行一个两个开关都打开的 2 层 GPT-2：
        """),
        demo("""
        calls = []


        def record(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
            calls.append(f"layer {module.layer_idx}: scaling={scaling}, dropout={dropout}")
            return course_attention(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


        AttentionInterface.register("record", record)
        AttentionMaskInterface.register("record", masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["eager"])
        gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_head=4, n_layer=2, n_positions=32, vocab_size=50, bos_token_id=0,
                                          eos_token_id=0, attn_pdrop=0.5, scale_attn_by_inverse_layer_idx=True,
                                          attn_implementation="record"))
        tokens = torch.randint(0, 50, (2, 5))
        for mode in ("train", "eval"):
            getattr(gpt2, mode)()
            calls.clear()
            with torch.no_grad(), uses_your_code():
                first, second = gpt2(tokens).logits, gpt2(tokens).logits
            print(f"{mode:<5} {calls[0]}; {calls[1]}; two runs equal: {torch.equal(first, second)}")
        print()
        print("head_dim ** -0.5 =", 4 ** -0.5, " divided by 2 for layer 1:", 4 ** -0.5 / 2)
        """),
        md(r"""
        ## 8. Pitfalls

        - **Registered without its mask function**: your function receives `None` and attends to everything;
          nothing raises. Register the eager mask function under the same name.
        - **SDPA's mask function**: `None` on a batch without padding means "`is_causal`", which your function
          cannot know.
        - **The output layout**: `[B, S_q, H, D]`, not `[B, H, S_q, D]`: the layer reshapes it to
          `[B, S_q, H * D]`, and the wrong layout still has the right number of elements.
        - **`scaling`**: use the one given; GPT-2 may pass a scale that is not `D ** -0.5`.
        - **Grouped heads**: copies of a kv head side by side (`repeat_interleave`), not `repeat`.
        - **`_from_config`** writes into the configuration it is given: one configuration per model.
        - **`head_dim`** from the configuration or the module, never `d_model // H`.
        - **`.eval()`**: dropout is on in training mode, for the library's attention and yours.
        """, r"""
        ## 8. 常见错误

        - **注册时没有配掩码函数**：你的函数收到 `None`，关注所有位置；不会报错。要以同一个名字注册 eager 的掩码函数。
        - **SDPA 的掩码函数**：在没有填充的批次上，`None` 的意思是"用 `is_causal`"，而你的函数无从知道这一点。
        - **输出布局**：是 `[B, S_q, H, D]`，不是 `[B, H, S_q, D]`：层会把它 reshape 成 `[B, S_q, H * D]`，布局错了元素个数照样对得上。
        - **`scaling`**：用传进来的那个；GPT-2 传入的缩放可能不是 `D ** -0.5`。
        - **分组的头**：kv 头的副本彼此相邻（`repeat_interleave`），不是 `repeat`。
        - **`_from_config`** 会写进传给它的配置：每个模型用自己的配置。
        - **`head_dim`** 从配置或模块里读，不要用 `d_model // H`。
        - **`.eval()`**：训练模式下 dropout 是打开的，库的注意力和你的都一样。
        """),
    ]


# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    '} its mask function: {': '} 它的掩码函数：{',
    "# what a mask is, in one short string": "# 用一个短字符串描述掩码",
    "# records, returns zeros": "# 只记录，返回全零",
    "# sample 1 is left-padded": "# 样本 1 是左侧填充的",
    "# [B, S]: 1 = real token": "# [B, S]：1 = 真实 token",
    '# a name without "flash": no kernel is looked up': '# 名字里没有 "flash"：不会去查找算子',
    '} padded: {received[0]:<38} no padding: {': '} 有填充：{received[0]:<38} 无填充：{',
    '} both: {': '} 两者：{',
    "# the same weights, another kernel": "# 同样的权重，换一种算子",
    ': the padding-only sample\'s largest |output| {': '：全是填充的样本，最大 |输出| {',
    "# no mask function under this name": "# 这个名字下没有掩码函数",
    "# left-padded": "# 左侧填充",
    '} left-padded: off by {padded:.2e}   no padding: off by {': '} 左侧填充：相差 {padded:.2e}   无填充：相差 {',
    '"generate() with your attention gives eager\'s 16 tokens:"': '"用你的注意力运行 generate()，得到与 eager 相同的 16 个 token："',
    '"the reference built with eager now runs:"': '"用 eager 构造的参考模型现在运行的是："',
    '"one configuration object for both:"': '"两者共用同一个配置对象："',
    '"with a copy of the configuration, the reference runs:"': '"用配置的副本构造，参考模型运行的是："',
    '  (hidden_size 32, 4 heads)': '  （hidden_size 32，4 个头）',
    '"positions counted by the model"': '"由模型数出的位置"',
    '"positions in generate()"': '"generate() 里的位置"',
    "; two runs equal: {": "；两次运行结果相同：{",
    'f"layer {module.layer_idx}: scaling=': 'f"第 {module.layer_idx} 层：scaling=',
    '" divided by 2 for layer 1:"': '" 第 1 层再除以 2："',
}
