"""The texts on which wordpiece.js is checked against Hugging Face's ``tokenizers``.

``code/transformer_tutorial/views/explorers/wordpiece.js`` tokenizes in the reader's browser;
tests/test_wordpiece_js.py runs it under Node on :func:`corpus` and compares every token and ID
with the book's tokenizer (:func:`reference_tokenizer`). A browser test can reuse the same
cases: :func:`cases` gives each text with its expected tokens and IDs.

The corpus is a hand-written list (:data:`HAND_WRITTEN`: accents, CJK, emoji, punctuation of many
scripts, whitespace and control characters, special tokens, very long words...) plus texts
generated from a fixed seed (:data:`SEED`), so it is the same on every run and machine.

One kind of character is kept out: those on which the library and JavaScript disagree because
their Unicode data differ (:data:`UNICODE_GAPS`, explained there).
"""

import random
from functools import cache

from tokenizers import Tokenizer

from transformer_tutorial.model.files import model_directory
from transformer_tutorial.model.tokens import load_tokenizer, load_vocabulary

SEED = 20240607
GENERATED = 1200  # texts made from SEED, on top of the hand-written ones

# Characters on which `tokenizers` and wordpiece.js disagree, found by comparing them on every
# code point (test_every_code_point_is_known in tests/test_wordpiece_js.py); code points in
# hexadecimal, FIRST-LAST a range with both ends included. All of them were added to Unicode in
# version 9.0 or later, or re-categorised since. The library's character classes come from Rust
# crates with older Unicode tables (unicode_categories for Mn, Cf and P, which match Unicode
# 8.0 here; unicode-normalization-alignments for NFD), while JavaScript's \p{...} and
# normalize() use the engine's own ICU data (Node 20.20: ICU 78, Unicode 17). So:
UNICODE_GAPS = {
    # Nonspacing marks (Mn) and format characters (Cf) added in Unicode 9.0 or later, e.g. the
    # Arabic Quranic marks U+08D4-U+08E1, U+0C3C TELUGU SIGN NUKTA, the Adlam marks. The library
    # does not know them as Mn or Cf, so it keeps them; wordpiece.js strips (Mn) or drops (Cf).
    "newer marks and format characters": """
        07FD 0890-0891 0897-089F 08CA-08E2 09FE 0AFA-0AFF 0B55 0C04 0C3C 0D00 0D3B-0D3C 0D81
        0EBA 0ECE 180F 1885-1886 1ABF-1ADD 1AE0-1AEB 1DF6-1DFB A82C A8C5 A8FF A9BD 10D24-10D27
        10D69-10D6D 10EAB-10EAC 10EFA-10EFF 10F46-10F50 10F82-10F85 11070 11073-11074 110C2
        110CD 111C9 111CF 1123E 11241 1133B 113BB-113C0 113CE 113D0 113D2 113E1-113E2
        11438-1143F 11442-11444 11446 1145E 1182F-11837 11839-1183A 1193B-1193C 1193E 11943
        119D4-119D7 119DA-119DB 119E0 11A01-11A0A 11A33-11A38 11A3B-11A3E 11A47 11A51-11A56
        11A59-11A5B 11A8A-11A96 11A98-11A99 11B60 11B62-11B64 11B66 11C30-11C36 11C38-11C3D
        11C3F 11C92-11CA7 11CAA-11CB0 11CB2-11CB3 11CB5-11CB6 11D31-11D36 11D3A 11D3C-11D3D
        11D3F-11D45 11D47 11D90-11D91 11D95 11D97 11EF3-11EF4 11F00-11F01 11F36-11F3A 11F40
        11F42 11F5A 13430-13440 13447-13455 1611E-16129 1612D-1612F 16F4F 16FE4 1CF00-1CF2D
        1CF30-1CF46 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A 1E08F
        1E130-1E136 1E2AE 1E2EC-1E2EF 1E4EC-1E4EF 1E5EE-1E5EF 1E6E3 1E6E6 1E6EE-1E6EF 1E6F5
        1E944-1E94A
    """,
    # Punctuation (P) added in Unicode 9.0 or later, e.g. U+061D ARABIC END OF TEXT MARK,
    # U+2E43-U+2E5D (supplemental punctuation). The library does not split words on them.
    "newer punctuation": """
        061D 09FD 0A76 0C77 0C84 1B4E-1B4F 1B7D-1B7F 2E43-2E4F 2E52-2E5D 10D6E 10EAD 10ED0
        10F55-10F59 10F86-10F89 113D4-113D5 113D7-113D8 1144B-1144F 1145A-1145B 1145D
        11660-1166C 116B9 1183B 11944-11946 119E2 11A3F-11A46 11A9A-11A9C 11A9E-11AA2
        11B00-11B09 11BE1 11C41-11C45 11C70-11C71 11EF7-11EF8 11F43-11F4F 11FFF 12FF1-12FF2
        16D6D-16D6F 16E97-16E9A 16FE2 1E5FF 1E95E-1E95F
    """,
    # Characters whose category changed after the library's tables were made: U+166D CANADIAN
    # SYLLABICS CHI SIGN became a symbol (Po -> So, Unicode 12.0), so the library still splits
    # on it; U+1734 HANUNOO SIGN PAMUDPOD and U+1171E AHOM CONSONANT SIGN MEDIAL RA became
    # spacing marks (Mn -> Mc, Unicode 14.0), so the library still strips them.
    "re-categorised": "166D 1734 1171E",
    # Letters and marks with canonical decompositions, added in Unicode 13.0 (U+11938, Dives
    # Akuru) and 16.0 (Todhri, Tulu-Tigalari, Kirat Rai): the library does not decompose them.
    "newer decompositions": """
        105C9 105E4 11383 11385 1138E 11391 113C5 113C7-113C8 11938 16D68-16D6A
    """,
}


