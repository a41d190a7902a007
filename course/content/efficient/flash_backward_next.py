"""Notebook 05 of `efficient`, its last sections (optional, not graded): what a practitioner meets next in the
backward pass. The loop order of GPU kernels (key blocks outside, dQ by atomic adds, what deterministic=True pays),
the gradient through the lse (ring attention's merge), dropout's mask replayed from a seed, and P and dS cast to
bfloat16 before the matrix products. Each section prints its experiment; those that need code call the student's
own flash_attention_backward, none hands over a graded answer."""
from course.cells import demo, md

# The Chinese edition's comments in these demo cells (flash_backward.DEMO_ZH includes them).
DEMO_ZH = {
    "# the key blocks' order: one call of your backward per key block, the whole rows' out and lse":
        "# 键块在外层：每个键块调用一次你的反向传播，传入整行的 out 和 lse",
    "# as atomic adds: the key blocks' shares of grad_q arrive in any order":
        "# 像原子加法一样：各键块对 grad_q 的贡献以任意顺序到达",
    "# [B, H, S_q]: the loss reads lse too": "# [B, H, S_q]：损失也读取 lse",
    "# two shards of keys, each its own (out, lse), merged as merge_attention does":
        "# 把键分成两片，各自算出 (out, lse)，再像 merge_attention 那样合并",
    "# a tile's mask from (seed, tile): regenerated, never stored": "# 分块的掩码由 (seed, 分块) 生成：重新生成，从不保存",
    "# the backward regenerates the same mask from the seed": "# 反向传播用同一个 seed 重新生成同样的掩码",
    "# kept here only to compare; a kernel keeps the seed": "# 这里保存它只是为了比较；内核只保存 seed",
    "# [B, H, S, S], one tile at a time": "# [B, H, S, S]，一次一个分块",
    "# [1, 2, 32, 32], scale 1 / sqrt(16)": "# [1, 2, 32, 32]，缩放 1 / sqrt(16)",
    "# [B, H, S, S], float32": "# [B, H, S, S]，float32",
    "# the inputs rounded to bfloat16; the truth in float64 from the same rounded inputs":
        "# 输入舍入到 bfloat16；真值用同样舍入后的输入在 float64 下计算",
    "# P and dS rounded to bfloat16 before the products, which sum in float32":
        "# P 和 dS 在矩阵乘法之前舍入到 bfloat16，乘积仍在 float32 下累加",
}


