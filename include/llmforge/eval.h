/*
 * Evaluation metrics: classification (accuracy, precision/recall/F1,
 * confusion matrix), extractive QA (exact match, SQuAD token F1), BLEU
 * (sacreBLEU 2.6.0), ROUGE (rouge-score 0.1.2), ranking (Hits@N, MRR) and
 * language modelling (perplexity, bits per byte).
 *
 * The metrics depend on nothing but lf_core: no model, no tokenizer files.
 * Each function below states the definition it computes and the reference
 * implementation it agrees with; docs/metrics.md says the same at length.
 *
 * Conventions shared by every function here:
 *   - Text is UTF-8, NUL-terminated. Invalid UTF-8 (overlong forms,
 *     surrogates, code points above U+10FFFF, truncated sequences, stray
 *     continuation bytes) is LF_ERR_FORMAT with a message that names the
 *     argument and the byte offset; nothing is read past the NUL.
 *   - Text is handled as CPython's str handles it, because the reference
 *     tools are Python: lower-casing is str.lower() (full Unicode case
 *     mapping, including U+0130 -> "i\u0307" and the final-sigma rule),
 *     whitespace is str.isspace(), word characters are those of Python's
 *     re \w. The tables are those of Unicode 14.0.0 (CPython 3.11); see
 *     src/eval/gen_unicode_tables.py.
 *   - Arithmetic is in double; every sum runs in a fixed order (the order
 *     of the items, then of the classes / n-gram orders), so results are
 *     bit-for-bit reproducible.
 *   - Inputs are bounded: a text is at most LF_EVAL_MAX_TEXT bytes, and the
 *     quadratic ROUGE-L tables have caps (LF_ROUGE_MAX_LCS_CELLS); going over
 *     a bound is LF_ERR_RANGE, never a crash.
 *   - Functions are thread-safe as long as threads use different objects
 *     (the error message is per thread). `lf_x_free(NULL)` is a no-op.
 */
#ifndef LLMFORGE_EVAL_H
#define LLMFORGE_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"
#include "llmforge/data.h"  /* lf_tokenizer (tasks section) */
#include "llmforge/model.h" /* lf_model (tasks section) */

