"""proteinopd: the teacher target against its definitions and identities, the OPD
estimator towards the consensus by enumeration, properties against biopython and
`peptides`, the corpus and encoding, time-to-gain on hand-made curves, and runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from Bio.SeqUtils.ProtParam import ProteinAnalysis

from common.errors import UserError
from data import proteins
from methods.proteinopd import (
    DesignScore,
    aliphatic_index,
    cost_to_gain,
    gravy,
    longest_homopolymer,
    mean_pairwise_identity,
    score,
    standard_residues,
    teacher_target,
)
from models.lm.objectives import generalized_jsd, reverse_kl, sampled_token_opd_loss

from .conftest import run_failing, run_paper
from .smoke import SMOKE, smoke_settings

# a fixed test sequence (standard residues only)
SEQUENCE = ("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSL"
            "AKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERV")


def _teachers(k=3, vocab=6, rows=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [2 * torch.randn(rows, vocab, generator=gen) for _ in range(k)]


# -- the teacher target -------------------------------------------------------------------------

def test_one_teacher_with_weight_one_is_that_teacher():
    teachers = _teachers()
    for mixture in ("geometric", "arithmetic"):
        target = teacher_target(teachers, [0.0, 1.0, 0.0], mixture)
        torch.testing.assert_close(target, torch.log_softmax(teachers[1], -1))


def test_identical_teachers_give_that_teacher_for_any_weights():
    z = _teachers(k=1)[0]
    for weights in ([0.2, 0.8], [0.5, 0.5], [0.9, 0.1]):
        for mixture, weighting in itertools.product(("geometric", "arithmetic"),
                                                    ("static", "entropy")):
            target = teacher_target([z, z.clone()], weights, mixture, weighting)
            torch.testing.assert_close(target, torch.log_softmax(z, -1))


def test_geometric_target_is_the_normalized_weighted_log_sum_and_arithmetic_the_mixture():
    teachers, w = _teachers(), [0.2, 0.5, 0.3]
    probs = [torch.softmax(z, -1).double() for z in teachers]
    product = probs[0] ** 0.2 * probs[1] ** 0.5 * probs[2] ** 0.3
    torch.testing.assert_close(teacher_target(teachers, w).exp().double(),
                               product / product.sum(-1, keepdim=True), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(teacher_target(teachers, w, "arithmetic").exp().double(),
                               0.2 * probs[0] + 0.5 * probs[1] + 0.3 * probs[2],
                               atol=1e-6, rtol=1e-5)
    # unnormalized weights mean the same as normalized ones; temperatures divide the logits
    torch.testing.assert_close(teacher_target(teachers, [2, 5, 3]), teacher_target(teachers, w))
    cooled = teacher_target(teachers, w, temperatures=[0.5, 0.5, 0.5])
    torch.testing.assert_close(cooled, teacher_target([2 * z for z in teachers], w))


def test_entropy_weighting_favours_the_confident_teacher():
    sharp = torch.tensor([[8.0, 0, 0, 0]])
    flat = torch.tensor([[0.0, 0.1, 0, 0.1]])
    static = teacher_target([sharp, flat], [0.5, 0.5])
    dynamic = teacher_target([sharp, flat], [0.5, 0.5], weighting="entropy")
    assert dynamic.exp()[0, 0] > static.exp()[0, 0]


def test_consensus_minimises_the_weighted_reverse_kl_and_jsd_beta_one_is_the_identity():
    """sum_k w_k KL(q || pi_k) = KL(q || g) - log Z: the consensus is the minimiser, and a
    student equal to it has loss 0 under reverse KL and JSD."""
    teachers, w = _teachers(rows=1), [0.2, 0.5, 0.3]
    g = teacher_target(teachers, w)
    log_z = torch.logsumexp(sum(wk * torch.log_softmax(z, -1)
                                for wk, z in zip(w, teachers, strict=True)), -1)
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        q = 3 * torch.randn(1, 6, generator=gen)
        weighted = sum(wk * reverse_kl(q, z) for wk, z in zip(w, teachers, strict=True))
        torch.testing.assert_close(weighted, reverse_kl(q, g) - log_z)
        torch.testing.assert_close(generalized_jsd(q, g, beta=1.0), reverse_kl(q, g).mean())
    assert float(reverse_kl(g, g).abs().max()) < 1e-6
    assert float(generalized_jsd(g, g, beta=0.5)) < 1e-6


def test_sampled_estimator_towards_the_consensus_is_unbiased_by_enumeration():
    """V = 3, one token: E_{y ~ pi_s}[grad of the sampled surrogate with the consensus as
    teacher] = grad KL(pi_s || g)."""
    theta = torch.randn(1, 3, generator=torch.Generator().manual_seed(5), requires_grad=True)
    g = teacher_target(_teachers(k=2, vocab=3, rows=1, seed=6), [0.4, 0.6])
    student = torch.log_softmax(theta, -1)
    (exact,) = torch.autograd.grad(reverse_kl(student, g).sum(), theta, retain_graph=True)
    expected = sum(student[0, y].exp().detach() * sampled_token_opd_loss(
        student[:, y:y + 1], g[:, y:y + 1], torch.ones(1, 1)) for y in range(3))
    (estimate,) = torch.autograd.grad(expected, theta)
    torch.testing.assert_close(estimate, exact, atol=1e-6, rtol=1e-5)


# -- properties and data ------------------------------------------------------------------------

def test_properties_equal_biopython_and_peptides():
    peptides = pytest.importorskip("peptides")
    reference = peptides.Peptide(SEQUENCE)
    assert aliphatic_index(SEQUENCE) == pytest.approx(reference.aliphatic_index(), abs=1e-9)
    assert gravy(SEQUENCE) == pytest.approx(ProteinAnalysis(SEQUENCE).gravy(), abs=1e-12)
    assert score([SEQUENCE], "stability")[0] == pytest.approx(
        -reference.instability_index(), abs=0.01)  # the same table, rounded differently
    assert score([SEQUENCE], "charge")[0] == pytest.approx(
        ProteinAnalysis(SEQUENCE).charge_at_pH(7.0))


def test_non_standard_residues_are_removed_before_scoring():
    assert standard_residues("mkXtBZUo") == "MKT"
    assert score(["MKXAVLB"], "thermostability")[0] == aliphatic_index("MKAVL")
    assert np.isnan(score(["X"], "solubility")[0])
    with pytest.raises(ValueError, match="unknown objective"):
        score([SEQUENCE], "foldability")


def test_design_score_standardizes_and_marks_invalid_sequences():
    corpus = proteins.synthetic_corpus(200, np.random.default_rng(0), min_length=20,
                                       max_length=40)
    design = DesignScore(["thermostability", "solubility"], [0.5, 0.5], corpus, 20)
    z = design.standardized(corpus)
    np.testing.assert_allclose(z.mean(1), 0, atol=1e-9)
    np.testing.assert_allclose(z.std(1), 1, atol=1e-9)
    np.testing.assert_allclose(design(corpus), 0.5 * z[0] + 0.5 * z[1])
    assert design(["MKV"])[0] == design.invalid
    assert design([corpus[0]], finished=[False])[0] == design.invalid


def test_encoding_round_trips_and_the_corpus_follows_its_settings():
    corpus = proteins.synthetic_corpus(50, np.random.default_rng(1), min_length=30,
                                       max_length=60)
    assert all(30 <= len(s) <= 60 and set(s) <= set(proteins.AMINO_ACIDS) for s in corpus)
    assert proteins.decode(proteins.encode(corpus[0]) + [proteins.EOS, 3]) == corpus[0]
    with pytest.raises(Exception, match="non-standard"):
        proteins.encode("MKX")
    row = proteins.ProteinLMData(["MKV", "MKVLLAG"], 5).dataset()[0]  # cut to 5, padded
    assert row["input_ids"] == [proteins.EOS, 10, 8, 17, proteins.EOS, proteins.PAD,
                                proteins.PAD]
    assert row["labels"] == [-100, 10, 8, 17, proteins.EOS, -100, -100]


def test_fasta_reader(tmp_path):
    path = tmp_path / "x.fasta"
    path.write_text(">a\nMKV\nLLA\n>b desc\nGG\n")
    assert proteins.read_fasta(path) == ["MKVLLA", "GG"]
    binary = tmp_path / "x.bin"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(UserError, match="not a text FASTA file"):
        proteins.read_fasta(binary)


def test_homopolymer_and_identity_on_hand_made_sequences():
    assert longest_homopolymer("MKKKVLLA") == 3
    assert longest_homopolymer("") == 0
    assert mean_pairwise_identity(["AAAA", "AAAA"], 5, np.random.default_rng(0)) == 1.0
    assert mean_pairwise_identity(["ACDE", "CDEA"], 5, np.random.default_rng(0)) == 0.0


def _curve(times, rewards, per_step: dict) -> list[dict]:
    """A learning curve as ``_Traced`` records it: cumulative costs per step."""
    return [{"seconds": s, "reward": r, **{u: c * (i + 1) for u, c in per_step.items()}}
            for i, (s, r) in enumerate(zip(times, rewards, strict=True))]


def test_cost_to_gain_on_hand_made_curves():
    t_fast, t_slow = np.arange(0, 5, 0.1), np.arange(0, 10, 0.1)
    fast = _curve(t_fast, np.minimum(t_fast, 1.0), {"sequences": 16})  # gain 1 at t = 1
    slow = _curve(t_slow, np.minimum(t_slow / 4, 1.0), {"sequences": 16})  # at t = 4
    cost = cost_to_gain(fast, slow, 0.0, fraction=0.5, window=1)
    assert cost["a"]["seconds"] == pytest.approx(0.5)  # step 5
    assert cost["b"]["seconds"] == pytest.approx(2.0)  # step 20
    assert cost["a"]["sequences"] == 16 * 6 and cost["b"]["sequences"] == 16 * 21
    assert cost["b"]["reached"] and cost["gain"] == pytest.approx(1.0)


def test_cost_to_gain_reads_the_cost_at_the_end_of_the_smoothing_window():
    rewards = [0, 0, 0, 1, 1, 1, 1, 1]
    curve = _curve(np.arange(8.0), rewards, {"policy_tokens": 10})
    cost = cost_to_gain(curve, curve, 0.0, fraction=0.5, window=2)
    # the 2-step average first reaches 0.5 over steps 2-3: the cost through step 3
    assert cost["a"]["seconds"] == 3.0 and cost["a"]["policy_tokens"] == 40


def test_traced_costs_count_what_each_method_runs():
    """OPD: K teacher forwards per completion token and no reward; RL: one reward per
    sequence and one reference forward per token only when its KL weight is nonzero."""
    from methods.proteinopd.distillation import _Traced
    from models.lm.rollout import Rollouts

    class Sampler:
        def sample(self, batch_idx):
            mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
            ids = torch.zeros_like(mask)
            return None, Rollouts(ids, mask, mask, mask.float(), 0)

    class Traced(_Traced, Sampler):
        frozen_per_token, rewards_per_sequence = 3, 1

    module = Traced()
    module._trace(lambda completions: 0.0)
    module.sample(0)
    module.sample(1)
    last = module.curve[-1]
    assert (last["sequences"], last["policy_tokens"], last["frozen_tokens"],
            last["reward_calls"]) == (6, 2 * 12, 3 * 12, 6)


# -- runs ---------------------------------------------------------------------------------------

def _small(tmp_path, front_kl_betas: str = "[]"):
    """The smoke configuration on the full corpus size, without the designability front
    unless asked for (the smoke run covers it)."""
    return [*SMOKE["proteinopd"], "dataset.sequences=3000",
            f"protocol.front_kl_betas={front_kl_betas}",
            f"paths.cache_dir={tmp_path / 'cache'}"]


def _protocol_only(tmp_path, groups=("protocol",)):
    """The smoke preset's sizes of ``groups``, for runs that swap the dataset or the
    model."""
    return [*smoke_settings("proteinopd", groups), "protocol.front_kl_betas=[]",
            f"paths.cache_dir={tmp_path / 'cache'}"]


def test_proteinopd_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("proteinopd")
    for key in ("property_gain_opd", "property_gain_rl", "designability_nll_opd_minus_base",
                "designability_nll_rl_minus_base", "time_speedup_opd_vs_rl",
                "property_gain_arithmetic", "property_gain_single",
                "property_gain_sequential"):
        assert key in metrics and np.isfinite(metrics[key])
    assert (run_dir / "figures" / "proteinopd.png").is_file()


def test_weights_must_match_the_objectives(tmp_path):
    _, failed = run_failing(["+paper=proteinopd", "method.weights=[1.0]"], tmp_path / "run")
    assert "method.weights has 1 entries for 2 objectives" in failed["error"]


@pytest.mark.slow  # over 10 s: make test-slow
def test_a_fasta_corpus_runs_through_the_same_protocol(run_dir, tmp_path):
    corpus = proteins.synthetic_corpus(300, np.random.default_rng(2), min_length=30,
                                       max_length=60)
    fasta = tmp_path / "corpus.fasta"
    fasta.write_text("".join(f">seq{i}\n{s}\n" for i, s in enumerate(corpus)))
    metrics = run_paper(_protocol_only(tmp_path, ("protocol", "model")) + [
        "dataset=fasta_proteins", f"dataset.path={fasta}", "dataset.max_length=60"], run_dir)
    assert np.isfinite(metrics["property_gain_opd"])


def test_cost_to_gain_handles_curves_shorter_than_the_window():
    cost = cost_to_gain(_curve([0.0, 1.0], [0.0, 1.0], {}), _curve([0.0, 2.0], [0.0, 2.0], {}),
                        0.0, window=10)
    assert cost["a"]["seconds"] == 1.0 and cost["b"]["seconds"] == 2.0


def _hub_format_protein_lm(folder):
    """A tiny GPT-2 with a transformers tokenizer saved like a hub model (ProtGPT2's layout:
    ``<|endoftext|>`` as EOS, no pad token)."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {a: i for i, a in enumerate(proteins.AMINO_ACIDS)} | {"<|endoftext|>": 20}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE(vocab, [])),
                                        eos_token="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=21, n_positions=96, n_embd=32, n_layer=1,
                                       n_head=4, bos_token_id=20, eos_token_id=20))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


