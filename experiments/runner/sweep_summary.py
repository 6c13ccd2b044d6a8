"""Sweep summaries: ``summary.csv``, ``summary.md`` and ``summary.png`` at a sweep root.

Made from the jobs' ``results.json`` files only, so it works for every launcher (basic,
joblib, submitit) and can be rebuilt later with ``make report SWEEP_DIR=...``. Jobs that
differ only in ``seed`` form one configuration: mean ± std over seeds, and each of the
paper's claims judged over those seeds as the report judges the default's (``claim_<id>``
columns), so a sweep shows in which configurations a claim holds.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from common.errors import UserError
from experiments.claims import (
    NOT_APPLICABLE,
    NOT_TESTED,
    composed_claims,
    find_paper,
    judge_runs,
)
from experiments.claims.metrics import headline
from experiments.runner.results import REFUSED, read_json, write_csv

log = logging.getLogger("paperlab")
_NOT_A_SETTING = ("seed", "+paper", "paper", "+sweep", "sweep", "logger", "hydra")
last_sweep: dict[str, Any] = {}  # the latest sweep of this process: its folder, failed jobs


def _settings(overrides: list[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not key.startswith(_NOT_A_SETTING):
            out[key.lstrip("+~")] = value
    return out


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _read_results(sweep_dir: Path) -> tuple[list[dict], list[tuple[Path, str]]]:
    """The jobs' results, and the files that cannot be read (path, why)."""
    results, corrupt = [], []
    for path in sorted(sweep_dir.rglob("results.json")):
        result, error = read_json(path)
        if result is None or not isinstance(result.get("metrics"), dict):
            corrupt.append((path, error or "no metrics"))
        else:
            results.append({**result, "folder": str(path.parent)})
    return results, corrupt


