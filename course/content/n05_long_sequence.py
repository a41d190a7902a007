"""Notebook 05: long sequences: the S^2 memory wall, SDPA and chunked attention."""
import dataclasses

from course.cells import check, demo, graded_cell, md, recipe, setup, setup_source, solution

NAME = "05_long_sequence"

# The setup cell's extra import, in each edition (the comment is the only difference).
SETUP = "from memory_meter import LiveMemoryMeter  # peak live CPU tensor memory (see memory_meter.py)"
SETUP_ZH = "from memory_meter import LiveMemoryMeter  # CPU 上存活张量内存的峰值（见 memory_meter.py）"

HINTS = {
    "attention_matrix_bytes": ("bytes = how many scores the tensor holds x how many bytes one score takes in `dtype`.",
                               "字节数 = 张量中分数的个数 x 在 `dtype` 下每个分数占用的字节数。"),
    "sdpa_attention": ("SDPA's boolean attn_mask means 'may attend'. Without a padding mask, is_causal=causal keeps the\n"
                       "fast kernels available; with one, fold padding ([B, 1, 1, S]) and causality ([S, S]) into one boolean mask.",
                       "SDPA 的布尔 attn_mask 表示'可以关注'。没有填充掩码时，用 is_causal=causal 可以保留快速内核；\n"
                       "有填充掩码时，把填充（[B, 1, 1, S]）和因果性（[S, S]）合成一个布尔掩码。"),
    "chunked_attention": ("loop over blocks of queries; every block still needs all the keys. For causality compare\n"
                          "absolute positions (block start + row), not positions inside the block.",
                          "按查询块循环；每个块仍然需要所有的键。处理因果性时要比较绝对位置\n"
                          "（块的起点 + 行号），而不是块内的位置。"),
}


# The second hints, folded above their stubs (course.cells.recipe): the recipe, for after the first hint.
RECIPES = {
    "attention_matrix_bytes": ("The scores are `[B, H, S, S]`, so `B * H * S * S` elements; "
                               "`torch.empty(0, dtype=dtype).element_size()` is the size of one (2 for float16, 4 for "
                               "float32). Multiply the two, in Python integers.",
                               "分数是 `[B, H, S, S]`，共 `B * H * S * S` 个元素；"
                               "`torch.empty(0, dtype=dtype).element_size()` 是一个元素的字节数（float16 为 2，float32 为 4）。"
                               "用 Python 整数把两者相乘。"),
}


