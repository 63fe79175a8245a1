#!/usr/bin/env python3
"""Reference logits for Gemma 3 270M from llama.cpp (llama-cpp-python), and a comparison
against lockstep.

  python3 tools/ref_logits.py                    # write tests/data/logits_golden/golden.bin
  python3 tools/ref_logits.py --compare build/ref/lockstep
                                                 # exact per-row error of lockstep vs live llama.cpp
  python3 tools/ref_logits.py --make-f32 /tmp/f32.gguf      # then:
  python3 tools/ref_logits.py --compare build/ref/lockstep -m /tmp/f32.gguf
                                                 # same, without int8 activation quantization

Noise floor. With the Q4_K_M model both engines quantize every matmul input to int8; that
rounding is discontinuous, so any float-level difference (llama.cpp's f16 GELU table, f16 Q and
softmax probabilities, RoPE angle recurrence, FMA contraction) re-draws the quantization noise
and two correct implementations end up ~4% apart (median relative L2), ~93-94% top-1. Against
the dequantized F32 model the same comparison gives ~4e-4 and 100%.

The golden file lets tests/test_logits_golden.c check lockstep's logits without llama.cpp:
per position it stores the reference argmax, the reference row's L2 norm and a 64-bucket
count-sketch of the row (format: tests/data/logits_golden/README.md). For a row difference
e = ours - ref, est = ||sketch(ours) - sketch(ref)||_2 satisfies E[est^2] = ||e||^2.

The sketch hash (must match tests/test_logits_golden.c): h = splitmix64(j) for vocab index j,
bucket = h & 63, sign = +1 if ((h >> 6) & 1) == 0 else -1, where
  splitmix64(j): z = j + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
                 z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)   (mod 2^64)
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.environ.get("LOCKSTEP_MODEL", os.path.expanduser("~/.cache/lockstep/gemma-3-270m-q4_k_m.gguf"))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "logits_golden", "golden.bin")

MAGIC = b"LSLG"
VERSION = 1
N_BUCKETS = 64
N_CTX = 1024  # > the longest prompt; llama-cpp-python allocates n_ctx x n_vocab floats of scores

# ---------------------------------------------------------------------------------------------
# Prompts. Each is truncated to exactly n_tokens llama.cpp tokens (BOS included); the text must
# be long enough (checked). The long document exceeds Gemma 3's 512-token sliding window so the
# sliding layers actually drop positions.

PROSE = """The village of Harrowgate sat at the bottom of a long valley, where the river slowed and widened before \
turning east toward the sea. In the spring the water rose over the lower meadows and the children waded out to catch \
the small silver fish that came up with the flood; in the autumn it sank back into its bed and left behind a smell of \
mud and wild mint that hung over the houses for weeks. Nobody in the village could remember a time when the river had \
not done this, and so nobody thought it remarkable. The miller, a patient man named Tobias Wren, kept a ledger in which \
he wrote down the height of the water every morning, the price of flour at the market in Easton, and the names of \
everyone who owed him money. He had kept it for thirty-one years. When the young schoolteacher asked to borrow it, \
explaining that she wanted to teach the children how to draw graphs, he hesitated for a long moment before handing it \
over, as if he were lending her a piece of himself. She sat up late that night by the light of a single lamp, turning \
the stiff pages and copying the numbers into neat columns, and somewhere around the nineteenth year she noticed \
something that made her put down her pen: every seventh spring the river rose twice, once in March and once again, \
more gently, at the very end of April. Tobias had recorded it faithfully each time without ever remarking on it. \
She wondered whether anyone else had noticed, and what, if anything, it meant for the people who lived along its banks."""

CODE = '''import heapq
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(order=True)
class _Entry:
    dist: float
    node: str = field(compare=False)


def dijkstra(graph: Dict[str, List[Tuple[str, float]]], source: str,
             target: Optional[str] = None) -> Tuple[Dict[str, float], Dict[str, str]]:
    """Shortest paths from `source` in a graph with non-negative edge weights.

    Returns (dist, prev): dist[v] is the length of the shortest path to v and
    prev[v] the node before v on it. Stops early once `target` is settled.
    """
    dist: Dict[str, float] = {source: 0.0}
    prev: Dict[str, str] = {}
    heap = [_Entry(0.0, source)]
    settled = set()
    while heap:
        entry = heapq.heappop(heap)
        u = entry.node
        if u in settled:
            continue
        settled.add(u)
        if u == target:
            break
        for v, w in graph.get(u, []):
            if w < 0:
                raise ValueError(f"negative edge {u}->{v}: {w}")
            nd = entry.dist + w
            if nd < dist.get(v, float("inf")):
                dist[v] = nd
                prev[v] = u
                heapq.heappush(heap, _Entry(nd, v))
    return dist, prev


def path_to(prev: Dict[str, str], source: str, target: str) -> List[str]:
    out = [target]
    while out[-1] != source:
        out.append(prev[out[-1]])
    return out[::-1]


if __name__ == "__main__":
    g = {"a": [("b", 1.0), ("c", 4.0)], "b": [("c", 2.0), ("d", 5.0)], "c": [("d", 1.0)]}
    d, p = dijkstra(g, "a")
    print(d["d"], path_to(p, "a", "d"))
'''

CHAT = """<start_of_turn>user
I'm planning a three-day hiking trip in late September in a mountain area where the nights can drop below freezing. \
I have a three-season tent, a sleeping bag rated to 5 degrees Celsius and a small gas stove. What should I change or \
add so that I stay warm and safe, and what mistakes do first-timers usually make?<end_of_turn>
<start_of_turn>model
1. **Sleep system.** A bag rated to 5 °C will feel cold near freezing. Add a liner (worth 2-4 °C) or bring a warmer bag, and use an insulated sleeping pad: most heat is \
lost to the ground.
2. **Layers.** Pack a warm hat and a dry base layer reserved for sleeping.

