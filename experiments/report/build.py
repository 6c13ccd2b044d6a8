"""The reproduction report: every paper's claims judged on the runs in a folder.

``collect`` finds the runs (``results.json``) and failures (``failed.json``) under a folder
(the ``make reproduce`` sweep, a multirun, or single runs); ``summarize`` judges each paper's
claims over its seeds (``claims.combine``); ``write_report`` writes ``report.md``,
``index.html`` (one self-contained page: figures embedded, opens offline) and
``summary.json`` (what the README table is generated from, see ``readme_table``).
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.report.claims import (
    FAILS,
    HOLDS,
    NOT_RUN,
    NOT_TESTED,
    Verdict,
    combine,
    metric_names,
    paper_verdict,
    parse,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = ROOT / "conf" / "paper"
PAPER_NOTES = ROOT / "docs" / "papers"
MAX_FIGURES = 3
FAILED = "failed"
BADGE_COLOURS = {HOLDS: "#1a7f37", FAILS: "#cf222e", "partial": "#9a6700",
                 NOT_TESTED: "#6e7781", NOT_RUN: "#6e7781", FAILED: "#cf222e"}


def paper_info(key: str) -> dict[str, Any]:
    """``paper:`` of ``conf/paper/<key>.yaml`` as plain data."""
    node = OmegaConf.load(PAPER_CONFIGS / f"{key}.yaml").paper
    return OmegaConf.to_container(node, resolve=False)


def all_papers() -> list[str]:
    return sorted(p.stem for p in PAPER_CONFIGS.glob("*.yaml"))


def _seed_of(overrides: list[str]) -> int | None:
    for item in overrides:
        if item.startswith("seed="):
            return int(item.split("=", 1)[1])
    return 0


def is_default(overrides: list[str]) -> bool:
    """A run of the paper's default: its overrides choose only the paper, the seed and where
    or how it runs (folders, logger, device, threads, launcher)."""
    ignored = ("+paper=", "paper=", "seed=", "hydra", "paths.", "logger", "device=",
               "threads=", "+sweep=")
    return all(o.lstrip("+~").startswith(ignored) or o.startswith(ignored) for o in overrides)


def collect(folder: Path) -> dict[str, dict[str, list]]:
    """paper -> {"runs": [results.json, by seed], "failed": [failed.json + folder]} of the
    default runs under ``folder`` (runs with other settings are not the claims' evidence); a
    folder whose run finished counts once even if an earlier attempt failed there."""
    found: dict[str, dict[str, list]] = defaultdict(lambda: {"runs": [], "failed": []})
    for path in sorted(Path(folder).rglob("results.json")):
        result = json.loads(path.read_text())
        if "paper" in result and "metrics" in result and is_default(
                result.get("overrides") or []):
            result["folder"] = str(path.parent)
            found[result["paper"]]["runs"].append(result)
    for path in sorted(Path(folder).rglob("failed.json")):
        if (path.parent / "results.json").exists():
            continue
        failure = json.loads(path.read_text())
        if failure.get("paper") and is_default(failure.get("overrides") or []):
            failure["folder"] = str(path.parent)
            failure["seed"] = _seed_of(failure.get("overrides") or [])
            found[failure["paper"]]["failed"].append(failure)
    for entry in found.values():
        entry["runs"].sort(key=lambda r: r.get("seed", 0))
    return dict(found)


def _mean_sd(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(
        values) > 1 else 0.0
    return mean, sd


def fmt(value: float) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                  and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summarize(key: str, entry: dict[str, list] | None) -> dict[str, Any]:
    """One paper's verdicts, headline number and runtime over the seeds in ``entry``."""
    info = paper_info(key)
    runs = (entry or {}).get("runs", [])
    failed = (entry or {}).get("failed", [])
    metrics = [r["metrics"] for r in runs]
    claims = []
    for claim in info.get("claims") or []:
        text = claim.get("holds_if")
        names = sorted(metric_names(parse(text))) if text else []
        missing = sorted({n for n in names for m in metrics if n not in m})
        if missing:  # a run that did not write a metric the claim names
            verdict = Verdict(NOT_RUN, f"metric missing from metrics.json: "
                              f"{', '.join(missing)}", [])
        else:
            verdict = combine(text, claim.get("over_seeds", "all"), metrics)
        claims.append({
            "id": claim["id"], "text": claim["text"], "holds_if": text,
            "over_seeds": claim.get("over_seeds", "all"), "scale": claim.get("scale"),
            "verdict": verdict.verdict, "detail": verdict.detail,
            "per_seed": verdict.per_seed,
            "values": {n: [m.get(n) for m in metrics] for n in names},
        })
    primary = next(iter(info.get("primary_metrics") or {}), None)
    headline = None
    if primary and metrics and all(primary in m for m in metrics):
        mean, sd = _mean_sd([float(m[primary]) for m in metrics])
        headline = {"metric": primary, "mean": mean, "sd": sd, "seeds": len(metrics)}
    verdict = paper_verdict([c["verdict"] for c in claims]) if runs else (
        FAILED if failed else NOT_RUN)
    return {
        "key": key, "title": info["title"], "claim": info["claim"],
        "figure_caption": info.get("figure", ""), "verdict": verdict, "claims": claims,
        "seeds": [r.get("seed") for r in runs],
        "failed": [{"seed": f["seed"], "error": f.get("error", ""), "folder": f["folder"]}
                   for f in failed],
        "headline": headline,
        "runtime_s": _mean_sd([r["wall_time_s"] for r in runs])[0] if runs else None,
        "git_sha": sorted({str(r.get("git_sha")) for r in runs}),
        "config_hash": sorted({str(r.get("config_hash")) for r in runs}),
        "versions": runs[0].get("versions", {}) if runs else {},
        "folders": [r["folder"] for r in runs],
    }


def summarize_folder(folder: Path) -> list[dict[str, Any]]:
    found = collect(folder)
    return [summarize(key, found.get(key)) for key in all_papers()]


# -- text ------------------------------------------------------------------------------------

def headline_text(paper: dict[str, Any]) -> str:
    h = paper["headline"]
    if not h:
        return ""
    return f"{h['metric']} {fmt(h['mean'])} ± {fmt(h['sd'])} (n={h['seeds']})"


def runtime_text(paper: dict[str, Any]) -> str:
    seconds = paper["runtime_s"]
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def claims_tally(paper: dict[str, Any]) -> str:
    tested = [c for c in paper["claims"] if c["verdict"] in (HOLDS, FAILS)]
    held = sum(c["verdict"] == HOLDS for c in tested)
    untested = len(paper["claims"]) - len(tested)
    return f"{held}/{len(tested)} hold" + (f", {untested} not tested here" if untested else "")


def report_markdown(papers: list[dict[str, Any]], source: str) -> str:
    lines = [f"# Reproduction report\n\nRuns from `{source}`. Verdicts are computed from each "
             "paper's `paper.claims` (conf/paper/<key>.yaml) on the runs' metrics.json.\n",
             "| paper | claim | verdict | claims | headline (mean ± sd over seeds) | runtime |",
             "|---|---|---|---|---|---|"]
    for p in papers:
        lines.append(f"| [{p['key']}](#paper-{p['key']}) | {p['claim']} | {p['verdict']} | "
                     f"{claims_tally(p)} | {headline_text(p)} | {runtime_text(p)} |")
    for p in papers:
        lines += ["", f"## <a id=\"paper-{p['key']}\"></a>{p['key']}: {p['title']}", "",
                  f"Verdict: **{p['verdict']}** (seeds {', '.join(map(str, p['seeds'])) or '-'})"
                  f". Reproduce: `python run.py +paper={p['key']} seed=<s>` or "
                  f"`make reproduce PAPERS={p['key']}`.", ""]
        for f in p["failed"]:
            lines.append(f"- failed run (seed {f['seed']}): {f['error']} ({f['folder']})")
        for c in p["claims"]:
            lines.append(f"- **{c['id']}** ({c['verdict']}; {c['detail']}): {c['text']}")
            if c["holds_if"]:
                lines.append(f"  - condition `{c['holds_if']}` over seeds: {c['over_seeds']}")
                for name, values in c["values"].items():
                    if values:
                        lines.append(f"  - {name}: {', '.join(fmt(v) for v in values)}")
            elif c["scale"]:
                lines.append(f"  - needs: {c['scale']}")
        lines += recon_notes(p["key"])
        if p["git_sha"]:
            lines.append(f"\ngit {', '.join(p['git_sha'])}; config hash "
                         f"{', '.join(p['config_hash'])}")
    return "\n".join(lines) + "\n"


def recon_notes(key: str) -> list[str]:
    """Lines of docs/papers/<key>.md that name a reconstruction (RECON)."""
    path = PAPER_NOTES / f"{key}.md"
    if not path.is_file():
        return []
    text = " ".join(line.strip() for line in path.read_text().splitlines()
                    if not line.startswith(("#", ">")))
    sentences = re.split(r"(?<=[.;])\s+(?=[A-Z(`*])", text)
    notes = [s.strip(" -*") for s in sentences if "RECON" in s]
    return [f"- {n[:400]}" for n in notes[:8]]


# -- html ------------------------------------------------------------------------------------

def _badge(verdict: str) -> str:
    colour = BADGE_COLOURS.get(verdict, "#6e7781")
    return (f'<span class="badge" data-verdict="{html.escape(verdict)}" '
            f'style="background:{colour}">{html.escape(verdict)}</span>')


def _figures(paper: dict[str, Any]) -> list[str]:
    if not paper["folders"]:
        return []
    folder = Path(paper["folders"][0]) / "figures"
    out = []
    for path in sorted(folder.glob("*.png"))[:MAX_FIGURES]:
        data = base64.b64encode(path.read_bytes()).decode()
        out.append(f'<figure><img alt="{html.escape(path.stem)}" '
                   f'src="data:image/png;base64,{data}"><figcaption>{html.escape(path.stem)}'
                   f" (seed {paper['seeds'][0]})</figcaption></figure>")
    return out


def report_html(papers: list[dict[str, Any]], source: str) -> str:
    e = html.escape
    rows = "\n".join(
        f"<tr data-paper=\"{p['key']}\"><td><a href=\"#paper-{p['key']}\">{p['key']}</a></td>"
        f"<td>{e(p['claim'])}</td><td>{_badge(p['verdict'])}</td>"
        f"<td>{' '.join(_badge(c['verdict']) for c in p['claims'])}</td>"
        f"<td>{e(headline_text(p))}</td><td>{e(runtime_text(p))}</td></tr>" for p in papers)
    sections = []
    for p in papers:
        claims = "".join(
            f"<li>{_badge(c['verdict'])} <b>{e(c['id'])}</b>: {e(c['text'])}<br>"
            + (f"<code>{e(c['holds_if'])}</code> ({e(c['over_seeds'])}; {e(c['detail'])})"
               + "".join(f"<br><code>{e(n)}</code>: {e(', '.join(fmt(v) for v in vs))}"
                         for n, vs in c["values"].items() if vs)
               if c["holds_if"] else f"needs: {e(c['scale'] or '')}")
            + "</li>" for c in p["claims"])
        failures = "".join(f"<li>{_badge(FAILED)} seed {f['seed']}: {e(f['error'])}</li>"
                           for f in p["failed"])
        recon = "".join(f"<li>{e(n[2:])}</li>" for n in recon_notes(p["key"]))
        versions = ", ".join(f"{k} {v}" for k, v in sorted(p["versions"].items())[:12])
        sections.append(
            f"<section id=\"paper-{p['key']}\"><h2>{e(p['key'])}: {e(p['title'])} "
            f"{_badge(p['verdict'])}</h2>"
            f"<p>Reproduce: <code>python run.py +paper={p['key']} seed=&lt;s&gt;</code> or "
            f"<code>make reproduce PAPERS={p['key']}</code>; seeds "
            f"{e(', '.join(map(str, p['seeds'])) or 'none')}; runtime {e(runtime_text(p))}"
            f"</p><ul>{failures}{claims}</ul>"
            + (f"<p>Reconstructions of unpublished rules:</p><ul>{recon}</ul>" if recon else "")
            + f"<p class=\"caption\">{e(p['figure_caption'])}</p>{''.join(_figures(p))}"
            f"<p class=\"meta\">git {e(', '.join(p['git_sha']))}; config hash "
            f"{e(', '.join(p['config_hash']))}; {e(versions)}</p></section>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>paperlab reproduction report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
table {{ border-collapse: collapse; width: 100%; }} td, th {{ border-bottom: 1px solid #ddd;
padding: 4px 6px; text-align: left; vertical-align: top; font-size: 14px; }}
.badge {{ color: white; border-radius: 4px; padding: 1px 6px; font-size: 12px;
white-space: nowrap; }} figure {{ display: inline-block; margin: 4px; }}
img {{ max-width: 520px; }} .meta {{ color: #57606a; font-size: 12px; }}
</style></head><body>
<h1>paperlab reproduction report</h1>
<p>Runs from <code>{e(source)}</code>. Each paper's claims (<code>paper.claims</code> in
conf/paper/&lt;key&gt;.yaml) are judged on its runs' metrics.</p>
<table id="overview"><thead><tr><th>paper</th><th>claim</th><th>verdict</th><th>claims</th>
<th>headline (mean ± sd over seeds)</th><th>runtime</th></tr></thead><tbody>
{rows}
</tbody></table>
{''.join(sections)}
</body></html>
"""


def write_report(folder: Path, out: Path) -> list[dict[str, Any]]:
    papers = summarize_folder(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report_markdown(papers, str(folder)))
    (out / "index.html").write_text(report_html(papers, str(folder)))
    keep = ("key", "verdict", "claims", "headline", "runtime_s", "seeds", "git_sha")
    slim = [{k: p[k] for k in keep} for p in papers]
    for p in slim:
        p["claims"] = [{k: c[k] for k in ("id", "verdict", "detail")} for c in p["claims"]]
    (out / "summary.json").write_text(json.dumps(slim, indent=1) + "\n")
    return papers


# -- the README's table ----------------------------------------------------------------------

README_START = "<!-- results table: generated by `make readme` from docs/reproduction.json -->"
README_END = "<!-- end of results table -->"


def readme_table(summary: list[dict[str, Any]]) -> str:
    """The README's results table, from the claims in conf/paper and a summary.json."""
    from experiments.runner.sweep_summary import regimes

    by_key = {p["key"]: p for p in summary}
    lines = [README_START, "", "| paper | claim | verdict | claims | runtime | where sweeps "
             "found the claims (published sweeps, per configuration over seeds) |",
             "|---|---|---|---|---|---|"]
    for key in all_papers():
        info = paper_info(key)
        p = by_key.get(key)
        verdict = p["verdict"] if p else NOT_RUN
        tally = claims_tally(p) if p else ""
        runtime = runtime_text(p) if p else ""
        lines.append(f"| [{key}](docs/papers/{key}.md) | {info['claim']} | {verdict} | "
                     f"{tally} | {runtime} | {regimes(key)} |")
    return "\n".join(lines + ["", README_END])


def replace_readme_table(readme: str, table: str) -> str:
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(readme):
        raise ValueError("README has no results table markers")
    return pattern.sub(lambda _: table, readme)
