/*
 * Instruction-tuning data: the .sft sidecar (write/read round trip, every
 * validation error), token byte offsets against a reference made by
 * decoding prefixes, the tokens and loss mask of each kind of line with
 * GPT-2's and LLaMA's tokenizers against expectations built here (prompt
 * and completion encoded as one text, a token counting when the decoding
 * through it reaches past the prompt; conversations from their pieces), bad
 * lines, and whole runs of ct_sft_prepare_run (shards and
 * sidecars read back, --max-len truncate/drop, validation splits, a failing
 * run leaving nothing). Needs ../data/gpt2-tokenizer and
 * ../data/llama-tokenizer (scripts/fetch_data.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ct_test.h"
#include "ctrain/data.h"
#include "data/prepare/sft_prepare.h"
#include "data/shard/sft_shard.h"
#include "data/shard/shard.h"
#include "io/fileio.h"
#include "unit/ct_tmpdir.h"

static const char *GPT2 = "../data/gpt2-tokenizer";
static const char *LLAMA_JSON = "../data/llama-tokenizer/tokenizer.json";
static char tmp[64];

/* ------------------------------------------------------------ helpers */

static ct_tokens enc(const ct_tokenizer *t, const char *text) {
    ct_tokens v = {0};
    CHECK(ct_tokenizer_encode(t, NULL, text, strlen(text), 0, &v) == CT_OK);
    return v;
}

/* dst += the plain encoding of text, and mask[] (at dst's positions) = m */
static void piece(ct_tokens *dst, uint8_t *mask, const ct_tokenizer *t, const char *text, uint8_t m) {
    ct_tokens v = enc(t, text);
    for (size_t i = 0; i < v.n; i++) {
        mask[dst->n] = m;
        ct_tokens_push(dst, v.ids[i]);
    }
    ct_tokens_free(&v);
}

static void one(ct_tokens *dst, uint8_t *mask, int32_t id, uint8_t m) {
    mask[dst->n] = m;
    ct_tokens_push(dst, id);
}

static bool same_ids(const ct_tokens *a, const int32_t *b, size_t n) {
    return a->n == n && (n == 0 || !memcmp(a->ids, b, n * sizeof *b));
}

static void print_ids(const char *what, const int32_t *ids, size_t n, const uint8_t *mask) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d%s", (int)ids[i], mask && mask[i] ? "*" : "");
    fprintf(stderr, "\n");
}

/* The reference token offsets: start[i] = bytes of decode(ids[0..i)). */
static void ref_offsets(const ct_tokenizer *t, const int32_t *ids, size_t n, size_t *start) {
    for (size_t i = 0; i <= n; i++) {
        char *s;
        size_t len;
        CHECK(ct_tokenizer_decode(t, ids, i, &s, &len) == CT_OK);
        start[i] = len;
        free(s);
    }
}

/* dst += the encoding of prompt + completion as one text; a token counts
 * (mask 1) when the decoding of the ids through it is longer than the prompt
 * (it holds a byte of the completion), as TRL tokenises prompt-completion
 * data whole. */
static void whole(ct_tokens *dst, uint8_t *mask, const ct_tokenizer *t, const char *prompt, const char *completion) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", prompt, completion);
    ct_tokens v = enc(t, text);
    size_t start[512];
    CHECK(v.n < 511);
    if (v.n >= 511) return;
    ref_offsets(t, v.ids, v.n, start);
    for (size_t i = 0; i < v.n; i++) one(dst, mask, v.ids[i], start[i + 1] > strlen(prompt));
    ct_tokens_free(&v);
}

static bool write_file(const char *path, const char *text) { return ct_tmpdir_write(path, text, strlen(text)) == 0; }

/* A tokenizer directory in tmp: name/ with the files of from (copied) and a
 * tokenizer_config.json holding cfg. */