def _code_points(listing: str) -> set[int]:
    """ "0041 0061-007A" -> {0x41, 0x61, 0x62, ..., 0x7A}"""
    codes = set()
    for item in listing.split():
        first, _, last = item.partition("-")
        codes.update(range(int(first, 16), int(last or first, 16) + 1))
    return codes


_GAPS = frozenset().union(*(_code_points(listing) for listing in UNICODE_GAPS.values()))


def in_unicode_gap(char: str) -> bool:
    """Whether ``char`` is one of :data:`UNICODE_GAPS`."""
    return ord(char) in _GAPS


HAND_WRITTEN = [
    # empty, whitespace only, the ordinary case
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\u00a0\u2003\u3000",
    "\u200b",
    "\u200b\u200b \u200b",
    "Hello, world!",
    "The cat sat on the mat.",
    "Tokenization splits unbelievably long words into pieces.",
    "Attention is all you need",
    "TRANSFORMERS ARE GREAT",
    "hyperparameters, embeddings and positional encodings",
    "I can't believe it's not butter!",
    "rock 'n' roll",
    # accents and case
    "café",
    "Café au lait",
    "naïve",
    "Ångström",
    "résumé",
    "façade",
    "Zürich",
    "São Paulo",
    "Dvořák",
    "Łódź",
    "Mañana",
    "crème brûlée",
    "Øresund",
    "Straße",
    "STRASSE",
    "İstanbul",
    "ışık",
    "IĞDIR",
    "ǅemal ǈ ǋ",
    "ﬁnance ﬂow",
    "Ⅻ ① ½ ²³",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "Tiếng Việt có dấu",
    "ΣΟΦΙΑ σοφία ΟΔΟΣ",
    "Σ",
    "ᾼ ᾳ ΐ",
    # combining marks
    "e\u0301",
    "a\u0308o\u0308u\u0308",
    "n\u0303",
    "\u0301",
    "\u0301\u0301abc",
    "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307l\u036e\u0312g\u0321o",
    "o\u0336v\u0336e\u0336r",
    "a\u20dd b\u20e3",
    "\u0345",
    "a\u0345",
    "\u1100\u1161\u11a8",
    # CJK
    "中文",
    "我爱自然语言处理",
    "汉字和漢字",
    "日本語のテキスト",
    "東京は日本の首都です。",
    "ひらがな カタカナ",
    "한국어",
    "안녕하세요, 세계!",
    "\U0002000b\U0002a6b2",
    "豈 更 丽",
    "\u3400\u4dbf\u9fff\ua000",
    "\U0002b81f\U0002b820\U0002b91f\U0002b920\U0002ceaf\U0002ceb0",
    "\U0002f800\U0002fa1d\U0002fa1f\U0002fa20",
    "\U00030000\U00031350",
    "mixed中文and English",
    "「引用」『二重』【括弧】",
    "、。・〜",
    # emoji
    "😀",
    "I love 🍕!",
    "👍🏽",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "👩\u200d💻",
    "👨\u200d👩\u200d👧\u200d👦",
    "🏳\ufe0f\u200d🌈",
    "🇫🇷🇯🇵",
    "1\ufe0f\u20e3",
    "❤\ufe0f",
    "☕ ♥ ★ ✓",
    "🥰 🫠 🧑🏿\u200d🦰",
    "🤷\u200d♀\ufe0f",
    "© ® ™",
    "🙂" * 100,
    "🙂" * 101,
    # punctuation of many scripts, and symbols that are not punctuation
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "a!b\"c#d$e%f&g'h(i)j*k+l,m-n.o/p:q;r<s=t>u?v@w[x\\y]z^a_b`c{d|e}f~g",
    "« » „ “ ” ‘ ’ ‹ ›",
    "— – ‐ ‑ ‒ ―",
    "… ¿ ¡ ‰ ′ ″ · • ※ ⁂ § ¶ † ‡",
    "¿Qué tal? ¡Muy bien!",
    "؟ ، ؛ ۔",
    "׃ ־ ׳ ״",
    "। ॥",
    "ฯ ๆ ๚ ๛",
    "፣ ። ፤",
    "⸮ ⹂ ⸘",
    "€ £ ¥ ° ± × ÷ ← → ∑ √ ∞ ≠ ≤",
    "a€b a°b a±b",
    "\u00b4 \u00a8 \u02c6 \u00b8",
    "_underscore_ __dunder__",
    "x-y x_y x.y x/y x\\y",
    # numbers
    "42",
    "3.14159",
    "1,000,000",
    "-7 +7 ±7",
    "1e-9 0x1F 0b1010",
    "٣٤٥ ۴۵۶",
    "४२ ৪২ ๔๒",
    "2024-01-01T12:30:00Z",
    "$19.99 50% #1",
    "12345678901234567890",
    # whitespace oddities
    "a\tb",
    "a\nb",
    "a\rb",
    "a\r\nb",
    "a\u00a0b",
    "a\u2003b",
    "a\u3000b",
    "a\u200bb",
    "a\u2028b\u2029c",
    "a\u1680b\u202fc\u205fd",
    "a\u0085b",
    "a\u000bb\u000cc",
    "a\ufeffb",
    "a\u180eb",
    "  leading and trailing  ",
    "many     spaces",
    "\t\n\r \u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a",
    # control and format characters, private use, the replacement character
    "a\x00b",
    "\x00",
    "a\x01b\x07c\x1bd\x7fe",
    "a\x80b\x9fc",
    "a\ufffdb",
    "\ufffd",
    "soft\u00adhyphen",
    "zero\u200cwidth\u200djoiner",
    "left\u200eright\u200fmark",
    "bidi\u202eoverride\u202c",
    "iso\u2066late\u2069",
    "tag\U000e0001\U000e0065\U000e006e",
    "private\ue000use\U000f0000\U0010fffd",
    "\ufff9anchor\ufffb",
    "music\U0001d173beam",
    "\U0001d400\U0001d41a\U0001d7ce",
    "unassigned\u0378\U0001fffe\U000e0080",
    # mixed scripts
    "مرحبا بالعالم",
    "السَّلَامُ عَلَيْكُمْ",
    "שָׁלוֹם עולם",
    "नमस्ते दुनिया",
    "हिन्दी भाषा",
    "สวัสดีครับ",
    "Καλημέρα κόσμε",
    "ἀρετή καὶ σοφία",
    "Привет, мир!",
    "Ёжик в тумане",
    "გამარჯობა",
    "Բարեւ",
    "வணக்கம்",
    "বাংলা",
    "ሰላም",
    "English العربية עברית हिन्दी ไทย Ελληνικά Русский 中文",
    # apostrophes and quotes
    "don't",
    "it’s",
    "O’Neill",
    '"quoted"',
    "‘single’",
    "„German“",
    "«French»",
    "「Japanese」",
    "`backtick`",
    "''double single''",
    # URLs, e-mail, code
    "https://example.com/path?q=1&r=2#frag",
    "user.name+tag@example.org",
    "www.transformer-tutorial.io/chapters/09",
    "file:///C:/Users/me/Documents",
    "def f(x): return x**2",
    "for (let i = 0; i < n; i++) { sum += a[i]; }",
    '<div class="x">Hi</div>',
    "SELECT * FROM t WHERE id = 1;",
    "x_i^2 + \\frac{a}{b}",
    "#include <stdio.h>",
    "snake_case_name camelCaseName PascalCase SCREAMING_CASE",
    "λx.x",
    "{'key': [1, 2, 3]}",
    # special tokens: matched in the raw text, exactly and case-sensitively
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[PAD]",
    "[UNK]",
    "[mask]",
    "[ MASK ]",
    "[[MASK]]",
    "[MASK][MASK]",
    "the [MASK] sat on the [MASK].",
    "[CLS] hello [SEP] world [SEP]",
    "a[UNK]b",
    "[MASK",
    "MASK]",
    "[MA\u200bSK]",
    "[unused0]",
    "##ing",
    "##",
    # very long words: more than 100 characters (counted after normalisation) is [UNK]
    "a" * 100,
    "a" * 101,
    "b" * 150,
    "supercalifragilisticexpialidocious" * 3,
    "é" * 100,
    "é" * 101,
    "e\u0301" * 101,
    "x" * 99 + "😀",
    "x" * 100 + "😀",
    "𝐀" * 100,
    "中" * 150,
    "word " * 200,
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
]


