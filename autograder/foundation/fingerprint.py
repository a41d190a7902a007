"""What a code cell says, set apart from how it is written: its Python tokens without comments or spacing, and with
the names its author chose made one name, as MOSS and copydetect compare programs (copies.py compares the students'
notebooks by these). Only the standard library's `tokenize`: nothing here runs the code.

A cell's fingerprints are the hashes of its runs of K tokens. Solution cells are short (tens to a few hundred
tokens), so every run is kept (winnowing would keep one in a window: it saves nothing here). The names kept as they
are: Python's keywords and builtins, the names the released notebook gives (torch, F, the functions and arguments of
its stubs, ...) and an attribute of anything but `self` (`x.transpose`, `torch.ones(...).tril`: the library's, not
the student's). A string is one token whatever it says (a docstring reworded is still the same code).
"""
from __future__ import annotations

import builtins
import functools
import io
import keyword
import tokenize
import zlib
from dataclasses import dataclass

K = 5  # tokens in a fingerprint (copydetect's default noise threshold, in tokens)
# A cell of fewer fingerprints (less what the release gave) never makes a pair: every one-line solution of the four
# assignments' reference has at most 21, every two-line one at least 30 (tests/test_copies.py measures it), and two
# students who write the same line have not copied. Two notebooks are alike when ALIKE of the smaller one's
# fingerprints are the other's (independent solutions share at most half: tests/test_copies.py), or when one cell of at
# least BIG_CELL fingerprints is alike one of the other's.
MIN_CELL, BIG_CELL, ALIKE = 25, 100, 0.75
LOCAL, STRING = "V", "S"  # what every name the student chose, and every string, becomes
SKIPPED = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER})
KNOWN = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


@dataclass(frozen=True)
class CellPrints:
    """One solution cell of a notebook: its number (its place among all the notebook's cells, as the student counts),
    its normalized tokens and its fingerprints less those of the released notebook (the stubs everyone was given)."""
    number: int
    tokens: tuple[str, ...]
    prints: frozenset[int]
    bits: int = 0  # `prints` as bits (bits_of): what comparisons count


@dataclass(frozen=True)
class Likeness:
    """How much of a notebook another student's says too: `student`, the share of the smaller notebook's fingerprints
    the other holds (0..1, both notebooks' cells that can make a pair), and the pairs of cells (this notebook's cell
    number, theirs) that are alike."""
    student: str
    similarity: float
    cells: tuple[tuple[int, int], ...]


def raw_tokens(code: str) -> list[tokenize.TokenInfo]:
    """The tokens of `code` up to where it stops being Python (a cell that does not parse still has its tokens)."""
    out: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            out.append(token)
    except (tokenize.TokenError, SyntaxError):  # (IndentationError is a SyntaxError)
        pass
    return out


def names_in(cells: tuple[str, ...]) -> frozenset[str]:
    """Every name the cells `cells` (the released notebook's) use: these stay as they are."""
    return frozenset(t.string for code in cells for t in raw_tokens(code) if t.type == tokenize.NAME)


def normalized(code: str, given: frozenset[str]) -> tuple[str, ...]:
    """The tokens of `code` without comments or spacing, every name not in `given` nor Python's own (nor an
    attribute of anything but `self`) made LOCAL, every string STRING."""
    out: list[str] = []
    for token in raw_tokens(code):
        if token.type in SKIPPED:
            continue
        if token.type == tokenize.NAME:
            attribute = len(out) >= 2 and out[-1] == "." and out[-2] != "self"
            out.append(token.string if attribute or token.string in KNOWN or token.string in given else LOCAL)
        elif token.type == tokenize.STRING:
            out.append(STRING)
        else:
            out.append(token.string if token.type != tokenize.NEWLINE else "\n")
    return tuple(out)


def prints_of(tokens: tuple[str, ...]) -> frozenset[int]:
    """The hashes of every run of K tokens of `tokens` (of all of them when there are fewer)."""
    runs = [tokens[i:i + K] for i in range(max(len(tokens) - K + 1, 1))] if tokens else []
    return frozenset(zlib.crc32("\x00".join(run).encode("utf-8")) for run in runs)


