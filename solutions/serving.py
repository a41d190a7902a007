"""Reference implementation of the fifth assignment, `serving` (see ../shared/course-spec.md).

Attention as inference servers run it: many requests of different lengths packed into one flat batch
with no padding (`cu_seqlens`), keys and values kept in fixed-size blocks of one pool addressed through
block tables (a paged KV cache), attention read through those tables, the blocks of a common prompt
prefix shared (chained block hashes, reference counts, copy-on-write), a scheduler that decides at every
model step which requests advance by how many tokens (continuous batching, chunked prefill), and
StreamingLLM's attention sinks. Like solutions/attention.py, this file is the single ground truth: the
solution cells of the `serving` notebooks are generated from it, and the hidden checks compare every
submission against it. Each graded function is self-contained (a notebook cell holds exactly one of them)
and calls the other graded functions by their module-level names.

`apply_rope` is the course's (generation's `positions`), pasted below as a student pastes it.

Names follow the maths: T packed tokens, B sequences, H query heads, H_kv key/value heads, D the width of
queries and keys, D_v that of values. Packed tensors are token-major [T, H, D]; sequence b holds rows
cu[b]:cu[b + 1]. The KV pool of one layer is [num_blocks, block_size, H_kv, D]. Integer metadata that a
function returns (cu_seqlens, FlashInfer's arrays, block tables, lengths) is int32; slots are int64.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

# --------------------------------------------------------------------------- #
# Pasted from generation (part positions): RoPE with neighbouring pairs
# --------------------------------------------------------------------------- #


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x [..., S, head_dim], positions [S] or [B, S] -> same shape and dtype: pair (2i, 2i + 1) rotated by positions * base^(-2i / head_dim)."""
    head_dim = x.shape[-1]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # angles need more than fp16
    two_i = torch.arange(0, head_dim, 2, dtype=work, device=x.device)  # [head_dim / 2]
    angle = positions.to(work)[..., None] * base ** (-two_i / head_dim)  # [S, head_dim / 2] or [B, S, head_dim / 2]
    if positions.dim() == 2 and x.dim() == 4:
        angle = angle[:, None]  # [B, 1, S, head_dim / 2]: one row of positions per sequence, the same for every head
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)  # [..., S, head_dim / 2]: the two halves of each pair
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # [..., S, head_dim / 2, 2]
    return rotated.flatten(-2).to(x.dtype)  # [..., S, head_dim]: pairs back in place


# --------------------------------------------------------------------------- #
# Part varlen
# --------------------------------------------------------------------------- #


def cu_seqlens(lengths) -> torch.Tensor:
    """lengths [B] (list or tensor) -> IntTensor [B + 1] (int32): 0, l_0, l_0 + l_1, ..., T."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)  # [B]
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, dim=0)  # sequence b holds packed rows cu[b]:cu[b + 1]
    return cu


def pack(x: torch.Tensor, lengths) -> torch.Tensor:
    """Right-padded x [B, S, ...], lengths [B] -> [T, ...]: the real tokens, sequence after sequence."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64, device=x.device).reshape(-1)  # [B]
    real = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]  # [B, S]: True = real token
    return x[real]  # [T, ...]: boolean indexing reads row after row, so sequence 0's tokens come first


