"""Data and models in miniature for tests that run a paper's real-data or hub-model path:
the releases' folder layouts and tiny random-weight models of the named families."""

from __future__ import annotations

import numpy as np
import torch


def tiny_vit():
    """A randomly initialised (seed 0) ViT: width 24, one layer, 8-pixel patches of 32-pixel
    images (other sizes by interpolated position embeddings)."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    return ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=24, num_hidden_layers=1,
                              num_attention_heads=2, intermediate_size=32))


def tiny_wan_pipeline():
    """A randomly initialised Wan text-to-video pipeline small enough for a CPU test."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    words = ["<pad>", "<unk>", "</s>", "a", "ball", "falls", "bounces", "rolls"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    return WanPipeline(
        tokenizer=PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                          eos_token="</s>", unk_token="<unk>"),
        text_encoder=UMT5EncoderModel(UMT5Config(
            vocab_size=len(words), d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
            relative_attention_num_buckets=8)),
        transformer=WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4,
            out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1,
            rope_max_seq_len=32),
        vae=AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                             latents_mean=[0.1, -0.2, 0.3, 0.0],
                             latents_std=[1.5, 0.5, 2.0, 1.0]),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0))


def write_nsd(root, images=400, seed=0):
    """A raw NSD release in miniature: 2 sessions of 750 trials showing 400 images (most
    repeated three times), a 4 x 5 x 3 volume with an ROI, session 1's betas as NIfTI and
    session 2's as int16 HDF5 (the release's transposed layout, scale 300), and 48 x 48
    stimuli of coloured quadrants; voxels respond linearly to the quadrant colours."""
    import h5py
    import nibabel
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    (root / "nsddata/experiments/nsd").mkdir(parents=True)
    positions = np.concatenate([rng.permutation(images) for _ in range(4)])[:1500]
    subjectim = np.stack([rng.permutation(1000)[:images] + 1 for _ in range(8)])
    savemat(root / "nsddata/experiments/nsd/nsd_expdesign.mat",
            {"masterordering": positions[None] + 1, "subjectim": subjectim,
             "sharedix": np.sort(subjectim[0, :60])[None]})
    roi = np.zeros((4, 5, 3), dtype=np.int16)
    roi[rng.random((4, 5, 3)) < 0.6] = 1
    (root / "nsddata/ppdata/subj01/func1pt8mm/roi").mkdir(parents=True)
    nibabel.save(nibabel.Nifti1Image(roi, np.eye(4)),
                 root / "nsddata/ppdata/subj01/func1pt8mm/roi/nsdgeneral.nii.gz")
    colours = rng.random((1000, 12))
    weights = rng.normal(size=(12, 4, 5, 3))
    betas = np.einsum("tc,cxyz->xyzt", colours[subjectim[0, positions] - 1], weights)
    betas += 0.5 * rng.normal(size=betas.shape)
    folder = root / "nsddata_betas/ppdata/subj01/func1pt8mm/betas_fithrf_GLMdenoise_RR"
    folder.mkdir(parents=True)
    nibabel.save(nibabel.Nifti1Image(betas[..., :750].astype(np.float32), np.eye(4)),
                 folder / "betas_session01.nii.gz")
    with h5py.File(folder / "betas_session02.hdf5", "w") as f:
        f["betas"] = np.round(300 * betas[..., 750:]).astype(np.int16).transpose(3, 2, 1, 0)
    pixels = np.zeros((1000, 48, 48, 3), dtype=np.uint8)
    for q, (r, c) in enumerate([(0, 0), (0, 24), (24, 0), (24, 24)]):
        pixels[:, r:r + 24, c:c + 24] = (255 * colours[:, None, None, 3 * q:3 * q + 3])
    (root / "nsddata_stimuli/stimuli/nsd").mkdir(parents=True)
    with h5py.File(root / "nsddata_stimuli/stimuli/nsd/nsd_stimuli.hdf5", "w") as f:
        f["imgBrick"] = pixels
    return subjectim[0], positions, roi, betas, colours


def write_reid_datasets(root, ids=4, per_id=3):
    """RegDB, SYSU-MM01 and LLCM in miniature, in their release layouts: each identity a
    flat colour (RGB) or grey level (IR) with noise."""
    from PIL import Image

    rng = np.random.default_rng(0)

    def image(path, pid, infrared):
        path.parent.mkdir(parents=True, exist_ok=True)
        level = (40 + 50 * pid) % 255
        pixels = np.full((32, 16, 3), [level, 255 - level, (7 * level) % 255], dtype=float)
        if infrared:
            pixels[:] = pixels.mean(-1, keepdims=True)
        pixels += rng.normal(0, 8, pixels.shape)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path)

    def listed(dataset, index, entries, infrared):
        """Images of (relative path, identity, label) entries and their "path label" list."""
        for rel, pid, _ in entries:
            image(root / dataset / rel, pid, infrared)
        (root / dataset / "idx").mkdir(parents=True, exist_ok=True)
        (root / dataset / "idx" / index).write_text(
            "".join(f"{rel} {label}\n" for rel, _, label in entries))

    for split, pids in (("train", range(ids)), ("test", range(ids, 2 * ids))):
        for mod, name in (("Visible", "visible"), ("Thermal", "thermal")):
            listed("RegDB", f"{split}_{name}_1.txt",
                   [(f"{mod}/{pid}/img{k}.bmp", pid, pid - pids.start) for pid in pids
                    for k in range(per_id)], mod == "Thermal")
        for mod in ("vis", "nir"):
            listed("LLCM", f"{split}_{mod}.txt",
                   [(f"{mod}/{pid:04d}/{pid:04d}_c0{1 + k % 2}_s1{k}_f2_{mod}.jpg", pid, pid)
                    for pid in pids for k in range(per_id)], mod == "nir")
    (root / "SYSU/exp").mkdir(parents=True)
    (root / "SYSU/exp/train_id.txt").write_text(",".join(str(p + 1) for p in range(ids)))
    (root / "SYSU/exp/test_id.txt").write_text(",".join(str(p + 1) for p in range(ids, 2 * ids)))
    for pid in range(1, 2 * ids + 1):
        for cam in range(1, 7):
            for k in range(per_id):
                image(root / "SYSU" / f"cam{cam}" / f"{pid:04d}" / f"{k:04d}.jpg", pid,
                      cam in (3, 6))