def test_tokenizer_alphabet_round_trips_and_cuts_at_eos(tmp_path):
    alphabet = proteins.tokenizer_alphabet(_hub_format_protein_lm(tmp_path / "lm"))
    assert alphabet.eos == 20 and alphabet.pad == 20
    assert alphabet.decode(alphabet.encode("MKVL") + [20, 3]) == "MKVL"


@pytest.mark.slow  # over 5 s: make test-slow
def test_a_hub_format_protein_lm_runs_through_the_same_protocol(run_dir, tmp_path):
    _hub_format_protein_lm(tmp_path / "lm")
    corpus = proteins.synthetic_corpus(200, np.random.default_rng(3), min_length=30,
                                       max_length=60)
    fasta = tmp_path / "corpus.fasta"
    fasta.write_text("".join(f">seq{i}\n{s}\n" for i, s in enumerate(corpus)))
    metrics = run_paper(_protocol_only(tmp_path) + [
        "model=protgpt2", f"model.hub_id={tmp_path / 'lm'}", "dataset=fasta_proteins",
        f"dataset.path={fasta}", "dataset.max_length=60"], run_dir)
    assert np.isfinite(metrics["property_gain_opd"])


def test_protgpt2_fails_offline_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=proteinopd", "model=protgpt2",
                             f"paths.cache_dir={tmp_path}"], tmp_path / "run")
    assert "nferruz/ProtGPT2" in failed["error"] and "\n" not in failed["error"]


