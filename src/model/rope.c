/*
 * RoPE's frequency table: the per-pair inverse frequencies inv_freq[i]
 * (i < HS/2) and the factor that scales cos and sin, computed on the host
 * from the model config, as transformers 5.x computes them
 * (modeling_rope_utils.py, ROPE_INIT_FUNCTIONS; LlamaRotaryEmbedding).
 * The backends' rope ops take the table (backend_impl.h) and rotate with
 * angle = (float)p * inv_freq[i], cos/sin times the factor.
 *
 * What each lf_rope_type computes (HS the head size, theta the base):
 *   default  inv[i] = 1 / theta^(2i/HS); factor 1.
 *   linear   default / factor.
 *   llama3   (Llama 3.1) with wavelen = 2 pi / inv[i], L = original max
 *            positions: wavelen < L / high_freq_factor keeps inv[i];
 *            wavelen > L / low_freq_factor takes inv[i] / factor; between,
 *            s = (L / wavelen - low) / (high - low) and
 *            (1 - s) inv/factor + s inv. Factor 1.
 *   dynamic  (NTK) for a sequence of length S > max_position_embeddings M:
 *            theta' = theta (factor S / M - (factor - 1))^(HS / (HS - 2)),
 *            then default with theta'; S <= M: default. Factor 1.
 *   yarn     low/high = the correction range of beta_fast/beta_slow
 *            (dim ln(L / (2 pi beta)) / (2 ln theta), floored/ceiled unless
 *            truncate is false, clamped to [0, HS-1]); a ramp
 *            r[i] = clamp((i - low) / (high - low), 0, 1) mixes
 *            interpolation (inv / factor) and extrapolation (inv):
 *            inv/factor * r + inv * (1 - r). cos/sin are scaled by
 *            attention_factor, else by mscale(factor, mscale) /
 *            mscale(factor, mscale_all_dim) when both are set, else by
 *            mscale(factor) = 0.1 ln(factor) + 1 (1 for factor <= 1).
 *
 * Why float arithmetic where transformers uses float32 tensors (and double
 * where it uses Python floats): the tables are part of the model the
 * checkpoint was trained with; see cpu_rope.c for what a rounding
 * difference costs at long positions. This file is compiled with
 * -ffp-contract=off (CMake), so no product and sum fuse into an FMA that
 * PyTorch's CPU kernels do not.
 *
 * Dynamic NTK depends on the sequence length S. transformers keeps a
 * cache (max_seq_len_cached): a forward whose last position p + 1 exceeds
 * it recomputes inv_freq for S = p + 1 and rotates that forward's q and k
 * with it; keys already in a KV cache keep their old rotation. llmforge
 * does the same without state: a forward over positions [pos0, pos0 + T)
 * uses S = pos0 + T. That is transformers' behaviour for a fresh model:
 * training and evaluation (pos0 = 0, S = T), and generate with a KV cache
 * (the prompt at S = its length, each new token at S = its position + 1).
 * (A transformers model object that once saw a longer sequence keeps the
 * larger table for shorter ones above M; llmforge does not.)
 *
 * References: transformers 5.x modeling_rope_utils.py
 * (_compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters,
 * _compute_yarn_parameters, _compute_llama3_parameters,
 * dynamic_rope_update); Peng et al. 2023, YaRN (arXiv:2309.00071).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model/model_impl.h"

#define ROPE_PI 3.141592653589793

/* The default table for base theta (float, as HF: the exponent as a
 * float division, theta cast to float, powf, the float reciprocal). */
