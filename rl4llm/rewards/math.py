r"""Math answer verifier (GSM8K / MATH style): our final-answer extraction, Hugging Face's ``math-verify`` as the
equivalence engine, configured as TRL's ``accuracy_reward`` does, so rewards computed here agree with TRL / open-r1 /
verl on boxed answers.

**Extraction** (:func:`extract_answer`, our code: math-verify with TRL's settings only reads ``\boxed`` and
``answer: $...$`` LaTeX, which would score every GSM8K ``#### 18`` completion 0), first that applies:

1. the content of the LAST ``\boxed{...}`` / ``\fbox{...}`` (nested braces matched; ``\boxed 5`` too). Ours:
   math-verify with TRL's config reads ``\boxed{4} ... \boxed{5}`` as the set {4, 5} (and ``$\boxed{5}$ and
   $\boxed{8}$`` as {5, 8}), so a completion that corrects itself scores 0 there; we keep the last box, as verl's
   MATH scorers and our previous verifier do. math-verify reads neither ``\fbox`` nor ``\boxed 5``;
2. the text after the LAST ``####`` (GSM8K), up to the end of its line;
3. the text after the LAST ``Answer:`` (case-insensitive; Minerva / DAPO "Answer:" line), up to the end of its line;
4. lenient mode only: the LAST number in the text (verl gsm8k "flexible"), e.g. ``"so 18 eggs."`` -> ``18``.

Strict mode (``math_strict``) is rules 1-3 only: the completion must mark its answer. The two modes differ in
extraction only; equivalence is the same.

**Equivalence** (:func:`is_equivalent`, math-verify): the extracted answer is handed to ``math_verify.parse`` as
``\boxed{answer}`` with TRL's prediction config (``LatexExtractionConfig(normalization_config=
NormalizationConfig(units=True), boxed_match_priority=0, try_extract_without_anchor=False)``, first match); the
reference as ``\boxed{reference}`` (verl's way of making a bare reference such as ``x^2+1`` parse) with math-verify's
default gold config (LaTeX + plain expressions); then ``math_verify.verify(gold, pred)`` with its defaults (numbers
equal after rounding to 6 decimals, symbolic equality by sympy, sets unordered, intervals / tuples / matrices /
equations such as ``x=3`` vs ``3``, ``10\%`` vs ``0.1``, units and ``^\circ`` dropped). What TRL's config does not
accept we do not accept either (``\frac12`` without braces, ``1e2``, ``30°``, ``\boxed{12.}``): the price of
comparable numbers. Before handing over, non-boxed answers (rules 2-4, which TRL never extracts) lose ``$`` /
``\(`` ``\)`` delimiters and a trailing period, and a bare ``%`` becomes ``\%`` (LaTeX would read it as a comment).

**Time limit** (our code): math-verify's own timeouts are ``signal.alarm`` based, whole seconds, and raise
ValueError off the main thread. We switch them off (``parsing_timeout=None``, ``timeout_seconds=None``) and run the
whole parse + verify of one answer under one ``signal.setitimer`` limit of :data:`SYMBOLIC_TIMEOUT_S` (sub-second,
re-raised every 0.1 s until the work stops) when called from a main thread: the trainer's inline scoring, or a
``rl4llm.rewards.pool`` worker, whose pebble task runs in the worker process's main thread. The limit raises a
``BaseException`` subclass, so math-verify's ``except Exception`` cannot swallow it and carry on unbounded
(``9^{9^{9^9}}`` would compute for minutes). Off a main thread there is no in-process limit: the caller's per-call
pool timeout is the limit there, never a silently dead alarm (verl PR #5635). Answers longer than
:data:`MAX_ANSWER_CHARS` are compared as exact strings only: math-verify's ANTLR parser takes seconds on deeply
nested input, so one long answer would spend the whole limit.

**Speed** (ours): equal plain numerals (``18`` / ``18.0``) are accepted without math-verify (which always accepts
them; it costs ~1 ms an answer), and parsed references are cached (a GRPO group shares one).

**Majority-vote keys** (:func:`normalize`, :func:`canonical_answer`, for TTRL pseudo-labels): exact numbers become
``p/q`` or integers (``0.5``, ``\frac{1}{2}``, ``\dfrac12`` all vote ``1/2``), ``x = 5`` becomes ``5``, anything
else math-verify's normalised LaTeX string.

Model output never raises: anything unparsable, or out of time, scores 0.
"""

from __future__ import annotations

import contextlib
import fractions
import functools
import logging
import re
import signal
import threading