def cells():
    return [
        md(r"""
        # 05 · Long sequences: memory, fused kernels and chunking

        Plain attention builds the whole score matrix `[B, H, S, S]`, so its memory grows with the
        **square** of the sequence length. This notebook measures that wall and two ways around it:

        - `F.scaled_dot_product_attention` (SDPA): PyTorch's fused attention, which picks a kernel that
          never stores the full matrix when it can;
        - **chunked attention**: process the queries in blocks, so only `[B, H, chunk, S]` scores are alive
          at once, with exactly the same result.

        Part `long_sequence`: `attention_matrix_bytes`, `sdpa_attention`, `chunked_attention`
        (`q, k, v` are per-head tensors `[B, H, S, head_dim]`).
        """, r"""
        # 05 · 长序列：内存、融合内核与分块

        朴素的注意力会构造完整的分数矩阵 `[B, H, S, S]`，所以它占用的内存随序列长度的**平方**增长。本 notebook 先实际测出这道内存瓶颈，再介绍绕过它的两种办法：

        - `F.scaled_dot_product_attention`（SDPA）：PyTorch 的融合注意力，只要条件允许，就会选用从不存储完整矩阵的内核；
        - **分块注意力**：把查询分成若干块来处理，同一时刻只有 `[B, H, chunk, S]` 的分数存在，结果完全相同。

        评分部分 `long_sequence`：`attention_matrix_bytes`、`sdpa_attention`、`chunked_attention`（`q, k, v` 是按头划分的张量 `[B, H, S, head_dim]`）。
        """),
        dataclasses.replace(setup(SETUP), zh=setup_source(SETUP_ZH, "zh")),
        md(r"""
        ## 1. How big is the score matrix?

        One `[B, H, S, S]` matrix holds $B \cdot H \cdot S^2$ numbers, each `element_size` bytes (4 for
        float32, 2 for float16 / bfloat16):

        $$\text{bytes} = B \cdot H \cdot S^2 \cdot \text{element size}$$

        For `B = 1`, `H = 16` in float16: `S = 4096` gives $16 \cdot 4096^2 \cdot 2$ bytes = **512 MiB**;
        `S = 32768` gives **32 GiB**, for one layer's scores alone (the cell after your function prints
        these). Plain attention keeps two such matrices at its peak, the scores and their softmax
        (section 4 measures it). Doubling the sequence length quadruples all of this.
        """, r"""
        ## 1. 分数矩阵有多大？

        一个 `[B, H, S, S]` 矩阵包含 $B \cdot H \cdot S^2$ 个数，每个数占 `element_size` 字节（float32 为 4，float16 / bfloat16 为 2）：

        $$\text{字节数} = B \cdot H \cdot S^2 \cdot \text{每个元素的字节数}$$

        对 `B = 1`、`H = 16`、float16：`S = 4096` 时为 $16 \cdot 4096^2 \cdot 2$ 字节 = **512 MiB**；`S = 32768` 时为 **32 GiB**，这还只是一层的分数（你的函数之后的单元格会打印这些数）。朴素注意力在峰值时同时保留两个这样的矩阵：分数和它们的 softmax（第 4 节会测量）。序列长度翻倍，这一切都变成四倍。
        """),
        recipe("attention_matrix_bytes", RECIPES),
        solution("attention_matrix_bytes", HINTS),
        check("check_attention_matrix_bytes(attention_matrix_bytes)", "check_attention_matrix_bytes"),
        demo("""
        with uses_your_code():
            for S in (1024, 4096, 32768):
                for dtype in (torch.float16, torch.float32):
                    size = attention_matrix_bytes(1, 16, S, dtype)
                    print(f"B=1, H=16, S={S:>6}, {str(dtype):<13}: {size / 2**30:8.3f} GiB per score matrix")
        """),
        md(r"""
        ## 2. `F.scaled_dot_product_attention`

        `F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)` computes
        `softmax(q k^T / sqrt(head_dim) + mask) v` for `[B, H, S, head_dim]` inputs and dispatches to one
        of several backends:

        | backend | what it accepts on CUDA (PyTorch's documentation) | extra memory |
        |---|---|---|
        | **flash** | fp16 / bf16, `is_causal`, **no `attn_mask`** | O(S) per head: never stores the matrix |
        | **memory-efficient** | fp32 / fp16 / bf16, boolean or additive `attn_mask` | O(S) for its own work; the mask you pass comes on top |
        | **cuDNN** | fp16 / bf16 on recent NVIDIA GPUs (e.g. H100/H200); masks depend on the version | O(S) |
        | **math** | anything, any device: the reference fallback | O(S²): the whole matrix, like hand-written code; in fp16 / bf16 it computes in float32 by default |

        On a CPU there is a CPU "flash" kernel (which does accept boolean masks) and the math backend;
        section 4 measures both. You can restrict the choice with the context manager
        `torch.nn.attention.sdpa_kernel`; if none of the allowed backends accepts the inputs, SDPA raises
        an error instead of silently falling back.

        **Mask convention.** A boolean `attn_mask` means *may attend*, the same sense as our padding mask,
        but it must broadcast to `[B, H, S_q, S_k]`: a `[B, S]` mask becomes `[B, 1, 1, S]`, only `B x S`
        booleans. For causality without padding, prefer `is_causal=True` over an explicit `[S, S]` mask:
        no mask tensor at all, and on a GPU the flash kernel stays available. On a GPU, *any* `attn_mask`
        (for instance a `[B, 1, 1, S]` padding mask) rules out flash, and SDPA falls back to the
        memory-efficient kernel, slower but still O(S) for its own work. With **both** a padding mask and
        causality, `sdpa_attention` has to fold them into one mask with a query axis, `[B, 1, S, S]`:
        that mask alone is O(S²). Section 4 measures what it costs and what avoids it. Note what the
        checks compare: every row of the output, the rows of padded *queries* included. `is_causal=True`
        alone, which section 4 shows is enough for a model's real queries, leaves those rows reading
        padded keys and fails the checks: fold the two masks.
        """, r"""
        ## 2. `F.scaled_dot_product_attention`

        `F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)` 对 `[B, H, S, head_dim]` 的输入计算 `softmax(q k^T / sqrt(head_dim) + mask) v`，并分派给几个后端之一：

        | 后端 | 在 CUDA 上接受什么（PyTorch 文档） | 额外内存 |
        |---|---|---|
        | **flash** | fp16 / bf16，`is_causal`，**不接受 `attn_mask`** | 每个头 O(S)：从不存储整个矩阵 |
        | **memory-efficient** | fp32 / fp16 / bf16，布尔型或加性 `attn_mask` | 自身工作为 O(S)；你传入的掩码另算 |
        | **cuDNN** | 较新的 NVIDIA GPU（如 H100/H200）上的 fp16 / bf16；掩码支持取决于版本 | O(S) |
        | **math** | 任何输入、任何设备：作为参考的兜底实现 | O(S²)：整个矩阵，和手写代码一样；在 fp16 / bf16 下默认用 float32 计算 |

        在 CPU 上有一个 CPU 版的"flash"内核（它确实接受布尔掩码）和 math 后端；第 4 节会测量这两者。你可以用上下文管理器 `torch.nn.attention.sdpa_kernel` 限定可选的后端；如果允许的后端都不接受这些输入，SDPA 会报错，而不是悄悄回退。

        **掩码约定。** 布尔型 `attn_mask` 表示*可以关注*，与我们的填充掩码含义相同，但它必须能广播到 `[B, H, S_q, S_k]`：`[B, S]` 的掩码变成 `[B, 1, 1, S]`，只有 `B x S` 个布尔值。对于没有填充的因果性，优先用 `is_causal=True`，而不是显式的 `[S, S]` 掩码：完全不需要掩码张量，而且在 GPU 上 flash 内核仍然可用。在 GPU 上，*任何* `attn_mask`（例如 `[B, 1, 1, S]` 的填充掩码）都会排除 flash，SDPA 会回退到 memory-efficient 内核，更慢，但自身工作仍是 O(S)。如果**同时**有填充掩码和因果性，`sdpa_attention` 必须把它们合成一个带查询维度的掩码 `[B, 1, S, S]`：这个掩码本身就是 O(S²)。第 4 节测量它的代价以及避免它的办法。注意检查比较的内容：输出的每一行，包括被填充的*查询*所在的行。只用 `is_causal=True`（第 4 节会说明，对模型中真实的查询这已经足够）会让这些行读到被填充的键，因而通不过检查：要把两个掩码合并。
        """),
        solution("sdpa_attention", HINTS),
        check("check_sdpa_attention(sdpa_attention)", "check_sdpa_attention"),
        md(r"""
        ## 3. Chunked attention: exact, with a fraction of the memory

        Each row of the softmax needs all the keys of *one* query, and nothing from other queries. So we
        can compute the output for queries `start:stop` on their own: scores `[B, H, chunk, S]`, mask,
        softmax, times `v`, and write the block into the output. The result is exactly plain attention;
        only `chunk x S` scores per head are alive at any moment instead of `S x S`. (FlashAttention goes
        further and also splits the keys, combining partial softmaxes on the fly; that needs a running
        maximum and sum per row and is beyond this notebook.)

        Careful with the causal mask: query row `r` of a block is the absolute position `start + r`.
        """, r"""
        ## 3. 分块注意力：结果精确，内存只占一小部分

        softmax 的每一行只需要*一个*查询的所有键，不需要其他查询的任何东西。所以我们可以单独计算查询 `start:stop` 的输出：分数 `[B, H, chunk, S]`、掩码、softmax、乘以 `v`，然后把这一块写入输出。结果与朴素注意力完全相同；任何时刻每个头只有 `chunk x S` 个分数存在，而不是 `S x S`。（FlashAttention 更进一步，把键也分块，边算边合并部分 softmax；这需要为每一行维护一个运行中的最大值和总和，超出了本 notebook 的范围。）

        注意因果掩码：一个块的第 `r` 行查询对应的绝对位置是 `start + r`。
        """),
        solution("chunked_attention", HINTS),
        check("check_chunked_attention(chunked_attention)", "check_chunked_attention"),
        graded_cell("long_sequence"),
        md(r"""
        ## 4. Measuring peak memory on a CPU

        `LiveMemoryMeter` (in `memory_meter.py`, next to this notebook) watches every PyTorch operation
        and records the largest total size of tensors alive at the same time, counting only tensors
        created inside the `with` block: the *extra* memory a function needs. We compare plain attention
        (written inline here), your chunked attention (`chunk_size=128`) and your SDPA version, over a range
        of lengths. Small sizes keep this fast; the shape of the curves is what matters.

        The meter sees the tensors that operators return, not a buffer that a single operator allocates and
        frees inside itself. `torch.logsumexp(x, -1)` computes `exp(x - max)` over the whole of `x` inside
        one operator: the cell's last lines measure it on a 64 MiB tensor, then the same computation written
        as separate operators, whose temporary the meter does see. A fused kernel's work buffer is missed the
        same way (`efficient`'s 01_flash asks `torch.profiler` for one).
        """, r"""
        ## 4. 在 CPU 上测量峰值内存

        `LiveMemoryMeter`（在本 notebook 旁边的 `memory_meter.py` 中）监视每一个 PyTorch 操作，记录同一时刻存活张量的最大总大小，只统计在 `with` 块内创建的张量：也就是一个函数所需的*额外*内存。我们在一系列长度上比较朴素注意力（这里直接内联写出）、你的分块注意力（`chunk_size=128`）和你的 SDPA 版本。尺寸小一些可以跑得快；重要的是曲线的形状。

        内存计看到的是各个算子返回的张量，看不到单个算子在自己内部分配又释放的缓冲区。`torch.logsumexp(x, -1)` 在一个算子内部对整个 `x` 计算 `exp(x - max)`：单元格最后几行在一个 64 MiB 的张量上测量它，再测量拆成几个算子写出的同一个计算，后者的临时张量内存计是看得到的。融合内核的工作缓冲区同样看不到（`efficient` 作业的 01_flash 用 `torch.profiler` 查出了一个）。
        """),
        demo("""
        import unicodedata

        import matplotlib.pyplot as plt


        def pad(text, width, align="<"):  # `text` padded to `width` columns on screen (a Chinese character takes two)
            return f"{text:{align}{width - sum(unicodedata.east_asian_width(c) in 'WF' for c in text)}}"


        def plain_attention(q, k, v):
            return torch.softmax(q @ k.mT * q.shape[-1] ** -0.5, dim=-1) @ v


        def peak_mib(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                fn(*args, **kwargs)
            return meter.peak_bytes / 2**20


        B, H, head_dim = 1, 4, 32
        lengths = [128, 256, 512, 1024, 2048]
        candidates = {
            "plain": plain_attention,
            "chunked (128)": lambda q, k, v: chunked_attention(q, k, v, chunk_size=128),
            "sdpa": sdpa_attention,
        }
        peaks = {name: [] for name in candidates}
        for S in lengths:
            q, k, v = (torch.randn(B, H, S, head_dim) for _ in range(3))
            for name, fn in candidates.items():
                try:
                    peaks[name].append(peak_mib(fn, q, k, v))
                except NotImplementedError:
                    peaks[name].append(float("nan"))
        print(f"{'S':>6} {'one S x S matrix':>17} " + " ".join(pad(name, 14, ">") for name in candidates) + "   (MiB)")
        for i, S in enumerate(lengths):
            print(f"{S:>6} {B * H * S * S * 4 / 2**20:>17.2f} " + " ".join(f"{peaks[n][i]:>14.2f}" for n in candidates))
        if any(p != p for values in peaks.values() for p in values):
            print("(nan: that function is not implemented yet)")

        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for name, values in peaks.items():
            ax.plot(lengths, values, marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="sequence length S", ylabel="peak live memory (MiB)",
               title=f"CPU, float32, B={B}, H={H}, head_dim={head_dim}")
        ax.set_xticks(lengths, [str(s) for s in lengths])
        ax.minorticks_off()  # only the measured lengths on the x axis
        ax.legend()
        plt.show()
        x = torch.randn(16, 1024, 1024)  # 64 MiB
        one_operator = peak_mib(torch.logsumexp, x, -1)
        separate = peak_mib(lambda x: (x - x.amax(-1, keepdim=True)).exp_().sum(-1).log() + x.amax(-1), x)
        print(f"logsumexp of a {x.nbytes / 2**20:.0f} MiB tensor: torch.logsumexp {one_operator:.2f} MiB seen, "
              f"the same written as separate operators {separate:.2f} MiB")
        """),
        md(r"""
        Plain attention grows by 4x for every doubling of S (the slope-2 line on the log-log plot) and
        peaks at about two score matrices. Chunked attention grows only linearly: its blocks are
        `128 x S`. SDPA's CPU kernel stays close to the size of its output.

        ### Choosing a backend

        The next cell asks SDPA for one backend at a time, with and without a boolean padding mask, and
        reports which ones this machine can run and what they cost, next to plain attention. On a CPU,
        expect the flash and math kernels to work and the CUDA-only ones to be refused, and the math
        backend to peak where plain attention does: in float32 it computes the same matrices.
        """, r"""
        S 每翻一倍，朴素注意力的峰值就变为原来的 4 倍（双对数图上斜率为 2 的直线），峰值约为两个分数矩阵。分块注意力只线性增长：它的块是 `128 x S`。SDPA 的 CPU 内核始终接近它输出的大小。

        ### 选择后端

        下一个单元格每次只让 SDPA 使用一个后端，分别在有和没有布尔填充掩码的情况下运行，报告本机能运行哪些后端以及它们的代价，并与朴素注意力对比。在 CPU 上，预期 flash 和 math 内核能工作，仅限 CUDA 的内核会被拒绝，而 math 后端的峰值与朴素注意力相同：在 float32 下它计算的是同样的矩阵。
        """),
        demo("""
        import warnings

        from torch.nn.attention import SDPBackend, sdpa_kernel

        torch.manual_seed(0)
        B, H, S, head_dim = 1, 4, 1024, 32
        q, k, v = (torch.randn(B, H, S, head_dim) for _ in range(3))
        keep = torch.arange(S)[None, :] < torch.tensor([900])[:, None]  # [B, S], True = real token
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
            for label, attn_mask in (("no mask", None), ("bool mask [B,1,1,S]", keep[:, None, None, :])):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # SDPA explains refusals through warnings
                        with sdpa_kernel(backend), LiveMemoryMeter() as meter:
                            F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
                    result = f"peak {meter.peak_bytes / 2**20:6.2f} MiB"
                except RuntimeError:
                    result = "refused: no such kernel for these inputs on this machine"
                print(f"{backend.name:<20} {pad(label, 20)} {result}")
        with LiveMemoryMeter() as meter:
            torch.softmax(q @ k.mT * head_dim ** -0.5, dim=-1) @ v
        print(f"{'plain attention':<20} {'no mask':<20} peak {meter.peak_bytes / 2**20:6.2f} MiB")
        print(f"for comparison, one S x S float32 matrix: {B * H * S * S * 4 / 2**20:.2f} MiB")
        """),
        md(r"""
        ### The math backend in float16

        In float16 and bfloat16 the math backend does more than hand-written code: by default it converts
        `q`, `k` and `v` to float32 for the computation (for accuracy) and converts the result back, so
        its score matrix takes 4 bytes a number instead of 2 and it peaks at about twice plain float16
        code. The switch is `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`: despite the
        `cuda` in its name, the cell below shows that it governs the CPU too in this version of PyTorch.
        On a GPU the same default applies; that is why the math backend peaks above plain float16 code
        there (see the reference figures below). So if SDPA falls back to the math backend, you get none
        of the savings and, in half precision, a bigger bill.
        """, r"""
        ### float16 下的 math 后端

        在 float16 和 bfloat16 下，math 后端比手写代码做得更多：默认情况下它会把 `q`、`k` 和 `v` 转成 float32 来计算（为了精度），再把结果转回去，所以它的分数矩阵每个数占 4 字节而不是 2 字节，峰值约为朴素 float16 代码的两倍。开关是 `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`：尽管名字里有 `cuda`，下面的单元格表明，在这个版本的 PyTorch 中它同样控制 CPU。在 GPU 上也是同样的默认设置；这就是为什么在 GPU 上 math 后端的峰值高于朴素 float16 代码（见下面的参考数据）。所以如果 SDPA 回退到 math 后端，你得不到任何节省，而且在半精度下开销更大。
        """),
        demo("""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        torch.manual_seed(0)
        B, H, S, head_dim = 1, 4, 1024, 32
        q, k, v = (torch.randn(B, H, S, head_dim, dtype=torch.float16) for _ in range(3))
        print("one S x S float16 matrix:", B * H * S * S * 2 / 2**20, "MiB")
        print("fp16/bf16 reduction allowed in the math backend (default):", torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed())
        with LiveMemoryMeter() as meter:
            torch.softmax(q @ k.mT * head_dim ** -0.5, dim=-1) @ v
        print(f"plain attention, float16:             peak {meter.peak_bytes / 2**20:6.2f} MiB")
        for allowed in (False, True):
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(allowed)
            try:
                with sdpa_kernel(SDPBackend.MATH), LiveMemoryMeter() as meter:
                    F.scaled_dot_product_attention(q, k, v)
            finally:
                torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)  # back to the default
            print(f"math backend, float16, allowed={allowed!s:<5}: peak {meter.peak_bytes / 2**20:6.2f} MiB")
        """),
        md(r"""
        ### Padding and causality together: a mask that costs O(S²)

        With a padding mask *and* `causal=True`, `sdpa_attention` folds both into one boolean mask
        `[B, 1, S, S]` (the hint says so, and the exercise needs it). Unlike `[B, 1, 1, S]` it has a
        query axis, so it holds `B x S^2` booleans, one byte each: O(S²) memory before any kernel runs,
        however little the kernel itself needs. On the CPU, SDPA also turns a boolean mask into a float
        mask of the same shape. The first cell below measures this, and your `sdpa_attention`; the two
        cells show four ways around it:

        - **one mask at a time**: a padding mask alone, `[B, 1, 1, S]`, or `is_causal=True` alone, with no
          mask tensor;
        - **right padding and causality**: a real query `i` (with `i < length`) may only see keys `j <= i`,
          and those are all real, so `is_causal=True` alone already hides every padded key from every
          real query. Only the rows of padded queries differ, and a model throws those away. (The
          exercise's `sdpa_attention` must equal plain attention on *every* row, so it folds.)
        - **`torch.nn.attention.flex_attention`** describes a mask by a rule, `mask_mod(b, h, q, k)`, and
          stores it as a *block mask*: for each block of 128 x 128 (query, key) pairs, whether it is empty,
          full or partial. The stored block mask is small; building it here, without `torch.compile`,
          still evaluates the rule on every pair once (the meter shows it). To *run* without the full
          matrix, flex attention itself must be compiled with `torch.compile`, which this notebook does
          not do (PyTorch's own warning, printed below, says so);
        - **nested tensors**: a batch whose sequences keep their own lengths (`layout=torch.jagged`), so
          there is no padding to mask: the cell runs SDPA on a batch of lengths 5 and 3 with no mask at
          all.
        """, r"""
        ### 填充与因果同时存在：一个 O(S²) 的掩码

        有填充掩码*并且* `causal=True` 时，`sdpa_attention` 会把两者合成一个布尔掩码 `[B, 1, S, S]`（提示里这样说，练习也需要这样做）。与 `[B, 1, 1, S]` 不同，它有查询维度，所以包含 `B x S^2` 个布尔值，每个占一个字节：在任何内核运行之前就已经占用 O(S²) 内存，无论内核本身需要多少。在 CPU 上，SDPA 还会把布尔掩码转换成同样形状的浮点掩码。下面第一个单元格测量了这一点，以及你的 `sdpa_attention`；这两个单元格展示了四种绕开它的办法：

        - **一次只用一种掩码**：只用填充掩码 `[B, 1, 1, S]`，或只用 `is_causal=True`，不需要掩码张量；
        - **右填充加因果性**：真实的查询 `i`（`i < length`）只能看到 `j <= i` 的键，而这些键都是真实的，所以单独的 `is_causal=True` 就已经对所有真实查询屏蔽了每一个被填充的键。只有被填充的查询所在的行会不同，而模型会丢弃这些行。（练习中的 `sdpa_attention` 必须在*每一*行上都与朴素注意力相等，所以它要合并掩码。）
        - **`torch.nn.attention.flex_attention`** 用一条规则 `mask_mod(b, h, q, k)` 描述掩码，并把它存成*块掩码*：对每个 128 x 128 的（查询，键）配对块，记录它是空的、满的还是部分的。存储的块掩码很小；在这里不用 `torch.compile` 构建它时，仍然要对每一对计算一次规则（内存计量器显示了这一点）。要在*运行*时不构造完整矩阵，flex attention 本身必须用 `torch.compile` 编译，本 notebook 没有这样做（下面打印出的 PyTorch 自己的警告也这么说）；
        - **嵌套张量**：一个批次中的序列各自保留自己的长度（`layout=torch.jagged`），所以根本没有需要屏蔽的填充：单元格在长度为 5 和 3 的批次上不加任何掩码运行 SDPA。
        """),
        demo("""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        torch.manual_seed(0)
        B, H, S, head_dim = 1, 4, 1024, 32
        q, k, v = (torch.randn(B, H, S, head_dim) for _ in range(3))
        lengths = torch.tensor([900])
        keep = torch.arange(S)[None, :] < lengths[:, None]  # [B, S], True = real token


        def measured(fn, *args, **kwargs):
            with LiveMemoryMeter() as meter:
                out = fn(*args, **kwargs)
            return out, meter.peak_bytes / 2**20


        bool_bytes = torch.empty((), dtype=torch.bool).element_size()
        print(f"a [B, 1, S, S] boolean mask: {B * S * S * bool_bytes / 2**20:.2f} MiB at S = {S}, "
              f"{B * 32768 * 32768 * bool_bytes / 2**30:.2f} GiB at S = 32768 (B = 1)")
        _, peak_pad = measured(F.scaled_dot_product_attention, q, k, v, attn_mask=keep[:, None, None, :])
        causal, peak_causal = measured(F.scaled_dot_product_attention, q, k, v, is_causal=True)
        any_mask = torch.rand(B, 1, S, S) > 0.1  # any boolean mask with a query axis, built beforehand
        _, peak_given = measured(F.scaled_dot_product_attention, q, k, v, attn_mask=any_mask)
        print(f"SDPA, padding mask [B, 1, 1, S] only:            peak {peak_pad:5.2f} MiB")
        print(f"SDPA, is_causal=True only:                       peak {peak_causal:5.2f} MiB")
        print(f"SDPA, given a ready [B, 1, S, S] boolean mask:   peak {peak_given:5.2f} MiB (a float copy of the mask, and the output)")
        with uses_your_code():
            both, peak_both = measured(sdpa_attention, q, k, v, mask=keep, causal=True)
            built = peak_both >= B * S * S * bool_bytes / 2**20  # at least one boolean [B, 1, S, S] mask's worth
            print(f"your sdpa_attention, padding mask and causal:    peak {peak_both:5.2f} MiB"
                  + (" (a mask with a query axis was built)" if built else " (no mask with a query axis was built)"))
            try:
                with sdpa_kernel(SDPBackend.MATH):  # the backend that takes any input
                    sdpa_attention(q, k, v, mask=keep, causal=True)
                print("your sdpa_attention on SDPA's math backend: runs")
            except RuntimeError as error:
                print(f"your sdpa_attention on SDPA's math backend: RuntimeError: {error}")
            real, padded = slice(0, 900), slice(900, S)
            print(f"is_causal=True alone vs yours: real query rows differ by {(causal[:, :, real] - both[:, :, real]).abs().max().item():.1e}, "
                  f"padded query rows by {(causal[:, :, padded] - both[:, :, padded]).abs().max().item():.2f}")
        """),
        demo("""
        import warnings

        from torch.nn.attention.flex_attention import create_block_mask, flex_attention


        def rule(b, h, q_idx, kv_idx):  # flex attention's mask_mod: True = may attend
            return (kv_idx <= q_idx) & (kv_idx < lengths[b])


        for size in (1024, 4096):
            block_mask, peak_build = measured(create_block_mask, rule, B=B, H=None, Q_LEN=size, KV_LEN=size, device="cpu")
            stored = sum(t.numel() * t.element_size() for t in block_mask.as_tuple() if isinstance(t, torch.Tensor))
            print(f"block mask, S = {size}, blocks of {block_mask.BLOCK_SIZE}: stored in {stored / 2**10:5.1f} KiB "
                  f"(a dense boolean mask: {size * size / 2**20:4.0f} MiB); building it here peaked at {peak_build:5.2f} MiB")
        small = 256  # the first 256 positions: all real tokens, so the rule is just causality there
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            flex_out = flex_attention(q[:, :, :small], k[:, :, :small], v[:, :, :small],
                                      block_mask=create_block_mask(rule, B=B, H=None, Q_LEN=small, KV_LEN=small, device="cpu"))
        print(f"flex_attention on the first {small} positions equals causal SDPA:", torch.allclose(flex_out, causal[:, :, :small], atol=1e-5),
              "| PyTorch's warning:", str(caught[0].message).split(" - ")[0] if caught else "(none)")

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nested tensors print a 'prototype' warning
            seqs = [torch.randn(n, H, head_dim) for n in (5, 3)]  # two sequences, lengths 5 and 3, no padding
            nested = torch.nested.nested_tensor(seqs, layout=torch.jagged).transpose(1, 2)  # [B, H, (S), head_dim]
            out = F.scaled_dot_product_attention(nested, nested, nested).transpose(1, 2).unbind()
            alone = [F.scaled_dot_product_attention(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1)).transpose(0, 1) for x in seqs]
            print("nested batch of lengths 5 and 3, no mask: equals each sequence on its own:", all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out, alone)))
        """),
        md(r"""
        ### Reference figures on a GPU (quoted, not yet measured by this course)

        The figures below come from the course's design notes: one NVIDIA H200 with torch 2.11,
        `B = 1`, `H = 16`, `head_dim = 64`, float16, forward pass only, `S = 32768`. This course has not
        reproduced them yet. On a CUDA machine, `bash scripts/device_check.sh` (from the repository root)
        runs plain attention (a submission that builds the full matrix), SDPA and chunked attention
        through the grader's GPU stage at `S = 4096, 16384, 32768` and writes the measured table to
        `device_check.md`; `docs/gpu.md` says where to put it. Until then, read the table as orders of
        magnitude that agree with the arithmetic of the next cell.

        | method | extra peak memory | time |
        |---|---|---|
        | plain attention (two `S x S` buffers) | 64 GiB | 64 ms |
        | SDPA (flash) | 64 MiB (its output alone) | 9 ms |
        | chunked, 1024 queries per chunk | 3.1 GiB | 66 ms |
        | SDPA with a boolean padding mask `[B, 1, 1, S]` (flash refuses, memory-efficient runs) | 64 MiB | 15 ms |

        The same notes give 37 GiB for SDPA's math backend at `S = 16384`, more than plain float16 code.
        That fits what the CPU showed above: in float16 the math backend computes in float32.
        """, r"""
        ### GPU 上的参考数据（引用的，本课程尚未实测）

        下面的数据来自课程的设计笔记：一块 NVIDIA H200，torch 2.11，`B = 1`，`H = 16`，`head_dim = 64`，float16，只有前向计算，`S = 32768`。本课程还没有复现它们。在有 CUDA 的机器上，`bash scripts/device_check.sh`（在仓库根目录运行）会通过评分器的 GPU 阶段，在 `S = 4096, 16384, 32768` 下运行朴素注意力（一份构造完整矩阵的提交）、SDPA 和分块注意力，并把实测表格写入 `device_check.md`；`docs/gpu.md` 说明了该把它放在哪里。在那之前，请把这张表当作数量级来看，它与下一个单元格的算术相符。

        | 方法 | 额外峰值显存 | 时间 |
        |---|---|---|
        | 朴素注意力（两个 `S x S` 缓冲区） | 64 GiB | 64 ms |
        | SDPA（flash） | 64 MiB（仅它的输出） | 9 ms |
        | 分块，每块 1024 个查询 | 3.1 GiB | 66 ms |
        | 带布尔填充掩码 `[B, 1, 1, S]` 的 SDPA（flash 拒绝，memory-efficient 运行） | 64 MiB | 15 ms |

        同一份笔记给出 SDPA 的 math 后端在 `S = 16384` 时为 37 GiB，比朴素 float16 代码还多。这与上面 CPU 上看到的一致：在 float16 下，math 后端用 float32 计算。
        """),
        demo("""
        GiB, MiB = 2**30, 2**20
        print(f"two S x S float16 matrices, H=16, S=32768:  {2 * 16 * 32768**2 * 2 / GiB:5.1f} GiB  (plain attention's two buffers)")
        print(f"SDPA's output [1, 16, 32768, 64], float16:  {16 * 32768 * 64 * 2 / MiB:5.1f} MiB")
        print(f"two S x S float32 matrices, H=16, S=16384:  {2 * 16 * 16384**2 * 4 / GiB:5.1f} GiB  (the math backend's float32 copies)")
        print(f"two S x S float16 matrices, H=16, S=16384:  {2 * 16 * 16384**2 * 2 / GiB:5.1f} GiB  (plain float16 code)")
        """),
        md(r"""
        ## 5. Two more traps

        **float16 overflow.** The largest float16 is 65504. Raw scores of long, large vectors exceed it
        and become `inf`; a softmax over a row containing `inf` gives NaN. Scaling *before* the product
        (as SDPA does internally), computing the scores in float32, or using SDPA avoids it:
        """, r"""
        ## 5. 另外两个陷阱

        **float16 溢出。** float16 能表示的最大数是 65504。又长又大的向量的原始分数会超过它，变成 `inf`；对含有 `inf` 的一行做 softmax 会得到 NaN。在乘积*之前*缩放（SDPA 内部就是这样做的）、用 float32 计算分数，或者直接用 SDPA，都可以避免：
        """),
        demo("""
        q = torch.full((1, 1, 2, 64), 40.0, dtype=torch.float16)  # two identical queries/keys, 64 features of 40
        raw = q @ q.mT  # 64 * 40 * 40 = 102400 > 65504
        print("raw fp16 scores:", raw.flatten().tolist())
        print("softmax of them: ", torch.softmax(raw, dim=-1).flatten().tolist())
        scale = q.shape[-1] ** -0.25  # split 1/sqrt(d) between q and k before multiplying
        print("scaled first:    ", ((q * scale) @ (q * scale).mT).flatten().tolist())
        print("SDPA output finite:", torch.isfinite(F.scaled_dot_product_attention(q, q, q)).all().item())
        """),
        md(r"""
        **Dropout in eval mode.** `F.scaled_dot_product_attention(..., dropout_p=p)` is a plain function:
        it knows nothing about `module.training` and drops weights whenever `p > 0`, even after
        `model.eval()`. Inside a module, pass `dropout_p=self.dropout.p if self.training else 0.0`.
        """, r"""
        **eval 模式下的 dropout。** `F.scaled_dot_product_attention(..., dropout_p=p)` 是一个普通函数：它对 `module.training` 一无所知，只要 `p > 0` 就会丢弃权重，即使在 `model.eval()` 之后也是如此。在模块内部，请传入 `dropout_p=self.dropout.p if self.training else 0.0`。
        """),
        demo("""
        class SdpaBlock(nn.Module):
            def __init__(self, p, respect_mode):
                super().__init__()
                self.dropout = nn.Dropout(p)
                self.respect_mode = respect_mode

            def forward(self, q, k, v):
                p = self.dropout.p if (self.training or not self.respect_mode) else 0.0
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p)


        q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
        for respect_mode in (False, True):
            block = SdpaBlock(0.5, respect_mode).eval()
            same = torch.equal(block(q, k, v), block(q, k, v))
            print(f"eval mode, dropout_p {'gated by self.training' if respect_mode else 'always 0.5     '}: two calls identical = {same}")
        """),
        md(r"""
        ## 6. Pitfalls and how to debug them

        - **Out of memory at long S**: estimate `attention_matrix_bytes` first; if two of those do not fit,
          use SDPA or chunk the queries.
        - **SDPA slower or bigger than expected on a GPU**: an explicit mask rules out flash, and a mask
          with a query axis (`[B, 1, S, S]`) costs O(S²) by itself. Use `is_causal=True` where you can,
          and restrict backends with `sdpa_kernel(...)` to find out which one runs (it raises when none of
          the allowed ones fits). On the math backend, half precision is computed in float32.
        - **Wrong mask sense**: SDPA's boolean mask is "may attend"; `nn.MultiheadAttention`'s
          `key_padding_mask` is "ignore".
        - **Chunked causal mask**: compare absolute positions; a mask built for one block's local indices
          lets later blocks see the future.
        - **NaN in float16**: overflowing raw scores; see above.
        - **Random outputs at evaluation**: `dropout_p` not gated by `self.training`.
        """, r"""
        ## 6. 常见陷阱与调试方法

        - **长 S 时显存/内存不足**：先用 `attention_matrix_bytes` 估算；如果两个这样的矩阵放不下，就用 SDPA 或者对查询分块。
        - **GPU 上 SDPA 比预期慢或占用更大**：显式掩码会排除 flash，而带查询维度的掩码（`[B, 1, S, S]`）本身就是 O(S²)。能用 `is_causal=True` 就用，并用 `sdpa_kernel(...)` 限定后端，找出实际运行的是哪一个（允许的后端都不合适时它会报错）。在 math 后端上，半精度是用 float32 计算的。
        - **掩码含义弄反**：SDPA 的布尔掩码表示"可以关注"；`nn.MultiheadAttention` 的 `key_padding_mask` 表示"忽略"。
        - **分块时的因果掩码**：比较绝对位置；按单个块的局部下标构造的掩码会让后面的块看到未来。
        - **float16 下出现 NaN**：原始分数溢出；见上文。
        - **评估时输出随机**：`dropout_p` 没有受 `self.training` 控制。
        """),
    ]


