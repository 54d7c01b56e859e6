"""Escaping untrusted text: the security-critical part of the UI, kept short enough to review at once.

Token text is untrusted (a model can emit ``<script>``, ``<b>``, ``onerror=``, entities, zero-width
and right-to-left marks, control characters, or a lone U+FFFD from a byte-fallback piece), and so are
error messages, prompts and model names. Every string that reaches the page goes through one of:

* ``escape_text``  — HTML element content;
* ``escape_attr``  — a double-quoted attribute value (title tooltips);
* ``hover_escape`` — a plotly hover label (plotly renders a subset of HTML there);
* ``plain_visible`` — plain text (no HTML) with invisible characters made visible, to be escaped later.

Markup shows as characters; invisible characters show as visible markers; ``$ { } `` ` are entities,
so no template engine (Gradio's HTML component renders through one) finds anything to act on."""
from __future__ import annotations

import html
import unicodedata

# Characters that would break, hide or reorder text: drawn as a visible marker instead.
_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(32)} | {0x7F: "\u2421"}
_VISIBLE_WHITESPACE = {"\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}
# Characters html.escape leaves alone but that some template engines interpret ($ { } `).
_EXTRA_ENTITIES = {"$": "&#36;", "{": "&#123;", "}": "&#125;", "`": "&#96;"}
_BYTE_FRAGMENT = ('<span class="bytefrag" title="part of a multi-byte character (byte-fallback token)">'
                  "\ufffd</span>")


def _hidden(char: str) -> bool:
    """True for characters a reader cannot see or that change how the text around them is shown:
    controls, format characters (zero-width, bidi marks and overrides), line/paragraph separators,
    surrogates, private-use and unassigned code points."""
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def _marker(char: str) -> str:
    code = ord(char)
    if code in _CONTROL_PICTURES:
        return _CONTROL_PICTURES[code]
    return f"\u27e8U+{code:04X}\u27e9"


def _escape_template_chars(escaped: str) -> str:
    """Replace $ { } ` (left alone by html.escape) with entities; entities themselves contain none."""
    for char, entity in _EXTRA_ENTITIES.items():
        escaped = escaped.replace(char, entity)
    return escaped


def _escape_char(char: str, newline_breaks: bool) -> str:
    """One character of untrusted text as safe HTML."""
    if char in _VISIBLE_WHITESPACE:
        marker = f'<span class="ws">{_VISIBLE_WHITESPACE[char]}</span>'
        return marker + "<br>" if char == "\n" and newline_breaks else marker
    if char == "\ufffd":
        return _BYTE_FRAGMENT
    if _hidden(char):
        return f'<span class="cc">{_marker(char)}</span>'
    if char in _EXTRA_ENTITIES:
        return _EXTRA_ENTITIES[char]
    return html.escape(char, quote=True)


def escape_text(text: str, newline_breaks: bool = True) -> str:
    """Escape untrusted text for HTML element content, making invisible characters visible.

    Newlines show as ↵ (followed by a real line break when ``newline_breaks``), tabs as →, other
    controls as Unicode control pictures (␀, ␛, …), zero-width/bidi/format characters as ⟨U+200B⟩
    style markers, a lone U+FFFD (an incomplete UTF-8 byte piece) as a marked �. Spaces are kept
    (the CSS uses ``white-space: pre-wrap``). The result contains no raw ``<``, ``>``, ``&`` from
    the input, no quote characters and no ``$ { } ` `` (so no template engine can act on it)."""
    if text is None:
        return ""
    text = str(text)
    if text.isascii() and text.isprintable():  # fast path, same result: nothing hidden or special here
        return _escape_template_chars(html.escape(text, quote=True))
    return "".join(_escape_char(char, newline_breaks) for char in text)


def plain_visible(text: str) -> str:
    """Untrusted text as plain characters with invisible ones replaced by markers (no HTML)."""
    text = str(text or "")
    if text.isascii() and text.isprintable():  # fast path: printable ASCII has nothing to mark
        return text
    out = []
    for char in text:
        if char in _VISIBLE_WHITESPACE:
            out.append(_VISIBLE_WHITESPACE[char])
        elif char != "\ufffd" and _hidden(char):
            out.append(_marker(char))
        else:
            out.append(char)
    return "".join(out)


def escape_attr(text: str) -> str:
    """Escape untrusted text for a double-quoted attribute value (title tooltips); newlines become
    ``&#10;`` so a tooltip keeps its lines."""
    lines = [_escape_template_chars(html.escape(plain_visible(line), quote=True))
             for line in str(text or "").split("\n")]
    return "&#10;".join(lines)


def hover_escape(text: str) -> str:
    """Untrusted text for a plotly hover label: invisible characters made visible, markup escaped.
    Labels go in ``hovertext``, never ``hovertemplate``, so a ``%{...}`` in a token is never read."""
    return html.escape(plain_visible(text), quote=True)