# Budget for one parse + verify (seconds), and the answer size beyond which we compare strings only.
SYMBOLIC_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 1000

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_LINE = re.compile(r"answer\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


# ----------------------------------------------------------------------------------------- extraction


def _brace_group(text: str, start: int) -> tuple[str, int] | None:
    """The content of the ``{...}`` group opening at ``text[start]`` (nested braces matched) and the index after
    it; None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` / ``\fbox{...}`` with balanced braces (``\boxed 5`` -> ``5``), or None."""
    for match in reversed(list(_BOXED.finditer(text))):
        end = match.end()
        if end < len(text) and text[end] == "{":
            group = _brace_group(text, end)
            if group is not None:
                return group[0]
        elif match.group(0).endswith(" ") and end < len(text):  # "\boxed 5": up to the next space or '$'
            return re.split(r"[\s$]", text[end:], maxsplit=1)[0]
    return None


def _marked_answer(text: str, *, lenient: bool) -> tuple[str, bool] | None:
    """(answer, came from a box) by rules 1-4 of the module docstring, or None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed, True
    for marker in ("####", None):
        if marker is None:
            matches = list(_ANSWER_LINE.finditer(text))
            pos = matches[-1].end() if matches else -1
        else:
            pos = text.rfind(marker)
            pos = pos + len(marker) if pos >= 0 else -1
        if pos >= 0:
            line = text[pos:].strip().split("\n", 1)[0].strip()
            if line:
                return line, False
    if lenient:
        numbers = _NUMBER.findall(text)
        if numbers:
            return numbers[-1], False
    return None


def extract_answer(text: str, *, lenient: bool = False) -> str | None:
    """The final answer of a completion (module docstring, rules 1-4), unnormalised, or None."""
    found = _marked_answer(text, lenient=lenient)
    return None if found is None else found[0]


def _as_boxed(answer: str, *, from_box: bool) -> str:
    r"""``\boxed{answer}`` for math-verify; a non-boxed answer (a ``####`` / ``Answer:`` line, a bare number) first
    loses ``$`` / ``\(`` / ``\)`` / ``\[`` / ``\]`` delimiters and a trailing period, and gets ``%`` escaped."""
    if not from_box:
        answer = re.sub(r"\\[()\[\]]", "", answer).replace("\\$", "$").replace("$", "").strip()
        answer = re.sub(r"(?<!\\)%", r"\\%", answer.rstrip(".").strip())
    return "\\boxed{" + answer + "}"


# ---------------------------------------------------------------------------------------- equivalence


class _OutOfTime(BaseException):
    """Raised by the time limit; a BaseException so that math-verify's ``except Exception`` does not catch it."""


def _disarm(state: dict, previous) -> None:
    """Stops the limit's timer and restores the previous SIGALRM handler, even if one last alarm lands meanwhile."""
    while True:
        try:
            state["armed"] = False  # from here on the handler returns without raising
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            return
        except _OutOfTime:  # an alarm between entering the try and the line above: go again
            continue


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raises _OutOfTime in the block after ``seconds`` (SIGALRM), on a main thread; elsewhere a no-op (the
    caller's process-pool timeout is the limit there). The alarm repeats every 0.1 s until the block ends: a raise
    that lands in code that cannot propagate it (a gc callback, a ``__del__``) is not the end of the limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"armed": True}

    def _raise(signum, frame):
        if state["armed"]:
            raise _OutOfTime()

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
    try:
        yield
    finally:
        _disarm(state, previous)


@functools.lru_cache(maxsize=1)
def _engine():
    """(parse, verify, gold config, prediction config) of math-verify; imported on first use (~0.5 s), never at
    ``import rl4llm.rewards``. Its "timeout is disabled" warning is silenced: our own limit is on (docstring)."""
    import math_verify
    from latex2sympy2_extended import NormalizationConfig

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)
    gold_config = (math_verify.LatexExtractionConfig(), math_verify.ExprExtractionConfig())
    pred_config = (
        math_verify.LatexExtractionConfig(
            normalization_config=NormalizationConfig(units=True),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        ),
    )
    return math_verify.parse, math_verify.verify, gold_config, pred_config


def _parse(boxed: str, *, gold: bool) -> list:
    """math-verify's parse of ``\\boxed{...}`` text (no own timeout: the caller holds the limit)."""
    parse, _, gold_config, pred_config = _engine()
    if gold:
        return parse(boxed, gold_config, parsing_timeout=None)
    return parse(boxed, pred_config, extraction_mode="first_match", parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parsed_gold(reference: str) -> tuple:
    """The parsed reference, cached: a GRPO group's samples share one reference (an interrupted parse raises and
    is not cached; parsed values are immutable sympy objects)."""
    return tuple(_parse(_gold_text(reference), gold=True))


def _exact_number(text: str) -> fractions.Fraction | None:
    """The value of a plain decimal numeral (``-12``, ``0.50``), else None."""
    text = text.strip()
    if len(text) > 50 or not _PLAIN_NUMBER.fullmatch(text):
        return None
    return fractions.Fraction(text)


def _gold_text(reference: str) -> str:
    """The reference as math-verify's gold input: already boxed (a full solution) as it is, else ``\\boxed{...}``."""
    return reference if "\\boxed" in reference else "\\boxed{" + reference + "}"


def _verified(reference: str, answer: str, *, from_box: bool) -> bool:
    """math-verify's verdict on ``answer`` against ``reference`` under the time limit; False on any failure."""
    answer = answer.strip()
    if not answer:
        return False
    if max(len(reference), len(answer)) > MAX_ANSWER_CHARS:
        return reference.strip() == answer
    gold_value = _exact_number(reference)
    if gold_value is not None and gold_value == _exact_number(answer):
        return True  # equal plain numerals, which math-verify always accepts: skip its ~1 ms parse
    _, verify, _, _ = _engine()  # imported before the clock starts
    try:
        with _time_limit(SYMBOLIC_TIMEOUT_S):
            gold = list(_parsed_gold(reference))
            pred = _parse(_as_boxed(answer, from_box=from_box), gold=False)
            return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except (Exception, _OutOfTime):  # anything unparsable, a sympy failure, or out of time: "not shown equal"
        return False


def is_equivalent(gold: str, pred: str, *, lenient: bool = False) -> bool:
    """Whether the bare answer ``pred`` denotes the same answer as the reference ``gold`` (math-verify, module
    docstring). ``lenient`` is accepted for compatibility: equivalence is the same in both modes. Never raises."""
    del lenient
    return _verified(gold, pred, from_box=True)


def score(completion: str, answer: str, *, lenient: bool = True) -> float:
    """1.0 iff the completion's final answer (:func:`extract_answer`) is equivalent to the reference ``answer``."""
    found = _marked_answer(completion, lenient=lenient)
    if found is None:
        return 0.0
    return 1.0 if _verified(answer, found[0], from_box=found[1]) else 0.0


def score_strict(completion: str, answer: str) -> float:
    """:func:`score` in strict mode: explicit answer markers only (boxed, ``####``, ``Answer:``)."""
    return score(completion, answer, lenient=False)


# ------------------------------------------------------------------------------------ majority-vote keys


def _vote_key(answer: str, *, from_box: bool) -> str:
    """:func:`normalize` of an extracted answer (``from_box``: see :func:`_as_boxed`)."""
    answer = answer.strip()
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return answer
    import sympy

    _engine()  # imported before the clock starts
    try:
        with _time_limit(SYMBOLIC_TIMEOUT_S):
            parsed = _parse(_as_boxed(answer, from_box=from_box), gold=True)
            value = parsed[0] if parsed else None
            if isinstance(value, sympy.Equality) and isinstance(value.lhs, sympy.Symbol):
                value = value.rhs
            if isinstance(value, sympy.Float):
                value = sympy.Rational(str(value))
            if isinstance(value, sympy.Rational):
                return str(value)
            if len(parsed) > 1 and isinstance(parsed[-1], str) and parsed[-1].strip():
                return parsed[-1].strip()
    except (Exception, _OutOfTime):  # unparsable or out of time: the answer as written is its own key
        pass
    return answer


def normalize(answer: str, *, lenient: bool = False) -> str:
    """A canonical string of a bare answer, for majority-vote keys: an exact number as ``p/q`` or an integer
    (``0.5``, ``\\frac12``... -> ``1/2``; ``18.0`` -> ``18``; ``1,234`` -> ``1234``), ``x = 5`` as ``5``; else
    math-verify's normalised LaTeX string; else the stripped input. Every key is a valid reference of this reward.
    ``lenient`` is accepted for compatibility and changes nothing."""
    del lenient
    return _vote_key(answer, from_box=True)


def canonical_answer(completion: str, *, lenient: bool = True) -> str | None:
    """The canonical final answer of a completion (:func:`normalize`; a majority-vote key and a valid reference),
    or None."""
    found = _marked_answer(completion, lenient=lenient)
    if found is None:
        return None
    return _vote_key(found[0], from_box=found[1]) or None


def canonical_answer_strict(completion: str) -> str | None:
    """:func:`canonical_answer` in strict mode."""
    return canonical_answer(completion, lenient=False)
