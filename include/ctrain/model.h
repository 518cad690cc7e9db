/*
 * The transformer family: one model code with switches (norm, positions, MLP,
 * KV heads, biases, q/k norms, head size, RoPE scaling, tied head). Two
 * tensor layouts: GPT-2 (LayerNorm, learned positions, GELU, biases, tied
 * head) and LLaMA (RMSNorm, rotary positions in Hugging Face's rotate_half
 * convention, SwiGLU, grouped-query attention, untied head unless
 * tie_word_embeddings). The LLaMA layout carries the families that share its
 * tensor names, told apart by ct_family: Llama 2/3.x (RoPE scaling "llama3",
 * attention biases), Mistral (no sliding window), Qwen2/2.5 (q, k and v
 * biases), Qwen3 (RMSNorm over each q and k head, an explicit head size) and
 * Gemma 3's text models (q/k norms, norms scaling by 1 + weight before and
 * after the attention and the MLP, GeGLU, scaled embeddings, sliding-window
 * layers with their own RoPE base). Other mixes of the switches are refused: they have no Hugging Face names to
 * load or save.
 *
 * Memory: parameters, gradients live in flat buffers laid out by a parameter
 * table built from the config; activations in one arena sized by
 * ct_model_plan_memory_opts before the first step (ct_model_reserve), for a
 * recompute policy and an activation storage dtype (ct_model_opts). Nothing
 * allocates inside forward, backward or decode, and reserve makes every page
 * resident, so a step takes no page faults either.
 */
#ifndef CT_MODEL_H
#define CT_MODEL_H

#include "ctrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_arch { CT_ARCH_GPT2 = 0, CT_ARCH_LLAMA = 1, CT_ARCH_COUNT } ct_arch;
typedef enum ct_norm { CT_NORM_LAYERNORM = 0, CT_NORM_RMSNORM = 1, CT_NORM_COUNT } ct_norm;
typedef enum ct_posenc { CT_POS_LEARNED = 0, CT_POS_ROPE = 1, CT_POS_COUNT } ct_posenc;
typedef enum ct_mlp {
    CT_MLP_GELU = 0,   /* GPT-2: c_proj(gelu_tanh(c_fc(x))) */
    CT_MLP_SWIGLU = 1, /* LLaMA: down(silu(gate(x)) * up(x)) */
    CT_MLP_GEGLU = 2,  /* Gemma: down(gelu_tanh(gate(x)) * up(x)) */
    CT_MLP_COUNT
} ct_mlp;
/* The Hugging Face model_type a config is read from and written back as
 * (config.json, architectures). Serialized by name (ct_model_family_name):
 * append only. */
typedef enum ct_family {
    CT_FAMILY_GPT2 = 0,    /* "gpt2", GPT2LMHeadModel */
    CT_FAMILY_LLAMA = 1,   /* "llama", LlamaForCausalLM (Llama 1-3.x, TinyLlama, SmolLM2) */
    CT_FAMILY_MISTRAL = 2, /* "mistral", MistralForCausalLM (no sliding window) */
    CT_FAMILY_QWEN2 = 3,   /* "qwen2", Qwen2ForCausalLM (Qwen2, Qwen2.5) */
    CT_FAMILY_QWEN3 = 4,   /* "qwen3", Qwen3ForCausalLM */
    CT_FAMILY_GEMMA3 = 5,  /* "gemma3_text", Gemma3ForCausalLM (Gemma 3 270M, 1B) */
    CT_FAMILY_COUNT
} ct_family;
/* RoPE frequency scaling (rope_scaling's rope_type). */
typedef enum ct_rope_type {
    CT_ROPE_DEFAULT = 0, /* inv_freq_i = theta^(-2i/HS) */
    CT_ROPE_LINEAR = 1,  /* inv_freq / factor */
    CT_ROPE_LLAMA3 = 2,  /* Llama 3.1's: low frequencies / factor, high ones kept,
                          * the band between interpolated */
    CT_ROPE_COUNT
} ct_rope_type;
typedef struct ct_rope_scaling {
    ct_rope_type type;
    float factor;           /* linear, llama3 */
    float low_freq_factor;  /* llama3 */
    float high_freq_factor; /* llama3 */
    int original_max_pos;   /* llama3: original_max_position_embeddings */
} ct_rope_scaling;

