"""The class report as one self-contained HTML page: COURSE/autograder_reports/<assignment>/class_report.html.

grade-class (and the demo) write it after grading, from classreport.ClassReport: the score distribution of
each part (an SVG picture drawn here, inline as base64: the page needs no network and no other file), the
most common failing checks with how many students and the mistake they name, the students below the
threshold, and a link to each student's report (the JSON grade-class wrote; nbgrader's HTML feedback when
`generate_feedback` made it). The headings are in the edition's language (the catalog); the students'
messages are in the language they were graded in; the picture holds only part ids and numbers.
"""
from __future__ import annotations

import base64
import dataclasses
import html
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

from ..foundation import edition, i18n
from .classreport import DEFAULT_THRESHOLD, ClassReport, PartScores, summarize
from .gradebook import course_directories
from .resume import atomic_write

_ = i18n.message
FILE_NAME = "class_report.html"
# The page's headings, in the edition's language (the catalog: make messages).
HEADINGS = {
    "part": _("part"),
    "points": _("points"),
    "mean": _("mean"),
    "full marks": _("full marks"),
    "zero": _("zero"),
    "students": _("students"),
    "check": _("check"),
    "who": _("who"),
    "what is wrong": _("what is wrong"),
    "every check passed for every student": _("every check passed for every student"),
    "nobody": _("nobody"),
    "student": _("student"),
    "score": _("score"),
    "lost most in": _("lost most in"),
    "total": _("total"),
    "reports": _("reports"),
    "score distribution per part": _("score distribution per part"),
    "most common failing checks": _("most common failing checks"),
    "every student": _("every student"),
    "to review": _("to review by hand: code that mentions a function its part may not call, and notebooks much the "
                   "same code as another student's"),
    "review why": _("these parts kept their points: the grader's watch did not see the calls they mention (it runs "
                    "next to the student's code, which can switch it off: docs/security.md), and two students can "
                    "write alike code without copying (the cells named are the ones to compare); read the code"),
    "why": _("why"),
    "nothing to review": _("no part mentions a function it may not call, and no notebook is much the same code as "
                           "another student's"),
    "written": _("written (by hand)"),
    "to grade": _("to grade"),
}
BINS = 10
# The page runs no script and loads nothing: its picture is inline, its links are relative (relative_href).
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

STYLE = """
body { font-family: system-ui, "Noto Sans CJK SC", "WenQuanYi Micro Hei", sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ddd; padding: .3em .6em;
vertical-align: top; text-align: left; } th { background: #f4f4f4; } td.num { text-align: right; }
img { max-width: 100%; } .low { color: #b00; } .muted { color: #777; }
"""


def heading_in(lang: str):
    """t(key) -> the heading `key` in `lang`, escaped for HTML."""
    return lambda key: esc(HEADINGS[key].render(lang))


def esc(text: object) -> str:
    return html.escape(str(text))


def fmt(x: float) -> str:
    return f"{x:.4g}" if x != int(x) else str(int(x))


PANEL_W, PANEL_H, COLUMNS = 300, 190, 4  # one histogram's box in the picture (px), panels per row
PLOT_X, PLOT_Y, PLOT_W, PLOT_H = 34, 28, 252, 130  # its plotting area inside the box


def histogram(scores, top: float) -> list[int]:
    """Students per bin: BINS equal bins from 0 to `top`, a score of `top` in the last one."""
    counts = [0] * BINS
    for score in scores:
        counts[min(max(int(score / (top or 1) * BINS), 0), BINS - 1)] += 1
    return counts


