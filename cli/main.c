/*
 * ctrain: the command-line program. Parses the subcommand and hands over to
 * cmd_*.c; this is the only code that exits. Exit status 2 means the input
 * (a file, a key, a value) was wrong and nothing was written.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "ctrain %s: train transformer language models on CPU\n"
            "\n"
            "usage: ctrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  train   [--config FILE.yaml] [key=value ...]   train or fine-tune a model\n"
            "  eval    --model DIR --data SPEC [--batches N] [--batch-size B] [--seq-len T]\n"
            "          [--threads N] [--json]   mean loss and perplexity of a model or\n"
            "          checkpoint on token shards\n"
            "  sample  --model DIR [--prompt IDS] [--tokens N] [--temperature X] [--top-k K]\n"
            "          [--tokenizer DIR]   generate from a model directory (KV-cached):\n"
            "          token ids, or text with --tokenizer\n"
            "  chat    --model DIR [--adapter DIR] [--system TEXT] [--max-new N] [--json]\n"
            "          chat through the model's chat template: one user turn per line of\n"
            "          stdin, one reply per line (the KV cache keeps the conversation)\n"
            "  prepare --tokenizer DIR --out DIR [options] INPUT...   tokenise text files,\n"
            "          directories, globs, JSONL or stdin into training shards\n"
            "  merge   --base DIR --adapter DIR --out DIR [--bf16]   fold a PEFT LoRA adapter\n"
            "          into its base model and write the merged HF directory\n"
            "  plan    [--config FILE.yaml] [key=value ...] [--json]   memory plan of a run\n"
            "  synth   --out FILE [--tokens N] [--vocab V] [--seed S]   write a synthetic\n"
            "          token shard (a learnable bigram stream, for tests)\n"
            "  tokenize --tokenizer DIR [--allow-special] [--decode]   text on stdin to GPT-2\n"
            "          token ids on stdout (or ids back to text); --chat / --render: one JSON\n"
            "          array of messages per line through the model's chat template\n"
            "  bench   [peak|kernels|step|gemm] [--preset P] [--batch B] [--seq T] [--json]\n"
            "          benchmarks on this machine: roofs, every kernel against its roofline,\n"
            "          training steps split by kernel, the step's GEMM-only time\n"
            "  hw      [--json] [--quick] [--no-bench]   hardware profile: cores, caches, ISA,\n"
            "          memory limits, GPU, machine signature and measured roofs\n"
            "  report  RUN_DIR [--out FILE]   one self-contained HTML page about a run: summary,\n"
            "          plots (loss, lr, grad norm, tokens/s, MFU, memory, step-time split),\n"
            "          alerts, rollbacks, config and hardware\n"
            "  tune    --config RUN.yaml [--level basic|advanced|ultra] [--out FILE] [--json]\n"
            "          [key=value ...]   time real training steps over threads, micro-batch,\n"
            "          recompute, bf16 activations and attention tiles under the memory\n"
            "          limit; writes a profile for `ctrain train --config`\n"
            "  version print the version\n"
            "\n"
            "`ctrain train --print-config` lists every configuration key with its default.\n",
            ct_version());
}

static void abort_handler(const char *msg) {
    fprintf(stderr, "ctrain: internal error: %s\n", msg);
}

int main(int argc, char **argv) {
    ct_set_abort_handler(abort_handler);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* the commands that may read or write remote data: a peer closing a TLS
     * connection must be an error libcurl reports, not a SIGPIPE that kills
     * the run (libcurl's advice with CURLOPT_NOSIGNAL) */
    if (!strcmp(cmd, "train") || !strcmp(cmd, "eval") || !strcmp(cmd, "prepare"))
        signal(SIGPIPE, SIG_IGN);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "prepare")) return cmd_prepare(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "hw")) return cmd_hw(argc - 2, argv + 2);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 2, argv + 2);
    if (!strcmp(cmd, "tune")) return cmd_tune(argc - 2, argv + 2);
    if (!strcmp(cmd, "merge")) return cmd_merge(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("ctrain %s\n", ct_version());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "ctrain: error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
