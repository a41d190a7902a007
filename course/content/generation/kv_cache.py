"""Notebook 02 of `generation`: the KV cache, its causal mask, its memory, and grouped-query attention."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "02_kv_cache"

HINTS = {
    "decode_causal_mask": "the first query is position S_k - S_q; a lower triangle can be shifted with tril(diagonal=...).",
    "repeat_kv": "put a new axis of size n_rep right after the head axis, expand it, then merge it with the heads.",
    "KVCache.__init__": "nothing is cached yet: remember that (for instance with None).",
    "KVCache.append": "the first call stores k and v; later calls concatenate along the sequence axis of\n"
    "[B, H, S, head_dim].",
    "KVCache.__len__": "the number of positions, not the number of calls.",
    "CachedSelfAttention.__init__": "the same two layers as MultiHeadSelfAttention: W_qkv (rows q, k, v) and W_o.",
    "CachedSelfAttention.forward": "project and split the new tokens; with a cache, append k and v first and use what\n"
    "append returns; scores [B, H, S_new, S_k] masked with decode_causal_mask(S_new, S_k).",
    "kv_cache_bytes": "keys and values; every layer; every kv head, position and feature; times the element size.",
}


def cells():
    return [
        md(r"""
        # 02 · Generating one token at a time: the KV cache

        A language model writes text one token at a time: it reads the prompt, predicts the next token,
        appends it, and repeats. This notebook makes that loop cheap with a **KV cache**, gets its causal
        mask right (a classic bug hides there), measures what the cache costs in memory, and shrinks it
        with **grouped-query attention**.

        | part | what you write |
        |---|---|
        | `kv_cache` | `decode_causal_mask`, `class KVCache`, `class CachedSelfAttention`, `kv_cache_bytes`, `repeat_kv` |

        Per-head tensors are `[B, H, S, head_dim]` as in the first assignment. `S_q` counts the queries of a
        call (the new tokens), `S_k` the keys they may look at (everything cached, new tokens included).
        """),
        setup(),
        md(r"""
        ## 1. Why generation recomputes nothing with a cache

        In a decoder every token attends only to itself and the tokens before it (causal attention). So
        when token $t + 1$ arrives, nothing about tokens $0 \dots t$ changes: not their keys, not their
        values, not their outputs. Recomputing them at every step is pure waste. The **KV cache** keeps the
        keys and values of every position seen so far; each step then

        1. projects only the new token(s) to `q, k, v`;
        2. appends the new `k, v` to the cache;
        3. lets the new queries attend over everything in the cache.

        The first cell checks the claim with PyTorch's own causal attention: the outputs of the first four
        tokens are the same whether two more tokens follow or not. The second counts how many token
        projections a whole generation needs, without and with a cache.
        """),
        demo("""
        torch.manual_seed(0)
        attention = nn.MultiheadAttention(16, 4, bias=False, batch_first=True).eval()
        x = torch.randn(1, 6, 16)


        def causal_out(x):
            S = x.shape[1]
            future = torch.ones(S, S, dtype=torch.bool).triu(1)  # True = may NOT attend (nn.MultiheadAttention)
            with torch.no_grad():
                return attention(x, x, x, attn_mask=future, need_weights=False)[0]


        gap = (causal_out(x)[:, :4] - causal_out(x[:, :4])).abs().max().item()
        print(f"outputs of tokens 0..3, with and without tokens 4 and 5 after them: largest difference {gap:.1e}")
        """),
        demo("""
        for T in (100, 1000, 4000):
            without = T * (T + 1) // 2  # step t recomputes the keys and values of all t tokens
            print(f"{T:>5} generated tokens: {without:>10,} token projections without a cache, {T:>5,} with one "
                  f"({without / T:,.0f}x fewer)")
        """),
        md(r"""
        The attention itself still grows with the length (each new query reads all cached keys), but the
        projections, and every layer's work on the old tokens, are done once.

        ## 2. The causal mask when queries are fewer than keys

        Generation calls attention with fewer queries than keys. The first call (the **prefill**) runs the
        whole prompt: `S_q = S_k`. Every later call (**decoding**) has `S_q` new tokens, often one, and
        `S_k = ` cached + new positions. The queries are the **last** `S_q` positions, so query $i$ of the
        call sits at absolute position $i + (S_k - S_q)$ and may see the keys

        $$j \le i + (S_k - S_q).$$

        Drawn as a matrix, the lower triangle ends in the bottom-right corner: the mask is
        **bottom-right aligned**. For `S_q = 2, S_k = 5`, query 0 is position 3 and sees keys 0..3; query
        1 is position 4 and sees all five.

        **The trap.** `F.scaled_dot_product_attention(q, k, v, is_causal=True)` uses the lower triangle of
        the `[S_q, S_k]` matrix aligned to the **top-left** corner: query 0 sees key 0 only. When `S_q = S_k`
        the two alignments agree, which is why the bug hides until decoding; with one new token and a
        cache of five, top-left alignment lets the newest token see only the first token of the prompt.
        The cell prints the mask `is_causal=True` behaves like, and shows that SDPA's output equals
        attention with that mask.
        """),
        demo("""
        torch.manual_seed(1)
        S_q, S_k = 2, 5
        q, k, v = torch.randn(1, 1, S_q, 4), torch.randn(1, 1, S_k, 4), torch.randn(1, 1, S_k, 4)
        top_left = torch.ones(S_q, S_k, dtype=torch.bool).tril()  # True = may attend
        print("the mask of is_causal=True for S_q=2, S_k=5 (top-left aligned):")
        print(top_left.int())
        same = torch.allclose(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              F.scaled_dot_product_attention(q, k, v, attn_mask=top_left))
        print("SDPA with is_causal=True equals SDPA with this mask:", same)
        """),
        solution("decode_causal_mask", HINTS),
        check("check_decode_causal_mask(decode_causal_mask)", "check_decode_causal_mask"),
        md(r"""
        With `F.scaled_dot_product_attention` the fix is `attn_mask=torch.nn.attention.bias.causal_lower_right(S_q, S_k)`:
        an object that stands for the bottom-right mask without building it, so that the fused kernels
        stay available on a GPU. The cell compares it with your mask, on the mask and on SDPA's output.
        """),
        demo("""
        from torch.nn.attention.bias import causal_lower_right

        torch.manual_seed(1)
        S_q, S_k = 2, 5
        q, k, v = torch.randn(1, 1, S_q, 4), torch.randn(1, 1, S_k, 4), torch.randn(1, 1, S_k, 4)
        with uses_your_code():
            yours = decode_causal_mask(S_q, S_k)
            print("your decode_causal_mask(2, 5):")
            print(yours.int())
            official = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(S_q, S_k))
            mine = F.scaled_dot_product_attention(q, k, v, attn_mask=yours)
            top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            print(f"SDPA with your mask vs causal_lower_right: largest difference {(mine - official).abs().max().item():.1e}")
            print(f"SDPA with is_causal=True vs causal_lower_right: largest difference {(top_left - official).abs().max().item():.2f}")
        """),
        md(r"""
        ## 3. The cache

        `KVCache` holds the keys and the values of every position seen so far, each `[B, H, S_cached, head_dim]`.
        `append(k, v)` takes the keys and values of the new tokens, `[B, H, S_new, head_dim]`, stores them
        **after** the cached ones, along the sequence axis, and returns everything, keys first:

        | call | stored keys | returned `k_all` |
        |---|---|---|
        | `KVCache()` | nothing, `len(cache) == 0` | |
        | `append(k, v)` with 4 prompt tokens | `[B, H, 4, head_dim]` | `[B, H, 4, head_dim]` |
        | `append(k, v)` with 1 new token | `[B, H, 5, head_dim]` | `[B, H, 5, head_dim]` |

        `len(cache)` is the number of cached positions. (Concatenating copies the whole cache at every
        step; inference servers allocate `[B, H, S_max, head_dim]` once and write into it, or split the
        cache into pages. The simple version is enough here.)
        """),
        solution("KVCache", HINTS),
        check("check_kv_cache(KVCache)", "check_kv_cache"),
        md(r"""
        ## 4. Cached causal self-attention

        `CachedSelfAttention(d_model, num_heads)` has the layers of the first assignment's
        `MultiHeadSelfAttention` (`W_qkv`, rows q, k, v, and `W_o`, both bias-free) and runs causal
        attention of the new tokens `x [B, S_new, d_model]`:

        | step | shape (`B=2, S_new=1, d_model=16, H=4`, 5 positions cached before) |
        |---|---|
        | `W_qkv(x)`, cut into q, k, v, split into heads | three `[2, 4, 1, 4]` |
        | with a cache: `k, v = cache.append(k, v)` | `[2, 4, 6, 4]` each (`S_k = 6`) |
        | scores `q k^T / sqrt(head_dim)` | `[2, 4, 1, 6]` |
        | `-inf` where `decode_causal_mask(S_new, S_k)` is False | `[2, 4, 1, 6]` |
        | softmax over keys, `@ v`, merge heads, `W_o` | `[2, 1, 16]` |

        Without a cache it is ordinary causal self-attention (`S_k = S_new`). The promise: a prompt
        followed by one token at a time, through one cache, gives exactly the outputs of the whole
        sequence run at once.
        """),
        solution("CachedSelfAttention", HINTS),
        check("check_cached_self_attention(CachedSelfAttention, KVCache)", "check_cached_self_attention"),
        md(r"""
        The first cell checks the promise for every split of an 8-token sequence into a prompt and tokens
        generated one by one. The second times a generation loop of a toy one-layer model, once
        re-running the whole prefix at every step and once with the cache.
        """),
        demo("""
        torch.manual_seed(2)
        with uses_your_code():
            layer = CachedSelfAttention(32, 4).eval()
            x = torch.randn(2, 8, 32)
            with torch.no_grad():
                full = layer(x)
                for prompt in range(1, 8):
                    cache = KVCache()
                    outs = [layer(x[:, :prompt], cache)] + [layer(x[:, t : t + 1], cache) for t in range(prompt, 8)]
                    gap = (torch.cat(outs, dim=1) - full).abs().max().item()
                    print(f"prompt of {prompt}, then {8 - prompt} token{'s' if prompt < 7 else ''} one at a time: "
                          f"largest difference from the full pass {gap:.1e}, len(cache) = {len(cache)}")
        """),
        demo("""
        import time

        torch.manual_seed(3)
        with uses_your_code():
            layer = CachedSelfAttention(64, 4).eval()
            prompt, steps = torch.randn(1, 16, 64), 120


            def next_input(out):  # a stand-in for "embed the predicted token": the last output, rescaled
                return out[:, -1:] / out[:, -1:].norm(dim=-1, keepdim=True) * 64 ** 0.5


            with torch.no_grad():
                started = time.perf_counter()
                seq = prompt
                for _ in range(steps):  # no cache: the whole prefix again at every step
                    seq = torch.cat([seq, next_input(layer(seq))], dim=1)
                no_cache = time.perf_counter() - started

                started = time.perf_counter()
                cache = KVCache()
                new, pieces = prompt, [prompt]
                for _ in range(steps):  # with the cache: only the newest token
                    new = next_input(layer(new, cache))
                    pieces.append(new)
                with_cache = time.perf_counter() - started
            print(f"{steps} steps without a cache: {no_cache:.2f} s; with the cache: {with_cache:.2f} s "
                  f"({no_cache / with_cache:.1f}x faster)")
            print(f"same tokens both ways: largest difference {(torch.cat(pieces, dim=1) - seq).abs().max().item():.1e}")
        """),
        md(r"""
        ## 5. What the cache costs

        The cache stores, for every layer, a key and a value vector for every kv head and every position:

        $$\text{bytes} = 2 \times B \times \text{layers} \times H_{kv} \times S \times \text{head\_dim} \times \text{element size}$$

        (2: keys and values; 2 bytes per element in float16 / bfloat16, 4 in float32). `kv_cache_bytes`
        computes it; `dtype` defaults to float16.
        """),
        solution("kv_cache_bytes", HINTS),
        check("check_kv_cache_bytes(kv_cache_bytes)", "check_kv_cache_bytes"),
        md(r"""
        Now a real model size: 32 layers, 32 heads of `head_dim = 128` (`d_model = 4096`; the shape of
        LLaMA-2-7B), float16. The cell computes the cache for one sequence of 4k and of 128k tokens, for a
        batch of 8 sequences of 4k, and, for comparison, the float16 weights of such a model, counted from
        its configuration.
        """),
        demo("""
        layers, heads, head_dim, d_model, d_ffn, vocab = 32, 32, 128, 4096, 11008, 32000
        per_layer = 4 * d_model * d_model + 3 * d_model * d_ffn + 2 * d_model  # attention, MLP, two norms
        parameters = 2 * vocab * d_model + layers * per_layer + d_model  # embeddings in and out, layers, final norm
        GiB = 2**30
        print(f"weights: {parameters / 1e9:.2f} billion parameters = {parameters * 2 / GiB:.1f} GiB in float16")
        with uses_your_code():
            per_token = kv_cache_bytes(1, layers, heads, head_dim, 1)
            print(f"KV cache per token: {per_token / 2**10:.0f} KiB")
            for batch, seq_len in ((1, 4096), (1, 131072), (8, 4096)):
                size = kv_cache_bytes(batch, layers, heads, head_dim, seq_len)
                print(f"KV cache, batch {batch}, {seq_len:>7,} tokens: {size / GiB:5.1f} GiB "
                      f"({size / (parameters * 2):.2f}x the weights)")
        """),
        md(r"""
        At long contexts or large batches the cache, not the weights, fills the GPU.

        ## 6. Grouped-query attention: fewer key/value heads

        The cache grows with the number of **key/value heads** $H_{kv}$. Grouped-query attention (GQA)
        keeps $H$ query heads but only $H_{kv} < H$ key/value heads; each kv head serves a *group* of
        $n_\text{rep} = H / H_{kv}$ consecutive query heads. $H_{kv} = 1$ is multi-query attention (MQA);
        $H_{kv} = H$ is ordinary multi-head attention. LLaMA-3-8B, for example, has 32 query heads and 8
        key/value heads, a cache 4x smaller than the same model with 32 kv heads.

        The cache stores $H_{kv}$ heads. At attention time the simplest code repeats each kv head
        $n_\text{rep}$ times, so that the usual `[B, H, S, head_dim]` attention applies:
        `repeat_kv(x, n_rep)` turns `[B, H_kv, S, head_dim]` into `[B, H_kv * n_rep, S, head_dim]`, each
        head repeated **in place**: kv head $h$ becomes heads $h \cdot n_\text{rep} \dots (h + 1) \cdot n_\text{rep} - 1$.

        | kv heads in | query heads served (`n_rep = 2`) |
        |---|---|
        | kv 0 | 0, 1 |
        | kv 1 | 2, 3 |
        | kv 2 | 4, 5 |

        The order matters: a model trained with groups of consecutive heads gives wrong scores with the
        tiled order kv 0, 1, 2, 0, 1, 2 (what `x.repeat(1, n_rep, 1, 1)` produces), without any error.
        """),
        solution("repeat_kv", HINTS),
        check("check_repeat_kv(repeat_kv)", "check_repeat_kv"),
        md(r"""
        PyTorch's SDPA does the grouping itself with `enable_gqa=True` (the key/value heads must divide the
        query heads); the first cell compares it with your `repeat_kv`. The second plots the cache of the
        32-layer model against the context length for $H_{kv} = H = 32$, $H/4 = 8$ and $1$.
        """),
        demo("""
        torch.manual_seed(4)
        B, H, H_kv, S, head_dim = 2, 8, 2, 5, 16
        q = torch.randn(B, H, S, head_dim)
        k, v = torch.randn(B, H_kv, S, head_dim), torch.randn(B, H_kv, S, head_dim)
        with uses_your_code():
            grouped = F.scaled_dot_product_attention(q, repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv))
            official = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            print(f"attention with your repeat_kv vs SDPA's enable_gqa=True: largest difference "
                  f"{(grouped - official).abs().max().item():.1e}")
        """),
        demo("""
        import matplotlib.pyplot as plt

        lengths = [2**p for p in range(10, 18)]  # 1k ... 128k tokens
        with uses_your_code():
            curves = {label: [kv_cache_bytes(1, 32, kv_heads, 128, s) / 2**30 for s in lengths]
                      for kv_heads, label in ((32, "MHA, H_kv = H = 32"), (8, "GQA, H_kv = H/4 = 8"), (1, "MQA, H_kv = 1"))}
            fig, ax = plt.subplots(figsize=(6, 3.8))
            for label, sizes in curves.items():
                ax.plot(lengths, sizes, marker="o", label=label)
                print(f"{label:<20} at {lengths[-1]:,} tokens: {sizes[-1]:6.2f} GiB")
            ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="KV cache (GiB)",
                   title="32 layers, head_dim 128, float16, batch 1")
            ax.set_xticks(lengths, [f"{s // 1024}k" for s in lengths])
            ax.minorticks_off()
            ax.legend()
            plt.show()
        """),
        graded_cell("kv_cache"),
        md(r"""
        ## 7. Pitfalls and how to debug them

        - **Top-left causal mask in decoding**: `is_causal=True` or `tril()` of `[S_q, S_k]`; the newest
          token then sees only the first one. Use `decode_causal_mask` / `causal_lower_right`. Test with a
          prompt followed by single tokens *and* with several new tokens at once.
        - **No mask after the prompt**: one new token may see everything, but two new tokens at once must
          not see each other's future.
        - **Wrong axis**: the cache grows along the sequence axis, dim 2 of `[B, H, S, head_dim]`.
        - **Attending before appending**: the new tokens must see themselves; append first.
        - **`len(cache)`**: positions, not calls (it is the position of the next token, for RoPE).
        - **`repeat_kv` order**: each kv head repeated in place (`repeat_interleave`), not tiled (`repeat`).
        - **Memory**: 2 x layers x kv heads x head_dim x bytes per token; it is usually the cache, not the
          weights, that limits the batch size and the context length.
        """),
    ]
