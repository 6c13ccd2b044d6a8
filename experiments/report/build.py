"""The reproduction report: every paper's claims judged on the runs in a folder.

``collect`` finds the runs (``results.json``) and failures (``failed.json``) under a folder
(the ``make reproduce`` sweep, a multirun, or single runs); ``summarize`` judges each paper's
claims over its seeds (``claims.judge``, each claim by its rule); ``write_report`` writes
``report.md``, ``index.html`` (one self-contained page: figures embedded, opens offline) and
``summary.json`` (what the README table is generated from, see ``readme_table``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import html
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from experiments.claims import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    JUDGED,
    NOT_RUN,
    NOT_TESTED,
    PARTIAL,
    Verdict,
    all_papers,
    claim_metrics,
    is_default,
    judge_runs,
    paper_info,
    paper_verdict,
    rule_of,
)
from experiments.claims.decide import usable_number
from experiments.claims.metrics import headline as headline_metrics
from experiments.claims.papers import ROOT
from experiments.claims.power import MAX_SEEDS, seeds_for_power
from experiments.claims.verdicts import margin_of, mean_sd
from experiments.report.registration import (
    FIRST_SEED,
    PREREGISTRATION,
    frozen_code_refusal,
    status,
)
from experiments.runner.results import read_json

PAPER_NOTES = ROOT / "docs" / "papers"
SWEEPS = ROOT / "docs" / "sweeps"
MAX_FIGURES = 3
FAILED, CORRUPT = "failed", "corrupt"
VERDICT_COLOURS = {HOLDS: "#1a7f37", CONTRADICTED: "#cf222e", PARTIAL: "#9a6700",
                   INCONCLUSIVE: "#9a6700", NOT_TESTED: "#6e7781", NOT_RUN: "#6e7781",
                   FAILED: "#cf222e", CORRUPT: "#cf222e"}
EFFECTS_FIGURE = "effects.png"


def _colour(verdict: str) -> str:
    return VERDICT_COLOURS.get(verdict.split(" (")[0], "#6e7781")


def _seed_of(overrides: list[str]) -> int | None:
    for item in overrides:
        if item.startswith("seed="):
            return int(item.split("=", 1)[1])
    return 0


def _paper_from_path(path: Path, folder: Path) -> str | None:
    """The paper a run folder belongs to when its files cannot tell (``<paper>/seed<k>``)."""
    papers = set(all_papers())
    return next((part for part in path.relative_to(folder).parts if part in papers), None)


def collect(folder: Path) -> dict[str, dict[str, list]]:
    """paper -> {"runs": [results.json, by seed, each seed once], "failed": [failed.json +
    folder], "corrupt": [{"file", "error"}], "duplicates": [a seed's other folders]} of the
    default runs under ``folder`` (runs with other
    settings are not the claims' evidence); a folder whose run finished counts once even if
    an earlier attempt failed there. A file that cannot be read (truncated, empty) is
    corrupt, filed under the paper its path names (``"?"`` when none)."""
    folder = Path(folder)
    found: dict[str, dict[str, list]] = defaultdict(
        lambda: {"runs": [], "failed": [], "corrupt": []})
    for path in sorted(folder.rglob("results.json")):
        result, error = read_json(path)
        if result is None or not isinstance(result.get("metrics"), dict):
            key = (result or {}).get("paper") or _paper_from_path(path, folder) or "?"
            found[key]["corrupt"].append({"file": str(path), "error": error or "no metrics"})
        elif "paper" in result and is_default(result.get("overrides") or []):
            result["folder"] = str(path.parent)
            found[result["paper"]]["runs"].append(result)
    for path in sorted(folder.rglob("failed.json")):
        if (path.parent / "results.json").exists():
            continue
        failure, error = read_json(path)
        if failure is None:
            key = _paper_from_path(path, folder) or "?"
            found[key]["corrupt"].append({"file": str(path), "error": error})
        elif failure.get("paper") and is_default(failure.get("overrides") or []):
            failure["folder"] = str(path.parent)
            failure["seed"] = _seed_of(failure.get("overrides") or [])
            found[failure["paper"]]["failed"].append(failure)
    for entry in found.values():
        entry["runs"], entry["duplicates"] = _once_per_seed(entry["runs"])
    return dict(found)


def _once_per_seed(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs by seed, each seed once (the first folder in path order); the other folders
    of a seed (a copied folder) are named, never counted twice."""
    kept: dict[Any, dict] = {}
    duplicates = []
    for run in sorted(runs, key=lambda r: (r.get("seed", 0), r.get("folder", ""))):
        if run.get("seed", 0) in kept:
            duplicates.append({"seed": run.get("seed", 0), "folder": run.get("folder"),
                               "counted": kept[run.get("seed", 0)].get("folder")})
        else:
            kept[run.get("seed", 0)] = run
    return list(kept.values()), duplicates


def fmt(value: float) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()
                                  and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _seeds_needed(claim: dict[str, Any], verdict: Verdict, metrics: list[dict]
                  ) -> dict[str, Any] | None:
    """For an inconclusive interval verdict: the seeds a new study would need for 80% power
    at these seeds' values, by simulating the claim's rule (experiments/claims/power.py)."""
    if verdict.verdict != INCONCLUSIVE or verdict.effect is None or claim.get("sweep"):
        return None
    return dataclasses.asdict(seeds_for_power(claim, metrics))


def _effect_record(verdict: Verdict) -> dict[str, Any] | None:
    e = verdict.effect
    return None if e is None else {**dataclasses.asdict(e), "text": e.text()}


@functools.cache
def _registered() -> dict | None:
    record, _ = read_json(PREREGISTRATION)
    return record


@contextlib.contextmanager
def before_preregistration():
    """Summaries as they are before docs/preregistration.json exists, every claim "not
    preregistered": the pilot's, which the preregistration is made from (so that making it
    again gives the same pilot, whatever record is on disk)."""
    global _registered
    kept = _registered
    _registered = lambda: None  # noqa: E731
    try:
        yield
    finally:
        _registered = kept


def _frozen_code_runs(runs: list[dict]) -> tuple[list[dict], list[str]]:
    """The runs that are evidence, and one line per confirmatory run (a seed of the
    preregistered study) whose record is not from the frozen code
    (:func:`experiments.report.registration.frozen_code_refusal`)."""
    registered = _registered()
    if not registered:
        return runs, []
    kept, refused = [], []
    for run in runs:
        why = (frozen_code_refusal(run, registered)
               if run.get("seed", -1) >= registered["first_seed"] else None)
        if why:
            refused.append(why)
        else:
            kept.append(run)
    return kept, refused


def preregistration_status(key: str, claim: dict[str, Any]) -> str:
    """The claim against docs/preregistration.json: preregistered, exploratory (changed
    after it) or not preregistered."""
    return status(key, claim, _registered())


def sweep_verdict(key: str, claim: dict[str, Any]) -> Verdict:
    """A claim judged on a published sweep (``docs/sweeps/<key>_<sweep>.json``): holds when
    it holds in every configuration (each by the claim's rule over its seeds), contradicted
    when it is contradicted in one, inconclusive otherwise."""
    name, rule = claim["sweep"], rule_of(claim)
    record, error = read_json(SWEEPS / f"{key}_{name}.json")
    if record is None:
        return Verdict(NOT_RUN, f"the sweep {name} is not published (make sweep PAPER={key} "
                       f"SWEEP={name}, then make summary PUBLISH={name})", rule=rule)
    verdicts = [(", ".join(f"{k}={v}" for k, v in row["settings"].items()),
                 row["claims"].get(claim["id"], NOT_RUN)) for row in record["rows"]]
    words = [v for _, v in verdicts]
    verdict = (HOLDS if words and all(v == HOLDS for v in words) else
               CONTRADICTED if CONTRADICTED in words else INCONCLUSIVE)
    detail = "published sweep " + name + ": " + "; ".join(f"{s} {v}" for s, v in verdicts)
    return Verdict(verdict, detail, rule=rule)


def summarize(key: str, entry: dict[str, list] | None) -> dict[str, Any]:
    """One paper's verdicts, effects, headline number and runtime over the seeds in
    ``entry``."""
    info = paper_info(key)
    runs, refused = _frozen_code_runs((entry or {}).get("runs", []))
    failed = (entry or {}).get("failed", [])
    corrupt = (entry or {}).get("corrupt", [])
    metrics = [r["metrics"] for r in runs]
    claims = []
    for claim in info.get("claims") or []:
        text = claim.get("holds_if")
        names = sorted(claim_metrics(claim))
        verdict = (sweep_verdict(key, claim) if claim.get("sweep")
                   else judge_runs(claim, runs))
        registration = preregistration_status(key, claim)
        claims.append({
            "id": claim["id"], "text": claim["text"], "holds_if": text,
            "rule": verdict.rule, "test": claim.get("test", "interval"),
            "margin": (margin_of(claim, metrics) if rule_of(claim) == "equivalence"
                       and verdict.verdict in JUDGED else claim.get("margin")),
            "margin_metric": claim.get("margin_metric"),
            "margin_source": claim.get("margin_source"),
            "margin_reason": claim.get("margin_reason"),
            "changed_after_results": claim.get("changed_after_results"),
            "scale": claim.get("scale"),
            "sanity": bool(claim.get("sanity")), "ablation": bool(claim.get("ablation")),
            "setting": claim.get("setting") or info.get("stand_in"),
            "abstract": claim.get("abstract"),
            "preregistration": registration,
            "verdict": verdict.verdict, "detail": verdict.detail,
            "per_seed": verdict.per_seed, "p_against": verdict.p_against,
            "seeds_needed": _seeds_needed(claim, verdict, metrics),
            "effect": _effect_record(verdict),
            "parts": [{"verdict": part.verdict, "text": part.effect.text()}
                      for part in verdict.parts],
            "values": {n: [m.get(n) for m in metrics] for n in names},
            "measured": {n: mean_sd(usable)[0] for n in names
                         if (usable := [float(m[n]) for m in metrics
                                        if usable_number(m.get(n))])},
        })
    primary = next(iter(headline_metrics(info, metrics[0] if metrics else {})), None)
    headline = None
    values = [m.get(primary) for m in metrics] if primary else []
    values = [float(v) for v in values if usable_number(v)]
    if values:  # a seed whose headline is null or not finite is left out of it, never a crash
        mean, sd = mean_sd(values)
        headline = {"metric": primary, "mean": mean, "sd": sd, "seeds": len(values)}
    decided_by: list[str] = []
    if runs:  # exploratory claims (changed after their preregistration) are shown only
        badge_claims = [c for c in claims
                        if counted(c) and c["preregistration"] != "exploratory"]
        badge = paper_verdict([(c["verdict"], c["p_against"]) for c in badge_claims])
        verdict = badge.text
        decided_by = [badge_claims[i]["id"] for i in badge.deciding]
    else:
        verdict = FAILED if failed else CORRUPT if corrupt else NOT_RUN
    seeds = [r.get("seed") for r in runs]
    return {
        "key": key, "title": info["title"], "claim": info["claim"],
        "study": ("confirmatory" if seeds and min(seeds) >= FIRST_SEED else "declared"),
        "figure_caption": info.get("figure", ""), "verdict": verdict, "claims": claims,
        "decided_by": decided_by,
        "stand_in": info.get("stand_in"),
        "seeds": seeds, "declared_seeds": info.get("seeds"),
        "failed": [{"seed": f["seed"], "error": f.get("error", ""), "folder": f["folder"]}
                   for f in failed],
        "corrupt": corrupt, "refused": refused,
        "duplicates": (entry or {}).get("duplicates", []),
        "headline": headline,
        "runtime_s": (mean_sd(times)[0] if (times := [r["wall_time_s"] for r in runs
                                                      if usable_number(r.get("wall_time_s"))])
                      else None),
        "git_sha": sorted({str(r.get("git_sha")) for r in runs}),
        "config_hash": sorted({str(r.get("config_hash")) for r in runs}),
        "versions": runs[0].get("versions", {}) if runs else {},
        "folders": [r["folder"] for r in runs],
    }


def summarize_folder(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Every paper's summary, and the corrupt files no paper could be told for."""
    found = collect(folder)
    unplaced = found.get("?", {}).get("corrupt", [])
    return [summarize(key, found.get(key)) for key in all_papers()], unplaced


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


def counted(claim: dict[str, Any]) -> bool:
    """A claim that counts toward its paper's badge: not a sanity check, not an ablation."""
    return not claim["sanity"] and not claim.get("ablation")


def claims_tally(paper: dict[str, Any]) -> str:
    """``2 hold, 1 inconclusive, 1 not tested here`` over the claims that count (sanity
    checks and ablations apart)."""
    words = [c["verdict"] for c in paper["claims"] if counted(c)]
    order = (HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_TESTED, NOT_RUN)
    parts = [f"{words.count(v)} {v}" for v in order if words.count(v)]
    for kind, name in (("sanity", "sanity checks"), ("ablation", "ablations")):
        apart = [c for c in paper["claims"] if c.get(kind)]
        if apart:
            parts.append(f"{name} {sum(c['verdict'] == HOLDS for c in apart)}/{len(apart)} hold")
    return ", ".join(parts)


def needs_text(sizing: dict[str, Any]) -> str:
    """What an inconclusive interval's sizing means for a new, declared study."""
    if sizing["seeds"] is not None:
        return (f"a new study declaring {sizing['seeds']} seeds would decide it with "
                f"{sizing['power']:.0%} probability at these values")
    if sizing["power"] is not None and sizing["power"] > 0:
        return f"more than {MAX_SEEDS} seeds to decide it with 80% probability at these values"
    return sizing["why"]


def verdict_word(verdict: str, stand_in: str | None) -> str:
    """The verdict as printed: a judged verdict of a default that stands in for the paper's
    setting says so (``contradicted at CPU scale (tiny-lm)``)."""
    if stand_in and verdict.split(" (")[0] in (*JUDGED, PARTIAL):
        return f"{verdict} at CPU scale ({stand_in})"
    return verdict


def margin_text(claim: dict[str, Any]) -> str:
    """``, margin 0.05 (measured: 2 * x_se; metric): reason`` for an equivalence."""
    declared, measured = claim.get("margin"), claim.get("margin_metric")
    if declared is None and not measured:
        return ""
    amount = f"{declared:.3g}" if declared is not None else ""
    if measured:
        amount += f" (measured: {measured})" if amount else f" measured: {measured}"
    source = f"; {claim['margin_source']}" if claim.get("margin_source") else ""
    return f", margin {amount}{source}: {claim.get('margin_reason') or ''}"


def claim_effect_text(claim: dict[str, Any], stand_in: str | None = None) -> str:
    """The verdict with its effect and the abstract's own magnitude:
    ``holds: acc_mpopd - acc_opd = +0.098 [+0.05, +0.15]; abstract: +6.91 points``."""
    out = verdict_word(claim["verdict"], stand_in)
    if claim["effect"]:
        out += f": {claim['effect']['text']}"
    out += margin_text(claim)
    if claim["verdict"] == INCONCLUSIVE and claim["seeds_needed"]:
        out += f" ({needs_text(claim['seeds_needed'])})"
    if claim["abstract"]:
        out += f"; abstract: {claim['abstract']}"
    return out


def report_markdown(papers: list[dict[str, Any]], source: str,
                    unplaced: list[dict[str, str]] = ()) -> str:
    lines = [f"# Reproduction report\n\nRuns from `{source}`. Verdicts are computed from each "
             "paper's `paper.claims` (conf/paper/<key>.yaml) on the runs' metrics.json: "
             "**holds**, **contradicted** (the evidence points the other way) or "
             "**inconclusive** (not shown either way at these seeds). Every claim's effect "
             f"and 95% interval over seeds: [{EFFECTS_FIGURE}]({EFFECTS_FIGURE}).\n"]
    lines += [f"- corrupt: {c['file']}, {c['error']} (no paper could be told)" for c in unplaced]
    lines += ["| paper | claim | verdict | claims | headline (mean ± sd over seeds) | runtime |",
              "|---|---|---|---|---|---|"]
    for p in papers:
        verdict = p["verdict"] + (f", {len(p['corrupt'])} corrupt" if p["corrupt"] else "")
        lines.append(f"| [{p['key']}](#paper-{p['key']}) | {p['claim']} | {verdict} | "
                     f"{claims_tally(p)} | {headline_text(p)} | {runtime_text(p)} |")
    for p in papers:
        lines += ["", f"## <a id=\"paper-{p['key']}\"></a>{p['key']}: {p['title']}", "",
                  f"Verdict: **{p['verdict']}** (seeds {', '.join(map(str, p['seeds'])) or '-'}"
                  f"; declared {p['declared_seeds']}). Reproduce: `python run.py "
                  f"+paper={p['key']} seed=<s>` or `make reproduce PAPERS={p['key']}`.", ""]
        for f in p["failed"]:
            lines.append(f"- failed run (seed {f['seed']}): {f['error']} ({f['folder']})")
        for c in p["corrupt"]:
            lines.append(f"- corrupt: {c['file']}, {c['error']}")
        lines += [f"- refused, not the preregistered code: {why}" for why in p["refused"]]
        for c in p["claims"]:
            kind = "sanity check " if c["sanity"] else "ablation " if c["ablation"] else ""
            lines.append(f"- {kind}**{c['id']}** ({claim_effect_text(c, c['setting'])}; "
                         f"{c['detail']}): {c['text']}")
            if c["holds_if"]:
                lines.append(f"  - condition `{c['holds_if']}`, rule {c['rule']}")
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


# -- the effect figure -----------------------------------------------------------------------

def effect_rows(papers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per judged claim: its effect on a common axis (relative to the reference side
    in %, or in its own units where the reference is 0) and interval, grouped by paper."""
    rows = []
    for p in papers:
        for c in p["claims"]:
            e = c["effect"]
            if e is None or c["verdict"] not in JUDGED:
                continue
            relative = e["relative_mean"] is not None
            scale = 100.0 if relative else 1.0
            mean = (e["relative_mean"] if relative else e["mean"]) * scale
            low = e["relative_low"] if relative else e["low"]
            high = e["relative_high"] if relative else e["high"]
            margin = c.get("margin") if c["rule"] == "equivalence" else None
            if margin is not None and relative:
                margin = margin / e["reference"]
            rows.append({"paper": p["key"], "claim": c["id"], "verdict": c["verdict"],
                         "rule": c["rule"], "margin": None if margin is None else margin * scale,
                         "sanity": c["sanity"], "unit": "%" if relative else "abs.",
                         "effect": mean, "low": None if low is None else low * scale,
                         "high": None if high is None else high * scale,
                         "seeds": len(e["per_seed"]), "abstract": c["abstract"] or "",
                         "label": e["label"]})
    return rows


def plot_effects(rows: list[dict[str, Any]], path: Path) -> None:
    """The forest plot: one row per claim judged by an interval (exact and exists claims
    are counts of seeds: the caller leaves them out), grouped by paper, coloured by verdict, the
    claimed side (right of 0) shaded; relative effects (% of the reference side) and
    absolute ones (own units) in separate panels, each on its own axis."""
    import matplotlib.pyplot as plt

    panels = [(unit, [r for r in rows if r["unit"] == unit]) for unit in ("%", "abs.")]
    panels = [(unit, chosen) for unit, chosen in panels if chosen]
    heights = [max(1.5, 0.22 * len(chosen) + 0.8) for _, chosen in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (unit, chosen) in zip(axes[:, 0], panels, strict=True):
        _forest_panel(ax, chosen)
        ax.set_xlabel("effect, > 0 on the claimed side, "
                      + ("% of the reference side" if unit == "%" else
                         "in the claim's own units (its reference is 0 or a threshold)")
                      + "; bars: the interval the verdict used (90% for an equivalence, "
                      "95% otherwise), grey: an equivalence's margin", fontsize=8)
    for verdict in (HOLDS, INCONCLUSIVE, CONTRADICTED):
        axes[0, 0].plot([], [], "o", color=_colour(verdict), label=verdict)
    axes[0, 0].plot([], [], "o", color="grey", mfc="white", label="sanity check")
    axes[0, 0].legend(loc="lower right", fontsize=7)
    axes[0, 0].set_title("every claim's effect (claimed side shaded)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _forest_panel(ax, rows: list[dict[str, Any]]) -> None:
    ax.axvspan(0, 1e9, color="#1a7f37", alpha=0.06, lw=0)
    ax.axvline(0, color="black", lw=0.8)
    labels = []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        colour = _colour(r["verdict"])
        if r.get("margin") is not None:  # an equivalence: the band its interval must stay in
            ax.fill_betweenx([y - 0.35, y + 0.35], -r["margin"], r["margin"],
                             color="grey", alpha=0.25, lw=0)
        if r["low"] is not None:
            ax.plot([r["low"], r["high"]], [y, y], color=colour, lw=2, alpha=0.8)
        ax.plot([r["effect"]], [y], "o", color=colour, ms=4,
                mfc="white" if r["sanity"] else colour)
        labels.append(f"{r['paper']}: {r['claim']}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1], fontsize=7)
    values = [v for r in rows for v in (r["low"], r["high"], r["effect"]) if v is not None
              and math.isfinite(v)]
    if values:
        reach = max(abs(v) for v in values)
        linear = sorted(abs(v) for v in values)[len(values) // 2] or 1.0
        ax.set_xscale("symlog", linthresh=linear)
        ax.set_xlim(-reach * 1.5 - linear, reach * 1.5 + linear)


# -- html ------------------------------------------------------------------------------------

def _badge(verdict: str) -> str:
    return (f'<span class="badge" data-verdict="{html.escape(verdict)}" '
            f'style="background:{_colour(verdict)}">{html.escape(verdict)}</span>')


def _embedded(path: Path, alt: str, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _paper_badge(paper: dict[str, Any]) -> str:
    """The paper's badge, and beside it the stand-in its default used."""
    stand_in = verdict_word(paper["verdict"], paper.get("stand_in"))[len(paper["verdict"]):]
    return _badge(paper["verdict"]) + (f" <small>{html.escape(stand_in)}</small>"
                                       if stand_in else "")


def _figures(paper: dict[str, Any]) -> list[str]:
    if not paper["folders"]:
        return []
    folder = Path(paper["folders"][0]) / "figures"
    return [_embedded(path, path.stem, f"{path.stem} (seed {paper['seeds'][0]})")
            for path in sorted(folder.glob("*.png"))[:MAX_FIGURES]]


def _claims_table(paper: dict[str, Any]) -> str:
    e = html.escape
    rows = []
    for c in paper["claims"]:
        per_seed = "<br>".join(f"<code>{e(n)}</code>: {e(', '.join(fmt(v) for v in vs))}"
                               for n, vs in c["values"].items() if vs)
        condition = (f"<code>{e(c['holds_if'])}</code> (rule {e(c['rule'])})"
                     if c["holds_if"] else f"needs: {e(c['scale'] or '')}")
        effect = e(c["effect"]["text"]) if c["effect"] else ""
        kind = " sanity" if c["sanity"] else " ablation" if c["ablation"] else ""
        setting = f" <small>({e(c['setting'])})</small>" if c["setting"] else ""
        rows.append(f"<tr><td>{_badge(c['verdict'])}{kind}{setting}</td>"
                    f"<td><b>{e(c['id'])}</b>: {e(c['text'])}<br>{condition}<br>"
                    f"<small>{e(c['detail'])}</small></td><td>{effect}</td>"
                    f"<td>{e(c['abstract'] or '')}</td><td>{per_seed}</td></tr>")
    return ("<table class=\"claims\"><thead><tr><th>verdict</th><th>claim</th><th>effect "
            "[95% CI]</th><th>abstract</th><th>per seed</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def report_html(papers: list[dict[str, Any]], source: str, effects: Path | None = None,
                unplaced: list[dict[str, str]] = ()) -> str:
    e = html.escape
    rows = "\n".join(
        f"<tr data-paper=\"{p['key']}\"><td><a href=\"#paper-{p['key']}\">{p['key']}</a></td>"
        f"<td>{e(p['claim'])}</td><td>{_paper_badge(p)}"
        + (f" {_badge(CORRUPT)}" if p["corrupt"] else "") + "</td>"
        f"<td>{' '.join(_badge(c['verdict']) for c in p['claims'] if counted(c))}</td>"
        f"<td>{e(headline_text(p))}</td><td>{e(runtime_text(p))}</td></tr>" for p in papers)
    sections = []
    for p in papers:
        problems = "".join(f"<li>{_badge(FAILED)} seed {f['seed']}: {e(f['error'])}</li>"
                           for f in p["failed"])
        problems += "".join(f"<li>{_badge(CORRUPT)} {e(c['file'])}: {e(c['error'])}</li>"
                            for c in p["corrupt"])
        problems += "".join(f"<li>refused, not the preregistered code: {e(why)}</li>"
                            for why in p["refused"])
        recon = "".join(f"<li>{e(n[2:])}</li>" for n in recon_notes(p["key"]))
        versions = ", ".join(f"{k} {v}" for k, v in sorted(p["versions"].items())[:12])
        sections.append(
            f"<section id=\"paper-{p['key']}\"><h2>{e(p['key'])}: {e(p['title'])} "
            f"{_paper_badge(p)}</h2>"
            f"<p>Reproduce: <code>python run.py +paper={p['key']} seed=&lt;s&gt;</code> or "
            f"<code>make reproduce PAPERS={p['key']}</code>; seeds "
            f"{e(', '.join(map(str, p['seeds'])) or 'none')} (declared "
            f"{e(str(p['declared_seeds']))}); runtime {e(runtime_text(p))}</p>"
            + (f"<ul>{problems}</ul>" if problems else "") + _claims_table(p)
            + (f"<p>Reconstructions of unpublished rules:</p><ul>{recon}</ul>" if recon else "")
            + f"<p class=\"caption\">{e(p['figure_caption'])}</p>{''.join(_figures(p))}"
            f"<p class=\"meta\">git {e(', '.join(p['git_sha']))}; config hash "
            f"{e(', '.join(p['config_hash']))}; {e(versions)}</p></section>")
    figure = (_embedded(effects, "effects", "every claim's effect and 95% interval over seeds")
              if effects is not None and effects.is_file() else "")
    unplaced_items = "".join(f"<li>{_badge(CORRUPT)} {e(c['file'])}: {e(c['error'])}</li>"
                             for c in unplaced)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>paperlab reproduction report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
table {{ border-collapse: collapse; width: 100%; }} td, th {{ border-bottom: 1px solid #ddd;
padding: 4px 6px; text-align: left; vertical-align: top; font-size: 14px; }}
.badge {{ color: white; border-radius: 4px; padding: 1px 6px; font-size: 12px;
white-space: nowrap; }} figure {{ display: inline-block; margin: 4px; }}
img {{ max-width: 520px; }} #effects img {{ max-width: 100%; }}
.meta {{ color: #57606a; font-size: 12px; }} .claims td {{ font-size: 13px; }}
</style></head><body>
<h1>paperlab reproduction report</h1>
<div id="effects">{figure}</div>
<p>Runs from <code>{e(source)}</code>. Each paper's claims (<code>paper.claims</code> in
conf/paper/&lt;key&gt;.yaml) are judged on its runs' metrics: <b>holds</b>, <b>contradicted</b>
(the evidence points the other way) or <b>inconclusive</b> (not shown either way at these
seeds; report.md says how many seeds a new study would need).</p>
{f"<ul>{unplaced_items}</ul>" if unplaced_items else ""}
<table id="overview"><thead><tr><th>paper</th><th>claim</th><th>verdict</th><th>claims</th>
<th>headline (mean ± sd over seeds)</th><th>runtime</th></tr></thead><tbody>
{rows}
</tbody></table>
{''.join(sections)}
</body></html>
"""


def _slim(paper: dict[str, Any]) -> dict[str, Any]:
    keep = ("key", "verdict", "decided_by", "stand_in", "headline", "runtime_s", "seeds",
            "declared_seeds", "git_sha", "study")
    slim = {k: paper[k] for k in keep}
    slim["claims"] = [{k: c[k] for k in ("id", "verdict", "detail", "rule", "sanity",
                                         "ablation", "setting", "p_against", "measured",
                                         "values",
                                         "abstract", "seeds_needed", "effect", "parts",
                                         "margin", "changed_after_results",
                                         "preregistration")}
                      for c in paper["claims"]]
    slim["corrupt"] = len(paper["corrupt"])
    return slim


def write_report(folder: Path, out: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """report.md, index.html (opening with the effect figure), effects.png and summary.json
    in ``out``; returns the papers' summaries and the corrupt files no paper was told for."""
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
    (out / "summary.json").write_text(json.dumps([_slim(p) for p in papers], indent=1) + "\n")
    return papers, unplaced


def log_to_wandb(papers: list[dict[str, Any]], out: Path, source: str) -> None:
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


# -- the README's table ----------------------------------------------------------------------

README_START = "<!-- results table: generated by `make readme` from docs/reproduction.json -->"
README_END = "<!-- end of results table -->"


def readme_claims(paper: dict[str, Any]) -> str:
    """The README's claims cell: each claim's verdict (sanity checks marked) and effect, the
    comparisons that decided a conjunction, and the abstract's magnitude where it states
    one."""
    from experiments.claims.ledger import read_record

    ledger, parts = read_record(), []
    for c in paper["claims"]:
        setting = c.get("setting", paper.get("stand_in"))
        word = verdict_word(c["verdict"], None if c["sanity"] else setting)
        kind = "(sanity check) " if c["sanity"] else "(ablation) " if c.get("ablation") else ""
        text = f"{c['id']} {kind}{word}"
        effect = c.get("effect")
        if c["rule"] in ("exact", "exists") and c["verdict"] in JUDGED:
            text += f" ({c['detail']})"  # a count of seeds: no interval to show
        elif effect and c["verdict"] in JUDGED:
            level = "" if effect["level"] == 0.95 else f" {effect['level']:.0%}"
            interval = (f"{level} [{effect['low']:+.3g}, {effect['high']:+.3g}]"
                        if effect["low"] is not None else "")
            relative = (f", {100 * effect['relative_mean']:+.3g}%"
                        if effect["relative_mean"] is not None else "")
            margin = f", margin {c['margin']:.3g}" if c.get("margin") is not None else ""
            text += f" {effect['mean']:+.3g}{interval}{relative}{margin}"
        if c.get("measured"):
            text += " (measured: " + ", ".join(f"{n} {fmt(v)}" for n, v in
                                               c["measured"].items()) + ")"
        history = ledger.get(paper["key"], {}).get(c["id"])
        if history:
            text += (f" (changed after results: [{len(history)} time"
                     f"{'s' if len(history) > 1 else ''}, last after {history[-1]['verdict']} "
                     f"at {history[-1]['after']}](docs/papers/{paper['key']}.md))")
        if c.get("preregistration") == "exploratory":
            text += " (exploratory: changed after preregistration, not counted)"
        if c.get("parts") and c["verdict"] != HOLDS:
            text += " (" + "; ".join(f"{part['text']}: {part['verdict']}"
                                     for part in c["parts"]) + ")"
        if c["verdict"] == INCONCLUSIVE and c.get("seeds_needed"):
            text += f" ({needs_text(c['seeds_needed'])})"
        if c.get("abstract"):
            text += f" (abstract: {c['abstract']})"
        parts.append(text)
    return "<br>".join(parts)


def timing_text(timing: dict[str, Any] | None) -> str:
    """The study's job-minutes and wall time, from its records
    (:func:`experiments.runner.records.study_timing`)."""
    if not timing or not timing.get("jobs"):
        return "No timing was recorded with this reproduction."
    minutes = timing["job_minutes"]
    top = ", ".join(f"{k} {v:.1f}" for k, v in list(minutes.items())[:5])
    return (f"Its {timing['jobs']} jobs took {sum(minutes.values()):.0f} job-minutes and "
            f"{timing['wall_min']:.1f} min of wall time on 2 cores (the minutes some job was "
            "running, from the records' start times and durations, summed over its rounds); "
            f"the longest papers, in job-minutes: {top}.")


def readme_table(published: dict[str, Any]) -> str:
    """The README's results table and timing sentence, from the claims in conf/paper and
    the published reproduction (docs/reproduction.json: the papers' summary and the
    timing)."""
    from experiments.runner.sweep_summary import regimes

    by_key = {p["key"]: p for p in published["papers"]}
    pilot = {p["key"]: p for p in (published.get("pilot") or [])}
    lines = [README_START, "", study_text(published), "", timing_text(published.get("timing")),
             "", "| paper | claim | verdict | claims: verdict, effect [interval over seeds] | "
             "seeds | pilot (development seeds) | runtime | where sweeps found the claims "
             "(published sweeps, per configuration over seeds) |",
             "|---|---|---|---|---|---|---|---|"]
    for key in all_papers():
        info = paper_info(key)
        p = by_key.get(key)
        verdict = verdict_word(p["verdict"], p.get("stand_in")) if p else NOT_RUN
        if p and p.get("decided_by"):
            verdict += f" (decided by {', '.join(p['decided_by'])})"
        claims = readme_claims(p) if p else ""
        seeds = seed_range_text(p["seeds"]) if p else ""
        earlier = (f"{pilot[key]['verdict']} ({len(pilot[key]['seeds'])} seeds)"
                   if key in pilot else "")
        runtime = runtime_text(p) if p else ""
        lines.append(f"| [{key}](docs/papers/{key}.md) | {info['claim']} | {verdict} | "
                     f"{claims} | {seeds} | {earlier} | {runtime} | {regimes(key)} |")
    return "\n".join(lines + ["", README_END])


def seed_range_text(seeds: list[int]) -> str:
    """``5 (10000-10004)`` for a contiguous range, the count alone for 0..n-1."""
    if not seeds or seeds == list(range(len(seeds))):
        return str(len(seeds))
    return f"{len(seeds)} ({min(seeds)}-{max(seeds)})"


def study_text(published: dict[str, Any]) -> str:
    """Which study the table shows: the confirmatory one (fresh seeds, claims frozen by the
    preregistration at its commit), or the quick study at the declared seeds."""
    studies = {p.get("study", "declared") for p in published["papers"]}
    if studies == {"confirmatory"}:
        registered = published.get("preregistration") or {}
        statuses = [c.get("preregistration") for p in published["papers"] for c in p["claims"]]
        records = published.get("records")
        return ("This table is the **confirmatory study**: every paper on fresh seeds (from "
                f"{registered.get('first_seed', FIRST_SEED)}), its claims and seed counts "
                f"frozen in docs/preregistration.json at {registered.get('commit', '')[:7]} "
                "before those runs (`make reproduce STUDY=confirmatory`)"
                + (f", judged from the records committed in {records}" if records else "")
                + "; the pilot column is the study at the development seeds the counts came "
                f"from (docs/pilot.json). {statuses.count('preregistered')} of "
                f"{len(statuses)} claims are as preregistered; "
                f"{statuses.count('exploratory')} changed after it are marked exploratory "
                "and not counted.")
    text = ("This table is the study at each paper's declared seeds from 0 (`make "
            "reproduce`), the development seeds.")
    if PREREGISTRATION.is_file():
        registered = json.loads(PREREGISTRATION.read_text())
        jobs = sum(p["seeds"] for p in registered["papers"].values())
        text += (f" The confirmatory study ({jobs} jobs on fresh seeds from "
                 f"{registered['first_seed']}) is preregistered in docs/preregistration.json "
                 f"at {registered['commit'][:7]}, from the pilot in docs/pilot.json; it is not "
                 "published yet.")
    return text


def replace_readme_table(readme: str, table: str) -> str:
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(readme):
        raise ValueError("README has no results table markers")
    return pattern.sub(lambda _: table, readme)
