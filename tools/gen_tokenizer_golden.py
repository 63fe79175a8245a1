#!/usr/bin/env python3
"""Generate the tokenizer and chat-template golden files in tests/data/tokenizer/.

For a fixed list of >= 300 diverse strings this records the ids that two reference
implementations give for the Gemma 3 vocab:

  * llama.cpp (PyPI llama-cpp-python, vocab_only) on the default model's GGUF, with
    add_bos=True and parse_special False and True. tests/test_tokenizer.c requires our ids
    to equal these exactly.
  * Hugging Face `tokenizers` on gemma3-tokenizer.json, with special tokens split out
    (the default, the analogue of parse_special=True) and with encode_special_tokens=True
    (the analogue of parse_special=False). Recorded for comparison only; every difference
    from llama.cpp is listed in hf_vs_llama.txt and explained in docs/tokenizer.md.

and, for a few conversations, the rendering of the HF chat template from
gemma3-tokenizer_config.json by jinja2 (tests/test_chat_template.c compares ours to it).

Files written (all plain text, parsed by the C tests without a JSON library):
  golden.tsv       # comment lines, then one case per line, 5 TAB-separated fields:
                   hex(utf8 text), llama ids (parse_special=0), llama ids (parse_special=1),
                   hf ids (encode_special_tokens=True), hf ids (default); ids space-separated
  hf_vs_llama.txt  human-readable list of the cases where HF and llama.cpp disagree
  chat_golden.txt  "case NAME GENPROMPT NMSG" / "msg ROLE HEX" x NMSG / "expect HEX"

Usage (from the repository root):
  python3 tools/gen_tokenizer_golden.py [--model GGUF] [--hf-dir DIR] [--out tests/data/tokenizer]
--hf-dir holds gemma3-tokenizer.json and gemma3-tokenizer_config.json (decompressed from
/work/shared/data/gemma-vocab/*.xz into a temporary directory when not given).
"""
import argparse
import json
import lzma
import os
import random
import sys
import tempfile

DEFAULT_MODEL = os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf")
VOCAB_DIR = "/work/shared/data/gemma-vocab"


# --------------------------------------------------------------------------------------
# Test strings. Deterministic: fixed lists plus a seeded pseudo-random section.
# --------------------------------------------------------------------------------------

