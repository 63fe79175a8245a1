#!/usr/bin/env python3
"""Tiny random-weight Gemma 3 / Gemma 4 / Gemma 4 assistant checkpoints + golden outputs,
produced by the REFERENCE libraries (transformers, mlx-lm). Nothing here re-implements a model.

  python3 tools/gen_gemma_fixtures.py [--out tests/data/hf] [--only NAME[,NAME...]]

Writes tests/data/hf/<name>/ (a checkpoint directory as a user would download it: config.json,
model.safetensors, tokenizer.json, tokenizer_config.json, generation_config.json) and
tests/data/hf/<name>/golden/ (manifest.json + raw little-endian arrays). Format and fixture list:
tests/data/hf/README.md. Deterministic: fixed seeds, single-threaded torch, sorted JSON.
"""
import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "hf")

VOCAB = 512
SEQ_LEN = 40          # golden logits sequences (> sliding window 8)
PROMPT_LEN = 30       # drafter golden: target prefill length P
GEN_TOKENS = 64       # greedy generations
DRAFT_K = 4           # drafter block
SHORT_PROMPT_LEN = 6  # drafter golden round with P < sliding window (references agree)

# ----------------------------------------------------------------------------- tokenizer

CORPUS = """The quick brown fox jumps over the lazy dog. A small model reads the tokens one at a time,
keeps a cache of keys and values, and predicts the next token. The sliding window layers only look at
the most recent tokens, while the full attention layers see the whole prompt. Hello world! This is a
test of the tiny tokenizer: it has byte fallback, so any text can be encoded, even numbers like 12345
or symbols. Speculative decoding drafts several tokens with a small assistant and verifies them with
the target model in one batch. When the draft is right, we accept it; when it is wrong, we roll back.
Quantized weights store groups of values with a scale and a bias. The end of the turn is marked."""

# ids that the Gemma configs / chat templates refer to
GEMMA4_SPECIAL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[multimodal]",
                  46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
                  50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>",
                  100: "<|channel>", 101: "<channel|>", 105: "<|turn>", 106: "<turn|>"}
GEMMA3_SPECIAL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[multimodal]",
                  105: "<start_of_turn>", 106: "<end_of_turn>"}
FIRST_BYTE_ID = 108   # <0x00>..<0xFF> at 108..363
CHARS = ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [str(d) for d in range(10)] + list(".,!?'-:;()\"")

GEMMA4_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}")
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def learn_merges(n_merges):
    """Plain deterministic BPE merge learning over CORPUS (SentencePiece-style words '▁word')."""
    text = CORPUS.replace("\n", " ")
    words = {}
    for w in text.split(" "):
        if w:
            key = tuple("▁" + w)
            words[key] = words.get(key, 0) + 1
    alphabet = set(CHARS)
    words = {k: v for k, v in words.items() if all(c in alphabet for c in k)}
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


def build_tokenizer(family):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    special = GEMMA4_SPECIAL if family == "gemma4" else GEMMA3_SPECIAL
    vocab = {}
    for i in range(FIRST_BYTE_ID):
        if i in special:
            vocab[special[i]] = i
        elif i == 107:
            vocab["\n"] = i
        else:
            vocab[f"<unused{i - 6}>"] = i
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = FIRST_BYTE_ID + b
    nid = FIRST_BYTE_ID + 256
    for c in CHARS:
        vocab[c] = nid
        nid += 1
    merges = learn_merges(VOCAB - nid)
    for a, b in merges:
        assert a + b not in vocab
        vocab[a + b] = nid
        nid += 1
    assert nid == VOCAB, nid
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 2)])
    added = []
    for i in range(FIRST_BYTE_ID):
        if i == 107:
            continue
        name = special.get(i, f"<unused{i - 6}>")
        added.append(AddedToken(name, special=True, normalized=False))
    tok.add_special_tokens(added)
    assert tok.get_vocab_size() == VOCAB
    for i, name in special.items():
        assert tok.token_to_id(name) == i, (name, i)
    return tok


def write_tokenizer(d, family):
    tok = build_tokenizer(family)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=True)
    special = GEMMA4_SPECIAL if family == "gemma4" else GEMMA3_SPECIAL
    added = {}
    for i in range(FIRST_BYTE_ID):
        if i == 107:
            continue
        added[str(i)] = {"content": special.get(i, f"<unused{i - 6}>"), "lstrip": False, "normalized": False,
                         "rstrip": False, "single_word": False, "special": True}
    cfg = {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added,
           "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
           "clean_up_tokenization_spaces": False, "model_max_length": 1000000000000000019884624838656,
           "padding_side": "left", "spaces_between_special_tokens": False,
           "tokenizer_class": "GemmaTokenizer",
           "chat_template": GEMMA4_TEMPLATE if family == "gemma4" else GEMMA3_TEMPLATE}
    if family == "gemma4":
        cfg["extra_special_tokens"] = {"sot_token": "<|turn>", "eot_token": "<turn|>"}
    dump_json(os.path.join(d, "tokenizer_config.json"), cfg)
    return tok


def golden_sequences(tok, family):
    """Two SEQ_LEN-token sequences: a tokenized chat-ish text and random ids (bos first)."""
    if family == "gemma4":
        text = ("<bos><|turn>user\nHello world! The quick brown fox jumps over the lazy dog, "
                "and the model keeps a cache.<turn|>\n<|turn>model\nThe sliding window")
    else:
        text = ("<bos><start_of_turn>user\nHello world! The quick brown fox jumps over the lazy dog, "
                "and the model keeps a cache.<end_of_turn>\n<start_of_turn>model\nThe sliding window")
    ids = tok.encode(text, add_special_tokens=False).ids
    assert len(ids) >= SEQ_LEN, len(ids)
    ids = ids[:SEQ_LEN]
    rng = np.random.default_rng(1234)
    rnd = [2] + [int(x) for x in rng.integers(4, VOCAB, SEQ_LEN - 1)]
    return text, [ids, rnd]


# ----------------------------------------------------------------------------- helpers

def dump_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


