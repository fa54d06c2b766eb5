r"""Math answer verifier: final-answer extraction, normalisation and equivalence (GSM8K / MATH style).

**Extraction** (:func:`extract_answer`), first that applies:

1. the content of the LAST ``\boxed{...}`` / ``\fbox{...}`` (nested braces matched; ``\boxed 5`` too);
2. the text after the LAST ``####`` (GSM8K), up to the end of its line;
3. the text after the LAST ``Answer:`` (case-insensitive; Minerva / DAPO "Answer:" line), up to the end of its line;
4. lenient mode only: the LAST number in the text (verl gsm8k "flexible"), e.g. ``"so 18 eggs."`` -> ``18``.

**Normalisation** (:func:`normalize`, after verl's ``math_reward.strip_string`` and
``math_dapo.normalize_final_answer``): drop ``$``, ``\(``/``\)``, ``\left``/``\right``, LaTeX spacing (``\!``, ``\,``,
``\;``, ``\:``, ``\ ``, ``~``), a trailing period, a ``x =`` style prefix whose left side has at most 2 characters,
``^\circ`` / ``^{\circ}``, ``\%`` / ``%``, thousands commas in digit strings (``1,234`` -> ``1234``), trailing zeros
of decimals (``18.0`` -> ``18``),
``\text{...}`` and ``\mathrm{...}`` wrappers; ``\dfrac`` / ``\tfrac`` -> ``\frac``; ``\frac12`` -> ``\frac{1}{2}``;
``\sqrt3`` -> ``\sqrt{3}``; all whitespace removed. Lenient mode also drops trailing unit words (``5 cm``,
``\text{ dollars}``) and a leading ``the answer is``.

**Equivalence** (:func:`is_equivalent`): equal normalised strings; else equal exact values when both are numbers
(integers, decimals, ``a/b``, ``\frac{a}{b}``, compared as fractions); else tuples / intervals element by element
with identical brackets; else symbolic identity ``sympy.simplify(gold - pred) == 0`` of a safely parsed LaTeX
subset (``\frac``, ``\sqrt``, ``\pi``, ``^``, ``\cdot``, ``\times``, implicit products, one-letter variables),
under a time limit. Lenient mode also accepts ``p%`` == ``p/100``, numbers within a relative 1e-6, unordered
``{...}`` sets, and ``\pi`` ≈ 3.14159 style numerical agreement (relative 1e-6).

Model output never raises: anything unparsable is compared as a string only. The symbolic step runs under a
``signal.setitimer`` limit when called from a main thread (a process-pool worker's, or the trainer's); elsewhere
it relies on the caller's per-call timeout (``rl4llm.rewards.pool``), never on the silently-dead alarm that made
verl score every MATH answer 0 off the main thread (verl PR #5635).
"""

from __future__ import annotations

import contextlib
import fractions
import re
import signal
import threading

# Symbolic comparison budget, and the input size beyond which we do not even try.
SYMBOLIC_TIMEOUT_S = 5.0
_MAX_SYMBOLIC_CHARS = 120
_MAX_NUMBER_DIGITS = 200
_LENIENT_REL_TOL = 1e-6

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_LINE = re.compile(r"answer\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_DECIMAL = re.compile(r"(-?)(\d*)(?:\.(\d*))?")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])")
_UNIT_WORDS = (
    "units|unit|sq|square|cubic|cm|centimeters|centimetres|m|meters|metres|km|kilometers|mm|inches|inch|in|feet|"
    "foot|ft|yards|miles|mph|hours|hour|minutes|minute|mins|seconds|second|sec|days|day|weeks|years|dollars|dollar|"
    "cents|cent|degrees|degree|pounds|lbs|kg|grams|g|liters|litres|ml|people|students|apples|ways|points|marbles|"
    "books|cookies|eggs|times|percent"
)
_POWER = r"(?:\^\{?[23]\}?)?"
_TRAILING_UNITS = re.compile(
    rf"(?:\s*(?:\\(?:text|mbox|mathrm)\{{\s*)?(?<![A-Za-z])(?:{_UNIT_WORDS}){_POWER}\}}?{_POWER}\.?)+$"
)
_ALLOWED_SYMBOLIC = re.compile(r"[0-9a-zA-Z+\-*/().\s]*")
_IDENTIFIER = re.compile(r"[A-Za-z]+")
_SYMPY_NAMES = {"sqrt", "pi", "oo"}


