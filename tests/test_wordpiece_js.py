"""wordpiece.js, the tokenizer the book runs in the reader's browser, against ``tokenizers``.

Node runs ``code/transformer_tutorial/views/explorers/wordpiece.js`` once on the whole corpus of
tests/wordpiece_corpus.py (JSON in on stdin, JSON out on stdout); every text must give exactly
the tokens and IDs of the book's tokenizer, ``load_pretrained().tokenizer``. A second run checks
the normalizer and pre-tokenizer on every code point, one at a time, so that the characters
kept out of the corpus (``UNICODE_GAPS``) are exactly the ones known to differ.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from wordpiece_corpus import UNICODE_GAPS, cases, in_unicode_gap, reference_tokenizer

from transformer_tutorial.model.files import model_directory

WORDPIECE_JS = (
    Path(__file__).resolve().parents[1]
    / "code"
    / "transformer_tutorial"
    / "views"
    / "explorers"
    / "wordpiece.js"
)

# Reads {"vocab": path of vocab.txt, "texts": [...]} or {"vocab": ..., "codePoints": true}.
RUNNER = r"""
const fs = require("fs");
const wordpiece = require(process.argv[1]);
const request = JSON.parse(fs.readFileSync(0, "utf8"));
const tokenizer = wordpiece.makeTokenizer(fs.readFileSync(request.vocab, "utf8"));
let answer;
if (request.texts) {
  answer = request.texts.map((text) => tokenizer.encode(text));
} else {
  // Every code point but the surrogates: its normalised form, and how the pre-tokenizer
  // treats it between two letters: "s" space (dropped), "p" punctuation (alone), "w" word.
  const normalized = [];
  let classes = "";
  for (let code = 0; code < 0x110000; code++) {
    if (code >= 0xd800 && code <= 0xdfff) continue;
    const char = String.fromCodePoint(code);
    normalized.push(wordpiece.normalize(char));
    const words = wordpiece.splitWords("a" + char + "a");
    classes += words.length === 3 ? "p" : words.length === 2 ? "s" : "w";
  }
  answer = { normalized, classes };
}
process.stdout.write(JSON.stringify(answer));
"""


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.skip("node is not on PATH: wordpiece.js is checked under Node.js")
    return path


def _run(node: str, request: dict):
    request = {"vocab": str(model_directory() / "vocab.txt"), **request}
    result = subprocess.run(
        [node, "-e", RUNNER, str(WORDPIECE_JS)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"node failed:\n{result.stderr}"
    return json.loads(result.stdout)


def test_every_corpus_text_gives_the_library_tokens_and_ids(node):
    expected = cases()
    assert len(expected) >= 1000
    answers = _run(node, {"texts": [case["text"] for case in expected]})
    assert len(answers) == len(expected)
    mismatches = [
        f"{case['text']!r}:\n  tokenizers {case['tokens']} {case['ids']}\n"
        f"  wordpiece.js {answer['tokens']} {answer['ids']}"
        for case, answer in zip(expected, answers, strict=True)
        if (answer["tokens"], answer["ids"]) != (case["tokens"], case["ids"])
    ]
    assert not mismatches, (
        f"{len(mismatches)} of {len(expected)} texts differ; the first ones:\n"
        + "\n".join(mismatches[:10])
    )


def _library_characters(chars: list[str]) -> tuple[list[str], str]:
    """What the library does with each character: normalised form, pre-tokenizer class."""
    tokenizer = reference_tokenizer()
    # One call for all: characters normalise independently, and "|" is left as it is (NFD
    # never reorders marks across it), so the result splits back into one piece per character.
    joined = "|".join(char for char in chars if char != "|")
    pieces = iter(tokenizer.normalizer.normalize_str(joined).split("|"))
    normalized = [
        tokenizer.normalizer.normalize_str(char) if char == "|" else next(pieces) for char in chars
    ]
    # Between the letters of "a" + "a".join(chars) + "a", character i sits at 2i + 1: a
    # punctuation mark comes out alone, a space not at all, anything else inside a word.
    classes = ["s"] * len(chars)
    for word, (start, end) in tokenizer.pre_tokenizer.pre_tokenize_str("a" + "a".join(chars) + "a"):
        for position in range(start | 1, end, 2):  # the odd positions: characters of chars
            classes[position // 2] = "p" if len(word) == 1 else "w"
    return normalized, "".join(classes)


def test_every_code_point_is_known(node):
    """Normalizer and pre-tokenizer agree on each character, but for the UNICODE_GAPS."""
    chars = [chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]
    normalized, classes = _library_characters(chars)
    answer = _run(node, {"codePoints": True})
    assert len(answer["normalized"]) == len(chars) == len(answer["classes"])
    differ = [
        i
        for i in range(len(chars))
        if answer["normalized"][i] != normalized[i] or answer["classes"][i] != classes[i]
    ]
    unknown = [
        f"U+{ord(chars[i]):04X} {chars[i]!r}: tokenizers {normalized[i]!r} ({classes[i]}), "
        f"wordpiece.js {answer['normalized'][i]!r} ({answer['classes'][i]})"
        for i in differ
        if not in_unicode_gap(chars[i])
    ]
    assert not unknown, (
        f"{len(unknown)} characters differ that UNICODE_GAPS does not list "
        f"({', '.join(UNICODE_GAPS)}); the first ones:\n" + "\n".join(unknown[:20])
    )