@dataclass(frozen=True)
class Base:
    """What every student was given, set aside: the released notebook's names (kept as they are) and fingerprints
    (no cell's own)."""
    given: frozenset[str]
    prints: frozenset[int]


def base_of(released: tuple[str, ...]) -> Base:
    """The Base of the released notebook whose solution cells are `released`."""
    given = names_in(released)
    return Base(given, frozenset().union(*(prints_of(normalized(code, given)) for code in released)))


@dataclass(frozen=True)
class NotebookPrints:
    """A notebook's solution cells that can make a pair (at least MIN_CELL fingerprints of their own) and all their
    fingerprints together."""
    cells: tuple[CellPrints, ...]
    prints: frozenset[int]
    bits: int = 0


# Each fingerprint's bit, per released notebook (what its students' notebooks are compared under): a set of
# fingerprints as an int, whose `&` and bit_count() compare two notebooks in about a microsecond (a frozenset's `&`
# builds a set: tens of microseconds, and a class of 200 makes 40,000 comparisons per notebook). A memo like the
# caches of copies.py: the bits are numbered in the order first seen, and no count depends on that order.
@functools.cache  # (never evicted: a notebook's bits and another's must be numbered alike; one per release)
def bit_numbers(base: Base) -> dict[int, int]:
    """The numbering of the fingerprints of the notebooks released as `base` (filled in as they come)."""
    return {}


def bits_of(prints: frozenset[int], base: Base) -> int:
    """The fingerprints `prints` (of a notebook released as `base`) as an int with their bits set."""
    bit = bit_numbers(base)
    positions = [bit.setdefault(p, len(bit)) for p in prints]
    if not positions:
        return 0
    out = bytearray(max(positions) // 8 + 1)
    for n in positions:
        out[n >> 3] |= 1 << (n & 7)
    return int.from_bytes(out, "little")


def cell_prints(cells: tuple[str, ...], numbers: tuple[int, ...], base: Base) -> tuple[CellPrints, ...]:
    """Each of `cells` (numbered `numbers`) as CellPrints, less what the release gave (`base`)."""
    out = []
    for index, code in enumerate(cells):
        tokens = normalized(code, base.given)
        own = prints_of(tokens) - base.prints
        out.append(CellPrints(numbers[index] if index < len(numbers) else index + 1, tokens, own, bits_of(own, base)))
    return tuple(out)


def notebook_prints(cells: tuple[CellPrints, ...]) -> NotebookPrints:
    """The NotebookPrints of a notebook's solution cells `cells`."""
    kept = tuple(c for c in cells if len(c.prints) >= MIN_CELL)
    bits = 0
    for c in kept:
        bits |= c.bits
    return NotebookPrints(kept, frozenset().union(*(c.prints for c in kept)), bits)


def alike(a: CellPrints, b: CellPrints) -> bool:
    """Whether the smaller of two cells shares at least ALIKE of its fingerprints with the other."""
    return (a.bits & b.bits).bit_count() >= ALIKE * min(len(a.prints), len(b.prints))


def likeness(student: str, mine: NotebookPrints, theirs: NotebookPrints) -> Likeness | None:
    """How much of `mine` the notebook `theirs` (another student's, `student`) says too; None unless ALIKE of the
    smaller notebook's fingerprints are the other's (and at least MIN_CELL of them), or a cell of at least BIG_CELL is
    alike one of theirs (a copied cell among one's own). Cheap when they share little (most pairs of a class)."""
    shared = (mine.bits & theirs.bits).bit_count()
    share = shared / max(min(len(mine.prints), len(theirs.prints)), 1)
    if share < ALIKE or shared < MIN_CELL:  # (then only a big cell alike one of theirs makes them alike)
        big = [a for a in mine.cells if len(a.prints) >= BIG_CELL  # (one that can share enough with any of theirs)
               and (a.bits & theirs.bits).bit_count() >= ALIKE * BIG_CELL]
        if not any(alike(a, b) for a in big for b in theirs.cells if len(b.prints) >= BIG_CELL):
            return None
    pairs = tuple((a.number, b.number) for a in mine.cells for b in theirs.cells if alike(a, b))
    return Likeness(student, round(share, 3), pairs)
