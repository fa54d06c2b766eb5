"""Judge templates of the generative verifier (`verifiers.generative`): text with the fields {question},
{reference} and exactly one {completion} (a rubric judge's also {criterion}: `rewards.rubric`), read into (literal
text, field) pieces. Pure text, no model: the config validation reads it too."""

from __future__ import annotations

import string

TEMPLATE_FIELDS = ("question", "reference", "completion")
RUBRIC_TEMPLATE_FIELDS = (*TEMPLATE_FIELDS, "criterion")
DEFAULT_TEMPLATE = ("Question: {question}\nReference answer: {reference}\nAnswer: {completion}\n"
                    "Is the answer correct? Answer Yes or No:")
DEFAULT_RUBRIC_TEMPLATE = ("Question: {question}\nReference answer: {reference}\nAnswer: {completion}\n"
                           "Criterion: {criterion}\nDoes the answer satisfy the criterion? Answer Yes or No:")


def template_pieces(template: str, fields: tuple[str, ...] = TEMPLATE_FIELDS) -> list[tuple[str, str | None]]:
    """(literal text, field name or None) pieces of `template` in order; ValueError if it uses a field not in
    `fields`, a format spec or conversion, or not exactly one {completion}."""
    parsed = list(string.Formatter().parse(template))  # ValueError on an unbalanced brace
    used = [field for _, field, _, _ in parsed if field is not None]
    unknown = sorted(set(used) - set(fields))
    if unknown or used.count("completion") != 1 or any(spec or conversion for _, _, spec, conversion in parsed):
        raise ValueError(f"fields must be among {{{', '.join(fields)}}} without format specs, with "
                         "exactly one {completion}" + (f"; unknown: {unknown}" if unknown else ""))
    return [(literal, field) for literal, field, _, _ in parsed]