# Fragments for the generated texts, by kind.
WORDS = (
    "the a of and to in is it you that he was for on are as with his they at be this from I "
    "have or by one had not but what all were when we there can an your which their said if do "
    "will each about how up out them then she many some so these would other into has more her "
    "two like him see time could no make than first been its who now people my made over did "
    "down only way find use may water long little very after words called just where most know "
    "transformer attention embedding tokenization unbelievably hyperparameter backpropagation "
    "gradient softmax encoder decoder multilingual preprocessing untranslatable "
    "Paris London Tokyo Python JavaScript BERT GPT MiniLM WordPiece"
).split()
ACCENTED = (
    "café naïve Ångström résumé façade Zürich Dvořák Łódź mañana crème brûlée Øresund Straße "
    "İstanbul ışık ǅemal ﬁnance Tiếng Việt ΣΟΦΙΑ ἀρετή Ёжик über señor coöperate élève"
).split()
CJK = "中文 汉字 漢字 日本語 東京 首都 ひらがな カタカナ 한국어 안녕하세요 \U0002000b 豈 丽".split()
EMOJI = [
    "😀", "🍕", "👍🏽", "👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🇫🇷",
    "1\ufe0f\u20e3", "❤\ufe0f", "☕", "🥰", "🫠", "🧑🏿\u200d🦰", "🤷\u200d♀\ufe0f", "™", "🙂🙃",
]  # fmt: skip
PUNCTUATION = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»„“”‘’‹›—–…¿¡‰′″·•※§¶†‡؟،؛।॥ฯ፣።、。「」⸮")
SYMBOLS = list("€£¥°±×÷←→∑√∞≠≤♥★✓©®")
NUMBERS = "42 3.14159 1,000,000 -7 1e-9 0x1F ٣٤٥ ४२ ๔๒ 2024-01-01 12:30 $19.99 50% ²³ ½".split()
SCRIPTS = (
    "مرحبا بالعالم السَّلَامُ שָׁלוֹם עולם नमस्ते दुनिया हिन्दी สวัสดีครับ Καλημέρα κόσμε "
    "Привет мир გამარჯობა Բարեւ வணக்கம் বাংলা ሰላም"
).split()
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b"]
ODDITIES = [
    "\x00", "\x01", "\x1b", "\x7f", "\x85", "\ufffd", "\u00ad", "\u200d", "\u202e", "\ufeff",
    "\ue000", "\u0301", "\u0308", "\u0327", "\u20dd", "\ufe0f",
]  # fmt: skip
SPECIAL = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[mask]", "##"]
URLS = ["https://example.com/a?b=c", "user@example.org", "www.example.co.uk", "C:\\Windows"]


