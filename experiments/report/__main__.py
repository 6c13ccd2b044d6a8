"""``python -m experiments.report <runs folder> [--out outputs/report] [--publish]``

Writes the reproduction report (index.html, report.md, effects.png, summary.json) from the
runs under a folder. ``--publish`` also copies summary.json to docs/reproduction.json and
regenerates the README's results table from it (what ``make readme`` does after a full
``make reproduce``); ``--wandb`` logs the claims table and the effect figure as a W&B run.
A run file that cannot be read is shown as corrupt and the others are judged; the exit code
is then 1, after the page is written (and nothing is published).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
from pathlib import Path

from common.errors import UserError, ensure_writable
from experiments.claims.ledger import verdicts_at
from experiments.claims.papers import ROOT
from experiments.claims.study import confirmatory_record
from experiments.report.forest import plot_effects
from experiments.report.pages import PAGES
from experiments.report.pages import main as write_pages
from experiments.report.render import (
    EFFECTS_FIGURE,
    readme_table,
    replace_readme_table,
    report_html,
    report_markdown,
)
from experiments.report.summary import (
    StudyRecord,
    effect_rows,
    published,
    summarize_folder,
)
from experiments.runner.records import study_timing
from experiments.runner.results import read_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report")
    parser.add_argument("runs", type=Path, help="a folder of runs (make reproduce's sweep)")
    parser.add_argument("--out", type=Path, default=Path("outputs/report"))
    parser.add_argument("--publish", action="store_true",
                        help="copy summary.json to docs/ and regenerate the README table")
    parser.add_argument("--since", metavar="REV",
                        help="with --publish: the git revision whose docs/reproduction.json "
                             "the paper pages compare verdicts with (default: the one the "
                             "published file already compares with)")
    parser.add_argument("--allow-fewer", action="store_true",
                        help="with --publish: publish even when the runs hold fewer finished "
                             "default runs than the published reproduction")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the claims table and the effect figure to W&B")
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        print(f"error: {args.runs} is not a folder of runs (run make reproduce first)",
              file=sys.stderr)
        return 1
    try:  # before the work: a folder the report cannot write is one line, at once
        ensure_writable(args.out, f"the report folder {args.out}")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    papers, unplaced = write_report(args.runs, args.out)
    for p in papers:
        print(f"{p['key']:<12} {p['verdict']:<24} seeds {p['seeds']}")
        for twin in p["duplicates"]:
            print(f"duplicate: {p['key']} seed {twin['seed']} in {twin['folder']} (counted "
                  f"once, from {twin['counted']})")
    for p in papers:
        for why in p["refused"]:
            print(f"refused, not the preregistered code: {why}")
    corrupt = unplaced + [c for p in papers for c in p["corrupt"]]
    for c in corrupt:
        print(f"corrupt: {c['file']}, {c['error']}")
    print(f"report: {args.out / 'index.html'} and {args.out / 'report.md'}")
    if args.wandb:
        log_to_wandb(papers, args.out, str(args.runs))
    if corrupt:
        return 1
    if args.publish:
        try:
            publish(args.runs, args.out, args.since, args.allow_fewer)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    return 0


def write_report(folder: Path, out: Path) -> tuple[list[dict], list[dict[str, str]]]:
    """report.md, index.html (opening with the effect figure), effects.png and summary.json
    in ``out``; returns the papers' records and the corrupt files no paper was told for."""
    papers, unplaced = summarize_folder(folder)
    out.mkdir(parents=True, exist_ok=True)
    effects = out / EFFECTS_FIGURE
    drawn = [r for r in effect_rows(papers) if r["rule"] not in ("exact", "exists")]
    if drawn:
        plot_effects(drawn, effects)
    elif effects.exists():
        effects.unlink()
    (out / "report.md").write_text(report_markdown(papers, str(folder), unplaced))
    (out / "index.html").write_text(report_html(papers, str(folder), effects, unplaced))
    (out / "summary.json").write_text(json.dumps([published(p) for p in papers], indent=1)
                                      + "\n")
    return papers, unplaced


def log_to_wandb(papers: list[dict], out: Path, source: str) -> None:
    """The claims table and the effect figure as one W&B run (job_type report)."""
    from experiments.runner.wandb_logger import WandbMirror

    mirror = WandbMirror(project="paperlab", entity=None, mode=None, group="reproduction",
                         job_type="report", name="reproduction-report", tags=["report"],
                         config={"source": source}, output_dir=out)
    mirror.log_table("claims", [
        {"paper": p["key"], "claim": c["id"], "verdict": c["verdict"], "rule": c["rule"],
         "sanity": c["sanity"], "effect": c["effect"]["text"] if c["effect"] else "",
         "detail": c["detail"]} for p in papers for c in p["claims"]])
    if (out / EFFECTS_FIGURE).is_file():
        mirror.log_image("effects", out / EFFECTS_FIGURE)
    mirror.finish()


def finished_jobs(papers: list[dict]) -> int:
    """The default runs a summary judged, over every paper."""
    return sum(len(p.get("seeds") or []) for p in papers)


@contextlib.contextmanager
def all_or_nothing(paths: list[Path]):
    """Files written inside the block are put back as they were when the block fails."""
    before = {path: path.read_bytes() if path.exists() else None for path in paths}
    try:
        yield
    except BaseException:
        for path, content in before.items():
            if content is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(content)
        raise


def committed_records(runs: Path) -> str | None:
    """The runs' folder relative to the repository when it lies in it (a study's committed
    records, docs/studies/<study>: anyone can judge the published table again from them);
    None for runs outside it (outputs/ is not committed)."""
    try:
        relative = runs.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return None if relative.parts[:1] == ("outputs",) else str(relative)


def publish(runs: Path, out: Path, since_rev: str | None, allow_fewer: bool) -> None:
    """docs/reproduction.json, the README table and the pages' heads from the report in
    ``out``, all or nothing; ``UserError`` when the report judged fewer finished runs than
    the published one (unless ``allow_fewer``) or a published file cannot be read."""
    target = ROOT / "docs" / "reproduction.json"
    papers_summary = json.loads((out / "summary.json").read_text())
    earlier, _ = read_json(target)
    earlier = earlier if isinstance(earlier, dict) else {}
    now, then = finished_jobs(papers_summary), finished_jobs(earlier.get("papers") or [])
    if now < then and not allow_fewer:
        raise UserError(f"{runs} holds {now} finished default runs, the published "
                        f"reproduction {then}: nothing published (make readme "
                        "ALLOW_FEWER=1 publishes it anyway)")
    timing = study_timing(runs)
    since = verdicts_at(since_rev) if since_rev else earlier.get("since")
    record: StudyRecord = {"papers": papers_summary, "timing": timing, "since": since,
                           "records": committed_records(runs)}
    if all(p.get("study") == "confirmatory" for p in papers_summary):
        record.update(confirmatory_record(papers_summary))
    readme, figure = ROOT / "README.md", ROOT / "docs" / EFFECTS_FIGURE
    with all_or_nothing([target, readme, figure, *sorted(PAGES.glob("*.md"))]):
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(record, indent=1) + "\n")
        readme.write_text(replace_readme_table(readme.read_text(), readme_table(record)))
        if (out / EFFECTS_FIGURE).is_file():  # the README's figure: the report's forest plot
            shutil.copyfile(out / EFFECTS_FIGURE, figure)
        write_pages([])
    print(f"published: {target} and the README table")

if __name__ == "__main__":
    sys.exit(main())