typedef struct ct_model_config {
    ct_arch arch;
    ct_norm norm;
    ct_posenc pos;
    ct_mlp mlp;
    int n_layer;
    int n_head;
    int n_kv_head;  /* == n_head for GPT-2 */
    int n_embd;     /* C */
    int n_ffn;      /* MLP hidden size, 4*C for GPT-2 */
    int vocab_size; /* V */
    int n_ctx;      /* max sequence length */
    bool bias;      /* linear and norm biases */
    bool tied_head; /* lm_head shares wte */
    float norm_eps;
    float rope_theta;
    /* Dropout probabilities in [0, 1), applied only by ct_model_forward_backward
     * (training), where Hugging Face's modules apply them: embd_pdrop on
     * wte + wpe, resid_pdrop on the output of each block's attention c_proj and
     * MLP c_proj (GPT-2), attn_pdrop on the attention probabilities after the
     * softmax (GPT-2's attn_pdrop, LLaMA's attention_dropout). A LLaMA has no
     * embedding or residual dropout (both 0). 0 from ct_model_config_gpt2 /
     * _llama and the presets; config.json's values (or GPT2Config's default
     * 0.1, LlamaConfig's 0.0) from a Hugging Face directory. */
    float embd_pdrop;
    float resid_pdrop;
    float attn_pdrop;
    /* The LLaMA layout's family switches; all zero (the LLaMA of
     * ct_model_config_llama) unless a family or a preset sets them. */
    ct_family family;
    int head_dim;     /* HS; 0: n_embd / n_head (see ct_model_head_dim) */
    bool qkv_bias;    /* biases on q_proj, k_proj, v_proj (Qwen2; attention_bias) */
    bool o_bias;      /* a bias on o_proj (attention_bias) */
    bool qk_norm;     /* RMSNorm (weight (HS), norm_eps) over each q and k head
                       * before RoPE: q_norm, k_norm (Qwen3, Gemma 3) */
    ct_rope_scaling rope_scaling;
    /* Gemma 3's switches */
    bool norm_offset;   /* every RMSNorm scales by 1 + weight (the stored weight) */
    bool sandwich_norm; /* a norm also after the attention and after the MLP, before
                         * each residual add (post_attention_layernorm,
                         * post_feedforward_layernorm; pre_feedforward_layernorm is the
                         * MLP's input norm) */
    bool embed_scale;   /* the embeddings times sqrt(n_embd) (in fp32) */
    int sliding_window; /* W > 0: sliding layers' queries see their last W keys (their
                         * own included); 0: full attention everywhere */
    int sliding_pattern;/* P > 0: every P-th layer (l + 1 multiple of P) is global, the
                         * others slide; 0: every layer slides (when W > 0) */
    float rope_local_theta; /* RoPE base of the sliding layers (rope_local_base_freq);
                             * their RoPE is unscaled. 0: rope_theta */
    /* Special token ids config.json carries, kept so a saved model says what
     * generation starts and stops at: bos_token_id, eos_token_id (one, or up
     * to 4 as Llama 3's list; n_eos 0: none), pad_token_id. */
    bool has_bos, has_pad;
    int bos_token_id, pad_token_id;
    int eos_token_id[4];
    int n_eos;
} ct_model_config;

/* The head size of cfg: head_dim, or n_embd / n_head when it is 0. */
CT_API int ct_model_head_dim(const ct_model_config *cfg);
/* Whether layer l of cfg attends through a sliding window (sliding_window,
 * sliding_pattern). */
CT_API bool ct_model_layer_slides(const ct_model_config *cfg, int l);
/* The RoPE inverse frequencies of cfg's sliding layers (HS/2 floats): those
 * of rope_local_theta, unscaled. */
CT_API void ct_model_rope_inv_freq_local(const ct_model_config *cfg, float *out);
/* Make a LLaMA-layout config (ct_model_config_llama's) family f, with that
 * family's switches and defaults: Qwen2's q,k,v biases, Qwen3's and Gemma's
 * q/k norms, Gemma's norms, GeGLU, embedding scale, layer pattern and local
 * RoPE base (its window stays the caller's: 0, none). Sizes are untouched. */
CT_API void ct_model_config_family(ct_model_config *cfg, ct_family f);
/* The model_type of a family ("gpt2", "llama", "mistral", "qwen2", "qwen3",
 * "gemma3_text"; "?" outside the enum) and the reverse (false for a name no
 * family has). Static strings. */
CT_API const char *ct_model_family_name(ct_family f);
CT_API bool ct_model_family_from_name(const char *name, ct_family *out);
/* The RoPE inverse frequencies of cfg into out (HS/2 floats), computed as
 * Hugging Face computes them in fp32: theta^(-2i/HS), then the scaling of
 * cfg->rope_scaling. The rope kernels turn pair i of a head at position p by
 * the fp32 angle p * out[i]. */
CT_API void ct_model_rope_inv_freq(const ct_model_config *cfg, float *out);

/* Fill cfg from a preset name: "gpt2" (124M), "gpt2-medium" (350M),
 * "gpt2-large", "gpt2-xl", "gpt2-demo" (~7M, the demo), "gpt2-tiny" (tests),
 * "tinyllama-1.1b" (TinyLlama-1.1B's shape: 22 layers, 32 heads, 4 KV heads,
 * 2048 channels, ffn 5632, vocab 32000, ctx 2048), "llama-demo" (~3M),
 * "llama-tiny" (tests); the shapes of the published models "llama3.2-1b",
 * "smollm2-135m", "smollm2-360m", "qwen2.5-0.5b", "qwen2.5-1.5b",
 * "qwen3-0.6b", "qwen3-1.7b", "mistral-7b", and a small test size of each
 * family: "llama3-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny".
 * CT_ERR_ARG for an unknown name (the message lists the presets). Writes
 * *cfg only on success. */
