"""The course contract (../shared/course-spec.md) as data: assignments, their parts, API names, points.

Everything else in the grader reads the parts from here, so the contract lives in one place.
An `Assignment` is one nbgrader assignment: its graded parts in report order (the CPU parts
sum to 100 points), the notebooks that teach them, the folder of its hidden checks under
autograder/checks/, and the module of its reference solutions. `ASSIGNMENTS` is the registry;
`assignment(name)` looks one up.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..worker.names import FLEX_ATTENTION, FUSED_KERNEL, OFFICIAL_MODULE, SERVING_KERNELS, TRANSFORMERS

CHECKS_ROOT = Path(__file__).resolve().parent.parent / "checks"


# What a from-scratch part may not call unless it says otherwise (an `efficient` part: forbids=FUSED_KERNEL + FLEX_ATTENTION)
FROM_SCRATCH_FORBIDS = FUSED_KERNEL + OFFICIAL_MODULE


@dataclass(frozen=True)
class Part:
    id: str
    names: tuple[str, ...]  # the student API this part grades
    points: float
    notebook: str  # the released notebook that teaches and grades this part
    from_scratch: bool = False  # calling torch's fused attention or official module here earns nothing
    gpu: bool = False  # a GPU-stage part: outside the assignment's score, graded only with --gpu
    credit_to: str | None = None  # a GPU part: the part whose gradebook cell holds its score as extra credit
    # the groups of torch functions (worker/names.py) that earn this part nothing when its code calls them while
    # graded; empty for a from-scratch part: the fused kernel and the official module (FROM_SCRATCH_FORBIDS)
    forbids: tuple[str, ...] = ()
    # functions graded elsewhere that this part's code may call (another part's, or this part's own helper graded by
    # its own checks, as sliding_window_mask in sliding_window_attention): while the caller is graded, the worker puts
    # the reference versions in their place (checks/lent.py), so that a mistake in one of them costs points once
    borrows: tuple[str, ...] = ()

    @property
    def forbidden(self) -> tuple[str, ...]:
        """The patterns of torch's names that earn this part nothing (worker/names.py)."""
        return self.forbids or (FROM_SCRATCH_FORBIDS if self.from_scratch else ())


@dataclass(frozen=True)
class Assignment:
    id: str  # the nbgrader assignment id, also the folder name in source/, release/ and submitted/<student>/
    parts: tuple[Part, ...]  # graded by default, in report order; their points sum to 100
    checks: str  # the folder of the hidden checks (test_<part id>.py each) under autograder/checks/, or absolute
    solutions: str  # the module of the reference solutions (the ground truth)
    gpu_part: Part | None = None  # the GPU stage's part, if the assignment has one
    warm: tuple[str, ...] = ()  # what the worker pool prepares once before forking this assignment's workers (worker/warmup.py)
    # packages its checks import on the trusted side besides what every assignment needs (the Gradescope bundle's
    # requirements.txt lists them; requirements.txt pins them)
    requires: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_score != 100:
            raise ValueError(f"{self.id}: the points of the parts sum to {self.max_score}, not 100")
        if self.gpu_part is not None and not self.gpu_part.gpu:
            raise ValueError(f"{self.id}: the GPU part {self.gpu_part.id} is not marked gpu=True")

    @property
    def all_parts(self) -> tuple[Part, ...]:
        return self.parts + ((self.gpu_part,) if self.gpu_part else ())

    @property
    def max_score(self) -> float:
        return sum(p.points for p in self.parts)

    @property
    def notebooks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.notebook for p in self.parts))

    @property
    def api_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for p in self.parts for name in p.names))

    @property
    def checks_dir(self) -> Path:
        return CHECKS_ROOT / self.checks

    def part(self, part_id: str) -> Part:
        for p in self.all_parts:
            if p.id == part_id:
                return p
        raise KeyError(f"{part_id!r} is not a part of assignment {self.id}")

    def parts_of(self, notebook: str) -> tuple[Part, ...]:
        """The CPU parts graded in the notebook `notebook` (its stem, e.g. "02_masks")."""
        return tuple(p for p in self.parts if p.notebook == notebook)

    def check_file(self, part: Part) -> Path:
        return self.checks_dir / f"test_{part.id}.py"


# the functions of parts scaled_scores and masks that a module may call (graded there, lent to module and multihead)
PIECES = ("scaled_scores", "attention_weights", "attend", "padding_mask", "causal_mask", "apply_padding_mask",
          "apply_causal_mask")

