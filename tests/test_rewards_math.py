r"""Table-driven tests of the math verifier (rl4llm.rewards.math): our extraction, math-verify's equivalence.

Each row is (gold answer, completion, strict score, lenient score, previous strict, previous lenient, why). The
"previous" columns are the verdicts of the hand-written sympy verifier this module replaced (rl4llm/rewards/math.py
at 4692da5, run on every row); ``why`` says in one line why the verdict changed, and is empty exactly where it did
not. Rows marked 0 are answers that must NOT match.
"""

import threading
import time

import pytest

from rl4llm import rewards
from rl4llm.rewards import math as math_reward
from rl4llm.rewards import pool as pool_lib

# fmt: off
CASES = [
    # --- \boxed extraction, nested braces, last box wins
    ('5', r"The answer is \boxed{5}.", 1, 1, 1, 1, ""),
    ('5', r"\boxed{4} no wait \boxed{5}", 1, 1, 1, 1, ""),
    ('4', r"\boxed{4} no wait \boxed{5}", 0, 0, 0, 0, ""),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", 1, 1, 1, 1, ""),
    (r"\frac{1}{2}", r"$\boxed{\dfrac{1}{2}}$", 1, 1, 1, 1, ""),
    (r"\frac{1}{2}", r"\boxed{\tfrac12}", 0, 0, 1, 1,
     "math-verify with TRL's config leaves malformed_operators off: brace-less \\frac12 / \\sqrt3 do not parse"),
    (r"\frac{1}{2}", r"\boxed{\frac12}", 0, 0, 1, 1,
     "math-verify with TRL's config leaves malformed_operators off: brace-less \\frac12 / \\sqrt3 do not parse"),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{3}}{2}}", 1, 1, 1, 1, ""),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt3}{2}}", 0, 0, 1, 1,
     "math-verify with TRL's config leaves malformed_operators off: brace-less \\frac12 / \\sqrt3 do not parse"),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{2}}{2}}", 0, 0, 0, 0, ""),
    ('{1, 2}', r"\boxed{\{1, 2\}}", 1, 1, 1, 1, ""),
    ('10', r"\fbox{10}", 1, 1, 1, 1, ""),
    ('7', r"so $\boxed 7$", 1, 1, 1, 1, ""),
    ('7', r"\boxed{7", 0, 1, 0, 1, ""),
    ('7', r"\boxed{{7}}", 1, 1, 1, 1, ""),
    ('x+1', r"\boxed{x + 1}", 1, 1, 1, 1, ""),
    ('x+1', r"\boxed{1+x}", 1, 1, 1, 1, ""),
    ('x+1', r"\boxed{x-1}", 0, 0, 0, 0, ""),
    ('2x', r"\boxed{2 \cdot x}", 1, 1, 1, 1, ""),
    ('2x', r"\boxed{x\times 2}", 1, 1, 1, 1, ""),
    ('2x', r"\boxed{x^2}", 0, 0, 0, 0, ""),
    ('x^2+2x+1', r"\boxed{(x+1)^2}", 1, 1, 1, 1, ""),
    ('x^2+2x+1', r"\boxed{(x-1)^2}", 0, 0, 0, 0, ""),
    (r"2\sqrt{2}", r"\boxed{\sqrt{8}}", 1, 1, 1, 1, ""),
    (r"2\sqrt{2}", r"\boxed{\sqrt{2}}", 0, 0, 0, 0, ""),
    (r"\sqrt{2}/2", r"\boxed{\frac{1}{\sqrt{2}}}", 1, 1, 1, 1, ""),
    (r"\frac{\pi}{2}", r"\boxed{\pi/2}", 1, 1, 1, 1, ""),
    (r"\frac{\pi}{2}", r"\boxed{\frac{\pi}{3}}", 0, 0, 0, 0, ""),
    (r"2\pi", r"\boxed{2 \pi}", 1, 1, 1, 1, ""),
    (r"\pi", r"\boxed{3.14159265358979}", 1, 1, 0, 1,
     'math-verify compares numbers rounded to 6 decimals in both modes (old: strict exact, lenient rel. 1e-6)'),
    (r"\pi", r"\boxed{3.14}", 0, 0, 0, 0, ""),
    ('9', r"\boxed{3^2}", 1, 1, 1, 1, ""),
    ('8', r"\boxed{2^{3}}", 1, 1, 1, 1, ""),
    ('9', r"\boxed{3^3}", 0, 0, 0, 0, ""),
    ('3', r"\boxed{9^{99999}}", 0, 0, 0, 0, ""),
    (r"\infty", r"\boxed{\infty}", 1, 1, 1, 1, ""),
    ('-3', r"\boxed{-3}", 1, 1, 1, 1, ""),
    ('-3', r"\boxed{3}", 0, 0, 0, 0, ""),
    ('3', r"\boxed{-3}", 0, 0, 0, 0, ""),
    (r"-\frac{1}{3}", r"\boxed{\frac{-1}{3}}", 1, 1, 1, 1, ""),
    (r"-\frac{1}{3}", r"\boxed{-1/3}", 1, 1, 1, 1, ""),
    (r"-\frac{1}{3}", r"\boxed{1/3}", 0, 0, 0, 0, ""),
    # --- GSM8K "####"
    ('18', 'She sells 16-3-4=9 eggs, 9*2=18 dollars.\n#### 18', 1, 1, 1, 1, ""),
    ('18', '#### 18.0', 1, 1, 1, 1, ""),
    ('18', '#### 18.00', 1, 1, 1, 1, ""),
    ('18', '#### $18', 1, 1, 1, 1, ""),
    ('18', '#### 17', 0, 0, 0, 0, ""),
    ('18', '#### 180', 0, 0, 0, 0, ""),
    ('1234', '#### 1,234', 1, 1, 1, 1, ""),
    ('1,234', '#### 1234', 1, 1, 1, 1, ""),
    ('1234567', '#### 1,234,567', 1, 1, 1, 1, ""),
    ('1234', '#### 12,34', 0, 0, 0, 0, ""),
    ('3', "#### 3\nThat's all.", 1, 1, 1, 1, ""),
    ('3', '#### 2\n#### 3', 1, 1, 1, 1, ""),
    ('2', '#### 2\n#### 3', 0, 0, 0, 0, ""),
    ('0.5', '#### .5', 1, 1, 1, 1, ""),
    ('0.5', '#### 0.50', 1, 1, 1, 1, ""),
    ('0.5', '#### 1/2', 1, 1, 1, 1, ""),
    ('0.5', '#### 5', 0, 0, 0, 0, ""),
    ('-7', '#### -7', 1, 1, 1, 1, ""),
    ('-7', '#### 7', 0, 0, 0, 0, ""),
    ('100', '#### 100%', 1, 1, 1, 1, ""),
    ('25', '####25', 1, 1, 1, 1, ""),
    ('25', '####', 0, 0, 0, 0, ""),
    ('42', '#### forty-two', 0, 0, 0, 0, ""),
    # --- "Answer:" line
    ('42', 'Reasoning...\nAnswer: 42', 1, 1, 1, 1, ""),
    ('42', 'answer: 42', 1, 1, 1, 1, ""),
    ('42', 'ANSWER:42', 1, 1, 1, 1, ""),
    ('42', 'Answer: $42$', 1, 1, 1, 1, ""),
    ('42', 'Answer: 41', 0, 0, 0, 0, ""),
    ('42', 'Answer: 42\nmore text', 1, 1, 1, 1, ""),
    ('42', 'Answer: 40\nAnswer: 42', 1, 1, 1, 1, ""),
    (r"\frac{3}{4}", 'Answer: 3/4', 1, 1, 1, 1, ""),
    (r"\frac{3}{4}", 'Answer: 0.75', 1, 1, 1, 1, ""),
    (r"\frac{3}{4}", 'Answer: 0.7', 0, 0, 0, 0, ""),
    ('x=3', 'Answer: x = 3', 1, 1, 1, 1, ""),
    ('3', 'Answer: x = 3', 1, 1, 1, 1, ""),
    ('3', 'Answer: y=3', 1, 1, 1, 1, ""),
    ('3', 'Answer: 4', 0, 0, 0, 0, ""),
    ('5', 'Answer:', 0, 0, 0, 0, ""),
    # --- last-number fallback (lenient only)
    ('18', 'so she makes 18 dollars', 0, 1, 0, 1, ""),
    ('18', 'so she makes 18', 0, 1, 0, 1, ""),
    ('18', '18 dollars and then 19', 0, 0, 0, 0, ""),
    ('18', 'no digits at all', 0, 0, 0, 0, ""),
    ('18', '', 0, 0, 0, 0, ""),
    ('3.5', 'the total is 3.5', 0, 1, 0, 1, ""),
    ('1000', 'the total is 1,000', 0, 1, 0, 1, ""),
    ('-4', 'the result: -4', 0, 1, 0, 1, ""),
    ('-4', 'the result: 4', 0, 0, 0, 0, ""),
    # --- normalisation: units, text, degrees, percent, dollars, spacing
    ('5', r"\boxed{5\text{ cm}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('5', r"\boxed{5 \text{ meters}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('5', r"\boxed{5\,\text{cm}^2}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('30', r"\boxed{30^\circ}", 1, 1, 1, 1, ""),
    ('30', r"\boxed{30^{\circ}}", 1, 1, 1, 1, ""),
    ('30', r"\boxed{30°}", 0, 0, 1, 1, 'math-verify does not read the unicode degree sign'),
    ('30', r"\boxed{30 \text{ degrees}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('10', r"\boxed{10\%}", 1, 1, 1, 1, ""),
    (r"10\%", r"\boxed{10}", 1, 1, 1, 1, ""),
    (r"10\%", r"\boxed{0.1}", 1, 1, 0, 1,
     'math-verify reads p\\% as p/100 and accepts either form in both modes (old: lenient only)'),
    ('0.1', r"\boxed{10\%}", 1, 1, 0, 1,
     'math-verify reads p\\% as p/100 and accepts either form in both modes (old: lenient only)'),
    (r"10\%", r"\boxed{0.2}", 0, 0, 0, 0, ""),
    ('5', r"\boxed{\$5}", 1, 1, 1, 1, ""),
    ('5', r"\boxed{\$5.00}", 1, 1, 1, 1, ""),
    ('5', r"\boxed{5 \text{dollars}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('1000', r"\boxed{1{,}000}", 1, 1, 0, 0, 'math-verify reads {,} as a thousands separator'),
    ('1000', r"\boxed{1\,000}", 0, 0, 1, 1, 'math-verify reads the thin space in 1\\,000 as a product 1*0'),
    (r"\frac{1}{2}", r"\boxed{ \frac { 1 } { 2 } }", 1, 1, 1, 1, ""),
    (r"\frac{1}{2}", r"\boxed{\left(\frac{1}{2}\right)}", 1, 1, 1, 1, ""),
    ('12', r"\boxed{12.}", 0, 0, 1, 1,
     "math-verify (TRL config) keeps a trailing period inside a box: '12.' does not parse"),
    ('12', r"\boxed{\mathbf{12}}", 1, 1, 1, 1, ""),
    ('12', r"\boxed{\text{12}}", 1, 1, 1, 1, ""),
    ('A', r"\boxed{A}", 1, 1, 1, 1, ""),
    ('A', r"\boxed{\text{A}}", 1, 1, 1, 1, ""),
    ('A', r"\boxed{B}", 0, 0, 0, 0, ""),
    ('(A)', r"\boxed{(A)}", 1, 1, 1, 1, ""),
    ('yes', r"\boxed{yes}", 1, 1, 1, 1, ""),
    ('yes', r"\boxed{no}", 0, 0, 0, 0, ""),
    ('yes', r"\boxed{\text{yes}}", 1, 1, 1, 1, ""),
    ('Monday', r"\boxed{\text{Monday}}", 1, 1, 1, 1, ""),
    ('Monday', r"\boxed{\text{Tuesday}}", 0, 0, 0, 0, ""),
    # --- tuples, intervals, sets, lists
    ('(1,2)', r"\boxed{(1, 2)}", 1, 1, 1, 1, ""),
    ('(1,2)', r"\boxed{(2,1)}", 0, 0, 0, 0, ""),
    ('(1,2)', r"\boxed{[1,2]}", 0, 0, 0, 0, ""),
    ('[0,1)', r"\boxed{[0, 1)}", 1, 1, 1, 1, ""),
    ('[0,1)', r"\boxed{[0,1]}", 0, 0, 0, 0, ""),
    ('(0.5,2)', r"\boxed{(\frac{1}{2}, 2)}", 1, 1, 1, 1, ""),
    ('(0.5,2)', r"\boxed{(\frac{1}{3}, 2)}", 0, 0, 0, 0, ""),
    ('(1,2,3)', r"\boxed{(1,2)}", 0, 0, 0, 0, ""),
    (r"\{1,2\}", r"\boxed{\{2,1\}}", 1, 1, 0, 1,
     'math-verify compares sets and bare lists unordered in both modes (old: lenient only)'),
    ('1,2', r"\boxed{2, 1}", 1, 1, 0, 1,
     'math-verify compares sets and bare lists unordered in both modes (old: lenient only)'),
    ('1,2', r"\boxed{1, 2}", 1, 1, 1, 1, ""),
    ('1,2', r"\boxed{1, 3}", 0, 0, 0, 0, ""),
    ('1,2', r"\boxed{12}", 0, 0, 0, 0, ""),
    ('-1,3', r"\boxed{x=-1, x=3}", 1, 1, 0, 0, "math-verify reads 'x=-1, x=3' as the solution set {-1, 3}"),
    (r"(-\infty, 2]", r"\boxed{(-\infty,2]}", 1, 1, 1, 1, ""),
    (r"(-\infty, 2]", r"\boxed{(-\infty,2)}", 0, 0, 0, 0, ""),
    # --- exact numeric equivalence
    ('0.25', r"\boxed{\frac{1}{4}}", 1, 1, 1, 1, ""),
    ('0.25', r"\boxed{1/4}", 1, 1, 1, 1, ""),
    ('0.25', r"\boxed{0.250}", 1, 1, 1, 1, ""),
    ('0.25', r"\boxed{0.26}", 0, 0, 0, 0, ""),
    ('1/3', r"\boxed{0.333}", 0, 0, 0, 0, ""),
    ('1/3', r"\boxed{0.3333333333}", 1, 1, 0, 1,
     'math-verify compares numbers rounded to 6 decimals in both modes (old: strict exact, lenient rel. 1e-6)'),
    ('2', r"\boxed{2.0}", 1, 1, 1, 1, ""),
    ('2', r"\boxed{02}", 1, 1, 1, 1, ""),
    ('2', r"\boxed{4/2}", 1, 1, 1, 1, ""),
    ('2', r"\boxed{\frac{4}{2}}", 1, 1, 1, 1, ""),
    ('2', r"\boxed{2.0001}", 0, 0, 0, 0, ""),
    ('100', r"\boxed{1e2}", 0, 0, 1, 1, "math-verify reads 1e2 as 1*e*2 (e is Euler's number), as TRL does"),
    ('0', r"\boxed{-0}", 1, 1, 1, 1, ""),
    ('0', r"\boxed{0.0}", 1, 1, 1, 1, ""),
    ('0', r"\boxed{}", 0, 0, 0, 0, ""),
    ('1/0', r"\boxed{1/0}", 0, 0, 1, 1,
     '1/0 parses to zoo on both sides and zoo != zoo (old matched identical strings)'),
    ('1', r"\boxed{1/0}", 0, 0, 0, 0, ""),
    ("9" * 300, r"\boxed{" + "9" * 300 + "}", 1, 1, 1, 1, ""),
    ("9" * 300, r"\boxed{" + "9" * 299 + "8}", 0, 0, 0, 0, ""),
    # --- symbolic
    (r"\frac{x}{2}", r"\boxed{0.5x}", 1, 1, 1, 1, ""),
    (r"\frac{x}{2}", r"\boxed{x/2}", 1, 1, 1, 1, ""),
    (r"\frac{x}{2}", r"\boxed{2/x}", 0, 0, 0, 0, ""),
    (r"\frac{x+1}{x}", r"\boxed{1 + \frac{1}{x}}", 1, 1, 1, 1, ""),
    ('a+b', r"\boxed{b+a}", 1, 1, 1, 1, ""),
    ('a+b', r"\boxed{a+c}", 0, 0, 0, 0, ""),
    ('ab', r"\boxed{ba}", 1, 1, 1, 1, ""),
    (r"\sqrt{12}", r"\boxed{2\sqrt{3}}", 1, 1, 1, 1, ""),
    (r"\sqrt{12}", r"\boxed{3\sqrt{2}}", 0, 0, 0, 0, ""),
    (r"3\sqrt{2}", r"\boxed{\sqrt{18}}", 1, 1, 1, 1, ""),
    (r"\frac{1}{\sqrt{3}}", r"\boxed{\frac{\sqrt{3}}{3}}", 1, 1, 1, 1, ""),
    ('x^{2}', r"\boxed{x\cdot x}", 1, 1, 1, 1, ""),
    ('x^{2}', r"\boxed{2x}", 0, 0, 0, 0, ""),
    ("__import__('os')", r"\boxed{__import__('os')}", 1, 1, 1, 1, ""),
    ('1', r"\boxed{__import__('os').system('true')}", 0, 0, 0, 0, ""),
    # --- no answer / malformed
    ('5', "I don't know", 0, 0, 0, 0, ""),
    ('5', r"\boxed", 0, 0, 0, 0, ""),
    ('5', r"\boxed{", 0, 0, 0, 0, ""),
    ('5', r"}}}}\boxed{{{", 0, 0, 0, 0, ""),
    ('5', '#### ', 0, 0, 0, 0, ""),
    (r"\frac{3}{4}", r"\boxed{\frac{3}{4}}", 1, 1, 1, 1, ""),
    (r"\frac{3}{4}", r"\boxed{0.75}", 1, 1, 1, 1, ""),
    (r"\frac{3}{4}", r"\boxed{\frac{6}{8}}", 1, 1, 1, 1, ""),
    # --- fractions, decimals (added with the math-verify engine)
    (r"\frac{3}{4}", r"\boxed{\frac{4}{3}}", 0, 0, 0, 0, ""),
    (r"\frac{3}{4}", r"\boxed{3/4}", 1, 1, 1, 1, ""),
    (r"\frac{2}{3}", r"\boxed{0.666667}", 1, 1, 0, 1,
     'math-verify compares numbers rounded to 6 decimals in both modes (old: strict exact, lenient rel. 1e-6)'),
    (r"\frac{2}{3}", r"\boxed{0.67}", 0, 0, 0, 0, ""),
    ('-0.5', r"\boxed{-\frac{1}{2}}", 1, 1, 1, 1, ""),
    ('1.5', r"\boxed{\frac{3}{2}}", 1, 1, 1, 1, ""),
    ('1.5', r"\boxed{1\frac{1}{2}}", 1, 1, 0, 0, 'math-verify reads the mixed number 1\\frac{1}{2} as 3/2'),
    ('0.125', r"\boxed{\frac18}", 0, 0, 1, 1,
     "math-verify with TRL's config leaves malformed_operators off: brace-less \\frac12 / \\sqrt3 do not parse"),
    ('3.0', r"\boxed{3}", 1, 1, 1, 1, ""),
    # --- percent (added with the math-verify engine)
    (r"25\%", r"\boxed{25\%}", 1, 1, 1, 1, ""),
    (r"25\%", r"\boxed{25}", 1, 1, 1, 1, ""),
    (r"25\%", r"\boxed{0.25}", 1, 1, 0, 1,
     'math-verify reads p\\% as p/100 and accepts either form in both modes (old: lenient only)'),
    (r"25\%", r"\boxed{2.5}", 0, 0, 0, 0, ""),
    ('50', '#### 50%', 1, 1, 1, 1, ""),
    ('0.5', '#### 50%', 1, 1, 0, 1,
     'math-verify reads p\\% as p/100 and accepts either form in both modes (old: lenient only)'),
    # --- units, money, degrees (added with the math-verify engine)
    ('12', r"\boxed{12 \text{ inches}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('12', r"\boxed{12\mbox{ cm}}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('4', r"\boxed{4\text{ m}^2}", 1, 1, 0, 1,
     'math-verify (units=True) drops the unit in both modes (old: lenient only)'),
    ('90', r"\boxed{90^{\circ}}", 1, 1, 1, 1, ""),
    ('18', '#### $18.00', 1, 1, 1, 1, ""),
    ('18', '#### 18 dollars', 0, 0, 0, 1,
     "math-verify's unit list lacks 'dollars': 18 d o l l a r s is a product (old lenient dropped unit words)"),
    ('7', 'Answer: 7 apples', 1, 1, 0, 1,
     "math-verify's unit list drops 'apples' in both modes (old: lenient dropped unit words)"),
    ('2.50', r"\boxed{\$2.5}", 1, 1, 1, 1, ""),
    # --- LaTeX forms (added with the math-verify engine)
    (r"\sqrt{2}", r"\boxed{\sqrt{2}}", 1, 1, 1, 1, ""),
    (r"\sqrt{2}", r"\boxed{2^{1/2}}", 1, 1, 1, 1, ""),
    ("2.5", r"\boxed{\$2.50}", 1, 1, 1, 1, ""),
    (r"\sqrt{2}", r"\boxed{1.41421356}", 1, 1, 0, 1,
     'math-verify compares numbers rounded to 6 decimals in both modes (old: strict exact, lenient rel. 1e-6)'),
    (r"\frac{1}{2}", r"\boxed{\displaystyle\frac{1}{2}}", 1, 1, 1, 1, ""),
    (r"2\pi", r"\boxed{6.283185}", 1, 1, 0, 1,
     'math-verify compares numbers rounded to 6 decimals in both modes (old: strict exact, lenient rel. 1e-6)'),
    ('e^2', r"\boxed{e^{2}}", 1, 1, 1, 1, ""),
    (r"\log_2 8", r"\boxed{3}", 1, 1, 0, 0,
     'math-verify evaluates LaTeX the old safe subset refused (\\log, trig identities, \\binom, factorial)'),
    (r"\sin^2 x + \cos^2 x", r"\boxed{1}", 1, 1, 0, 0,
     'math-verify evaluates LaTeX the old safe subset refused (\\log, trig identities, \\binom, factorial)'),
    ('10^{3}', r"\boxed{1000}", 1, 1, 1, 1, ""),
    (r"\binom{5}{2}", r"\boxed{10}", 1, 1, 0, 0,
     'math-verify evaluates LaTeX the old safe subset refused (\\log, trig identities, \\binom, factorial)'),
    ('3!', r"\boxed{6}", 1, 1, 0, 0,
     'math-verify evaluates LaTeX the old safe subset refused (\\log, trig identities, \\binom, factorial)'),
    ('2+3i', r"\boxed{3i+2}", 1, 1, 1, 1, ""),
    ('2+3i', r"\boxed{2-3i}", 0, 0, 0, 0, ""),
    # --- intervals (added with the math-verify engine)
    (r"(0, \infty)", r"\boxed{(0,\infty)}", 1, 1, 1, 1, ""),
    (r"(0, \infty)", r"\boxed{[0,\infty)}", 0, 0, 0, 0, ""),
    ('[1, 5]', r"\boxed{[1,5]}", 1, 1, 1, 1, ""),
    ('[1, 5]', r"\boxed{1 \le x \le 5}", 0, 0, 0, 0, ""),
    (r"(-\infty, 0) \cup (1, \infty)", r"\boxed{(-\infty,0)\cup(1,\infty)}", 1, 1, 1, 1, ""),
    (r"(-\infty, 0) \cup (1, \infty)", r"\boxed{(1,\infty)\cup(-\infty,0)}", 1, 1, 0, 0,
     'math-verify compares unions of intervals as sets (order-free)'),
    (r"(-\infty, 0) \cup (1, \infty)", r"\boxed{(-\infty,0]\cup(1,\infty)}", 0, 0, 0, 0, ""),
    # --- sets, tuples, lists (added with the math-verify engine)
    (r"\{1, 2, 3\}", r"\boxed{\{3, 2, 1\}}", 1, 1, 0, 1,
     'math-verify compares sets and bare lists unordered in both modes (old: lenient only)'),
    (r"\{1, 2, 3\}", r"\boxed{\{1, 2\}}", 0, 0, 0, 0, ""),
    ('1, 2, 3', r"\boxed{3, 1, 2}", 1, 1, 0, 1,
     'math-verify compares sets and bare lists unordered in both modes (old: lenient only)'),
    ('(3, -1)', r"\boxed{(3,-1)}", 1, 1, 1, 1, ""),
    ('(3, -1)', r"\boxed{(-1,3)}", 0, 0, 0, 0, ""),
    ('2, -2', r"\boxed{\pm 2}", 1, 1, 0, 0, 'math-verify expands \\pm 2 to the set {2, -2}'),
    # --- matrices, vectors (added with the math-verify engine)
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\boxed{\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}}", 1, 1, 1, 1,
     ""),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}}", 1, 1, 0, 0,
     'math-verify compares matrices by value, bmatrix == pmatrix (old: no matrices)'),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\boxed{\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}}", 0, 0, 0, 0,
     ""),
    (r"\begin{pmatrix} 1 \\ -2 \end{pmatrix}", r"\boxed{\begin{pmatrix} 1 \\ -2 \end{pmatrix}}", 1, 1, 1, 1, ""),
    (r"\begin{pmatrix} 1 \\ -2 \end{pmatrix}", r"\boxed{(1,-2)}", 0, 0, 0, 0, ""),
    # --- expressions, equations (added with the math-verify engine)
    ('x=3', r"\boxed{x=3}", 1, 1, 1, 1, ""),
    ('x=3', r"\boxed{3}", 1, 1, 1, 1, ""),
    ('x=3', r"\boxed{x=4}", 0, 0, 0, 0, ""),
    ('3', r"\boxed{x=3}", 1, 1, 1, 1, ""),
    ('y=2x+1', r"\boxed{y=1+2x}", 1, 1, 1, 1, ""),
    ('y=2x+1', r"\boxed{2x+1}", 1, 1, 1, 1, ""),
    ('y=2x+1', r"\boxed{y=2x-1}", 0, 0, 0, 0, ""),
    ('x^2-1', r"\boxed{(x-1)(x+1)}", 1, 1, 1, 1, ""),
    (r"\frac{x^2-1}{x-1}", r"\boxed{x+1}", 1, 1, 1, 1, ""),
    ('2a+b', r"\boxed{b+2a}", 1, 1, 1, 1, ""),
    ('x > 2', r"\boxed{x>2}", 1, 1, 1, 1, ""),
    ('x > 2', r"\boxed{(2,\infty)}", 1, 1, 0, 0,
     'math-verify compares the inequality x > 2 with the interval (2, \\infty)'),
    ('k = 1, 2', r"\boxed{k=1,2}", 1, 1, 1, 1, ""),
    # --- text answers (added with the math-verify engine)
    (r"\text{Monday}", r"\boxed{\text{Monday}}", 1, 1, 1, 1, ""),
    (r"\text{(C)}", r"\boxed{C}", 1, 1, 1, 1, ""),
    (r"\text{(C)}", r"\boxed{(C)}", 1, 1, 1, 1, ""),
    ('C', r"\boxed{\textbf{(C)}}", 1, 1, 1, 1, ""),
    ('no', r"\boxed{\text{No}}", 1, 1, 0, 0, 'math-verify compares \\text answers case-insensitively'),
    ('even', r"\boxed{\text{odd}}", 0, 0, 0, 0, ""),
    # --- GSM8K-style whole completions (added with the math-verify engine)
    ('72', 'Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips.\n#### 72', 1, 1, 1, 1, ""),
    ('10', 'Weng earns 12/60 = $0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $10.\n#### 10', 1, 1, 1, 1,
     ""),
    ('5', 'She needs 100 - 50 - 30 - 15 = 5 more.\n#### 5', 1, 1, 1, 1, ""),
    ('5', 'She needs 100 - 50 - 30 - 15 = 5 more.\n#### 6', 0, 0, 0, 0, ""),
    ('624', 'He runs 3*3=9 sprints... so 9*60 = 540.\nThe answer is 624', 0, 1, 0, 1, ""),
    ('624', r"The answer is \boxed{624}.", 1, 1, 1, 1, ""),
    ('624', 'The final answer is $624$. I hope it is correct.', 0, 1, 0, 1, ""),
    # --- garbage, empty, hostile (added with the math-verify engine)
    ('5', '', 0, 0, 0, 0, ""),
    ('5', '   ', 0, 0, 0, 0, ""),
    ('5', r"\boxed{}", 0, 0, 0, 0, ""),
    ('5', r"\boxed{ }", 0, 0, 0, 0, ""),
    ('5', r"\boxed{\text{}}", 0, 0, 0, 0, ""),
    ('5', r"\boxed{5", 0, 1, 0, 1, ""),
    ('5', "}{" * 50, 0, 0, 0, 0, ""),
    ('5', '\x00\x01\x02', 0, 0, 0, 0, ""),
    ('5', '😀 5 😀', 0, 1, 0, 1, ""),
    ('5', r"\boxed{\frac{}{}}", 0, 0, 0, 0, ""),
    ('5', r"\boxed{5}}}}", 1, 1, 1, 1, ""),
    ('5', r"\boxed{\undefinedcommand{5}}", 0, 0, 0, 0, ""),
    ('0', r"\boxed{0/0}", 0, 0, 0, 0, ""),
    ('2', r"\boxed{" + "(" * 10 + "2" + ")" * 10 + "}", 1, 1, 1, 1, ""),
    # --- very long inputs (answers over MAX_ANSWER_CHARS are compared as exact strings) (added with the math-verify engine)
    ('7', "blah " * 20000 + r"\boxed{7}", 1, 1, 1, 1, ""),
    ('7', r"\boxed{7}" + " blah" * 20000, 1, 1, 1, 1, ""),
    ('7', "7 " * 5000, 0, 1, 0, 1, ""),
    ('601', r"\boxed{" + "1+" * 600 + "1}", 0, 0, 0, 0, ""),
    ("9" * 2000, r"\boxed{" + "9" * 2000 + "}", 1, 1, 1, 1, ""),
    # --- nested boxes (added with the math-verify engine)
    ('7', r"\boxed{\boxed{7}}", 1, 1, 1, 1, ""),
    ('7', r"\boxed{\boxed{\boxed{7}}}", 1, 1, 1, 1, ""),
    ('7', r"\boxed{\fbox{7}}", 1, 1, 1, 1, ""),
    ('7', r"\boxed{" * 200 + "7" + "}" * 200, 1, 1, 1, 1, ""),
    ('7', r"\boxed{7} and later \boxed{\boxed{8}}", 0, 0, 0, 0, ""),
    ('8', r"$\boxed{5}$ and $\boxed{8}$", 1, 1, 1, 1, ""),
]
# fmt: on