def _random_code_point(rng: random.Random) -> str:
    """Any character but a surrogate or one of :data:`UNICODE_GAPS`, mostly from the BMP."""
    while True:
        top = rng.choice((0x80, 0x800, 0x3000, 0x10000, 0x10000, 0x30000, 0x110000))
        char = chr(rng.randrange(top))
        if not (0xD800 <= ord(char) <= 0xDFFF) and not in_unicode_gap(char):
            return char


def _vocabulary_word(rng: random.Random, vocabulary: list[str]) -> str:
    """Two to four vocabulary pieces glued together, so WordPiece has something to split."""
    pieces = [rng.choice(vocabulary).removeprefix("##") for _ in range(rng.randint(2, 4))]
    return "".join(piece for piece in pieces if not piece.startswith("["))


def _generated(rng: random.Random, vocabulary: list[str]) -> str:
    kind = rng.random()
    if kind < 0.15:  # random code points, anywhere in Unicode
        return "".join(_random_code_point(rng) for _ in range(rng.randint(1, 12)))
    if kind < 0.25:  # vocabulary pieces glued into unseen words
        return " ".join(_vocabulary_word(rng, vocabulary) for _ in range(rng.randint(1, 5)))
    if kind < 0.28:  # one very long word, around the 100-character limit
        piece = rng.choice(WORDS + ACCENTED + CJK + EMOJI)
        length = rng.choice((99, 100, 101, 102, rng.randint(50, 300)))
        return (piece * length)[:length] if len(piece) == 1 else piece * (length // len(piece))
    pools = (WORDS, WORDS, ACCENTED, CJK, EMOJI, PUNCTUATION, SYMBOLS, NUMBERS, SCRIPTS)
    pools += (ODDITIES, SPECIAL, URLS)
    parts = []
    for _ in range(rng.randint(1, 10)):
        pool = rng.choice(pools)
        part = rng.choice(pool)
        if rng.random() < 0.2:
            part = part.upper() if rng.random() < 0.5 else part.capitalize()
        parts.append(part)
        parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    return "".join(parts)


@cache
def _vocabulary() -> tuple[str, ...]:
    return tuple(load_vocabulary(model_directory()))


def corpus() -> list[str]:
    """The texts, always the same: :data:`HAND_WRITTEN` then :data:`GENERATED` from :data:`SEED`.

    No text holds a surrogate or a character of :data:`UNICODE_GAPS`.
    """
    rng = random.Random(SEED)
    vocabulary = list(_vocabulary())
    texts = list(HAND_WRITTEN)
    texts += [_generated(rng, vocabulary) for _ in range(GENERATED)]
    for text in texts:
        assert not any(in_unicode_gap(char) for char in text), text
    return texts


@cache
def reference_tokenizer() -> Tokenizer:
    """The book's tokenizer, as ``load_pretrained().tokenizer`` loads it: no truncation, no
    padding (``transformer_tutorial.model.tokens.load_tokenizer``)."""
    return load_tokenizer(model_directory())


def cases() -> list[dict]:
    """Every text of :func:`corpus` with the tokens and IDs that ``tokenizers`` gives it."""
    tokenizer = reference_tokenizer()
    result = []
    for text in corpus():
        encoding = tokenizer.encode(text)
        result.append({"text": text, "tokens": encoding.tokens, "ids": encoding.ids})
    return result
