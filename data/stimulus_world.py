"""A procedural stimulus world with known concepts, and a simulated voxel population.

Each 64 x 64 RGB image shows 1-3 of 12 concepts (coloured shapes and textures: disk,
square, triangle, stripes, checker, ring, cross, diamond, dot grid, face and house glyphs)
at random positions and sizes over a faint texture; the renderer returns each concept's
mask. Voxels have sparse planted tuning (1-3 concepts, lognormal weights) and optionally a
Gaussian population receptive field (pRF); a voxel's response is its weights times its
concepts' presence (or, with pRFs, their overlap with the pRF) plus Gaussian noise, measured
in ``repeats`` repeats with the noise set so that each voxel's true noise ceiling lies in
``noise_ceiling`` (written for this project).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZE = 64
CONCEPTS = ("disk", "square", "triangle", "h_stripes", "v_stripes", "checker", "ring",
            "cross", "diamond", "dots", "face", "house")
COLOURS = np.array([[0.9, 0.1, 0.1], [0.1, 0.8, 0.2], [0.2, 0.3, 0.95], [0.95, 0.9, 0.1],
                    [0.1, 0.9, 0.9], [0.9, 0.1, 0.9], [0.95, 0.95, 0.95], [1.0, 0.55, 0.0],
                    [0.55, 0.2, 0.8], [0.6, 0.6, 0.6], [0.95, 0.75, 0.55], [0.55, 0.35, 0.15]])


def _shape(concept: int, s: int) -> np.ndarray:
    """The (s, s) boolean mask of a concept."""
    y, x = np.mgrid[:s, :s] + 0.5
    c, r = s / 2, s / 2
    dx, dy = x - c, y - c
    disk = dx ** 2 + dy ** 2 <= r ** 2
    stripe, check, dot = max(2, s // 6), max(2, s // 4), max(3, s // 3)

    def eye(side):
        return (dx + side * r / 2.5) ** 2 + (dy + r / 3) ** 2 <= (r / 6) ** 2

    shapes = {
        "disk": lambda: disk,
        "square": lambda: np.ones((s, s), dtype=bool),
        "triangle": lambda: (y >= s - 2 * np.minimum(x, s - x)) & (y <= s),
        "h_stripes": lambda: (y // stripe) % 2 == 0,
        "v_stripes": lambda: (x // stripe) % 2 == 0,
        "checker": lambda: ((x // check) + (y // check)) % 2 == 0,
        "ring": lambda: disk & (dx ** 2 + dy ** 2 >= (0.6 * r) ** 2),
        "cross": lambda: (np.abs(dx) < s / 6) | (np.abs(dy) < s / 6),
        "diamond": lambda: np.abs(dx) + np.abs(dy) <= r,
        "dots": lambda: ((x % dot - dot / 2) ** 2 + (y % dot - dot / 2) ** 2) <= (dot / 4) ** 2,
        "face": lambda: disk & ~(eye(1) | eye(-1)),
        "house": lambda: (y >= s / 2) | (y >= s / 2 - np.minimum(x, s - x)),
    }
    if not 0 <= concept < len(CONCEPTS):
        raise ValueError(f"unknown concept {concept}")
    return shapes[CONCEPTS[concept]]()


@dataclass
class Stimuli:
    images: np.ndarray  # (N, 3, 64, 64) float in [0, 1]
    masks: np.ndarray  # (N, 12, 64, 64) bool
    presence: np.ndarray  # (N, 12) 0/1


def render(concept_lists: list[list[int]], rng: np.random.Generator,
           backgrounds: np.ndarray | None = None, positions=None) -> Stimuli:
    """Images showing the listed concepts; ``backgrounds`` (N, 3, 64, 64) reuse a texture,
    ``positions`` (per image, per concept: (row, col, size)) reuse a placement."""
    n = len(concept_lists)
    if backgrounds is None:
        coarse = rng.random((n, 3, 8, 8))
        backgrounds = 0.15 + 0.15 * np.kron(coarse, np.ones((8, 8)))
    images = backgrounds.copy()
    masks = np.zeros((n, len(CONCEPTS), SIZE, SIZE), dtype=bool)
    for i, concepts in enumerate(concept_lists):
        for j, concept in enumerate(concepts):
            if positions is not None and j < len(positions[i]):
                row, col, s = positions[i][j]
            else:
                s = int(rng.integers(14, 24))
                row, col = (int(v) for v in rng.integers(0, SIZE - s, 2))
            shape = _shape(concept, s)
            masks[i, concept, row:row + s, col:col + s] |= shape
            images[i, :, row:row + s, col:col + s][:, shape] = COLOURS[concept][:, None]
    presence = masks.any(axis=(2, 3)).astype(float)
    return Stimuli(images.astype(np.float32), masks, presence)


def random_scenes(n: int, rng: np.random.Generator, max_concepts: int = 3) -> list[list[int]]:
    return [rng.choice(len(CONCEPTS), int(rng.integers(1, max_concepts + 1)),
                       replace=False).tolist() for _ in range(n)]


@dataclass
class VoxelPopulation:
    weights: np.ndarray  # (V, 12) planted tuning W*
    prf_centres: np.ndarray  # (V, 2) pixel (row, col) of each voxel's population receptive field
    prf_sigma: float | None  # its width in pixels (None: no pRF, the response sees presence)
    noise_sd: np.ndarray  # (V,)
    true_noise_ceiling: np.ndarray  # (V,) in [0, 1], for ``repeats`` averaged repeats


def concept_drive(masks: np.ndarray, centres: np.ndarray, sigma: float | None,
                  cell: int = 4) -> np.ndarray:
    """(N, C, V) how much each concept drives each voxel: its presence without pRFs, else the
    voxel's Gaussian pRF (peak 1) averaged over the concept's pixels (on ``cell`` x ``cell``
    pixel blocks), so a concept at the pRF's centre drives it fully, one far away not at
    all."""
    n, c, h, w = masks.shape
    present = masks.any(axis=(2, 3)).astype(np.float32)
    if sigma is None:
        return np.repeat(present[:, :, None], len(centres), axis=2)
    cover = masks.reshape(n, c, h // cell, cell, w // cell, cell).mean(axis=(3, 5),
                                                                      dtype=np.float32)
    cover = cover.reshape(n, c, -1)
    rows, cols = np.mgrid[:h // cell, :w // cell] * cell + (cell - 1) / 2
    grid = np.stack([rows.ravel(), cols.ravel()], 1)  # (cells, 2)
    gauss = np.exp(-((grid[:, None] - centres[None]) ** 2).sum(-1) / (2 * sigma ** 2))
    return (cover @ gauss.astype(np.float32)) / np.maximum(cover.sum(-1, keepdims=True), 1e-12)


def clean_responses(population: VoxelPopulation, masks: np.ndarray) -> np.ndarray:
    """(N, V) noise-free responses: sum over concepts of W*_vc times the concept's drive."""
    drive = concept_drive(masks, population.prf_centres, population.prf_sigma)
    return np.einsum("ncv,vc->nv", drive, population.weights)


