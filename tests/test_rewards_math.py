r"""Table-driven tests of the math verifier (rl4llm.rewards.math): extraction, normalisation, equivalence.

Each row is (gold answer, completion, expected strict score, expected lenient score). Rows marked 0 are answers
that must NOT match.
"""

import pytest

from rl4llm.rewards import math as math_reward

B = r"\boxed"
# fmt: off
CASES = [
    # --- \boxed extraction, nested braces, last box wins
    ("5", r"The answer is \boxed{5}.", 1, 1),
    ("5", r"\boxed{4} no wait \boxed{5}", 1, 1),
    ("4", r"\boxed{4} no wait \boxed{5}", 0, 0),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", 1, 1),
    (r"\frac{1}{2}", r"$\boxed{\dfrac{1}{2}}$", 1, 1),
    (r"\frac{1}{2}", r"\boxed{\tfrac12}", 1, 1),
    (r"\frac{1}{2}", r"\boxed{\frac12}", 1, 1),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{3}}{2}}", 1, 1),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt3}{2}}", 1, 1),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{2}}{2}}", 0, 0),
    (r"{1, 2}", r"\boxed{\{1, 2\}}", 1, 1),
    ("10", r"\fbox{10}", 1, 1),
    ("7", r"so $\boxed 7$", 1, 1),
    ("7", r"\boxed{7", 0, 1),  # unbalanced: no box; lenient falls back to the last number
    ("7", r"\boxed{{7}}", 1, 1),
    ("x+1", r"\boxed{x + 1}", 1, 1),
    ("x+1", r"\boxed{1+x}", 1, 1),
    ("x+1", r"\boxed{x-1}", 0, 0),
    ("2x", r"\boxed{2 \cdot x}", 1, 1),
    ("2x", r"\boxed{x\times 2}", 1, 1),
    ("2x", r"\boxed{x^2}", 0, 0),
    (r"x^2+2x+1", r"\boxed{(x+1)^2}", 1, 1),
    (r"x^2+2x+1", r"\boxed{(x-1)^2}", 0, 0),
    (r"2\sqrt{2}", r"\boxed{\sqrt{8}}", 1, 1),
    (r"2\sqrt{2}", r"\boxed{\sqrt{2}}", 0, 0),
    (r"\sqrt{2}/2", r"\boxed{\frac{1}{\sqrt{2}}}", 1, 1),
    (r"\frac{\pi}{2}", r"\boxed{\pi/2}", 1, 1),
    (r"\frac{\pi}{2}", r"\boxed{\frac{\pi}{3}}", 0, 0),
    (r"2\pi", r"\boxed{2 \pi}", 1, 1),
    (r"\pi", r"\boxed{3.14159265358979}", 0, 1),  # numerically within 1e-6 only in lenient mode
    (r"\pi", r"\boxed{3.14}", 0, 0),
    ("9", r"\boxed{3^2}", 1, 1),
    ("8", r"\boxed{2^{3}}", 1, 1),
    ("9", r"\boxed{3^3}", 0, 0),
    ("3", r"\boxed{9^{99999}}", 0, 0),  # huge power: refused, not expanded
    (r"\infty", r"\boxed{\infty}", 1, 1),
    ("-3", r"\boxed{-3}", 1, 1),
    ("-3", r"\boxed{3}", 0, 0),
    ("3", r"\boxed{-3}", 0, 0),
    ("-\\frac{1}{3}", r"\boxed{\frac{-1}{3}}", 1, 1),
    ("-\\frac{1}{3}", r"\boxed{-1/3}", 1, 1),
    ("-\\frac{1}{3}", r"\boxed{1/3}", 0, 0),
    # --- GSM8K "####"
    ("18", "She sells 16-3-4=9 eggs, 9*2=18 dollars.\n#### 18", 1, 1),
    ("18", "#### 18.0", 1, 1),
    ("18", "#### 18.00", 1, 1),
    ("18", "#### $18", 1, 1),
    ("18", "#### 17", 0, 0),
    ("18", "#### 180", 0, 0),
    ("1234", "#### 1,234", 1, 1),
    ("1,234", "#### 1234", 1, 1),
    ("1234567", "#### 1,234,567", 1, 1),
    ("1234", "#### 12,34", 0, 0),
    ("3", "#### 3\nThat's all.", 1, 1),
    ("3", "#### 2\n#### 3", 1, 1),
    ("2", "#### 2\n#### 3", 0, 0),
    ("0.5", "#### .5", 1, 1),
    ("0.5", "#### 0.50", 1, 1),
    ("0.5", "#### 1/2", 1, 1),
    ("0.5", "#### 5", 0, 0),
    ("-7", "#### -7", 1, 1),
    ("-7", "#### 7", 0, 0),
    ("100", "#### 100%", 1, 1),
    ("25", "####25", 1, 1),
    ("25", "####", 0, 0),
    ("42", "#### forty-two", 0, 0),
    # --- "Answer:" line
    ("42", "Reasoning...\nAnswer: 42", 1, 1),
    ("42", "answer: 42", 1, 1),
    ("42", "ANSWER:42", 1, 1),
    ("42", "Answer: $42$", 1, 1),
    ("42", "Answer: 41", 0, 0),
    ("42", "Answer: 42\nmore text", 1, 1),
    ("42", "Answer: 40\nAnswer: 42", 1, 1),
    (r"\frac{3}{4}", "Answer: 3/4", 1, 1),
    (r"\frac{3}{4}", "Answer: 0.75", 1, 1),
    (r"\frac{3}{4}", "Answer: 0.7", 0, 0),
    ("x=3", "Answer: x = 3", 1, 1),
    ("3", "Answer: x = 3", 1, 1),
    ("3", "Answer: y=3", 1, 1),
    ("3", "Answer: 4", 0, 0),
    ("5", "Answer:", 0, 0),  # empty line: no answer, and no number for the lenient fallback
    # --- last-number fallback (lenient only)
    ("18", "so she makes 18 dollars", 0, 1),
    ("18", "so she makes 18", 0, 1),
    ("18", "18 dollars and then 19", 0, 0),
    ("18", "no digits at all", 0, 0),
    ("18", "", 0, 0),
    ("3.5", "the total is 3.5", 0, 1),
    ("1000", "the total is 1,000", 0, 1),
    ("-4", "the result: -4", 0, 1),
    ("-4", "the result: 4", 0, 0),
    # --- normalisation: units, text, degrees, percent, dollars, spacing
    ("5", r"\boxed{5\text{ cm}}", 0, 1),
    ("5", r"\boxed{5 \text{ meters}}", 0, 1),
    ("5", r"\boxed{5\,\text{cm}^2}", 0, 1),
    ("30", r"\boxed{30^\circ}", 1, 1),
    ("30", r"\boxed{30^{\circ}}", 1, 1),
    ("30", r"\boxed{30°}", 1, 1),
    ("30", r"\boxed{30 \text{ degrees}}", 0, 1),
    ("10", r"\boxed{10\%}", 1, 1),
    ("10\\%", r"\boxed{10}", 1, 1),
    ("10\\%", r"\boxed{0.1}", 0, 1),
    ("0.1", r"\boxed{10\%}", 0, 1),
    ("10\\%", r"\boxed{0.2}", 0, 0),
    ("5", r"\boxed{\$5}", 1, 1),
    ("5", r"\boxed{\$5.00}", 1, 1),
    ("5", r"\boxed{5 \text{dollars}}", 0, 1),
    ("1000", r"\boxed{1{,}000}", 0, 0),
    ("1000", r"\boxed{1\,000}", 1, 1),
    (r"\frac{1}{2}", r"\boxed{ \frac { 1 } { 2 } }", 1, 1),
    (r"\frac{1}{2}", r"\boxed{\left(\frac{1}{2}\right)}", 1, 1),
    ("12", r"\boxed{12.}", 1, 1),
    ("12", r"\boxed{\mathbf{12}}", 1, 1),
    ("12", r"\boxed{\text{12}}", 1, 1),
    ("A", r"\boxed{A}", 1, 1),
    ("A", r"\boxed{\text{A}}", 1, 1),
    ("A", r"\boxed{B}", 0, 0),
    ("(A)", r"\boxed{(A)}", 1, 1),
    ("yes", r"\boxed{yes}", 1, 1),
    ("yes", r"\boxed{no}", 0, 0),
    ("yes", r"\boxed{\text{yes}}", 1, 1),
    ("Monday", r"\boxed{\text{Monday}}", 1, 1),
    ("Monday", r"\boxed{\text{Tuesday}}", 0, 0),
    # --- tuples, intervals, sets, lists
    ("(1,2)", r"\boxed{(1, 2)}", 1, 1),
    ("(1,2)", r"\boxed{(2,1)}", 0, 0),
    ("(1,2)", r"\boxed{[1,2]}", 0, 0),
    ("[0,1)", r"\boxed{[0, 1)}", 1, 1),
    ("[0,1)", r"\boxed{[0,1]}", 0, 0),
    ("(0.5,2)", r"\boxed{(\frac{1}{2}, 2)}", 1, 1),
    ("(0.5,2)", r"\boxed{(\frac{1}{3}, 2)}", 0, 0),
    ("(1,2,3)", r"\boxed{(1,2)}", 0, 0),
    (r"\{1,2\}", r"\boxed{\{2,1\}}", 0, 1),
    ("1,2", r"\boxed{2, 1}", 0, 1),
    ("1,2", r"\boxed{1, 2}", 1, 1),
    ("1,2", r"\boxed{1, 3}", 0, 0),
    ("1,2", r"\boxed{12}", 0, 0),
    ("-1,3", r"\boxed{x=-1, x=3}", 0, 0),
    ("(-\\infty, 2]", r"\boxed{(-\infty,2]}", 1, 1),
    ("(-\\infty, 2]", r"\boxed{(-\infty,2)}", 0, 0),
    # --- exact numeric equivalence
    ("0.25", r"\boxed{\frac{1}{4}}", 1, 1),
    ("0.25", r"\boxed{1/4}", 1, 1),
    ("0.25", r"\boxed{0.250}", 1, 1),
    ("0.25", r"\boxed{0.26}", 0, 0),
    ("1/3", r"\boxed{0.333}", 0, 0),
    ("1/3", r"\boxed{0.3333333333}", 0, 1),
    ("2", r"\boxed{2.0}", 1, 1),
    ("2", r"\boxed{02}", 1, 1),
    ("2", r"\boxed{4/2}", 1, 1),
    ("2", r"\boxed{\frac{4}{2}}", 1, 1),
    ("2", r"\boxed{2.0001}", 0, 0),
    ("100", r"\boxed{1e2}", 1, 1),  # sympy reads exponent notation (exact-number parsing never does)
    ("0", r"\boxed{-0}", 1, 1),
    ("0", r"\boxed{0.0}", 1, 1),
    ("0", r"\boxed{}", 0, 0),
    ("1/0", r"\boxed{1/0}", 1, 1),  # identical strings still match
    ("1", r"\boxed{1/0}", 0, 0),
    ("9" * 300, r"\boxed{" + "9" * 300 + "}", 1, 1),
    ("9" * 300, r"\boxed{" + "9" * 299 + "8}", 0, 0),
    # --- symbolic
    (r"\frac{x}{2}", r"\boxed{0.5x}", 1, 1),
    (r"\frac{x}{2}", r"\boxed{x/2}", 1, 1),
    (r"\frac{x}{2}", r"\boxed{2/x}", 0, 0),
    (r"\frac{x+1}{x}", r"\boxed{1 + \frac{1}{x}}", 1, 1),
    ("a+b", r"\boxed{b+a}", 1, 1),
    ("a+b", r"\boxed{a+c}", 0, 0),
    ("ab", r"\boxed{ba}", 1, 1),
    (r"\sqrt{12}", r"\boxed{2\sqrt{3}}", 1, 1),
    (r"\sqrt{12}", r"\boxed{3\sqrt{2}}", 0, 0),
    (r"3\sqrt{2}", r"\boxed{\sqrt{18}}", 1, 1),
    (r"\frac{1}{\sqrt{3}}", r"\boxed{\frac{\sqrt{3}}{3}}", 1, 1),
    (r"x^{2}", r"\boxed{x\cdot x}", 1, 1),
    (r"x^{2}", r"\boxed{2x}", 0, 0),
    ("__import__('os')", r"\boxed{__import__('os')}", 1, 1),  # identical strings; never evaluated
    ("1", r"\boxed{__import__('os').system('true')}", 0, 0),
    # --- no answer / malformed
    ("5", "I don't know", 0, 0),
    ("5", r"\boxed", 0, 0),
    ("5", r"\boxed{", 0, 0),
    ("5", "}}}}\\boxed{{{", 0, 0),
    ("5", "#### ", 0, 0),
]
# fmt: on


