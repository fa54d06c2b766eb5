"""The outcome reward model (`rl4llm.reward_model`): last-non-pad-token scores invariant to batch composition, to
padding and to sharding, defined scores for bad input, the Bradley–Terry / BCE objectives against a numpy transcription, training
steps that learn, and a bit-exact checkpoint round trip."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import models
from rl4llm import reward_model as rm
from rl4llm.data import arithmetic
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import optim
from tests import subprocess_env

CFG = models.get_config("nano", vocab_size=24)


def test_init_head_is_openrlhf_normal():
    params = rm.init_params(CFG, jax.random.key(3))
    kernel = np.asarray(params["head"]["kernel"])
    assert float(params["head"]["bias"]) == 0.0 and kernel.shape == (CFG.hidden_size,)
    assert 0.3 / (CFG.hidden_size + 1) < kernel.std() < 3.0 / (CFG.hidden_size + 1)
    trunk = models.init_params(CFG, jax.random.key(9))
    copied = rm.init_params(CFG, jax.random.key(3), trunk)["trunk"]
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(trunk)))


def _params(seed=0):
    """Random trunk and a larger random head, so scores differ clearly across inputs."""
    params = rm.init_params(CFG, jax.random.key(seed))
    kernel = 0.5 * jax.random.normal(jax.random.key(seed + 100), (CFG.hidden_size,))
    return {"trunk": params["trunk"], "head": {"kernel": kernel, "bias": jnp.asarray(0.25)}}


@pytest.fixture(scope="module")
def params():
    return _params()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return sentencepiece_tokenizer.get_or_train_task_tokenizer(str(tmp_path_factory.mktemp("tok")),
                                                               arithmetic.ArithmeticConfig())


def _sequences(rng, n, lo=3, hi=9):
    return [rng.integers(3, CFG.vocab_size, size=rng.integers(lo, hi + 1)).tolist() for _ in range(n)]


def _right_padded(seqs, width, pad_left=0):
    """Rows `[0]*pad_left + seq + [0]*...` of `width`, and their masks."""
    tokens = np.zeros((len(seqs), width), np.int32)
    mask = np.zeros((len(seqs), width), np.int32)
    for i, s in enumerate(seqs):
        tokens[i, pad_left:pad_left + len(s)] = s
        mask[i, pad_left:pad_left + len(s)] = 1
    return tokens, mask


def _numpy_score(params, seq):
    """Independent reading: the unpadded sequence's last final-norm hidden state through `h·w + b` in numpy."""
    tokens = jnp.asarray([seq], jnp.int32)
    hidden, _ = models.forward(CFG, params["trunk"], tokens, jnp.arange(len(seq))[None], jnp.ones_like(tokens))
    h = np.asarray(hidden[0, -1], np.float64)
    return float(h @ np.asarray(params["head"]["kernel"], np.float64) + float(params["head"]["bias"]))


def test_score_is_the_head_at_the_last_non_pad_token(params):
    seqs = _sequences(np.random.default_rng(0), 5)
    tokens, mask = _right_padded(seqs, 12)
    got = rm.make_score_fn(CFG)(params, tokens, mask)
    np.testing.assert_allclose(got, [_numpy_score(params, s) for s in seqs], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm.score(CFG, params, tokens, mask), got, rtol=1e-6, atol=1e-6)  # jit == eager
    assert np.std(np.asarray(got)) > 1e-3  # scores depend on the input


