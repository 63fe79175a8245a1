/* lockstep-gen-model: write model files of the real geometry of large Gemma models with
 * deterministic pseudo-random weights, for benchmarks and exactness tests on machines that
 * cannot download the real weights. See docs/large_models.md. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_model.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lockstep-gen-model --kind KIND OUT [options]\n"
            "\n"
            "kinds:\n"
            "  gemma4-31b-qat        OUT_DIR: mlx-community-style Gemma 4 31B QAT checkpoint (MLX affine 4-bit g64,\n"
            "                        8-bit g64 MLP, bf16 scales/biases/norms), sharded safetensors + index,\n"
            "                        config.json, tokenizer.json (262144 tokens)\n"
            "  gemma4-31b-assistant  OUT_DIR: the matching bf16 Gemma 4 assistant (drafter) checkpoint\n"
            "  gemma3-27b-q4km       OUT.gguf: Gemma 3 27B geometry, llama.cpp's Q4_K_M type mix; needs --like\n"
            "\n"
            "options:\n"
            "  --layers N            keep only the first N layers (the last one is made full-attention for\n"
            "                        Gemma 4, as the loaders force it)\n"
            "  --like TEMPLATE.gguf  metadata (tokenizer included) to copy into the GGUF\n"
            "  --seed S              RNG seed (default 1); the output depends only on it and the geometry\n"
            "  --threads N           generator threads (default: online CPUs - 1); the bytes do not depend on it\n"
            "  --shard-gb G          safetensors shard limit in GiB (default 5, as mlx-lm)\n"
            "  --rope-scaling        GGUF: also write gemma3.rope.scaling.type linear / factor 8 (global layers),\n"
            "                        as the real 27B has; this engine refuses that key for now, llama.cpp reads it\n"
            "  --dry-run             print the files and sizes, write nothing\n"
            "  --no-sync             do not fsync the files at the end\n"
            "  -q, --quiet           no progress lines\n");
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "lockstep-gen-model: %s: expected an integer in [%llu, %llu], got '%s'\n", flag,
                (unsigned long long)lo, (unsigned long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    enum { O_KIND = 256, O_LAYERS, O_LIKE, O_SEED, O_THREADS, O_SHARD, O_ROPE, O_DRY, O_NOSYNC };
    static const struct option opts[] = {{"kind", required_argument, 0, O_KIND},
                                         {"layers", required_argument, 0, O_LAYERS},
                                         {"like", required_argument, 0, O_LIKE},
                                         {"seed", required_argument, 0, O_SEED},
                                         {"threads", required_argument, 0, O_THREADS},
                                         {"shard-gb", required_argument, 0, O_SHARD},
                                         {"rope-scaling", no_argument, 0, O_ROPE},
                                         {"dry-run", no_argument, 0, O_DRY},
                                         {"no-sync", no_argument, 0, O_NOSYNC},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    gm_args a = {0};
    a.seed = 1;
    a.shard_bytes = 5ull << 30;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    a.io.n_threads = ncpu > 1 ? (int)(ncpu - 1 < 64 ? ncpu - 1 : 64) : 1;
    const char *kind = NULL;
    int o;
    uint64_t v;
    while ((o = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (o) {
        case O_KIND: kind = optarg; break;
        case O_LAYERS:
            if (parse_u64("--layers", optarg, 1, 512, &v)) return 2;
            a.layers = (int)v;
            break;
        case O_LIKE: a.like = optarg; break;
        case O_SEED:
            if (parse_u64("--seed", optarg, 0, UINT64_MAX, &v)) return 2;
            a.seed = v;
            break;
        case O_THREADS:
            if (parse_u64("--threads", optarg, 1, 256, &v)) return 2;
            a.io.n_threads = (int)v;
            break;
        case O_SHARD:
            if (parse_u64("--shard-gb", optarg, 1, 1024, &v)) return 2;
            a.shard_bytes = v << 30;
            break;
        case O_ROPE: a.rope_scaling = true; break;
        case O_DRY: a.dry_run = true; break;
        case O_NOSYNC: a.io.no_sync = true; break;
        case 'q': a.io.quiet = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!kind || optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    a.out = argv[optind];
    int rc;
    if (strcmp(kind, "gemma4-31b-qat") == 0)
        rc = gm_kind_gemma4_qat(&a);
    else if (strcmp(kind, "gemma4-31b-assistant") == 0)
        rc = gm_kind_gemma4_assistant(&a);
    else if (strcmp(kind, "gemma3-27b-q4km") == 0)
        rc = gm_kind_gemma3_q4km(&a);
    else {
        fprintf(stderr, "lockstep-gen-model: unknown --kind '%s'\n", kind);
        usage(stderr);
        return 2;
    }
    if (rc == 0 && !a.dry_run && a.io.seconds > 0)
        printf("wrote %.2f GB in %.1f s (%.0f MB/s, %.1f s/GB, %d generator threads%s)\n", a.io.bytes_written / 1e9,
               a.io.seconds, a.io.bytes_written / 1e6 / a.io.seconds, a.io.seconds / (a.io.bytes_written / 1e9),
               a.io.n_threads, a.io.no_sync ? ", no fsync" : ", fsync'd");
    return rc;
}