def panel_svg(name: str, top: float, scores, x0: int, y0: int, colour: str) -> str:
    """One histogram as SVG elements at (x0, y0): its title, bars, axes, and ticks at 0, the middle and `top`."""
    counts = histogram(scores, top)
    most = max(counts) or 1
    bar_w = PLOT_W / BINS
    left, base = x0 + PLOT_X, y0 + PLOT_Y + PLOT_H
    bars = "".join(f'<rect x="{left + i * bar_w:.1f}" y="{base - n / most * PLOT_H:.1f}" width="{bar_w - 1:.1f}" '
                   f'height="{n / most * PLOT_H:.1f}" fill="{colour}"/>' for i, n in enumerate(counts) if n)
    ticks = "".join(f'<text x="{left + f * PLOT_W:.1f}" y="{base + 14}" text-anchor="middle">{fmt(top * f)}</text>'
                    for f in (0, 0.5, 1))
    counts_axis = (f'<text x="{left - 4}" y="{base}" text-anchor="end">0</text>'
                   f'<text x="{left - 4}" y="{base - PLOT_H + 4}" text-anchor="end">{most}</text>')
    axes = f'<path d="M{left} {base - PLOT_H}V{base}H{left + PLOT_W}" stroke="#555" fill="none"/>'
    title = (f'<text x="{left + PLOT_W / 2:.1f}" y="{y0 + 18}" text-anchor="middle" font-size="13">'
             f'{esc(name)} (/{fmt(top)})</text>')
    return title + bars + axes + ticks + counts_axis


