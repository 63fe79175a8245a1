#!/usr/bin/env python3
"""Golden data for the BPE tokenizer (tests/test_tokenizer_bpe.c), in tests/data/tokenizer_bpe/.

Reference implementations:
  * HF `tokenizers` on Gemma 3's tokenizer.json (the path ls_tokenizer_from_json must match),
    with add_special_tokens=True (BOS), both with the default added-token split (our
    parse_special = true) and with encode_special_tokens = True (parse_special = false).
  * llama.cpp (llama-cpp-python, vocab_only) on llama.cpp's Gemma 4 vocab GGUF
    (ggml-vocab-gemma-4.gguf, tokenizer model "gemma4"), add_bos=True, parse_special 0 / 1
    (the path ls_tokenizer_from_gguf must match for Gemma 4).

Strings: the 427 of tools/gen_tokenizer_golden.py plus a few hundred seeded random strings
(unicode from many scripts, emoji, whitespace runs, special-token texts and fragments of
them, literal U+2581).

Files written:
  json_golden.tsv   comment lines, then per string 5 TAB-separated fields: hex(utf-8 text),
                    HF ids (encode_special_tokens=True), HF ids (default),
                    llama.cpp gemma4 ids (parse_special=0), llama.cpp gemma4 ids (parse_special=1)
  gemma3-mini-tokenizer.json.xz
                    Gemma 3's tokenizer.json cut down so that a fresh clone can test the JSON
                    path without the 33 MB original: every added token, every byte token, every
                    vocab token that is a substring of a token HF produced for the strings, the
                    merges among those (same order), and placeholders "\u2400<id>" for the
                    other ids so that ids stay the same. BPE only ever merges pairs whose
                    result lies inside a final token, so every merge HF applies to these strings
                    survives and the cut-down file gives the same ids; this script checks that
                    with HF itself before writing.

Usage (from the repository root):
  python3 tools/gen_tokenizer_json_golden.py [--vocab-dir /work/shared/data/gemma-vocab]
Reference versions: tokenizers 0.23.3, llama-cpp-python 0.3.36.
"""
import argparse
import json
import lzma
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_tokenizer_golden  # noqa: E402  (the 427 shared test strings)


def random_strings():
    rng = random.Random(4242)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        " " * 10 + "\n" * 5 + "\t" * 3 + "\r",
        ".,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`",
        "éèêëàâäôöûüçñßøåæœ",
        "你好世界中文字符测试机器学习人工智能",
        "こんにちはカタカナひらがな漢字",
        "한국어문장띄어쓰기",
        "приветмирабвгдеёжз",
        "αβγδεζηθικλμνξοπρσ",
        "مرحبابالعالم",
        "नमस्तेदुनिया",
        "สวัสดีชาวโลก",
        "😀😃🎉🙏🏽👍\u200d♀️🇺🇸🇯🇵🦀",
        "\u2581\u00a0\u3000\u2009\u200b\u200c\u200d\ufeff\u0085\u2028",
        "\U0001d400\U00020000\U0010ffff\ue000\ufffd",
    ]
    specials = ["<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>",
                "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>", "<|tool_call>",
                "<tool_call|>", "<|\"|>", "<|image|>", "<unused7>", "<b>", "</td>", "</s>", "<0x41>",
                "<start_of_image>", "[multimodal]", "<|tool_response>", "<start_of", "turn|>", "<|"]
    out = []
    for i in range(240):
        n = rng.randint(1, 80)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.07:
                parts.append(rng.choice(specials))
            elif r < 0.12:
                parts.append(rng.choice([" ", "\n", "\t", "\u2581"]) * rng.randint(2, 45))
            else:
                parts.append(rng.choice(rng.choice(pools)))
        out.append("".join(parts))
    # Pure whitespace mixtures and long runs.
    for i in range(40):
        out.append("".join(rng.choice([" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u2581"]) for _ in range(rng.randint(1, 30))))
    for k in (60, 100, 200):
        out += [" " * k, "\n" * k, "\t" * k, "\u2581" * k, "a" + " " * k + "b"]
    # Random words from the vocab-ish alphabet with punctuation.
    words = ["hello", "world", "Tokenizer", "BPE", "merge", "rank", "über", "naïve", "日本", "данные", "🙂", "x86_64",
             "C++", "1234", "3.14", "don't", "it's", "https://", "#include", "<div>"]
    for i in range(60):
        out.append(rng.choice(["", " ", "\n"]).join(rng.choice(words) + rng.choice(["", " ", ", ", ".", "\n", "  "])
                                                    for _ in range(rng.randint(1, 25))))
    return out