CT_API ct_status ct_model_config_preset(ct_model_config *cfg, const char *name);
/* GPT-2 defaults for the given sizes. Writes *cfg. */
CT_API void ct_model_config_gpt2(ct_model_config *cfg, int n_layer, int n_head, int n_embd,
                                 int vocab_size, int n_ctx);
/* LLaMA defaults for the given sizes (HF LlamaConfig's): RMSNorm eps 1e-5,
 * rope_theta 10000, no biases, untied head, family llama, no RoPE scaling,
 * no special token ids. Writes *cfg. */
CT_API void ct_model_config_llama(ct_model_config *cfg, int n_layer, int n_head, int n_kv_head,
                                  int n_embd, int n_ffn, int vocab_size, int n_ctx);
/* CT_ERR_ARG naming the first broken rule: the arch's switches (the family
 * switches only on the LLaMA layout, each family's own: q/k norms only on
 * qwen3, q,k,v biases without an o_proj bias only on qwen2), positive sizes,
 * n_head dividing n_embd unless head_dim is given, n_kv_head dividing n_head,
 * an even head size and a positive rope_theta for RoPE, a RoPE scaling with
 * its fields in range, a positive norm eps, dropout probabilities in [0, 1)
 * (LLaMA: embedding and residual 0). */
CT_API ct_status ct_model_config_validate(const ct_model_config *cfg);

/* One entry of the parameter table: a tensor inside the flat buffer. */
typedef struct ct_param {
    char name[64];    /* Hugging Face name: GPT-2's without the "transformer."
                       * prefix, LLaMA's in full ("model.layers.0...", "lm_head.weight") */
    int ndim;
    int64_t shape[2]; /* our layout: Linear weights are (out, in) */
    size_t offset;    /* elements from the start of the flat buffer */
    size_t numel;
    bool decay;       /* weight decay applies (rank >= 2) */
    bool hf_conv1d;   /* stored as [in, out] by HF GPT-2 */
} ct_param;

typedef struct ct_model ct_model; /* opaque */

/* Build a model with zeroed parameters. Returns owned *out; release with
 * ct_model_free. The model borrows ctx (must outlive it). */
CT_API ct_status ct_model_init(ct_model **out, ct_ctx *ctx, const ct_model_config *cfg);
CT_API void ct_model_free(ct_model *m); /* NULL is fine */

/* GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, norm weights 1. LLaMA: every matrix N(0, 0.02) (HF's
 * initializer_range), norm weights 1. Deterministic in seed (torch-compatible
 * RNG), drawn in parameter-table order. */
CT_API ct_status ct_model_init_weights(ct_model *m, uint64_t seed);

CT_API const ct_model_config *ct_model_get_config(const ct_model *m);
CT_API int ct_model_num_params(const ct_model *m); /* entries in the table */
CT_API const ct_param *ct_model_param(const ct_model *m, int i);
CT_API const ct_param *ct_model_find_param(const ct_model *m, const char *name);
CT_API size_t ct_model_numel(const ct_model *m); /* elements of the flat buffer */
/* Tensor memory (weights, gradients, adapters) lives on the context's
 * backend: the pointers below are device memory, readable and writable on the
 * host only when ct_model_host_visible (the cpu and ref backends); otherwise
 * copy with ct_model_download / ct_model_upload (bytes; src and dst are
 * borrowed; a download waits for the work before it). */
CT_API bool ct_model_host_visible(const ct_model *m);
/* XXH64 (seed 0) of the base weights' bytes as stored (fp32, or the bf16
 * bits of a bf16 base), streamed through the backend without a full host
 * copy. CT_ERR_OOM. */
CT_API ct_status ct_model_base_xxh64(ct_model *m, uint64_t *out);
CT_API void ct_model_download(ct_model *m, void *host_dst, const void *dev_src, size_t bytes);
CT_API void ct_model_upload(ct_model *m, void *dev_dst, const void *host_src, size_t bytes);
/* Sum of squares (in double, a fixed order for a given backend and thread
 * count) of the trainable gradients [lo, lo + n) (elements); the count of
 * non-finite trainable gradients; scaling all of them by a; and making the
 * first one NaN (the debug.nan_step fault). All through the backend. */
CT_API double ct_model_grad_sumsq(ct_model *m, size_t lo, size_t n);
CT_API size_t ct_model_grad_nonfinite(ct_model *m);
CT_API void ct_model_grads_scale(ct_model *m, float a);
CT_API void ct_model_grads_poison(ct_model *m);
/* The fp32 weights; NULL when a LoRA base is stored as bf16 (see below). */
CT_API float *ct_model_params(ct_model *m);
/* The bf16 bits of a base stored as bf16, else NULL. Borrowed. */
CT_API const uint16_t *ct_model_params_bf16(const ct_model *m);
/* The gradient buffer (same layout); NULL until ct_model_reserve(..., true),
 * and always NULL with LoRA adapters (the base is frozen: see below). */
CT_API float *ct_model_grads(ct_model *m);
CT_API void ct_model_zero_grads(ct_model *m);