def voxel_population(voxels: int, masks: np.ndarray, repeats: int,
                     noise_ceiling: tuple[float, float], rng: np.random.Generator,
                     prf_sigma: float | None = None) -> VoxelPopulation:
    """Sparse lognormal tuning (1-3 concepts per voxel), pRF centres uniform over the central
    square of the image, and noise set so that NC = var_s / (var_s + var_n / repeats) is
    uniform in ``noise_ceiling`` (var_s: the clean responses' variance over ``masks``)."""
    k = len(CONCEPTS)
    weights = np.zeros((voxels, k))
    for v in range(voxels):
        tuned = rng.choice(k, int(rng.integers(1, 4)), replace=False)
        weights[v, tuned] = rng.lognormal(0.0, 0.5, len(tuned))
    centres = rng.uniform(SIZE / 8, SIZE * 7 / 8, (voxels, 2))
    population = VoxelPopulation(weights, centres, prf_sigma, np.zeros(voxels),
                                 np.zeros(voxels))
    signal_var = clean_responses(population, masks).var(0)
    population.true_noise_ceiling = rng.uniform(*noise_ceiling, voxels)
    population.noise_sd = np.sqrt(repeats * signal_var * (1 - population.true_noise_ceiling)
                                  / population.true_noise_ceiling)
    return population


def responses(population: VoxelPopulation, masks: np.ndarray, repeats: int,
              rng: np.random.Generator) -> np.ndarray:
    """(repeats, N, V) noisy responses."""
    clean = clean_responses(population, masks)
    return clean[None] + population.noise_sd[None, None] * rng.standard_normal(
        (repeats, *clean.shape))