static void default_freqs(float theta, int HS, float *inv) {
    for (int i = 0; i < HS / 2; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
}

static void llama3_freqs(const lf_model_config *c, int HS, float *inv) {
    const lf_rope_scaling *r = &c->rope;
    default_freqs(c->rope_theta, HS, inv);
    const double L = (double)r->original_max_position_embeddings;
    const float low_wl = (float)(L / r->low_freq_factor), high_wl = (float)(L / r->high_freq_factor);
    const float f = (float)r->factor, span = (float)(r->high_freq_factor - r->low_freq_factor);
    const float lo = (float)r->low_freq_factor, twopi = (float)(2 * ROPE_PI), Lf = (float)L;
    for (int i = 0; i < HS / 2; i++) {
        const float wl = (1.0f / inv[i]) * twopi; /* 2 pi / inv: torch's reciprocal times the scalar */
        float v = wl > low_wl ? inv[i] / f : inv[i];
        if (!(wl < high_wl) && !(wl > low_wl)) {
            const float s = ((1.0f / wl) * Lf - lo) / span;
            v = (1.0f - s) * v / f + s * v;
        }
        inv[i] = v;
    }
}

static void dynamic_freqs(const lf_model_config *c, int HS, int S, float *inv) {
    const lf_rope_scaling *r = &c->rope;
    const int M = r->max_position_embeddings;
    const double ex = (double)HS / (double)(HS - 2);
    if (S <= M) { /* the table built at init: Python floats, base ~ theta */
        const double b = (double)c->rope_theta * pow((r->factor * M / M) - (r->factor - 1), ex);
        default_freqs((float)b, HS, inv);
        return;
    }
    /* the recomputed one: seq_len is a tensor, so float32 throughout */
    const float t = (float)r->factor * (float)S / (float)M - (float)(r->factor - 1);
    const float b = c->rope_theta * (float)pow((double)t, ex);
    default_freqs(b, HS, inv);
}

static double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

static double yarn_factor(const lf_model_config *c) {
    const lf_rope_scaling *r = &c->rope;
    return r->factor > 0 ? r->factor : (double)r->max_position_embeddings / (double)r->original_max_position_embeddings;
}

static float yarn_attention(const lf_model_config *c) {
    const lf_rope_scaling *r = &c->rope;
    const double f = yarn_factor(c);
    if (r->attention_factor > 0) return (float)r->attention_factor;
    if (r->mscale != 0 && r->mscale_all_dim != 0)
        return (float)(yarn_mscale(f, r->mscale) / yarn_mscale(f, r->mscale_all_dim));
    return (float)yarn_mscale(f, 1.0);
}

static double correction_dim(double rot, int dim, double base, int maxpos) {
    return (dim * log(maxpos / (rot * 2 * ROPE_PI))) / (2 * log(base));
}

static void yarn_freqs(const lf_model_config *c, int HS, float *inv) {
    const lf_rope_scaling *r = &c->rope;
    const double f = yarn_factor(c), base = c->rope_theta;
    const double bf = r->beta_fast != 0 ? r->beta_fast : 32, bs = r->beta_slow != 0 ? r->beta_slow : 1;
    const int L = r->original_max_position_embeddings;
    double low = correction_dim(bf, HS, base, L), high = correction_dim(bs, HS, base, L);
    if (!r->no_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0) low = 0;
    if (high > HS - 1) high = HS - 1;
    if (low == high) high += 0.001;
    const float flow = (float)low, span = (float)(high - low), ff = (float)f;
    for (int i = 0; i < HS / 2; i++) {
        const float pos = powf((float)base, (float)(2 * i) / (float)HS);
        const float extra = 1.0f / pos, inter = 1.0f / (ff * pos);
        float ramp = ((float)i - flow) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        const float ef = 1.0f - ramp; /* the extrapolation weight */
        inv[i] = inter * (1.0f - ef) + extra * ef;
    }
}

void lf__rope_freqs(const lf_model_config *c, int HS, int S, float *inv, float *scale) {
    *scale = 1.0f;
    switch (c->rope.type) {
    case LF_ROPE_LINEAR:
        default_freqs(c->rope_theta, HS, inv);
        for (int i = 0; i < HS / 2; i++) inv[i] /= (float)c->rope.factor;
        break;
    case LF_ROPE_DYNAMIC: dynamic_freqs(c, HS, S, inv); break;
    case LF_ROPE_YARN:
        yarn_freqs(c, HS, inv);
        *scale = yarn_attention(c);
        break;
    case LF_ROPE_LLAMA3: llama3_freqs(c, HS, inv); break;
    default: default_freqs(c->rope_theta, HS, inv); break;
    }
}

int lf__rope_depends_on_length(const lf_model_config *c) { return c->rope.type == LF_ROPE_DYNAMIC; }

static const char *const k_rope_names[] = {"default", "linear", "dynamic", "yarn", "llama3"};

const char *lf__rope_type_name(lf_rope_type t) {
    return (unsigned)t < sizeof k_rope_names / sizeof k_rope_names[0] ? k_rope_names[t] : "?";
}

int lf__rope_type_parse(const char *s, lf_rope_type *out) {
    for (int i = 0; i < (int)(sizeof k_rope_names / sizeof k_rope_names[0]); i++)
        if (strcmp(s, k_rope_names[i]) == 0) {
            *out = (lf_rope_type)i;
            return 1;
        }
    return 0;
}

lf_status lf__rope_validate(const lf_model_config *c) {
    const lf_rope_scaling *r = &c->rope;
    const char *ty = lf__rope_type_name(r->type);
    if ((unsigned)r->type > LF_ROPE_LLAMA3) return lf_fail(LF_ERR_CONFIG, "RoPE type %d is unknown", (int)r->type);
    if (r->type == LF_ROPE_DEFAULT) return LF_OK;
    const int need_factor = r->type != LF_ROPE_YARN || r->max_position_embeddings <= 0;
    if (need_factor && !(r->factor >= 1.0 && r->factor <= 1e6))
        return lf_fail(LF_ERR_RANGE, "RoPE '%s': factor %g must be in [1, 1e6]", ty, r->factor);
    if (r->factor != 0 && !(r->factor > 0 && isfinite(r->factor)))
        return lf_fail(LF_ERR_RANGE, "RoPE '%s': factor %g must be positive", ty, r->factor);
    if ((r->type == LF_ROPE_LLAMA3 || r->type == LF_ROPE_YARN) && r->original_max_position_embeddings < 1)
        return lf_fail(LF_ERR_RANGE, "RoPE '%s': original_max_position_embeddings %d must be >= 1", ty,
                       r->original_max_position_embeddings);
    if ((r->type == LF_ROPE_DYNAMIC || (r->type == LF_ROPE_YARN && r->factor == 0)) && r->max_position_embeddings < 1)
        return lf_fail(LF_ERR_RANGE, "RoPE '%s': max_position_embeddings %d must be >= 1", ty,
                       r->max_position_embeddings);
    if (r->type == LF_ROPE_LLAMA3 &&
        !(r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor && isfinite(r->high_freq_factor)))
        return lf_fail(LF_ERR_RANGE, "RoPE 'llama3': low_freq_factor %g and high_freq_factor %g need 0 < low < high",
                       r->low_freq_factor, r->high_freq_factor);
    if (r->type == LF_ROPE_YARN &&
        !(r->attention_factor >= 0 && isfinite(r->attention_factor) && isfinite(r->beta_fast) &&
          isfinite(r->beta_slow) && isfinite(r->mscale) && isfinite(r->mscale_all_dim)))
        return lf_fail(LF_ERR_RANGE, "RoPE 'yarn': attention_factor, beta_fast, beta_slow, mscale and "
                                     "mscale_all_dim must be finite (attention_factor >= 0)");
    return LF_OK;
}

/* config.json's spelling (transformers 4.x rope_scaling, which 5.x reads
 * too): {"rope_type": ..., the type's keys}, or null. */
int lf__rope_hf_json(const lf_model_config *c, char *buf, size_t cap) {
    const lf_rope_scaling *r = &c->rope;
    if (r->type == LF_ROPE_DEFAULT) return snprintf(buf, cap, "null");
    int n = snprintf(buf, cap, "{\"rope_type\": \"%s\"", lf__rope_type_name(r->type));
#define ADD(...) n += snprintf(buf + (n < (int)cap ? n : (int)cap), cap > (size_t)n ? cap - (size_t)n : 0, __VA_ARGS__)
    if (r->factor != 0) ADD(", \"factor\": %.17g", r->factor);
    if (r->type == LF_ROPE_LLAMA3)
        ADD(", \"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g", r->low_freq_factor, r->high_freq_factor);
    if (r->type == LF_ROPE_LLAMA3 || r->type == LF_ROPE_YARN)
        ADD(", \"original_max_position_embeddings\": %d", r->original_max_position_embeddings);
    if (r->type == LF_ROPE_YARN) {
        if (r->attention_factor != 0) ADD(", \"attention_factor\": %.17g", r->attention_factor);
        if (r->beta_fast != 0) ADD(", \"beta_fast\": %.17g", r->beta_fast);
        if (r->beta_slow != 0) ADD(", \"beta_slow\": %.17g", r->beta_slow);
        if (r->mscale != 0) ADD(", \"mscale\": %.17g", r->mscale);
        if (r->mscale_all_dim != 0) ADD(", \"mscale_all_dim\": %.17g", r->mscale_all_dim);
        if (r->no_truncate) ADD(", \"truncate\": false");
    }
    ADD("}");
#undef ADD
    return n;
}