class Golden:
    """golden/manifest.json + one raw little-endian file per array."""

    def __init__(self, d, info):
        self.dir = os.path.join(d, "golden")
        os.makedirs(self.dir, exist_ok=True)
        self.m = dict(info)
        self.m["arrays"] = {}

    def add(self, name, arr, dtype):
        arr = np.ascontiguousarray(np.asarray(arr).astype({"f32": "<f4", "i32": "<i4"}[dtype]))
        fn = f"{name}.{dtype}"
        with open(os.path.join(self.dir, fn), "wb") as f:
            f.write(arr.tobytes())
        self.m["arrays"][name] = {"file": fn, "dtype": dtype, "shape": list(arr.shape)}

    def set(self, k, v):
        self.m[k] = v

    def save(self):
        dump_json(os.path.join(self.dir, "manifest.json"), self.m)


def top2_gap(logits):
    srt = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)
    return float((srt[..., -1] - srt[..., -2]).min())


def versions():
    import mlx.core as mx
    import mlx_lm
    import mlx_vlm
    import safetensors
    import tokenizers
    import torch
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__, "mlx": mx.__version__,
            "mlx_lm": mlx_lm.__version__, "mlx_vlm": mlx_vlm.__version__, "safetensors": safetensors.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__}


# ----------------------------------------------------------------------------- configs

ROPE4 = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}
S, F = "sliding_attention", "full_attention"


def gemma4_text_config(**kw):
    c = {"model_type": "gemma4_text", "vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB,
         "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
         "layer_types": [S, S, F, S, S, F], "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "global_head_dim": 32, "num_global_key_value_heads": None, "attention_k_eq_v": False,
         "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
         "enable_moe_block": False, "num_experts": None, "top_k_experts": None, "moe_intermediate_size": None,
         "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "rope_parameters": copy.deepcopy(ROPE4),
         "sliding_window": 8, "max_position_embeddings": 4096, "final_logit_softcapping": 30.0,
         "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
         "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "initializer_range": 0.02,
         "use_bidirectional_attention": None, "use_cache": True, "dtype": "bfloat16"}
    c.update(kw)
    return c


def fixture_configs():
    fx = {}
    # a. Gemma 3 text (Gemma3ForCausalLM), released-config style (rope_theta/rope_local_base_freq/rope_scaling)
    fx["gemma3_text"] = {
        "family": "gemma3", "kind": "target", "cls": "Gemma3ForCausalLM",
        "desc": "Gemma 3 text (1B-style Gemma3ForCausalLM, prefix model.): (1+w) RMSNorms incl. q/k norms, "
                "query_pre_attn_scalar 32 != head_dim 16 (scale 32^-0.5), 5 sliding (W=8) + 1 full layer, "
                "local rope 1e4 / global 1e6 with linear scaling factor 8, GQA 4q/2kv, no softcap, tied head",
        "config": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": VOCAB,
                   "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
                   "layer_types": [S, S, S, S, S, F], "sliding_window_pattern": 6,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                   "query_pre_attn_scalar": 32, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
                   "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                   "rope_scaling": {"rope_type": "linear", "factor": 8.0},
                   "sliding_window": 8, "max_position_embeddings": 4096, "final_logit_softcapping": None,
                   "attn_logit_softcapping": None, "attention_bias": False, "attention_dropout": 0.0,
                   "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": [1, 106],
                   "initializer_range": 0.02, "use_bidirectional_attention": False, "use_cache": True,
                   "torch_dtype": "bfloat16"},
    }
    # b. Gemma 4 dense, 31B-like: k_eq_v full layers with own head dim and kv heads; text-only export
    cb = gemma4_text_config(attention_k_eq_v=True, num_global_key_value_heads=1)
    cb["architectures"] = ["Gemma4ForCausalLM"]
    fx["gemma4_dense"] = {
        "family": "gemma4", "kind": "target", "cls": "Gemma4ForCausalLM", "config": cb,
        "desc": "Gemma 4 dense 31B-style, text-only export (Gemma4ForCausalLM, prefix model.): layer_types S,S,F,S,S,F "
                "(W=8), sliding head_dim 16 / 2 kv heads, full layers global_head_dim 32 / 1 kv head with "
                "attention_k_eq_v (no v_proj; V = raw k_proj output, v_norm without weight), proportional RoPE "
                "(25% of 32 dims rotated, theta 1e6), attention scale 1.0, layer_scalar, final softcap 30"}
    # c. Gemma 4 E2B-like: PLE, KV sharing, double-wide MLP; multimodal wrapper with a tiny vision tower
    tc = gemma4_text_config(num_hidden_layers=8, layer_types=[S, S, S, F, S, S, S, F], num_key_value_heads=1,
                            intermediate_size=64, hidden_size_per_layer_input=16, num_kv_shared_layers=3,
                            use_double_wide_mlp=True)
    cc = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": tc,
          "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 64,
                            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                            "head_dim": 16, "patch_size": 4, "pooling_kernel_size": 2,
                            "position_embedding_size": 64, "hidden_activation": "gelu_pytorch_tanh",
                            "rms_norm_eps": 1e-6, "dtype": "bfloat16"},
          "audio_config": None, "boi_token_id": 6, "eoi_token_id": 7, "image_token_id": 8, "video_token_id": 9,
          "boa_token_id": 10, "eoa_token_index": 11, "audio_token_id": 12, "initializer_range": 0.02,
          "tie_word_embeddings": True, "dtype": "bfloat16",
          # mlx-lm's gemma4.ModelArgs copies a TOP-LEVEL vocab_size (default 262144) into text_config
          "vocab_size": VOCAB}
    fx["gemma4_ple"] = {
        "family": "gemma4", "kind": "target", "cls": "Gemma4ForConditionalGeneration", "config": cc,
        "desc": "Gemma 4 E2B-style, multimodal layout (Gemma4ForConditionalGeneration, model_type gemma4 with "
                "text_config; text tensors under model.language_model., plus a tiny model.vision_tower / "
                "model.embed_vision to ignore): 8 layers S,S,S,F x2, PLE 16/layer (table [512,128]), "
                "num_kv_shared_layers 3 (layers 5,6 reuse layer 4's sliding KV, layer 7 reuses layer 3's full KV; "
                "shared layers have no k/v tensors), double-wide MLP (64 -> 128) on shared layers, 1 kv head, "
                "no k_eq_v, softcap 30"}
    # d. Gemma 4 MoE, 26B-like (k_eq_v too), text-only export
    cd = gemma4_text_config(num_hidden_layers=4, layer_types=[S, S, S, F], intermediate_size=64,
                            attention_k_eq_v=True, num_global_key_value_heads=1, enable_moe_block=True,
                            num_experts=4, top_k_experts=2, moe_intermediate_size=64)
    cd["architectures"] = ["Gemma4ForCausalLM"]
    fx["gemma4_moe"] = {
        "family": "gemma4", "kind": "target", "cls": "Gemma4ForCausalLM", "config": cd,
        "desc": "Gemma 4 MoE 26B-A4B-style, text-only export: 4 layers S,S,S,F, dense MLP 64 in parallel with "
                "4 experts (moe_intermediate 64) top-2, router (norm no-scale * scale * H^-0.5, softmax, top-k "
                "renormalised, per_expert_scale), experts.gate_up_proj [E,2I,H] / experts.down_proj [E,H,I], "
                "extra norms pre_feedforward_layernorm_2 / post_feedforward_layernorm_1/_2, k_eq_v full layer"}
    # e. assistants
    ta = gemma4_text_config(hidden_size=32, intermediate_size=64, num_hidden_layers=4, layer_types=[S, S, S, F],
                            attention_k_eq_v=True, num_global_key_value_heads=1, num_kv_shared_layers=4,
                            vocab_size_per_layer_input=0)
    fx["gemma4_dense_assistant"] = {
        "family": "gemma4", "kind": "assistant", "target": "gemma4_dense", "cls": "Gemma4AssistantForCausalLM",
        "desc": "Gemma 4 assistant (MTP drafter) for gemma4_dense, 31B-assistant-style: hidden 32, 4 KV-shared "
                "layers S,S,S,F with the target's head geometry (k_eq_v, 16/32 head dims, 2/1 kv heads), "
                "pre_projection [32,128], post_projection [64,32], dense tied head (its own embed_tokens [512,32])",
        "config": {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
                   "backbone_hidden_size": 64, "use_ordered_embeddings": False, "num_centroids": 2048,
                   "centroid_intermediate_top_k": 32, "tie_word_embeddings": True, "text_config": ta,
                   "dtype": "bfloat16"}}
    tb = gemma4_text_config(hidden_size=32, intermediate_size=64, num_hidden_layers=4, layer_types=[S, S, S, F],
                            num_key_value_heads=1, num_kv_shared_layers=4, vocab_size_per_layer_input=0)
    fx["gemma4_ple_assistant"] = {
        "family": "gemma4", "kind": "assistant", "target": "gemma4_ple", "cls": "Gemma4AssistantForCausalLM",
        "desc": "Gemma 4 assistant for gemma4_ple, E2B-assistant-style: centroid head (use_ordered_embeddings, "
                "num_centroids 16, centroid_intermediate_top_k 4 -> 128 candidate ids of 512; "
                "masked_embedding.centroids.weight [16,32], masked_embedding.token_ordering int64 [512] "
                "permutation), 1 kv head, hidden 32, 4 KV-shared layers S,S,S,F",
        "config": {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
                   "backbone_hidden_size": 64, "use_ordered_embeddings": True, "num_centroids": 16,
                   "centroid_intermediate_top_k": 4, "tie_word_embeddings": True, "text_config": tb,
                   "dtype": "bfloat16"}}
    return fx