def ids_str(ids):
    return " ".join(str(i) for i in ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-dir", default="/work/shared/data/gemma-vocab")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "tokenizer_bpe"))
    args = ap.parse_args()

    import llama_cpp
    import tokenizers
    from tokenizers import Tokenizer

    strings = []
    seen = set()
    for s in gen_tokenizer_golden.test_strings() + random_strings():
        if s not in seen:
            seen.add(s)
            strings.append(s)

    with tempfile.TemporaryDirectory(prefix="lockstep-bpe-") as tmp:
        jpath = os.path.join(tmp, "gemma3-tokenizer.json")
        with lzma.open(os.path.join(args.vocab_dir, "gemma3-tokenizer.json.xz")) as src, open(jpath, "wb") as dst:
            dst.write(src.read())
        gpath = os.path.join(tmp, "ggml-vocab-gemma-4.gguf")
        with lzma.open(os.path.join(args.vocab_dir, "ggml-vocab-gemma-4.gguf.xz")) as src, open(gpath, "wb") as dst:
            dst.write(src.read())
        hf = Tokenizer.from_file(jpath)
        hf_ns = Tokenizer.from_file(jpath)
        hf_ns.encode_special_tokens = True
        llm = llama_cpp.Llama(model_path=gpath, vocab_only=True, verbose=False)

        rows = []
        final_tokens = set()
        for text in strings:
            e0, e1 = hf_ns.encode(text), hf.encode(text)
            final_tokens.update(e0.tokens)
            final_tokens.update(e1.tokens)
            b = text.encode("utf-8")
            l0 = llm.tokenize(b, add_bos=True, special=False)
            l1 = llm.tokenize(b, add_bos=True, special=True)
            rows.append((text, e0.ids, e1.ids, l0, l1))

        # Cut-down tokenizer.json.
        with open(jpath, encoding="utf-8") as f:
            full = json.load(f)
        subs = set()
        for tok in final_tokens:
            for i in range(len(tok)):
                for j in range(i + 1, len(tok) + 1):
                    subs.add(tok[i:j])
        vocab = full["model"]["vocab"]
        added_ids = {a["id"] for a in full["added_tokens"]}
        keep = {}
        for t, i in vocab.items():
            if i in added_ids or t in subs or (len(t) == 6 and t.startswith("<0x") and t.endswith(">")):
                keep[t] = i
        kept_ids = set(keep.values())
        n_model = max(vocab.values()) + 1
        for i in range(n_model):
            if i not in kept_ids:
                keep["\u2400" + str(i)] = i
        merges = [m for m in full["model"]["merges"] if m[0] in keep and m[1] in keep and (m[0] + m[1]) in keep
                  and not (m[0] + m[1]).startswith("\u2400")]
        mini = dict(full)
        mini["model"] = dict(full["model"])
        mini["model"]["vocab"] = dict(sorted(keep.items(), key=lambda kv: kv[1]))
        mini["model"]["merges"] = merges
        mini_path = os.path.join(tmp, "mini-tokenizer.json")
        with open(mini_path, "w", encoding="utf-8") as f:
            json.dump(mini, f, ensure_ascii=False, separators=(",", ":"))
        hm = Tokenizer.from_file(mini_path)
        hm_ns = Tokenizer.from_file(mini_path)
        hm_ns.encode_special_tokens = True
        bad = sum(1 for text, h0, h1, _, _ in rows if hm_ns.encode(text).ids != h0 or hm.encode(text).ids != h1)
        if bad:
            sys.exit(f"cut-down tokenizer.json differs from the full one on {bad} strings")
        os.makedirs(args.out, exist_ok=True)
        with open(mini_path, "rb") as src, lzma.open(os.path.join(args.out, "gemma3-mini-tokenizer.json.xz"), "wb",
                                                      preset=9 | lzma.PRESET_EXTREME) as dst:
            dst.write(src.read())

    with open(os.path.join(args.out, "json_golden.tsv"), "w", encoding="ascii", newline="\n") as f:
        f.write("# BPE tokenizer golden data, generated by tools/gen_tokenizer_json_golden.py. Do not edit.\n")
        f.write(f"# tokenizers {tokenizers.__version__} on gemma3-tokenizer.json (add_special_tokens=True); "
                f"llama-cpp-python {llama_cpp.__version__} on ggml-vocab-gemma-4.gguf (add_bos=True).\n")
        f.write("# fields (TAB): hex(utf-8 text)  hf(encode_special_tokens)  hf(default)  "
                "gemma4-llama(parse_special=0)  gemma4-llama(parse_special=1)\n")
        for text, h0, h1, l0, l1 in rows:
            f.write("\t".join([text.encode("utf-8").hex(), ids_str(h0), ids_str(h1), ids_str(l0), ids_str(l1)]) + "\n")
    print(f"{len(rows)} strings; mini tokenizer.json: {len(keep)} ids, {len(merges)} merges", file=sys.stderr)


if __name__ == "__main__":
    main()