# ----------------------------------------------------------------------------------------- extraction


def _brace_group(text: str, start: int) -> tuple[str, int] | None:
    """The content of the ``{...}`` group opening at ``text[start]`` (nested braces matched) and the index after
    it; a single non-space character (``\\frac12``) when ``text[start]`` is not ``{``; None if unbalanced."""
    if start >= len(text):
        return None
    if text[start] != "{":
        return text[start], start + 1
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


def extract_answer(text: str, *, lenient: bool = False) -> str | None:
    """The final answer of a completion (module docstring, rules 1-4), unnormalised, or None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
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
                return line
    if lenient:
        numbers = _NUMBER.findall(text)
        if numbers:
            return numbers[-1]
    return None


# -------------------------------------------------------------------------------------- normalisation


def _unwrap_command(text: str, command: str) -> str:
    r"""``\command{x}`` -> ``x`` everywhere (nested braces matched); unbalanced occurrences are left as they are."""
    out, pos, token = [], 0, "\\" + command + "{"
    while True:
        i = text.find(token, pos)
        if i < 0:
            out.append(text[pos:])
            return "".join(out)
        group = _brace_group(text, i + len(token) - 1)
        if group is None:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:i] + group[0])
        pos = group[1]


def _fix_fracs_and_sqrts(text: str) -> str:
    r"""``\frac12`` -> ``\frac{1}{2}``, ``\frac1{b}`` -> ``\frac{1}{b}``, ``\sqrt3`` -> ``\sqrt{3}``."""
    text = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", text)
    out, pos = [], 0
    while True:
        i = text.find("\\frac", pos)
        if i < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:i] + "\\frac")
        j = i + len("\\frac")
        for _ in range(2):
            group = _brace_group(text, j)
            if group is None:
                break
            out.append("{" + group[0] + "}")
            j = group[1]
        pos = j


def _strip_trailing_zeros(text: str) -> str:
    """``18.0`` -> ``18``, ``2.50`` -> ``2.5`` for a plain decimal; anything else unchanged."""
    if re.fullmatch(r"-?\d+\.\d+", text):
        text = text.rstrip("0").rstrip(".")
    return text


def normalize(answer: str, *, lenient: bool = False) -> str:
    """Canonical string form of an extracted answer (rules in the module docstring)."""
    s = answer.strip()
    if lenient:
        s = re.sub(r"^(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*", "", s, flags=re.IGNORECASE)
    s = s.replace("\n", "").replace("\\!", "")
    for token in ("\\left", "\\right", "\\displaystyle"):
        s = s.replace(token, "")
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\{", "{").replace("\\}", "}")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°", "", s)
    s = s.replace("\\%", "").replace("%", "")
    if lenient:
        s = _TRAILING_UNITS.sub("", s)
    for command in ("text", "textbf", "mathrm", "mbox", "mathbf", "boxed"):
        s = _unwrap_command(s, command)
    s = re.sub(r"\\[,;:> ]|~", " ", s)
    s = s.strip().rstrip(".").strip()
    lhs = re.match(r"^([A-Za-z]\w?)\s*=\s*(?=\S)", s)
    if lhs:
        s = s[lhs.end() :]
    s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    s = re.sub(r"\s+", "", s)
    s = _fix_fracs_and_sqrts(s)
    s = _strip_trailing_zeros(s)
    if s.startswith("."):
        s = "0" + s
    return s


# ---------------------------------------------------------------------------------------- equivalence


def _as_fraction(s: str) -> fractions.Fraction | None:
    r"""Exact value of an integer, decimal, ``a/b`` or ``\frac{a}{b}`` string (at most 200 digits), else None."""
    frac = re.fullmatch(r"(-?)\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s) or re.fullmatch(r"(-?)(-?[\d.]+)/(-?[\d.]+)", s)
    if frac:
        num, den = _as_fraction(frac.group(2)), _as_fraction(frac.group(3))
        if num is None or den is None or den == 0:
            return None
        value = num / den
        return -value if frac.group(1) else value
    match = _DECIMAL.fullmatch(s)
    if not match or not (match.group(2) or match.group(3)) or len(s) > _MAX_NUMBER_DIGITS:
        return None
    sign, whole, decimals = match.group(1), match.group(2) or "0", match.group(3) or ""
    value = fractions.Fraction(int(whole + decimals), 10 ** len(decimals))
    return -value if sign else value


def _split_top_level(s: str) -> list[str]:
    """``s`` split at commas outside any bracket."""
    parts, depth, current = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _latex_to_sympy_text(s: str) -> str | None:
    r"""A sympy-parsable string for a LaTeX subset (``\frac``, ``\sqrt``, ``\pi``, ``^``, ``\cdot``, ``\times``), or
    None when anything else (another command, an underscore, a quote...) appears: nothing else ever reaches ``eval``."""
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/").replace("\\infty", "oo")
    s = s.replace("\\pi", " pi ")
    for _ in range(20):  # \frac{a}{b} -> ((a)/(b)), \sqrt{a} -> sqrt(a), innermost first
        new = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        new = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", new)
        new = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", new)
        if new == s:
            break
        s = new
    s = s.replace("{", "(").replace("}", ")").replace("^", "**")
    if "\\" in s or not _ALLOWED_SYMBOLIC.fullmatch(s):
        return None
    for name in _IDENTIFIER.findall(s):
        if name not in _SYMPY_NAMES and len(name) > 3:  # implicit products of up to 3 letters ("xy", "abc")
            return None
    if "**" in s and re.search(r"\*\*\(?\s*\d{4,}", s):  # huge powers: refuse rather than expand
        return None
    return s


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raises TimeoutError in the block after ``seconds`` (SIGALRM), on a main thread; elsewhere a no-op (the
    caller's process-pool timeout is the limit there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise TimeoutError("symbolic comparison timed out")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _sympy_expr(text: str):
    """The sympy expression of a safe string from :func:`_latex_to_sympy_text` (implicit products allowed)."""
    import sympy
    from sympy.parsing import sympy_parser

    transformations = sympy_parser.standard_transformations + (
        sympy_parser.implicit_multiplication_application,
    )
    local = {"sqrt": sympy.sqrt, "pi": sympy.pi, "oo": sympy.oo}
    return sympy_parser.parse_expr(text, local_dict=local, transformations=transformations, evaluate=True)


def _symbolic_equal(gold: str, pred: str, *, lenient: bool) -> bool:
    """Whether the LaTeX-subset expressions are provably equal (and, lenient, numerically within 1e-6)."""
    if max(len(gold), len(pred)) > _MAX_SYMBOLIC_CHARS:
        return False
    gold_text, pred_text = _latex_to_sympy_text(gold), _latex_to_sympy_text(pred)
    if gold_text is None or pred_text is None:
        return False
    # Imported lazily (~0.5 s; only this step needs them), and before the time limit starts.
    import sympy
    from sympy.parsing import sympy_parser  # noqa: F401

    try:
        with _time_limit(SYMBOLIC_TIMEOUT_S):
            a, b = _sympy_expr(gold_text), _sympy_expr(pred_text)
            if a.free_symbols != b.free_symbols:
                return False
            if sympy.simplify(a - b) == 0:
                return True
            if lenient and not a.free_symbols and a.is_number and b.is_number:
                av, bv = complex(sympy.N(a)), complex(sympy.N(b))
                return abs(av - bv) <= _LENIENT_REL_TOL * max(1.0, abs(av))
    except Exception:  # any parse / simplify failure or the time limit (TimeoutError) means "not shown equal"
        return False
    return False


def _values_equal(gold: str, pred: str, *, lenient: bool) -> bool:
    """Equivalence of two normalised scalar answers: string, exact number, then symbolic."""
    if gold == pred:
        return True
    g, p = _as_fraction(gold), _as_fraction(pred)
    if g is not None and p is not None:
        if g == p:
            return True
        return lenient and abs(g - p) <= _LENIENT_REL_TOL * max(1, abs(g))
    return _symbolic_equal(gold, pred, lenient=lenient)


def _bracketed(s: str) -> tuple[str, str, str] | None:
    """(open, inner, close) when ``s`` is wrapped in one bracket pair spanning the whole string."""
    if len(s) >= 2 and s[0] in "([{" and s[-1] in ")]}":
        inner = s[1:-1]
        depth = 0
        for ch in inner:
            depth += ch in "([{"
            depth -= ch in ")]}"
            if depth < 0:
                return None
        return (s[0], inner, s[-1]) if depth == 0 else None
    return None


def is_equivalent(gold: str, pred: str, *, lenient: bool = False) -> bool:
    """Whether normalised ``pred`` denotes the same answer as normalised ``gold`` (module docstring). Never raises."""
    gold_raw, pred_raw = gold, pred
    gold, pred = normalize(gold, lenient=lenient), normalize(pred, lenient=lenient)
    if not pred:
        return False
    if _values_equal(gold, pred, lenient=lenient):
        return True
    gold_b, pred_b = _bracketed(gold), _bracketed(pred)
    if gold_b and pred_b and (gold_b[0], gold_b[2]) == (pred_b[0], pred_b[2]):
        gold_parts, pred_parts = _split_top_level(gold_b[1]), _split_top_level(pred_b[1])
    elif not gold_b and not pred_b and "," in gold:
        gold_parts, pred_parts = _split_top_level(gold), _split_top_level(pred)
    else:
        gold_parts = pred_parts = None
    if gold_parts is not None and len(gold_parts) > 1 and len(gold_parts) == len(pred_parts):
        if lenient and (gold_b is None or gold_b[0] == "{"):  # unordered: sets and bare lists
            remaining = list(pred_parts)
            for g in gold_parts:
                match = next((p for p in remaining if _values_equal(g, p, lenient=True)), None)
                if match is None:
                    return False
                remaining.remove(match)
            return True
        return all(_values_equal(g, p, lenient=lenient) for g, p in zip(gold_parts, pred_parts))
    if lenient and ("%" in gold_raw or "%" in pred_raw):  # p% == p/100
        g, p = _as_fraction(gold), _as_fraction(pred)
        if g is not None and p is not None:
            return g / 100 == p if "%" in gold_raw else p / 100 == g
    return False


def score(completion: str, answer: str, *, lenient: bool = True) -> float:
    """1.0 iff the completion's final answer (:func:`extract_answer`) is equivalent to the reference ``answer``."""
    extracted = extract_answer(completion, lenient=lenient)
    if extracted is None:
        return 0.0
    return 1.0 if is_equivalent(answer, extracted, lenient=lenient) else 0.0


def canonical_answer(completion: str, *, lenient: bool = True) -> str | None:
    """The normalised final answer of a completion (a majority-vote key and a valid reference), or None."""
    extracted = extract_answer(completion, lenient=lenient)
    normalised = None if extracted is None else normalize(extracted, lenient=lenient)
    return normalised or None


def canonical_answer_strict(completion: str) -> str | None:
    """:func:`canonical_answer` in strict mode."""
    return canonical_answer(completion, lenient=False)


def score_strict(completion: str, answer: str) -> float:
    """:func:`score` in strict mode: explicit answer markers only, exact equivalence."""
    return score(completion, answer, lenient=False)