def test_strings():
    s = []
    # English prose
    s += [
        "Hello world",
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "It was the best of times, it was the worst of times, it was the age of wisdom.",
        "I can't believe it's not butter — said nobody, ever.",
        "Don't stop; won't stop. Shouldn't've.",
        "\"Quoted text\" and 'single quotes' and `backticks`.",
        "Mr. O'Neil paid $1,234.56 for 3.5 lbs of coffee (approx. 1.59 kg).",
        "e.g., i.e., etc., vs. — abbreviations everywhere...",
        "ALL CAPS SENTENCE WITH SHOUTING!!!",
        "mIxEd CaSe WoRdS aNd CamelCaseIdentifiers",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "Question? Answer! Interrobang‽ Ellipsis…",
        "Hyphen-ated words, en–dash, em—dash, and minus −1.",
        "The year 2024 had 366 days; 1999 did not.",
        "a",
        "I",
        "Hi",
        "hello",
        " hello",
        "hello ",
        " hello ",
        "  hello  ",
        "hello  world",
        "hello   world",
        "hello    world    again",
        "end with newline\n",
        "\nstart with newline",
        "Two\nlines",
        "Paragraph one.\n\nParagraph two.",
        "Windows\r\nline\r\nendings\r\n",
        "old mac\rline endings",
        "tab\tseparated\tvalues",
        "col1\tcol2\tcol3\n1\t2\t3\n",
        "The café served crème brûlée and piña colada to the naïve façade.",
    ]
    # Other Latin-script languages
    s += [
        "Größenwahnsinnige Straßenbahnfahrer übernehmen die Führung.",
        "Donaudampfschifffahrtsgesellschaftskapitän",
        "Ich möchte ein Brötchen mit Käse, bitte.",
        "Le cœur a ses raisons que la raison ne connaît point.",
        "Où est la bibliothèque ? À côté de l'église.",
        "¿Dónde está el baño? ¡Muchas gracias!",
        "A ação é mais importante que a intenção.",
        "Zażółć gęślą jaźń.",
        "Pijamalı hasta yağız şoföre çabucak güvendi.",
        "Tiếng Việt có nhiều dấu thanh điệu.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Árvíztűrő tükörfúrógép",
        "Høj på åen, blåbærsyltetøj.",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    ]
    # CJK
    s += [
        "你好，世界！",
        "我爱北京天安门，天安门上太阳升。",
        "机器学习是人工智能的一个分支。",
        "中文文本没有空格分隔词语",
        "繁體中文與简体中文混合",
        "こんにちは、世界！",
        "日本語の文章には漢字、ひらがな、カタカナが混在します。",
        "東京スカイツリーは高さ634メートルです。",
        "ｶﾀｶﾅ 半角カナ ＡＢＣ 全角英数",
        "안녕하세요, 세계!",
        "한국어 문장은 띄어쓰기를 사용합니다.",
        "대한민국의 수도는 서울입니다.",
        "漢字かな交じり文と한글 and English mixed.",
        "「引用」『二重引用』（括弧）【角括弧】",
        "　全角スペース　で区切る",
    ]
    # Other scripts
    s += [
        "مرحبا بالعالم",
        "اللغة العربية جميلة جداً.",
        "السلام عليكم ورحمة الله وبركاته",
        "שלום עולם",
        "नमस्ते दुनिया",
        "हिन्दी भारत की राजभाषा है।",
        "আমি বাংলায় গান গাই",
        "தமிழ் ஒரு பழமையான மொழி",
        "Привет, мир!",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Україна — це Європа.",
        "Γειά σου Κόσμε!",
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
        "สวัสดีชาวโลก",
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
        "გამარჯობა მსოფლიო",
        "Բարեւ աշխարհ",
        "ሰላም ለዓለም",
        "ᚠᚢᚦᚨᚱᚲ runes",
        "Mixed: Hello Привет 你好 مرحبا नमस्ते こんにちは",
    ]
    # Code
    s += [
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "class Foo(Bar):\n\tdef __init__(self, x: int = 0) -> None:\n\t\tself.x = x\n",
        "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)",
        "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
        "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
        "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);",
        "function f() {\n\treturn [1, 2, 3].map(x => x * 2).filter(Boolean);\n}",
        "fn main() {\n    let v: Vec<u8> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n}",
        "impl<'a, T: Clone + Send> Iterator for Foo<'a, T> { type Item = &'a T; }",
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
        "<!DOCTYPE html>\n<html>\n<body>\n<div class=\"x\"><p>Hi</p></div>\n</body>\n</html>",
        "<table><tr><td>1</td><td>2</td></tr></table>",
        "<h1>Title</h1><strong>bold</strong> <em>em</em> <code>x</code>",
        "{\"key\": \"value\", \"list\": [1, 2.5, true, null], \"nested\": {\"a\": {}}}",
        "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
        "ls -la | grep -v '^d' | awk '{print $9}' > out.txt 2>&1",
        "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
        "key: value\nlist:\n  - a\n  - b\nnested:\n    deep: true\n",
        "all: build\n\nbuild:\n\tgcc -O2 -o app main.c\n\nclean:\n\trm -f app\n",
        "x=1;y=2;z=x+y;if(z>2){z--;}else{z++;}",
        "    indented four\n        indented eight\n            indented twelve",
        "\t\tdouble tab\n\t\t\ttriple tab",
        "// comment\n/* block\n   comment */\n# hash comment\n-- sql comment",
        "a->b; c::d; e=>f; g<=h; i!=j; k===l; m>>=n; o<<p; q**r; s//t",
        "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
        "public static void main(String[] args) throws Exception { System.out.println(args.length); }",
        "lambda x: {k: v for k, v in x.items() if v is not None}",
        "0x7fffffff 0b1010 0o777 1e-9 3.14159f 42ULL",
    ]
    # Emoji
    s += [
        "😀",
        "😀😃😄😁",
        "I ❤️ you",
        "👍🏽 thumbs up with skin tone",
        "👨‍👩‍👧‍👦 family",
        "👩🏾‍💻 coder",
        "🏳️‍🌈 rainbow flag",
        "🇺🇸🇩🇪🇯🇵🇫🇷 flags",
        "1️⃣ 2️⃣ #️⃣ keycaps",
        "🤷‍♀️🤦🏻‍♂️",
        "🧑‍🤝‍🧑",
        "emoji at end 🎉",
        "🎉 emoji at start",
        "☕️ vs ☕ variation selector",
        "🦀🐍🐹 crab python gopher",
        "🫠🫡🥹 newer emoji",
        "text😀text😀text",
        "‼️⁉️™️©️®️",
    ]
    # Whitespace
    for k in (1, 2, 3, 4, 5, 8, 16, 30, 31, 32, 33, 40, 64):
        s.append(" " * k)
    for k in (1, 2, 3, 4, 8, 31, 32, 33, 40):
        s.append("\n" * k)
    for k in (1, 2, 3, 4, 8, 31, 32, 40):
        s.append("\t" * k)
    s += [
        "\r\n",
        "\r\n\r\n",
        "\r\r\r",
        " \n \n ",
        "\n \n",
        "\t \t \t",
        " \t\n\r\v\f",
        "a b  c   d    e     f",
        "word" + " " * 35 + "word",
        "x\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\ny",
        "\u00a0non-breaking\u00a0space",
        "\u3000ideographic\u3000space",
        "\u2009thin\u2009space\u200b zero\u200cwidth\u200djoiner",
        "\ufeffBOM at start",
        "trailing spaces   ",
        "   leading spaces",
        "  both  ",
        " ",
        "",
        "\v\f",
        "line1\n\tindented\n\t\tmore\n",
        "  \n  \n  ",
    ]
    # Digits and numbers
    s += [
        "0", "7", "42", "123", "1234567890",
        "3.141592653589793238462643383279502884197169399375105820974944592307816406286",
        "99999999999999999999999999999999999999999999999999",
        "1,000,000.00",
        "-273.15°C",
        "+1 (555) 123-4567",
        "2024-01-31T23:59:59.999Z",
        "12:30pm, 1/2, ¾, 10%, 50‰",
        "v1.2.3-rc.4+build.567",
        "1e10 6.022e23 1.6e-19",
        "١٢٣٤٥ ٠٫٥",
        "一二三 123 ４５６",
        "IPv4 192.168.0.1 IPv6 2001:0db8:85a3::8a2e:0370:7334",
        "0000000000000001",
    ]
    # URLs, paths, addresses
    s += [
        "https://www.example.com/path/to/page?query=1&other=two#fragment",
        "http://localhost:8080/api/v1/users/42",
        "ftp://user:pass@ftp.example.org/file.tar.gz",
        "Visit https://github.com/ggerganov/llama.cpp for details.",
        "mailto:someone@example.com",
        "user.name+tag@sub.domain.co.uk",
        "C:\\Users\\Name\\Documents\\file.txt",
        "/usr/local/lib/python3.11/site-packages/",
        "~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf",
        "https://例子.测试/路径?查询=值",
        "@username #hashtag $TICKER",
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    ]
    # Text that spells special tokens, and broken variants
    s += [
        "<start_of_turn>user",
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
        "<bos>",
        "<eos>",
        "<pad>",
        "<unk>",
        "<mask>",
        "<0x41>",
        "<0x0A>",
        "<0x00>",
        "<0xFF><0xfe>",
        "<unused0>",
        "<unused99>",
        "<end_of_turn>",
        "<start_of_image>",
        "<end_of_image>",
        "[multimodal]",
        "<bos><bos>",
        "<eos>text<bos>",
        "<start_of_turn",
        "start_of_turn>",
        "<start_of_turn>>",
        "<<start_of_turn>",
        "< bos>",
        "<bos >",
        "<BOS>",
        "<Bos>",
        "<b o s>",
        "<<bos>>",
        "<0x4G>",
        "<0x41",
        "0x41>",
        "<0x>",
        "<start_of_<end_of_turn>turn>",
        "<start_of_turn><end_of_turn>",
        " <bos> ",
        "\n<start_of_turn>model\n",
        "text<end_of_turn>more",
        "<table>",
        "</table>",
        "<s>",
        "</s>",
        "<a href=\"x\">link</a>",
        "<b>bold</b><i>it</i><u>u</u>",
        "<div><span>nested</span></div>",
        "<start_of_turn>system\nYou are helpful.<end_of_turn>",
        "<|im_start|>user\nhi<|im_end|>",
        "<|endoftext|>",
        "[INST] hi [/INST]",
        "<unused0><unused1><unused2>",
        "<start_of_image><end_of_image>",
        "  <start_of_turn>  ",
        "\n\n<bos>\n\n",
        "<start_of_turn>user\n  spaced  <end_of_turn>",
        "<eos" * 3,
        "<bos>Hello<eos>",
    ]
    # Unicode edge cases (all valid UTF-8)
    s += [
        "e\u0301 (e + combining acute) vs \u00e9",
        "a\u0300\u0301\u0302\u0303\u0304 stacked combining marks",
        "\u202eRTL override\u202c and \u200fRLM",
        "\ufffd replacement character",
        "\ue000\uf8ff private use",
        "\uffff\ufffe noncharacters",
        "\U0010ffff max code point",
        "\U0001d400\U0001d401 math bold",
        "\U00020000 CJK ext B",
        "soft\u00adhyphen",
        "\u0000 NUL byte",
        "a\u0000b",
        "\u0001\u0002\u0003\u001f\u007f controls",
        "\u0085 NEL \u2028 LS \u2029 PS",
        "ﬁ ligature ﬀ ﬃ",
        "Ⅻ ½ ² ³ ℃ № ™",
        "İstanbul ıi ß ẞ ǅ",
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0661\u0662",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dalgo",
        "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5\u00c6\u00c7\u00c8",
        "\U0001f600\u200d\U0001f600 zwj between non-joinable",
        "\u2581 literal lower one eighth block",
        "\u2581\u2581 two of them \u2581",
        "▁hello▁world",
        "a\u2581b c",
    ]
    # Longer mixed documents
    s += [
        "# Title\n\nSome *markdown* with **bold**, `code`, and a [link](https://x.y).\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n",
        "| a | b |\n|---|---|\n| 1 | 2 |\n",
        "Q: What is 2+2?\nA: 4.\n\nQ: And 3*3?\nA: 9.",
        ("The Gemma 3 model family supports over 140 languages. " * 6).strip(),
        "User: 你好！Can you help me with my Python code? 🙏\n```\nfor i in range(10):\n    print(i)\n```\nThanks!!!",
        "Ünïcödé everywhere: Ωmega, Ψ, ∑, ∫, √2 ≈ 1.414, ∞, ≠, ≤, ≥, →, ⇒, ∀x∃y.",
        "\t\tname = \"x\"  # trailing comment   \n\n\n\n    return None\r\n",
    ]

    # llama.cpp's own tokenizer test inputs (tests/test-tokenizer-*.inp; this copy ships
    # with the Gemma 4 vocab in the shared data). Optional: skipped if the file is absent.
    inp = os.path.join(VOCAB_DIR, "ggml-vocab-gemma-4.gguf.inp")
    if os.path.exists(inp):
        with open(inp, encoding="utf-8") as f:
            s += f.read().split("\n__ggml_vocab_test__\n")

    # Seeded pseudo-random strings over pools that stress merges, byte fallback and
    # special-token matching at odd positions.
    rng = random.Random(20240531)
    pools = [
        "abcdefghijklmnopqrstuvwxyz     ",
        "ABCxyz0123456789 .,;:!?-_()[]{}<>/\\'\"",
        " \t\n\r",
        "äöüßéèêàçñøåœ",
        "你我他的是了不在有人这中大为上个国",
        "あいうえおかきくけこアイウエオ",
        "가나다라마바사아자차카타파하",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "αβγδεζηθικλμνξοπρστυφχψω",
        "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "กขคงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮ",
        "😀😃🎉🙏🏽👍\u200d♀️🇺🇸🇯🇵",
    ]
    specials = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<0x41>", "<b>", "</td>", "  ", "\n\n", "\t\t",
                "[multimodal]", "<unused5>", "<unk>", "<pad>"]
    for i in range(70):
        n = rng.randint(1, 60)
        out = []
        for _ in range(n):
            r = rng.random()
            if r < 0.08:
                out.append(rng.choice(specials))
            else:
                pool = rng.choice(pools) if i % 3 else pools[i % len(pools)]
                out.append(rng.choice(pool))
        s.append("".join(out))
    # Random words separated by runs of whitespace of random length.
    words = ["the", "cat", "Hund", "猫", "кот", "γάτα", "قطة", "बिल्ली", "แมว", "고양이", "🐱", "chat", "gato"]
    for i in range(20):
        parts = []
        for _ in range(rng.randint(2, 12)):
            parts.append(rng.choice(words))
            parts.append(rng.choice([" ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", " " * rng.randint(1, 40)]))
        s.append("".join(parts))

    # De-duplicate, keep order.
    seen, uniq = set(), []
    for x in s:
        if x not in seen:
            seen.add(x)
            uniq.append(x)
    return uniq