def unpack(packed: torch.Tensor, cu: torch.Tensor, max_len: int) -> torch.Tensor:
    """packed [T, ...], cu [B + 1] -> right-padded [B, max_len, ...] with zeros at padding (pack's inverse)."""
    cu = torch.as_tensor(cu, dtype=torch.int64, device=packed.device).reshape(-1)
    lengths = cu[1:] - cu[:-1]  # [B]
    out = packed.new_zeros((len(lengths), max_len) + tuple(packed.shape[1:]))  # [B, max_len, ...]
    real = torch.arange(max_len, device=packed.device)[None, :] < lengths[:, None]  # [B, max_len]
    out[real] = packed  # the same row-major order as pack
    return out


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """q [T_q, H, D], k [T_k, H_kv, D], v [T_k, H_kv, D_v] packed -> [T_q, H, D_v]: each sequence attends to its own keys only."""
    H, D = q.shape[1], q.shape[2]
    n_rep = H // k.shape[1]  # query head h reads key/value head h // n_rep
    out = q.new_zeros(q.shape[0], H, v.shape[2])  # [T_q, H, D_v]
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if q1 == q0:
            continue  # no query in this sequence
        q_b = q[q0:q1].transpose(0, 1)  # [H, S_q, D]
        k_b = k[k0:k1].transpose(0, 1).repeat_interleave(n_rep, dim=0)  # [H, S_k, D]: grouped, not tiled
        v_b = v[k0:k1].transpose(0, 1).repeat_interleave(n_rep, dim=0)  # [H, S_k, D_v]
        scores = q_b @ k_b.transpose(-2, -1) / math.sqrt(D)  # [H, S_q, S_k]: one sequence, never [T_q, T_k]
        S_q, S_k = q1 - q0, k1 - k0
        allowed = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device)  # [S_q, S_k]
        if causal:
            allowed = allowed.tril(diagonal=S_k - S_q)  # bottom-right: query i sees keys j <= i + S_k - S_q
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        weights = torch.where(allowed.any(dim=-1)[:, None], weights, 0.0)  # a query that sees no key gives zeros
        out[q0:q1] = (weights @ v_b).transpose(0, 1)  # [S_q, H, D_v]
    return out


# --------------------------------------------------------------------------- #
# Part paged_cache
# --------------------------------------------------------------------------- #


class BlockAllocator:
    """The pool's free queue and reference counts: allocate from the head (LRU), free to the tail."""

    def __init__(self, num_blocks: int):
        """num_blocks free blocks, queued in id order (never-used blocks come first)."""
        self.num_blocks = num_blocks
        self.free_queue = list(range(num_blocks))  # head (index 0): the next block allocate hands out
        self.refcounts = [0] * num_blocks  # how many sequences own each block

    def allocate(self) -> int:
        """The block at the head of the free queue, with refcount 1; RuntimeError when none is free."""
        if not self.free_queue:
            raise RuntimeError("no free KV block left in the pool")
        block = self.free_queue.pop(0)
        self.refcounts[block] = 1
        return block

    def incref(self, block: int) -> None:
        """One more owner of `block`; a freed block (refcount 0) is taken back out of the free queue."""
        if self.refcounts[block] == 0:
            self.free_queue.remove(block)  # a prefix-cache hit on a freed block revives it
        self.refcounts[block] += 1

    def free(self, block: int) -> None:
        """One owner fewer; at refcount 0 the block joins the tail of the free queue. Freeing a free block raises."""
        if self.refcounts[block] == 0:
            raise ValueError(f"block {block} is already free")
        self.refcounts[block] -= 1
        if self.refcounts[block] == 0:
            self.free_queue.append(block)  # the tail: the least recently freed block is reused first

    def refcount(self, block: int) -> int:
        """How many owners `block` has (0 when free)."""
        return self.refcounts[block]

    @property
    def num_free(self) -> int:
        """How many blocks are in the free queue."""
        return len(self.free_queue)


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """key, value [T, H_kv, D] -> written in place into key_cache, value_cache [num_blocks, block_size, H_kv, D] at slot_mapping [T]; a slot < 0 writes nothing."""
    block_size = key_cache.shape[1]
    slots = torch.as_tensor(slot_mapping, device=key.device).long()  # [T]
    real = slots >= 0  # a negative slot is a padding token
    block, offset = slots[real] // block_size, slots[real] % block_size  # [T_real] each
    key_cache[block, offset] = key[real]  # [T_real, H_kv, D] into the rows (block, offset)
    value_cache[block, offset] = value[real]