# MLX quantized copies: (name, source fixture, bits, group, predicate kind, what it exercises)
MLX_FIXTURES = [
    ("gemma4_dense_mlx_q4_mlp8", "gemma4_dense", 4, 64, "mlp8",
     "4-bit g64 base, every mlp.{gate,up,down}_proj overridden to 8-bit g64 (QAT layout), text prefix model."),
    ("gemma4_dense_mlx_q3", "gemma4_dense", 3, 64, None, "3-bit g64 everywhere"),
    ("gemma4_dense_mlx_q5_false", "gemma4_dense", 5, 64, "false",
     "5-bit g64; layer 0 o_proj kept bf16 with an explicit `false` override; layer 1 q_proj 8-bit g32 override"),
    ("gemma4_dense_mlx_q6", "gemma4_dense", 6, 64, None, "6-bit g64 everywhere"),
    ("gemma4_ple_mlx_q4", "gemma4_ple", 4, 64, None,
     "4-bit g64 of the multimodal PLE model: prefix language_model.model., quantized PLE table"),
    ("gemma4_moe_mlx_q4", "gemma4_moe", 4, 64, None,
     "4-bit g64 MoE: switch_glu experts quantized [E,...], router.proj 8-bit (mlx-lm gemma4 predicate)"),
]


# Added later; generated AFTER everything above from their own seeds, so the fixtures above are unchanged.
def extra_fixture_configs():
    fx = {}
    c4 = gemma4_text_config(hidden_size=96, num_hidden_layers=4, layer_types=[S, S, S, F], attention_k_eq_v=True,
                            num_global_key_value_heads=1)
    c4["architectures"] = ["Gemma4ForCausalLM"]
    fx["gemma4_dense_h96"] = {
        "family": "gemma4", "kind": "target", "cls": "Gemma4ForCausalLM", "config": c4, "bf16_embed_scale": True,
        "desc": "Gemma 4 dense (31B-style, k_eq_v full layer) with a NON-SQUARE hidden size 96: embedding scale "
                "bf16(sqrt(96)) = 9.8125 vs float32 sqrt 9.79796 (+0.15%); 4 layers S,S,S,F; q/o projections "
                "96 <-> 64 (4 heads x 16)"}
    c3 = copy.deepcopy(fixture_configs()["gemma3_text"]["config"])
    c3.update(hidden_size=96, num_hidden_layers=4, layer_types=[S, S, S, F], sliding_window_pattern=4)
    fx["gemma3_text_h96"] = {
        "family": "gemma3", "kind": "target", "cls": "Gemma3ForCausalLM", "config": c3, "bf16_embed_scale": True,
        "desc": "Gemma 3 text with a NON-SQUARE hidden size 96 (embedding scale bf16(sqrt(96)) = 9.8125); "
                "4 layers S,S,S,F, otherwise as gemma3_text"}
    return fx


