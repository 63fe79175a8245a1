/* Allocation fault injection for tests (ls_test_control LS_TESTCTL_FAULT_ALLOC, in
 * include/lockstep.h): an allocation site asks before allocating whether it must fail, so
 * tests can show that running out of memory there is reported, never papered over. Costs
 * one relaxed atomic load per allocation at an instrumented site. */
#ifndef LS_CORE_FAULT_H
#define LS_CORE_FAULT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    LS_FAULT_SAMPLER = 0, /* "sampler": sampling scratch (decode/sampler.c) */
    LS_FAULT_MODEL,       /* "model": the model loader's tables and weight copies */
    LS_FAULT_TOKENIZER,   /* "tokenizer": the tokenizer's text table (tokenizer/tokenizer.c) */
    LS_FAULT_SITE_COUNT
} ls_fault_site;

/* Arm `count` failures at the site named `site` (0 disarms). LS_ERR_ARG for an unknown site
 * or a negative count. */
int ls_fault_arm(const char *site, int count);
/* True when this allocation at `site` must fail (uses up one armed failure). */
bool ls_fault_hit(ls_fault_site site);
/* malloc / calloc that fail when the site is armed. */
void *ls_fault_malloc(ls_fault_site site, size_t bytes);
void *ls_fault_calloc(ls_fault_site site, size_t n, size_t size);
/* "off", or "sampler:2,model:1" (armed sites and their remaining failures), into buf. */
void ls_fault_describe(char *buf, size_t cap);

#endif
