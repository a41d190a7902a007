"""Stage 5: the report. Formats a GradeResult for people: rich tables (document.py writes the JSON)."""
from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..foundation import i18n
from ..foundation.results import GradeResult, PartResult

_ = i18n.message


def _fmt(x: float) -> str:
    return f"{x:.4g}" if x != int(x) else str(int(x))


def part_table(part: PartResult, lang: str = "en") -> Table:
    status = _("not run").render(lang) if not part.ran else f"{_fmt(part.score)} / {_fmt(part.max_score)}"
    table = Table(title=f"{part.id}  [bold]{status}[/bold]", title_justify="left", box=box.SIMPLE_HEAD,
                  show_lines=False, expand=True)
    table.add_column("", width=2, no_wrap=True)
    table.add_column(_("check").render(lang), ratio=2)
    table.add_column(_("points").render(lang), justify="right", no_wrap=True)
    table.add_column(_("what is wrong").render(lang), ratio=3)
    for c in part.checks:
        mark = Text("✓", style="green") if c.passed else Text("✗", style="red")
        table.add_row(mark, Text(i18n.check_title(c.name, lang), overflow="fold"),
                      f"{_fmt(round(c.points, 2))}/{_fmt(round(c.max_points, 2))}", Text(c.message, overflow="fold"))
    for note in part.notes:  # in the widest column: a long name (register_course_attention) is not cut mid-word
        table.add_row(Text("!", style="yellow"), "", "", Text(note, style="yellow", overflow="fold"))
    return table


def render(result: GradeResult, console: Console | None = None) -> None:
    """The report in the result's language (its messages were written in it; the headings follow)."""
    console = console or Console()
    lang = result.lang
    shown = result.shown
    score = _("score {score} / {max_score}").format(score=_fmt(round(sum(p.score for p in shown), 4)),
                                                    max_score=_fmt(sum(p.max_score for p in shown)))
    console.print(Panel(Text(f"{result.submission}\n{score.render(lang)}", style="bold"),
                        title=_("self-attention autograder").render(lang), expand=False))
    if result.protections_off:
        console.print(Panel(Text("\n".join(result.protections_off)), title="SANDBOX PROTECTIONS OFF on this machine",
                            style="bold red", expand=False))
    for part in shown + ((result.gpu,) if result.gpu else ()):
        console.print(part_table(part, lang))
    if result.notes:
        console.print(Panel(Group(*[Text(f"• {n}") for n in result.notes]), title=_("notes").render(lang),
                            expand=False))


def summary_table(rows: list[GradeResult], title: str = "class") -> Table:
    """One row per submission, one column per part: the instructor's overview."""
    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("submission")
    if rows:
        for part in rows[0].parts:
            table.add_column(part.id, justify="right")
    table.add_column("score", justify="right", style="bold")
    for r in rows:
        table.add_row(Text(r.submission), *[_fmt(round(p.score, 2)) for p in r.parts], _fmt(round(r.score, 2)))
    return table


def failing_messages(part: PartResult, most: int = 2) -> list[str]:
    """What a part's failing checks say, each distinct message once, at most `most` (then how many more)."""
    messages = list(dict.fromkeys(c.message or c.name for c in part.checks if not c.passed))
    shown = messages[:most]
    return shown + ([f"(+{len(messages) - most})"] if len(messages) > most else [])


def brief(result: GradeResult, console: Console | None = None, hide: tuple[str, ...] = ()) -> None:
    """One table for a student's screen: a row per part (its score, what its failing checks say) and the total;
    notes that name a file in `hide` (the release's own files next to the notebooks) are left out."""
    console = console or Console()
    lang = result.lang
    table = Table(title=result.submission, title_justify="left", box=box.SIMPLE_HEAD, expand=True)
    table.add_column(_("part").render(lang), no_wrap=True)
    table.add_column(_("points").render(lang), justify="right", no_wrap=True)
    table.add_column(_("what is wrong").render(lang), ratio=1)
    for part in result.parts:
        mark = "✓ " if part.passed else "✗ "
        table.add_row(Text(mark + part.id, style="green" if part.passed else "red"),
                      f"{_fmt(round(part.score, 2))}/{_fmt(part.max_score)}",
                      Text("\n".join(failing_messages(part)), overflow="fold"))
    table.add_section()
    table.add_row(Text(_("total").render(lang), style="bold"),
                  Text(f"{_fmt(round(result.score, 2))}/{_fmt(result.max_score)}", style="bold"), "")
    console.print(table)
    if result.protections_off:
        console.print(Text("SANDBOX PROTECTIONS OFF on this machine: " + "; ".join(result.protections_off),
                           style="bold red"))
    for note in result.notes:
        if not any(name in note for name in hide):
            console.print(Text(f"! {note}", style="yellow"))