static const char *make_tok_dir(char *out, size_t cap, const char *name, const char *from_file, const char *to_name,
                                const char *from_file2, const char *to_name2, const char *cfg) {
    ct_tmpdir_join(out, cap, tmp, name);
    mkdir(out, 0777);
    const char *from[2] = {from_file, from_file2}, *to[2] = {to_name, to_name2};
    for (int i = 0; i < 2; i++) {
        if (!from[i]) continue;
        char *data;
        size_t len;
        CHECK(ct_file_read_all(from[i], &data, &len) == CT_OK);
        char p[512];
        snprintf(p, sizeof p, "%s/%s", out, to[i]);
        CHECK(ct_tmpdir_write(p, data, len) == 0);
        free(data);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", out);
    CHECK(write_file(p, cfg));
    return out;
}

/* Encode one line; CHECK it is good and return the example. */
static bool line_ok(ct_sft_encoder *e, const char *line, ct_sft_example *ex) {
    bool bad = true;
    char why[256];
    ct_status st = ct_sft_encode_line(e, line, strlen(line), ex, &bad, why, sizeof why);
    CHECK_MSG(st == CT_OK && !bad, "%s: st %d bad %d why %s err %s", line, (int)st, (int)bad, why, ct_last_error());
    return st == CT_OK && !bad;
}

static void check_example(const char *what, const ct_sft_example *ex, const ct_tokens *want, const uint8_t *mask) {
    bool ok = same_ids(&ex->ids, want->ids, want->n) && !memcmp(ex->mask, mask, want->n);
    CHECK_MSG(ok, "%s: tokens or mask differ", what);
    if (!ok) {
        print_ids("got ", ex->ids.ids, ex->ids.n, ex->mask);
        print_ids("want", want->ids, want->n, mask);
    }
}

/* ------------------------------------------------------------ sidecar */

static void test_sidecar(void) {
    char bin[512], sft[512];
    ct_tmpdir_join(bin, sizeof bin, tmp, "side_000000.bin");
    CHECK(ct_sft_sidecar_path(sft, sizeof sft, bin) == CT_OK);
    CHECK(strstr(sft, "/side_000000.sft") && !strstr(sft, ".bin"));
    char small[8];
    CHECK(ct_sft_sidecar_path(small, sizeof small, bin) == CT_ERR_ARG);

    /* three examples of 3, 9 and 1 tokens (21 bits would need 2 bytes; 13 tokens, 2 bytes) */
    uint32_t toks[13];
    for (int i = 0; i < 13; i++) toks[i] = (uint32_t)(100 + i);
    CHECK(ct_shard_write(bin, toks, 13, 1) == CT_OK);
    static const uint8_t m0[3] = {0, 1, 1}, m1[9] = {0, 0, 0, 1, 0, 1, 1, 1, 1}, m2[1] = {0};
    ct_sft_writer *w;
    CHECK(ct_sft_writer_open(&w, sft) == CT_OK);
    CHECK(ct_sft_writer_add(w, m0, 3) == CT_OK);
    CHECK(ct_sft_writer_add(w, m1, 9) == CT_OK);
    CHECK(ct_sft_writer_add(w, m2, 1) == CT_OK);
    static const uint8_t first[2] = {1, 0};
    CHECK(ct_sft_writer_add(w, first, 2) == CT_ERR_ARG); /* a marked first token */
    CHECK(ct_sft_writer_add(w, m0, 0) == CT_ERR_ARG);
    CHECK(ct_sft_writer_examples(w) == 3 && ct_sft_writer_tokens(w) == 13 && ct_sft_writer_counted(w) == 7);
    CHECK(ct_sft_writer_commit(w) == CT_OK);
    CHECK(ct_tmpdir_size(sft) == 32 + 8 * 4 + 2);

    ct_shard *sh;
    ct_sft_shard *s;
    CHECK(ct_shard_open(&sh, bin) == CT_OK);
    CHECK(ct_sft_open(&s, sft, sh) == CT_OK);
    if (s) {
        CHECK(ct_sft_num_examples(s) == 3 && ct_sft_num_tokens(s) == 13 && ct_sft_counted_tokens(s) == 7);
        int64_t a, b;
        ct_sft_example_range(s, 0, &a, &b);
        CHECK(a == 0 && b == 3);
        ct_sft_example_range(s, 1, &a, &b);
        CHECK(a == 3 && b == 12);
        ct_sft_example_range(s, 2, &a, &b);
        CHECK(a == 12 && b == 13);
        static const int64_t of[13] = {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2};
        for (int i = 0; i < 13; i++) CHECK(ct_sft_example_of(s, i) == of[i]);
        uint8_t all[13], want[13];
        memcpy(want, m0, 3);
        memcpy(want + 3, m1, 9);
        memcpy(want + 12, m2, 1);
        CHECK(ct_sft_read_mask(s, 0, 13, all) == CT_OK && !memcmp(all, want, 13));
        CHECK(ct_sft_read_mask(s, 5, 4, all) == CT_OK && !memcmp(all, want + 5, 4));
        for (int i = 0; i < 13; i++) CHECK(ct_sft_counts(s, i) == (want[i] != 0));
        CHECK(ct_sft_read_mask(s, 10, 4, all) == CT_ERR_ARG);
        CHECK(ct_sft_read_mask(s, -1, 1, all) == CT_ERR_ARG);
        ct_sft_close(s);
    }

    /* an empty writer cannot commit; abort leaves nothing */
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmp, "empty.sft");
    CHECK(ct_sft_writer_open(&w, p) == CT_OK);
    CHECK(ct_sft_writer_commit(w) == CT_ERR_ARG);
    CHECK(ct_tmpdir_size(p) < 0);
    CHECK(ct_sft_writer_open(&w, p) == CT_OK);
    CHECK(ct_sft_writer_add(w, m0, 3) == CT_OK);
    ct_sft_writer_abort(w);
    CHECK(ct_tmpdir_size(p) < 0);
    ct_sft_writer_abort(NULL);
    ct_sft_close(NULL);

    /* validation: each corruption of the good bytes, through open_bytes */
    uint8_t good[66];
    long n = ct_tmpdir_read(sft, good, sizeof good);
    CHECK(n == 66);
    uint8_t bad[80];
    struct {
        const char *what;
        int at;       /* byte to change, or -1 */
        uint8_t v;
        long len;     /* bytes given */
        int64_t ntok; /* the shard's count */
        const char *msg;
    } cases[] = {
        {"magic", 0, 0x11, 66, 13, "bad magic"},
        {"version", 4, 2, 66, 13, "unknown SFT sidecar version"},
        {"shard count", -1, 0, 66, 14, "its shard"},
        {"examples 0", 8, 0, 66, 13, "example count 0"},
        {"examples > tokens", 8, 14, 66, 13, "out of range"},
        {"truncated", -1, 0, 65, 13, "truncated"},
        {"trailing", -1, 0, 67, 13, "trailing bytes"},
        {"short header", -1, 0, 20, 13, "shorter than"},
        {"offset 0", 32, 1, 66, 13, "example 0 starts"},
        {"not increasing", 40, 12, 66, 13, "increase strictly"}, /* offsets[1] = 12 > offsets[2] = 12 */
        {"past the end", 48, 14, 66, 13, "increase strictly"},  /* offsets[2] = 14 > 13 */
        {"last offset", 56, 12, 66, 13, "increase strictly"},  /* offsets[3] = 12 = offsets[2] */
        {"first token marked", 64, 0x0F, 66, 13, "first token"}, /* bit 3: example 1's start */
        {"padding bits", 65, 0xE0 | 0x0F, 66, 13, "past token 13"},
        {"count", 24, 8, 66, 13, "the mask marks 7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(bad, 0, sizeof bad);
        memcpy(bad, good, 66);
        if (cases[i].at >= 0) bad[cases[i].at] = cases[i].v;
        ct_sft_shard *x = NULL;
        ct_status st = ct_sft_open_bytes(&x, "X.sft", bad, (size_t)cases[i].len, cases[i].ntok, "X.bin");
        bool ok = st == CT_ERR_FORMAT && x == NULL && strstr(ct_last_error(), "X.sft") &&
                  strstr(ct_last_error(), cases[i].msg);
        CHECK_MSG(ok, "%s: status %d, error: %s", cases[i].what, (int)st, ct_last_error());
        ct_sft_close(x);
    }
    ct_sft_shard *x = NULL;
    CHECK(ct_sft_open_bytes(&x, "X.sft", good, 66, 13, "X.bin") == CT_OK && x);
    ct_sft_close(x);

    /* through files: missing, not matching its shard, short */
    ct_tmpdir_join(p, sizeof p, tmp, "missing.sft");
    CHECK(ct_sft_open(&s, p, sh) == CT_ERR_IO && strstr(ct_last_error(), "missing.sft"));
    ct_tmpdir_join(p, sizeof p, tmp, "short.sft");
    CHECK(ct_tmpdir_write(p, good, 10) == 0);
    CHECK(ct_sft_open(&s, p, sh) == CT_ERR_FORMAT && strstr(ct_last_error(), "short.sft"));
    ct_shard *other;
    ct_tmpdir_join(p, sizeof p, tmp, "other.bin");
    CHECK(ct_shard_write(p, toks, 12, 1) == CT_OK);
    CHECK(ct_shard_open(&other, p) == CT_OK);
    CHECK(ct_sft_open(&s, sft, other) == CT_ERR_FORMAT && strstr(ct_last_error(), "side_000000.sft") &&
          strstr(ct_last_error(), "other.bin"));
    ct_shard_close(other);
    ct_shard_close(sh);
}

/* ------------------------------------------------------ token offsets */

static void test_offsets(const ct_tokenizer *t, const char *name) {
    static const char *const texts[] = {
        "Hello world", "  two  spaces  and\ttabs\n\nnewlines  ", "Zwölf Boxkämpfer — 1234 🙂 中文",
        "a<|endoftext|>b<|endoftext|><|endoftext|> c", "<s>[INST] Hi [/INST] Hello </s><s>[INST] x", " lead",
        "</s> after", "tail ",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const char *text = texts[k];
        ct_tokens v = {0};
        CHECK(ct_tokenizer_encode(t, NULL, text, strlen(text), CT_TOK_ADDED_TOKENS, &v) == CT_OK);
        size_t *got = malloc((v.n + 1) * sizeof *got), *want = malloc((v.n + 1) * sizeof *want);
        CHECK(ct_sft_token_offsets(t, text, strlen(text), v.ids, v.n, got) == CT_OK);
        ref_offsets(t, v.ids, v.n, want);
        /* the decoder drops the prefix "▁" where encode added one; where the
         * text itself starts with a space both must agree */
        bool ok = !memcmp(got, want, (v.n + 1) * sizeof *got);
        CHECK_MSG(ok, "%s: offsets of \"%s\" differ from the decoded prefixes'", name, text);
        if (!ok)
            for (size_t i = 0; i <= v.n; i++) fprintf(stderr, "  %zu: got %zu want %zu\n", i, got[i], want[i]);
        free(got);
        free(want);
        ct_tokens_free(&v);
    }
    /* ids of another text do not spell this one */
    ct_tokens v = enc(t, "Hello world");
    size_t st[64];
    CHECK(ct_sft_token_offsets(t, "Hello there", 11, v.ids, v.n, st) == CT_ERR_FORMAT);
    CHECK(ct_sft_token_offsets(t, "Hello world!", 12, v.ids, v.n, st) == CT_ERR_FORMAT);
    ct_tokens_free(&v);
    if (ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE) {
        /* a "▁" in the text is a space to SentencePiece: 3 bytes for 1 */
        const char *mk = "a\xE2\x96\x81" "b c";
        v = enc(t, mk);
        CHECK(ct_sft_token_offsets(t, mk, strlen(mk), v.ids, v.n, st) == CT_OK && st[v.n] == strlen(mk));
        ct_tokens_free(&v);
    }
}

/* --------------------------------------------------- lines, GPT-2 */

static const char *GPT2_CFG =
    "{\"eos_token\": \"<|endoftext|>\", \"chat_template\": \"{% for m in messages %}{{ '<|' + m['role'] + "
    "'|>\\n' + m['content'] + eos_token + '\\n' }}{% endfor %}\"}";

static void test_lines_gpt2(void) {
    char dir[512];
    char enc_json[512], vocab[512];
    snprintf(enc_json, sizeof enc_json, "%s/encoder.json", GPT2);
    snprintf(vocab, sizeof vocab, "%s/vocab.bpe", GPT2);
    make_tok_dir(dir, sizeof dir, "gpt2tok", enc_json, "encoder.json", vocab, "vocab.bpe", GPT2_CFG);
    ct_sft_encoder *e;
    CHECK(ct_sft_encoder_init(&e, dir, NULL) == CT_OK);
    if (!e) return;
    const ct_tokenizer *t = ct_sft_encoder_tokenizer(e);
    CHECK(ct_sft_encoder_bos(e) == 50256 && ct_sft_encoder_eos(e) == 50256);
    ct_sft_example ex = {0};
    ct_tokens want = {0};
    uint8_t mask[512];

    /* prompt/completion: <|endoftext|> prompt completion <|endoftext|> */
    if (line_ok(e, "{\"prompt\": \"What is 2+2?\", \"completion\": \" It is 4.\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 50256, 0);
        whole(&want, mask, t, "What is 2+2?", " It is 4.");
        one(&want, mask, 50256, 1);
        check_example("gpt2 prompt/completion", &ex, &want, mask);
        CHECK(ex.kind == CT_SFT_KIND_PROMPT_COMPLETION);
    }
    /* special-token text in a prompt stays text */
    if (line_ok(e, "{\"prompt\": \"<|endoftext|>\", \"completion\": \"x\", \"id\": 7}", &ex)) {
        want.n = 0;
        one(&want, mask, 50256, 0);
        whole(&want, mask, t, "<|endoftext|>", "x");
        one(&want, mask, 50256, 1);
        check_example("gpt2 prompt with special text", &ex, &want, mask);
    }
    /* an empty prompt: the document token still comes first */
    if (line_ok(e, "{\"prompt\": \"\", \"completion\": \"Only this.\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 50256, 0);
        whole(&want, mask, t, "", "Only this.");
        one(&want, mask, 50256, 1);
        check_example("gpt2 empty prompt", &ex, &want, mask);
    }
    /* Alpaca with and without input, the prompts written out here */
    if (line_ok(e, "{\"instruction\": \"Add.\", \"input\": \"2 and 3\", \"output\": \"5\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 50256, 0);
        whole(&want, mask, t,
              "Below is an instruction that describes a task, paired with an input that provides further context. "
              "Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n"
              "2 and 3\n\n### Response:\n", "5");
        one(&want, mask, 50256, 1);
        check_example("gpt2 alpaca with input", &ex, &want, mask);
        CHECK(ex.kind == CT_SFT_KIND_ALPACA);
    }
    static const char *const no_input[] = {"{\"instruction\": \"Say hi.\", \"input\": \"\", \"output\": \"Hi!\"}",
                                           "{\"instruction\": \"Say hi.\", \"output\": \"Hi!\"}",
                                           "{\"instruction\": \"Say hi.\", \"input\": null, \"output\": \"Hi!\"}"};
    for (int i = 0; i < 3; i++) {
        if (!line_ok(e, no_input[i], &ex)) continue;
        want.n = 0;
        one(&want, mask, 50256, 0);
        whole(&want, mask, t,
              "Below is an instruction that describes a task. Write a response that appropriately completes the "
              "request.\n\n### Instruction:\nSay hi.\n\n### Response:\n", "Hi!");
        one(&want, mask, 50256, 1);
        check_example("gpt2 alpaca without input", &ex, &want, mask);
    }
    /* messages: <|system|>\n...<|endoftext|>\n<|user|>\n...; the assistant's
     * content and its <|endoftext|> count. Pieces cut where GPT-2's
     * pre-tokeniser cuts, so their encodings concatenate to the whole's. */
    if (line_ok(e, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                   "\"content\": \"Hi there\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": "
                   "\"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"See you.\"}]}", &ex)) {
        want.n = 0;
        piece(&want, mask, t, "<|system|>\nBe brief.", 0);
        one(&want, mask, 50256, 0);
        piece(&want, mask, t, "\n<|user|>\nHi there", 0);
        one(&want, mask, 50256, 0);
        piece(&want, mask, t, "\n<|assistant|>\n", 0);
        piece(&want, mask, t, "Hello!", 1);
        one(&want, mask, 50256, 1);
        piece(&want, mask, t, "\n<|user|>\nBye", 0);
        one(&want, mask, 50256, 0);
        piece(&want, mask, t, "\n<|assistant|>\n", 0);
        piece(&want, mask, t, "See you.", 1);
        one(&want, mask, 50256, 1);
        piece(&want, mask, t, "\n", 0);
        check_example("gpt2 messages", &ex, &want, mask);
        CHECK(ex.kind == CT_SFT_KIND_MESSAGES);
        /* the pieces' concatenation is the whole text's encoding */
        ct_tokens whole = {0};
        const char *text = "<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi there<|endoftext|>\n<|assistant|>\n"
                           "Hello!<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\nSee you.<|endoftext|>\n";
        CHECK(ct_tokenizer_encode(t, NULL, text, strlen(text), CT_TOK_ADDED_TOKENS, &whole) == CT_OK);
        CHECK(same_ids(&whole, want.ids, want.n));
        ct_tokens_free(&whole);
    }
    /* a conversation that starts with the assistant: its first token is not marked */
    if (line_ok(e, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"First\"}]}", &ex)) {
        CHECK(ex.mask[0] == 0);
        size_t c = 0;
        for (size_t i = 0; i < ex.ids.n; i++) c += ex.mask[i];
        CHECK(c > 0);
    }

    /* bad lines, each with its reason */
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"not json", "not valid JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"text\": \"x\"}", "no \"prompt\"/\"completion\""},
        {"{\"prompt\": \"a\"}", "no field \"completion\""},
        {"{\"completion\": \"a\"}", "no field \"prompt\""},
        {"{\"prompt\": 1, \"completion\": \"a\"}", "field \"prompt\" is not a string"},
        {"{\"prompt\": \"a\", \"completion\": [\"b\"]}", "field \"completion\" is not a string"},
        {"{\"prompt\": \"a\", \"completion\": \"\"}", "field \"completion\" is empty"},
        {"{\"instruction\": \"a\", \"output\": \"\"}", "field \"output\" is empty"},
        {"{\"instruction\": \"a\", \"input\": 3, \"output\": \"b\"}", "field \"input\" is not a string"},
        {"{\"output\": \"b\"}", "no field \"instruction\""},
        {"{\"prompt\": \"a\", \"completion\": \"b\", \"messages\": []}", "more than one kind"},
        {"{\"instruction\": \"a\", \"output\": \"b\", \"completion\": \"c\"}", "more than one kind"},
        {"{\"messages\": \"hi\"}", "not an array"},
        {"{\"messages\": []}", "is empty"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "no assistant message"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": 3}]}", "messages[0].content is not a string"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"b\"}]}",
         "messages[1].role is missing"},
        {"{\"messages\": [1]}", "messages[0] is not an object"},
        {"{\"prompt\": \"a\\u0000b\", \"completion\": \"c\"}", "\\u0000"},
        {"{\"prompt\": \"a\xff\", \"completion\": \"c\"}", "invalid UTF-8 at byte 13"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bool isbad = false;
        char why[256] = "";
        ct_error_clear();
        ct_status st = ct_sft_encode_line(e, bad[i].line, strlen(bad[i].line), &ex, &isbad, why, sizeof why);
        CHECK_MSG(st == CT_OK && isbad && strstr(why, bad[i].why) && ex.ids.n == 0, "%s: st %d bad %d why \"%s\"",
                  bad[i].line, (int)st, (int)isbad, why);
        CHECK(ct_last_status() == CT_OK); /* a bad line leaves no error behind */
    }
    ct_sft_encoder_free(e);

    /* messages with no template to be had: an error of the run, not a bad line */
    CHECK(ct_sft_encoder_init(&e, GPT2, NULL) == CT_OK);
    if (e) {
        bool isbad = false;
        char why[256];
        const char *l = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                        "\"content\": \"b\"}]}";
        ct_status st = ct_sft_encode_line(e, l, strlen(l), &ex, &isbad, why, sizeof why);
        CHECK_MSG(st != CT_OK && !isbad && strstr(ct_last_error(), "chat template"), "%d: %s", (int)st,
                  ct_last_error());
        /* prompt/completion still fine */
        CHECK(line_ok(e, "{\"prompt\": \"a\", \"completion\": \"b\"}", &ex));
        ct_sft_encoder_free(e);
    }
    /* --chat-template FILE instead */
    char tf[512];
    ct_tmpdir_join(tf, sizeof tf, tmp, "tpl.json");
    CHECK(write_file(tf, GPT2_CFG));
    CHECK(ct_sft_encoder_init(&e, GPT2, tf) == CT_OK);
    if (e) {
        CHECK(ct_sft_encoder_template(e) != NULL);
        CHECK(line_ok(e, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                         "\"content\": \"b\"}]}", &ex));
        ct_sft_encoder_free(e);
    }
    ct_tmpdir_join(tf, sizeof tf, tmp, "no-such-template.jinja");
    CHECK(ct_sft_encoder_init(&e, GPT2, tf) != CT_OK && e == NULL);
    ct_sft_example_free(&ex);
    ct_tokens_free(&want);
}

/* --------------------------------------------------- lines, LLaMA */

static const char *LLAMA2_CFG =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"chat_template\": \"{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'].strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'].strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}\"}";
static const char *ZEPHYR_CFG =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"chat_template\": \"{% for message in messages %}\\n"
    "{% if message['role'] == 'user' %}\\n{{ '<|user|>\\n' + message['content'] + eos_token }}\\n"
    "{% elif message['role'] == 'system' %}\\n{{ '<|system|>\\n' + message['content'] + eos_token }}\\n"
    "{% elif message['role'] == 'assistant' %}\\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\\n"
    "{% endif %}{% endfor %}\"}";

/* The mask of ids over text: the tokens whose reference byte ranges meet
 * [s, t) for some span. */
static void ref_mask(const ct_tokenizer *t, const int32_t *ids, size_t n, const size_t *spans, int n_spans,
                     uint8_t *mask) {
    size_t *off = malloc((n + 1) * sizeof *off);
    ref_offsets(t, ids, n, off);
    for (size_t i = 0; i < n; i++) {
        mask[i] = 0;
        for (int k = 0; k < n_spans; k++)
            if (off[i] < spans[2 * k + 1] && (off[i + 1] > spans[2 * k] || (off[i] == off[i + 1] && off[i] >= spans[2 * k])))
                mask[i] = 1;
    }
    mask[0] = 0;
    free(off);
}

static void test_lines_llama(void) {
    char dir[512];
    make_tok_dir(dir, sizeof dir, "llama2tok", LLAMA_JSON, "tokenizer.json", NULL, NULL, LLAMA2_CFG);
    ct_sft_encoder *e;
    CHECK(ct_sft_encoder_init(&e, dir, NULL) == CT_OK);
    if (!e) return;
    const ct_tokenizer *t = ct_sft_encoder_tokenizer(e);
    CHECK(ct_sft_encoder_bos(e) == 1 && ct_sft_encoder_eos(e) == 2);
    test_offsets(t, "llama");
    ct_sft_example ex = {0};
    ct_tokens want = {0};
    uint8_t mask[512];

    /* prompt and completion encoded as one text: "Paris" right after "A:" is "Par" "is", with no
     * "▁" of its own (encoded apart it was "▁Paris", which the whole text never has) */
    if (line_ok(e, "{\"prompt\": \"Q: capital of France?\\nA:\", \"completion\": \"Paris\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 1, 0);
        whole(&want, mask, t, "Q: capital of France?\nA:", "Paris");
        one(&want, mask, 2, 1);
        check_example("llama prompt/completion", &ex, &want, mask);
        CHECK(ex.ids.n == 13 && ex.ids.ids[10] == 2177 && ex.ids.ids[11] == 275 && ex.mask[10] && !ex.mask[9]);
    }
    /* issue #33: " vehicle" after "?\n" is "▁vehicle" (19716), not "▁" (29871) + "▁vehicle" */
    if (line_ok(e, "{\"prompt\": \"What is a car?\\n\", \"completion\": \" vehicle\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 1, 0);
        whole(&want, mask, t, "What is a car?\n", " vehicle");
        one(&want, mask, 2, 1);
        check_example("llama vehicle", &ex, &want, mask);
        CHECK(ex.ids.n >= 3 && ex.ids.ids[ex.ids.n - 2] == 19716 && ex.ids.ids[ex.ids.n - 3] == 13 &&
              ex.mask[ex.ids.n - 2] && !ex.mask[ex.ids.n - 3]);
    }
    /* a prompt ending in a space: "▁Paris" holds the completion's first byte, and counts */
    if (line_ok(e, "{\"prompt\": \"The capital is \", \"completion\": \"Paris\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 1, 0);
        whole(&want, mask, t, "The capital is ", "Paris");
        one(&want, mask, 2, 1);
        check_example("llama straddling token", &ex, &want, mask);
        CHECK(ex.ids.n >= 2 && ex.ids.ids[ex.ids.n - 2] == 3681 && ex.mask[ex.ids.n - 2]);
    }
    if (line_ok(e, "{\"instruction\": \"Name a color.\", \"output\": \"Blue.\"}", &ex)) {
        want.n = 0;
        one(&want, mask, 1, 0);
        whole(&want, mask, t,
              "Below is an instruction that describes a task. Write a response that appropriately completes the "
              "request.\n\n### Instruction:\nName a color.\n\n### Response:\n", "Blue.");
        one(&want, mask, 2, 1);
        check_example("llama alpaca", &ex, &want, mask);
    }
    /* LLaMA-2: <s>[INST] Hello [/INST] Hi there </s><s>[INST] Bye [/INST] See you </s>.
     * The ids: the pieces between the added tokens, each encoded alone (each
     * gets a "▁"); the mask: tokens meeting "Hi there </s>" and "See you </s>"
     * by the decoded prefixes' byte ranges, so "▁Hi" (whose space is before
     * the span) counts. */
    if (line_ok(e, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}, {\"role\": \"assistant\", \"content\": "
                   "\" Hi there\"}, {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": "
                   "\"See you\"}]}", &ex)) {
        want.n = 0;
        one(&want, mask, 1, 0);
        piece(&want, mask, t, "[INST] Hello [/INST] Hi there ", 0);
        one(&want, mask, 2, 0);
        one(&want, mask, 1, 0);
        piece(&want, mask, t, "[INST] Bye [/INST] See you ", 0);
        one(&want, mask, 2, 0);
        const char *text = "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Bye [/INST] See you </s>";
        const char *a = strstr(text, "Hi there"), *b = strstr(text, "See you");
        size_t spans[4] = {(size_t)(a - text), (size_t)(a - text) + strlen("Hi there </s>"), (size_t)(b - text),
                           (size_t)(b - text) + strlen("See you </s>")};
        ref_mask(t, want.ids, want.n, spans, 2, mask);
        check_example("llama-2 messages", &ex, &want, mask);
        /* "▁Hi" counts, the "]" before it does not */
        ct_tokens hi = enc(t, "Hi");
        size_t at = 0;
        while (at < ex.ids.n && ex.ids.ids[at] != hi.ids[0]) at++;
        CHECK(at < ex.ids.n && ex.mask[at] == 1 && ex.mask[at - 1] == 0);
        ct_tokens_free(&hi);
    }
    ct_sft_encoder_free(e);

    /* Zephyr/TinyLlama: <|user|>\nHi</s>\n<|assistant|>\nHello</s>\n (no BOS: the template writes none) */
    make_tok_dir(dir, sizeof dir, "zephyrtok", LLAMA_JSON, "tokenizer.json", NULL, NULL, ZEPHYR_CFG);
    CHECK(ct_sft_encoder_init(&e, dir, NULL) == CT_OK);
    if (!e) return;
    t = ct_sft_encoder_tokenizer(e);
    if (line_ok(e, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, {\"role\": \"user\", "
                   "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello, friend\"}]}", &ex)) {
        want.n = 0;
        piece(&want, mask, t, "<|system|>\nBe kind.", 0);
        one(&want, mask, 2, 0);
        piece(&want, mask, t, "\n<|user|>\nHi", 0);
        one(&want, mask, 2, 0);
        piece(&want, mask, t, "\n<|assistant|>\nHello, friend", 0);
        one(&want, mask, 2, 0);
        piece(&want, mask, t, "\n", 0);
        const char *text = "<|system|>\nBe kind.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello, friend</s>\n";
        const char *a = strstr(text, "Hello, friend");
        size_t spans[2] = {(size_t)(a - text), (size_t)(a - text) + strlen("Hello, friend</s>")};
        ref_mask(t, want.ids, want.n, spans, 1, mask);
        check_example("zephyr messages", &ex, &want, mask);
        CHECK(ex.ids.ids[0] != 1);
        size_t last = ex.ids.n - 1; /* the last </s> counts, the "\n" after it does not */
        while (last > 0 && ex.ids.ids[last] != 2) last--;
        CHECK(ex.mask[last] == 1 && last + 1 < ex.ids.n);
        for (size_t k = last + 1; k < ex.ids.n; k++) CHECK(ex.mask[k] == 0);
    }
    ct_sft_encoder_free(e);
    ct_sft_example_free(&ex);
    ct_tokens_free(&want);
}

/* ------------------------------------------------------------ runs */

/* Every example of split in out: tokens, masks, boundaries, concatenated. */
typedef struct split_read {
    ct_tokens ids;
    uint8_t mask[8192];
    int64_t starts[256]; /* example starts, in the concatenation */
    int n_examples, n_shards;
    bool ok;
} split_read;

static void read_split(split_read *r, const char *out, const char *split) {
    memset(r, 0, sizeof *r);
    r->ok = true;
    for (int i = 0;; i++) {
        char bin[512], sft[512];
        snprintf(bin, sizeof bin, "%s/%s_%06d.bin", out, split, i);
        if (ct_tmpdir_size(bin) < 0) break;
        CHECK(ct_sft_sidecar_path(sft, sizeof sft, bin) == CT_OK);
        ct_shard *sh = NULL;
        ct_sft_shard *s = NULL;
        if (ct_shard_open(&sh, bin) || ct_sft_open(&s, sft, sh)) {
            CHECK_MSG(0, "%s: %s", bin, ct_last_error());
            r->ok = false;
            ct_shard_close(sh);
            break;
        }
        r->n_shards++;
        int64_t base = (int64_t)r->ids.n;
        for (int64_t k = 0; k < ct_sft_num_examples(s); k++) {
            int64_t a, b;
            ct_sft_example_range(s, k, &a, &b);
            r->starts[r->n_examples++] = base + a;
        }
        CHECK(ct_sft_read_mask(s, 0, ct_sft_num_tokens(s), r->mask + base) == CT_OK);
        for (int64_t k = 0; k < ct_shard_ntokens(sh); k++) ct_tokens_push(&r->ids, (int32_t)ct_shard_token(sh, k));
        ct_sft_close(s);
        ct_shard_close(sh);
    }
    r->starts[r->n_examples] = (int64_t)r->ids.n;
}

static ct_status run(const char *out, const char *const *inputs, int n, ct_sft_opts *o, ct_sft_report *rep) {
    o->out_dir = out;
    o->inputs = inputs;
    o->n_inputs = n;
    return ct_sft_prepare_run(o, rep);
}

static void test_runs(void) {
    char dir[512], in[512], out[512];
    char enc_json[512], vocab[512];
    snprintf(enc_json, sizeof enc_json, "%s/encoder.json", GPT2);
    snprintf(vocab, sizeof vocab, "%s/vocab.bpe", GPT2);
    make_tok_dir(dir, sizeof dir, "gpt2run", enc_json, "encoder.json", vocab, "vocab.bpe", GPT2_CFG);
    static const char *const lines[] = {
        "{\"prompt\": \"One two three four five six seven eight nine ten\", \"completion\": \" eleven twelve\"}",
        "{\"instruction\": \"Count.\", \"output\": \"1 2 3\"}",
        ("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
         "\"Hello there, how are you doing today?\"}]}"),
        "",
        "{\"prompt\": \"short\", \"completion\": \" answer that is rather long, longer than the prompt by far\"}",
        "{\"prompt\": \"p\", \"completion\": \"c\"}",
    };
    char text[2048] = "";
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        strcat(text, lines[i]);
        strcat(text, "\n");
    }
    ct_tmpdir_join(in, sizeof in, tmp, "run.jsonl");
    CHECK(write_file(in, text));
    const char *inputs[] = {in};

    /* what each line gives on its own */
    ct_sft_encoder *e;
    CHECK(ct_sft_encoder_init(&e, dir, NULL) == CT_OK);
    if (!e) return;
    ct_sft_example ex[5];
    memset(ex, 0, sizeof ex);
    int li[5] = {0, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++) line_ok(e, lines[li[i]], &ex[i]);
    ct_sft_encoder_free(e);

    /* whole, in small shards: every example whole in one shard, in order */
    ct_tmpdir_join(out, sizeof out, tmp, "run1");
    ct_sft_opts o = {0};
    o.tokenizer = dir;
    o.shard_tokens = 40;
    ct_sft_report rep;
    CHECK(run(out, inputs, 1, &o, &rep) == CT_OK);
    CHECK(rep.examples == 5 && rep.bad_lines == 0 && rep.truncated == 0 && rep.dropped == 0);
    CHECK(rep.kind_examples[CT_SFT_KIND_PROMPT_COMPLETION] == 3 && rep.kind_examples[CT_SFT_KIND_ALPACA] == 1 &&
          rep.kind_examples[CT_SFT_KIND_MESSAGES] == 1);
    split_read *r = malloc(sizeof *r);
    read_split(r, out, "train");
    CHECK(r->ok && r->n_examples == 5 && r->n_shards == rep.train_shards && r->n_shards >= 3);
    int64_t counted = 0;
    for (int i = 0; i < 5 && i < r->n_examples; i++) {
        int64_t a = r->starts[i], n = r->starts[i + 1] - a;
        CHECK_MSG(n == (int64_t)ex[i].ids.n && !memcmp(r->ids.ids + a, ex[i].ids.ids, (size_t)n * 4) &&
                      !memcmp(r->mask + a, ex[i].mask, (size_t)n),
                  "example %d read back differs", i);
        for (int64_t k = 0; k < n; k++) counted += ex[i].mask[k];
    }
    CHECK(rep.counted_tokens == counted && rep.tokens == (int64_t)r->ids.n);
    ct_tokens_free(&r->ids);
    char mp[600];
    snprintf(mp, sizeof mp, "%s/manifest.json", out);
    CHECK(ct_tmpdir_size(mp) > 0);

    /* a rerun without overwrite is refused; with it, replaced */
    ct_status st = run(out, inputs, 1, &o, &rep);
    CHECK(st == CT_ERR_ARG && strstr(ct_last_error(), "already holds"));
    o.overwrite = true;

    /* --max-len 12, truncate: the first 12 tokens of longer ones, counted */
    o.max_len = 12;
    o.shard_tokens = 0;
    CHECK(run(out, inputs, 1, &o, &rep) == CT_OK);
    int trunc = 0, drop = 0;
    for (int i = 0; i < 5; i++) {
        if ((int64_t)ex[i].ids.n <= 12) continue;
        bool any = false;
        for (int k = 0; k < 12; k++) any |= ex[i].mask[k] != 0;
        if (any) trunc++;
        else drop++;
    }
    CHECK(trunc > 0 && drop > 0); /* the long prompt leaves nothing counted: dropped */
    CHECK_MSG(rep.truncated == trunc && rep.dropped == drop && rep.examples == 5 - drop, "truncated %lld dropped %lld",
              (long long)rep.truncated, (long long)rep.dropped);
    read_split(r, out, "train");
    CHECK(r->n_examples == 5 - drop && r->n_shards == 1);
    for (int i = 0, j = 0; i < 5 && j < r->n_examples; i++) {
        bool any = false;
        for (size_t k = 0; k < 12 && k < ex[i].ids.n; k++) any |= ex[i].mask[k] != 0;
        if ((int64_t)ex[i].ids.n > 12 && !any) continue;
        int64_t a = r->starts[j], n = r->starts[j + 1] - a, want = ex[i].ids.n < 12 ? (int64_t)ex[i].ids.n : 12;
        CHECK(n == want && !memcmp(r->ids.ids + a, ex[i].ids.ids, (size_t)n * 4) &&
              !memcmp(r->mask + a, ex[i].mask, (size_t)n));
        j++;
    }
    ct_tokens_free(&r->ids);
    /* drop: every longer one goes */
    o.max_len_policy = CT_SFT_LEN_DROP;
    CHECK(run(out, inputs, 1, &o, &rep) == CT_OK);
    CHECK(rep.truncated == 0 && rep.dropped == trunc + drop && rep.examples == 5 - trunc - drop);
    o.max_len = 0;

    /* validation: the first 2 examples */
    o.val_examples = 2;
    CHECK(run(out, inputs, 1, &o, &rep) == CT_OK);
    CHECK(rep.val_examples == 2 && rep.train_examples == 3 && rep.val_shards == 1);
    read_split(r, out, "val");
    CHECK(r->n_examples == 2 && r->ids.n == ex[0].ids.n + ex[1].ids.n);
    ct_tokens_free(&r->ids);
    /* by hash of the line, as plain prepare chooses documents */
    o.val_examples = 0;
    o.val_fraction = 0.5;
    int want_val = 0;
    for (int i = 0; i < 5; i++)
        want_val += (double)(XXH3_64bits(lines[li[i]], strlen(lines[li[i]])) >> 11) * 0x1p-53 < 0.5;
    st = run(out, inputs, 1, &o, &rep);
    CHECK_MSG(want_val > 0 && want_val < 5, "%d of 5 lines hash under 0.5", want_val); /* the lines are chosen so */
    CHECK(st == CT_OK && rep.val_examples == want_val && rep.train_examples == 5 - want_val);
    o.val_fraction = 0;

    /* bad lines: fail lists them and leaves out_dir as it was; skip skips */
    char in2[512];
    ct_tmpdir_join(in2, sizeof in2, tmp, "bad.jsonl");
    CHECK(write_file(in2, "{\"prompt\": \"a\", \"completion\": \"b\"}\nnope\n{\"prompt\": \"a\"}\n"));
    const char *inputs2[] = {in, in2};
    char out2[512];
    ct_tmpdir_join(out2, sizeof out2, tmp, "run2");
    o.overwrite = false;
    st = run(out2, inputs2, 2, &o, &rep);
    CHECK_MSG(st == CT_ERR_FORMAT && strstr(ct_last_error(), "bad.jsonl: 2 bad JSONL lines (line 2: not valid JSON; "
                                                              "line 3: no field \"completion\")"),
              "%s", ct_last_error());
    CHECK(ct_tmpdir_size(out2) < 0); /* made by the run, removed by it */
    o.overwrite = true;
    read_split(r, out, "train");
    int before = r->n_examples;
    size_t before_tokens = r->ids.n;
    ct_tokens_free(&r->ids);
    st = run(out, inputs2, 2, &o, &rep); /* an existing out_dir keeps its files */
    CHECK(st == CT_ERR_FORMAT && ct_tmpdir_size(mp) > 0);
    read_split(r, out, "train");
    CHECK(r->ok && r->n_examples == before && r->ids.n == before_tokens && before > 0);
    ct_tokens_free(&r->ids);
    o.skip_bad_lines = true;
    CHECK(run(out2, inputs2, 2, &o, &rep) == CT_OK && rep.bad_lines == 2 && rep.examples == 6);
    /* nothing left at all */
    const char *inputs3[] = {in2};
    char in3[512];
    ct_tmpdir_join(in3, sizeof in3, tmp, "allbad.jsonl");
    CHECK(write_file(in3, "nope\n"));
    inputs3[0] = in3;
    st = run(out2, inputs3, 1, &o, &rep);
    CHECK(st == CT_ERR_ARG && strstr(ct_last_error(), "no example"));
    /* every example to validation */
    o.val_examples = 100;
    st = run(out2, inputs, 1, &o, &rep);
    CHECK(st == CT_ERR_ARG && strstr(ct_last_error(), "validation"));
    o.val_examples = 0;
    /* options */
    o.val_examples = 1;
    o.val_fraction = 0.1;
    CHECK(run(out2, inputs, 1, &o, &rep) == CT_ERR_ARG);
    o.val_examples = 0;
    o.val_fraction = 0;
    o.max_len = -1;
    CHECK(run(out2, inputs, 1, &o, &rep) == CT_ERR_ARG);
    free(r);
    for (int i = 0; i < 5; i++) ct_sft_example_free(&ex[i]);
}

int main(void) {
    ct_tokenizer *g;
    if (ct_tokenizer_load(&g, GPT2) || ct_tmpdir_size(LLAMA_JSON) <= 0) {
        fprintf(stderr, "test_sft: %s or %s missing: %s\n  run scripts/fetch_data.sh (bootstrap does)\n", GPT2,
                LLAMA_JSON, ct_last_error());
        return 1;
    }
    if (!ct_tmpdir_make(tmp, sizeof tmp, "sft")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_sidecar();
    test_offsets(g, "gpt2");
    ct_tokenizer_free(g);
    test_lines_gpt2();
    test_lines_llama();
    test_runs();
    ct_tmpdir_remove(tmp);
    return ct_test_result("test_sft");
}