# --------------------------------------------------------------------------------------
# Chat conversations (rendered by the HF template with jinja2)
# --------------------------------------------------------------------------------------

def chat_cases():
    return [
        ("single_user", True, [("user", "Hello!")]),
        ("single_user_nogen", False, [("user", "Hello!")]),
        ("system_user", True, [("system", "You are a helpful assistant."), ("user", "What is 2+2?")]),
        ("multi_turn", True, [("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")]),
        ("multi_turn_model_role", False, [("user", "Hi"), ("model", "Hello!"), ("user", "Bye"), ("model", "Goodbye.")]),
        ("system_multi", True, [("system", "Be brief."), ("user", "Name a color."), ("assistant", "Blue."),
                                ("user", "Another?")]),
        ("trim_content", True, [("user", "  \n padded question \t\n"), ("assistant", "\n\nanswer  "), ("user", " x ")]),
        ("system_not_trimmed", True, [("system", "  sys with spaces \n"), ("user", "  hi  ")]),
        ("unicode_whitespace_trim", True, [("user", "\u3000\u00a0 全角 \u2003\u2028"), ("assistant", "\u0085ok\u205f")]),
        ("empty_content", True, [("user", ""), ("assistant", ""), ("user", "   ")]),
        ("empty_system", True, [("system", ""), ("user", "q")]),
        ("multiline", True, [("user", "line 1\nline 2\n\nline 4"), ("assistant", "```\ncode\n```")]),
        ("specials_in_content", True, [("user", "<start_of_turn>model\nfake<end_of_turn>"), ("assistant", "<bos>")]),
        ("unicode", True, [("system", "Réponds en français. 🇫🇷"), ("user", "你好 👋"), ("assistant", "Bonjour !"),
                           ("user", "Merci")]),
    ]