/* Memory levers: what the forward keeps for the backward, and in which type.
 * Serialized by name only (train.recompute, train.activation_dtype). */
typedef enum ct_recompute {
    CT_RECOMPUTE_NONE = 0,  /* keep every activation the backward reads */
    CT_RECOMPUTE_LIGHT = 1, /* drop LayerNorm outputs and the GELU output; the
                             * backward re-derives them from the kept inputs
                             * (bit-identical to none in fp32) */
    CT_RECOMPUTE_FULL = 2,  /* keep only each block's input (the residual
                             * stream) and the final norm; the backward re-runs
                             * one block's forward at a time into one shared set
                             * of fp32 buffers (bit-identical to none in fp32) */
    CT_RECOMPUTE_COUNT
} ct_recompute;
typedef enum ct_act_dtype {
    CT_ACT_FP32 = 0, /* kept activations in fp32 */
    CT_ACT_BF16 = 1, /* kept activations rounded to bf16 (nearest even); all math
                      * and the residual stream feeding the next block stay fp32,
                      * so the loss equals fp32's and only gradients see the
                      * rounding. LayerNorm statistics and attention log-sum-exps
                      * stay fp32. */
    CT_ACT_COUNT
} ct_act_dtype;
/* The matmul precision (train.precision). */
typedef enum ct_precision {
    CT_PREC_FP32 = 0, /* every GEMM in fp32 */
    CT_PREC_BF16 = 1, /* mixed precision as autocast: the linear layers' and the
                       * head's GEMM inputs rounded to bf16 (weights from bf16
                       * copies refreshed after each update), fp32 accumulation
                       * and output; fp32 master weights, gradients, moments,
                       * norms, softmax and loss */
    CT_PREC_FP16 = 2, /* the same with IEEE half (fp16) GEMM inputs and copies
                       * (torch.autocast fp16), for GPUs without bf16; the
                       * trainer scales the loss (dynamic loss scaling, as
                       * torch's GradScaler). Attention stays fp32. Needs the
                       * backend's optional fp16 entries (ref, sim, cuda) */
    CT_PREC_COUNT
} ct_precision;
typedef struct ct_model_opts {
    ct_recompute recompute;
    ct_act_dtype act_dtype;
    int head_chunk_rows; /* logits rows per chunk of the fused head; 0: ct_model_head_chunk_rows */
    ct_precision precision;
    bool fp32_logits; /* precision bf16: the head's logits fp32 where the backend would
                       * write them bf16 (the bf16 head): a numerics check's knob */
    int recompute_layers; /* CT_RECOMPUTE_FULL: the blocks re-run are the first
                           * recompute_layers (1 .. n_layer); the others keep what
                           * CT_RECOMPUTE_NONE keeps. 0: every block. Else 0. */
} ct_model_opts;
CT_API ct_model_opts ct_model_opts_default(void); /* none, fp32, automatic head chunk */
/* "none" | "light" | "full", "fp32" | "bf16"; "?" outside the enums. Static
 * strings: never freed. */
CT_API const char *ct_model_recompute_name(ct_recompute r);
CT_API const char *ct_model_act_dtype_name(ct_act_dtype d);
/* "fp32" | "bf16" | "fp16"; "?" outside the enum. Static string. */
CT_API const char *ct_model_precision_name(ct_precision p);
/* Parse train.precision's word ("fp32" | "bf16" | "fp16", borrowed) into *out
 * (untouched on error). CT_ERR_ARG naming train.precision and the choices. */
CT_API ct_status ct_model_precision_from_name(ct_precision *out, const char *name);
/* Parse the config words of train.recompute and train.activation_dtype into
 * *out (borrows both strings; *out is untouched on error). CT_ERR_ARG naming
 * the key and listing the choices when unknown. */
CT_API ct_status ct_model_opts_from_names(ct_model_opts *out, const char *recompute,
                                          const char *act_dtype);
/* Choose the policy, dtype and precision; before ct_model_reserve
 * (afterwards only the same options are accepted: CT_ERR_ARG otherwise, or
 * for values outside the enums). Precision bf16 (fp16) allocates the bf16
 * (fp16) copies of the GEMM weights here (counted under params; none with a bf16 LoRA base,
 * whose GEMMs read it as it is) and fills them from the current weights:
 * CT_ERR_OOM when that fails, CT_ERR_ARG when the model's backend has no bf16
 * (fp16) matmul, or for fp16 over a bf16 LoRA base. Borrows o. */
CT_API ct_status ct_model_set_opts(ct_model *m, const ct_model_opts *o);
/* Precision bf16 (fp16): make the bf16 (fp16) copies of the weights the GEMMs
 * read from the fp32 master weights (round to nearest even). The GEMMs never round weights
 * themselves, so call it after every change of the weights made outside the
 * model's own functions: after each optimizer update and after writing the
 * weights through ct_model_params (the model's loads, initialisation and
 * merge refresh by themselves; ct_model_upload into the weights marks them
 * stale). With LoRA adapters the base is frozen: once it is fresh this does
 * nothing. Nothing for fp32. Not thread-safe against a pass on m. */
CT_API void ct_model_refresh_weights16(ct_model *m);