# Completions with a \boxed where our verdict differs from TRL's accuracy_reward (math-verify run on the whole
# completion with TRL's prediction config; the reference wrapped in \boxed{} as verl does), and why.
TRL_DIFFERENCES = {
    ("5", r"\boxed{4} no wait \boxed{5}"): "last box wins here (as in verl's scorers); math-verify reads {4, 5}",
    ("8", r"$\boxed{5}$ and $\boxed{8}$"): "last box wins here; math-verify joins boxes linked by 'and': {5, 8}",
    ("7", r"so $\boxed 7$"): r"our extraction reads '\boxed 7' without braces; math-verify does not",
}


@pytest.fixture(autouse=True)
def generous_symbolic_time_limit(monkeypatch):
    """The table checks answers, not speed: a loaded test machine must not turn a slow proof into a miss."""
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 60.0)


def test_table_is_large_has_negatives_and_explains_every_change():
    assert len(CASES) >= 150
    assert sum(1 for _, _, strict, lenient, *_ in CASES if strict == 0 and lenient == 0) >= 50
    for gold, completion, strict, lenient, old_strict, old_lenient, why in CASES:
        changed = (strict, lenient) != (old_strict, old_lenient)
        assert changed == bool(why), (gold, completion[:60], "a changed verdict needs a reason, an unchanged none")
    assert len({(gold, completion) for gold, completion, *_ in CASES}) == len(CASES), "duplicate rows"


