"""The process reward model's training sequences (`reward_model.objective="process"`, `train.reward_model_job`):
reference and corrupted solutions, or a policy's own samples, every step labelled by the task's exact judge."""

from __future__ import annotations

import numpy as np

from rl4llm import process_reward_model as prm
from rl4llm.data import arithmetic
from rl4llm.rewards import process as process_lib
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import runs

STEP_JUDGE = process_lib.JUDGES["arithmetic_steps"]  # the PRM's labels


def step_sequences(config, tokenizer, examples, rng: np.random.Generator) -> prm.StepBatch:
    """The PRM's batch ("process"): each example's reference solution, then a `wrong_solution` of it (the same 2P
    sequences as `reward_model_job.preference_pairs`'), every step labelled by the task's exact judge
    (`prm.encode_steps`)."""
    wrong = [arithmetic.wrong_solution(e.solution, rng, config.reward_model.corruption) for e in examples]
    return prm.encode_steps(tokenizer, STEP_JUDGE, [e.prompt for e in examples] * 2,
                            [e.solution for e in examples] + wrong, prompt_bucket=config.sampling.prompt_bucket,
                            completion_len=config.sampling.max_new_tokens)


def policy_step_sequences(config, tokenizer, policy: runs.Policy, examples, key) -> tuple[prm.StepBatch, dict]:
    """The PRM's sequences from `policy`'s own completions of `examples` ("process"): G = `config.rl.num_generations`
    samples of each prompt at its rollout settings (`evaluate.generate_scored`, `key`), every one kept, its steps
    labelled by the judge; encoded from their text as `reward_model_job.policy_pairs`' are (a sample whose tokens do
    not survive decoding, an untrained policy's, is read as its text). -> (StepBatch, metrics `sequences`,
    `accepted_frac` (the verifier's), `sound_step_frac` (the judge's, over all steps))."""
    g = config.rl.num_generations
    prompts, answers = [e.prompt for e in examples for _ in range(g)], [e.answer for e in examples for _ in range(g)]
    setup = policy.setup
    completions = evaluate_lib.generate_scored(setup.model_cfg, policy.params, setup.tokenizer, prompts, answers, key,
                                               setup.rollout_cfg, setup.eval_spec, setup.score_fn)
    batch = prm.encode_steps(tokenizer, STEP_JUDGE, prompts, list(completions.texts),
                             prompt_bucket=config.sampling.prompt_bucket,
                             completion_len=config.sampling.max_new_tokens)
    ends = np.asarray(batch.step_ends, bool)
    metrics = {"sequences": float(len(prompts)), "accepted_frac": float(np.mean(completions.rewards == 1.0)),
               "sound_step_frac": float(np.asarray(batch.step_labels)[ends].mean())}
    return batch, metrics
