/*
 * `ctrain synth --out FILE`: a synthetic token stream with learnable structure,
 * written as an llm.c shard. Each token has a few likely successors (a seeded
 * sparse bigram chain), so a model's loss falls from ln(V) towards the chain's
 * entropy: demo and test data that needs no tokenizer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/shard/shard.h"

int cmd_synth(int argc, char **argv) {
    const char *cmd = "synth", *out = NULL;
    long long n_tokens = 1000000, vocab = 512, seed = 1, chain = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: ctrain synth --out FILE [--tokens N] [--vocab V] [--chain C] [--seed S]\n"
                   "  --chain picks the bigram table (the \"language\"), --seed the walk through it\n");
            return 0;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "option '%s' needs a value", a);
        const char *v = argv[++i];
        char *end;
        errno = 0;
        if (!strcmp(a, "--out")) {
            out = v;
            continue;
        }
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < 1)
            return cli_usage_error(cmd, "%s '%s': expected a positive integer", a, v);
        if (!strcmp(a, "--tokens")) n_tokens = x;
        else if (!strcmp(a, "--vocab")) vocab = x;
        else if (!strcmp(a, "--seed")) seed = x;
        else if (!strcmp(a, "--chain")) chain = x;
        else return cli_usage_error(cmd, "unknown option '%s'", a);
    }
    if (!out) return cli_usage_error(cmd, "--out FILE is required");
    if (vocab < 8 || vocab > (1 << 24))
        return cli_usage_error(cmd, "--vocab %lld: expected 8..16777216", vocab);
    enum { FANOUT = 4 };
    static const double probs[FANOUT] = {0.55, 0.25, 0.15, 0.05};
    uint32_t *next = malloc((size_t)vocab * FANOUT * sizeof *next);
    uint32_t *tok = malloc((size_t)n_tokens * sizeof *tok);
    if (!next || !tok) {
        free(next);
        free(tok);
        fprintf(stderr, "ctrain synth: error: out of memory for %lld tokens\n", n_tokens);
        return 2;
    }
    ct_rng rng;
    ct_rng_init(&rng, (uint64_t)chain);
    for (long long i = 0; i < vocab * FANOUT; i++) next[i] = ct_rng_u32(&rng) % (uint32_t)vocab;
    ct_rng_init(&rng, (uint64_t)seed + 0x9e3779b9u);
    uint32_t cur = 0;
    for (long long i = 0; i < n_tokens; i++) {
        tok[i] = cur;
        double r = ct_rng_double(&rng), acc = 0;
        int j = 0;
        while (j < FANOUT - 1 && r >= (acc += probs[j])) j++;
        cur = next[(size_t)cur * FANOUT + (size_t)j];
    }
    ct_status st = ct_shard_write(out, tok, n_tokens, vocab <= 65536 ? 1 : 2);
    free(next);
    free(tok);
    if (st) return cli_fail(cmd);
    fprintf(stderr, "ctrain synth: wrote %lld tokens (vocab %lld) to %s\n", n_tokens, vocab, out);
    return 0;
}