def distribution_svg(parts: tuple[PartScores, ...], totals: list[float], max_score: float) -> str:
    """One histogram per part (score from 0 to its points, students per bin) and one of the totals, as an SVG
    document (drawn here: no plotting library to import for one picture)."""
    panels = [(p.id, p.max_score, p.scores) for p in parts] + [("total", max_score, tuple(totals))]
    rows = -(-len(panels) // COLUMNS)
    body = "".join(panel_svg(name, top, scores, (i % COLUMNS) * PANEL_W, (i // COLUMNS) * PANEL_H,
                             "#c0392b" if name == "total" else "#2e86c1")
                   for i, (name, top, scores) in enumerate(panels))
    width, height = COLUMNS * PANEL_W, rows * PANEL_H
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" fill="#222">'
            f'<rect width="{width}" height="{height}" fill="white"/>{body}</svg>')


def picture(report: ClassReport) -> str:
    svg = distribution_svg(report.parts, [s.score for s in report.students], report.max_score)
    alt = heading_in(report.lang)("score distribution per part")
    return f'<img id="distribution" alt="{alt}" src="data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}">'


def parts_table(report: ClassReport) -> str:
    t = heading_in(report.lang)
    head = (f"<tr><th>{t('part')}</th><th>{t('points')}</th><th>{t('mean')}</th><th>{t('full marks')}</th>"
            f"<th>{t('zero')}</th></tr>")
    rows = "".join(f"<tr><td>{esc(p.id)}</td><td class=num>{fmt(p.max_score)}</td><td class=num>{p.mean:.1f}</td>"
                   f"<td class=num>{p.full_marks}</td><td class=num>{p.zero}</td></tr>" for p in report.parts)
    return f"<table id=parts>{head}{rows}</table>"


def failures_table(report: ClassReport) -> str:
    lang = report.lang
    t = heading_in(lang)
    if not report.common_failures:
        return f"<p>{t('every check passed for every student')}</p>"
    head = (f"<tr><th>{t('students')}</th><th>{t('part')}</th><th>{t('what is wrong')}</th><th>{t('check')}</th>"
            f"<th>{t('who')}</th></tr>")
    rows = []
    for f in report.common_failures:
        more = ("<br><span class=muted>" + esc(_("and {count} other checks").format(count=len(f.checks) - 1).render(lang))
                + "</span>") if len(f.checks) > 1 else ""
        rows.append(f"<tr><td class=num>{f.count}</td><td>{esc(f.part)}</td><td>{esc(f.message)}</td>"
                    f"<td>{esc(i18n.check_title(f.checks[0], lang))}{more}</td><td>{esc(', '.join(f.students))}</td></tr>")
    return f"<table id=failures>{head}{''.join(rows)}</table>"


def below_table(report: ClassReport, links: dict[str, list[tuple[str, str]]]) -> str:
    lang = report.lang
    t = heading_in(lang)
    below = report.below_threshold
    if not below:
        return f"<p>{t('nobody')}</p>"
    head = f"<tr><th>{t('student')}</th><th>{t('score')}</th><th>{t('lost most in')}</th></tr>"
    rows = "".join(f"<tr><td class=low>{student_link(s.id, links)}</td><td class=num>{fmt(s.score)} / "
                   f"{fmt(s.max_score)}</td><td>{esc(', '.join(s.weakest))}</td></tr>" for s in below)
    return f"<table id=below>{head}{rows}</table>"


def student_link(student: str, links: dict[str, list[tuple[str, str]]]) -> str:
    found = links.get(student) or []
    return f'<a href="{esc(found[0][1])}">{esc(student)}</a>' if found else esc(student)


def students_table(report: ClassReport, links: dict[str, list[tuple[str, str]]]) -> str:
    t = heading_in(report.lang)
    written = bool(report.written_max)  # the written answers' own column, outside the autograded total
    head = (f"<tr><th>{t('student')}</th>" + "".join(f"<th>{esc(p.id)}</th>" for p in report.parts)
            + f"<th>{t('total')}</th>" + (f"<th>{t('written')}</th>" if written else "") + f"<th>{t('reports')}</th></tr>")
    rows = []
    for index, s in enumerate(report.students):
        cells = "".join(f"<td class=num>{fmt(round(p.scores[index], 2))}</td>" for p in report.parts)
        reports = " ".join(f'<a href="{esc(href)}">{esc(label)}</a>' for label, href in links.get(s.id, []))
        low = " class=low" if s.fraction < report.threshold else ""
        by_hand = ""
        if written:
            points = report.written.get(s.id)
            shown = t("to grade") if points is None else f"{fmt(round(points, 2))} / {fmt(report.written_max)}"
            by_hand = f"<td class=num>{shown}</td>"
        rows.append(f"<tr><td{low}>{esc(s.id)}</td>{cells}<td class=num><b>{fmt(round(s.score, 2))}</b></td>"
                    f"{by_hand}<td>{reports}</td></tr>")
    return f"<table id=students>{head}{''.join(rows)}</table>"


def review_table(report: ClassReport, links: dict[str, list[tuple[str, str]]]) -> str:
    """The parts flagged for review (classreport.ReviewFlag): who, which part, why, its points."""
    t = heading_in(report.lang)
    if not report.review:
        return f"<p>{t('nothing to review')}</p>"
    head = (f"<tr><th>{t('student')}</th><th>{t('part')}</th><th>{t('why')}</th><th>{t('score')}</th>"
            "</tr>")
    rows = "".join(f"<tr><td>{student_link(f.student, links)}</td><td>{esc(f.part)}</td>"
                   f"<td>{esc('; '.join(f.why))}</td><td class=num>{fmt(round(f.score, 2))}</td></tr>"
                   for f in report.review)
    return f"<p class=muted>{t('review why')}</p><table id=review>{head}{rows}</table>"


def page(report: ClassReport, links: dict[str, list[tuple[str, str]]]) -> str:
    """The whole page. `links`: student -> [(label, relative href), ...] of their reports."""
    lang = report.lang
    t = heading_in(lang)
    title = esc(_("class report: {assignment}").format(assignment=report.assignment).render(lang))
    summary = esc(_("{count} students, mean {mean} / {max_score}").format(
        count=len(report.students), mean=f"{report.mean:.1f}", max_score=fmt(report.max_score)).render(lang))
    threshold = esc(_("students below {percent}% of the points").format(
        percent=fmt(round(report.threshold * 100, 1))).render(lang))
    html_lang = "zh-CN" if lang == "zh" else lang
    return (f'<!DOCTYPE html>\n<html lang="{html_lang}"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}"><title>{title}</title>'
            f"<style>{STYLE}</style></head><body>\n<h1>{title}</h1><p>{summary}</p>\n"
            f"<h2>{t('score distribution per part')}</h2>{picture(report)}{parts_table(report)}\n"
            f"<h2>{t('most common failing checks')}</h2>{failures_table(report)}\n"
            f"<h2>{threshold}</h2>{below_table(report, links)}\n"
            f"<h2>{t('to review')}</h2>{review_table(report, links)}\n"
            f"<h2>{t('every student')}</h2>{students_table(report, links)}\n</body></html>\n")


def relative_href(*segments: str) -> str:
    """A link relative to the page from path segments (a student's folder name among them): each one
    percent-quoted whole, so that no name can make the link absolute or give it a scheme
    (`javascript:alert(1)` becomes `javascript%3Aalert%281%29`), a query or a fragment."""
    return "/".join(segment if segment == ".." else quote(segment, safe="") for segment in segments)


class _Head(HTMLParser):
    """The elements of a page up to its first Content-Security-Policy (CSP) meta, and that policy; and whether any
    meta of the page asks the browser to go elsewhere (http-equiv refresh)."""

    def __init__(self):
        super().__init__()
        self.before: list[str] = []
        self.policy: str | None = None
        self.refresh = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        equiv = (attrs.get("http-equiv") or "").lower() if tag == "meta" else ""
        self.refresh = self.refresh or equiv == "refresh"
        if self.policy is None:
            if equiv == "content-security-policy":
                self.policy = attrs.get("content") or ""
            else:
                self.before.append("meta charset" if tag == "meta" and "charset" in attrs else tag)


def forbids_scripts(page: str) -> bool:
    """Does the page forbid every script before it could run one: a CSP with default-src and script-src 'none'
    with nothing but <html>, <head> and the charset before it (what feedbackpage.py writes), and no meta refresh
    that would send the reader to another page?"""
    head = _Head()
    head.feed(page[:65536])
    policy = {d.strip().split(" ", 1)[0]: d.strip() for d in (head.policy or "").split(";")}
    return (set(head.before) <= {"html", "head", "meta charset"} and policy.get("script-src") == "script-src 'none'"
            and policy.get("default-src") == "default-src 'none'" and not head.refresh)


def feedback_pages(folder: Path, notebooks, autograded: Path) -> list[Path]:
    """nbgrader's feedback pages of a student (`folder`): `<notebook>.html` for the assignment's notebooks that
    were autograded (`autograded/<notebook>.ipynb` exists: generate_feedback made the page from it), and only
    those that forbid scripts. A student's own notes.html, or a 02_masks.html in place of a notebook not submitted
    (the course's nbgrader_config.py keeps nbgrader from copying a student's HTML: nbgrader_plugin.configure), is
    never linked."""
    pages = [folder / f"{name}.html" for name in notebooks if (autograded / f"{name}.ipynb").is_file()]
    return [p for p in pages if p.is_file() and forbids_scripts(p.read_text(encoding="utf-8", errors="replace"))]


def report_links(reports: Path, course: Path, assignment: str, students) -> dict[str, list[tuple[str, str]]]:
    """student -> their reports, as links relative to the page (relative_href): the JSON grade-class wrote,
    nbgrader's feedback pages (feedback_pages)."""
    notebooks = edition.resolve(assignment).assignment.notebooks
    dirs = course_directories(Path(course))
    links: dict[str, list[tuple[str, str]]] = {}
    for student in students:
        found = []
        if (reports / f"{student}.json").exists():
            found.append(("JSON", relative_href(f"{student}.json")))
        for path in feedback_pages(course / dirs["feedback"] / student / assignment, notebooks,
                                   course / dirs["autograded"] / student / assignment):
            found.append((path.stem, relative_href("..", "..", *path.relative_to(course).parts)))
        links[student] = found
    return links


def write(report: ClassReport, course: Path, reports: Path) -> Path:
    """Write the page into `reports` (COURSE/autograder_reports/<assignment>/); return its path."""
    links = report_links(reports, Path(course), report.assignment, [s.id for s in report.students])
    reports.mkdir(parents=True, exist_ok=True)
    atomic_write(reports / FILE_NAME, page(report, links))
    return reports / FILE_NAME


def write_class_report(course: Path, assignment: str, results, reports: Path,
                       threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Summarize the graded class (`results`: GradeResults named by student) and write its page, with the points
    of the written answers that the gradebook holds (graded by hand; written.py)."""
    report = summarize(assignment, list(results), threshold)
    points, most = written_points(Path(course), assignment, [s.id for s in report.students])
    return write(dataclasses.replace(report, written=points, written_max=most), course, reports)


def written_points(course: Path, assignment: str, students) -> tuple[dict, float]:
    """The written answers' points in the course's gradebook (written.written_scores); ({}, 0), and no column,
    when the gradebook cannot say (none yet, locked, another schema)."""
    from . import gradebook, written  # noqa: PLC0415 - nbgrader is slow to import

    location = gradebook.locate(course)
    if location.missing:  # (opening it would create an empty one)
        return {}, 0.0
    try:
        with gradebook.opened(location) as gb:
            return written.written_scores(gb, assignment, students)
    except Exception:  # noqa: BLE001 - a gradebook that cannot be read: the page without the column
        return {}, 0.0
