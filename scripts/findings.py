"""The README's "What sesa found" table, generated from ``docs/results.md``: a row per claim (VIII-X: two), its
answer in a phrase with the mean and 95% interval over seeds that docs/results.md gives, negatives included.

``python scripts/findings.py`` rewrites the block between ``<!-- results:findings -->`` and
``<!-- /results:findings -->`` of README.md, and the page's wall time (:func:`results_time`) between every
``<!-- results:time -->`` and ``<!-- /results:time -->`` of the pages that quote it (:data:`TIME_PAGES`); ``--check``
only says whether they are current (exit 1 if not). ``nox -s results`` runs it after writing docs/results.md, and
tests/test_findings.py keeps the pages equal to it.

Which group and metrics answer each claim is :data:`ROWS` (by the group numbers docs/results.md lists: the claims'
sweeps in scripts/claims.yaml fix their order). A phrase follows the interval alone: *higher* where the whole 95%
interval of the difference is above 0, *lower* where it is below, *no clear difference* where it spans 0; the cells
are quoted from the page as it prints them. What a group is (its sampler, its method) is read as data, from the
``items`` each section's ``docs/results/<claim>/groups.csv`` records (scripts/results.py), never from the words of its
label. Nothing here imports torch or reads a run.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sesa_cli.deprecations import RENAMED_KEYS
from sesa_cli.report.tables import group_sampler, method_name

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results:findings -->", "<!-- /results:findings -->"
TIME_START, TIME_END = "<!-- results:time -->", "<!-- /results:time -->"
TIME_PAGES = ("README.md", "docs/usage.md", "docs/measurements.md")
"""The pages that quote how long the results page's sweeps took: one figure, :func:`results_time`'s (issue 67: four
hand-written figures in four places)."""


@dataclass(frozen=True)
class Row:
    """One claim's row: ``group`` (its number in the claim's tables) answers it, with each of ``metrics`` (a
    ``(metric, what the reader calls it)`` pair) read from the difference table (group − the claim's baseline) or,
    with ``level``, from the headline table (the group's own value)."""

    claim: str
    question: str
    group: int
    """Its number in the claim's tables; 0 with :attr:`label`: the one group that is what the label says (a head to
    head whose sweeps grow renumbers its later groups), with :attr:`best`: the best published method's."""
    metrics: tuple[tuple[str, str], ...]
    level: bool = False
    label: tuple[tuple[str, str], ...] = ()
    """What the group must be, as (key, value) items of it (a reordered page is refused, not printed); empty: its
    sampler, parallel for a headline row, sequential for a difference row."""
    best: str = ""
    """A metric: the row is the published method (a parallel group other than the baseline) whose difference in it
    is the highest mean (``group`` ignored); ``{method}`` in the question names it."""
    check: str = ""
    """An equal-tuning claim's check claim (seeds 5-9): the row is the claim's winner as its section names it
    (:data:`WINNER`; ``group`` ignored, ``{method}`` in the question names it), with its difference at equal compute
    where the section gives one and whether the check claim's seeds agree."""


SUCCESS, PASS16 = ("eval/success", "success"), ("eval/pass@16", "pass@16")
SESA = (("sampler", "sequential"), ("algo", "grpo"))
"""SESA's group: the sequential sampler on GRPO's loss (its combinations have another algo)."""
EXACT_DIVERSITY = ("policy/effective_solutions", "winning episodes (exact policy)")
ESTIMATE = ("estimate/effective_solutions", "winning answers (sampled estimate)")
DRAWN = ("eval/distinct_correct@16", "ways to win in 16")
ROWS = (
    Row("I", "Does GRPO (parallel, i.i.d. groups) collapse onto one solution of the path task's 20?", 1,
        (("policy/effective_solutions", "effective solutions"),), level=True),
    Row("II", "From scratch, does sequential sampling (the default) keep more solutions than parallel?", 5,
        (("policy/effective_solutions", "effective solutions"), SUCCESS)),
    Row("III", "Revived from a collapsed checkpoint, does it bring them back?", 4,
        (("policy/effective_solutions", "effective solutions"), SUCCESS)),
    Row("IV", "FrozenLake 4×4 (the default run): sequential − parallel", 2, (SUCCESS, PASS16, EXACT_DIVERSITY)),
    Row("V", "Sokoban: sequential − parallel", 2, (SUCCESS, PASS16, EXACT_DIVERSITY)),
    Row("VI", "Countdown: sequential − parallel", 2,
        (SUCCESS, PASS16, ESTIMATE)),
    Row("VII", "FrozenLake 5×5, where the base rarely wins: sequential − parallel", 2,
        (SUCCESS, PASS16, EXACT_DIVERSITY)),
    Row("VIII", "Path task, methods head to head at GRPO's budget: SESA − GRPO", 0,
        (("policy/effective_solutions", "effective solutions"), SUCCESS), label=SESA),
    Row("VIII", "… the published method that keeps the most: {method} − GRPO", 0,
        (("policy/effective_solutions", "effective solutions"), SUCCESS), best="policy/effective_solutions"),
    Row("IX", "FrozenLake 4×4, methods head to head: SESA − GRPO", 2, (SUCCESS, PASS16, DRAWN)),
    Row("IX", "… the published method that wins most ways: {method} − GRPO", 0, (SUCCESS, PASS16, DRAWN),
        best=DRAWN[0]),
    Row("X", "FrozenLake 5×5, methods head to head: SESA − GRPO", 2, (SUCCESS, PASS16, DRAWN)),
    Row("X", "… the published method that wins most ways: {method} − GRPO", 0, (SUCCESS, PASS16, DRAWN),
        best=DRAWN[0]),
    Row("XII", "Sokoban, of eight published groups the one that wins most ways: {method} − GRPO (SESA: V)", 0,
        (SUCCESS, PASS16, DRAWN), best=DRAWN[0]),
    Row("XIX", "FrozenLake 4×4, all tuned alike: winner {method} − GRPO", 0, (SUCCESS, DRAWN), check="XX"),
    Row("XXI", "Path task, all tuned alike: winner {method} − GRPO", 0,
        (("policy/target_mass", "success"), ("policy/effective_solutions", "effective solutions")), check="XXII"),
    Row("XXIII", "Countdown, all tuned alike: winner {method} − GRPO", 0, (SUCCESS, DRAWN), check="XXIV"),
)  # fmt: skip
"""The claims' rows. II's group 5 and III's group 4 are the sequential default (distinct_solutions with the
found-solutions term, from the flagged checkpoint for III); each agent claim has two groups, parallel [1] and
sequential [2]; VIII's are SESA's group (found by what it is, :data:`SESA`) and, chosen by :attr:`Row.best`, the
published method with the most effective solutions (the exact policy); IX-X's are SESA [2] (claims IV and VII's
sequential runs; for XII it is claim V's row, the same runs) and, chosen by :attr:`Row.best`, the published method
with the most distinct winning episodes (answers) in 16 samples: measured alike for every method, where the exact walk
of a spread policy prunes much of its mass. Countdown's head to head (XI) has no row: its tuned claim (XXIII) answers
for it. XIX's, XXI's and XXIII's are the winners at equal tuning their sections name. :func:`findings`
checks that each row's fixed group is what it says (the sampler, or :attr:`Row.label`); a :attr:`Row.best` group is a
published method's by its choice."""

CELL = re.compile(r"^(?P<mean>[+-]?[\d.]+(?:e[+-]?\d+)?) \[(?P<low>[+-]?[\d.]+(?:e[+-]?\d+)?), "
                  r"(?P<high>[+-]?[\d.]+(?:e[+-]?\d+)?)\]$")  # fmt: skip


class PageError(ValueError):
    """docs/results.md lacks what a row reads (a claim, a table, a group, a metric)."""


def sections(text: str) -> dict[str, tuple[str, list[str]]]:
    """The page's claim sections: key (``IV``) -> (heading, its lines)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if re.match(r"## [IVX]+\. ", line)]
    ends = [*starts[1:], len(lines)]
    return {
        lines[i][3:].split(".", 1)[0]: (lines[i][3:], lines[i + 1 : end]) for i, end in zip(starts, ends, strict=True)
    }


def tables(lines: list[str]) -> list[tuple[str, list[dict[str, str]]]]:
    """Each Markdown table of ``lines`` as (the last non-empty line before it, its rows as header -> cell)."""
    out: list[tuple[str, list[dict[str, str]]]] = []
    before, i = "", 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, (c.strip() for c in lines[i].strip("|").split("|")), strict=True)))
                i += 1
            out.append((before, rows))
            continue
        if lines[i].strip():
            before = lines[i]
        i += 1
    return out


def _group(rows: list[dict[str, str]], number: int) -> dict[str, str]:
    for row in rows:
        if row.get("group", "").startswith(f"[{number}] "):
            return row
    raise PageError(f"no group [{number}]")


def _the_group(
    rows: list[dict[str, str]], required: tuple[tuple[str, str], ...], items: Items | None
) -> dict[str, str]:
    """The one row of ``rows`` whose group is what ``required`` says."""
    found = [row for row in rows if _is(row.get("group", ""), items, required)]
    if len(found) != 1:
        what = ", ".join(f"{k}={v}" for k, v in required)
        raise PageError(f"{len(found)} groups are {what}, not one")
    return found[0]


PUBLISHED_SAMPLERS = ("parallel", "lte")
"""The samplers of the published methods' groups: i.i.d. sampling (an advantage, a loss, a term or a filter on GRPO's
groups) and LTE's hinted rows; sequential is SESA."""

Items = dict[str, dict[str, str]]
"""A section's groups as data: group number (``[5]``) -> the group's items (sesa_cli.report.document.Report.items)."""


def group_items(results: Path) -> dict[str, Items]:
    """Claim -> its groups' items, from each section's ``groups.csv`` under ``results`` (docs/results/<claim>/) that
    records them; a section whose table does not (written before its groups carried their items) is left out."""
    out: dict[str, Items] = {}
    for path in sorted(results.glob("*/groups.csv")):
        with path.open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if rows and "items" in rows[0]:
            out[path.parent.name] = {r["group"].split(" ", 1)[0]: json.loads(r["items"]) for r in rows}
    return out


def _items(label: str, items: Items | None) -> dict[str, str]:
    """What the group labelled ``label`` on the page is: its section's recorded items, found by the group's number
    (the label's ``[n]``); for a section written before they were recorded, :func:`_legacy_items`."""
    number = label.split(" ", 1)[0]
    if items is not None:
        if number not in items:
            raise PageError(f"group {number} is in the page's table but not in its section's groups.csv")
        return items[number]
    return _legacy_items(label)


def _legacy_items(label: str) -> dict[str, str]:
    """The items of a group of a section written before groups.csv recorded them, read from its label as the head to
    head's report wrote it then, ``[n] <sampler> <algo> key=value ...`` (a key by its last part, under its current
    name). Goes once every section of docs/results.md is regenerated."""
    words = label.split()
    out = {"sampler": words[1] if len(words) > 1 else ""}
    if len(words) > 2 and "=" not in words[2]:
        out["algo"] = words[2]
    current = {old.rpartition(".")[2]: new for old, new in RENAMED_KEYS.items()}
    for word in words[2:]:
        key, sep, value = word.partition("=")
        if sep:
            out[current.get(key, f"algo.terms.{key}" if "." in key else f"algo.{key}")] = value
    return out


def _is(label: str, items: Items | None, required: tuple[tuple[str, str], ...]) -> bool:
    """Whether the group labelled ``label`` is what ``required`` says; in a section written before its items were
    recorded, each required value is one of its label's words, or a ``key=value`` word under an old name."""
    if items is not None:
        what = _items(label, items)
        return all(what.get(k) == v for k, v in required)
    legacy = _legacy_items(label)
    return all(v in label.split() or legacy.get(k) == v for k, v in required)


def _published(what: dict[str, str]) -> bool:
    sampler = group_sampler(what)
    return sampler in PUBLISHED_SAMPLERS and (sampler, what.get("algo")) != ("parallel", "grpo")


def _best(rows: list[dict[str, str]], metric: str, items: Items | None = None) -> dict[str, str]:
    """Of the difference rows of published methods (:data:`PUBLISHED_SAMPLERS`; GRPO given another budget, i.i.d.
    sampling on GRPO's loss, is none), the one whose ``metric`` has the highest mean."""
    methods = [row for row in rows if _published(_items(row.get("group", ""), items))]
    if not methods or any(metric not in row for row in methods):
        raise PageError(f"no published method's group with a {metric} difference")
    return max(methods, key=lambda row: _cell(row[metric])[0])


WINNER = "Winner at equal tuning:"
"""The line of an equal-tuning section that names its winner's group (scripts/results.py writes it, ``WINNER``
there): ``Winner at equal tuning: [18] ...`` or ``Winner at equal tuning: none; ...``."""


def _winner(row: Row, body: list[str], rows: list[dict[str, str]]) -> dict[str, str] | None:
    """The difference row of the group an equal-tuning section names its winner (None: no pick cleared the floor)."""
    line = next((x for x in body if x.startswith(WINNER)), None)
    if line is None:
        raise PageError(f"claim {row.claim}: no line {WINNER!r}")
    number = line.removeprefix(WINNER).split()[0].strip("[];")
    return None if number == "none" else _group(rows, int(number))


def _tuning_answers(
    row: Row, parsed: list[tuple[str, list[dict[str, str]]]], method: str, found: dict[str, tuple[str, list[str]]]
) -> list[str]:
    """The winner's difference at equal compute (the section's table of picks against GRPO at the nearest compute,
    where it has one) and its check on other seeds (the check claim's table of picks: agree or not, and its values
    there)."""
    out = []
    for before, rows in parsed:
        if before.startswith("Each pick at equal compute"):
            pick = next((r for r in rows if r.get("method") == method), None)
            if pick is None:
                continue
            against = pick["GRPO at the nearest compute"]
            if "group_size=" not in against:  # GRPO's own group: the figures before it again
                out.append("the same at equal compute")
            else:
                cells = [f"{name} {pick[f'{metric} − it']}" for metric, name in row.metrics]
                out.append(f"at equal compute (against {_grpo_at(against)}): {', '.join(cells)}")
    if row.check not in found:
        raise PageError(f"docs/results.md has no claim {row.check}")
    for before, rows in tables(found[row.check][1]):
        if before.startswith(f"Claim {row.claim}'s picks"):
            pick = next((r for r in rows if r.get("method") == method), None)
            if pick is None:
                out.append(f"not yet rerun on claim {row.check}'s seeds")
            else:
                cells = [f"{name} {pick[next(k for k in pick if k.startswith(metric) and k.endswith(', here'))]}"
                         for metric, name in row.metrics]  # fmt: skip
                agreed = "agree" if pick["agree"] == "yes" else "do not agree"
                out.append(f"claim {row.check}'s seeds {agreed} ({', '.join(cells)})")
    return out


def _grpo_at(cell: str) -> str:
    """A table's GRPO group at its cost (``[41] parallel grpo group_size=10 (1.19x)``) in the README's words:
    ``GRPO with 10 a prompt, 1.19x``; the baseline's group (no size of its own) ``GRPO, 1.00x``."""
    size = re.search(r"group_size=(\d+)", cell)
    cost = re.search(r"\(([\d.]+x)\)$", cell)
    return f"GRPO{f' with {size.group(1)} a prompt' if size else ''}{f', {cost.group(1)}' if cost else ''}"


MARK = "†"
"""What the page's tables put after an exact figure that covers too little of a run's policy
(sesa_cli.intervals.EXACT_MARK): no answer rests on it."""


def _lost(tables_: list[list[dict[str, str]]], label: str) -> str:
    """The ``runs lost`` cell of the group numbered as ``label`` in the section's headline table ("" for none, or a
    page written before runs lost were counted)."""
    number = label.split(" ", 1)[0]
    for rows in tables_:
        for row in rows:
            if row.get("group", "").split(" ", 1)[0] == number and row.get("runs lost", "0") != "0":
                return row["runs lost"]
    return ""


def _cell(cell: str) -> tuple[float, float, float]:
    """(mean, low, high) of a ``mean [low, high]`` cell."""
    m = CELL.match(cell)
    if m is None:
        raise PageError(f"{cell!r} is not 'mean [low, high]'")
    return float(m["mean"]), float(m["low"]), float(m["high"])


def phrase(cell: str) -> str:
    """The answer a difference ``mean [low, high]`` gives, from its interval alone."""
    _, low, high = _cell(cell)
    return "higher" if low > 0 else "lower" if high < 0 else "no clear difference"


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (as tests/test_doc_references.py computes it)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def findings(text: str, rows: Sequence[Row] = ROWS, items: dict[str, Items] | None = None) -> list[str]:
    """The README's table (Markdown lines) from the text of docs/results.md and its sections' group ``items``
    (:func:`group_items`; a claim without them: :func:`_legacy_items`)."""
    found = sections(text)
    items = items or {}
    lines = ["| claim | question | answer: mean [95% interval] over seeds |", "|---|---|---|"]
    for row in rows:
        if row.claim not in found:
            raise PageError(f"docs/results.md has no claim {row.claim}")
        heading, body = found[row.claim]
        parsed = tables(body)
        if row.level:  # the headline table: a group's own values, with its seed count
            wanted = [t for _, t in parsed if t and "n" in t[0]]
        else:  # the differences to the baseline
            wanted = [t for before, t in parsed if before.startswith("Difference to")]
            baseline = next((b for b, _ in parsed if b.startswith("Difference to")), "").removeprefix("Difference to ")
        if not wanted:
            raise PageError(f"claim {row.claim}: no {'headline' if row.level else 'difference'} table")
        claim = items.get(row.claim)
        extra: list[str] = []
        if row.check:
            winner = _winner(row, body, wanted[0])
            if winner is None:
                lines.append(f"| [{row.claim}](docs/results.md#{slug(heading)}) | "
                             f"{row.question.format(method='none')} | no pick's success clears the floor |")  # fmt: skip
                continue
            group = winner
            method = method_name(_items(group["group"], claim))
            question = row.question.format(method=method)
            extra = _tuning_answers(row, parsed, method, found)
        elif row.best:
            group = _best(wanted[0], row.best, claim)
            question = row.question.format(method=method_name(_items(group["group"], claim)))
        elif not row.group:
            group = _the_group(wanted[0], row.label, claim)
            question = row.question
        else:
            group = _group(wanted[0], row.group)
            question = row.question
        if row.group:  # a fixed group number: it must still be what the row reads it as
            label = row.label or (("sampler", "parallel" if row.level else "sequential"),)
            if not _is(group["group"], claim, label):
                wanted_text = ", ".join(f"{k}={v}" for k, v in label)
                raise PageError(f"claim {row.claim}: group [{row.group}] is {group['group']!r}, not {wanted_text}")
        answers = []
        for metric, name in row.metrics:
            if metric not in group:
                raise PageError(f"claim {row.claim}: no {metric} column")
            cell = group[metric]
            if cell.endswith(MARK):  # an exact figure of a walk that pruned too much: no answer rests on it
                answers.append(f"{name} not read ({MARK})")  # the README says what the mark means
                continue
            answers.append(f"{name} {cell}" if row.level else f"{name} {phrase(cell)}: {cell}")
        answers += extra
        headlines = [t for _, t in parsed if t and "n" in t[0]]
        lost = _lost(headlines, group["group"])  # a mean that holds broken runs says how many
        answers += [lost] if lost else []
        lost = "" if row.level else _lost(headlines, baseline)
        answers += [f"baseline {lost}"] if lost else []
        lines.append(f"| [{row.claim}](docs/results.md#{slug(heading)}) | {question} | {'; '.join(answers)} |")
    return lines


def block(text: str, items: dict[str, Items] | None = None) -> str:
    """The README's block as written (markers included) for the page ``text`` (its sections' ``items``: None reads
    them from docs/results/)."""
    items = group_items(ROOT / "docs" / "results") if items is None else items
    return "\n".join([START, *findings(text, items=items), END])


def rewrite(readme: str, page: str, items: dict[str, Items] | None = None) -> str:
    """``readme`` with its findings block replaced by the one ``page`` (docs/results.md's text) gives."""
    if START not in readme or END not in readme:
        raise PageError(f"README.md has no {START} ... {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + block(page, items) + tail


def results_time(page: str) -> str:
    """The wall time of docs/results.md's sweeps as the page records it (``Compute: the sections' sweeps took 3 h 34
    min of wall time in all``: scripts/results.py sums its sections' own times)."""
    m = re.search(r"Compute: the sections' sweeps took (.+?) of wall time in all", page)
    if m is None:
        raise PageError("docs/results.md records no wall time of its sweeps ('Compute: the sections' sweeps took')")
    return m.group(1)


def rewrite_times(text: str, page: str, name: str = "the page") -> str:
    """``text`` with every ``<!-- results:time -->...<!-- /results:time -->`` holding :func:`results_time`."""
    if TIME_START not in text:
        raise PageError(f"{name} has no {TIME_START}...{TIME_END} span")
    figure = results_time(page)
    return re.sub(re.escape(TIME_START) + r".*?" + re.escape(TIME_END), lambda m: TIME_START + figure + TIME_END,
                  text)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/findings.py", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md's table is not current")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results.md")
    args = parser.parse_args(argv)
    page = args.results.read_text(encoding="utf-8")
    paths = [args.readme, *(ROOT / name for name in TIME_PAGES if ROOT / name != args.readme)]
    texts = {path: path.read_text(encoding="utf-8") for path in paths}
    try:
        new = {path: rewrite_times(text, page, str(path)) for path, text in texts.items()}
        new[args.readme] = rewrite(new[args.readme], page, group_items(args.results.with_suffix("")))
    except PageError as exc:
        print(f"scripts/findings.py: {exc}", file=sys.stderr)
        return 2
    stale = [path for path in paths if new[path] != texts[path]]
    if args.check:
        for path in stale:
            print(f"{path}: its findings table or results time is not what {args.results} gives; run "
                  "scripts/findings.py")  # fmt: skip
        return 1 if stale else 0
    for path in stale:
        path.write_text(new[path], encoding="utf-8")
        print(f"wrote the findings table and the results time into {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