@pytest.fixture(autouse=True)
def generous_symbolic_time_limit(monkeypatch):
    """The table checks answers, not speed: a loaded test machine must not turn a slow sympy proof into a miss."""
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 60.0)


def test_table_is_large_and_has_negatives():
    assert len(CASES) >= 150
    assert sum(1 for *_, strict, lenient in CASES if strict == 0 and lenient == 0) >= 50


@pytest.mark.parametrize("gold, completion, strict, lenient", CASES)
def test_score_table(gold, completion, strict, lenient):
    assert math_reward.score_strict(completion, gold) == strict, "strict"
    assert math_reward.score(completion, gold) == lenient, "lenient"


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{a{b}c}", "a{b}c"),
        (r"\boxed{\frac{\frac{1}{2}}{3}}", r"\frac{\frac{1}{2}}{3}"),
        (r"\boxed{1} \boxed{2}", "2"),
        (r"\boxed{1} \boxed{2", "1"),  # an unbalanced last box falls back to the previous one
        (r"\fbox{x}", "x"),
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert math_reward.last_boxed(text) == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\frac12", r"\frac{1}{2}"),
        (r"\frac1{x}", r"\frac{1}{x}"),
        (r"\sqrt3", r"\sqrt{3}"),
        ("1,234,567", "1234567"),
        ("18.000", "18"),
        ("2.50", "2.5"),
        (".5", "0.5"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        ("x = 5", "5"),
        ("$5$.", "5"),
        (r"45^\circ", "45"),
        (r"50\%", "50"),
        (r"\text{yes}", "yes"),
    ],
)
def test_normalize(raw, expected):
    assert math_reward.normalize(raw) == expected


def test_symbolic_timeout_gives_no_match(monkeypatch):
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 1e-4)
    # A genuinely equal pair that needs sympy: with a 0.1 ms budget the comparison times out -> no match.
    assert math_reward.score(r"\boxed{(x+1)^3}", "x^3+3x^2+3x+1") == 0.0
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 5.0)
    assert math_reward.score(r"\boxed{(x+1)^3}", "x^3+3x^2+3x+1") == 1.0