SELF_ATTENTION = Assignment(
    id="self_attention",
    parts=(
        Part("qkv_projection", ("make_projections", "project_qkv"), 10, "01_scores", from_scratch=True),
        Part("scaled_scores", ("scaled_scores", "attention_weights", "attend"), 15, "01_scores", from_scratch=True),
        Part("masks", ("padding_mask", "causal_mask", "apply_padding_mask", "apply_causal_mask"), 15, "02_masks",
             from_scratch=True),
        Part("module", ("SelfAttention",), 20, "03_module", from_scratch=True, borrows=PIECES),
        # official_parity and long_sequence are about the official module and the fused kernel themselves
        Part("official_parity", ("to_official", "parity_error"), 15, "03_module", borrows=PIECES),
        Part("multihead", ("split_heads", "merge_heads", "MultiHeadSelfAttention"), 15, "04_multihead",
             from_scratch=True, borrows=PIECES),
        Part("long_sequence", ("attention_matrix_bytes", "sdpa_attention", "chunked_attention"), 10,
             "05_long_sequence", borrows=PIECES),
    ),
    checks="self_attention",
    solutions="solutions.attention",
    gpu_part=Part("long_sequence_gpu", ("sdpa_attention", "chunked_attention"), 10, "05_long_sequence", gpu=True,
                  credit_to="long_sequence"),
)

# Attention at generation time. None of its parts is from scratch: the attention itself was the first
# assignment's; here F.scaled_dot_product_attention is a fair tool (with causal_lower_right, a right answer).
# cross_attention may not hand its whole work to nn.MultiheadAttention, which it is graded against.
GENERATION = Assignment(
    id="generation",
    parts=(
        Part("positions", ("sinusoidal_positions", "apply_rope"), 25, "01_positions"),
        Part("kv_cache", ("decode_causal_mask", "repeat_kv", "KVCache", "CachedSelfAttention", "kv_cache_bytes"), 35,
             "02_kv_cache"),
        # wrapping nn.MultiheadAttention would skip the part's lesson (SDPA inside one's own module is fine)
        Part("cross_attention", ("CrossAttention",), 15, "03_cross_attention", forbids=OFFICIAL_MODULE),
        # the pieces above in one Llama-style layer: RoPE at the cache's offset, a grouped-query cache, left padding
        Part("decoder", ("DecoderAttention",), 25, "04_decoder", borrows=("apply_rope", "decode_causal_mask", "repeat_kv")),
    ),
    checks="generation",
    solutions="solutions.generation",
)

# Attention that scales: FlashAttention's algorithm (forward and backward), sliding windows, linear attention, FlexAttention's mods.
# flash, sliding_window and linear build attention themselves: torch's fused attention and flex_attention
# earn nothing there (FUSED_KERNEL + FLEX_ATTENTION). flex is about flex_attention's mods: calling it is the point.
EFFICIENT = Assignment(
    id="efficient",
    parts=(
        Part("flash", ("flash_attention", "merge_attention"), 25, "01_flash", forbids=FUSED_KERNEL + FLEX_ATTENTION),
        Part("flash_backward", ("flash_attention_backward", "FlashAttentionFunction"), 20, "05_flash_backward",
             forbids=FUSED_KERNEL + FLEX_ATTENTION),
        # the attention may build its chunks' masks with the part's own sliding_window_mask: lent while the attention
        # is graded, so that a wrong mask costs the mask's checks only
        Part("sliding_window", ("sliding_window_mask", "sliding_window_attention"), 15, "02_sliding_window",
             forbids=FUSED_KERNEL + FLEX_ATTENTION, borrows=("sliding_window_mask",)),
        Part("linear", ("elu_feature_map", "linear_attention", "linear_attention_step"), 20, "03_linear",
             forbids=FUSED_KERNEL + FLEX_ATTENTION),
        Part("flex", ("document_causal_mask_mod", "prefix_lm_mask_mod", "sliding_window_mask_mod",
                      "alibi_score_mod", "softcap_score_mod"), 20, "04_flex"),
    ),
    checks="efficient",
    solutions="solutions.efficient",
    warm=("flex",),  # create_mask and flex_attention import dynamo: once in the zygote, not in every worker
)

# the RoPE permutations of part rope_permutation that from_hf_llama calls (graded there, lent to llama)
CONVERSIONS = ("interleaved_to_half_split", "half_split_to_interleaved")

# Your attention inside real code: GPT-2, BERT and Llama as the transformers library writes them. The library supplies
# weights and, on the trusted side, the reference; a student's code may not call its modules or functions
# (TRANSFORMERS: seen by the worker's watch as torch calls made from the library's code). SDPA is allowed.
REAL_MODELS = Assignment(
    id="real_models",
    parts=(
        Part("gpt2", ("split_c_attn", "GPT2StyleAttention"), 20, "01_gpt2", forbids=TRANSFORMERS),
        Part("bert", ("extended_attention_mask", "BertStyleSelfAttention"), 20, "02_bert", forbids=TRANSFORMERS),
        Part("rope_permutation", ("interleaved_to_half_split", "half_split_to_interleaved", "rope_inv_freq"), 15,
             "03_llama", forbids=TRANSFORMERS),
        # a wrong conversion costs rope_permutation only: llama is graded with the reference's answers for it (lent)
        Part("llama", ("from_hf_llama",), 25, "03_llama", forbids=TRANSFORMERS, borrows=CONVERSIONS),
        Part("attention_interface", ("course_attention", "register_course_attention"), 20, "04_interface",
             forbids=TRANSFORMERS),
    ),
    checks="real_models",
    solutions="solutions.real_models",
    requires=("transformers",),
)

