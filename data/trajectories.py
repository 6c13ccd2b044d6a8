"""Trajectory sources for per-step uncertainty: synthetic processes whose success-probability
trace q_t = P(Y = 1 | H_t) is known exactly, and a loader for real agent logs (JSONL)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError


@dataclass
class Trajectories:
    """Padded trajectories: ``q`` (n, T) exact trace (or the logged forecast for real logs),
    ``mask`` (n, T) observed steps, ``y`` (n,) outcomes, ``censor`` (n,) administrative
    censoring time Z (number of observed steps; >= length when uncensored)."""

    q: np.ndarray
    mask: np.ndarray
    y: np.ndarray
    censor: np.ndarray

    def split(self, frac: float) -> tuple[Trajectories, Trajectories]:
        k = int(len(self.y) * frac)
        first = Trajectories(self.q[:k], self.mask[:k], self.y[:k], self.censor[:k])
        second = Trajectories(self.q[k:], self.mask[k:], self.y[k:], self.censor[k:])
        return first, second


def _pad(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    horizon = max(len(r) for r in rows)
    q = np.full((len(rows), horizon), 0.5)
    mask = np.zeros((len(rows), horizon), dtype=bool)
    for i, r in enumerate(rows):
        q[i, : len(r)] = r
        mask[i, : len(r)] = True
    return q, mask


def gamblers_ruin(n: int, up: int, down: int, rng: np.random.Generator) -> tuple:
    """Symmetric +-1 walk from 0 until it hits +up (Y = 1) or -down (Y = 0).
    q_t = (X_t + down) / (up + down) (optional stopping of the martingale X_t)."""
    rows, ys = [], []
    for _ in range(n):
        x, path = 0, [0]
        while -down < x < up:
            x += 1 if rng.random() < 0.5 else -1
            path.append(x)
        rows.append((np.array(path) + down) / (up + down))
        ys.append(int(x == up))
    q, mask = _pad(rows)
    return q, mask, np.array(ys)


def polya_urn(n: int, red: float, blue: float, horizon: int, rng: np.random.Generator
              ) -> tuple:
    """Polya urn: draw a ball, return it with one more of its colour, ``horizon`` times;
    Y = colour of one more draw. q_t = current red fraction (a martingale)."""
    reds = np.full(n, float(red))
    total = np.full(n, float(red + blue))
    q = np.empty((n, horizon + 1))
    q[:, 0] = reds / total
    for t in range(horizon):
        drew_red = rng.random(n) < reds / total
        reds += drew_red
        total += 1
        q[:, t + 1] = reds / total
    y = (rng.random(n) < q[:, -1]).astype(int)
    return q, np.ones_like(q, dtype=bool), y


def hidden_bernoulli(n: int, alpha: float, beta: float, horizon: int,
                     rng: np.random.Generator) -> tuple:
    """theta ~ Beta(alpha, beta); observe X_t ~ Bernoulli(theta); Y ~ Bernoulli(theta).
    q_t = (alpha + sum_{s<=t} X_s) / (alpha + beta + t) (the Beta posterior mean)."""
    theta = rng.beta(alpha, beta, size=n)
    x = rng.random((n, horizon)) < theta[:, None]
    successes = np.concatenate([np.zeros((n, 1)), np.cumsum(x, axis=1)], axis=1)
    q = (alpha + successes) / (alpha + beta + np.arange(horizon + 1))
    y = (rng.random(n) < theta).astype(int)
    return q, np.ones_like(q, dtype=bool), y


def synthetic_trajectories(cfg, rng: np.random.Generator) -> Trajectories:
    """Build the process named by ``cfg.name``; censoring time Z ~ Uniform{1..max_len}."""
    if cfg.name == "gamblers_ruin":
        q, mask, y = gamblers_ruin(cfg.n, cfg.up, cfg.down, rng)
    elif cfg.name == "polya_urn":
        q, mask, y = polya_urn(cfg.n, cfg.red, cfg.blue, cfg.horizon, rng)
    elif cfg.name == "hidden_bernoulli":
        q, mask, y = hidden_bernoulli(cfg.n, cfg.alpha, cfg.beta, cfg.horizon, rng)
    else:
        raise UserError(f"unknown trajectory process '{cfg.name}'")
    censor = rng.integers(1, mask.shape[1] + 1, size=len(y))
    return Trajectories(q, mask, y, censor)


def load_agent_log(path: str) -> Trajectories:
    """Real agent traces from JSONL, one line per step:
    ``{"trajectory_id": ..., "step": int, "probability": float, "outcome": 0|1,
    "censor_time": int | null}``; ``q`` then holds the logged forecasts (no oracle)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"dataset.path={path} does not exist (JSONL agent log expected)")
    steps: dict[str, list] = defaultdict(list)
    meta: dict[str, tuple] = {}
    with file.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                tid = str(rec["trajectory_id"])
                steps[tid].append((int(rec["step"]), float(rec["probability"])))
                meta[tid] = (int(rec["outcome"]), rec.get("censor_time"))
            except (KeyError, ValueError, TypeError) as err:
                raise UserError(f"{path}:{line_no}: bad record ({err}); need trajectory_id, "
                                "step, probability, outcome") from None
    rows = [np.array([p for _, p in sorted(steps[t])]) for t in steps]
    q, mask = _pad(rows)
    y = np.array([meta[t][0] for t in steps])
    censor = np.array([meta[t][1] if meta[t][1] is not None else len(r)
                       for t, r in zip(steps, rows, strict=True)])
    return Trajectories(q, mask, y, censor)


def write_example_agent_log(path: Path, n: int = 40, seed: int = 0) -> None:
    """A small example log in the loader's format (gambler's-ruin traces, lightly noised)."""
    rng = np.random.default_rng(seed)
    q, mask, y = gamblers_ruin(n, 3, 3, rng)
    with path.open("w") as f:
        for i in range(n):
            length = int(mask[i].sum())
            censor = int(rng.integers(1, length + 1)) if rng.random() < 0.25 else None
            for t in range(length):
                p = float(np.clip(q[i, t] + 0.05 * rng.standard_normal(), 0.01, 0.99))
                f.write(json.dumps({"trajectory_id": f"traj-{i:03d}", "step": t,
                                    "probability": round(p, 4), "outcome": int(y[i]),
                                    "censor_time": censor}) + "\n")
