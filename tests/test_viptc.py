"""viptc: retrieval metrics against scikit-learn per query, S-PTC zero at an unchanged model
and blind to the stored prototypes' gradients, CM-PTC invariant to an orthogonal rotation
and a joint relabelling, prototypes equal brute-force class means, linear CKA identities,
no image-shaped tensor in the stored state, and protocol runs."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from data.reid_stream import synthetic_stream
from methods.viptc import (
    batch_hard_triplet,
    class_means,
    cmptc_loss,
    evaluate_retrieval,
    linear_cka,
    sptc_loss,
)

from .conftest import run_failing, run_paper
from .miniatures import tiny_vit, write_reid_datasets


def test_map_and_rank1_match_scikit_learn_per_query():
    rng = np.random.default_rng(0)
    dist = rng.random((30, 50))
    q_ids, g_ids = rng.integers(0, 8, 30), rng.integers(0, 8, 50)
    got = evaluate_retrieval(dist, q_ids, g_ids)
    aps, top1 = [], []
    for i in range(30):
        truth = g_ids == q_ids[i]
        if truth.any():
            aps.append(average_precision_score(truth, -dist[i]))
            top1.append(truth[np.argmin(dist[i])])
    assert got["mAP"] == pytest.approx(np.mean(aps))
    assert got["rank1"] == pytest.approx(np.mean(top1))


def test_same_camera_matches_and_the_sysu_rule_are_removed():
    dist = np.array([[0.1, 0.2, 0.3]])
    ids = np.array([5, 5, 7])
    # the nearest match shares the query's camera and is removed
    assert evaluate_retrieval(dist, np.array([5]), ids, np.array([1]),
                              np.array([1, 2, 2]))["mAP"] == pytest.approx(1.0)
    # SYSU: a camera-3 query ignores camera-2 gallery images
    res = evaluate_retrieval(dist, np.array([5]), ids, np.array([3]), np.array([2, 6, 2]),
                             sysu_rule=True)
    assert res["rank1"] == 1.0 and res["mAP"] == pytest.approx(1.0)


def test_sptc_is_zero_for_an_unchanged_model_and_never_moves_prototypes():
    torch.manual_seed(0)
    feats = torch.randn(16, 8, requires_grad=True)
    protos = torch.randn(10, 8, requires_grad=True)
    assert float(sptc_loss(feats, feats.detach(), protos)) == pytest.approx(0.0, abs=1e-7)
    moved = feats + 0.5 * torch.randn(16, 8)
    loss = sptc_loss(moved, feats.detach(), protos)
    loss.backward()
    assert float(loss) > 0 and protos.grad is None and feats.grad.abs().sum() > 0
    assert float(sptc_loss(feats, feats.detach(), protos, divergence="mse")) == 0.0


def test_sptc_ignores_the_feature_scale_but_not_the_ranking():
    torch.manual_seed(1)
    feats, protos = torch.randn(12, 6), torch.randn(5, 6)
    assert float(sptc_loss(3.0 * feats, feats, protos)) == pytest.approx(0.0, abs=1e-6)
    assert float(sptc_loss(-feats, feats, protos)) > 0.1


def test_cmptc_is_rotation_and_relabelling_invariant():
    torch.manual_seed(2)
    classes, per, dim = 5, 3, 8
    rgb = torch.randn(classes, dim)
    q, _ = torch.linalg.qr(torch.randn(dim, dim))
    labels = torch.arange(classes).repeat_interleave(per)
    noise = 0.0 * torch.randn(classes * per, dim)
    feats = torch.cat([rgb[labels] + noise, (rgb @ q.T)[labels] + noise])
    ids = torch.cat([labels, labels])
    modality = torch.cat([torch.zeros(classes * per), torch.ones(classes * per)]).long()
    assert float(cmptc_loss(feats, ids, modality)) == pytest.approx(0.0, abs=1e-6)
    relabelled = torch.tensor([4, 2, 0, 1, 3])[ids]
    assert float(cmptc_loss(feats, relabelled, modality)) == pytest.approx(0.0, abs=1e-6)
    other = torch.cat([rgb[labels], torch.randn(classes, dim)[labels]])
    assert float(cmptc_loss(other, ids, modality)) > 1e-3
    assert float(cmptc_loss(other, ids, modality, form="kl")) > 1e-4


def test_history_cmptc_is_zero_for_a_rotated_modality_and_leaves_prototypes_alone():
    torch.manual_seed(4)
    classes, per, dim, old = 4, 2, 8, 6
    q, _ = torch.linalg.qr(torch.randn(dim, dim))
    labels = torch.arange(classes).repeat_interleave(per)
    rgb = torch.randn(classes * per, dim)
    ids, modality = torch.cat([labels, labels]), torch.cat([torch.zeros(8), torch.ones(8)]).long()
    old_rgb = torch.randn(old, dim, requires_grad=True)
    old_ir = (old_rgb @ q.T).detach().requires_grad_(True)
    feats = torch.cat([rgb, rgb @ q.T]).requires_grad_(True)
    for form in ("frobenius", "kl"):
        loss = cmptc_loss(feats, ids, modality, form=form, history=(old_rgb, old_ir))
        assert float(loss) == pytest.approx(0.0, abs=1e-6)
    drifted = torch.cat([rgb, rgb @ q.T + 0.5 * torch.randn(8, dim)]).requires_grad_(True)
    loss = cmptc_loss(drifted, ids, modality, history=(old_rgb, old_ir))
    assert float(loss) > 1e-3
    loss.backward()
    assert drifted.grad.abs().sum() > 0
    assert old_rgb.grad is None and old_ir.grad is None


def test_class_means_equal_brute_force():
    torch.manual_seed(3)
    feats, labels = torch.randn(40, 4), torch.randint(0, 6, (40,))
    classes, means = class_means(feats, labels)
    for c, m in zip(classes.tolist(), means, strict=True):
        assert torch.allclose(m, feats[labels == c].mean(0))


def test_linear_cka_identities():
    torch.manual_seed(4)
    x = torch.randn(50, 6)
    q, _ = torch.linalg.qr(torch.randn(6, 6))
    assert float(linear_cka(x, 2.5 * x @ q + 1.0)) == pytest.approx(1.0, abs=1e-5)
    assert float(linear_cka(x, torch.randn(50, 6))) < 0.5


def test_batch_hard_triplet_is_zero_when_classes_are_far_apart():
    feats = torch.tensor([[0.0, 0], [0.1, 0], [10.0, 0], [10.1, 0]])
    labels = torch.tensor([0, 0, 1, 1])
    assert float(batch_hard_triplet(feats, labels)) == 0.0
    assert float(batch_hard_triplet(feats, torch.tensor([0, 1, 0, 1]))) > 0


def test_synthetic_modalities_differ_in_class_structure():
    """IR images carry no colour: two identities that differ only in colour are identical in
    IR up to noise, and differ in RGB."""
    task = synthetic_stream(1, 6, 2, 2, 16, 8, 0.0, np.random.default_rng(0))[0]
    split = task.train
    ir = split.images[split.modality == 1]
    assert torch.allclose(ir[:, 0], ir[:, 1]) and torch.allclose(ir[:, 1], ir[:, 2])
    rgb = split.images[split.modality == 0]
    assert not torch.allclose(rgb[:, 0], rgb[:, 1])


def test_stream_keeps_only_prototypes_and_weights():
    from methods.viptc.lifelong import Arm, LossOptions, run_stream
    from methods.viptc.networks import NetSpec
    from methods.viptc.stream_stats import image_shaped_tensors

    tasks = synthetic_stream(2, 6, 4, 4, 16, 8, 0.05, np.random.default_rng(0))
    results, state = run_stream(tasks, Arm("both", sptc=1.0, cmptc=1.0), LossOptions(), 1,
                                1e-3, 3, 2, NetSpec(width=8, dim=16), 0)
    assert len(results) == 2 and len(results[1].cross) == 2
    assert state["prototypes"].shape == (2 * 2 * 6, 16)
    assert image_shaped_tensors(state, 16, 8) == 0
    assert image_shaped_tensors({"x": tasks[0].train.images}, 16, 8) == 1


def test_arms_going_on_from_the_shared_first_stage_equal_their_own_runs():
    """The protocol trains the first stage once per stream: every arm that shares it and
    goes on from its checkpoint (pickled, as to a worker process) ends bit for bit where its
    own run from scratch ends; batch-topology CM-PTC does not share it (its loss is on)."""
    import pickle

    from methods.viptc.lifelong import (
        Arm,
        LossOptions,
        first_stage,
        first_stage_is_shared,
        run_stream,
    )
    from methods.viptc.networks import NetSpec

    tasks = synthetic_stream(2, 6, 4, 4, 16, 8, 0.05, np.random.default_rng(0))
    options, training = LossOptions(), (1, 1e-2, 3, 2, NetSpec(width=8, dim=16), 7)
    arms = [Arm("finetune"), Arm("joint", joint=True), Arm("sptc", sptc=1.0),
            Arm("cka_kd", cka_kd=1.0), Arm("cmptc", cmptc=1.0)]
    shared = [arm for arm in arms if first_stage_is_shared(arm, options)]
    assert [arm.name for arm in shared] == ["finetune", "joint", "sptc", "cka_kd"]
    assert first_stage_is_shared(Arm("cmptc", cmptc=1.0), LossOptions(cmptc_topology="history"))
    checkpoint = pickle.loads(pickle.dumps(first_stage(tasks, shared[0], options, *training)))
    for arm in shared:
        alone, alone_state = run_stream(tasks, arm, options, *training)
        resumed, state = run_stream(tasks, arm, options, *training, None, None, checkpoint)
        assert resumed == alone, arm.name
        assert all(torch.equal(v, alone_state["model"][k]) for k, v in state["model"].items())
    cmptc_first = run_stream(tasks[:1], arms[-1], options, *training)[0]
    assert cmptc_first != checkpoint.results


def test_pretraining_is_its_own_domain_and_a_deterministic_start():
    from omegaconf import OmegaConf

    from data.reid_stream import reid_pretraining, reid_stream
    from methods.viptc.lifelong import pretrain
    from methods.viptc.networks import NetSpec

    cfg = OmegaConf.create({"name": "synthetic", "tasks": 2, "train_ids": 6, "test_ids": 4,
                            "images_per_id": 4, "height": 16, "width": 8, "noise": 0.05,
                            "pretrain_ids": 5})
    rng = np.random.default_rng(0)
    stream, split = reid_stream(cfg, rng), reid_pretraining(cfg, rng)
    # drawn after the stream: the stream is the same with or without pretraining
    alone = reid_stream(OmegaConf.merge(cfg, {"pretrain_ids": 0}), np.random.default_rng(0))
    for with_pretraining, without in zip(stream, alone, strict=True):
        assert torch.equal(with_pretraining.train.images, without.train.images)
    assert reid_pretraining(OmegaConf.merge(cfg, {"pretrain_ids": 0}), rng) is None
    assert split.images.shape == (5 * 4 * 2, 3, 16, 8) and split.ids.unique().numel() == 5
    spec = NetSpec(width=8, dim=16)
    state = pretrain(split, 2, 1e-2, 5, 2, spec, seed=0)
    assert not any(k.startswith("heads.") for k in state)
    again = pretrain(split, 2, 1e-2, 5, 2, spec, seed=0)
    assert all(torch.equal(v, state[k]) for k, v in again.items())
    torch.manual_seed(0)
    fresh = spec.build().state_dict()
    assert not torch.equal(fresh["backbone.0.weight"], state["backbone.0.weight"])
    spec.build().load_state_dict(state)  # strict: backbone and neck only


def test_protocol_run(smoke_run):
    m, run_dir = smoke_run("viptc")
    for key in ("forgetting_finetune", "forgetting_sptc", "forgetting_both", "asymmetry_sptc",
                "asymmetry_both", "new_task_map_sptc_over_finetune"):
        assert key in m and np.isfinite(m[key])
    assert m["exemplars_stored"] == 0
    with open(run_dir / "tables" / "stages.csv") as f:
        stages = list(csv.DictReader(f))
    assert len(stages) == 3 * (1 + 2 + 3 + 4)  # arms x the seen tasks of 4 stages
    for arm in ("finetune", "sptc"):
        newest = [float(r["cross_map"]) for r in stages
                  if r["arm"] == arm and r["stage"] == r["task"]]
        assert np.mean(newest) == pytest.approx(m[f"new_task_map_{arm}"])


def test_hub_backbones_from_local_folders_train_without_storing_images(tmp_path):
    """A transformer (class token, position embeddings interpolated to a 32 x 16 image) and
    a CNN (its own pooled output) by folder; a one-stage stream keeps only prototypes of
    the backbone's feature size."""
    from transformers import ResNetConfig, ResNetModel

    from methods.viptc.lifelong import Arm, LossOptions, run_stream
    from methods.viptc.networks import NetSpec
    from methods.viptc.stream_stats import image_shaped_tensors

    vit = tiny_vit()  # seeds torch: the ResNet draws after it
    resnet = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                      layer_type="basic"))
    vit.save_pretrained(tmp_path / "vit")
    resnet.save_pretrained(tmp_path / "resnet")
    images = torch.randn(5, 3, 32, 16)
    for name, reference, dim in (("vit", vit, 24), ("resnet", resnet, 16)):
        net = NetSpec(str(tmp_path / name)).build().eval()
        assert net.dim == dim
        reference.eval()
        with torch.no_grad():
            if name == "vit":
                expected = reference(images, interpolate_pos_encoding=True).last_hidden_state[:, 0]
            else:
                expected = reference(images).pooler_output.flatten(1)
            assert torch.allclose(net.backbone(images), expected, atol=1e-5)
    # loaded for training (from_pretrained returns eval mode: dropout and BN statistics off)
    assert all(m.training for m in NetSpec(str(tmp_path / "resnet")).build().modules())
    tasks = synthetic_stream(1, 6, 4, 4, 32, 16, 0.05, np.random.default_rng(0))
    _, state = run_stream(tasks, Arm("sptc", sptc=1.0), LossOptions(), 1, 1e-3, 3, 2,
                          NetSpec(str(tmp_path / "vit")), 0)
    assert state["prototypes"].shape == (2 * 6, 24)
    assert image_shaped_tensors(state, 32, 16) == 0