def cells():
    return [
        md(r"""
        ## 8. What comes next (optional, not graded): the loop order of GPU kernels

        The last four sections show what you meet in real backward kernels; each runs an experiment, some
        with your `flash_attention_backward`, and none is graded.

        Your backward keeps the forward's order: query blocks outside, key blocks inside. FlashAttention's
        papers and kernels swap the loops: Algorithm 4 of FlashAttention 1, Algorithm 2 of FlashAttention 2,
        the CUDA kernel of the `flash-attn` library (and Stanford CS336's FlashAttention-2 backward) put the
        **key blocks outside**. The reason is where each gradient is summed: $dK_j$ and $dV_j$ over every query
        block, $dQ_i$ over every key block. With key block $j$ fixed in the outer loop, $dK_j$ and $dV_j$ stay
        in registers and on-chip memory (SRAM) through the whole inner loop and are written to main memory
        once; only $dQ$, one gradient instead of two, is summed across key blocks. FlashAttention 1 reads,
        updates and writes $dQ_i$ back to main memory at every tile; FlashAttention 2 runs the key blocks in
        parallel, one thread block each, so they add their shares of $dQ_i$ into one float32 buffer in main
        memory with **atomic adds**, in whatever order they finish.

        The cell runs the keys-outside order with your own function: one call of `flash_attention_backward`
        per key block (not causal), each given the whole rows' `out` and `lse`, so that its tile's
        $P = e^{S - \text{lse}}$ is the right share of each row; the calls' `grad_q` add up. It counts the writes
        of each order to main memory, then adds the key blocks' shares of `grad_q` in random orders, as atomic
        adds would.
        """, r"""
        ## 8. 接下来会遇到什么（选读，不评分）：GPU 内核的循环顺序

        最后四节介绍真实的反向传播内核里会遇到的东西；每一节都跑一个实验，有的用到你的 `flash_attention_backward`，都不评分。

        你的反向传播沿用前向的顺序：外层是查询块，内层是键块。FlashAttention 的论文和内核把两层循环交换了：FlashAttention 1 的算法 4、FlashAttention 2 的算法 2、`flash-attn` 库的 CUDA 内核（以及斯坦福 CS336 的 FlashAttention-2 反向传播）都把**键块放在外层**。原因在于每个梯度在哪里求和：$dK_j$ 和 $dV_j$ 要对所有查询块求和，$dQ_i$ 要对所有键块求和。外层固定键块 $j$ 时，$dK_j$ 和 $dV_j$ 在整个内层循环里都留在寄存器和片上存储（SRAM）中，最后只写回主存一次；只剩 $dQ$ 这一个梯度（而不是两个）要跨键块求和。FlashAttention 1 在每个分块上都把 $dQ_i$ 从主存读出、更新、再写回；FlashAttention 2 让各键块并行运行，每块一个线程块，于是它们用**原子加法**把各自对 $dQ_i$ 的贡献加进主存里同一个 float32 缓冲区，顺序取决于谁先算完。

        下面的单元格用你自己的函数按键块在外层的顺序运行：每个键块调用一次 `flash_attention_backward`（非因果），每次都传入整行的 `out` 和 `lse`，这样分块的 $P = e^{S - \text{lse}}$ 就是每一行里属于这些键的那一份；各次调用的 `grad_q` 加起来即可。它统计两种顺序各要向主存写多少次，再按随机顺序把各键块对 `grad_q` 的贡献加起来，就像原子加法那样。
        """),
        demo("""
        torch.manual_seed(5)
        B, H, S_q, S_k, D, block = 1, 2, 48, 64, 16, 16
        q, k, v = torch.randn(B, H, S_q, D), torch.randn(B, H, S_k, D), torch.randn(B, H, S_k, D)
        n_q, n_k = S_q // block, S_k // block
        with uses_your_code():
            out, lse = flash_attention(q, k, v, block_q=block, block_k=block)
            grad_out = torch.randn_like(out)
            grad_q = flash_attention_backward(q, k, v, out, lse, grad_out, block_q=block, block_k=block)[0]
            # the key blocks' order: one call of your backward per key block, the whole rows' out and lse
            shares = [flash_attention_backward(q, k[:, :, j0:j0 + block], v[:, :, j0:j0 + block], out, lse, grad_out,
                                               block_q=block, block_k=block)[0] for j0 in range(0, S_k, block)]
            keys_outside = sum(shares, torch.zeros_like(q))
            print(say("keys outside vs queries outside: grad_q differs by {gap:.1e} (largest |grad_q| {scale:.2f}); "
                      "the same bits: {same}", gap=(keys_outside - grad_q).abs().max().item(),
                      scale=grad_q.abs().max().item(), same=torch.equal(keys_outside, grad_q)))
            print(say("writes to main memory, {n_q} query blocks x {n_k} key blocks: queries outside, grad_q {a}, "
                      "grad_k and grad_v {b} each; keys outside, grad_q {b}, grad_k and grad_v {c} each",
                      n_q=n_q, n_k=n_k, a=n_q, b=n_q * n_k, c=n_k))
            # as atomic adds: the key blocks' shares of grad_q arrive in any order
            orders = torch.Generator().manual_seed(0)
            runs = [sum((shares[j] for j in torch.randperm(n_k, generator=orders).tolist()), torch.zeros_like(q))
                    for _ in range(20)]
            print(say("20 runs adding the {n_k} shares of grad_q in random orders (float32): {distinct} different "
                      "results, up to {spread:.1e} apart; in one fixed order, 1",
                      n_k=n_k, distinct=len({run.numpy().tobytes() for run in runs}),
                      spread=max((run - runs[0]).abs().max().item() for run in runs)))
        """),
        md(r"""
        Float32 addition is not associative, so with atomic adds `grad_q` differs in its last bits from one run
        to the next, while `grad_k` and `grad_v`, each written once, do not: one reason why two identical
        training runs on a GPU can drift apart. The `flash-attn` library's `flash_attn_func(...,
        deterministic=True)` fixes the order of these additions; its docstring names the price: the backward is
        "slightly slower and uses more memory" (partial $dQ$ buffers, each for a group of key blocks, summed in
        a fixed order, instead of one buffer that every key block adds into as it finishes).
        """, r"""
        float32 的加法不满足结合律，所以用原子加法时，`grad_q` 的最后几位在每次运行之间都会不同；而 `grad_k` 和 `grad_v` 各只写一次，不会变。这是 GPU 上两次一模一样的训练可能逐渐分道扬镳的原因之一。`flash-attn` 库的 `flash_attn_func(..., deterministic=True)` 会固定这些加法的顺序；它的文档字符串说明了代价：反向传播"稍慢一些，并且占用更多内存"（每组键块各用一个部分 $dQ$ 缓冲区，按固定顺序求和，而不是让每个键块算完就加进同一个缓冲区）。
        """),
        md(r"""
        ## 9. The gradient through the lse, and ring attention

        So far the loss read only `out`. When it also reads the `lse` (ring attention, for one, merges partial
        results by their lse, as your `merge_attention` in `01_flash` does), the backward
        receives a second gradient, $d\text{lse}$, one number per query. Since
        $\partial\, \text{lse}_i / \partial S_{ij} = P_{ij}$, it adds $P \circ d\text{lse}$ to $dS$:

        $$dS = P \circ (dP - \delta + d\text{lse}).$$

        The cell checks the formula against autograd when the loss reads both. Then ring attention: the keys
        split in two shards, each shard's `(out, lse)` merged into the whole row's. The merge reads each shard's
        lse, so each shard's backward needs its own $d\text{lse}$, unless it is given the **merged** `out` and
        `lse`: then its $P = e^{S - \text{lse}}$ is already the shard's share of the whole row's probabilities
        and $\delta$ the whole row's, and the ordinary backward, your function, gives exactly the shard's
        gradients. This is what implementations of ring attention do: each step's backward is handed the final
        `out` and `lse`.
        """, r"""
        ## 9. 经过 lse 的梯度，以及环形注意力（ring attention）

        到目前为止，损失只读取了 `out`。如果它也读取 `lse`（比如环形注意力按 lse 合并部分结果，就像你在 `01_flash` 里写的 `merge_attention`），反向传播就会收到第二个梯度 $d\text{lse}$，每个查询一个数。由于 $\partial\, \text{lse}_i / \partial S_{ij} = P_{ij}$，它给 $dS$ 加上 $P \circ d\text{lse}$：

        $$dS = P \circ (dP - \delta + d\text{lse}).$$

        下面的单元格在损失同时读取两者时，把这个公式与 autograd 比较。然后是环形注意力：键分成两片，每一片的 `(out, lse)` 合并成整行的结果。合并读取了每一片的 lse，所以每一片的反向传播都需要自己的 $d\text{lse}$，除非传给它的是**合并后**的 `out` 和 `lse`：这时它的 $P = e^{S - \text{lse}}$ 已经是整行概率中属于这一片的那一份，$\delta$ 也是整行的 $\delta$，普通的反向传播（也就是你的函数）恰好给出这一片的梯度。环形注意力的实现正是这样做的：每一步的反向传播拿到的都是最终的 `out` 和 `lse`。
        """),
        demo("""
        torch.manual_seed(6)
        B, H, S_q, S_k, D = 1, 2, 6, 10, 8
        q, k, v = (torch.randn(B, H, n, D, dtype=torch.float64, requires_grad=True) for n in (S_q, S_k, S_k))
        scale = 1 / math.sqrt(D)
        s = q @ k.transpose(-2, -1) * scale  # [B, H, S_q, S_k]
        lse = torch.logsumexp(s, dim=-1)  # [B, H, S_q]: the loss reads lse too
        P = torch.exp(s - lse[..., None])
        O = P @ v  # [B, H, S_q, D]
        dO, dlse = torch.randn_like(O), torch.randn_like(lse)
        torch.autograd.backward((O, lse), (dO, dlse))
        with torch.no_grad():
            dP = dO @ v.transpose(-2, -1)  # [B, H, S_q, S_k]
            delta = (dO * O).sum(dim=-1, keepdim=True)  # [B, H, S_q, 1]
            for formula, dS in (("P * (dP - delta + dlse)", P * (dP - delta + dlse[..., None])),
                                ("P * (dP - delta)", P * (dP - delta))):
                print(say("dS = {formula}: grad_q off by {gap:.1e} from autograd (largest |grad_q| {scale:.2f})",
                          formula=formula, gap=(dS @ k * scale - q.grad).abs().max().item(),
                          scale=q.grad.abs().max().item()))

        torch.manual_seed(7)
        q, k, v = (torch.randn(1, 2, n, 16, requires_grad=True) for n in (32, 64, 64))
        shards = ((0, 32), (32, 64))  # two shards of keys, each its own (out, lse), merged as merge_attention does
        parts = []
        for j0, j1 in shards:
            s = q @ k[:, :, j0:j1].transpose(-2, -1) / 4  # [1, 2, 32, 32], scale 1 / sqrt(16)
            part_lse = torch.logsumexp(s, dim=-1)  # [1, 2, 32]
            parts.append((torch.exp(s - part_lse[..., None]) @ v[:, :, j0:j1], part_lse))
        lse = torch.logaddexp(parts[0][1], parts[1][1])  # [1, 2, 32]
        out = sum(torch.exp(part_lse - lse)[..., None] * part_out for part_out, part_lse in parts)  # [1, 2, 32, 16]
        grad_out = torch.randn_like(out)
        out.backward(grad_out)
        with torch.no_grad(), uses_your_code():
            for label, given in ((say("the merged out and lse"), [(out, lse)] * 2), (say("each shard's own out and lse"), parts)):
                grads = [flash_attention_backward(q, k[:, :, j0:j1], v[:, :, j0:j1], o, l, grad_out, block_q=16,
                                                  block_k=16) for (j0, j1), (o, l) in zip(shards, given)]
                grad_q = grads[0][0] + grads[1][0]
                grad_k = torch.cat([grads[0][1], grads[1][1]], dim=2)  # [1, 2, 64, 16]
                print(say("ring attention, your backward per shard given {given}: grad_q off by {dq:.1e}, grad_k by "
                          "{dk:.1e} (largest |grad_q| {scale:.2f})", given=label,
                          dq=(grad_q - q.grad).abs().max().item(), dk=(grad_k - k.grad).abs().max().item(),
                          scale=q.grad.abs().max().item()))
        """),
        md(r"""
        ## 10. Dropout: the mask replayed, not stored

        Attention dropout zeroes each probability with probability $p$ and scales the others by $1/(1-p)$:
        $O = (P \circ Z) V$ with $Z = M/(1-p)$ for a random 0/1 mask $M$. The backward needs the same $Z$
        ($dV = (P \circ Z)^\top dO$, $dP = (dO\, V^\top) \circ Z$; $\delta = \text{rowsum}(dO \circ O)$ still
        holds), but storing $M$ means storing the $S_q \times S_k$ tensor FlashAttention avoids. Kernels store a seed and
        an offset instead and **regenerate** each tile's bits in the backward from a counter-based generator
        (Philox in flash-attn), which gives any tile's bits without generating the ones before it. The cell
        mimics it with one `torch.Generator` per tile, seeded from the seed and the tile's position.
        """, r"""
        ## 10. Dropout：掩码重放，而不是存储

        注意力 dropout 以概率 $p$ 把每个概率置零，其余的乘以 $1/(1-p)$：$O = (P \circ Z) V$，其中 $Z = M/(1-p)$，$M$ 是随机的 0/1 掩码。反向传播需要同一个 $Z$（$dV = (P \circ Z)^\top dO$，$dP = (dO\, V^\top) \circ Z$；$\delta = \text{rowsum}(dO \circ O)$ 依然成立），可是存下 $M$ 就等于存下 FlashAttention 一直避免保存的 $S_q \times S_k$ 张量。内核改为保存一个 seed 和一个偏移量，在反向传播时用基于计数器的随机数生成器（flash-attn 用的是 Philox）**重新生成**每个分块的随机位：它能直接给出任意分块的随机位，不必先生成前面的。下面的单元格模仿这一点：每个分块一个 `torch.Generator`，用 seed 和分块的位置作为种子。
        """),
        demo("""
        torch.manual_seed(8)
        B, H, S, D, block, p_drop, seed = 1, 2, 32, 8, 8, 0.25, 1234
        q, k, v = (torch.randn(B, H, S, D, dtype=torch.float64, requires_grad=True) for _ in range(3))


        def tile_keep(seed, i, j):  # a tile's mask from (seed, tile): regenerated, never stored
            generator = torch.Generator().manual_seed(seed * 1_000_003 + i * 1_009 + j)
            return torch.rand(B, H, block, block, generator=generator) >= p_drop  # [B, H, block, block]


        def keep_mask(seed):  # [B, H, S, S], one tile at a time
            n = S // block
            return torch.cat([torch.cat([tile_keep(seed, i, j) for j in range(n)], dim=-1) for i in range(n)], dim=-2)


        scale = 1 / math.sqrt(D)
        P = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)  # [B, H, S, S]
        forward_mask = keep_mask(seed)  # kept here only to compare; a kernel keeps the seed
        O = (P * forward_mask / (1 - p_drop)) @ v
        dO = torch.randn_like(O)
        O.backward(dO)
        with torch.no_grad():
            replayed = keep_mask(seed)  # the backward regenerates the same mask from the seed
            Z = replayed.double() / (1 - p_drop)
            dV = (P * Z).transpose(-2, -1) @ dO
            dP = (dO @ v.transpose(-2, -1)) * Z
            dS = P * (dP - (dO * O).sum(dim=-1, keepdim=True))
            dQ, dK = dS @ k * scale, dS.transpose(-2, -1) @ q * scale
            print(say("mask regenerated from the seed equals the forward's: {same}; gradients vs autograd: dq {dq:.1e}, "
                      "dk {dk:.1e}, dv {dv:.1e}", same=torch.equal(replayed, forward_mask),
                      dq=(dQ - q.grad).abs().max().item(), dk=(dK - k.grad).abs().max().item(),
                      dv=(dV - v.grad).abs().max().item()))
            print(say("a stored mask at S = {S:,}: {bytes:.0f} MiB per head as bytes, {bits:.0f} MiB as bits; "
                      "a seed and an offset: 16 bytes", S=16384, bytes=16384 ** 2 / 2**20, bits=16384 ** 2 / 8 / 2**20))
        """),
        md(r"""
        ## 11. P and dS in bfloat16 before the matrix products

        On a GPU the matrix products run on tensor cores, whose inputs are bfloat16 (or float16) and whose sums
        are float32. So a real kernel computes $P$ and $dS$ in float32, then **rounds them to bfloat16** before
        $P^\top dO$, $dS\,K$ and $dS^\top Q$ (and $PV$ in the forward). Your backward keeps them in float32. The
        cell measures what the rounding costs, on bfloat16 inputs, against float64 gradients computed from the
        same rounded inputs (so that the inputs' own rounding is not counted), next to the floor: the exact
        gradient rounded once to bfloat16, the dtype it is returned in.
        """, r"""
        ## 11. 矩阵乘法之前把 P 和 dS 转成 bfloat16

        在 GPU 上，矩阵乘法由张量核心完成，它的输入是 bfloat16（或 float16），累加用 float32。所以真实的内核用 float32 算出 $P$ 和 $dS$，然后在做 $P^\top dO$、$dS\,K$、$dS^\top Q$（以及前向的 $PV$）之前**把它们舍入到 bfloat16**。你的反向传播则一直用 float32。下面的单元格在 bfloat16 输入上测量这次舍入的代价：与用同样舍入后的输入在 float64 下算出的梯度比较（这样输入本身的舍入不计在内），并列出下限：把精确梯度舍入一次到 bfloat16（梯度最终返回的 dtype）的误差。
        """),
        demo("""
        torch.manual_seed(9)
        B, H, S, D = 1, 4, 256, 64
        # the inputs rounded to bfloat16; the truth in float64 from the same rounded inputs
        q, k, v, dO = (torch.randn(B, H, S, D).bfloat16() for _ in range(4))
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        (torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(D), dim=-1) @ leaves[2]).backward(dO.double())
        truth = [leaf.grad for leaf in leaves]


        def gradients(cast):
            q32, k32, v32, dO32 = (t.float() for t in (q, k, v, dO))
            P = torch.softmax(q32 @ k32.transpose(-2, -1) / math.sqrt(D), dim=-1)  # [B, H, S, S], float32
            delta = (dO32 * (P @ v32)).sum(dim=-1, keepdim=True)  # [B, H, S, 1]
            dS = P * (dO32 @ v32.transpose(-2, -1) - delta)
            P, dS = cast(P), cast(dS)  # P and dS rounded to bfloat16 before the products, which sum in float32
            return dS @ k32 / math.sqrt(D), dS.transpose(-2, -1) @ q32 / math.sqrt(D), P.transpose(-2, -1) @ dO32


        def relative(x, t):
            return ((x.double() - t).norm() / t.norm()).item()


        kept, rounded = gradients(lambda t: t), gradients(lambda t: t.bfloat16().float())
        for name, a, b, t in zip(("dq", "dk", "dv"), kept, rounded, truth):
            print(say("{name}: relative error with P and dS in float32 {kept:.1e}, rounded to bfloat16 {rounded:.1e}; "
                      "the exact {name} rounded to bfloat16 {floor:.1e}", name=name, kept=relative(a, t),
                      rounded=relative(b, t), floor=relative(t.bfloat16(), t)))
        """),
        md(r"""
        Rounding $P$ and $dS$ to bfloat16 costs about as much as rounding the result once: since the gradients
        are returned in bfloat16 anyway, the tensor cores' speed comes almost for free. The sums stay in
        float32, as in your backward.
        """, r"""
        把 $P$ 和 $dS$ 舍入到 bfloat16 的代价，和把结果舍入一次差不多：既然梯度最后本来就以 bfloat16 返回，张量核心带来的速度几乎是白得的。累加仍然用 float32，就像你的反向传播那样。
        """),
    ]