# (name, source, bits, group, predicate kind, description, bf16 embed scale in the float32 reference)
EXTRA_MLX_FIXTURES = [
    ("gemma4_dense_h96_mlx_q4", "gemma4_dense_h96", 4, 32, None,
     "4-bit g32 of gemma4_dense_h96 (non-square hidden 96; group 32 because 96 % 64 != 0)", True),
    ("gemma3_text_mlx_q4", "gemma3_text", 4, 64, None,
     "4-bit g64 of gemma3_text (mlx-lm gemma3_text: quantized embedding / tied head, (1+w) norms)", False),
]
SHARDED_FIXTURES = [("gemma4_dense_sharded", "gemma4_dense", "Gemma4ForCausalLM", 200_000)]


def build_sharded(out, name, src, cls_name, shard_bytes):
    """save_pretrained(max_shard_size) of the bf16 source; goldens copied from the source (verified)."""
    import torch
    import transformers
    from safetensors.numpy import load_file
    d = os.path.join(out, name)
    src_dir = os.path.join(out, src)
    if os.path.exists(d):
        shutil.rmtree(d)
    model = getattr(transformers, cls_name).from_pretrained(src_dir, dtype=torch.bfloat16)
    model.save_pretrained(d, max_shard_size=shard_bytes)
    del model
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(src_dir, f), os.path.join(d, f))
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3, shards
    assert not os.path.exists(os.path.join(d, "model.safetensors"))
    # same tensors, same bytes
    import safetensors
    ref = {}
    with safetensors.safe_open(os.path.join(src_dir, "model.safetensors"), "pt") as f:
        for k in f.keys():
            ref[k] = f.get_tensor(k).view(torch.int16).numpy()
    got = {}
    for sh in shards:
        with safetensors.safe_open(os.path.join(d, sh), "pt") as f:
            for k in f.keys():
                got[k] = f.get_tensor(k).view(torch.int16).numpy()
    assert sorted(ref) == sorted(got), set(ref) ^ set(got)
    assert all(np.array_equal(ref[k], got[k]) for k in ref)
    # goldens: the source's arrays, checked against transformers on the sharded copy
    sm = json.load(open(os.path.join(src_dir, "golden", "manifest.json")))
    gd = os.path.join(d, "golden")
    os.makedirs(gd)
    for a in sm["arrays"].values():
        shutil.copy(os.path.join(src_dir, "golden", a["file"]), os.path.join(gd, a["file"]))
    toks = np.fromfile(os.path.join(gd, "tokens.i32"), "<i4").reshape(sm["arrays"]["tokens"]["shape"])
    want = np.fromfile(os.path.join(gd, "logits.f32"), "<f4").reshape(sm["arrays"]["logits"]["shape"])
    m = hf_load(d, cls_name)
    with torch.no_grad():
        lg = m(torch.tensor(toks)).logits.float().numpy()
    cfg = json.load(open(os.path.join(d, "config.json")))
    sm.update({"fixture": name, "source": src, "description": (
        f"{src} re-saved by transformers save_pretrained(max_shard_size={shard_bytes}): {len(shards)} shards "
        f"{shards[0]} .. {shards[-1]} + model.safetensors.index.json, config.json as transformers writes it; "
        "tensors byte-identical to the source; goldens copied from the source"),
        "n_shards": len(shards), "sharded_logits_equal_source_golden": bool(np.array_equal(lg, want)),
        "sharded_vs_source_golden_max_abs": float(np.abs(lg - want).max()),
        "config_keys": sorted(cfg),
        "weights": f"bf16 in {len(shards)} shards (model.safetensors.index.json), upcast to float32 by "
                   "from_pretrained(dtype=float32); config.json in transformers 5 style (per_layer_config)"})
    dump_json(os.path.join(gd, "manifest.json"), sm)
    return len(shards)


# ----------------------------------------------------------------------------- weights

def random_weights(state_dict, family, seed, vocab_scale=0.1):
    """Random values for every tensor of an HF state dict (names sorted -> deterministic)."""
    import torch
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(state_dict):
        t = state_dict[name]
        shape = tuple(t.shape)
        n = int(np.prod(shape)) if shape else 1
        if t.dtype in (torch.int64, torch.int32):
            assert name.endswith("token_ordering"), name
            out[name] = torch.from_numpy(rng.permutation(n).astype(np.int64))
            continue
        if name.endswith("model.norm.weight") or name.endswith("language_model.norm.weight"):
            # final norm: larger so that the tied head gives logits of a few units (softcap matters)
            v = rng.standard_normal(n) * 0.5 + (4.0 if family == "gemma3" else 5.0)
        elif name.rsplit(".", 2)[-2].startswith("post_") and name.endswith("norm.weight"):
            # post-block norms: gain ~2 so the blocks, not the token embedding, dominate the residual
            v = rng.standard_normal(n) * 0.2 + (1.0 if family == "gemma3" else 2.0)
        elif name.endswith("norm.weight") or (len(shape) == 1 and "norm" in name):
            v = rng.standard_normal(n) * 0.1 + (0.0 if family == "gemma3" else 1.0)
        elif name.endswith("layer_scalar"):
            v = 1.0 + 0.1 * rng.standard_normal(n)
        elif name.endswith(("router.scale", "router.per_expert_scale")):
            v = 1.0 + 0.1 * rng.standard_normal(n)
        elif name.endswith("embed_tokens.weight"):
            v = rng.standard_normal(n) * vocab_scale
        elif name.endswith("embed_tokens_per_layer.weight"):
            v = rng.standard_normal(n) * 0.5
        elif len(shape) >= 2:
            v = rng.standard_normal(n) / math.sqrt(shape[-1])
        elif name.endswith("bias"):
            v = rng.standard_normal(n) * 0.02
        else:
            v = rng.standard_normal(n) * 0.1 + 1.0
        out[name] = torch.from_numpy(v.reshape(shape).astype(np.float32)).to(torch.bfloat16)
    return out