@pytest.mark.parametrize("gold, completion, strict, lenient, old_strict, old_lenient, why", CASES)
def test_score_table(gold, completion, strict, lenient, old_strict, old_lenient, why):
    assert math_reward.score_strict(completion, gold) == strict, "strict"
    assert math_reward.score(completion, gold) == lenient, "lenient"


def _trl_accuracy(completion: str, gold: str) -> float:
    """TRL's accuracy_reward (trl/rewards/accuracy_rewards.py), with the reference boxed as verl boxes it."""
    import math_verify
    from latex2sympy2_extended import NormalizationConfig

    gold_parsed = math_verify.parse("\\boxed{" + gold + "}", parsing_timeout=None)
    pred_config = math_verify.LatexExtractionConfig(
        normalization_config=NormalizationConfig(units=True), boxed_match_priority=0, try_extract_without_anchor=False
    )
    answer = math_verify.parse(completion, [pred_config], extraction_mode="first_match", parsing_timeout=None)
    return float(math_verify.verify(gold_parsed, answer, timeout_seconds=None))


BOXED_CASES = [(g, c, s) for g, c, s, *_ in CASES if "\\boxed" in c and len(c) < 1000]


def test_trl_agreement_covers_most_of_the_table():
    assert len(BOXED_CASES) >= 150
    assert set(TRL_DIFFERENCES) <= {(g, c) for g, c, _ in BOXED_CASES}