# -- the designability front ----------------------------------------------------------------

def _point(method, gain, nll, homopolymer, identity, kl_beta=float("nan")):
    return {"method": method, "gain": gain, "nll": nll, "homopolymer": homopolymer,
            "identity": identity, "kl_beta": kl_beta}


def test_designability_at_equal_gain_interpolates_along_the_front():
    from methods.proteinopd.front import at_equal_gain

    front = [_point("rl", 2.0, -0.4, 6.0, 0.3), _point("rl", 0.0, 0.0, 3.0, 0.1),
             _point("rl", 1.0, -0.2, 4.0, 0.2)]  # unsorted on purpose
    assert at_equal_gain(0.5, front) == pytest.approx(
        {"nll": -0.1, "homopolymer": 3.5, "identity": 0.15})
    assert at_equal_gain(2.0, front)["homopolymer"] == 6.0  # an end point is inside
    assert at_equal_gain(2.5, front) is None and at_equal_gain(-0.1, front) is None


def test_opd_is_compared_with_rl_at_its_own_gain():
    from methods.proteinopd.front import no_worse_at_equal_gain

    rl = [_point("rl", 0.0, 0.0, 3.0, 0.1, 5.0), _point("rl", 2.0, -0.4, 6.0, 0.3, 0.1)]
    better = _point("opd", 1.0, -0.3, 4.0, 0.15)  # RL there: (-0.2, 4.5, 0.2)
    worse_nll = _point("opd", 1.0, -0.1, 4.0, 0.15)
    beyond = _point("opd", 3.0, -0.1, 3.0, 0.1)  # a gain RL does not reach: not compared
    opd = [better, worse_nll, beyond]
    assert no_worse_at_equal_gain(opd, rl) == (0.5, 2)
    assert no_worse_at_equal_gain(opd, rl, ("homopolymer",)) == (1.0, 2)
    assert no_worse_at_equal_gain(opd, rl, ("nll",)) == (0.5, 2)
    share, compared = no_worse_at_equal_gain([beyond], rl)
    assert compared == 0 and np.isnan(share)