def hf_build_checkpoint(d, fx, seed, torch_seed=0):
    """Instantiate the HF class from our config.json, fill random bf16 weights, write model.safetensors."""
    import torch
    import transformers
    from safetensors.torch import save_file
    dump_json(os.path.join(d, "config.json"), fx["config"])
    cfg = transformers.AutoConfig.from_pretrained(d)
    torch.manual_seed(torch_seed)
    cls = getattr(transformers, fx["cls"])
    model = cls(cfg)
    sd = model.state_dict()
    tied = set()
    if cfg.tie_word_embeddings if hasattr(cfg, "tie_word_embeddings") else True:
        tied = {k for k in sd if k == "lm_head.weight"}
    sd = {k: v for k, v in sd.items() if k not in tied}
    w = random_weights(sd, fx["family"], seed)
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    return sorted(w)


def hf_load(d, cls_name):
    import torch
    import transformers
    cls = getattr(transformers, cls_name)
    model, info = cls.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "mismatched_keys" or (k == "mismatched_keys" and v)}
    if bad:
        raise RuntimeError(f"{d}: loading info {bad}")
    model.eval()
    return model


def generation_config(d, family, extra=None):
    g = {"bos_token_id": 2, "pad_token_id": 0, "do_sample": True, "top_k": 64, "top_p": 0.95,
         "temperature": 1.0, "eos_token_id": [1, 106, 50] if family == "gemma4" else [1, 106]}
    if extra:
        g.update(extra)
    dump_json(os.path.join(d, "generation_config.json"), g)


# ----------------------------------------------------------------------------- goldens (transformers)

def hf_greedy(model, prompt, n):
    import torch
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=0, top_k=None, top_p=None, temperature=None)
    gen = out[0, len(prompt):].tolist()
    assert len(gen) == n, len(gen)
    return gen


def bf16_round(x):
    import torch
    return float(torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float())


def hf_bf16_embed_scale(model, fx, d, ids, g):
    """Non-square hidden: make the float32 reference use the embedding scale a user of the bf16
    checkpoint gets. HF's ScaledWordEmbedding multiplies by embed_scale.to(weight.dtype): bf16(sqrt(H))
    when the model is loaded in bf16, but the exact float32 sqrt(H) after from_pretrained(dtype=float32).
    We set the float32 model's buffer to bf16(sqrt(H)) (checked against a native bf16 load), and record
    how far the goldens would move with the exact float32 scale."""
    import torch
    hidden = fx["config"]["hidden_size"]
    exact = np.float32(math.sqrt(hidden))
    rounded = bf16_round(math.sqrt(hidden))
    emb = model.get_input_embeddings()
    assert float(emb.embed_scale) == float(exact), (float(emb.embed_scale), float(exact))
    with torch.no_grad():
        lg_exact = model(ids).logits.float().numpy()
    native = getattr(__import__("transformers"), fx["cls"]).from_pretrained(d, dtype=torch.bfloat16).eval()
    nemb = native.get_input_embeddings()
    native_scale = float(nemb.embed_scale.to(nemb.weight.dtype).float())
    assert native_scale == rounded, (native_scale, rounded)
    with torch.no_grad():
        lg_native = native(ids).logits.float().numpy()
    del native
    with torch.no_grad():
        emb.embed_scale.fill_(rounded)
    with torch.no_grad():
        lg = model(ids).logits.float().numpy()
    rel = np.sqrt(((lg_exact - lg) ** 2).sum(-1) / (lg ** 2).sum(-1))
    g.set("embed_scale", f"bf16(sqrt({hidden})) = {rounded} (sqrt = {float(exact):.9g} in float32). HF multiplies by "
                         "embed_scale.to(weight.dtype): a bf16 load uses the bf16-rounded value, a float32 load the "
                         "exact one; these goldens are float32 with the embedding scale buffer set to the bf16 value, "
                         "i.e. what a user loading this bf16 checkpoint gets")
    g.set("embed_scale_value", rounded)
    g.set("embed_scale_f32_exact", float(exact))
    g.set("hf_native_bf16_embed_scale", native_scale)
    g.set("exact_scale_vs_golden_max_rel_l2", float(rel.max()))
    g.set("exact_scale_vs_golden_argmax_agree", int((lg_exact.argmax(-1) == lg.argmax(-1)).sum()))
    g.set("native_bf16_vs_golden_max_abs_logit_diff", float(np.abs(lg_native - lg).max()))


def target_goldens(d, fx, name, tok, text, seqs, ver):
    import torch
    model = hf_load(d, fx["cls"])
    g = Golden(d, {"fixture": name, "reference": f"transformers {ver['transformers']} {fx['cls']}",
                   "versions": ver, "compute_dtype": "float32",
                   "weights": "bf16 in model.safetensors, upcast to float32 by from_pretrained(dtype=float32)",
                   "embed_scale": "sqrt(hidden_size)=8.0 exactly (hidden 64 is a perfect square; HF casts the "
                                  "scale to the weight dtype, float32 here)",
                   "text_seq0": text})
    ids = torch.tensor(seqs)
    if fx.get("bf16_embed_scale"):
        hf_bf16_embed_scale(model, fx, d, ids, g)
    with torch.no_grad():
        logits = model(ids).logits.float().numpy()
    g.add("tokens", np.array(seqs), "i32")
    g.add("logits", logits, "f32")
    g.set("logits_min_top2_gap", top2_gap(logits))
    g.set("description", fx["desc"])
    prompt = seqs[0][:PROMPT_LEN]
    gen = hf_greedy(model, prompt, GEN_TOKENS)
    g.add("greedy_prompt", np.array(prompt), "i32")
    g.add("greedy_tokens", np.array(gen), "i32")
    # full-forward cross-check of the cached generation
    with torch.no_grad():
        full_logits = model(torch.tensor([prompt + gen])).logits[0].float().numpy()
    full = full_logits.argmax(-1).tolist()
    g.set("greedy_matches_full_forward_argmax", full[PROMPT_LEN - 1:-1] == gen)
    g.set("greedy_min_top2_gap", top2_gap(full_logits[PROMPT_LEN - 1:-1]))
    g.set("notes", "logits[s][t] = next-token logits after tokens[s][0..t] (final softcap applied where configured)."
                   " greedy_tokens: model.generate(greedy_prompt, do_sample=False, eos_token_id=None) -> 64 new"
                   " tokens, no EOS stopping.")
    g.save()
    return model, logits


