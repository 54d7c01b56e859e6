"""What kind of token a drafted token is: the atlas's rows "by kind of drafted token".

Six kinds, decided from the token's own text, the character before it and whether it ends the text:

    token_kind(" world", "o")  == START_OF_WORD     a space, then letters
    token_kind("ing", "k")     == INSIDE_WORD       letters glued to the letter or digit before them
    token_kind("Hello", "\\n")  == START_OF_WORD     letters after a non-letter
    token_kind("3rd", " ")     == START_OF_WORD     letters, the first letter or digit after a non-letter
    token_kind(" 42", " ")     == DIGITS            digits, no letters (" 1,234" too)
    token_kind(" {", ")")      == CODE_SYMBOLS      no letters or digits, one of CODE_CHARACTERS
    token_kind(", ", "d")      == SPACE_PUNCTUATION everything else without letters or digits
    token_kind("</s>", "", is_end=True) == END_OF_TEXT
"""
from __future__ import annotations

START_OF_WORD = "start of word"
INSIDE_WORD = "inside a word"
SPACE_PUNCTUATION = "whitespace and punctuation"
DIGITS = "digits"
CODE_SYMBOLS = "code symbols"
END_OF_TEXT = "end of text"
TOKEN_KINDS = (START_OF_WORD, INSIDE_WORD, SPACE_PUNCTUATION, DIGITS, CODE_SYMBOLS, END_OF_TEXT)

CODE_CHARACTERS = frozenset("{}[]<>=+*/\\|&^%$#@~`_;")


def token_kind(text: str, previous_char: str = "", is_end: bool = False) -> str:
    """The kind of a token with text ``text`` written right after ``previous_char`` ("" at the start)."""
    if is_end:
        return END_OF_TEXT
    if not any(char.isalpha() for char in text):
        if any(char.isdigit() for char in text):
            return DIGITS
        return CODE_SYMBOLS if any(char in CODE_CHARACTERS for char in text) else SPACE_PUNCTUATION
    first = next(index for index, char in enumerate(text) if char.isalnum())
    before = text[first - 1] if first else previous_char[-1:]     # the character just before the word part
    return INSIDE_WORD if before.isalnum() else START_OF_WORD