# --------------------------------------------------------------------------------------

def unpack_hf_files(tmp):
    """Decompresses the HF tokenizer files (33 MB, not committed) into tmp."""
    for name in ("gemma3-tokenizer.json", "gemma3-tokenizer_config.json"):
        with lzma.open(os.path.join(VOCAB_DIR, name + ".xz")) as src, open(os.path.join(tmp, name), "wb") as dst:
            dst.write(src.read())
    return tmp


def ids_str(ids):
    return " ".join(str(i) for i in ids)


def main():
    with tempfile.TemporaryDirectory(prefix="lockstep-vocab-") as tmp:
        generate(tmp)


def generate(tmp):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("LOCKSTEP_MODEL", DEFAULT_MODEL))
    ap.add_argument("--hf-dir", default=None)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "tokenizer"))
    args = ap.parse_args()

    import jinja2
    import llama_cpp
    from tokenizers import Tokenizer

    hf_dir = args.hf_dir or unpack_hf_files(tmp)
    hf = Tokenizer.from_file(os.path.join(hf_dir, "gemma3-tokenizer.json"))
    hf_nosplit = Tokenizer.from_file(os.path.join(hf_dir, "gemma3-tokenizer.json"))
    hf_nosplit.encode_special_tokens = True
    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)

    strings = test_strings()
    os.makedirs(args.out, exist_ok=True)
    n_diff = {"nosplit": 0, "split": 0}
    n_rt_fail = 0
    diffs = []
    with open(os.path.join(args.out, "golden.tsv"), "w", encoding="ascii", newline="\n") as f:
        f.write("# Tokenizer golden data, generated by tools/gen_tokenizer_golden.py. Do not edit.\n")
        f.write(f"# llama-cpp-python {llama_cpp.__version__} on {os.path.basename(args.model)}; "
                f"HF tokenizers on gemma3-tokenizer.json. add_bos = true everywhere.\n")
        f.write("# fields (TAB): hex(utf-8 text)  llama(parse_special=0)  llama(parse_special=1)  "
                "hf(encode_special_tokens)  hf(default)\n")
        for text in strings:
            b = text.encode("utf-8")
            l0 = llm.tokenize(b, add_bos=True, special=False)
            l1 = llm.tokenize(b, add_bos=True, special=True)
            h0 = hf_nosplit.encode(text).ids
            h1 = hf.encode(text).ids
            # A literal U+2581 decodes as a space (SentencePiece cannot tell them apart).
            for ids in (l0, l1):
                if llm.detokenize(ids[1:], special=True) != text.replace("\u2581", " ").encode("utf-8"):
                    n_rt_fail += 1
            if h0 != l0:
                n_diff["nosplit"] += 1
                diffs.append(("parse_special=0 vs HF encode_special_tokens=True", text, l0, h0))
            if h1 != l1:
                n_diff["split"] += 1
                diffs.append(("parse_special=1 vs HF default", text, l1, h1))
            f.write("\t".join([b.hex(), ids_str(l0), ids_str(l1), ids_str(h0), ids_str(h1)]) + "\n")

    def piece(i):
        return repr(llm.detokenize([i], special=True).decode("utf-8", "backslashreplace"))

    with open(os.path.join(args.out, "hf_vs_llama.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# Cases where HF tokenizers and llama.cpp disagree (generated by tools/gen_tokenizer_golden.py).\n")
        f.write(f"# {len(strings)} strings; differences: parse_special=0: {n_diff['nosplit']}, "
                f"parse_special=1: {n_diff['split']}. We follow llama.cpp (docs/tokenizer.md).\n\n")
        for mode, text, l, h in diffs:
            f.write(f"[{mode}] {text!r}\n")
            f.write(f"  llama.cpp: {ids_str(l)}\n    = {' '.join(piece(i) for i in l)}\n")
            f.write(f"  HF:        {ids_str(h)}\n    = {' '.join(piece(i) for i in h)}\n\n")

    # Chat template goldens.
    with open(os.path.join(hf_dir, "gemma3-tokenizer_config.json"), encoding="utf-8") as cf:
        cfg = json.load(cf)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders it
    env.globals["raise_exception"] = raise_exception
    tmpl = env.from_string(cfg["chat_template"])
    with open(os.path.join(args.out, "chat_golden.txt"), "w", encoding="ascii", newline="\n") as f:
        f.write("# Gemma 3 chat template renderings by jinja2 of the HF chat_template "
                "(tools/gen_tokenizer_golden.py). Do not edit.\n")
        for name, gen, msgs in chat_cases():
            out = tmpl.render(messages=[{"role": r, "content": c} for r, c in msgs], bos_token=cfg["bos_token"],
                              add_generation_prompt=gen)
            f.write(f"case {name} {int(gen)} {len(msgs)}\n")
            for r, c in msgs:
                f.write(f"msg {r} {c.encode('utf-8').hex()}\n")
            f.write(f"expect {out.encode('utf-8').hex()}\n")

    print(f"{len(strings)} strings; HF vs llama.cpp differences: parse_special=0 {n_diff['nosplit']}, "
          f"parse_special=1 {n_diff['split']}; llama.cpp round-trip failures: {n_rt_fail}; "
          f"{len(chat_cases())} chat cases", file=sys.stderr)


if __name__ == "__main__":
    main()