/* Bytes of each memory category for a batch shape, computed without
 * allocating, by the same code that lays out the arena (exact: the arena of
 * ct_model_reserve is acts + work + scratch bytes). */
typedef struct ct_model_plan {
    size_t params;  /* fp32 weights */
    size_t grads;   /* fp32 gradients (0 when not training) */
    size_t acts;    /* activations kept for backward, in the activation dtype;
                     * plus the final norm's output and the per-row losses */
    size_t acts16;  /* of acts: ln1, ln2 and the MLP activation kept as the 16-bit
                     * operands of their GEMMs (precision bf16/fp16, training a full
                     * model, recompute none; else 0) */
    size_t work;    /* one block's fp32 work set: recomputed activations and
                     * fp32 copies of bf16 ones (0 for none/fp32) */
    size_t scratch; /* gradient activations, logits chunk */
    size_t trainable; /* bytes of the trainable parameters: params, or the adapter's */
    size_t weights16; /* precision bf16/fp16: the 16-bit copies of the GEMM weights (0 for
                       * fp32 and for a bf16 LoRA base); their input copy is in scratch */
    size_t total;
} ct_model_plan;
/* The plan for recompute none and fp32 activations. */
CT_API ct_status ct_model_plan_memory(const ct_model_config *cfg, int B, int T, bool training,
                                      ct_model_plan *out);
/* The plan for the given options (NULL: the defaults). Borrows cfg and o,
 * fills *out. CT_ERR_ARG for a bad config, batch shape or option. */
CT_API ct_status ct_model_plan_memory_opts(const ct_model_config *cfg, int B, int T,
                                           bool training, const ct_model_opts *o,
                                           ct_model_plan *out);

/* Rows of logits the fused vocabulary projection + cross-entropy holds at once
 * for N = B*T rows: up to 1024 rows and 256 MiB, at least 1, at most N. */
CT_API int ct_model_head_chunk_rows(const ct_model_config *cfg, int N);

/* Size the activation arena (and, when training, the gradient buffer) for
 * batch shape (B,T) and the model's options, and make their pages resident.
 * Call once; a later call with a different shape returns CT_ERR_ARG. */
CT_API ct_status ct_model_reserve(ct_model *m, int B, int T, bool training);

/* Instruction data: where each token sits in its example. pos(B,T) holds
 * token t's position inside its example: pos[b*T] = 0, and each later
 * pos[b*T+t] is 0 (an example starts) or pos[b*T+t-1] + 1. Token t attends
 * only to tokens [t - pos, t] of its row, and learned positions and RoPE use
 * pos instead of t. Applies to every later forward, forward_backward and
 * logits call, which must then have exactly this (B,T), until
 * ct_model_set_positions(m, NULL, 0, 0) goes back to 0..T-1 in every row.
 * Copied (borrowed during the call). CT_ERR_ARG naming the row and column
 * that break the rule, or when (B,T) does not fit the reserve (or
 * ct_model_reserve was not called); on an error the earlier setting stays. */
CT_API ct_status ct_model_set_positions(ct_model *m, const int32_t *pos, int B, int T);

/* Dropout (training only: ct_model_forward_backward; ct_model_forward,
 * ct_model_logits and decoding never drop). The masks are not stored: each
 * element's keep/drop decision is a hash of (key, site, layer, the element's
 * global index), drawn again by the backward and by recompute. The global
 * index counts batch rows from row0, so a batch of 2B rows at row0 = 0 draws
 * the masks of two batches of B rows at row0 = 0 and row0 = B: data parallel
 * ranks (and gradient accumulation) that cover the rows of one global batch
 * draw the masks of one process running it whole.
 *
 * ct_model_set_dropout sets the probabilities (see ct_model_config; the
 * config's are the start). CT_ERR_ARG (nothing changed) outside [0, 1), or
 * for a nonzero embedding or residual probability on a LLaMA. Any time. */
CT_API ct_status ct_model_set_dropout(ct_model *m, float embd_pdrop, float resid_pdrop,
                                      float attn_pdrop);
/* The masks of the following ct_model_forward_backward calls: key (the
 * trainer's: a hash of train.seed and the step) and row0, the global index of
 * the batch's first row (the trainer's micro-batch a on rank r of w ranks,
 * B rows each: (a*w + r)*B). Stays until the next call. Until the first call
 * each forward_backward draws new masks from a counter of its calls (a
 * library loop that never sets a key still regularises). LoRA's adapter
 * dropout (ct_lora_opts.dropout) draws its masks from the same key and rows,
 * mixed with its seed. Not thread-safe against a concurrent forward_backward
 * on m. */
CT_API void ct_model_set_dropout_key(ct_model *m, uint64_t key, int64_t row0);
/* Where a dropout mask applies. Serialized by name in the debug dump
 * (ct_model_dropout_site_name): append only. */