#ifdef __cplusplus
extern "C" {
#endif

/* Longest text (bytes) any metric accepts. */
#define LF_EVAL_MAX_TEXT ((size_t)64 << 20)

/* ================================================================ text helpers */

/* lf_utf8_validate (llmforge/core.h) checks that a text is well-formed UTF-8. */

/* ================================================================ classification
 *
 * Labels are arbitrary strings compared byte for byte. The label set is the
 * union of every gold and predicted label seen, listed in ascending byte
 * order (strcmp; for UTF-8 that is code-point order, as numpy.unique sorts
 * Python strings). For class c:
 *   tp = #(gold == c and pred == c), fp = #(pred == c, gold != c),
 *   fn = #(gold == c, pred != c), support = #(gold == c)
 *   precision = tp / (tp + fp), recall = tp / (tp + fn),
 *   F1 = 2 tp / (2 tp + fp + fn)
 * and any 0/0 is 0 — scikit-learn's precision_recall_fscore_support with
 * zero_division=0. So a class that is never predicted has precision 0, a
 * class that never occurs in the gold labels has recall 0 (and support 0),
 * and both still count in the macro average, as in scikit-learn.
 *   accuracy  = #(pred == gold) / N
 *   macro     = unweighted mean of the per-class P, R and F1 over the label set
 *   micro     = P, R, F1 from the summed tp, fp, fn (for single-label data
 *               all three equal the accuracy)
 *   binary    = P, R, F1 of the class pos_label; as in scikit-learn this
 *               needs at most two labels in the set, and pos_label among them
 */
typedef struct lf_confusion lf_confusion;

typedef enum lf_average {
    LF_AVERAGE_MACRO = 0,
    LF_AVERAGE_MICRO = 1,
    LF_AVERAGE_BINARY = 2,
} lf_average;

typedef struct lf_prf {
    double precision, recall, f1;
    uint64_t support; /* gold count (summed over classes for macro/micro) */
} lf_prf;

/* At most this many distinct labels (a bound on memory and on the sorted
 * insertion of new labels; pair counts are stored sparsely). */
#define LF_CONFUSION_MAX_LABELS 65536

lf_status lf_confusion_create(lf_confusion **out);
void lf_confusion_free(lf_confusion *c);
/* Count one (gold, pred) pair. Both must be valid UTF-8 (LF_ERR_FORMAT);
 * LF_ERR_RANGE past LF_CONFUSION_MAX_LABELS labels. */
lf_status lf_confusion_add(lf_confusion *c, const char *gold, const char *pred);
uint64_t lf_confusion_total(const lf_confusion *c);
size_t lf_confusion_num_labels(const lf_confusion *c);
/* i-th label in ascending order; NULL when i is out of range. The pointer
 * lives until the next lf_confusion_add or lf_confusion_free. */
const char *lf_confusion_label(const lf_confusion *c, size_t i);
/* Count of items with gold label i and predicted label j (sorted indices). */
uint64_t lf_confusion_count(const lf_confusion *c, size_t gold_i, size_t pred_j);
/* Accuracy; LF_ERR_INVALID_ARG when nothing was added. */
lf_status lf_confusion_accuracy(const lf_confusion *c, double *acc);
/* Per-class precision/recall/F1/support of label i (sorted index). */
lf_status lf_confusion_class(const lf_confusion *c, size_t i, lf_prf *out);
/* Averaged precision/recall/F1. pos_label is used by LF_AVERAGE_BINARY only;
 * LF_ERR_INVALID_ARG if it is NULL or not a label, or if there are more than
 * two labels; LF_ERR_INVALID_ARG when nothing was added. */
lf_status lf_confusion_average(const lf_confusion *c, lf_average avg, const char *pos_label, lf_prf *out);

/* ================================================================ QA: exact match and token F1
 *
 * As the official SQuAD v1.1 evaluate script (evaluate-v1.1.py):
 *   normalize(s) = white_space_fix(remove_articles(remove_punc(lower(s))))
 *     lower: str.lower()
 *     remove_punc: delete every character of Python's string.punctuation
 *       (the 32 ASCII characters !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~)
 *     remove_articles: re.sub(r'\b(a|an|the)\b', ' ', s), i.e. every whole
 *       word (maximal run of \w characters) equal to a, an or the becomes ' '
 *     white_space_fix: ' '.join(s.split())
 *   EM(p, g) = 1 if normalize(p) == normalize(g) else 0
 *   F1(p, g): tokens = normalize(.).split(); same = size of the multiset
 *     intersection; 0 if same == 0, else 2 P R / (P + R) with
 *     P = same / |p tokens|, R = same / |g tokens|
 *   over several gold answers: the maximum over them.
 * Note (as v1.1, unlike v2.0): two texts that both normalise to "" have
 * EM 1 and F1 0. */

/* normalize(s) as above; *out is NUL-terminated, free with lf_free. */
lf_status lf_squad_normalize(const char *s, char **out);
/* EM and F1 of one prediction against n_gold >= 1 gold answers (max over them). */
lf_status lf_squad_score(const char *pred, const char *const *gold, size_t n_gold, double *em, double *f1);

/* ================================================================ BLEU (sacreBLEU 2.6.0)
 *
 * Exactly sacrebleu.metrics.BLEU of sacreBLEU 2.6.0, max n-gram order 4:
 *   tokens(s) = tokenize((lowercase ? s.lower() : s).rstrip()).split()
 *   tokenizers:
 *     13a   mteval-v13a: remove "<skipped>", remove "-\n", "\n" -> " ",
 *           unescape &quot; &amp; &lt; &gt; (in that order), pad with a
 *           space on each side, then the four regexes of tokenizer_re.py:
 *           ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 ", ([^0-9])([\.,]) ->
 *           "\1 \2 ", ([\.,])([^0-9]) -> " \1 \2", ([0-9])(-) -> "\1 \2 "
 *     zh    tokenizer_zh.py: strip, put spaces around every character in its
 *           _UCODE_RANGES — with their literal Python meaning, so the ranges
 *           written '\u20000'..'\u2a6d6' and '\u2f800'..'\u2fa1d' (two-character
 *           strings) cover U+2001..U+2A6D and U+2F81..U+2FA1 — then the four
 *           regexes above (no unescaping, no padding)
 *     char  every non-whitespace character is a token
 *     none  split on whitespace only
 *   per segment: hyp n-gram counts (n = 1..4) clipped by the maximum count of
 *     that n-gram in any one reference; ref_len = the reference length
 *     closest to the hypothesis length, ties to the shorter
 *   corpus: counts, totals, sys_len, ref_len summed over segments in order;
 *     bp = 1 if sys_len >= ref_len, else exp(1 - ref_len / sys_len) (0 if
 *     sys_len == 0); if every count is 0 the score is 0 and the precisions
 *     are all 0; otherwise for n = 1..4:
 *       add-k (n > 1): count += k, total += k (and the reported counts and
 *         totals include k, as sacreBLEU's do)
 *       total == 0: stop (orders from here on keep precision 0)
 *       effective order: eff = n (else eff = 4)
 *       count == 0: exp: m *= 2 (m starts at 1), p = 100 / (m * total);
 *                   floor: p = 100 * v / total; otherwise p = 0
 *       else p = 100 * count / total
 *     score = bp * exp(sum_{n<=eff} log*(p_n) / eff), log*(0) = -9999999999
 *   smoothing values: floor 0.1, add-k 1 unless given.
 *   signature: "nrefs:N|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
 *     (N = "var" when segments have different numbers of references; case
 *     "lc" with lowercase; smooth "floor[0.10]" / "add-k[1.00]" carry the
 *     value with two decimals).
 */
#define LF_BLEU_MAX_ORDER 4
#define LF_BLEU_VERSION "2.6.0"

typedef enum lf_bleu_tokenize {
    LF_BLEU_TOK_13A = 0,
    LF_BLEU_TOK_ZH = 1,
    LF_BLEU_TOK_CHAR = 2,
    LF_BLEU_TOK_NONE = 3,
} lf_bleu_tokenize;

typedef enum lf_bleu_smooth {
    LF_BLEU_SMOOTH_EXP = 0,
    LF_BLEU_SMOOTH_FLOOR = 1,
    LF_BLEU_SMOOTH_ADD_K = 2,
    LF_BLEU_SMOOTH_NONE = 3,
} lf_bleu_smooth;

typedef enum lf_bleu_eff {
    LF_BLEU_EFF_AUTO = 0, /* corpus scores: no; sentence scores: yes (sacrebleu.sentence_bleu) */
    LF_BLEU_EFF_NO = 1,
    LF_BLEU_EFF_YES = 2,
} lf_bleu_eff;

typedef struct lf_bleu_config {
    lf_bleu_tokenize tokenize; /* default 13a */
    lf_bleu_smooth smooth;     /* default exp */
    double smooth_value;       /* < 0: the method's default (floor 0.1, add-k 1) */
    int lowercase;             /* 0: case-sensitive ("case:mixed") */
    lf_bleu_eff effective_order;
} lf_bleu_config;

lf_bleu_config lf_bleu_config_default(void);

typedef struct lf_bleu_score {
    double score;                         /* 0..100 */
    double counts[LF_BLEU_MAX_ORDER];     /* clipped matches per order (integers unless add-k
                                               with a fractional k) */
    double totals[LF_BLEU_MAX_ORDER];     /* hypothesis n-grams per order */
    double precisions[LF_BLEU_MAX_ORDER]; /* 0..100, after smoothing */
    double bp;                            /* brevity penalty */
    double ratio;                         /* sys_len / ref_len (0 if ref_len == 0) */
    int64_t sys_len, ref_len;
    char signature[128];
} lf_bleu_score;

/* Streaming corpus BLEU: add segments, then read the corpus score. */
typedef struct lf_bleu lf_bleu;

lf_status lf_bleu_create(lf_bleu **out, const lf_bleu_config *cfg);
void lf_bleu_free(lf_bleu *b);
/* Add one segment: hypothesis and its n_refs >= 1 references (entries may be
 * NULL: a missing reference, skipped as sacreBLEU skips None; at least one
 * must be present). When sentence != NULL it receives this segment's sentence
 * score (effective order unless the config says LF_BLEU_EFF_NO). */
lf_status lf_bleu_add(lf_bleu *b, const char *hyp, const char *const *refs, size_t n_refs, lf_bleu_score *sentence);
size_t lf_bleu_num_segments(const lf_bleu *b);
/* Corpus score over the segments added so far (effective order only with
 * LF_BLEU_EFF_YES). LF_ERR_INVALID_ARG when nothing was added. */
lf_status lf_bleu_corpus(const lf_bleu *b, lf_bleu_score *out);

/* One-shot forms. sacrebleu.corpus_bleu(hyps, refs): refs[r][i] is
 * reference r of segment i (n_refs streams, NULL entries allowed). */
lf_status lf_bleu_corpus_score(const lf_bleu_config *cfg, const char *const *hyps, size_t n,
                               const char *const *const *refs, size_t n_refs, lf_bleu_score *out);
/* sacrebleu.sentence_bleu(hyp, refs). */
lf_status lf_bleu_sentence_score(const lf_bleu_config *cfg, const char *hyp, const char *const *refs, size_t n_refs,
                                 lf_bleu_score *out);

/* The tokens sacreBLEU's preprocessing produces for one text, joined by
 * single spaces (what BLEU counts n-grams over). *out: lf_free. */
lf_status lf_bleu_tokenize_text(const lf_bleu_config *cfg, const char *text, char **out);

/* ================================================================ ROUGE (rouge-score 0.1.2)
 *
 * Exactly rouge_score.rouge_scorer.RougeScorer of Google's rouge-score 0.1.2:
 *   default tokenizer: s.lower(); every maximal run of characters other than
 *     [a-z0-9] becomes a space; tokens = the [a-z0-9]+ runs; with the stemmer
 *     each token longer than 3 characters goes through NLTK's PorterStemmer
 *     (NLTK_EXTENSIONS mode, the default rouge-score uses; nltk 3.x).
 *     Every non-ASCII character is deleted, so Chinese text has no tokens.
 *   rougeN: P = |hyp ∩ ref n-grams| / max(#hyp n-grams, 1),
 *     R = |∩| / max(#ref n-grams, 1) (multiset intersection),
 *     F = 2 P R / (P + R), 0 if P + R == 0
 *   rougeL: LCS of the token sequences; P = LCS / |hyp|, R = LCS / |ref|,
 *     all 0 if either is empty
 *   rougeLsum: texts split on "\n" (empty lines dropped), summary-level
 *     union-LCS with rouge-score's back-tracking and its guard against
 *     counting a token more often than it occurs in either text
 *   several references (score_multi): per type, the reference with the
 *     highest F (the first one on ties) gives P, R and F.
 *
 * The CJK-aware tokenizer (LF_ROUGE_TOK_CJK, llmforge's own, not part of
 * rouge-score) is the default tokenizer with one change: every CJK character
 * is a token of its own (and fullwidth ASCII letters and digits U+FF10..FF5A
 * are read as their ASCII forms). CJK characters are: Han (U+2E80..2FDF,
 * U+3005..3007, U+3021..3029, U+3038..303B, U+3400..4DBF, U+4E00..9FFF,
 * U+F900..FAFF and U+20000..323AF), kana (U+3040..30FF,
 * U+31F0..31FF, U+FF66..FF9F), bopomofo (U+3100..312F, U+31A0..31BF) and
 * Hangul (U+1100..11FF, U+3130..318F, U+A960..A97F, U+AC00..D7FF). On text
 * without CJK or fullwidth characters both tokenizers agree exactly.
 * LF_ROUGE_TOK_AUTO picks CJK when more than half of the non-whitespace
 * characters of the texts being scored are CJK characters.
 */
#define LF_ROUGE_MAX_N 9
typedef enum lf_rouge_type {
    LF_ROUGE_1 = 0, /* rougeN is LF_ROUGE_1 + N - 1, N = 1..9 */
    LF_ROUGE_2 = 1,
    LF_ROUGE_L = LF_ROUGE_MAX_N,
    LF_ROUGE_LSUM = LF_ROUGE_MAX_N + 1,
    LF_ROUGE_NUM_TYPES = LF_ROUGE_MAX_N + 2,
} lf_rouge_type;
#define LF_ROUGE_BIT(t) (1u << (t))

typedef enum lf_rouge_tokenizer {
    LF_ROUGE_TOK_DEFAULT = 0, /* rouge-score's own */
    LF_ROUGE_TOK_CJK = 1,
    LF_ROUGE_TOK_AUTO = 2,
} lf_rouge_tokenizer;

/* rougeL's LCS length table (rolling rows) and each rougeLsum sentence-pair
 * table (kept whole for back-tracking) are bounded by these many cells. */
#define LF_ROUGE_MAX_LCS_CELLS ((uint64_t)1 << 32)
#define LF_ROUGE_MAX_LSUM_CELLS ((uint64_t)1 << 24)

typedef struct lf_rouge_config {
    unsigned types;               /* LF_ROUGE_BIT(...) set; default rouge1|rouge2|rougeL|rougeLsum */
    int use_stemmer;              /* default 0 */
    lf_rouge_tokenizer tokenizer; /* default LF_ROUGE_TOK_DEFAULT */
} lf_rouge_config;

lf_rouge_config lf_rouge_config_default(void);

typedef struct lf_rouge_prf {
    double precision, recall, fmeasure;
} lf_rouge_prf;

typedef struct lf_rouge_score {
    lf_rouge_prf type[LF_ROUGE_NUM_TYPES]; /* entries of types not asked for are 0 */
    lf_rouge_tokenizer tokenizer;          /* the tokenizer used (never AUTO) */
} lf_rouge_score;

/* "rouge1".."rouge9", "rougeL", "rougeLsum" <-> type; -1 / NULL when unknown. */
int lf_rouge_type_from_name(const char *name);
const char *lf_rouge_type_name(int type);
const char *lf_rouge_tokenizer_name(lf_rouge_tokenizer t); /* "default", "cjk", "auto" */

/* Score one prediction against n_refs >= 1 references (score_multi when
 * n_refs > 1). AUTO decides from these texts alone. */
lf_status lf_rouge_score_text(const lf_rouge_config *cfg, const char *const *refs, size_t n_refs,
                              const char *prediction, lf_rouge_score *out);
/* Which tokenizer AUTO resolves to over n texts (for a whole corpus). */
lf_status lf_rouge_detect_tokenizer(const char *const *texts, size_t n, lf_rouge_tokenizer *out);
/* Mean of per-item scores (summed in item order, then divided by n). */
lf_status lf_rouge_mean(const lf_rouge_score *items, size_t n, lf_rouge_score *out);
/* The tokens ROUGE compares for one text, joined by single spaces. */
lf_status lf_rouge_tokenize_text(lf_rouge_tokenizer tok, int use_stemmer, const char *text, char **out);
/* NLTK PorterStemmer (NLTK_EXTENSIONS) on one lower-case ASCII word; *out: lf_free. */
lf_status lf_porter_stem(const char *word, char **out);

/* ================================================================ ranking: Hits@N and MRR
 *
 * One query: candidates with scores (higher is better), gold candidate
 * indices, and optionally "filtered" indices — other candidates known to be
 * correct, removed before ranking (the filtered setting of Bordes et al.,
 * 2013). Let s* be the best score among the gold candidates and let the
 * competitors be the candidates that are neither gold nor filtered. With
 * G = #competitors scoring > s* and E = #competitors scoring == s*:
 *   pessimistic rank = 1 + G + E   (ties count against the gold; default)
 *   optimistic  rank = 1 + G       (ties count for it)
 *   average     rank = 1 + G + E/2 (the mean of the two: the "realistic"
 *                                   rank of Berrendorf et al., 2020)
 * With several gold indices this is the rank of the first correct answer.
 * Over queries: Hits@N = mean of [rank <= N], MRR = mean of 1/rank,
 * mean rank = mean of rank. Scores must not be NaN.
 */
typedef enum lf_tie_policy {
    LF_TIES_PESSIMISTIC = 0,
    LF_TIES_OPTIMISTIC = 1,
    LF_TIES_AVERAGE = 2,
} lf_tie_policy;

/* Rank of one query (see above). gold: n_gold >= 1 indices < n; filtered may
 * be NULL / n_filtered 0; gold indices that are also listed as filtered stay
 * gold. LF_ERR_RANGE for an index >= n, LF_ERR_INVALID_ARG for a NaN score. */
lf_status lf_rank_query(const double *scores, size_t n, const size_t *gold, size_t n_gold, const size_t *filtered,
                        size_t n_filtered, lf_tie_policy ties, double *rank);

#define LF_RANKING_MAX_K 16
typedef struct lf_ranking {
    size_t n_k;
    long k[LF_RANKING_MAX_K];
    double hits[LF_RANKING_MAX_K]; /* sums of [rank <= k] */
    double rr_sum, rank_sum;
    uint64_t n;
} lf_ranking;

/* Start an accumulator for Hits@k, k in ks[0..n_k) (each >= 1, n_k <= 16). */
lf_status lf_ranking_init(lf_ranking *r, const long *ks, size_t n_k);
lf_status lf_ranking_add(lf_ranking *r, double rank);
/* hits[i] = Hits@ks[i] (may be NULL), *mrr, *mean_rank (may be NULL);
 * LF_ERR_INVALID_ARG when no query was added. */
lf_status lf_ranking_result(const lf_ranking *r, double *hits, double *mrr, double *mean_rank);

/* ================================================================ language modelling
 *   perplexity    = exp(nll_sum / n_tokens)       (NLL in nats, summed over
 *                                                   the predicted tokens)
 *   bits per byte = nll_sum / (ln 2 * n_bytes)    (n_bytes: UTF-8 bytes of the
 *                                                   text those tokens encode)
 */
typedef struct lf_lm_stats {
    double nll_sum;
    uint64_t n_tokens, n_bytes;
} lf_lm_stats;

/* Add a chunk: its summed NLL (nats), token count and byte count. */
void lf_lm_stats_add(lf_lm_stats *s, double nll_sum, uint64_t n_tokens, uint64_t n_bytes);
/* LF_ERR_INVALID_ARG when there are no tokens / bytes; LF_ERR_NUMERIC when
 * the NLL sum is not finite. */
lf_status lf_lm_perplexity(const lf_lm_stats *s, double *ppl);
lf_status lf_lm_bits_per_byte(const lf_lm_stats *s, double *bpb);

/* ================================================================ tasks: evaluating a model
 *
 * The task harness (src/eval/tasks.c, task_ll.c, task_gen.c; docs/eval.md
 * says the same at length) scores a model on tasks read from JSON Lines
 * files, one example per line, and reports the metrics above. Unlike the
 * metrics, this part uses the model, the tokenizer and the data layer.
 *
 * Task files. Each non-blank line is one JSON object. The kind comes from a
 * "task" field (on a first header line, or on every line), or, for files
 * that name none, from lf_eval_load_opts.kinds[i] or .kind (the CLI's
 * --kind), which never override a kind the file names; a file holds one
 * kind. The first line is a header when it lacks the kind's main
 * field (perplexity "text", multiple_choice "context", classification "text",
 * generation and exact_match "prompt", ranking "query"); header keys:
 *   every kind       task, name (default: the file name without extension)
 *   multiple_choice, classification, ranking
 *                    target_delimiter (default " ")
 *   classification   labels [..], verbalizers {label: text} or [..]
 *   ranking          ties ("pessimistic" | "optimistic" | "average"), hits [1,3,10]
 *   generation, exact_match
 *                    stop [..] (default generation: none, exact_match: ["\n"]),
 *                    max_new_tokens (generation 64, exact_match 16),
 *                    temperature (0 = greedy, the default), top_k, seed
 *   perplexity       text_file or dataset (+ split, default "val"), stride
 * Example fields (other fields are ignored):
 *   perplexity       text
 *   multiple_choice  context, choices [..], gold (index or list of indices)
 *   classification   text, label (string, or index into the label set),
 *                    labels [..] (optional, else the header's)
 *   generation       prompt, references (string or list)
 *   ranking          query, candidates [..], gold (index or list), filtered [..]
 *   exact_match      prompt, answer or answers (string or list), or
 *                    response (prompt/response fine-tuning pairs)
 * (generation also takes "response" for "references".) Paths in a header
 * (text_file, dataset) are relative to the task file. Every error in a file
 * names it and the line: "tasks/mc.jsonl:7: gold 4 is out of range (4
 * choices)". A header key on an example line is an error (it would be
 * ignored).
 *
 * Log-likelihoods follow lm-evaluation-harness (HFLM._encode_pair and
 * _loglikelihood_tokens): trailing whitespace of the context moves to the
 * front of the continuation; context tokens = encode(context), continuation
 * tokens = encode(context + continuation) minus the first len(context
 * tokens); an empty context is replaced by the end-of-text token
 * (lf_tokenizer_eot: <|endoftext|>, or "\n" for a character vocabulary; an
 * error for tokenizers without one); the sequence is cut on the left to the last
 * block_size + 1 tokens (a continuation longer than block_size tokens is an
 * error); LL = sum over the continuation tokens of log_softmax(logits) in
 * double, over the first vocab_size logits. Sequences are scored in batches
 * (sorted by length, right-padded, so the padding never reaches a scored
 * position through causal attention), one model replica per thread.
 *
 * Metrics (names "<task>/<metric>"; all in 0..1 except BLEU 0..100,
 * nll/perplexity/bits_per_byte/mean_rank):
 *   perplexity       nll (mean per scored token, nats), perplexity = exp(nll),
 *                    bits_per_byte = NLL sum / (ln 2 * bytes of the scored
 *                    tokens). Windows of block_size + 1 tokens start every
 *                    `stride` tokens (default block_size: disjoint windows,
 *                    each token predicted once from the tokens before it in
 *                    its window, as nanoGPT's validation loss); a token
 *                    scored by an earlier window is not scored again. Text
 *                    is prefixed with the end-of-text token when the
 *                    tokenizer has one (so every token is scored), else its
 *                    first token is context only; a dataset split is scored
 *                    as one stream (its loss mask respected). Bytes: each
 *                    scored id's decoded length (<|endoftext|> counts 0).
 *   multiple_choice  acc (argmax of LL is gold), acc_norm (argmax of LL /
 *                    len(choice), len = Unicode code points of the choice
 *                    string without the delimiter, as the harness's
 *                    len(str)); ties go to the first choice (np.argmax)
 *   classification   accuracy, macro_f1, macro_precision, macro_recall (the
 *                    label whose verbaliser has the highest LL; lf_confusion)
 *   generation       bleu (corpus, sacreBLEU defaults), rouge1, rouge2,
 *                    rougeL, rougeLsum (mean F; tokenizer picked by
 *                    LF_ROUGE_TOK_AUTO over the whole task)
 *   ranking          hits@K for each K (default 1, 3, 10), mrr, mean_rank
 *                    (candidates scored by LL; lf_rank_query, pessimistic ties)
 *   exact_match      exact_match, f1 (SQuAD v1.1 normalisation, lf_squad_score,
 *                    as fractions 0..1)
 * Generation is lf_generate (greedy unless temperature > 0; example i samples
 * with seed lf_rng_mix(seed, i)); it stops at max_new_tokens, at the
 * end-of-text token (not part of the text), or as soon as the decoded text
 * contains a stop string, and the text is cut before the first stop string.
 *
 * Thread safety: a task set is read-only while it runs, but a model runs one
 * evaluation at a time. A run scores and generates on sessions of its own
 * (lf_session): the model's activation plan, parameters and gradients are
 * not touched, so the trainer evaluates between steps without re-planning.
 */
typedef enum lf_eval_kind {
    LF_EVAL_KIND_UNSET = 0, /* take the kind from the file */
    LF_EVAL_PERPLEXITY = 1,
    LF_EVAL_MULTIPLE_CHOICE = 2,
    LF_EVAL_CLASSIFICATION = 3,
    LF_EVAL_GENERATION = 4,
    LF_EVAL_RANKING = 5,
    LF_EVAL_EXACT_MATCH = 6,
} lf_eval_kind;

/* "perplexity", "multiple_choice", ...; "unset" for LF_EVAL_KIND_UNSET and
 * unknown values. Never NULL. */
const char *lf_eval_kind_name(lf_eval_kind k);
/* Name -> kind; LF_ERR_INVALID_ARG naming the known kinds when unknown. */
lf_status lf_eval_kind_parse(const char *name, lf_eval_kind *out);

typedef struct lf_eval_load_opts {
    lf_eval_kind kind;         /* for files that name no kind (UNSET: they must) */
    long limit;                /* > 0: the first `limit` examples of each file (for a
                          text_file or dataset perplexity task: windows) */
    const lf_eval_kind *kinds; /* NULL, or one per path: that file's default
                                  kind (UNSET entries fall back to `kind`) */
} lf_eval_load_opts;

lf_eval_load_opts lf_eval_load_opts_default(void); /* {UNSET, 0, NULL} */

typedef struct lf_eval_tasks lf_eval_tasks;

/* Read and validate n_paths task files (opts may be NULL: defaults). A path
 * that does not end in ".jsonl" or ".json" is, when opts->kind is
 * LF_EVAL_PERPLEXITY, a plain UTF-8 text file, or a dataset directory (its
 * "val" split). Task names must be distinct. Errors (nothing is returned):
 * LF_ERR_NOT_FOUND / LF_ERR_IO (a file), LF_ERR_FORMAT (bad JSON, missing or
 * mistyped field, unknown kind or header key, gold or label out of range,
 * empty file, invalid UTF-8: the message names file:line),
 * LF_ERR_INVALID_ARG, LF_ERR_NOMEM. */
lf_status lf_eval_tasks_load(lf_eval_tasks **out, const char *const *paths, int n_paths, const lf_eval_load_opts *opts);
/* The training config's eval.tasks text, as the trainer and the sweep read
 * it: one task file per line, "PATH#KIND" naming the kind of a file that
 * does not name it (e.g. `llmforge data arithmetic` output, #exact_match).
 * Splits `text` in place (writable, NUL-terminated; the newlines and '#'
 * become NULs) into paths[i] and kinds[i] (LF_EVAL_KIND_UNSET without a
 * '#'), at most `cap` entries, for lf_eval_tasks_load; *n: how many. On a
 * kind lf_eval_kind_parse does not know: LF_ERR_INVALID_ARG, paths[*n] is
 * that entry's path and *bad_kind the text after its '#' (the message is
 * lf_eval_kind_parse's; callers name their key). (src/eval/tasks.c) */
lf_status lf_eval_tasks_split(char *text, int cap, const char **paths, lf_eval_kind *kinds, int *n,
                              const char **bad_kind);
void lf_eval_tasks_free(lf_eval_tasks *t);
/* A suite: every "*.jsonl" task file of directory dir (hidden files and
 * subdirectories aside), loaded in name order with lf_eval_tasks_load (opts
 * may be NULL). The files name their kind. LF_ERR_NOT_FOUND for a missing
 * directory or one without task files; otherwise as lf_eval_tasks_load,
 * the message starting "eval suite 'DIR'". (src/eval/suite.c) */
lf_status lf_eval_suite_load(lf_eval_tasks **out, const char *dir, const lf_eval_load_opts *opts);
int lf_eval_tasks_count(const lf_eval_tasks *t);
/* Name, kind, file and number of examples of task i (NULL / UNSET / 0 when
 * out of range). A text_file or dataset perplexity task has 0 examples. */
const char *lf_eval_task_name(const lf_eval_tasks *t, int i);
lf_eval_kind lf_eval_task_kind(const lf_eval_tasks *t, int i);
const char *lf_eval_task_file(const lf_eval_tasks *t, int i);
size_t lf_eval_task_size(const lf_eval_tasks *t, int i);

typedef struct lf_eval_run_opts {
    int batch;          /* sequences per forward; 0 = automatic: the thread
                           count, fewer when the activations of a row of the
                           longest sequence would pass 2 GiB in all; on a
                           GPU up to 64, as many as half its free memory
                           holds with the batch's logits under 2 GiB */
    int max_new_tokens; /* > 0: overrides every generation/exact_match task's */
    int samples;        /* 1: per-example records in the JSON ("samples") */
} lf_eval_run_opts;

lf_eval_run_opts lf_eval_run_opts_default(void); /* {0, 0, 0} */

typedef struct lf_eval_results lf_eval_results;

lf_status lf_eval_results_create(lf_eval_results **out);
void lf_eval_results_free(lf_eval_results *r);

/* Run every task on model m with tokenizer tok (the model's; vocabulary at
 * most the model's vocab_size) and put the results in res, which is cleared
 * first (so one object serves every evaluation of a run). opts may be NULL.
 * On an error res keeps the tasks finished before it. Errors name file:line
 * where an example is at fault: the tokenizer's status for text it cannot
 * encode (LF_ERR_NOT_FOUND for a character outside a char vocabulary,
 * LF_ERR_FORMAT for invalid UTF-8), LF_ERR_FORMAT (an empty context or
 * prompt without an end-of-text token, a continuation of no tokens), LF_ERR_RANGE
 * (a continuation longer than block_size tokens, a stride above it),
 * LF_ERR_MISMATCH (a tokenizer or dataset vocabulary larger than the
 * model's), LF_ERR_NUMERIC (non-finite log-likelihoods), LF_ERR_NOMEM, and
 * whatever the model returns. */
lf_status lf_eval_tasks_run(const lf_eval_tasks *t, lf_model *m, const lf_tokenizer *tok, const lf_eval_run_opts *opts,
                            lf_eval_results *res);

/* One metric of a run: the trainer logs these as they are. */
typedef struct lf_eval_metric {
    const char *name; /* "<task>/<metric>", e.g. "arith/exact_match" */
    double value;
    int higher_is_better; /* 0 for nll, perplexity, bits_per_byte, mean_rank */
} lf_eval_metric;

/* The metrics in task order, then each kind's metric order (as listed
 * above); *n receives the count. The array and names live until the next
 * run into res or lf_eval_results_free. */
const lf_eval_metric *lf_eval_results_metrics(const lf_eval_results *r, size_t *n);
/* Value of a metric by name ("arith/exact_match"); LF_ERR_NOT_FOUND. */
lf_status lf_eval_results_get(const lf_eval_results *r, const char *name, double *value);
/* The results as one JSON object (lf_free):
 *   {"tasks": {"<name>": {"kind":..., "file":..., "examples":N, "seconds":S,
 *                         "metrics": {"acc":..., ...}, <kind details>}, ...},
 *    "metrics": {"<name>/<metric>": value, ...}}
 * Kind details: classification "labels", "confusion" (rows gold, columns
 * predicted, labels in order), "per_class"; generation "bleu_signature",
 * "rouge_tokenizer"; ranking "ties", "hits"; perplexity "tokens", "bytes",
 * "windows", "stride", "block_size"; "samples" with opts->samples. */
lf_status lf_eval_results_json(const lf_eval_results *r, char **out);
/* The results as a plain-text table (and each confusion matrix), lf_free. */
lf_status lf_eval_results_table(const lf_eval_results *r, char **out);

/* Log-likelihood requests scored directly (what the tasks use): for each
 * request, LL of `continuation` after `context` as described above. */
typedef struct lf_eval_ll_request {
    const char *context;      /* UTF-8; "" only with a tokenizer that has an end-of-text token */
    const char *continuation; /* UTF-8, must encode to at least one token */
    double ll;                /* out: sum of log p of the continuation tokens (nats) */
    int n_tokens;             /* out: continuation tokens scored */
    int greedy;               /* out: 1 when every continuation token is the argmax */
} lf_eval_ll_request;

/* Score n requests, `batch` sequences per forward (0 = automatic). Errors
 * name the request index ("request 3: ..."). */
lf_status lf_eval_loglikelihood(lf_model *m, const lf_tokenizer *tok, lf_eval_ll_request *reqs, size_t n, int batch);

#ifdef __cplusplus
}
#endif
#endif
