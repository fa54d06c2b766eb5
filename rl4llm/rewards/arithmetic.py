"""Exact verifier for the arithmetic task (``rl4llm.data.arithmetic``).

The final answer is the integer after the LAST ``#`` of the completion, matched strictly: an optional
``-``, then one or more ASCII digits, then nothing but whitespace to the end. Anything else
(``"#66;"``, ``"# 66"``, ``"#6.0"``, ``"#٦٦"`` with non-ASCII digits, no ``#`` at all) has no answer.

Answers are compared as integers: ``"#066"`` and ``"#-0"`` match ``"66"`` and ``"0"``. The comparison is
done on canonical strings (leading zeros stripped, ``-0`` -> ``0``), which equals integer equality without
ever calling ``int()`` on model output (Python refuses ``int()`` of strings over 4300 digits).

:func:`format_score` (reward ``format_arithmetic``) is the task's format reward: 1 iff the completion is the worked
form and nothing else, right or wrong (a constraint or bonus beside the correctness, ``config.reward_weighting``).

:func:`step_labels` is the task's exact process judge (``rl4llm.rewards.process``: FAPO's flawed positives, PROF, step
rewards): each segment of a worked answer judged sound or not given the problem and the steps before it;
:func:`first_flawed_step` is its first unsound one. :func:`rubric_items` and :func:`rubric_scores` read the same judge
as a rubric (HeRL's hindsight guidance, ``rl4llm.train.hints.hindsight_groups``): one item per operation, then the
right final answer.
"""

from __future__ import annotations

import re

from rl4llm.data import arithmetic as arithmetic_task

_INTEGER = re.compile(r"(-?)([0-9]+)\s*")
_WORKED = re.compile(r"(?:-?[0-9]+[-+*]-?[0-9]+=-?[0-9]+;)*#-?[0-9]+\s*")
_PROBLEM = re.compile(r"\s*([0-9]+)((?:[-+*][0-9]+)+)=")
_OPERATION = re.compile(r"([-+*])([0-9]+)")
_STEP = re.compile(r"(-?[0-9]+)([-+*])(-?[0-9]+)=(-?[0-9]+)")


def _canonical(sign: str, digits: str) -> str:
    """Canonical decimal form of ``sign + digits``: no leading zeros, no negative zero."""
    magnitude = digits.lstrip("0")
    return f"{sign}{magnitude}" if magnitude else "0"


def extract_answer(completion: str) -> str | None:
    """The canonical integer after the last ``#`` of ``completion``, or None if there is none. Never raises
    on any ``str``."""
    hash_pos = completion.rfind("#")
    if hash_pos < 0:
        return None
    match = _INTEGER.fullmatch(completion, hash_pos + 1)
    return _canonical(match.group(1), match.group(2)) if match else None


def score(completion: str, answer: str) -> float:
    """1.0 iff the completion's final answer equals ``answer`` as an integer, else 0.0. Never raises on any
    ``completion``; raises ValueError if ``answer`` itself is not an integer string (a task bug)."""
    match = _INTEGER.fullmatch(answer)
    if match is None:
        raise ValueError(f"reference answer {answer!r} is not an integer string")
    return 1.0 if extract_answer(completion) == _canonical(match.group(1), match.group(2)) else 0.0


def format_score(completion: str, answer: str) -> float:
    """1.0 iff the completion has the worked form of ``rl4llm.data.arithmetic`` and nothing else: steps
    ``a<op>b=c;`` then ``#n`` (trailing whitespace allowed), whatever the numbers; the reference answer is ignored
    (a format reward: a constraint or bonus beside ``score``)."""
    del answer
    return 1.0 if _WORKED.fullmatch(completion) else 0.0


def step_labels(prompt: str, completion: str) -> list[bool]:
    """Each segment of a worked answer to the problem that ``prompt`` starts with, judged on its own: True when sound.
    ``completion`` is split at ``;``: steps ``0 .. m-1`` then the final ``#answer`` (segment m), m + 1 labels.

    Step k (``lhs op rhs=result``) is sound iff lhs is the problem's first operand (k = 0) or step k-1's stated
    result (a step that builds on an earlier error is not itself an error; after a segment that is not a step, lhs is
    not checked), op and rhs are the problem's k-th operation, and result = lhs op rhs. A segment that is not a step,
    and a step beyond the problem's operations, is unsound. The final answer is sound iff every operation has its step
    and the answer restates the last step's stated result (a skipped step or a final answer that does not follow is
    its flaw). ``"7+5-1=7+5=13;13-1=12;#12"`` -> [False, True, True] (a right answer from a wrong step).

    The prompt may go on after its ``=`` (a hint: GHPO); the problem must parse (a task bug otherwise: ValueError).
    Integers are compared as such without ``int()`` of unbounded model output (at most 30 digits are read).
    """
    problem = _PROBLEM.match(prompt)
    if problem is None:
        raise ValueError(f"prompt {prompt[:60]!r} does not start with an arithmetic problem 'a+b-c='")
    operations = _OPERATION.findall(problem.group(2))
    *steps, final = completion.split(";")
    labels = []
    running = int(problem.group(1))  # the stated result the next step builds on (None: not known)
    for k, step in enumerate(steps):
        match = _STEP.fullmatch(step)
        if match is None or any(len(match.group(i).lstrip("-")) > 30 for i in (1, 3, 4)):
            labels.append(False)
            running = None
            continue
        lhs, op, rhs, result = int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4))
        labels.append(k < len(operations) and running in (None, lhs) and op == operations[k][0]
                      and rhs == int(operations[k][1]) and result == arithmetic_task.apply_operation(lhs, op, rhs))
        running = result
    answer = extract_answer(final) if final.lstrip().startswith("#") else None
    labels.append(len(steps) == len(operations) and running is not None and answer is not None
                  and len(answer.lstrip("-")) <= 30 and int(answer) == running)
    return labels


def first_flawed_step(prompt: str, completion: str) -> int:
    """The index of the first unsound segment of `step_labels` (steps, then the final answer), -1 when every one is
    sound. ``"7+5-1=7+5=13;13-1=12;#12"`` -> 0 (a flawed positive)."""
    labels = step_labels(prompt, completion)
    return labels.index(False) if False in labels else -1


def rubric_items(prompt: str) -> list[str]:
    """The rubric of the problem that ``prompt`` starts with, one item per requirement of a worked answer, each written
    in the task's alphabet: item k < m is the problem's k-th operation (``"-19"``: apply it to the running result,
    step k), item m is ``"#"`` (the final answer). ``"37+48-19="`` -> ``["+48", "-19", "#"]``."""
    problem = _PROBLEM.match(prompt)
    if problem is None:
        raise ValueError(f"prompt {prompt[:60]!r} does not start with an arithmetic problem 'a+b-c='")
    return [op + rhs for op, rhs in _OPERATION.findall(problem.group(2))] + ["#"]


def rubric_scores(prompt: str, completion: str, answer: str) -> list[bool]:
    """Whether ``completion`` meets each item of ``rubric_items(prompt)``: step item k is met iff the completion's
    segment k is a sound step by `step_labels` (a missing step is unmet), the final item iff its final answer is
    ``answer`` (`score`). ``"37+48-19="``, ``"37+48=85;85-19=60;#60"``, ``"66"`` -> [True, False, False]."""
    steps = step_labels(prompt, completion)[:-1]
    operations = len(rubric_items(prompt)) - 1
    return [k < len(steps) and steps[k] for k in range(operations)] + [score(completion, answer) == 1.0]