# The Chinese docstrings of the solution cells (the build puts them in the Chinese edition).
DOCSTRINGS_ZH = {
    "attention_matrix_bytes": "一个 [B, H, S, S] 分数矩阵的字节数：B * H * S^2 * 每个元素的字节数。",
    "sdpa_attention": "q, k, v [B, H, S, head_dim] -> [B, H, S, head_dim]，经由融合内核计算。",
    "chunked_attention": "精确的注意力，每次处理 chunk_size 个查询组成的一块：同一时刻最多存在 [B, H, chunk, S] 个分数。",
}

# The Chinese edition's labels in the demo cells (course/editions.py applies them; the code is shared).
DEMO_ZH = {
    'f"logsumexp of a {x.nbytes / 2**20:.0f} MiB tensor: torch.logsumexp {one_operator:.2f} MiB seen, "':
        'f"对 {x.nbytes / 2**20:.0f} MiB 的张量求 logsumexp：torch.logsumexp 内存计看到 {one_operator:.2f} MiB，"',
    'f"the same written as separate operators {separate:.2f} MiB"': 'f"拆成几个算子写出的同一个计算 {separate:.2f} MiB"',
    'f"B=1, H=16, S={S:>6}, {str(dtype):<13}: {': 'f"B=1，H=16，S={S:>6}，{str(dtype):<13}：{',
    ':8.3f} GiB per score matrix"': ':8.3f} GiB（每个分数矩阵）"',
    '"plain": plain_attention,': '"朴素": plain_attention,',
    '"chunked (128)"': '"分块 (128)"',
    "{'one S x S matrix':>17}": "{'一个 S x S 矩阵':>13}",
    '"   (MiB)"': '"   （MiB）"',
    '"(nan: that function is not implemented yet)"': '"（nan：那个函数还没有实现）"',
    'xlabel="sequence length S", ylabel="peak live memory (MiB)"': 'xlabel="序列长度 S", ylabel="内存峰值（MiB）"',
    'title=f"CPU, float32, B={B}, H={H}, head_dim={head_dim}"': 'title=f"在 CPU 上，float32，B={B}，H={H}，head_dim={head_dim}"',
    "# only the measured lengths on the x axis": "# x 轴上只标出测量过的长度",
    "# `text` padded to `width` columns on screen (a Chinese character takes two)": "# 把 `text` 补齐到屏幕上的 `width` 列（一个汉字占两列）",
    "# [B, S], True = real token": "# [B, S]，True = 真实 token",
    '(("no mask", None), ("bool mask [B,1,1,S]"': '(("无掩码", None), ("布尔掩码 [B,1,1,S]"',
    "# SDPA explains refusals through warnings": "# SDPA 用警告说明它为什么拒绝",
    'result = f"peak {meter.peak_bytes / 2**20:6.2f} MiB"': 'result = f"峰值 {meter.peak_bytes / 2**20:6.2f} MiB"',
    '"refused: no such kernel for these inputs on this machine"': '"拒绝：这台机器上没有适用于这些输入的内核"',
    "{'plain attention':<20} {'no mask':<20} peak": "{'朴素注意力':<15} {'无掩码':<17} 峰值",
    'f"for comparison, one S x S float32 matrix: {': 'f"作为对比，一个 S x S 的 float32 矩阵：    {',
    '"one S x S float16 matrix:"': '"一个 S x S 的 float16 矩阵："',
    '"fp16/bf16 reduction allowed in the math backend (default):"': '"math 后端允许 fp16/bf16 归约（默认值）："',
    'f"plain attention, float16:             peak {': 'f"朴素注意力，float16：                峰值 {',
    "# back to the default": "# 恢复默认值",
    'f"math backend, float16, allowed={allowed!s:<5}: peak {': 'f"math 后端，float16，allowed={allowed!s:<5}：  峰值 {',
    'f"a [B, 1, S, S] boolean mask: {': 'f"一个 [B, 1, S, S] 的布尔掩码：{',
    ':.2f} MiB at S = {S}, "': ':.2f} MiB（S = {S}），"',
    ':.2f} GiB at S = 32768 (B = 1)"': ':.2f} GiB（S = 32768，B = 1）"',
    "# any boolean mask with a query axis, built beforehand": "# 任意一个带查询维度、事先构造好的布尔掩码",
    'f"SDPA, padding mask [B, 1, 1, S] only:            peak {': 'f"SDPA，只用填充掩码 [B, 1, 1, S]：           峰值 {',
    'f"SDPA, is_causal=True only:                       peak {': 'f"SDPA，只用 is_causal=True：                 峰值 {',
    'f"SDPA, given a ready [B, 1, S, S] boolean mask:   peak {': 'f"SDPA，传入现成的 [B, 1, S, S] 布尔掩码：    峰值 {',
    ':5.2f} MiB (a float copy of the mask, and the output)"': ':5.2f} MiB（掩码的一份浮点副本，以及输出）"',
    'f"your sdpa_attention, padding mask and causal:    peak {': 'f"你的 sdpa_attention，填充掩码加因果：       峰值 {',
    '" (a mask with a query axis was built)"': '"（构造了一个带查询维度的掩码）"',
    '" (no mask with a query axis was built)"': '"（没有构造带查询维度的掩码）"',
    "# at least one boolean [B, 1, S, S] mask's worth": "# 至少有一个 [B, 1, S, S] 布尔掩码那么大",
    "# the backend that takes any input": "# 接受任何输入的后端",
    '"your sdpa_attention on SDPA\'s math backend: runs"': '"你的 sdpa_attention 在 SDPA 的 math 后端上：可以运行"',
    'f"your sdpa_attention on SDPA\'s math backend: RuntimeError: {error}"': 'f"你的 sdpa_attention 在 SDPA 的 math 后端上：RuntimeError：{error}"',
    'f"is_causal=True alone vs yours: real query rows differ by {': 'f"只用 is_causal=True 与你的相比：真实查询的行相差 {',
    '.abs().max().item():.1e}, "': '.abs().max().item():.1e}，"',
    'f"padded query rows by {': 'f"被填充查询的行相差 {',
    "# flex attention's mask_mod: True = may attend": "# flex attention 的 mask_mod：True = 可以关注",
    'f"block mask, S = {size}, blocks of {block_mask.BLOCK_SIZE}: stored in {stored / 2**10:5.1f} KiB "':
        'f"块掩码，S = {size}，块大小 {block_mask.BLOCK_SIZE}：存储占 {stored / 2**10:5.1f} KiB"',
    'f"(a dense boolean mask: {size * size / 2**20:4.0f} MiB); building it here peaked at {peak_build:5.2f} MiB"':
        'f"（稠密布尔掩码：{size * size / 2**20:4.0f} MiB）；在这里构建它的峰值为 {peak_build:5.2f} MiB"',
    "# the first 256 positions: all real tokens, so the rule is just causality there": "# 前 256 个位置：全是真实 token，所以那里的规则就是因果性",
    'f"flex_attention on the first {small} positions equals causal SDPA:"': 'f"前 {small} 个位置上，flex_attention 等于因果 SDPA："',
    '"| PyTorch\'s warning:"': '"| PyTorch 的警告："',
    '"(none)"': '"（无）"',
    "# nested tensors print a 'prototype' warning": "# 嵌套张量会打印一条“原型功能”警告",
    "# two sequences, lengths 5 and 3, no padding": "# 两个序列，长度为 5 和 3，没有填充",
    '"nested batch of lengths 5 and 3, no mask: equals each sequence on its own:"': '"长度为 5 和 3 的嵌套批次，不加掩码：等于每个序列单独计算的结果："',
    'f"two S x S float16 matrices, H=16, S=32768:  {': 'f"两个 S x S 的 float16 矩阵，H=16，S=32768：{',
    ':5.1f} GiB  (plain attention\'s two buffers)"': ':5.1f} GiB（朴素注意力的两块缓冲区）"',
    'f"SDPA\'s output [1, 16, 32768, 64], float16:  {': 'f"SDPA 的输出 [1, 16, 32768, 64]，float16：  {',
    'f"two S x S float32 matrices, H=16, S=16384:  {': 'f"两个 S x S 的 float32 矩阵，H=16，S=16384：{',
    ':5.1f} GiB  (the math backend\'s float32 copies)"': ':5.1f} GiB（math 后端的 float32 副本）"',
    'f"two S x S float16 matrices, H=16, S=16384:  {': 'f"两个 S x S 的 float16 矩阵，H=16，S=16384：{',
    ':5.1f} GiB  (plain float16 code)"': ':5.1f} GiB（朴素的 float16 代码）"',
    "# two identical queries/keys, 64 features of 40": "# 两个相同的查询/键，64 个特征，每个都是 40",
    '"raw fp16 scores:"': '"fp16 原始分数："',
    '"softmax of them: "': '"它们的 softmax："',
    "# split 1/sqrt(d) between q and k before multiplying": "# 相乘之前把 1/sqrt(d) 分摊到 q 和 k 上",
    '"scaled first:    "': '"先缩放：        "',
    '"SDPA output finite:"': '"SDPA 的输出是有限值："',
    "{'gated by self.training' if respect_mode else 'always 0.5     '}: two calls identical = {same}":
        "{'受 self.training 控制' if respect_mode else '始终为 0.5           '}：两次调用结果相同 = {same}",
    'f"eval mode, dropout_p ': 'f"评估模式，dropout_p ',
}
