"""The Physics-IQ benchmark layout (google-deepmind/physics-IQ-benchmark) on a user's machine:
real test videos ``{id}_testing-videos_{fps}FPS_{view}_take-{k}_{scenario}.mp4`` (two takes
per scenario and view) and a model's generated videos ``{id}_{view}_{scenario}.mp4``.
Videos are read with PyAV as grayscale frames in [0, 1], the first ``seconds`` only, and
downscaled by an integer ``factor`` by area averaging (the benchmark compares at a quarter
of the resolution).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError

TEST_VIDEO = re.compile(r"^(?P<id>\d+)_testing-videos_(?P<fps>\d+)FPS_(?P<view>[a-z]+)_"
                        r"take-(?P<take>\d)_(?P<scenario>.+)\.mp4$")


@dataclass(frozen=True)
class PhysicsIQCase:
    name: str
    fps: int
    take1: Path
    take2: Path
    generated: Path


def read_video(path: Path, seconds: float | None = None, factor: int = 1) -> np.ndarray:
    """(frames, H // factor, W // factor) grayscale frames in [0, 1]."""
    try:
        import av
    except ImportError:
        raise UserError("reading videos needs PyAV: pip install av (the 'vision' extra)") from None
    if not Path(path).exists():
        raise UserError(f"video not found: {path}")
    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        rate = float(stream.average_rate or 30)
        limit = None if seconds is None else int(round(seconds * rate))
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="gray").astype(np.float32) / 255.0)
            if limit is not None and len(frames) >= limit:
                break
    video = np.stack(frames)
    if factor > 1:
        t, h, w = video.shape
        h, w = h - h % factor, w - w % factor
        video = video[:, :h, :w].reshape(t, h // factor, factor, w // factor, factor).mean((2, 4))
    return video


def physics_iq_cases(real_root: str, generated_root: str) -> list[PhysicsIQCase]:
    """Every (take 1, take 2, generated) triple; scenarios without a generated video are
    skipped, and none at all is an error."""
    real, generated = Path(real_root), Path(generated_root)
    if not real.is_dir():
        raise UserError(f"Physics-IQ test videos not found at {real}")
    if not generated.is_dir():
        raise UserError(f"generated videos not found at {generated}")
    cases = []
    for path in sorted(real.rglob("*_testing-videos_*take-1_*.mp4")):
        m = TEST_VIDEO.match(path.name)
        if not m:
            continue
        take2 = path.with_name(path.name.replace("take-1", "take-2"))
        gen = generated / f"{m['id']}_{m['view']}_{m['scenario']}.mp4"
        if take2.exists() and gen.exists():
            cases.append(PhysicsIQCase(f"{m['id']}_{m['view']}_{m['scenario']}",
                                       int(m["fps"]), path, take2, gen))
    if not cases:
        raise UserError(f"no scenario has take-1, take-2 under {real} and a generated "
                        f"<id>_<view>_<scenario>.mp4 under {generated}")
    return cases


def write_video(path: Path, frames: np.ndarray, fps: int = 16) -> Path:
    """Write (T, H, W, 3) frames in [0, 1] as an H.264 mp4 (PyAV)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    frames = (np.clip(frames, 0, 1) * 255).astype(np.uint8)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames.shape[1] - frames.shape[1] % 2, \
            frames.shape[2] - frames.shape[2] % 2
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            image = av.VideoFrame.from_ndarray(frame[:stream.height, :stream.width],
                                               format="rgb24")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