Common mistakes: going to bed cold and starting too late in the day.<end_of_turn>
<start_of_turn>user
Thanks! Can you turn that into a short packing checklist?<end_of_turn>
<start_of_turn>model
Here is a compact checklist:

- [ ] Sleeping bag liner or a warmer bag
- [ ] Insulated sleeping pad
- [ ] Warm hat, gloves and a dry base layer for sleeping
- [ ] Puffy jacket for camp
- [ ] Stove, lighter and a spare gas canister
"""

FRENCH = """La ville s'éveillait lentement sous une pluie fine qui brouillait les contours des toits. Sur la place du \
marché, les marchands dressaient leurs étals en silence, comme s'ils craignaient de déranger le ciel. Madeleine \
traversa la rue en serrant contre elle un panier d'osier où dormaient trois pommes, un pain encore tiède et une lettre \
qu'elle n'avait pas osé ouvrir. Elle reconnaissait l'écriture de son frère, penchée et nerveuse, et elle savait qu'il \
n'écrivait jamais sans raison. Depuis son départ pour Marseille, il y avait maintenant presque deux ans, il n'avait \
envoyé que des cartes postales aux couleurs criardes, couvertes de phrases courtes et joyeuses qui ne disaient rien. \
Cette fois-ci, l'enveloppe était épaisse. Elle s'assit sur le banc de pierre près de la fontaine, indifférente à \
l'humidité, et regarda longtemps le timbre avant de glisser son doigt sous le rabat. « Ma chère sœur, commençait la \
lettre, je te dois une explication, et peut-être aussi des excuses. » Madeleine leva les yeux vers l'horloge de \
l'église, dont les aiguilles semblaient s'être arrêtées, puis reprit sa lecture. Son frère racontait le port, les \
bateaux qui partaient vers l'Algérie, le travail qu'il avait trouvé chez un armateur, et une femme dont il ne donnait \
que le prénom, Lucie. Il parlait aussi d'une dette, d'une somme qu'il ne pouvait pas rembourser, et d'un homme qui \
l'attendait chaque soir devant la porte de son logement."""

# Japanese (non-Latin script; tokenizes at roughly one to two characters per token).
JAPANESE = """春の終わりの夕暮れ、古い港町の坂道を一人の少年がゆっくりと登っていた。肩には祖父から譲り受けた\
古い革の鞄を掛け、手には海辺で拾った小さな貝殻を握りしめていた。坂の上には町でいちばん古い図書館があり、\
少年は毎週金曜日になるとそこへ通って、船や星や遠い国々についての本を借りるのが習慣だった。図書館の司書は\
白髪の女性で、少年の名前を覚えていて、いつも新しく届いた本を一冊だけ取っておいてくれた。その日、彼女が\
差し出したのは、表紙の色があせた航海日誌の複製だった。百年以上前にこの港から出航し、二度と戻らなかった\
帆船の船長が書いたものだという。少年は閲覧室の窓際の席に座り、黄ばんだ頁をめくり始めた。日誌には風向きや\
波の高さ、乗組員の体調、そして毎晩観測した星の位置が丁寧な文字で記されていた。しかし最後の十頁ほどは、\
まるで別人が書いたかのように筆跡が乱れ、同じ言葉が何度も繰り返されていた。「灯りが見える。北の方角に、\
確かに灯りが見える。」少年は顔を上げ、窓の外の暗くなりかけた海を見つめた。"""


def long_document():
    """An original essay of ~1000 tokens (we keep 720), exceeding the 512-token sliding window."""
    paras = [
        "A Short History of Keeping Time",
        "Long before there were clocks, there was the sun. The earliest farmers divided the day by the length and "
        "direction of shadows, and a stick driven upright into the ground was enough to tell the morning from the "
        "afternoon. The Egyptians refined this idea into the shadow clock, a bar of stone with a raised crosspiece "
        "whose shadow fell on a row of marks; it had to be turned around at noon, and it was useless on a cloudy day "
        "or after dark. For the night, they watched the stars rise one after another over the eastern horizon, and "
        "priests learned the sequence by heart so that they could time the rituals of the temple.",
        "Water offered a way to measure time that did not depend on the sky. A clepsydra, or water clock, was a vessel "
        "with a small hole near its base: as the water ran out, the level fell past marks on the inside wall. Greek "
        "courts used such vessels to limit the length of speeches, and the phrase about a speaker's water running out "
        "survived long after the devices themselves had disappeared. Engineers in Alexandria added floats, gears and "
        "pointers, and some of their water clocks rang bells or moved small figures at each hour. In China, the "
        "astronomer Su Song built a great tower in the eleventh century whose water wheel turned an armillary sphere "
        "and a celestial globe, keeping them aligned with the heavens through an ingenious escapement of scoops and "
        "levers.",
        "The mechanical clock appeared in Europe at the end of the thirteenth century, and nobody knows exactly who "
        "invented it. Its heart was the verge and foliot escapement, a rocking bar that let a falling weight drive "
        "the gears forward one small step at a time. These early clocks were enormous, built of wrought iron by "
        "blacksmiths and placed in church towers, and they were not very accurate: an error of a quarter of an hour "
        "a day was normal. Many of them had no dial at all. They simply struck a bell, and the word clock itself "
        "comes from the old words for bell. Still, for the first time a whole town could share a single, public "
        "measure of the hours, and the rhythm of work and prayer began to follow the machine rather than the sun.",
        "Accuracy improved dramatically in the seventeenth century. Galileo had noticed that a pendulum of a given "
        "length swings with nearly the same period whatever the size of the swing, and Christiaan Huygens turned "
        "this observation into a working pendulum clock in 1656. The best of the new clocks lost less than a minute "
        "a day, and soon clockmakers added minute hands, which had hardly been worth the trouble before. The spring "
        "made clocks portable, and the balance spring, which gave a watch its own small oscillator, made them "
        "accurate enough to carry in a pocket. Watches became objects of status as much as instruments, engraved, "
        "enamelled and passed down from parent to child.",
        "At sea, however, the problem of time was a matter of life and death. A navigator could find his latitude "
        "from the height of the sun at noon, but longitude depended on knowing the time at home at the very moment "
        "of local noon, and no clock of the age could keep time on a rolling ship through heat, cold and damp. "
        "Governments offered large prizes for a solution. John Harrison, a carpenter from the north of England, "
        "spent most of his life building a series of marine timekeepers, each smaller and better than the last, and "
        "his fourth, which looked like a large pocket watch, lost only a few seconds on a voyage to the West Indies. "
        "The committee that controlled the prize was slow to believe him, and he was paid in full only late in life.",
        "The railways brought a new kind of problem. Every town had kept its own local time, set by the sun, so that "
        "noon in one city came several minutes before noon in a city to the west. This hardly mattered when travel "
        "was slow, but a railway timetable with dozens of local times was a recipe for confusion and accidents. "
        "Railway companies adopted a single standard time for their lines, telegraph signals carried it from an "
        "observatory to every station, and in 1884 an international conference agreed on a prime meridian and a "
        "system of time zones that, with many local exceptions, is still in use today.",
        "In the twentieth century the quartz crystal replaced the pendulum and the balance wheel. A thin slice of "
        "quartz vibrates at a very stable frequency when an electric current is applied, and by counting those "
        "vibrations a circuit can keep time to within a few seconds a month. Quartz watches became so cheap that "
        "the precision once reserved for observatories ended up on almost every wrist. Atomic clocks went further "
        "still, counting the oscillations of caesium atoms, and since 1967 the second itself has been defined by "
        "them rather than by the rotation of the Earth, which turns out to be a rather irregular timekeeper.",
    ]
    return "\n\n".join(paras) + "\n"


PROMPTS = [  # (name, text, n_tokens)
    ("prose_en", PROSE, 220),
    ("code_py", CODE, 220),
    ("chat", CHAT, 220),
    ("prose_fr", FRENCH, 220),
    ("prose_ja", JAPANESE, 220),
    ("long_doc", long_document(), 720),
]

# ---------------------------------------------------------------------------------------------


def sketch_hash(n_vocab):
    """bucket (int64) and sign (float64, +-1) per vocab index; see the module docstring."""
    with np.errstate(over="ignore"):
        z = np.arange(n_vocab, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    bucket = (z & np.uint64(N_BUCKETS - 1)).astype(np.int64)
    sign = np.where(((z >> np.uint64(6)) & np.uint64(1)) == 0, 1.0, -1.0)
    return bucket, sign


def sketch_rows(rows, bucket, sign):
    """[n, vocab] -> [n, 64] count sketches, accumulated in float64."""
    out = np.empty((rows.shape[0], N_BUCKETS), dtype=np.float64)
    for i in range(rows.shape[0]):
        out[i] = np.bincount(bucket, weights=sign * rows[i].astype(np.float64), minlength=N_BUCKETS)
    return out


def load_llama(model, threads):
    from llama_cpp import Llama

    return Llama(model_path=model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, logits_all=True, n_threads=threads,
                 n_threads_batch=threads, verbose=False)


def tokenize_prompts(llm):
    out = []
    for name, text, n in PROMPTS:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        if len(toks) < n:
            sys.exit(f"prompt {name}: only {len(toks)} tokens, need {n}")
        out.append((name, toks[:n]))
    return out


def ref_logits(llm, toks):
    """Fresh context (KV cache cleared), one batch, logits of every position: float32 [n, vocab]."""
    llm.reset()  # n_tokens = 0; eval() then removes every cached position >= 0
    llm.eval(toks)
    assert llm.n_tokens == len(toks)
    return np.array(llm.scores[: len(toks)], dtype=np.float32, copy=True)


def row_stats(rows):
    """argmax, second-best id, top1-top2 margin, L2 norm (float64) per row."""
    top2 = np.argpartition(-rows, 1, axis=1)[:, :2]
    v = np.take_along_axis(rows, top2, axis=1)
    order = np.argsort(-v, axis=1, kind="stable")
    top2 = np.take_along_axis(top2, order, axis=1)
    v = np.take_along_axis(v, order, axis=1)
    am = np.argmax(rows, axis=1)  # first index of the max, as the C test computes it
    second = np.where(top2[:, 0] == am, top2[:, 1], top2[:, 0])
    norm = np.sqrt(np.einsum("ij,ij->i", rows.astype(np.float64), rows.astype(np.float64)))
    return am, second, (v[:, 0] - v[:, 1]).astype(np.float64), norm


# ---- golden file ------------------------------------------------------------------------------
# header: magic "LSLG", u32 version, u32 n_prompts, u32 n_vocab, u32 n_buckets
# per prompt: char name[32] (NUL padded), u32 n_tokens, i32 tokens[n_tokens],
#   then n_tokens records of: i32 argmax, i32 second, f32 margin, f32 norm, f32 sketch[n_buckets]


def write_golden(path, n_vocab, entries):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rec = np.dtype([("argmax", "<i4"), ("second", "<i4"), ("margin", "<f4"), ("norm", "<f4"),
                    ("sketch", "<f4", (N_BUCKETS,))])
    with open(path + ".tmp", "wb") as f:
        f.write(MAGIC + struct.pack("<4I", VERSION, len(entries), n_vocab, N_BUCKETS))
        for name, toks, am, second, margin, norm, sk in entries:
            nb = name.encode()
            assert len(nb) < 32
            f.write(nb + b"\0" * (32 - len(nb)))
            f.write(struct.pack("<I", len(toks)))
            f.write(np.asarray(toks, dtype="<i4").tobytes())
            r = np.zeros(len(toks), dtype=rec)
            r["argmax"], r["second"], r["margin"], r["norm"], r["sketch"] = am, second, margin, norm, sk
            f.write(r.tobytes())
    os.replace(path + ".tmp", path)


def read_golden(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != MAGIC:
        sys.exit(f"{path}: not a golden logits file")
    version, n_prompts, n_vocab, nb = struct.unpack_from("<4I", data, 4)
    assert version == VERSION and nb == N_BUCKETS
    rec = np.dtype([("argmax", "<i4"), ("second", "<i4"), ("margin", "<f4"), ("norm", "<f4"),
                    ("sketch", "<f4", (nb,))])
    off, out = 20, []
    for _ in range(n_prompts):
        name = data[off:off + 32].split(b"\0")[0].decode()
        (n,) = struct.unpack_from("<I", data, off + 32)
        off += 36
        toks = np.frombuffer(data, "<i4", n, off).tolist()
        off += 4 * n
        r = np.frombuffer(data, rec, n, off)
        off += rec.itemsize * n
        out.append((name, toks, r))
    return n_vocab, out


def generate(args):
    llm = load_llama(args.model, args.threads)
    n_vocab = llm.n_vocab()
    bucket, sign = sketch_hash(n_vocab)
    entries = []
    for name, toks in tokenize_prompts(llm):
        rows = ref_logits(llm, toks)
        am, second, margin, norm = row_stats(rows)
        sk = sketch_rows(rows, bucket, sign)
        entries.append((name, toks, am, second, margin, norm, sk))
        print(f"{name:10s} {len(toks):4d} tokens  first ids {toks[:6]}  median |ref| {np.median(norm):.1f}  "
              f"near-ties (margin<0.05) {int((margin < 0.05).sum())}")
    write_golden(args.out, n_vocab, entries)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


# ---- compare ----------------------------------------------------------------------------------


def run_ours(binary, model, toks, mode, threads, n_vocab):
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as tf:
        path = tf.name
    try:
        cmd = [binary, "logits", "-m", model, "--tokens", ",".join(map(str, toks)), "--mode", mode,
               "-t", str(threads), "-o", path]
        subprocess.run(cmd, check=True)
        rows = np.fromfile(path, dtype="<f4")
    finally:
        os.unlink(path)
    if rows.size != len(toks) * n_vocab:
        sys.exit(f"{binary}: expected {len(toks)} x {n_vocab} floats, got {rows.size}")
    return rows.reshape(len(toks), n_vocab)


def compare(args):
    llm = load_llama(args.model, args.threads)
    n_vocab = llm.n_vocab()
    bucket, sign = sketch_hash(n_vocab)
    golden = None
    # the golden sketches belong to the default model; another model (e.g. --make-f32 output)
    # is sketched live
    use_golden = os.path.realpath(args.model) == os.path.realpath(DEFAULT_MODEL)
    if os.path.exists(args.out):
        gv, g = read_golden(args.out)
        golden = {name: (toks, r) for name, toks, r in g} if gv == n_vocab else None
    all_rel, all_est, all_agree, n_miss, n_close = [], [], [], [], []
    hdr = (f"{'prompt':10s} {'rows':>5s} {'top1%':>7s} {'med rel':>9s} {'p90 rel':>9s} {'max rel':>9s} "
           f"{'sketch med':>10s} {'max@pos':>7s}")
    print(hdr)
    lines = []
    for name, toks in tokenize_prompts(llm):
        ref = ref_logits(llm, toks)
        ours = run_ours(args.compare, args.model, toks, args.mode, args.threads, n_vocab)
        diff = ours.astype(np.float64) - ref
        rnorm = np.linalg.norm(ref.astype(np.float64), axis=1)
        rel = np.linalg.norm(diff, axis=1) / rnorm
        am_ref, second, margin, _ = row_stats(ref)
        am_ours = np.argmax(ours, axis=1)
        agree = am_ours == am_ref
        if golden and use_golden and name in golden and golden[name][0] == toks:
            gr = golden[name][1]
            est = np.linalg.norm(sketch_rows(ours, bucket, sign) - gr["sketch"].astype(np.float64), axis=1) / gr["norm"]
            if not np.array_equal(gr["argmax"], am_ref):
                lines.append(f"  note: {name}: live llama.cpp argmax differs from golden at "
                             f"{int((gr['argmax'] != am_ref).sum())} rows")
        else:
            est = np.linalg.norm(sketch_rows(ours, bucket, sign) - sketch_rows(ref, bucket, sign), axis=1) / rnorm
        all_rel.append(rel), all_est.append(est), all_agree.append(agree)
        print(f"{name:10s} {len(toks):5d} {100 * agree.mean():7.2f} {np.median(rel):9.5f} "
              f"{np.percentile(rel, 90):9.5f} {rel.max():9.5f} {np.median(est):10.5f} {int(rel.argmax()):7d}",
              flush=True)
        miss = np.nonzero(~agree)[0]
        n_miss.append(len(miss))
        n_close.append(int((margin[miss] < 0.25).sum()))
        for p in miss if args.verbose else []:
            lines.append(f"  {name} pos {p}: ref top1 {am_ref[p]} (margin {margin[p]:.4f} over {second[p]}), "
                         f"ours {am_ours[p]}: ref logit gap ours-vs-top1 {ref[p, am_ref[p]] - ref[p, am_ours[p]]:.4f}")
        if args.verbose:
            # error profile over positions (e.g. growth past the 512 sliding window)
            for a in range(0, len(toks), 64):
                b = min(a + 64, len(toks))
                lines.append(f"  {name} rows {a:4d}-{b - 1:4d}: median rel {np.median(rel[a:b]):.5f} "
                             f"max {rel[a:b].max():.5f}")
    rel, est, agree = np.concatenate(all_rel), np.concatenate(all_est), np.concatenate(all_agree)
    print(f"{'overall':10s} {len(rel):5d} {100 * agree.mean():7.2f} {np.median(rel):9.5f} "
          f"{np.percentile(rel, 90):9.5f} {rel.max():9.5f} {np.median(est):10.5f}")
    print(f"sketch estimate vs exact: median est/exact ratio {np.median(est / rel):.3f}, "
          f"median of est {np.median(est):.5f} vs exact {np.median(rel):.5f}")
    print(f"top-1 mismatches: {sum(n_miss)}, of which {sum(n_close)} where the reference's top-2 margin is < 0.25")
    for l in lines:
        print(l)


def make_f32(src, dst):
    """Same model, every tensor dequantized to F32. llama.cpp and lockstep then multiply in
    float (no int8 activation quantization), which removes the ~4% quantization noise floor and
    exposes real semantic differences (measured: median rel 4e-4, top-1 100%)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    r = GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        sub = f.types[1] if vt == GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(name, 0 if name == "general.file_type" else f.contents(), vt, sub_type=sub)
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape.tolist())]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst} ({os.path.getsize(dst)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("-o", "--out", default=DEFAULT_OUT, help="golden file (written, or read by --compare)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--compare", metavar="BIN", help="lockstep binary to compare against live llama.cpp")
    ap.add_argument("--mode", default="prefill", help="lockstep logits --mode for --compare")
    ap.add_argument("-v", "--verbose", action="store_true", help="--compare: list mismatches, error by position")
    ap.add_argument("--make-f32", metavar="OUT", help="write MODEL with every tensor dequantized to F32 (needs the "
                    "gguf package), for comparing without activation quantization: --compare BIN -m OUT")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"model not found: {args.model}")
    if args.make_f32:
        make_f32(args.model, args.make_f32)
    elif args.compare:
        compare(args)
    else:
        generate(args)


if __name__ == "__main__":
    main()