typedef enum ct_dropout_site {
    CT_DROPOUT_EMBD = 0,       /* (B,T,C) wte + wpe; layer ignored */
    CT_DROPOUT_ATTN_PROBS = 1, /* (B,NH,T,T) attention probabilities of layer l */
    CT_DROPOUT_ATTN_RESID = 2, /* (B,T,C) the attention's c_proj output of layer l */
    CT_DROPOUT_MLP_RESID = 3,  /* (B,T,C) the MLP's c_proj output of layer l */
    CT_DROPOUT_SITE_COUNT
} ct_dropout_site;
/* "embd", "attn_probs", "attn_resid", "mlp_resid"; "?" outside the enum. */
CT_API const char *ct_model_dropout_site_name(ct_dropout_site site);
/* The site's probability in m (0: the site draws no mask). */
CT_API float ct_model_dropout_p(const ct_model *m, ct_dropout_site site);
/* The multipliers (0 or 1/(1-p); 1 everywhere when the site's p is 0) that
 * the next forward_backward of a (B,T) batch applies at site of layer l,
 * under the current key and row0, into out (caller-owned, host memory, of
 * the site's shape above). For debugging and tests: the masks exported for a
 * PyTorch reference. CT_ERR_ARG for a bad site, layer or shape. */
CT_API ct_status ct_model_dropout_mask(const ct_model *m, ct_dropout_site site, int layer, int B,
                                       int T, float *out);

/* Targets < 0 are not counted: the mean loss is over the counted targets
 * (0 when none is), and the gradient is that of grad_weight times it. */
/* Mean cross-entropy of targets(B,T) given inputs(B,T); no gradients.
 * Tokens must be in [0, vocab_size): CT_ERR_ARG names the first bad one. */
CT_API ct_status ct_model_forward(ct_model *m, const int32_t *inputs, const int32_t *targets,
                                  int B, int T, float *mean_loss);
/* Forward and backward: ADDS the gradient of (grad_weight * mean loss) to the
 * gradient buffer (call ct_model_zero_grads before the first micro-batch). */
CT_API ct_status ct_model_forward_backward(ct_model *m, const int32_t *inputs,
                                           const int32_t *targets, int B, int T,
                                           float grad_weight, float *mean_loss);
/* Where the time of one forward_backward went (seconds): forward is the
 * embedding, the blocks, the final norm and the fused head's logits and loss;
 * backward is the head's two gradient GEMMs (timed inside the same chunked
 * pass) and everything after it (final norm, blocks and embedding backward). */
typedef struct ct_model_timing {
    double forward_s, backward_s;
} ct_model_timing;
/* ct_model_forward_backward that also writes its time split to *timing
 * (caller-owned; NULL is fine). Same errors. */
CT_API ct_status ct_model_forward_backward_timed(ct_model *m, const int32_t *inputs,
                                                 const int32_t *targets, int B, int T,
                                                 float grad_weight, float *mean_loss,
                                                 ct_model_timing *timing);

/* A step's micro-batches without a wait between them (a GPU's host then
 * never stalls inside the step): each queued forward and backward ADDS its
 * gradient as ct_model_forward_backward does and adds its loss sum (the
 * losses of the counted targets, not their mean) to an accumulator on the
 * device; ct_model_step_read then waits once and reads the step's loss sum,
 * the sum of squares of the trainable gradients (ct_grad_norm's, bit for
 * bit, over whatever the gradients hold at the read) and the queued
 * micro-batches' summed time split, and starts the next accumulation. An
 * error of the queued work comes back from the read. Tokens and targets are
 * checked as by forward_backward, before anything is queued. */
CT_API ct_status ct_model_forward_backward_queued(ct_model *m, const int32_t *inputs,
                                                  const int32_t *targets, int B, int T,
                                                  float grad_weight);
CT_API ct_status ct_model_step_read(ct_model *m, double *loss_sum, double *grad_sumsq,
                                    ct_model_timing *timing);

/* Gradient hook: while set, ct_model_forward_backward calls fn(lo, hi, user)
 * during its backward pass each time the gradients of the flat-buffer range
 * [lo, hi) (elements) are final for that pass: the final norm (with an untied
 * head), then each
 * block from the last to the first, then the embeddings. The ranges are
 * disjoint and cover the buffer; fn runs on the calling thread. Data parallel
 * training uses it to start the allreduce of finished layers while earlier
 * layers are still in the backward. fn NULL removes it. Borrows user. */
typedef void (*ct_grad_ready_fn)(size_t lo, size_t hi, void *user);
CT_API void ct_model_set_grad_hook(ct_model *m, ct_grad_ready_fn fn, void *user);

/* Logits(B,T,V) of a full forward (for tests and evaluation tools). */
CT_API ct_status ct_model_logits(ct_model *m, const int32_t *inputs, int B, int T,
                                 float *logits);

/* Incremental decoding with a KV cache of up to max_len positions (<= n_ctx).
 * decode_reset empties the cache; decode_step appends one token at the next
 * position and writes that position's logits(V). */
CT_API ct_status ct_model_decode_reserve(ct_model *m, int max_len);
CT_API void ct_model_decode_reset(ct_model *m);
CT_API ct_status ct_model_decode_step(ct_model *m, int32_t token, float *logits);