# Attention as inference servers run it: packed batches (cu_seqlens), a paged KV cache, paged attention, shared
# prefixes, continuous batching, attention sinks. The attention functions and the paged layer may not hand their work
# to a serving kernel (SERVING_KERNELS: torch's varlen attention, SDPA on nested tensors, flex_attention, flash_attn,
# vllm, ...); SDPA with an explicit mask on one sequence at a time is allowed. Each mistake costs once: the parts that
# call another part's functions borrow them (checks/lent.py), and the caches the later parts use are the grader's.
SERVING = Assignment(
    id="serving",
    parts=(
        Part("varlen", ("cu_seqlens", "pack", "unpack", "varlen_attention"), 15, "01_varlen",
             forbids=SERVING_KERNELS),
        Part("paged_cache", ("BlockAllocator", "reshape_and_cache", "PagedKVCache"), 20, "02_paged_cache"),
        Part("paged_attention", ("paged_attention", "paged_to_csr"), 20, "03_paged_attention",
             forbids=SERVING_KERNELS, borrows=("cu_seqlens",)),
        # the prefix cache, fork and copy-on-write are PagedKVCache's own (the class of 02, extended in 04)
        Part("prefix_sharing", ("block_hashes", "PagedKVCache"), 15, "04_prefix_sharing"),
        Part("continuous_batching", ("PagedDecoderAttention", "continuous_batching_generate",
                                     "static_batching_generate"), 20, "05_continuous_batching",
             forbids=SERVING_KERNELS, borrows=("cu_seqlens", "apply_rope", "reshape_and_cache", "paged_attention")),
        Part("attention_sinks", ("SinkKVCache", "SinkDecoderAttention"), 10, "06_attention_sinks"),
    ),
    checks="serving",
    solutions="solutions.serving",
)

ASSIGNMENTS: dict[str, Assignment] = {a.id: a for a in (SELF_ATTENTION, GENERATION, EFFICIENT, REAL_MODELS, SERVING)}
DEFAULT = SELF_ATTENTION


class UnknownAssignment(ValueError):
    """No assignment of that name; the message is one line that names the known ones."""


# The languages of the course's editions. The English edition of an assignment has the assignment's
# id; every other edition is its own nbgrader assignment, `<id>_<lang>` (self_attention_zh), with the
# same notebooks, graded cell ids and points, graded by the same checks.
DEFAULT_LANGUAGE = "en"
LANGUAGES = (DEFAULT_LANGUAGE, "zh")


def edition_id(assignment_id: str, lang: str) -> str:
    """The nbgrader assignment id of an assignment's edition in `lang`."""
    return assignment_id if lang == DEFAULT_LANGUAGE else f"{assignment_id}_{lang}"


def split_edition(name: str) -> tuple[str, str]:
    """(assignment id, language) of an nbgrader assignment id: self_attention_zh -> (self_attention, zh)."""
    for lang in LANGUAGES[1:]:
        if name.endswith(f"_{lang}") and name[: -len(lang) - 1] in ASSIGNMENTS:
            return name[: -len(lang) - 1], lang
    return name, DEFAULT_LANGUAGE


def assignment(name: str) -> Assignment:
    """The registered assignment called `name`, or whose edition is called `name`."""
    try:
        return ASSIGNMENTS[split_edition(name)[0]]
    except KeyError:
        raise UnknownAssignment(f"unknown assignment {name!r}: the known assignments are "
                                f"{', '.join(ASSIGNMENTS)}") from None


def assignment_of_notebook(notebook: str, hint: str | None = None) -> Assignment | None:
    """The assignment a notebook belongs to: the one named `hint` (an nbgrader assignment id) when it
    is registered, else the first assignment with a notebook of that name."""
    if hint is not None and split_edition(hint)[0] in ASSIGNMENTS:
        return ASSIGNMENTS[split_edition(hint)[0]]
    return next((a for a in ASSIGNMENTS.values() if notebook in a.notebooks), None)


# The default assignment's contract under the names the course build, the examples and the tests use.
ASSIGNMENT = DEFAULT.id
PARTS = DEFAULT.parts
GPU_PART = DEFAULT.gpu_part
MAX_SCORE = DEFAULT.max_score
NOTEBOOKS = DEFAULT.notebooks
API_NAMES = DEFAULT.api_names
PART_BY_ID = {p.id: p for p in DEFAULT.all_parts}