def summarize_sweep(sweep_dir: Path, paper=None, title: str | None = None,
                    claims: list[dict] | None = None,
                    fits: dict[str, dict] | None = None) -> Path | None:
    """Aggregate ``sweep_dir/**/results.json``; returns the summary.csv path (None if empty).

    ``paper``: the paper's ``paper`` block; the table shows the headline metrics it declares
    (``paper.metrics``; else the jobs' first metrics) and marks the best configuration in
    bold where a side is better; the figure plots the first that differs between
    configurations.
    ``fits``: name -> {metric, over}, log-log slopes written to ``fits.json`` and the table's
    notes (the paper's ``sweep_fits``)."""
    results, corrupt = _read_results(sweep_dir)
    failed = sorted(sweep_dir.rglob("failed.json")) + sorted((sweep_dir / REFUSED).glob("*.json"))
    last_sweep.update(dir=sweep_dir, jobs=len(results) + len(failed), failed=failed,
                      corrupt=corrupt)
    if not results:
        log.warning("sweep %s: no job finished (%d failed, %d corrupt)", sweep_dir,
                    len(failed), len(corrupt))
        return None
    groups: dict[tuple, list[dict]] = defaultdict(list)
    several_papers = len({res.get("paper") for res in results}) > 1  # make reproduce's root
    for res in results:
        settings = _settings(res.get("overrides", []))
        if several_papers:  # a row per paper, never two papers' seeds in one
            settings = {"paper": str(res.get("paper")), **settings}
        groups[tuple(sorted(settings.items()))].append(res)
    swept = _swept([dict(key) for key in groups])
    metric_names = sorted({m for res in results for m, v in res["metrics"].items()
                           if isinstance(v, int | float)})

    rows: list[dict[str, Any]] = []
    for key, members in groups.items():
        row: dict[str, Any] = dict(key)
        row["n_seeds"] = len(members)
        for name in metric_names:
            vals = np.array([m["metrics"].get(name) for m in members
                             if m["metrics"].get(name) is not None], dtype=float)
            row[f"{name}_mean"] = float(vals.mean()) if vals.size else math.nan
            row[f"{name}_std"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
        for claim in claims or []:
            row[f"claim_{claim['id']}"] = judge_runs(claim, members).verdict
        rows.append(row)
    rows.sort(key=lambda r: tuple(_sort_key(r.get(k, "")) for k in swept))
    csv_path = sweep_dir / "summary.csv"
    tmp = sweep_dir / f".summary.{os.getpid()}"  # jobs may finish concurrently: write, rename
    write_csv(tmp.with_suffix(".csv"), rows)
    tmp.with_suffix(".csv").replace(csv_path)

    chosen = headline(paper, metric_names) if paper else {}
    primary = {m: up for m, up in chosen.items() if up is not None}
    shown = list(chosen)[:8] or [m for m in metric_names if not m.startswith("time_")][:8]
    verdicts = [f"claim_{c['id']}" for c in claims or []]
    lines = [f"# {title or sweep_dir.name}", "",
             *_table(rows, swept, shown, verdicts, primary)]
    if primary:
        lines.append("\nbold: best configuration (" + ", ".join(
            f"{m}: {'higher' if up else 'lower'} is better" for m, up in primary.items()) + ")")
    fitted = loglog_slopes(rows, fits or {})
    (sweep_dir / "fits.json").write_text(json.dumps(fitted, indent=1) + "\n")
    for name, fit in fitted.items():
        lines.append("\n" + _fit_text(name, fit))
    if failed:
        lines.append(f"\n{len(failed)} job(s) failed: "
                     + ", ".join(str(p.relative_to(sweep_dir)) for p in failed))
    for path, error in corrupt:
        lines.append(f"\ncorrupt: {path.relative_to(sweep_dir)}, {error} (left out)")
    tmp.with_suffix(".md").write_text("\n".join(lines) + "\n")
    tmp.with_suffix(".md").replace(sweep_dir / "summary.md")
    if shown:  # the first metric that differs between configurations (else the first)
        plotted = next((m for m in shown if len({r[f"{m}_mean"] for r in rows}) > 1), shown[0])
        _plot(tmp.with_suffix(".png"), rows, swept, plotted, title or sweep_dir.name,
              primary.get(plotted))
        tmp.with_suffix(".png").replace(sweep_dir / "summary.png")
    log.info("sweep summary: %s (%d jobs, %d configurations, %d failed)",
             csv_path, len(results), len(rows), len(failed))
    return csv_path


def loglog_slopes(rows: list[dict], fits: dict[str, dict]) -> dict[str, dict]:
    """Least-squares slopes of log(metric mean) against log(setting) over the rows, for the
    fits whose setting is numeric and takes at least two values (others are left out)."""
    out = {}
    for name, fit in fits.items():
        points = sorted((_number(str(r.get(fit["over"], ""))), r.get(f"{fit['metric']}_mean"))
                        for r in rows)
        points = [(x, y) for x, y in points
                  if x is not None and x > 0 and y is not None and y > 0]
        if len({x for x, _ in points}) < 2:
            continue
        x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
        out[name] = {"metric": fit["metric"], "over": fit["over"],
                     "slope": float(np.polyfit(x, y, 1)[0]),
                     "x": [p[0] for p in points], "y": [p[1] for p in points]}
        if fit.get("threshold") is not None:
            out[name]["threshold"] = fit["threshold"]
            out[name]["first_reaching"] = next(
                (px for px, py in points if py >= fit["threshold"]), None)
    return out


def _fit_text(name: str, fit: dict) -> str:
    text = (f"{name} = {fit['slope']:.3g}: the log-log slope of {fit['metric']} against "
            f"{fit['over']} ({fit['x'][0]:g} to {fit['x'][-1]:g})")
    if "threshold" in fit:
        reached = fit["first_reaching"]
        text += (f"; it reaches {fit['threshold']:g} at {fit['over']}={reached:g}"
                 if reached is not None else
                 f"; it stays below {fit['threshold']:g} (at most {max(fit['y']):.3g})")
    return text


def _swept(configurations: list[dict[str, str]]) -> list[str]:
    """The settings that differ between configurations (all of them when none does)."""
    values: dict[str, set] = defaultdict(set)
    for configuration in configurations:
        for k, v in configuration.items():
            values[k].add(v)
    return sorted(k for k, vs in values.items() if len(vs) > 1) or sorted(values)


def _table(rows: list[dict], swept: list[str], shown: list[str], verdicts: list[str],
           primary: dict[str, bool]) -> list[str]:
    """The summary's markdown table: settings, seeds, mean ± std (the best in bold), and
    the claims' verdicts."""
    header = swept + ["n_seeds"] + shown + verdicts
    best = {m: _best_row(rows, m, primary[m]) for m in primary if len(rows) > 1}
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        cells = [str(row.get(k, "")) for k in swept] + [str(row["n_seeds"])]
        for m in shown:
            cell = f"{row[f'{m}_mean']:.4g} ± {row[f'{m}_std']:.2g}"
            cells.append(f"**{cell}**" if best.get(m) == i else cell)
        lines.append("| " + " | ".join(cells + [row[v] for v in verdicts]) + " |")
    return lines


def _best_row(rows: list[dict], metric: str, higher_is_better: bool) -> int | None:
    values = [r[f"{metric}_mean"] for r in rows]
    finite = [(v, i) for i, v in enumerate(values) if math.isfinite(v)]
    if not finite:
        return None
    return (max if higher_is_better else min)(finite)[1]


def _sort_key(value: Any) -> tuple:
    num = _number(str(value))
    return (0, num, "") if num is not None else (1, 0.0, str(value))


def _plot(path: Path, rows: list[dict], swept: list[str], metric: str, title: str,
          higher_is_better: bool | None) -> None:
    """The comparison figure: metric (mean ± std) vs the first numeric swept setting."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    numeric = [k for k in swept if all(_number(str(r.get(k, ""))) is not None for r in rows)]
    fig, ax = plt.subplots(figsize=(6, 4))
    if numeric:
        x_key = numeric[0]
        others = [k for k in swept if k != x_key]
        lines: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            lines[", ".join(f"{k}={r.get(k)}" for k in others) or metric].append(r)
        for label, members in lines.items():
            members.sort(key=lambda r: float(r[x_key]))
            xs = [float(r[x_key]) for r in members]
            ax.errorbar(xs, [r[f"{metric}_mean"] for r in members],
                        yerr=[r[f"{metric}_std"] for r in members], marker="o",
                        capsize=3, label=label)
        ax.set_xlabel(x_key)
        xs_all = [float(r[x_key]) for r in rows]
        if min(xs_all) > 0 and max(xs_all) / min(xs_all) > 20:
            ax.set_xscale("log")
        if all(float(x).is_integer() for x in xs_all):
            ax.set_xticks(sorted(set(xs_all)), [str(int(x)) for x in sorted(set(xs_all))])
            ax.xaxis.set_minor_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    else:
        labels = [", ".join(f"{k}={r.get(k)}" for k in swept) for r in rows]
        ax.bar(range(len(rows)), [r[f"{metric}_mean"] for r in rows],
               yerr=[r[f"{metric}_std"] for r in rows], capsize=3)
        ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=7)
    values = [r[f"{metric}_mean"] for r in rows]
    if values and min(values) > 0 and max(values) / min(values) > 20:
        ax.set_yscale("log")
    better = {True: ", higher is better", False: ", lower is better"}.get(higher_is_better, "")
    ax.set_ylabel(f"{metric} (mean ± std over seeds{better})", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


class SweepSummary(Callback):
    """Hydra callback: refresh the sweep summary after every job and when the sweep ends.

    Rebuilt as each job ends (so an interrupted sweep still has one) and when the sweep
    ends, which also prints the failed jobs' ``failed.json`` paths.
    """

    def _refresh(self, config: DictConfig) -> None:
        paper = config.get("paper") or {}
        sweep = config.hydra.runtime.choices.get("sweep")
        title = f"{paper.get('key', 'sweep')}: " + (f"sweep {sweep}" if sweep else
                                                     Path(config.hydra.sweep.dir).name)
        try:
            fits = paper.get("sweep_fits")
            fits = OmegaConf.to_container(fits, resolve=True) if fits else {}
            summarize_sweep(Path(config.hydra.sweep.dir), paper, title, composed_claims(config),
                            fits)
        except Exception as err:  # noqa: BLE001 - a summary bug must not hide job results
            log.warning("could not write the sweep summary: %s", err)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        if str(config.hydra.mode) == "RunMode.MULTIRUN":
            self._refresh(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A rerun of the sweep judges its own refusals, not an earlier run's; the sweep's
        folder is known from here on (an interrupted sweep records its jobs there)."""
        shutil.rmtree(Path(config.hydra.sweep.dir) / REFUSED, ignore_errors=True)
        last_sweep["dir"] = Path(config.hydra.sweep.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._refresh(config)
        failed = last_sweep.get("failed") or []
        if failed:
            log.error("%d of %d jobs failed; see:\n%s", len(failed), last_sweep["jobs"],
                      "\n".join(f"  {p}" for p in failed))


def _paper_of(sweep_dir: Path) -> str | None:
    """The paper the sweep's jobs ran (None before any job finished)."""
    for path in sorted(sweep_dir.rglob("results.json")):
        result, _ = read_json(path)
        if result is not None and result.get("paper"):
            return result["paper"]
    return None


def rebuild(sweep_dir: Path) -> Path | None:
    """The summary again from the jobs' results, with the headline metrics and claims of the
    paper they ran (``conf/paper/<key>.yaml``)."""
    key = _paper_of(sweep_dir)
    info = find_paper(key).info if key else {}
    return summarize_sweep(sweep_dir, info, f"{key}: {sweep_dir.name}" if key else None,
                           info.get("claims"), info.get("sweep_fits"))


PUBLISHED = Path("docs/sweeps")  # published sweep verdicts (the README's sweep column)


def publish(sweep_dir: Path, name: str, out: Path = PUBLISHED) -> Path:
    """Copy a sweep's summary (rebuilt from its jobs) to ``out/<paper>_<name>.md`` and its
    per-configuration claim verdicts to ``out/<paper>_<name>.json``, for the docs and the
    README, which say where each claim holds."""
    import csv

    if rebuild(sweep_dir) is None:
        raise UserError(f"no finished job under {sweep_dir}: nothing to publish")
    if last_sweep.get("corrupt"):
        raise UserError(f"{len(last_sweep['corrupt'])} corrupt results.json under "
                        f"{sweep_dir}; rerun those jobs before publishing")
    key = _paper_of(sweep_dir)
    with (sweep_dir / "summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    every = list(rows[0])[:list(rows[0]).index("n_seeds")]  # the settings columns
    settings = _swept([{k: r[k] for k in every} for r in rows])
    record = {"paper": key, "sweep": name, "settings": settings, "rows": [
        {"settings": {k: r[k] for k in settings}, "n_seeds": int(r["n_seeds"]),
         "claims": {c[len("claim_"):]: v for c, v in r.items() if c.startswith("claim_")}}
        for r in rows], "fits": json.loads((sweep_dir / "fits.json").read_text())}
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{key}_{name}"
    target.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    command = f"make sweep PAPER={key} SWEEP={name}"
    target.with_suffix(".md").write_text(
        (sweep_dir / "summary.md").read_text().replace(
            f"# {key}: {sweep_dir.name}", f"# {key}: sweep {name}", 1)
        + f"\nMade by `{command}`; published with `make summary SWEEP_DIR=<its folder> "
          f"PUBLISH={name}`.\n")
    log.info("published %s(.md, .json)", target)
    return target


def regimes(key: str, folder: Path = PUBLISHED) -> str:
    """Per published sweep of paper ``key``: the configurations where each claim holds
    (\"holds in none\" when it holds nowhere; claims whose metrics the sweep does not write are
    left out) and its fits, as one line of text."""
    parts = []
    for path in sorted(folder.glob(f"{key}_*.json")):
        record, error = read_json(path)
        if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
            raise UserError(f"{path} cannot be read ({error or 'no rows'}): publish that sweep "
                            "again (make summary SWEEP_DIR=<its folder> PUBLISH=<name>) or "
                            "restore it from git")
        rows = record["rows"]
        claims = list(rows[0]["claims"]) if rows else []
        found = []
        for claim in claims:
            if all(r["claims"][claim].startswith("error") or r["claims"][claim] in (
                    NOT_APPLICABLE, NOT_TESTED) for r in rows):
                continue  # the sweep's runs do not write the claim's metrics
            where = [", ".join(f"{k}={v}" for k, v in r["settings"].items())
                     for r in rows if r["claims"][claim] == "holds"]
            found.append(f"{claim} " + (
                f"holds in all {len(rows)}" if len(where) == len(rows) else
                f"holds at {'; '.join(where)}" if where else f"holds in none of {len(rows)}"))
        found += [_fit_text(name, fit) for name, fit in record.get("fits", {}).items()]
        parts.append(f"[{record['sweep']}](docs/sweeps/{path.stem}.md): " + ", ".join(found))
    return "<br>".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``make summary``: rebuild a sweep's summary (and publish it); one ``error:`` line and
    exit code 1 for a folder that is not a sweep, one without a finished job, or a corrupt
    job when publishing; exit code 1 too when a job is corrupt (named, left out)."""
    import argparse

    parser = argparse.ArgumentParser(description="rebuild (and publish) a sweep summary")
    parser.add_argument("sweep_dir", type=Path, nargs="?")
    parser.add_argument("--publish", metavar="NAME",
                        help=f"also write {PUBLISHED}/<paper>_NAME.md and .json")
    args = parser.parse_args(argv)
    try:
        if args.sweep_dir is None:
            raise UserError("no sweep to summarize: run make sweep first, or give "
                            "SWEEP_DIR=<a sweep folder>")
        if not args.sweep_dir.is_dir():
            raise UserError(f"SWEEP_DIR={args.sweep_dir} is not a folder")
        if args.publish:
            publish(args.sweep_dir, args.publish)
        elif rebuild(args.sweep_dir) is None:
            raise UserError(f"no finished job under {args.sweep_dir}")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        for path, error in last_sweep.get("corrupt") or []:
            print(f"corrupt: {path}, {error}")
    return 1 if last_sweep.get("corrupt") else 0  # after the other jobs' summary was written


if __name__ == "__main__":
    sys.exit(main())