/* Hugging Face directories: config.json (GPT2Config or LlamaConfig, told apart
 * by model_type) and the weights, model.safetensors or, for LLaMA, shards
 * named by model.safetensors.index.json.
 * load: builds the model from config.json and fills its weights; every tensor is
 * checked against the config (missing tensors, wrong shapes, dtypes, lying
 * offsets: CT_ERR_FORMAT naming the file and tensor; an index naming a missing
 * shard: CT_ERR_IO naming the index and the shard). F32/F16/BF16 accepted.
 * Returns owned *out; release with ct_model_free.
 * save: writes the weights (or, with grads=true, the gradients) as F32 in HF
 * layout, atomically; `file` names the safetensors file in dir
 * ("model.safetensors"); config.json is written when write_config. */
CT_API ct_status ct_model_load_hf(ct_model **out, ct_ctx *ctx, const char *dir);
/* Read dir's weights into m in place (its fp32 weights, or its bf16 base),
 * with no second model: CT_ERR_ARG when dir/config.json describes another
 * shape (nothing read), the load's errors otherwise (m may then hold part of
 * the new weights). Borrows m and dir. */
CT_API ct_status ct_model_load_hf_weights(ct_model *m, const char *dir);
/* Only the model's shape, from dir/config.json (no weights are read). */
CT_API ct_status ct_model_config_load_hf(ct_model_config *cfg, const char *dir);
CT_API ct_status ct_model_save_hf(ct_model *m, const char *dir, const char *file, bool grads,
                                  bool write_config);
/* As ct_model_save_hf of the weights with config.json, the tensors stored as
 * BF16 (rounded to nearest even) when bf16, as HF TinyLlama ships them.
 * Borrows m and dir. */
CT_API ct_status ct_model_export_hf(ct_model *m, const char *dir, bool bf16);

/* ------------------------------------------------------------------ LoRA
 * Low-rank adapters in PEFT's semantics: an adapted linear layer computes
 * y = x W^T + (dropout(x) A^T B^T) * alpha / r, with A (r, in) and B (out, r)
 * in their own parameter table and flat buffers; the base weights are frozen
 * (no gradient buffer, no optimizer moments; the backward still carries dX
 * through them to earlier adapters). Targets are module names matched as PEFT
 * does: a module is adapted when its path equals a target or ends with
 * "." + target (GPT-2's "c_proj" hits attn.c_proj and mlp.c_proj). Modules:
 * LLaMA q_proj k_proj v_proj o_proj gate_proj up_proj down_proj; GPT-2
 * attn.c_attn attn.c_proj mlp.c_fc mlp.c_proj.
 * modules_to_save (PEFT's, LLaMA layout): embed_tokens and lm_head train in
 * full beside the adapters, as trainable copies of the base's matrices in the
 * adapter's table ("model.embed_tokens.weight", "lm_head.weight"); the base
 * keeps its own, frozen. The copies are independent, as PEFT's are: on a tied
 * base, training the head's copy leaves the embedding as it was, and merging
 * unties the head. Leaves out: biases in the adapter, rsLoRA/DoRA, adapters
 * on embeddings or the head, modules_to_save on GPT-2 (its head is always
 * tied), and the KV-cache decoder (decode a merged model:
 * ct_model_lora_merge). */
typedef struct ct_lora_opts {
    int r;            /* rank; 0: no adapter */
    float alpha;      /* scale = alpha / r */
    float dropout;    /* probability of zeroing an adapter input element, training only */
    uint32_t targets; /* bit k: module kind k of the arch (ct_lora_targets_parse) */
    uint64_t seed;    /* mixed into the dropout masks' key (ct_model_set_dropout_key) */
    bool base_bf16;   /* store the frozen base's matrices as bf16 (1-D weights stay fp32);
                       * each GEMM widens its weight into an fp32 work buffer first */
    uint32_t save_modules; /* modules_to_save: CT_LORA_SAVE_* bits */
} ct_lora_opts;
/* The modules PEFT's modules_to_save may name (LLaMA layout). */
enum { CT_LORA_SAVE_EMBED = 1u << 0, CT_LORA_SAVE_HEAD = 1u << 1 };
/* Parse a comma-separated modules_to_save list (borrowed; "embed_tokens",
 * "lm_head", or their full paths "model.embed_tokens") into *mask.
 * CT_ERR_ARG naming `key` for another name, or for any on GPT-2. "" is 0. */
CT_API ct_status ct_lora_save_modules_parse(const ct_model_config *cfg, const char *list,
                                            const char *key, uint32_t *mask);

/* The module kinds of cfg's arch: their count, and kind k's path below a
 * layer ("self_attn.q_proj", "attn.c_attn"). NULL for k out of range. Static
 * strings. */
CT_API int ct_lora_num_kinds(const ct_model_config *cfg);
CT_API const char *ct_lora_kind_path(const ct_model_config *cfg, int k);
/* Parse a comma-separated target list (borrowed) into a kind mask for cfg's
 * arch. CT_ERR_ARG naming `key` (e.g. "lora.targets") when the list is empty
 * or a name adapts no module (the message lists the modules). */
