/* Round statistics (docs/speculative.md section 7) as one line of key=value pairs. */
#include <stdio.h>

#include "lockstep.h"

int ls_gen_stats_format(const ls_gen_stats *st, char *buf, size_t cap) {
    int off = 0;
#define P(...) (off += snprintf(buf + off, off < (int)cap ? cap - (size_t)off : 0, __VA_ARGS__))
    double dec_tps = st->decode_ms > 0 ? st->n_generated * 1e3 / st->decode_ms : 0;
    P("prompt_tokens=%d generated_tokens=%d prefill_ms=%.1f decode_ms=%.1f prefill_tok_s=%.2f decode_tok_s=%.2f "
      "stop=%s speculative=%d",
      st->n_prompt, st->n_generated, st->prefill_ms, st->decode_ms,
      st->prefill_ms > 0 ? st->n_prompt * 1e3 / st->prefill_ms : 0, dec_tps, st->stop_reason, st->speculative);
    if (st->spec_declined) P(" spec_declined=\"%s\"", st->spec_declined);
    if (st->speculative) {
        /* acceptance over the drafts actually checked (not those after an EOS or a stop) */
        double acc = st->checked ? (double)st->accepted / (double)st->checked : 0;
        /* every verify forward counts, including rounds where the drafter had nothing */
        double epv = st->rounds ? (double)st->emitted / (double)st->rounds : 0;
        P(" block_size=%d", st->block_size);
        if (st->block_size_requested) P(" block_size_requested=%d", st->block_size_requested);
        P(" rounds=%lld verify_rounds=%lld plain_steps=%lld adaptive_plain_steps=%lld proposed=%lld checked=%lld"
          " accepted=%lld acceptance_rate=%.4f emitted_per_verify=%.3f"
          " zero_accept_rounds=%lld partial_accept_rounds=%lld full_accept_rounds=%lld",
          (long long)st->rounds, (long long)st->verify_rounds, (long long)st->plain_steps,
          (long long)st->adaptive_plain_steps, (long long)st->proposed, (long long)st->checked, (long long)st->accepted,
          acc, epv, (long long)st->zero_accept_rounds, (long long)st->partial_accept_rounds,
          (long long)st->full_accept_rounds);
        P(" accepted_at=");
        int last = 0;
        for (int i = 0; i < LS_SPEC_MAX_BLOCK; i++)
            if (st->proposed_at[i]) last = i + 1;
        for (int i = 0; i < (last ? last : 1); i++)
            P("%s%lld/%lld", i ? "," : "", (long long)st->accepted_at[i], (long long)st->proposed_at[i]);
        P(" draft_ms=%.1f verify_ms=%.1f rollback_ms=%.1f probe_ms=%.1f final_block_size=%d", st->draft_ms,
          st->verify_ms, st->rollback_ms, st->probe_ms, st->final_block_size);
    }
    if (st->grammar_masks)
        P(" grammar_masks=%lld grammar_ms=%.1f grammar_ms_per_mask=%.3f", (long long)st->grammar_masks, st->grammar_ms,
          st->grammar_ms / (double)st->grammar_masks);
#undef P
    return off;
}
