r"""Throughput of the math reward (rl4llm.rewards.math) on typical completions, inline, one process.

    python -m experiments.math_reward_throughput                       # this checkout's verifier
    python -m experiments.math_reward_throughput --old /tmp/old_math.py  # and another version of math.py beside it

1000 completions by default, seeded: 40% GSM8K-style (reasoning lines, then ``#### N``), 40% MATH-style (reasoning,
then ``\boxed{...}``: integers, fractions, radicals, polynomials, intervals, tuples), 10% with no marker (lenient
last-number fallback), 10% wrong; every one scored with ``score`` (lenient, the ``math`` reward) against its
reference, after one untimed warm-up call (imports). Prints one JSON line per verifier: completions per second,
the median and the slowest call, and the fraction scored 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import time

_FILLER = "We compute step by step. First, {a} + {b} = {s}. Then {s} * 2 = {d}. So far so good, let us continue.\n"
_MATH_ANSWERS = [  # (reference, how a model writes it)
    ("{a}", "{a}"),
    (r"\frac{{{a}}}{{{b}}}", r"\frac{{{a}}}{{{b}}}"),
    (r"\frac{{{a}}}{{{b}}}", r"\dfrac{{{a}}}{{{b}}}"),
    (r"{a}\sqrt{{2}}", r"\sqrt{{{a2}}}"),
    ("x^2+{a}x", "x(x+{a})"),
    ("(0,{a}]", "(0, {a}]"),
    ("({a},{b})", "({a}, {b})"),
    (r"\frac{{\pi}}{{{a}}}", r"\pi/{a}"),
]


def completions(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(completion, reference, kind) triples, mixed as the module docstring says."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        reasoning = "".join(_FILLER.format(a=a, b=b, s=a + b, d=2 * (a + b)) for _ in range(rng.randint(3, 8)))
        kind = i % 10
        if kind < 4:
            out.append((reasoning + f"#### {a * b}", str(a * b), "gsm8k"))
        elif kind < 8:
            ref, written = rng.choice(_MATH_ANSWERS)
            fields = dict(a=a, b=b, a2=2 * a * a)
            out.append((reasoning + f"The answer is $\\boxed{{{written.format(**fields)}}}$.", ref.format(**fields), "math"))
        elif kind < 9:
            out.append((reasoning + f"so she has {a + b} apples left.", str(a + b), "no_marker"))
        else:
            out.append((reasoning + f"\\boxed{{{a + b + 1}}}", str(a + b), "wrong"))
    return out


def measure(score, triples: list[tuple[str, str, str]]) -> dict:
    score(*triples[0][:2])  # warm-up: imports, parser construction
    times, correct, by_kind = [], 0, {}
    start = time.perf_counter()
    for completion, reference, kind in triples:
        t = time.perf_counter()
        correct += score(completion, reference) == 1.0
        times.append(time.perf_counter() - t)
        by_kind[kind] = by_kind.get(kind, 0.0) + times[-1]
    total = time.perf_counter() - start
    counts = {kind: sum(1 for *_, k in triples if k == kind) for kind in by_kind}
    return {
        "completions": len(triples),
        "per_s": round(len(triples) / total, 1),
        "median_ms": round(1e3 * statistics.median(times), 2),
        "max_ms": round(1e3 * max(times), 1),
        "scored_1": round(correct / len(triples), 3),
        "per_s_by_kind": {kind: round(counts[kind] / by_kind[kind], 1) for kind in sorted(by_kind)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--old", default="", help="path of another math.py to measure beside this checkout's")
    args = parser.parse_args()
    triples = completions(args.n, args.seed)
    from rl4llm.rewards import math as math_reward

    print(json.dumps({"verifier": "rl4llm.rewards.math", **measure(math_reward.score, triples)}))
    if args.old:
        spec = importlib.util.spec_from_file_location("old_math", args.old)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        print(json.dumps({"verifier": args.old, **measure(old.score, triples)}))


if __name__ == "__main__":
    main()