class PagedKVCache:
    """Keys and values of many sequences in fixed-size blocks of one pool, addressed through block tables."""

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, num_layers: int = 1,
                 dtype: torch.dtype = torch.float32, enable_prefix_caching: bool = False):
        """A pool of num_blocks blocks of block_size slots for every layer; k_cache, v_cache [num_layers, num_blocks, block_size, H_kv, D]."""
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype)
        self.v_cache = torch.zeros(shape, dtype=dtype)
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.tables: dict = {}  # seq_id -> its block table (list of block ids)
        self.lens: dict = {}  # seq_id -> how many positions it holds
        self.tokens: dict = {}  # seq_id -> the token ids recorded so far, or None once a reserve came without them
        self.block_of_hash: dict = {}  # prefix cache: chained hash -> block
        self.hash_of_block: dict = {}  # and back, to forget a block's hash when it is reused

    def _allocate(self) -> int:
        """A fresh block; if it held a cached prefix block, that entry leaves the map (lazy eviction)."""
        block = self.allocator.allocate()
        if block in self.hash_of_block:
            del self.block_of_hash[self.hash_of_block.pop(block)]
        return block

    def add_sequence(self, seq_id, token_ids=None) -> int:
        """Register an empty sequence; with prefix caching and its prompt, take the longest cached run of its full blocks and return how many tokens it holds."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        table: list[int] = []
        if self.enable_prefix_caching and token_ids is not None:
            ids = [int(t) for t in token_ids]
            for h in block_hashes(ids[:len(ids) - 1], self.block_size):  # the last prompt token is always computed
                if h not in self.block_of_hash:
                    break
                table.append(self.block_of_hash[h])
            for block in table:
                self.allocator.incref(block)  # one more owner; a freed cached block leaves the free queue
        cached = len(table) * self.block_size
        self.tables[seq_id], self.lens[seq_id] = table, cached
        self.tokens[seq_id] = [] if token_ids is None else [int(t) for t in token_ids][:cached]
        return cached

    def reserve(self, seq_id, num_new: int, token_ids=None) -> torch.Tensor:
        """The slots [num_new] (int64) of the sequence's next num_new positions, allocating blocks (copy-on-write of a shared partial last block); RuntimeError, changing nothing, when they do not fit."""
        table, start = self.tables[seq_id], self.lens[seq_id]
        end = start + num_new
        bs = self.block_size
        copy = num_new > 0 and start % bs != 0 and self.allocator.refcount(table[-1]) > 1  # a shared partial block
        needed = -(-end // bs) - len(table) + int(copy)  # ceil(end / bs) blocks in all
        if needed > self.allocator.num_free:
            raise RuntimeError(f"sequence {seq_id!r} needs {needed} more blocks, {self.allocator.num_free} are free")
        if copy:  # copy-on-write: a private copy of the partial last block (all layers), one reference fewer on the old
            old, new = table[-1], self._allocate()
            self.k_cache[:, new] = self.k_cache[:, old]
            self.v_cache[:, new] = self.v_cache[:, old]
            self.allocator.free(old)
            table[-1] = new
        while len(table) * bs < end:
            table.append(self._allocate())
        p = torch.arange(start, end)  # [num_new]: the new positions
        slots = torch.tensor(table, dtype=torch.int64)[p // bs] * bs + p % bs  # block * block_size + offset
        self.lens[seq_id] = end
        self._record(seq_id, start, end, token_ids)
        return slots

    def _record(self, seq_id, start: int, end: int, token_ids) -> None:
        """Record the tokens of positions start..end - 1; with prefix caching every block that became full enters the map."""
        tokens = self.tokens[seq_id]
        if tokens is None or token_ids is None or len(tokens) != start:
            self.tokens[seq_id] = None  # a gap: no later block of this sequence can be hashed
            return
        tokens.extend(int(t) for t in token_ids)
        if not self.enable_prefix_caching:
            return
        hashes = block_hashes(tokens, self.block_size)  # one per full block
        for i in range(start // self.block_size, end // self.block_size):  # the blocks that became full
            block = self.tables[seq_id][i]
            if hashes[i] not in self.block_of_hash and block not in self.hash_of_block:
                self.block_of_hash[hashes[i]], self.hash_of_block[block] = block, hashes[i]

    def fork(self, parent_id, child_id) -> None:
        """child_id shares every block of parent_id (one more owner each, no copy)."""
        if child_id in self.tables:
            raise ValueError(f"sequence {child_id!r} already exists")
        for block in self.tables[parent_id]:
            self.allocator.incref(block)
        self.tables[child_id] = list(self.tables[parent_id])
        self.lens[child_id] = self.lens[parent_id]
        tokens = self.tokens[parent_id]
        self.tokens[child_id] = None if tokens is None else list(tokens)

    def free_sequence(self, seq_id) -> None:
        """Give the sequence's blocks back, last to first (the tail of a prefix is evicted before its head)."""
        for block in reversed(self.tables.pop(seq_id)):
            self.allocator.free(block)
        del self.lens[seq_id], self.tokens[seq_id]

    def block_table(self, seq_id) -> list[int]:
        """The sequence's block ids, in position order."""
        return list(self.tables[seq_id])

    def seq_len(self, seq_id) -> int:
        """How many positions the sequence holds."""
        return self.lens[seq_id]

    def block_tables_tensor(self, seq_ids) -> torch.Tensor:
        """IntTensor [n, max_blocks] (int32): the tables of seq_ids, rows padded with block 0."""
        tables = [self.tables[s] for s in seq_ids]
        out = torch.zeros(len(tables), max([1] + [len(t) for t in tables]), dtype=torch.int32)
        for row, table in enumerate(tables):
            out[row, :len(table)] = torch.tensor(table, dtype=torch.int32)
        return out

    def seq_lens_tensor(self, seq_ids) -> torch.Tensor:
        """IntTensor [n] (int32): the lengths of seq_ids."""
        return torch.tensor([self.lens[s] for s in seq_ids], dtype=torch.int32)

    def gather(self, seq_id, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(k, v) [seq_len, H_kv, D] of one sequence and layer, read through its block table."""
        blocks = torch.tensor(self.tables[seq_id], dtype=torch.int64)
        H_kv, D = self.k_cache.shape[3], self.k_cache.shape[4]
        k = self.k_cache[layer, blocks].reshape(-1, H_kv, D)  # [n_blocks * block_size, H_kv, D]
        v = self.v_cache[layer, blocks].reshape(-1, H_kv, self.v_cache.shape[4])
        n = self.lens[seq_id]
        return k[:n], v[:n]

    def blocks_used(self) -> int:
        """How many blocks are owned by some sequence (not in the free queue)."""
        return self.allocator.num_blocks - self.allocator.num_free


# --------------------------------------------------------------------------- #
# Part paged_attention
# --------------------------------------------------------------------------- #


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, cu_seqlens_q: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, H, D] packed (cu_seqlens_q None: one query per sequence), caches [num_blocks, block_size, H_kv, D] -> [T, H, D_v]; sequence b's queries are its last positions (bottom-right causal)."""
    B = len(seq_lens)
    if cu_seqlens_q is None:
        cu_seqlens_q = cu_seqlens([1] * B)  # decoding: one query per sequence
    block_size, H_kv, D = k_cache.shape[1], k_cache.shape[2], q.shape[2]
    n_rep = q.shape[1] // H_kv  # query head h reads key/value head h // n_rep
    out = q.new_zeros(q.shape[0], q.shape[1], v_cache.shape[3])  # [T, H, D_v]
    for b in range(B):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        if q1 == q0:
            continue  # a sequence with no query: its keys are not read
        S_k = int(seq_lens[b])
        blocks = torch.as_tensor(block_tables[b][:-(-S_k // block_size)], device=q.device).long()  # its used blocks
        k = k_cache[blocks].reshape(-1, H_kv, D)[:S_k]  # [S_k, H_kv, D]: only the written slots
        v = v_cache[blocks].reshape(-1, H_kv, v_cache.shape[3])[:S_k]  # [S_k, H_kv, D_v]
        k = k.transpose(0, 1).repeat_interleave(n_rep, dim=0)  # [H, S_k, D]: grouped, not tiled
        v = v.transpose(0, 1).repeat_interleave(n_rep, dim=0)  # [H, S_k, D_v]
        q_b = q[q0:q1].transpose(0, 1)  # [H, S_q, D]
        S_q = q1 - q0
        scores = q_b @ k.transpose(-2, -1) / math.sqrt(D)  # [H, S_q, S_k]
        allowed = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device).tril(diagonal=S_k - S_q)  # bottom-right
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        out[q0:q1] = (weights @ v).transpose(0, 1)  # [S_q, H, D_v]
    return out


def paged_to_csr(block_tables: torch.Tensor, seq_lens: torch.Tensor,
                 block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block tables [B, max_blocks] and seq_lens [B] -> FlashInfer's page table (kv_indptr [B + 1], kv_indices, kv_last_page_len [B]), all int32."""
    seq_lens = torch.as_tensor(seq_lens).long().reshape(-1)  # [B]
    pages = (seq_lens + block_size - 1) // block_size  # [B]: ceil(seq_len / block_size)
    kv_indptr = cu_seqlens(pages)  # [B + 1]: sequence b's pages are kv_indices[indptr[b]:indptr[b + 1]]
    rows = [torch.as_tensor(block_tables[b][:int(n)]).reshape(-1) for b, n in enumerate(pages)]
    kv_indices = torch.cat(rows).to(torch.int32) if rows else torch.zeros(0, dtype=torch.int32)
    kv_last_page_len = ((seq_lens - 1) % block_size + 1).to(torch.int32)  # 1..block_size: a full page counts block_size
    return kv_indptr, kv_indices, kv_last_page_len


# --------------------------------------------------------------------------- #
# Part prefix_sharing (block_hashes; the rest lives in PagedKVCache)
# --------------------------------------------------------------------------- #


def block_hashes(token_ids, block_size: int) -> list:
    """One chained hash per full block: h_i = hash((h_{i-1}, tuple(block_i))), h_{-1} = None; a partial last block has none."""
    ids = [int(t) for t in token_ids]
    hashes, parent = [], None
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start:start + block_size])))  # the block's tokens and everything before
        hashes.append(parent)
    return hashes


# --------------------------------------------------------------------------- #
# Part continuous_batching
# --------------------------------------------------------------------------- #


class StepMeta:
    """What the paged layers of one model step read besides their inputs (built by the scheduler)."""

    def __init__(self, cu_seqlens_q: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                 seq_lens: torch.Tensor):
        """cu_seqlens_q [n + 1] int32, slot_mapping [T] int64, block_tables [n, max_blocks] and seq_lens [n] after the step."""
        self.cu_seqlens_q, self.slot_mapping = cu_seqlens_q, slot_mapping
        self.block_tables, self.seq_lens = block_tables, seq_lens


class PagedDecoderAttention(nn.Module):
    """generation's DecoderAttention on packed tokens: RoPE at each token's position, keys and values in a PagedKVCache."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0,
                 layer_idx: int = 0):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}, num_kv_heads={num_kv_heads} "
                             "must divide num_heads")
        self.num_heads, self.num_kv_heads, self.rope_base, self.layer_idx = num_heads, num_kv_heads, rope_base, layer_idx
        head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, meta, cache) -> torch.Tensor:
        """x [T, d_model] packed new tokens, positions [T], meta (cu_seqlens_q, slot_mapping, block_tables, seq_lens), cache -> [T, d_model]."""
        T, d_model = x.shape
        H, H_kv = self.num_heads, self.num_kv_heads
        head_dim = d_model // H
        q = self.W_q(x).view(T, H, head_dim)  # [T, H, head_dim]
        k = self.W_k(x).view(T, H_kv, head_dim)  # [T, H_kv, head_dim]
        v = self.W_v(x).view(T, H_kv, head_dim)
        # RoPE's sequence axis is -2: rotate [H, T, head_dim], each token at its own position in its own sequence
        q = apply_rope(q.transpose(0, 1), positions, self.rope_base).transpose(0, 1)
        k = apply_rope(k.transpose(0, 1), positions, self.rope_base).transpose(0, 1)
        # the ROTATED keys and the values go into this layer's pool, then every query reads through the tables
        key_cache, value_cache = cache.k_cache[self.layer_idx], cache.v_cache[self.layer_idx]
        reshape_and_cache(k, v, key_cache, value_cache, meta.slot_mapping)
        out = paged_attention(q, key_cache, value_cache, meta.block_tables, meta.seq_lens, meta.cu_seqlens_q)
        return self.W_o(out.reshape(T, d_model))  # [T, H, head_dim] -> [T, d_model]


def continuous_batching_generate(model, prompts, max_new_tokens, cache, token_budget: int = 16,
                                 max_num_seqs: int = 4) -> tuple[list[list[int]], dict]:
    """Greedy generation of every prompt with iteration-level scheduling (decodes first, then prefill chunks within token_budget) -> (outputs, stats)."""
    bs, num_blocks = cache.block_size, cache.k_cache.shape[1]
    tokens = [[int(t) for t in p] for p in prompts]  # each request's known tokens: prompt, then outputs
    prompt_len = [len(t) for t in tokens]
    need = [-(-(prompt_len[r] + max_new_tokens[r]) // bs) for r in range(len(tokens))]  # blocks at its end
    if any(n > num_blocks for n in need):
        raise RuntimeError("a request needs more blocks than the whole pool holds")
    done = [0] * len(tokens)  # tokens computed (in the cache) per request
    outputs: list[list[int]] = [[] for _ in tokens]
    waiting, running = list(range(len(tokens))), []
    stats = {"steps": 0, "mixed_steps": 0, "max_blocks_used": 0, "tokens_per_step": [], "prefill_tokens": 0}
    while waiting or running:
        budget = token_budget
        chunks = []  # (request, number of tokens) in meta's row order
        for r in running:  # 1. decodes: one token each
            if outputs[r] and budget > 0:
                chunks.append((r, 1))
                budget -= 1
        for r in running:  # 2. prompts being prefilled, oldest first
            if not outputs[r] and budget > 0:
                chunks.append((r, min(budget, prompt_len[r] - done[r])))
                budget -= chunks[-1][1]
        while budget > 0 and len(running) < max_num_seqs and waiting:  # 3. admit in order, none overtakes
            promised = sum(need[s] - len(cache.block_table(s)) for s in running)
            if cache.allocator.num_free - promised < need[waiting[0]]:
                break
            r = waiting.pop(0)
            done[r] = cache.add_sequence(r, tokens[r][:prompt_len[r]])  # prompt tokens already cached are skipped
            running.append(r)
            chunks.append((r, min(budget, prompt_len[r] - done[r])))
            budget -= chunks[-1][1]
        if not chunks:
            raise RuntimeError("no request can run: the pool is too small")
        # 4. reserve every chunk's slots, then one model call over the packed batch
        ids = [r for r, _ in chunks]
        step_tokens = [tokens[r][done[r]:done[r] + n] for r, n in chunks]
        slots = [cache.reserve(r, n, token_ids=t) for (r, n), t in zip(chunks, step_tokens)]
        stats["max_blocks_used"] = max(stats["max_blocks_used"], cache.blocks_used())
        cu = cu_seqlens([n for _, n in chunks])
        meta = StepMeta(cu, torch.cat(slots), cache.block_tables_tensor(ids), cache.seq_lens_tensor(ids))
        positions = torch.cat([torch.arange(done[r], done[r] + n) for r, n in chunks])  # [T]
        logits = model(torch.tensor(sum(step_tokens, [])), positions, meta, cache)  # [T, vocab]
        prefill = sum(int((torch.arange(done[r], done[r] + n) < prompt_len[r]).sum()) for r, n in chunks)
        has_decode = any(outputs[r] for r in ids)
        stats["steps"] += 1
        stats["tokens_per_step"].append(int(cu[-1]))
        stats["prefill_tokens"] += prefill
        stats["mixed_steps"] += int(has_decode and prefill > 0)
        # 5. a request whose known tokens are all computed samples from its LAST token's logits
        for i, (r, n) in enumerate(chunks):
            done[r] += n
            if done[r] == len(tokens[r]):
                tokens[r].append(int(logits[int(cu[i + 1]) - 1].argmax()))
                outputs[r].append(tokens[r][-1])
                if len(outputs[r]) == max_new_tokens[r]:
                    cache.free_sequence(r)  # in the same step: its blocks count at the next admission
                    running.remove(r)
    return outputs, stats


def static_batching_generate(model, prompts, max_new_tokens, cache, batch_size: int = 4) -> tuple[list[list[int]], dict]:
    """The baseline: batches in arrival order, each prefilled in one step and decoded until its longest request is done -> (outputs, stats)."""
    outputs: list[list[int]] = [[] for _ in prompts]
    stats = {"steps": 0, "mixed_steps": 0, "max_blocks_used": 0, "tokens_per_step": [], "prefill_tokens": 0}
    for first in range(0, len(prompts), batch_size):
        batch = list(range(first, min(first + batch_size, len(prompts))))
        tokens = {r: [int(t) for t in prompts[r]] for r in batch}
        for r in batch:
            cache.add_sequence(r)
        chunks = {r: tokens[r] for r in batch}  # step 1: every whole prompt
        for step in range(max(max_new_tokens[r] for r in batch)):  # finished rows keep computing
            slots = [cache.reserve(r, len(chunks[r]), token_ids=chunks[r]) for r in batch]
            stats["max_blocks_used"] = max(stats["max_blocks_used"], cache.blocks_used())
            cu = cu_seqlens([len(chunks[r]) for r in batch])
            meta = StepMeta(cu, torch.cat(slots), cache.block_tables_tensor(batch), cache.seq_lens_tensor(batch))
            positions = torch.cat([torch.arange(len(tokens[r]) - len(chunks[r]), len(tokens[r])) for r in batch])
            logits = model(torch.tensor(sum(chunks.values(), [])), positions, meta, cache)  # [T, vocab]
            stats["steps"] += 1
            stats["tokens_per_step"].append(int(cu[-1]))
            stats["prefill_tokens"] += int(cu[-1]) if step == 0 else 0
            for i, r in enumerate(batch):
                tokens[r].append(int(logits[int(cu[i + 1]) - 1].argmax()))
                chunks[r] = tokens[r][-1:]  # the next step feeds the token just generated
                if len(outputs[r]) < max_new_tokens[r]:
                    outputs[r].append(tokens[r][-1])
        for r in batch:
            cache.free_sequence(r)
    return outputs, stats


# --------------------------------------------------------------------------- #
# Part attention_sinks
# --------------------------------------------------------------------------- #


class SinkKVCache:
    """StreamingLLM's cache: the first num_sink positions ever seen and the last `window`, keys kept unrotated."""

    def __init__(self, num_sink: int = 4, window: int = 60):
        """An empty cache that keeps num_sink sink positions and a recent window."""
        self.num_sink, self.window = num_sink, window
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add unrotated k, v [B, H_kv, S_new, D], evict the middle beyond num_sink + window, return what is kept; ValueError when a new key would be evicted."""
        S_new = k.shape[-2]
        if S_new > self.window and len(self) + S_new > self.num_sink + self.window:
            raise ValueError(f"{S_new} new tokens do not fit a window of {self.window}: feed them in pieces")
        k_all = k if self.k is None else torch.cat([self.k, k], dim=-2)  # [B, H_kv, S, D]
        v_all = v if self.v is None else torch.cat([self.v, v], dim=-2)
        if k_all.shape[-2] > self.num_sink + self.window:  # keep the sinks and the last `window`, in order
            k_all = torch.cat([k_all[..., :self.num_sink, :], k_all[..., -self.window:, :]], dim=-2)
            v_all = torch.cat([v_all[..., :self.num_sink, :], v_all[..., -self.window:, :]], dim=-2)
        self.k, self.v = k_all, v_all
        return k_all, v_all

    def __len__(self) -> int:
        """The number of kept positions."""
        return 0 if self.k is None else self.k.shape[-2]


class SinkDecoderAttention(nn.Module):
    """DecoderAttention over a SinkKVCache: keys rotated at their position inside the cache, not their original one."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}, num_kv_heads={num_kv_heads} "
                             "must divide num_heads")
        self.num_heads, self.num_kv_heads, self.rope_base = num_heads, num_kv_heads, rope_base
        head_dim = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * head_dim, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache) -> torch.Tensor:
        """x [B, S_new, d_model] -> [B, S_new, d_model]; unrotated keys cached, every key rotated at 0 .. len - 1, queries at the last S_new."""
        B, S_new, d_model = x.shape
        H, H_kv = self.num_heads, self.num_kv_heads
        head_dim = d_model // H
        q = self.W_q(x).view(B, S_new, H, head_dim).transpose(1, 2)  # [B, H, S_new, head_dim]
        k = self.W_k(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)  # [B, H_kv, S_new, head_dim]
        v = self.W_v(x).view(B, S_new, H_kv, head_dim).transpose(1, 2)
        k, v = cache.append(k, v)  # UNROTATED keys in, the kept ones out: [B, H_kv, S_k, head_dim]
        S_k = k.shape[-2]
        positions = torch.arange(S_k, device=x.device)  # positions inside the cache, re-assigned every step
        k = apply_rope(k, positions, self.rope_base)
        q = apply_rope(q, positions[S_k - S_new:], self.rope_base)  # the queries are the last S_new positions
        k = k.repeat_interleave(H // H_kv, dim=1)  # [B, H, S_k, head_dim]: grouped
        v = v.repeat_interleave(H // H_kv, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)  # [B, H, S_new, S_k]
        allowed = torch.ones(S_new, S_k, dtype=torch.bool, device=x.device).tril(diagonal=S_k - S_new)
        out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v  # [B, H, S_new, head_dim]
        return self.W_o(out.transpose(1, 2).reshape(B, S_new, d_model))