@pytest.mark.parametrize("gold, completion, strict", BOXED_CASES)
def test_boxed_verdicts_agree_with_trl(gold, completion, strict):
    trl = _trl_accuracy(completion, gold)
    if (gold, completion) in TRL_DIFFERENCES:
        assert trl != strict, "listed as a difference but agrees: drop it from TRL_DIFFERENCES"
    else:
        assert trl == strict


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
        # Exact numbers are keyed as integers or p/q now (the old keys were normalised strings: "\frac{1}{2}",
        # "0.5", "2.5"), so equal values written differently land in one majority vote.
        (r"\dfrac{1}{2}", "1/2"),
        (r"\frac12", "1/2"),
        ("0.5", "1/2"),
        ("2.50", "5/2"),
        ("1,234,567", "1234567"),
        ("18.000", "18"),
        (".5", "1/2"),
        ("x = 5", "5"),
        (r"45^\circ", "45"),
        ("-0", "0"),
        # Not a number: math-verify's normalised LaTeX (the old keys stripped \left/\right, \text, %, spaces).
        (r"\frac1{x}", r"\frac{1}{x}"),
        (r"\left( 1, 2 \right)", "( 1, 2 )"),
        (r"50\%", r"50\%"),
        (r"\text{yes}", r"\text{yes}"),
    ],
)
def test_normalize(raw, expected):
    assert math_reward.normalize(raw) == expected


