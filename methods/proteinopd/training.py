"""The training and evaluation steps of ProteinOPD's comparison, over explicit settings (the
protocol reads them from the config):

- ``finetune``: supervised finetuning of a protein LM on sequences (the base on the corpus,
  a teacher on the corpus's top fraction by one objective, sequential finetuning);
- ``distill``: the student (a copy of the base) trained on its own samples towards the
  teachers' weighted consensus (``ConsensusOPDModule``);
- ``align_with_rl``: the RL baseline, GRPO on the scalarized design reward;
- ``evaluate``: unconditional samples scored for design, designability and diversity.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from common.streams import Streams
from data import proteins
from methods.proteinopd.distillation import ConsensusOPDModule, ScalarizedRLModule
from methods.proteinopd.properties import (
    DesignScore,
    longest_homopolymer,
    mean_pairwise_identity,
    score,
)
from models.lm.post_training import GRPOConfig, OPDConfig, RolloutConfig, post_train
from models.lm.rollout import sample_rollouts, teacher_forced_logprobs


def finetune(model, sequences: list[str], steps: int, lr: float, batch_size: int,
             max_length: int, seed: int, compute, alphabet: proteins.Alphabet):
    """Next-token training on ``sequences`` (warm-up 5%, weight decay 0.01)."""
    from models.lm.training import Optimization, train_causal_lm

    data = proteins.ProteinLMData(sequences, max_length, alphabet).dataset()
    return train_causal_lm(model, data, Optimization(steps, batch_size, lr, 0.05, 0.01), seed,
                           compute, progress_bar=True)


def top_fraction(corpus: list[str], objective: str, fraction: float, min_length: int
                 ) -> list[str]:
    """The corpus's sequences in the top ``fraction`` by ``objective``."""
    values = score(corpus, objective, min_length)
    cut = np.nanquantile(values, 1 - fraction)
    return [s for s, v in zip(corpus, values, strict=True) if v >= cut]


def trainable_copy(model):
    return copy.deepcopy(model).requires_grad_(True)


def unconditional_prompts(count: int, alphabet: proteins.Alphabet):
    """``count`` prompts ``<eos>`` per step (unconditional generation)."""
    def prompts(step, generator):
        return [proteins.ProteinPrompt([alphabet.eos]) for _ in range(count)]

    return prompts


@dataclass
class StudentSettings:
    """The student's on-policy distillation (``method`` of the config)."""

    sequences_per_step: int
    lr: float
    objective: str
    jsd_beta: float
    weighting: str
    teacher_temperature: float
    steps: int


def distill(base, teachers: list, weights: list[float], design_reward, student: StudentSettings,
            alphabet: proteins.Alphabet, max_length: int, seed: int, compute,
            mixture: str = "geometric") -> ConsensusOPDModule:
    """A copy of ``base`` distilled on its own samples towards the teachers' mixture."""
    module = ConsensusOPDModule(
        trainable_copy(base), unconditional_prompts(student.sequences_per_step, alphabet),
        teachers, RolloutConfig(student.sequences_per_step, 1, max_length + 1,
                                eos_id=alphabet.eos, pad_id=alphabet.pad, lr=student.lr),
        OPDConfig(objective=student.objective, beta=student.jsd_beta), weights, design_reward,
        mixture, student.weighting, [student.teacher_temperature] * len(teachers), seed=seed)
    return post_train(module, student.steps, compute)


def align_with_rl(base, design_reward, sequences_per_step: int, group_size: int, lr: float,
                  kl_beta: float, steps: int, alphabet: proteins.Alphabet, max_length: int,
                  seed: int, compute) -> ScalarizedRLModule:
    """GRPO (DAPO loss, KL to the base) on the scalarized design reward, the same number of
    sampled sequences per step as the student."""
    groups = max(1, sequences_per_step // group_size)
    module = ScalarizedRLModule(
        trainable_copy(base), unconditional_prompts(groups, alphabet),
        RolloutConfig(groups, group_size, max_length + 1, eos_id=alphabet.eos,
                      pad_id=alphabet.pad, lr=lr),
        GRPOConfig(loss_type="dapo", beta=kl_beta), design_reward, reference=base, seed=seed)
    return post_train(module, steps, compute)


def generate(model, count: int, max_length: int, seed: int, alphabet: proteins.Alphabet):
    """``count`` unconditional samples (prompt ``<eos>``), exact sampling."""
    return sample_rollouts(model, [[alphabet.eos]] * count, max_length + 1,
                           eos_id=alphabet.eos, pad_id=alphabet.pad,
                           generator=Streams(seed).torch("samples"))


def evaluate(model, base, design: DesignScore, alphabet: proteins.Alphabet, samples: int,
             max_length: int, seed: int) -> dict:
    """Design score (its mean and standard deviation over the samples), NLL under the frozen
    ``base`` (designability), validity, length, homopolymer runs, uniqueness, pairwise
    identity and each objective's z-score."""
    rollouts = generate(model, samples, max_length, seed, alphabet)
    sequences = [alphabet.decode(c) for c in rollouts.completions()]
    with torch.no_grad():
        nll = -teacher_forced_logprobs(base, rollouts)
    mask = rollouts.completion_mask.to(nll.device)
    z = design.standardized(sequences)
    finished = [alphabet.eos in c for c in rollouts.completions()]
    scores = design(sequences, finished)
    out = {"design": float(scores.mean()), "design_sd": float(scores.std(ddof=1)),
           "nll_under_base": float((nll * mask).sum() / mask.sum()),
           "valid": float(np.mean(scores != design.invalid)),
           "length": float(np.mean([len(s) for s in sequences])),
           "homopolymer": float(np.mean([longest_homopolymer(s) for s in sequences if s]
                                        or [0])),
           "unique": len(set(sequences)) / len(sequences),
           "identity": mean_pairwise_identity(sequences, 200,
                                              Streams(seed).numpy("identity pairs"))}
    for k, row in zip(design.objectives, z, strict=True):
        out[f"z_{k}"] = float(np.nanmean(row))
    return out
