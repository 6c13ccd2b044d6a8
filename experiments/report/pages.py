"""The generated head of each paper's page (``docs/papers/<key>.md``): what the config declares
(the claims with the abstract's words, their conditions and rules, the metrics, the method
options, the commands and sweeps), the claims' current verdicts from the published
reproduction and which of them moved since the reproduction it compares with (``make readme
SINCE=<git revision>`` sets that one; later publications keep it). The hand-written rest of
the page says what the implementation does and where it departs from the paper.

    python -m experiments.report.pages            # rewrite every page's head (make pages)
    python -m experiments.report.pages --check    # exit 1 when a head is stale
"""

from __future__ import annotations

import argparse
import json
import sys

from experiments.claims.metrics import specs
from experiments.claims.papers import ROOT, find_paper, papers

PAGES = ROOT / "docs" / "papers"
PUBLISHED = ROOT / "docs" / "reproduction.json"
HEAD_START = "<!-- generated head: make pages (experiments/report/pages.py) -->"
HEAD_END = "<!-- end of generated head -->"


def _options(key: str, group: str) -> list[tuple[str, str]]:
    """(option, its first comment line) of ``conf/paper/<key>/<group>/*.yaml``."""
    out = []
    for path in sorted((find_paper(key).group_configs / group).glob("*.yaml")):
        comment = next((line.lstrip("# ").strip() for line in path.read_text().splitlines()
                        if line.startswith("#") and "@package" not in line), "")
        out.append((path.stem, comment))
    return out


def _verdicts(key: str) -> dict[str, dict]:
    try:
        published = json.loads(PUBLISHED.read_text())
    except (OSError, ValueError):
        return {}
    paper = next((p for p in published.get("papers", []) if p["key"] == key), None)
    return {c["id"]: c for c in (paper or {}).get("claims", [])}


def moved(key: str, claims: list[dict]) -> list[str]:
    """The lines saying which of ``key``'s verdicts changed since the reproduction the
    published file compares with (none when it names none)."""
    try:
        published = json.loads(PUBLISHED.read_text())
    except (OSError, ValueError):
        return []
    since = published.get("since") if isinstance(published, dict) else None
    if not since:
        return []
    before = since["papers"].get(key, {"verdict": "not published", "claims": {}})
    now = _verdicts(key)
    paper = next((p for p in published["papers"] if p["key"] == key), {})
    changes = [f"`{c['id']}`: {before['claims'].get(c['id'], 'new claim')} -> "
               f"{now[c['id']]['verdict']}" for c in claims
               if c["id"] in now and before["claims"].get(c["id"]) != now[c["id"]]["verdict"]]
    changes += [f"`{claim}`: {verdict} -> removed" for claim, verdict in
                before["claims"].items() if claim not in now]
    title = (f"Verdicts that moved since the reproduction published at {since['rev'][:7]} "
             f"(paper: {before['verdict']} -> {paper.get('verdict', 'not published')})")
    return ["", title + (":" if changes else ": none."), *(["", *[f"- {c}" for c in changes]]
                                                         if changes else [])]


def ledger_lines(key: str, info: dict) -> list[str]:
    """The claims ledger's record of ``key`` (docs/claims_ledger.json, generated from git):
    every claim whose definition changed after a verdict for it was published, with the
    reason its config gives."""
    from experiments.claims.ledger import history_text, read_record

    entries = read_record().get(key) or {}
    if not entries:
        return ["", "Changed after results (docs/claims_ledger.json, from git): none."]
    reasons = {c["id"]: c.get("changed_after_results") for c in info.get("claims") or []}
    reasons |= {r["id"]: f"removed: {r['reason']}" for r in info.get("removed_claims") or []}
    return ["", "Changed after results (docs/claims_ledger.json, from git: each definition "
            "change after a published verdict for the claim; its verdict is exploratory until "
            "fresh seeds judge it):", "",
            *[f"- `{claim}`: {history_text(e)}. Why: {reasons.get(claim) or 'not given'}"
              for claim, e in sorted(entries.items())]]


def changes_since_preregistration(key: str) -> list[str]:
    """The files of this paper (and the shared code) that changed between the
    preregistration and the confirmatory runs, when the published study is that one."""
    try:
        published = json.loads(PUBLISHED.read_text())
    except (OSError, ValueError):
        return []
    changes = (published.get("changes_since_preregistration") or {}).get(key)
    if changes is None:
        return []
    commit = published["preregistration"]["commit"][:7]
    return ["", f"Code and configuration changed between the preregistration ({commit}) and "
            "the confirmatory runs" + (": " + ", ".join(f"`{f}`" for f in changes) + "."
                                       if changes else ": none.")]


def head(key: str) -> str:
    """The page's generated head (templates/paper_head.md.j2), each claim written as every
    renderer writes it (:func:`experiments.report.render.claim_text`)."""
    from experiments.report.render import claim_text, environment, margin_text
    from experiments.runner.sweep_summary import regimes

    info = find_paper(key).info
    verdicts = _verdicts(key)
    claims = []
    for c in info.get("claims") or []:
        rule = c.get("rule", "compare") + margin_text(c)
        rule += ", sign test" if c.get("test") == "sign" else ""
        rule += f", over the published sweep {c['sweep']}" if c.get("sweep") else ""
        rule += " (sanity check)" if c.get("sanity") else ""
        rule += " (ablation, not counted)" if c.get("ablation") else ""
        rule += f"; runs on {c['setting']}" if c.get("setting") else ""
        rule += "; changed after results (below)" if c.get("changed_after_results") else ""
        published = verdicts.get(c["id"])
        claims.append({
            "id": c["id"], "text": c["text"],
            "condition": f"`{c['holds_if']}`" if c.get("holds_if") else f"needs: {c.get('scale')}",
            "rule": rule if c.get("holds_if") else "-",
            "verdict": claim_text(published) if published else "not yet reproduced"})
    found = regimes(key).replace("](docs/sweeps/", "](../sweeps/")  # links from docs/papers/
    metrics = []
    for spec in specs(info):
        values = "; ".join(f"{k}: {v}" for k, v in spec.values.items())
        meaning = spec.meaning + (f" ({values})" if values else "")
        meaning += f"; when {spec.when}" if spec.when else ""
        meaning += "; some runs" if spec.optional else ""
        metrics.append({"name": spec.name, "better": spec.better, "unit": spec.unit,
                        "meaning": meaning})
    history = (moved(key, info.get("claims") or []) + ledger_lines(key, info)
               + changes_since_preregistration(key))
    return environment().get_template("paper_head.md.j2").render(
        start=HEAD_START, end=HEAD_END, key=key, info=info, claims=claims,
        sweeps=found.split("<br>") if found else [], history=history, metrics=metrics,
        methods=_options(key, "method"), sweep_options=_options(key, "sweep")).rstrip("\n")


def render(key: str, page: str) -> str:
    """``page`` with its head replaced (or put first when it has none)."""
    new = head(key)
    if HEAD_START in page and HEAD_END in page:
        before, _, rest = page.partition(HEAD_START)
        _, _, after = rest.partition(HEAD_END)
        return before + new + after
    return new + "\n\n" + page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report.pages")
    parser.add_argument("--check", action="store_true", help="exit 1 when a head is stale")
    args = parser.parse_args(argv)
    stale = []
    for key in list(papers()):
        path = PAGES / f"{key}.md"
        page = path.read_text() if path.exists() else ""
        new = render(key, page)
        if new != page:
            stale.append(key)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale paper pages: {', '.join(stale)} (make pages)", file=sys.stderr)
        return 1
    print(f"{'stale' if args.check else 'written'}: {', '.join(stale) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