def mlxvlm_draft(asst_dir, target_dir, kv, P, bonus, hprev):
    """mlx-vlm's Gemma4AssistantDraftModel.draft_block on the transformers target state (float32)."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_vlm.speculative.drafters import load_drafter
    dr, kind = load_drafter(asst_dir)
    assert kind == "mtp", kind
    mlx_float32(dr)
    tgt, _ = load(target_dir)       # only its (scaled) embedding table is used by bind()
    mlx_float32(tgt)
    dr.bind(tgt)
    dr.set_shared_kv({t: (mx.array(k), mx.array(v)) for t, (k, v) in kv.items()}, P, position=P)
    logits = []

    def sampler(lg):
        lg = lg.reshape(1, -1, lg.shape[-1])[:, -1:]
        logits.append(np.array(lg.astype(mx.float32))[0, 0])
        return mx.argmax(lg, -1)
    toks = dr.draft_block(bonus, mx.array(hprev)[None, None], None, DRAFT_K + 1, sampler)
    return [int(x) for x in np.array(toks)[0]], np.stack(logits), float(dr._input_embed_scale)


def assistant_goldens(d, fx, name, target, target_name, seqs, ver, out_root):
    import torch
    from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator
    asst = hf_load(d, fx["cls"])
    asst.generation_config.num_assistant_tokens = DRAFT_K
    asst.generation_config.num_assistant_tokens_schedule = "constant"
    g = Golden(d, {"fixture": name, "target": target_name, "description": fx["desc"],
                   "reference": {
                       "hf": f"transformers {ver['transformers']} Gemma4AssistantForCausalLM driven by "
                             "generation.candidate_generator.SinglePositionMultiTokenCandidateGenerator.get_candidates",
                       "mlxvlm": f"mlx-vlm {ver['mlx_vlm']} speculative.drafters.gemma4_assistant "
                                 "Gemma4AssistantDraftModel.draft_block (greedy sampler), fed the SAME transformers "
                                 "target K/V, hprev and bonus token; mlx-lm target only for the embedding table"},
                   "versions": ver, "compute_dtype": "float32", "draft_k": DRAFT_K})
    rounds = []
    prompts = [seqs[0][:PROMPT_LEN], seqs[1][:PROMPT_LEN], seqs[0][:SHORT_PROMPT_LEN]]
    for r, prompt in enumerate(prompts):
        P = len(prompt)
        with torch.no_grad():
            out = target(torch.tensor([prompt]), output_hidden_states=True, return_shared_kv_states=True,
                         use_cache=True)
        bonus = int(out.logits[0, -1].argmax())
        hprev = out.hidden_states[-1][0, -1].float().numpy()
        kv = {t: (k.float().numpy(), v.float().numpy()) for t, (k, v) in out.shared_kv_states.items()}
        input_ids = torch.tensor([prompt + [bonus]])
        gen_cfg = copy.deepcopy(target.generation_config)
        gen_cfg.max_length = 10 ** 6
        cg = SinglePositionMultiTokenCandidateGenerator(asst, target.get_input_embeddings(), gen_cfg)
        hn = []
        orig_fwd = asst.forward

        def fwd(*a, **k):
            res = orig_fwd(*a, **k)
            hn.append(res.last_hidden_state[0, -1].float().numpy())
            return res
        asst.forward = fwd
        try:
            cand, cand_logits = cg.get_candidates(input_ids, model_kwargs={"attention_mask": torch.ones_like(input_ids)},
                                                  model_outputs=out, is_first_iteration=False, n_last_matches=0)
        finally:
            asst.forward = orig_fwd
        drafts = cand[0, P + 1:].tolist()
        assert len(drafts) == DRAFT_K
        hf_logits = cand_logits[0].float().numpy()
        v_drafts, v_logits, v_scale = mlxvlm_draft(d, os.path.join(out_root, target_name), kv, P, bonus, hprev)
        g.add(f"r{r}_prompt", np.array(prompt), "i32")
        g.add(f"r{r}_hprev", hprev, "f32")
        for t in sorted(kv):
            g.add(f"r{r}_kv_{t}_k", kv[t][0][0], "f32")
            g.add(f"r{r}_kv_{t}_v", kv[t][1][0], "f32")
        g.add(f"r{r}_hf_draft_tokens", np.array(drafts), "i32")
        g.add(f"r{r}_hf_draft_logits", hf_logits, "f32")
        g.add(f"r{r}_hf_draft_hnext", np.stack(hn), "f32")
        g.add(f"r{r}_mlxvlm_draft_tokens", np.array(v_drafts), "i32")
        g.add(f"r{r}_mlxvlm_draft_logits", v_logits, "f32")
        rounds.append({"hf_draft_logits_min_top2_gap": top2_gap(hf_logits),
                       "mlxvlm_draft_logits_min_top2_gap": top2_gap(v_logits), "round": r, "P": P, "bonus_token": bonus, "hf_drafts": drafts, "mlxvlm_drafts": v_drafts,
                       "hf_vs_mlxvlm_max_abs_logit_diff": float(np.abs(hf_logits - v_logits).max()),
                       "mlxvlm_embed_scale": v_scale})
    g.set("rounds", rounds)
    # assisted generation == plain greedy (transformers)
    prompt = seqs[0][:PROMPT_LEN]
    with torch.no_grad():
        outa = target.generate(torch.tensor([prompt]), assistant_model=asst, max_new_tokens=GEN_TOKENS,
                               do_sample=False, eos_token_id=None, pad_token_id=0, top_k=None, top_p=None,
                               temperature=None)
    assisted = outa[0, PROMPT_LEN:].tolist()
    plain = hf_greedy(target, prompt, GEN_TOKENS)
    g.add("assisted_prompt", np.array(prompt), "i32")
    g.add("assisted_tokens", np.array(assisted), "i32")
    g.add("plain_greedy_tokens", np.array(plain), "i32")
    g.set("assisted_equals_plain", assisted == plain)
    g.set("notes", (
        "Round r: target (transformers, float32) prefill of r{r}_prompt (positions 0..P-1); bonus = argmax of the last "
        "target logits (the token at position P); r{r}_hprev = target final-normed hidden at P-1 "
        "(hidden_states[-1]). Draft step j (0-based) feeds (token, h) = (bonus, hprev) for j=0, else "
        "(draft_tokens[j-1], hnext[j-1]); q is rotated at position P for every step; keys = target shared K/V "
        "(last non-shared layer of each type), r{r}_kv_<type>_k/v [kv_heads, P, head_dim] exactly as fed to both "
        "drafters (k after k_norm+RoPE, v after v_norm). *_draft_logits[j] = drafter logits (no softcap; centroid "
        "head when use_ordered_embeddings, non-candidates = min(candidates)-1); *_draft_tokens[j] = argmax. "
        "hf_draft_hnext[j] = post_projection output (next step's h). The two references DIFFER on sliding "
        "layers once P >= sliding_window: transformers lets the draft query see keys k >= P-W-1 (W+1 keys, "
        "masking_utils sliding_window_bidirectional_overlay uses |q-kv| <= W, then flips), mlx-vlm keys k >= P-W+1 "
        "(W-1 keys, masks.py dist < W). Rounds 0/1 (P=30 > W=8) therefore disagree; round 2 (P=6 < W) agrees "
        "to ~1e-5. assisted_tokens: target.generate(assistant_model=this, num_assistant_tokens=4 constant, greedy, "
        "no EOS stop); plain_greedy_tokens: the same without assistant."))
    g.save()


# ----------------------------------------------------------------------------- MLX

def mlx_predicate(kind, source_cfg):
    if kind is None:
        return None
    if kind == "mlp8":
        def p(path, module):
            if path.endswith(("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")):
                return {"group_size": 64, "bits": 8}
            if path.endswith("router.proj"):
                return {"group_size": 64, "bits": 8}
            return True
        return p
    if kind == "false":
        def p(path, module):
            if path.endswith("layers.0.self_attn.o_proj"):
                return False
            if path.endswith("layers.1.self_attn.q_proj"):
                return {"group_size": 32, "bits": 8}
            return True
        return p
    raise ValueError(kind)


def mlx_float32(model):
    import mlx.core as mx
    from mlx.utils import tree_map

    def up(p):
        return p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p
    model.update(tree_map(up, model.parameters()))
    mx.eval(model.parameters())


def mlx_bf16_embed_scale(model):
    """mlx-lm gemma4_text multiplies by the python float sqrt(H): with bf16 activations (a user's run) that is
    bf16(sqrt(H)); after the float32 upcast it would be exact. Use the bf16 value (gemma3_text rounds itself)."""
    inner = getattr(model, "model", None)
    if inner is not None and isinstance(getattr(inner, "embed_scale", None), float):
        inner.embed_scale = bf16_round(inner.embed_scale)
        return inner.embed_scale
    return None


def mlx_logits(path, seqs, f32=True, bf16_scale=False):
    import mlx.core as mx
    from mlx_lm import load
    model, _ = load(path)
    if f32:
        mlx_float32(model)
        if bf16_scale:
            mlx_bf16_embed_scale(model)
    lg = model(mx.array(seqs))
    mx.eval(lg)
    return model, np.array(lg.astype(mx.float32))


def mlx_greedy(model, prompt, n):
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    toks = []
    for (t, _), _i in zip(generate_step(mx.array(prompt), model, max_tokens=n, sampler=lambda x: mx.argmax(x, -1)),
                          range(n)):
        toks.append(int(t))
    return toks


def build_mlx(out, name, src, bits, gs, kind, desc, seqs, ver, bf16_scale=False):
    import mlx.core as mx
    from mlx_lm import convert
    d = os.path.join(out, name)
    src_dir = os.path.join(out, src)
    src_cfg = json.load(open(os.path.join(src_dir, "config.json")))
    tmp = tempfile.mkdtemp(prefix="mlxconv_")
    try:
        dst = os.path.join(tmp, "m")
        convert(src_dir, dst, quantize=True, q_group_size=gs, q_bits=bits, q_mode="affine",
                quant_predicate=mlx_predicate(kind, src_cfg))
        if os.path.exists(d):
            shutil.rmtree(d)
        shutil.copytree(dst, d)
    finally:
        shutil.rmtree(tmp)
    cfg_path = os.path.join(d, "config.json")
    cfg = json.load(open(cfg_path))
    if kind == "false":
        # mlx-lm's quantize_model records dict overrides only; a `false` entry (module left float) is what
        # other converters write and what mlx-lm load_model honours (class_predicate returns it verbatim).
        prefix = "language_model.model." if "text_config" in cfg else "model."
        cfg["quantization"][prefix + "layers.0.self_attn.o_proj"] = False
        cfg["quantization_config"] = cfg["quantization"]
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=4, sort_keys=True)
    model, lg = mlx_logits(d, seqs, f32=True, bf16_scale=bf16_scale)
    _, lg_native = mlx_logits(d, seqs, f32=False)
    g = Golden(d, {"fixture": name, "source": src, "reference": f"mlx-lm {ver['mlx_lm']} (mlx {ver['mlx']})",
                   "versions": ver, "quantization": cfg["quantization"], "description": desc,
                   "compute_dtype": "float32 (every floating parameter incl. scales/biases upcast from bf16 after "
                                    "mlx_lm.load; quantized matmuls via mx.quantized_matmul on CPU)"})
    if bf16_scale:
        hidden = cfg.get("hidden_size") or cfg["text_config"]["hidden_size"]
        _, lg_exact = mlx_logits(d, seqs, f32=True)
        rel = np.sqrt(((lg_exact - lg) ** 2).sum(-1) / (lg ** 2).sum(-1))
        g.set("embed_scale", f"bf16(sqrt({hidden})) = {bf16_round(math.sqrt(hidden))}: mlx-lm multiplies the "
                             "embedding by the python float sqrt(H), which mlx casts to the activation dtype (bf16 in "
                             "a native run); the float32-upcast reference sets it to the bf16 value explicitly "
                             "(gemma3_text rounds to bf16 itself)")
        g.set("embed_scale_value", bf16_round(math.sqrt(hidden)))
        g.set("exact_scale_vs_golden_max_rel_l2", float(rel.max()))
    g.add("tokens", np.array(seqs), "i32")
    g.add("logits", lg, "f32")
    g.set("logits_min_top2_gap", top2_gap(lg))
    prompt = seqs[0][:PROMPT_LEN]
    g.add("greedy_prompt", np.array(prompt), "i32")
    gen = mlx_greedy(model, prompt, GEN_TOKENS)
    g.add("greedy_tokens", np.array(gen), "i32")
    full_logits = np.array(model(mx.array([prompt + gen])).astype(mx.float32))[0]
    g.set("greedy_matches_full_forward_argmax", full_logits.argmax(-1).tolist()[PROMPT_LEN - 1:-1] == gen)
    g.set("greedy_min_top2_gap", top2_gap(full_logits[PROMPT_LEN - 1:-1]))
    g.set("native_bf16_vs_f32_max_abs_logit_diff", float(np.abs(lg_native - lg).max()))
    g.set("notes", "logits from model(tokens) (all positions, batch of 2); greedy_tokens from "
                   "mlx_lm.generate.generate_step(sampler=argmax, max_tokens=64) on the float32-upcast model.")
    g.save()
    return lg


def mlx_crosscheck(out, name, seqs, hf_logits):
    """mlx-lm float32 logits on the bf16 HF checkpoint vs transformers (not stored; reported)."""
    try:
        _, lg = mlx_logits(os.path.join(out, name), seqs, f32=True)
        return float(np.abs(lg - hf_logits).max())
    except Exception as e:  # report, do not hide
        return f"mlx-lm failed: {type(e).__name__}: {e}"


# ----------------------------------------------------------------------------- main

def tree_hash(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(os.path.relpath(p, d).encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    transformers.logging.set_verbosity_error()
    ver = versions()
    out = args.out
    os.makedirs(out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    fxs = fixture_configs()
    report = {}
    targets = {}
    for i, (name, fx) in enumerate(fxs.items()):
        if fx["kind"] != "target" or (only and name not in only and not any(
                f.get("target") == name for n, f in fxs.items() if n in only) and not any(
                m[1] == name for m in MLX_FIXTURES if m[0] in only)):
            continue
        d = os.path.join(out, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        print(f"[{name}]", flush=True)
        hf_build_checkpoint(d, fx, seed=1000 + i)
        tok = write_tokenizer(d, fx["family"])
        generation_config(d, fx["family"])
        text, seqs = golden_sequences(tok, fx["family"])
        model, logits = target_goldens(d, fx, name, tok, text, seqs, ver)
        targets[name] = (model, seqs)
        if fx["family"] == "gemma4":
            report[name] = {"mlx_lm_f32_vs_hf_max_abs": mlx_crosscheck(out, name, seqs, logits)}
    for i, (name, fx) in enumerate(fxs.items()):
        if fx["kind"] != "assistant" or (only and name not in only):
            continue
        d = os.path.join(out, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        print(f"[{name}]", flush=True)
        hf_build_checkpoint(d, fx, seed=2000 + i)
        write_tokenizer(d, fx["family"])
        generation_config(d, fx["family"], {"num_assistant_tokens": DRAFT_K,
                                            "num_assistant_tokens_schedule": "constant"})
        model, seqs = targets[fx["target"]]
        assistant_goldens(d, fx, name, model, fx["target"], seqs, ver, out)
    for name, src, bits, gs, kind, desc in MLX_FIXTURES:
        if only and name not in only:
            continue
        print(f"[{name}]", flush=True)
        _, seqs = targets[src]
        build_mlx(out, name, src, bits, gs, kind, desc, seqs, ver)
    # later additions, after everything above (own seeds; nothing above depends on them)
    for i, (name, fx) in enumerate(extra_fixture_configs().items()):
        if only and name not in only and not any(m[1] == name for m in EXTRA_MLX_FIXTURES if m[0] in only):
            continue
        d = os.path.join(out, name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        print(f"[{name}]", flush=True)
        hf_build_checkpoint(d, fx, seed=3000 + i)
        tok = write_tokenizer(d, fx["family"])
        generation_config(d, fx["family"])
        text, seqs = golden_sequences(tok, fx["family"])
        model, logits = target_goldens(d, fx, name, tok, text, seqs, ver)
        if fx["family"] == "gemma4":
            report[name] = {"mlx_lm_f32_vs_hf_max_abs (exact sqrt in mlx-lm)": mlx_crosscheck(out, name, seqs, logits)}
    for name, src, bits, gs, kind, desc, bf16_scale in EXTRA_MLX_FIXTURES:
        if only and name not in only:
            continue
        print(f"[{name}]", flush=True)
        family = "gemma3" if src.startswith("gemma3") else "gemma4"
        _, seqs = golden_sequences(build_tokenizer(family), family)
        build_mlx(out, name, src, bits, gs, kind, desc, seqs, ver, bf16_scale=bf16_scale)
    for name, src, cls_name, shard_bytes in SHARDED_FIXTURES:
        if only and name not in only:
            continue
        print(f"[{name}]", flush=True)
        report[name] = {"shards": build_sharded(out, name, src, cls_name, shard_bytes)}
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if os.path.isdir(p):
            print(f"{name}: {tree_hash(p)}")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