def test_canonical_answers_are_valid_references():
    texts = [r"\boxed{\frac{1}{2}}", "#### 0.5", r"\boxed{x^2+1}", "Answer: x = 3", r"\boxed{(1, 2)}",
             r"\boxed{\{1,2\}}"]
    for text in texts:
        key = math_reward.canonical_answer(text)
        assert key and math_reward.score(text, key) == 1.0, (text, key)
    assert math_reward.canonical_answer("no answer here") is None
    assert math_reward.canonical_answer_strict("so 18") is None and math_reward.canonical_answer("so 18") == "18"


def test_symbolic_timeout_gives_no_match(monkeypatch):
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 1e-4)
    # A genuinely equal pair that needs sympy: with a 0.1 ms budget the comparison times out -> no match.
    assert math_reward.score(r"\boxed{(x+1)^3}", "x^3+3x^2+3x+1") == 0.0
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 5.0)
    assert math_reward.score(r"\boxed{(x+1)^3}", "x^3+3x^2+3x+1") == 1.0


def test_time_limit_is_not_swallowed_by_math_verify(monkeypatch):
    # 9^(9^(9^9)) makes sympy compute a huge power; math-verify catches Exception around its work, so a limit that
    # raised an Exception would be swallowed and the work would go on unbounded. Ours is a BaseException.
    monkeypatch.setattr(math_reward, "SYMBOLIC_TIMEOUT_S", 0.5)
    start = time.monotonic()
    assert math_reward.score(r"\boxed{9^{9^{9^{9}}}}", "3") == 0.0
    assert time.monotonic() - start < 30.0  # unbounded, it runs for minutes


def test_scores_off_the_main_thread():
    # math-verify's own signal.alarm timeouts raise ValueError off the main thread; ours are off there, so a
    # threaded caller still gets verdicts (its own timeout is the limit).
    results = []
    thread = threading.Thread(
        target=lambda: results.extend(
            [math_reward.score(r"\boxed{\frac{1}{2}}", "0.5"), math_reward.score(r"\boxed{3}", "4")]
        )
    )
    thread.start()
    thread.join(120)
    assert results == [1.0, 0.0]


def test_process_pool_scores_like_inline():
    # rl4llm.rewards.pool runs each call in a spawned worker's main thread: the SIGALRM limit works there.
    texts = [r"\boxed{\frac{1}{2}}", "#### 0.5", r"\boxed{0.4}", "so 0.5", r"\boxed{" + "(" * 3000 + "1"]
    answers = ["0.5"] * len(texts)
    reward = rewards.get_reward("math")
    inline = [reward(t, a) for t, a in zip(texts, answers)]
    with pool_lib.BatchScorer(reward, num_workers=2, timeout_s=120) as scorer:
        pooled, metrics = scorer.score(texts, answers)
    assert list(pooled) == inline == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert metrics == {"reward/timeouts": 0.0, "reward/errors": 0.0}