def test_scores_are_invariant_to_batch_composition(params):
    seqs = _sequences(np.random.default_rng(1), 8)
    tokens, mask = _right_padded(seqs, 12)
    fn = rm.make_score_fn(CFG)
    whole = np.asarray(fn(params, tokens, mask))
    singly = np.concatenate([fn(params, tokens[i:i + 1], mask[i:i + 1]) for i in range(8)])
    order = np.random.default_rng(2).permutation(8)
    permuted = np.asarray(fn(params, tokens[order], mask[order]))
    np.testing.assert_allclose(singly, whole, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(permuted, whole[order], rtol=1e-5, atol=1e-5)


def test_scores_are_invariant_to_padding_layout_and_length(params):
    seqs = _sequences(np.random.default_rng(3), 4)
    fn = rm.make_score_fn(CFG)
    reference = np.asarray(fn(params, *_right_padded(seqs, 9)))
    right_long = np.asarray(fn(params, *_right_padded(seqs, 20)))
    left = np.asarray(fn(params, *_right_padded(seqs, 16, pad_left=5)))  # pads on both sides
    # the rollouts' layout: prompt left-padded, completion right-padded
    split = [(s[:2], s[2:]) for s in seqs]
    pt, pm = np.zeros((4, 6), np.int32), np.zeros((4, 6), np.int32)
    ct, cm = _right_padded([c for _, c in split], 10)
    for i, (p, _) in enumerate(split):
        pt[i, 6 - len(p):], pm[i, 6 - len(p):] = p, 1
    rollout_layout = np.asarray(fn(params, np.concatenate([pt, ct], 1), np.concatenate([pm, cm], 1)))
    for other in (right_long, left, rollout_layout):
        np.testing.assert_allclose(other, reference, rtol=1e-5, atol=1e-5)


def test_scores_are_invariant_to_sharding():
    """tests/reward_model_sharded_check.py on 4 simulated devices: data, fsdp, tensor and mixed meshes."""
    root = pathlib.Path(__file__).resolve().parent.parent
    env = subprocess_env.simulated_cpu_devices(4, PYTHONPATH=str(root))
    result = subprocess.run([sys.executable, str(root / "tests" / "reward_model_sharded_check.py")], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


def test_bad_input_gets_a_defined_finite_score(tokenizer):
    cfg = models.get_config("nano", vocab_size=tokenizer.vocab_size)
    params = rm.init_params(cfg, jax.random.key(0))
    params["head"] = {"kernel": jnp.ones((cfg.hidden_size,)), "bias": jnp.asarray(0.0)}
    long_text = "1+2=3;" * 50
    prompts, completions = ["3+4=", "3+4=", "3+4="], ["", long_text, long_text[:10]]
    tokens, mask = rm.encode_sequences(tokenizer, prompts, completions, prompt_bucket=8, completion_len=10)
    scores = np.asarray(rm.make_score_fn(cfg)(params, tokens, mask))
    assert np.all(np.isfinite(scores))
    assert mask[0, 8:].sum() == 1 and tokens[0, 8] == tokenizer.eos_id  # empty: its eos alone
    assert scores[1] == pytest.approx(scores[2], abs=1e-6)  # over-long: its first 10 tokens (no eos)
    assert float(rm.score(cfg, params, np.zeros((1, 5), np.int32), np.zeros((1, 5), np.int32))[0]) == 0.0


def _pairs(seed, p=6, width=10):
    rng = np.random.default_rng(seed)
    (ct, cm), (rt, rmask) = (_right_padded(_sequences(rng, p), width) for _ in range(2))
    return rm.PairBatch(chosen_tokens=ct, chosen_mask=cm, rejected_tokens=rt, rejected_mask=rmask,
                        margin=np.zeros(p, np.float32))


def test_bradley_terry_objective_matches_numpy(params):
    batch = _pairs(4)
    rc = np.asarray(rm.score(CFG, params, batch.chosen_tokens, batch.chosen_mask), np.float64)
    rr = np.asarray(rm.score(CFG, params, batch.rejected_tokens, batch.rejected_mask), np.float64)
    for margin in (np.zeros(6), np.linspace(-1.0, 1.5, 6)):
        loss, metrics = rm.bradley_terry_objective(CFG, params, batch.replace(margin=margin.astype(np.float32)))
        expected = np.mean(np.log1p(np.exp(-(rc - rr - margin))))  # −log σ(r_c − r_r − m)
        assert float(loss) == pytest.approx(expected, rel=1e-5)
        assert float(metrics["accuracy"]) == pytest.approx(np.mean(rc > rr))
    # a zero head scores every sequence 0: the loss is log 2 and no pair is ranked right (a tie is wrong)
    zero = {"trunk": params["trunk"], "head": rm.value_head.init_head(CFG)}
    loss, metrics = rm.bradley_terry_objective(CFG, zero, batch)
    assert float(loss) == pytest.approx(np.log(2.0), rel=1e-6) and float(metrics["accuracy"]) == 0.0


def test_bce_objective_matches_numpy(params):
    tokens, mask = _right_padded(_sequences(np.random.default_rng(5), 6), 10)
    labels = np.array([1, 0, 1, 1, 0, 0.5], np.float32)
    loss, metrics = rm.bce_objective(CFG, params, rm.LabelBatch(tokens=tokens, attention_mask=mask, labels=labels))
    r = np.asarray(rm.score(CFG, params, tokens, mask), np.float64)
    expected = np.mean(labels * np.log1p(np.exp(-r)) + (1 - labels) * np.log1p(np.exp(r)))
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["accuracy"]) == pytest.approx(np.mean((r > 0) == (labels > 0.5)))


@pytest.mark.parametrize("objective", rm.OBJECTIVES)
def test_a_few_steps_fit_a_fixed_batch(objective):
    optimizer = optim.make_optimizer(1e-2, 0, 0.0, 1.0)
    state = rm.init_state(rm.init_params(CFG, jax.random.key(1)), optimizer)
    if objective == "bradley_terry":
        batch = _pairs(6)
    else:
        tokens, mask = _right_padded(_sequences(np.random.default_rng(7), 8), 10)
        batch = rm.LabelBatch(tokens=tokens, attention_mask=mask, labels=np.array([1, 0] * 4, np.float32))
    step = rm.make_train_step(CFG, optimizer, objective)
    first = None
    for _ in range(30):
        state, metrics = step(state, batch)
        first = first if first is not None else float(metrics["loss"])
    final = rm.make_eval_fn(CFG, objective)(state.params, batch)
    assert int(state.step) == 30
    assert float(final["loss"]) < 0.5 * first and float(final["accuracy"]) == 1.0


def test_checkpoint_round_trip_is_bit_exact(params, tmp_path):
    meta = {"tokenizer_fingerprint": [3, 4, 5], "steps": 7}
    rm.save(str(tmp_path / "rm"), CFG, params, meta)
    cfg, loaded, loaded_meta = rm.load(str(tmp_path / "rm"))
    assert cfg == CFG and loaded_meta == meta
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="holds no reward model"):
        rm.load(str(tmp_path))


def test_scorer_refuses_another_tokenizer(params, tokenizer, tmp_path):
    cfg = models.get_config("nano", vocab_size=tokenizer.vocab_size)
    rm.save(str(tmp_path / "rm"), cfg, rm.init_params(cfg, jax.random.key(0)),
            {"tokenizer_fingerprint": rm.tokenizer_fingerprint(tokenizer, arithmetic.ALPHABET)})
    scorer = rm.Scorer.from_checkpoint(str(tmp_path / "rm"), tokenizer, arithmetic.ALPHABET)
    tokens, mask = rm.encode_sequences(tokenizer, ["1+2="], ["1+2=3;#3"], prompt_bucket=8, completion_len=12)
    assert scorer(tokens, mask).shape == (1,)
    with pytest.raises(ValueError, match="another tokenizer"):
        rm.Scorer.from_checkpoint(str(tmp_path / "rm"), tokenizer, arithmetic.ALPHABET[::-1])
