"""Build an nbgrader course directory with a class of example submissions.

Used by `python -m autograder demo`, the benchmark (benchmarks/run.py) and the tests.
Submissions are derived, never hand-written: a student's notebook is the released
notebook with each solution cell filled in from the instructor's (source) notebook, then
one typical mistake applied as a text edit of the solution code (MISTAKES). An edit whose
text is no longer in the solutions raises, so that the examples cannot silently turn
into correct submissions when the solutions change.

    course = make_course(tmp)               # source/ copied, nbgrader_config.py, generate_assignment
    collect(course, {"ada": "correct", "bob": "no_scale"})
    course = make_course(tmp, assignments=("self_attention", "generation"))   # two assignments
    collect(course, {"ada": "correct", "bob": "top_left_decode"}, "generation")
    collect(course, {"ada": "correct", "bob": "top_left_flash"}, "efficient")  # (its course made with "efficient")
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autograder.foundation import spec  # noqa: E402
from autograder.foundation.spec import ASSIGNMENT  # noqa: E402

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
TIMESTAMP = "2026-11-30 09:00:00.000000 UTC"

# name -> (what the student got wrong, [(notebook, old text, new text), ...]).
# Special kinds (not text edits): "unfinished" keeps the released stubs of one notebook,
# "corrupt" truncates a notebook file, "missing" leaves a notebook out.
MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "no_scale": ("scores not divided by sqrt(d_k)",
                 [("01_scores", "Q @ K.transpose(-2, -1) / math.sqrt(d_k)", "Q @ K.transpose(-2, -1)")]),
    "softmax_dim": ("softmax over the query axis (dim=-2) in attention_weights",
                    [("01_scores", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")]),
    "seed_broadcast": ("the seed's [B,1,1,S] padding mask on 3-D scores (broadcasts to [B,B,S,S])",
                       [("02_masks", "keep = mask.reshape(B, *([1] * (scores.dim() - 2)), S_k)",
                         "keep = mask[:, None, None, :]")]),
    "mask_inverted": ("padding mask used the wrong way round in SelfAttention",
                      [("03_module", "scores.masked_fill(~mask[:, None, :]", "scores.masked_fill(mask[:, None, :]")]),
    "kpm_not_inverted": ("key_padding_mask passed without inverting it",
                         [("03_module", "key_padding_mask = None if mask is None else ~mask",
                           "key_padding_mask = None if mask is None else mask")]),
    "heads_view": ("split_heads views [B, H, S, hd] directly instead of [B, S, H, hd] + transpose",
                   [("04_multihead", "return x.transpose(1, 2)",
                     "return x.reshape(B, num_heads, S, head_dim)")]),
    "syntax_error": ("a syntax error in the masks notebook",
                     [("02_masks", "def causal_mask(", "def causal_mask(:")]),
    "unfinished": ("05_long_sequence left as released (stubs)", ["05_long_sequence"]),
    "missing": ("05_long_sequence not submitted", ["05_long_sequence"]),
    "corrupt": ("02_masks is not valid JSON (truncated file)", ["02_masks"]),
}

# The same for the second assignment, `generation`.
GENERATION_MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "sin_cos_swapped": ("cos on the even features of the sinusoidal encoding, sin on the odd ones",
                        [("01_positions", "pe[:, 0::2] = torch.sin(angle)", "pe[:, 0::2] = torch.cos(angle)"),
                         ("01_positions", "pe[:, 1::2] = torch.cos(angle)", "pe[:, 1::2] = torch.sin(angle)")]),
    "top_left_decode": ("decode_causal_mask aligned top-left (tril() of [S_q, S_k], like is_causal=True)",
                        [("02_kv_cache", ".tril(diagonal=offset)", ".tril()")]),
    "repeat_tiled": ("repeat_kv tiles the heads (kv0, kv1, kv0, kv1) instead of repeating each in place",
                     [("02_kv_cache", "x = x[:, :, None].expand(B, H_kv, n_rep, S, head_dim)",
                       "x = x[:, None].expand(B, n_rep, H_kv, S, head_dim)")]),
    "kv_from_x": ("cross-attention keys and values projected from x, not from the context",
                  [("03_cross_attention", "k = self.W_k(context).view(B, S_k, H, head_dim)",
                    "k = self.W_k(x).view(B, S_q, H, head_dim)"),
                   ("03_cross_attention", "v = self.W_v(context).view(B, S_k, H, head_dim)",
                    "v = self.W_v(x).view(B, S_q, H, head_dim)")]),
    "context_mask_inverted": ("the context padding mask used the wrong way round",
                              [("03_cross_attention", "masked_fill(~context_mask", "masked_fill(context_mask")]),
    "decoder_position_zero": ("DecoderAttention rotates the new tokens from position 0, whatever the cache holds "
                              "(a joint bug: RoPE and the cache each right alone)",
                              [("04_decoder", "start = 0 if cache is None else len(cache)", "start = 0")]),
    "unfinished": ("02_kv_cache left as released (stubs)", ["02_kv_cache"]),
    "missing": ("03_cross_attention not submitted", ["03_cross_attention"]),
}

# The same for the third assignment, `efficient`.
EFFICIENT_MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "no_rescaled_sum": ("flash_attention does not rescale the running sum when the running maximum grows",
                        [("01_flash", "row_sum = alpha * row_sum + p.sum(dim=-1)", "row_sum = row_sum + p.sum(dim=-1)")]),
    "top_left_flash": ("flash_attention's causal mask aligned top-left (no S_k - S_q offset)",
                       [("01_flash", "offset = S_k - S_q  #", "offset = 0  #")]),
    "backward_no_delta": ("flash_attention_backward leaves delta out: dS = P * dP",
                          [("05_flash_backward", "ds = p * (dp - delta[:, :, i0:i1, None])", "ds = p * dp")]),
    "window_reads_every_key": ("sliding_window_attention right, but each chunk reads every key before it (S^2 memory)",
                               [("02_sliding_window", "j0 = max(0, i0 - window + 1)", "j0 = 0")]),
    "phi_not_positive": ("elu_feature_map returns elu(x), without + 1",
                         [("03_linear", "return F.elu(x) + 1", "return F.elu(x)")]),
    "softcap_clamps": ("softcap_score_mod clamps the scores instead of tanh",
                       [("04_flex", "return cap * torch.tanh(score / cap)", "return score.clamp(-cap, cap)")]),
    "unfinished": ("03_linear left as released (stubs)", ["03_linear"]),
    "missing": ("04_flex not submitted", ["04_flex"]),
}
# The same for the fourth assignment, `real_models`.
REAL_MODELS_MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "c_attn_not_transposed": ("split_c_attn cuts GPT-2's Conv1D weight into columns without transposing them",
                              [("01_gpt2", "W_q, W_k, W_v = weight.T.chunk(3, dim=0)",
                                "W_q, W_k, W_v = weight.chunk(3, dim=1)")]),
    "gpt2_not_causal": ("GPT2StyleAttention attends to later tokens too",
                        [("01_gpt2", "allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()",
                          "allowed = torch.ones(S, S, dtype=torch.bool, device=x.device)")]),
    "bert_mask_inf": ("extended_attention_mask fills padding with -inf (a row of padding gives NaN)",
                      [("02_bert", "return (1.0 - keep) * torch.finfo(dtype).min",
                        'return torch.zeros_like(keep).masked_fill(keep == 0, float("-inf"))')]),
    "rope_wrong_way": ("interleaved_to_half_split does half_split_to_interleaved's reordering",
                       [("03_llama", "w = weight.view(num_heads, head_dim // 2, 2, d_in)",
                         "w = weight.view(num_heads, 2, head_dim // 2, d_in)")]),
    "llama_permutes_v": ("from_hf_llama permutes v_proj's rows too",
                         [("03_llama", "layer.W_v.weight.copy_(attn.v_proj.weight)",
                           "layer.W_v.weight.copy_(half_split_to_interleaved(attn.v_proj.weight, H_kv))")]),
    "iface_no_mask_function": ("register_course_attention registers course_attention alone, without the eager mask "
                               "function (it receives attention_mask=None on causal batches)",
                               [("04_interface", "    AttentionMaskInterface.register(name, eager_mask)\n", "")]),
    "iface_flex_mask": ("register_course_attention registers flex_attention_mask as the mask function (a BlockMask, "
                        "not a tensor)",
                        [("04_interface", "from transformers.masking_utils import eager_mask",
                          "from transformers.masking_utils import flex_attention_mask"),
                         ("04_interface", "AttentionMaskInterface.register(name, eager_mask)",
                          "AttentionMaskInterface.register(name, flex_attention_mask)")]),
    "unfinished": ("02_bert left as released (stubs)", ["02_bert"]),
    "missing": ("03_llama not submitted", ["03_llama"]),
}
# The same for the fifth assignment, `serving`.
SERVING_MISTAKES: dict[str, tuple[str, list]] = {
    "correct": ("the reference solution", []),
    "top_left_varlen": ("varlen_attention's causal mask aligned top-left (SDPA's is_causal=True habit)",
                        [("01_varlen", "allowed = allowed.tril(diagonal=S_k - S_q)", "allowed = allowed.tril(diagonal=0)")]),
    "reshape_swapped": ("reshape_and_cache swaps block and offset",
                        [("02_paged_cache", "slots[real] // block_size, slots[real] % block_size",
                          "slots[real] % block_size, slots[real] // block_size")]),
    "no_copy_on_write": ("reserve appends into a shared partly filled block (no copy-on-write)",
                         [("04_prefix_sharing",
                           "copy = num_new > 0 and start % bs != 0 and self.allocator.refcount(table[-1]) > 1",
                           "copy = False")]),
    "sample_first_token": ("the scheduler samples from a chunk's first token, not its last",
                           [("05_continuous_batching", "logits[int(cu[i + 1]) - 1].argmax()",
                             "logits[int(cu[i])].argmax()")]),
    "sinks_evicted": ("SinkKVCache keeps a pure window (the sinks are evicted)",
                      [("06_attention_sinks", "k_all[..., :self.num_sink, :], k_all[..., -self.window:, :]",
                        "k_all[..., -self.window - self.num_sink:-self.window, :], k_all[..., -self.window:, :]"),
                       ("06_attention_sinks", "v_all[..., :self.num_sink, :], v_all[..., -self.window:, :]",
                        "v_all[..., -self.window - self.num_sink:-self.window, :], v_all[..., -self.window:, :]")]),
    "unfinished": ("03_paged_attention left as released (stubs)", ["03_paged_attention"]),
    "missing": ("06_attention_sinks not submitted", ["06_attention_sinks"]),
}
MISTAKES_OF = {ASSIGNMENT: MISTAKES, "generation": GENERATION_MISTAKES, "efficient": EFFICIENT_MISTAKES,
               "real_models": REAL_MODELS_MISTAKES, "serving": SERVING_MISTAKES}
# The bundled example class of each assignment: examples/class/<file>, student id -> mistake.
CLASS_FILES = {ASSIGNMENT: "students.json", "generation": "generation.json", "efficient": "efficient.json",
               "real_models": "real_models.json", "serving": "serving.json"}


def repo_source(repo: Path = REPO, assignment: str = ASSIGNMENT) -> Path | None:
    """The course's instructor notebooks of `assignment`, when they have been built (python -m course.build)."""
    src = repo / "source" / assignment
    if all((src / f"{nb}.ipynb").exists() for nb in spec.assignment(assignment).notebooks):
        return src
    return None