def test_a_backbone_by_name_fails_offline_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=viptc", "method.backbone=google/vit-base-patch16-224-in21k",
                             "protocol.seeds=1"], tmp_path / "run")
    assert "google/vit-base-patch16-224-in21k" in failed["error"]
    assert "method.backbone" in failed["error"] and "\n" not in failed["error"]


def test_missing_real_dataset_is_one_clear_error(tmp_path):
    _, failed = run_failing(["+paper=viptc", "dataset=vi_reid", "dataset.order=[regdb]",
                             f"dataset.regdb_root={tmp_path}/RegDB",
                             f"dataset.sysu_root={tmp_path}/SYSU"], tmp_path / "run")
    assert "RegDB" in failed["error"] and "\n" not in failed["error"]


def test_real_dataset_layouts_load_and_run_as_one_stream(tmp_path):
    from omegaconf import OmegaConf

    from data.reid_stream import llcm_stream, reid_stream

    write_reid_datasets(tmp_path)
    task = llcm_stream(str(tmp_path / "LLCM"), 32, 16, max_images_per_id=2)[0]
    assert task.train.images.shape == (4 * 2 * 2, 3, 32, 16)
    assert sorted(set(task.train.cams.tolist())) == [1, 2]
    assert (task.test.ids >= 10000).all() and (task.train.modality == 1).sum() == 8
    cfg = OmegaConf.create({"name": "vi_reid", "order": ["regdb", "sysu", "llcm"], "trial": 1,
                            "regdb_root": str(tmp_path / "RegDB"), "height": 32, "width": 16,
                            "sysu_root": str(tmp_path / "SYSU"), "max_images_per_id": 2,
                            "llcm_root": str(tmp_path / "LLCM")})
    stream = reid_stream(cfg, np.random.default_rng(0))
    assert [t.name for t in stream] == ["regdb", "sysu", "llcm"]
    labels = [set(t.train.ids.tolist()) | set(t.test.ids.tolist()) for t in stream]
    assert not (labels[0] & labels[1]) and not (labels[1] & labels[2])
    roots = [f"dataset.regdb_root={tmp_path}/RegDB", f"dataset.sysu_root={tmp_path}/SYSU",
             f"dataset.llcm_root={tmp_path}/LLCM"]
    m = run_paper(["+paper=viptc", "dataset=vi_reid", "dataset.height=32", "dataset.width=16",
                   "protocol.seeds=1", "protocol.epochs=1", "protocol.arms=[finetune,sptc]",
                   "protocol.ids_per_batch=2", "protocol.per_modality=2", "protocol.workers=1",
                   *roots],
                  tmp_path / "run")
    assert m["exemplars_stored"] == 0 and np.isfinite(m["forgetting_sptc"])
    _, failed = run_failing(["+paper=viptc", "dataset=vi_reid", "dataset.order=[llcm]",
                             f"dataset.llcm_root={tmp_path}/nowhere"], tmp_path / "fail")
    assert "LLCM not found" in failed["error"] and "\n" not in failed["error"]


def test_paired_drops_against_finetune_by_hand():
    from methods.viptc.stream_stats import paired_drops

    rows = [{"arm": "finetune", "seed": 0, "forgetting": 0.3},
            {"arm": "finetune", "seed": 1, "forgetting": 0.1},
            {"arm": "sptc", "seed": 0, "forgetting": 0.1},
            {"arm": "sptc", "seed": 1, "forgetting": 0.1}]
    drops = paired_drops(rows, "forgetting")
    assert drops["forgetting_drop_vs_finetune_sptc"] == pytest.approx(0.1)
    assert drops["forgetting_drop_vs_finetune_se_sptc"] == pytest.approx(0.1)  # sd 0.1414 / sqrt 2
