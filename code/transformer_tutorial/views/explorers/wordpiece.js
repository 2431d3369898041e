// BERT's tokenizer in the browser: text to the tokens and IDs of the book's model.
//
// all-MiniLM-L6-v2 reads text the way BERT does (Devlin et al. 2019), and the book's Python code
// splits it with Hugging Face's `tokenizers` (transformer_tutorial.model.tokens.load_tokenizer,
// from the model's tokenizer.json). This file does the same in plain JavaScript, step by step,
// so that a page can run the encoder without Python; tests/test_wordpiece_js.py checks that it
// gives exactly the library's tokens and IDs on a corpus of more than a thousand texts.
//
// The steps, in the order `Tokenizer.encode(text)` runs them:
//   0. special tokens: "[CLS]", "[MASK]"... typed in the text stay whole (tokenizer.json's
//      added_tokens, found in the raw text before anything else);
//   1. normalizer (BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase):
//      a. drop control characters, U+0000 and U+FFFD; every kind of space becomes " ";
//      b. put spaces around each Chinese character, so that each becomes a word of its own;
//      c. strip accents: decompose (NFD) and drop the nonspacing marks (\p{Mn});
//      d. lowercase, one character at a time;
//   2. pre-tokenizer (BertPreTokenizer): split on spaces, and cut out each punctuation mark;
//   3. model (WordPiece): each word becomes its longest known beginning, then the longest
//      "##" pieces of what is left; "[UNK]" if a piece cannot be found or the word is too long;
//   4. post-processor (TemplateProcessing): "[CLS]" first and "[SEP]" last.
// No truncation and no padding: tokenizer.json asks for both (to 128 tokens), but the book's
// load_tokenizer turns them off, so a text gives exactly its own tokens (see tokens.py).
//
// Strings here are walked by code point (for...of, Array.from), never by UTF-16 unit, so that
// an emoji such as "😀" (two UTF-16 units) counts as one character, as it does in Rust.
//
// One known difference: the character classes below (\p{Mn}, \p{P}...) and normalize("NFD")
// follow the browser's Unicode data, the library's follow older tables built into it (about
// Unicode 8.0). About 700 rare characters added to Unicode since then, such as the Quranic
// marks U+08D4-U+08E1, come out differently: tests/wordpiece_corpus.py lists them (UNICODE_GAPS).
//
// Use, in a page: transformerTutorial.wordpiece.makeTokenizer(lines of vocab.txt).encode(text)
// gives {tokens: ["[CLS]", ..., "[SEP]"], ids: [101, ..., 102]}. In Node: require() this file.