# --------------------------------------------------------------------------- fallback source
def _cell(kind: str, source: str, nbgrader: dict | None = None, cid: str = "") -> dict:
    cell = {"cell_type": kind, "id": cid, "metadata": {}, "source": source}
    if nbgrader:
        cell["metadata"]["nbgrader"] = {"schema_version": 3, **nbgrader}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def fallback_source(dest: Path, assignment: str = ASSIGNMENT) -> Path:
    """Minimal instructor notebooks made from the reference solutions (when source/ is not built)."""
    dest.mkdir(parents=True, exist_ok=True)
    contract = spec.assignment(assignment)
    code = (REPO / (contract.solutions.replace(".", "/") + ".py")).read_text()
    tree = ast.parse(code)
    defs = {n.name: ast.get_source_segment(code, n) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for nb_name in contract.notebooks:
        cells = [_cell("markdown", f"# {nb_name}", cid="title"),
                 _cell("code", "import math\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
                       {"grade": False, "solution": False, "locked": True, "grade_id": "setup"}, "setup")]
        for part in contract.parts_of(nb_name):
            for name in part.names:
                # a notebook stands alone: the other top-level definitions this one calls come in its cell
                called = {n.id for n in ast.walk(ast.parse(defs[name])) if isinstance(n, ast.Name)}
                pieces = [defs[n] for n in defs if n in called and n != name and n not in part.names]
                cells.append(_cell("code", BEGIN + "\n" + "\n\n\n".join([*pieces, defs[name]]) + f"\n{END}",
                                   {"grade": False, "solution": True, "locked": False, "grade_id": f"sol_{name}"},
                                   f"sol-{name}".replace("_", "-")))
            check = "\n".join(f"assert callable({n}), 'define {n}'" for n in part.names)
            cells.append(_cell("code", check, {"grade": True, "solution": False, "locked": True,
                                               "grade_id": part.id, "points": part.points},
                               part.id.replace("_", "-")))
        nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                          "name": "python3"}, "language_info": {"name": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        (dest / f"{nb_name}.ipynb").write_text(json.dumps(nb, indent=1))
    return dest


# --------------------------------------------------------------------------- course
def nbgrader_env() -> dict[str, str]:
    """The environment of an nbgrader command on a course of this project: this environment's Python and
    `alembic` first, the repository importable, and no personal or system Jupyter configuration
    (JUPYTER_NO_CONFIG): a ~/.jupyter/nbgrader_config.py that names another course root, gradebook or
    exchange (nbgrader's usual hub setup) must not redirect the project's own courses."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),  # alembic
                JUPYTER_NO_CONFIG="1")


def nbgrader_command(course: Path, *args: str) -> list[str]:
    """`python -m nbgrader ARGS` pinned to the course directory `course` (the command line wins over any
    configuration file); run it with cwd=course and nbgrader_env(), so that the course's own
    nbgrader_config.py is the only one read."""
    return [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={Path(course).resolve()}"]


def nbgrader(course: Path, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course directory with this environment's Python (nbgrader_command)."""
    proc = subprocess.run(nbgrader_command(course, *args), cwd=course, env=nbgrader_env(), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return proc


def course_config(course: Path, plugin: bool = True) -> str:
    """nbgrader_config.py of a course directory: the repository's settings; nothing that names `course`
    itself (the course is where nbgrader runs, the gradebook its gradebook.db), so it can be copied."""
    lines = [f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"]
    repo_cfg = REPO / "nbgrader_config.py"
    if repo_cfg.exists():
        text = repo_cfg.read_text()
        # the repository's own config may enable the plugin itself; we decide here
        text = "\n".join(line for line in text.splitlines()
                         if "nbgrader_plugin" not in line and "_configure_autograder" not in line)
        lines.append(text)
    else:
        lines.append("c = get_config()\nc.CourseDirectory.course_id = 'self_attention_course'\n")
    # No root and no db_url: nbgrader takes the directory it runs in, and its gradebook.db there, so a
    # copy of the course grades into its own gradebook (an absolute path here would be the original's).
    lines.append("c.CourseDirectory.source_directory = 'source'")
    lines.append("c.CourseDirectory.release_directory = 'release'")
    if plugin:
        lines.append("from autograder.nbgrader_plugin import configure\nconfigure(c)")
    return "\n".join(lines) + "\n"


def make_course(course: Path, source: Path | None = None, plugin: bool = True,
                assignments: tuple[str, ...] = (ASSIGNMENT,)) -> Path:
    """A course directory: source/ of each assignment (the repository's, or a fallback; `source`: the first
    one's instead), config, release, gradebook."""
    course = Path(course)
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(course_config(course, plugin))
    for index, assignment in enumerate(assignments):
        src = (source if index == 0 else None) or repo_source(assignment=assignment)
        dest = course / "source" / assignment
        if src is None:
            fallback_source(dest, assignment)
        else:
            shutil.copytree(src, dest, dirs_exist_ok=True)
        nbgrader(course, "generate_assignment", assignment, "--force")
    return course


def _strip_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.strip() not in (BEGIN, END))


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def solved(course: Path, nb_name: str, assignment: str = ASSIGNMENT) -> dict:
    """The released notebook with every code solution cell filled in from the source notebook (a written answer
    stays as released: its source holds the model answer and the rubric, which no student ever sees)."""
    release = json.loads((course / "release" / assignment / f"{nb_name}.ipynb").read_text())
    source = json.loads((course / "source" / assignment / f"{nb_name}.ipynb").read_text())
    answers = {c["metadata"]["nbgrader"]["grade_id"]: _strip_markers(_src(c)) for c in source["cells"]
               if (c.get("metadata") or {}).get("nbgrader", {}).get("solution") and c.get("cell_type") == "code"}
    for cell in release["cells"]:
        meta = (cell.get("metadata") or {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
    return release


def student_notebooks(course: Path, mistake: str, assignment: str = ASSIGNMENT) -> dict[str, str | None]:
    """notebook name -> file text (None: not submitted) for a student of `assignment` making `mistake`."""
    _, edits = MISTAKES_OF[spec.split_edition(assignment)[0]][mistake]  # (an edition: its assignment's mistakes)
    out: dict[str, str | None] = {}
    for nb_name in spec.assignment(assignment).notebooks:
        nb = solved(course, nb_name, assignment)
        for edit in edits:
            if isinstance(edit, tuple) and edit[0] == nb_name:
                _, old, new = edit
                hits = 0
                for cell in nb["cells"]:
                    if (cell.get("metadata") or {}).get("nbgrader", {}).get("solution") and old in _src(cell):
                        cell["source"] = _src(cell).replace(old, new)
                        hits += 1
                if not hits:
                    raise ValueError(f"mistake {mistake!r}: {old!r} is not in the solution cells of {nb_name}")
        text = json.dumps(nb, indent=1)
        if nb_name in [e for e in edits if isinstance(e, str)]:
            if mistake == "unfinished":
                text = (course / "release" / assignment / f"{nb_name}.ipynb").read_text()
            elif mistake == "missing":
                text = None
            elif mistake == "corrupt":
                text = text[: len(text) // 2]
        out[nb_name] = text
    return out


def own_file(text: str, student: str) -> str:
    """A student's notebook as their own file: the student named in its metadata, as a real student's notebook
    differs from the next one's (its outputs, execution counts, kernel): byte for byte the same notebook as
    another student's is refused as a copy (autograder/foundation/copies.py). Text that is no notebook is kept."""
    try:
        nb = json.loads(text)
    except ValueError:
        return text
    if not isinstance(nb, dict) or not isinstance(nb.get("metadata"), dict):
        return text
    nb["metadata"]["example"] = {"student": student}
    return json.dumps(nb, indent=1)


def collect(course: Path, students: dict[str, str], assignment: str = ASSIGNMENT) -> list[str]:
    """Write submitted/<student>/<assignment>/ for each student -> mistake name (each notebook the student's own
    file: own_file)."""
    made = []
    for student, mistake in students.items():
        folder = Path(course) / "submitted" / student / assignment
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for nb_name, text in student_notebooks(Path(course), mistake, assignment).items():
            if text is not None:
                (folder / f"{nb_name}.ipynb").write_text(own_file(text, student))
        (folder / "timestamp.txt").write_text(TIMESTAMP)
        made.append(student)
    return made


# The bundled example class of an assignment (examples/class/students.json, generation.json, efficient.json,
# real_models.json):
# student id -> mistake.
def example_class(assignment: str = ASSIGNMENT) -> dict[str, str]:
    return json.loads((Path(__file__).resolve().parent / "class" / CLASS_FILES[spec.split_edition(assignment)[0]]).read_text())


def synthetic_class(n: int) -> dict[str, str]:
    """n students cycling through the mistakes, about a third of them correct."""
    kinds = list(MISTAKES)
    out = {}
    for i in range(n):
        kind = "correct" if i % 3 == 0 else kinds[1 + (i // 3 * 2 + i % 3 - 1) % (len(kinds) - 1)]
        out[f"student{i:02d}"] = kind
    return out


# --------------------------------------------------------------------------- written answers
# What the demo's instructor writes when grading a written answer by hand (the comment), by credit and language.
WRITTEN_COMMENTS = {
    "en": {1.0: "Clear and complete: the explanation matches what the notebook printed.",
           0.5: "Half credit: the observation is right, but the reason behind it is missing."},
    "zh": {1.0: "清楚完整：解释与 notebook 打印的结果一致。",
           0.5: "给一半分：现象说对了，但没有讲清背后的原因。"},
}


def write_written_answers(course: Path, students: dict[str, str], assignment: str = ASSIGNMENT) -> dict:
    """Give the collected example class written answers: the first student a good answer to every written
    question, the second a partial one (its first sentence), the others none (left as released). Returns what
    an instructor then gives each: {(student, notebook, grade_id): (points, comment)} (none for an empty answer)."""
    from course.cells import flow  # noqa: PLC0415 - the course's own texts
    from course.content.written import QUESTIONS  # noqa: PLC0415

    lang = spec.split_edition(assignment)[1] or spec.DEFAULT_LANGUAGE
    pick = 0 if lang == spec.DEFAULT_LANGUAGE else 1
    credit = dict(zip(students, (1.0, 0.5)))
    marks = {}
    for student, fraction in credit.items():
        for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
            nb = json.loads(path.read_text(encoding="utf-8"))
            for cell in nb["cells"]:
                meta = (cell.get("metadata") or {}).get("nbgrader") or {}
                question = QUESTIONS.get(meta.get("grade_id"))
                if question is None or cell.get("cell_type") != "markdown":
                    continue
                text = flow(question.answer[pick], lang)
                stop = "。" if pick else ". "
                cell["source"] = text if fraction == 1.0 else text.split(stop)[0] + stop.strip()
                marks[(student, path.stem, question.grade_id)] = (question.points * fraction,
                                                                  WRITTEN_COMMENTS[lang][fraction])
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return marks