def test_matched_rl_reaches_opds_gain_with_the_closest_designability():
    from methods.proteinopd.front import matched_rl

    opd = _point("opd", 0.8, -0.1, 4.0, 0.1)
    collapsed = _point("rl", 4.0, -0.8, 12.0, 0.7, kl_beta=0.0)  # 3x and 7x OPD's
    near = _point("rl", 1.0, -0.2, 5.0, 0.15, kl_beta=1.0)  # 1.25x and 1.5x
    half_near = _point("rl", 2.0, -0.3, 4.0, 0.5, kl_beta=0.2)  # 1x and 5x
    closest_but_short = _point("rl", 0.3, 0.0, 4.0, 0.1, kl_beta=5.0)  # the same, less gain
    rows = [opd, collapsed, near, half_near, closest_but_short]
    assert matched_rl(rows)["kl_beta"] == 1.0
    assert matched_rl([opd, collapsed, half_near])["kl_beta"] == 0.2
    assert matched_rl([opd, closest_but_short])["kl_beta"] == 5.0  # none reaches: closest


@pytest.mark.slow  # over 10 s: make test-slow
def test_three_objectives_run_without_a_teacher_weight_front(tmp_path):
    three = ["protocol.objectives=[thermostability,stability,charge]",
             "method.weights=[0.34,0.33,0.33]"]
    metrics = run_paper(_small(tmp_path, "[1.0]") + three, tmp_path / "run")
    assert np.isfinite(metrics["property_gain_opd"])
    assert metrics["front_opd_points_in_rl_range"] <= 1  # the student alone: no front
    assert not (tmp_path / "run" / "tables" / "pareto.csv").exists()