(function () {
  "use strict";

  const PAD_TOKEN = "[PAD]";
  const UNK_TOKEN = "[UNK]";
  const CLS_TOKEN = "[CLS]";
  const SEP_TOKEN = "[SEP]";
  const MASK_TOKEN = "[MASK]";
  // tokenizer.json's added_tokens, all "special" and "normalized": false.
  const SPECIAL_TOKENS = [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN];
  const CONTINUING_PREFIX = "##"; // WordPiece's continuing_subword_prefix
  const MAX_CHARS = 100; // WordPiece's max_input_chars_per_word

  // ---- Character classes (tokenizers/src/normalizers/bert.rs, pre_tokenizers/bert.rs) ----

  // Rust's char::is_whitespace, the Unicode White_Space property; tab, newline and carriage
  // return are control characters that BERT counts as whitespace.
  function isWhitespace(char) {
    return char === "\t" || char === "\n" || char === "\r" || /\p{White_Space}/u.test(char);
  }

  // unicode_categories' is_other: the general category "Other", that is, controls (Cc),
  // format characters such as the zero-width space (Cf), private use (Co) and lone surrogate
  // halves (Cs). Not the unassigned code points (Cn): the library's tables do not list them, so
  // it keeps them, and so do we. Tab, newline and carriage return are whitespace instead.
  function isControl(char) {
    if (char === "\t" || char === "\n" || char === "\r") return false;
    return /[\p{Cc}\p{Cf}\p{Co}\p{Cs}]/u.test(char);
  }

  // BERT's "Chinese character": the CJK Unified Ideographs blocks, as the library lists them.
  // Hiragana, katakana and hangul are not in them: those scripts are split like any other.
  const CHINESE_RANGES = [
    [0x4e00, 0x9fff],
    [0x3400, 0x4dbf],
    [0x20000, 0x2a6df],
    [0x2a700, 0x2b73f],
    [0x2b740, 0x2b81f],
    [0x2b920, 0x2ceaf], // sic: the library starts at 0x2B920 (BERT's Python code: 0x2B820)
    [0xf900, 0xfaff],
    [0x2f800, 0x2fa1f],
  ];

  function isChineseChar(char) {
    const code = char.codePointAt(0);
    return CHINESE_RANGES.some(([first, last]) => first <= code && code <= last);
  }

  // BERT's punctuation: every ASCII character that is not a letter, digit or space (so "$",
  // "+", "^" and "`" count, though Unicode calls them symbols), plus Unicode's punctuation
  // categories (\p{P}: Pc, Pd, Ps, Pe, Pi, Pf, Po).
  function isPunctuation(char) {
    const code = char.codePointAt(0);
    return (
      (code >= 33 && code <= 47) ||
      (code >= 58 && code <= 64) ||
      (code >= 91 && code <= 96) ||
      (code >= 123 && code <= 126) ||
      /\p{P}/u.test(char)
    );
  }

  // ---- 1. The normalizer (BertNormalizer) ----

  // 1a. clean_text (do_clean_text): drop U+0000, U+FFFD and controls; any whitespace -> " ".
  function cleanText(text) {
    let cleaned = "";
    for (const char of text) {
      const code = char.codePointAt(0);
      if (code === 0 || code === 0xfffd || isControl(char)) continue;
      cleaned += isWhitespace(char) ? " " : char;
    }
    return cleaned;
  }

  // 1b. handle_chinese_chars (do_handle_chinese_chars): " 中 " for each Chinese character.
  function splitChineseChars(text) {
    let spaced = "";
    for (const char of text) {
      spaced += isChineseChar(char) ? ` ${char} ` : char;
    }
    return spaced;
  }

  // 1c. strip_accents (do_strip_accents; on because lowercase is): "é" is "e" followed by the
  // combining accent U+0301 once decomposed (NFD), and the accent, a nonspacing mark, goes.
  function stripAccents(text) {
    return text.normalize("NFD").replace(/\p{Mn}/gu, "");
  }

  // 1d. lowercase (NormalizedString::lowercase): each character on its own, as Rust's
  // char::to_lowercase does. Lowercasing the whole string at once would differ: JavaScript
  // turns a word-final "Σ" into "ς", the library always into "σ".
  function lowercase(text) {
    return Array.from(text, (char) => char.toLowerCase()).join("");
  }

  function normalize(text) {
    return lowercase(stripAccents(splitChineseChars(cleanText(text))));
  }

  // ---- 2. The pre-tokenizer (BertPreTokenizer) ----

  // Split on whitespace (dropped) and punctuation (each mark kept as a word of its own).
  function splitWords(normalized) {
    const words = [];
    let word = "";
    for (const char of normalized) {
      if (isWhitespace(char) || isPunctuation(char)) {
        if (word) words.push(word);
        word = "";
        if (!isWhitespace(char)) words.push(char);
      } else {
        word += char;
      }
    }
    if (word) words.push(word);
    return words;
  }

  // ---- 3. The model (WordPiece) ----

  // Greedy longest match first, as transformer_tutorial.model.tokens.wordpiece: the longest
  // beginning of the word that the vocabulary holds, then the longest "##" piece of what is
  // left, and so on. A word with no match, or longer than maxChars characters, is "[UNK]".
  function wordpiece(word, vocabulary, maxChars = MAX_CHARS) {
    const chars = Array.from(word); // code points: "😀" is one character, not two
    if (chars.length > maxChars) return [UNK_TOKEN];
    const pieces = [];
    let start = 0;
    while (start < chars.length) {
      let end = chars.length; // try the longest candidate first, then shorter ones
      let candidate = null;
      while (end > start) {
        const text = chars.slice(start, end).join("");
        candidate = start === 0 ? text : CONTINUING_PREFIX + text;
        if (vocabulary.has(candidate)) break;
        end -= 1;
      }
      if (end === start) return [UNK_TOKEN]; // not even one character is in the vocabulary
      pieces.push(candidate);
      start = end;
    }
    return pieces;
  }

  // ---- 0. Special tokens typed in the text (the tokenizer's added vocabulary) ----

  // Cut the raw text around every "[CLS]", "[MASK]"... (exact, case-sensitive matches, before
  // normalisation): ["a ", "[MASK]", " b"]. The pieces in between are tokenized as text.
  const SPECIAL_PATTERN = new RegExp(
    `(${SPECIAL_TOKENS.map((token) => token.replace(/[[\]]/g, "\\$&")).join("|")})`,
  );

  function splitSpecialTokens(text) {
    return text.split(SPECIAL_PATTERN).filter((piece) => piece !== "");
  }

  // ---- Putting it together ----

  // vocabLines: the lines of vocab.txt (an array, or the whole file as one string); the token
  // with ID i is line i.
  function makeTokenizer(vocabLines) {
    const lines = typeof vocabLines === "string" ? vocabLines.split("\n") : [...vocabLines];
    if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop(); // the final newline
    const vocabulary = new Map(); // token -> ID
    lines.forEach((token, id) => vocabulary.set(token.replace(/\r$/, ""), id));
    for (const token of SPECIAL_TOKENS) {
      if (!vocabulary.has(token)) throw new Error(`the vocabulary has no ${token} token`);
    }

    function tokenize(text) {
      const tokens = [];
      for (const piece of splitSpecialTokens(text)) {
        if (SPECIAL_TOKENS.includes(piece)) {
          tokens.push(piece);
          continue;
        }
        for (const word of splitWords(normalize(piece))) {
          tokens.push(...wordpiece(word, vocabulary));
        }
      }
      return tokens;
    }

    // 4. The post-processor: [CLS] text [SEP]. Every token is in the vocabulary by now.
    function encode(text) {
      if (typeof text !== "string") throw new TypeError("text must be a string");
      const tokens = [CLS_TOKEN, ...tokenize(text), SEP_TOKEN];
      return { tokens, ids: tokens.map((token) => vocabulary.get(token)) };
    }

    return { encode, tokenize, vocabulary };
  }

  const api = {
    CLS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    UNK_TOKEN,
    MAX_CHARS,
    cleanText,
    splitChineseChars,
    stripAccents,
    lowercase,
    normalize,
    splitWords,
    wordpiece,
    splitSpecialTokens,
    makeTokenizer,
  };

  if (typeof module !== "undefined" && module.exports) module.exports = api;
  if (typeof window !== "undefined") {
    const tt = (window.transformerTutorial = window.transformerTutorial || {});
    tt.wordpiece = api;
  }
})();