CT_API ct_status ct_lora_targets_parse(const ct_model_config *cfg, const char *list,
                                       const char *key, uint32_t *mask);
/* The target list PEFT's adapter_config.json gets for mask (shortest suffixes
 * that select exactly these modules), comma-separated into buf (cap bytes). */
CT_API void ct_lora_targets_format(const ct_model_config *cfg, uint32_t mask, char *buf,
                                   size_t cap);
/* CT_ERR_ARG naming the lora.* key of the first bad field for cfg. */
CT_API ct_status ct_lora_opts_validate(const ct_model_config *cfg, const ct_lora_opts *o);

/* Attach adapters (A and B zero) before ct_model_reserve; once per model.
 * Afterwards the base is frozen: ct_model_reserve allocates no base gradient
 * buffer and the trainable view below is the adapter's. With o->base_bf16 the
 * base's matrices are rounded to bf16 (nearest even) and the fp32 buffer is
 * freed: ct_model_params returns NULL from then on. Borrows o.
 * CT_ERR_ARG for bad options, a second attach or a model already reserved. */
CT_API ct_status ct_model_lora_attach(ct_model *m, const ct_lora_opts *o);
/* ct_model_load_hf followed by ct_model_lora_attach(o), except that a base
 * with o->base_bf16 is read straight into bf16 storage, tensor by tensor
 * (no fp32 copy of the whole base exists at any time; BF16 files are copied
 * bit for bit). Returns owned *out; release with ct_model_free. Errors as the
 * two calls'. */
CT_API ct_status ct_model_load_hf_lora(ct_model **out, ct_ctx *ctx, const char *dir,
                                       const ct_lora_opts *o);
/* PEFT's initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform,
 * a = sqrt(5)), B = 0; deterministic in seed, in adapter-table order. */
CT_API ct_status ct_model_lora_init_weights(ct_model *m, uint64_t seed);
/* The attached options, or NULL without adapters. */
CT_API const ct_lora_opts *ct_model_lora(const ct_model *m);
/* Fold the adapters into the base weights (W += alpha/r * B A, in double)
 * and detach them: afterwards m is a plain model. CT_ERR_ARG without adapters
 * or with a bf16 base (merge into an fp32 base). */
CT_API ct_status ct_model_lora_merge(ct_model *m);

/* The trainable view: what AdamW, gradient norm and clipping, the guard and
 * checkpoints walk. Without adapters: the whole table and flat buffers; with
 * them: the adapter's table ("model.layers.0.self_attn.q_proj.lora_A.weight",
 * PEFT's names without "base_model.model.") and buffers. Borrowed pointers;
 * grads NULL before ct_model_reserve(..., true). */
CT_API int ct_model_num_trainable(const ct_model *m);
CT_API const ct_param *ct_model_trainable_param(const ct_model *m, int i);
CT_API size_t ct_model_trainable_numel(const ct_model *m);
CT_API float *ct_model_trainable_params(ct_model *m);
CT_API float *ct_model_trainable_grads(ct_model *m);
/* The bf16 copy that precision bf16's GEMMs read of trainable parameter i
 * (its numel elements), or NULL: an entry no GEMM reads, precision fp32 or
 * fp16, adapters attached (their base is frozen). Whoever writes it must
 * write bf16 of the parameter's current values (f32_to_bf16's bits). */
CT_API uint16_t *ct_model_trainable_w16(ct_model *m, int i);

/* The plan with adapters lo attached (NULL or r == 0: none): params holds
 * the base and the adapter, grads only the adapter's, trainable the bytes
 * AdamW keeps two moments of; acts and scratch include the adapter's kept
 * A x rows and its work rows. */
CT_API ct_status ct_model_plan_memory_lora(const ct_model_config *cfg, int B, int T,
                                           bool training, const ct_model_opts *o,
                                           const ct_lora_opts *lo, ct_model_plan *out);

/* PEFT adapter directories: adapter_config.json (peft_type LORA, r,
 * lora_alpha, lora_dropout, target_modules, fan_in_fan_out for GPT-2's
 * Conv1D, task_type CAUSAL_LM) and adapter_model.safetensors (F32,
 * "base_model.model.<module path>.lora_A.weight" (r, in) and ".lora_B.weight"
 * (out, r); GPT-2 paths start with "transformer."). save: atomic writes,
 * base_model_name_or_path = base (may be ""). Borrows everything. */
CT_API ct_status ct_model_lora_save_peft(ct_model *m, const char *dir, const char *base);
/* Read dir/adapter_config.json into *o for a model of cfg (r, alpha,
 * dropout, targets; seed 0). CT_ERR_IO / CT_ERR_FORMAT naming the file and key. */
CT_API ct_status ct_lora_config_load_peft(const ct_model_config *cfg, const char *dir,
                                          ct_lora_opts *o);
/* Fill the attached adapters from dir/adapter_model.safetensors: every tensor
 * of the adapter table must be there with its shape, and no other lora
 * tensor: CT_ERR_FORMAT naming the file and the tensor otherwise. */
CT_API ct_status ct_model_lora_load_peft(ct_model *m, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
