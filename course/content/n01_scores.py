"""Notebook 01: queries, keys, values and the scaled dot-product scores."""
from course.cells import check, demo, graded_cell, md, setup, solution

NAME = "01_scores"

HINTS = {
    "make_projections": "nn.Linear(in_features, out_features, bias=...) is one projection; you need three separate ones.",
    "project_qkv": "each projection is a module: call it on x.",
    "scaled_scores": "d_k is the size of the last axis of Q. Swap only the last two axes of K,\nso that 3-D and 4-D inputs both work.",
    "attention_weights": "which axis of scores [..., S_q, S_k] indexes the keys?",
    "attend": "one batched matrix product.",
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
        """),
        setup(),
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
        matrix becomes **symmetric**: token `i` scores token `j` exactly as `j` scores `i`, so attention
        cannot express a one-way relation (a word that looks for its subject without the subject looking
        back just as much). Each token's score with itself is then $|q_i|^2$, never negative and often,
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
        axes, batch and heads included, which only happens to work for 2-D tensors.

        ### Why divide by $\sqrt{d_k}$?

        If the entries of `q` and `k` are independent with mean 0 and variance 1, their dot product is a
        sum of `d_k` such products, so its variance is `d_k`: the typical raw score grows like
        $\sqrt{d_k}$. Large scores push the softmax into saturation: almost all the weight lands on one
        key, the others get nearly zero, and the gradients through the softmax shrink, so training
        slows down. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the width.
        The experiment below measures all three: the variance, the largest weight and the size of the
        gradient that flows back through the softmax.
        """),
        demo("""
        # Variance of raw dot products grows with d_k; the softmax saturates unless we scale.
        n_pairs, n_keys = 2000, 8
        print(f"{'d_k':>5} {'var(q.k)':>9} {'var(q.k/sqrt(d_k))':>19} {'max weight raw':>15} {'max weight scaled':>18} {'grad raw':>9} {'grad scaled':>12}")
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
            print(f"{d_k:>5} {raw.var().item():>9.1f} {scaled.var().item():>19.2f} {max_raw.item():>15.3f} {max_scaled.item():>18.3f} {grads[0]:>9.4f} {grads[1]:>12.4f}")
        print("With 8 keys a uniform softmax gives 0.125 to each; 1.000 means one key takes everything.")
        x = torch.randn(10_000)
        print(f"x / math.sqrt(d_k) and x * d_k ** -0.5 (d_k = 8) differ by at most {(x / math.sqrt(8) - x * 8 ** -0.5).abs().max().item():.1e}: rounding")
        """),
        md(r"""
        The raw variance tracks `d_k`; as `d_k` grows the unscaled softmax gives more and more of the
        weight to one key, and the gradient that reaches the scores shrinks. After scaling, the variance
        stays near 1 and the weights and gradients stay the same whatever the width. (Some code
        multiplies by `d_k ** -0.5` instead of dividing by `math.sqrt(d_k)`: the same up to rounding, as
        the last line shows.)
        """),
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
        """),
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
        - **Forgotten scale.** Training that does not move, with weights close to one-hot from the very
          first step, often means the $1/\sqrt{d_k}$ is missing.
        - **`K.T` on a batch.** Use `K.transpose(-2, -1)` (or `K.mT`); `.T` reverses every axis. On
          `[B, S, d_k]` keys it usually raises a size mismatch; the visible check names it.
        """),
    ]
