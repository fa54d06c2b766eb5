"""GRPO on GSM8K (or any GSM8K / MATH-style data) read from local files: nothing is downloaded at run time."""

from configs import default


def get_config():
    """GRPO on GSM8K (or any GSM8K / MATH-style data) read from local files: nothing is downloaded at run time.

    Put the data on disk first, e.g. the `openai/gsm8k` "main" splits as JSON lines with fields `question` and
    `answer` (the answer text ends in "#### <number>"):

        /data/gsm8k/train.jsonl
        /data/gsm8k/test.jsonl

    (Parquet works too: name the files *.parquet. A MATH-style file with `problem` / `solution` fields works with
    --config.task.local.prompt_template="{problem}\\n" --config.task.local.answer_field=solution
    --config.task.local.answer_format=boxed --config.task.local.solution_field=solution.) Then run:

        python -m experiments.train --config=configs/grpo_gsm8k_local.py --workdir=/tmp/rl4llm/gsm8k \
            --config.task.local.train_path=/data/gsm8k/train.jsonl --config.task.local.test_path=/data/gsm8k/test.jsonl

    SFT warm start on the reference solutions (the `answer` field, worked reasoning ending in "#### n"), then GRPO
    with the lenient math verifier (rl4llm.rewards.math: boxed / #### / Answer: / last number, numeric and symbolic
    equivalence), scored in 2 worker processes with a hard timeout. The built-in char tokenizer is trained on the
    data and the model starts from scratch: this recipe exercises the real-data path on CPU; a meaningful GSM8K
    accuracy needs a pretrained model and its tokenizer.

    Result: not measured (tests/test_tasks_train.py runs it for 2 RL steps on a 40-line file it writes).
    """
    c = default.get_config()
    c.task.name = "local"
    c.task.reward = "math"
    c.task.local.train_path = "/data/gsm8k/train.jsonl"
    c.task.local.test_path = "/data/gsm8k/test.jsonl"
    c.task.local.prompt_template = "{question}\n"
    c.task.local.answer_field = "answer"
    c.task.local.answer_format = "gsm8k"
    c.task.local.solution_field = "answer"
    c.task.reward_workers = 2
    c.task.reward_timeout_s = 30.0
    c.model.preset = "small"
    c.sampling.max_new_tokens = 256
    c.sampling.prompt_bucket = 64
    c.rl.num_prompts = 8
    c.rl.num_generations = 8
    c.eval.num_examples = 256
    return c
