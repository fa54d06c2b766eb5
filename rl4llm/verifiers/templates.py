"""Judge templates of the generative verifier (`verifiers.generative`): text with the fields {question},
{reference} and exactly one {completion}, read into (literal text, field) pieces. Pure text, no model: the config
validation reads it too."""

from __future__ import annotations

import string

TEMPLATE_FIELDS = ("question", "reference", "completion")
DEFAULT_TEMPLATE = ("Question: {question}\nReference answer: {reference}\nAnswer: {completion}\n"
                    "Is the answer correct? Answer Yes or No:")


def template_pieces(template: str) -> list[tuple[str, str | None]]:
    """(literal text, field name or None) pieces of `template` in order; ValueError if it uses a field other than
    TEMPLATE_FIELDS, a format spec or conversion, or not exactly one {completion}."""
    parsed = list(string.Formatter().parse(template))  # ValueError on an unbalanced brace
    fields = [field for _, field, _, _ in parsed if field is not None]
    unknown = sorted(set(fields) - set(TEMPLATE_FIELDS))
    if unknown or fields.count("completion") != 1 or any(spec or conversion for _, _, spec, conversion in parsed):
        raise ValueError(f"fields must be among {{{', '.join(TEMPLATE_FIELDS)}}} without format specs, with "
                         "exactly one {completion}" + (f"; unknown: {unknown}" if unknown else ""))
    return [(literal, field) for literal, field, _, _ in parsed]
