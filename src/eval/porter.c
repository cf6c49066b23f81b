/*
 * NLTK's PorterStemmer in its default NLTK_EXTENSIONS mode (nltk/stem/
 * porter.py, nltk 3.x), the stemmer rouge-score 0.1.2 uses. Each step below
 * is the method of the same name, rule lists in the same order, with the
 * same "first matching suffix decides, even when its condition fails"
 * behaviour of _apply_rule_list.
 *
 * Input is a lower-case ASCII word (rouge-score only stems [a-z0-9]+ tokens
 * longer than 3 characters). Digits are consonants, as in the Python code
 * (anything that is not a vowel or 'y'). Words are worked on in a fixed
 * buffer; no step makes a word longer than it was on entry plus one.
 */
#include <string.h>
#include "eval/eval_impl.h"

typedef struct word {
    char *s;
    size_t n;
} word;

static int is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

/* _is_consonant: 'y' is a consonant when it starts the word or follows a vowel. */
static int is_cons(const char *s, size_t i) {
    if (is_vowel(s[i])) return 0;
    if (s[i] == 'y') {
        int negate = 0;
        while (i > 0 && s[i] == 'y') {
            negate = !negate;
            i--;
        }
        return (!is_vowel(s[i])) != negate;
    }
    return 1;
}

/* Consonant flag of each position in one left-to-right pass, as
 * _consonant_flags does (a per-position is_cons() would be quadratic on a
 * run of 'y's): a 'y' is a consonant at the start or after a vowel. */
#define CONS_NEXT(s, i, prev) (is_vowel((s)[i]) ? 0 : (s)[i] == 'y' ? ((i) == 0 ? 1 : !(prev)) : 1)

/* _measure: number of "vc" pairs in the consonant/vowel pattern of s[0..n). */
static int measure(const char *s, size_t n) {
    int m = 0, prev = 0;
    for (size_t i = 0; i < n; i++) {
        int c = CONS_NEXT(s, i, prev);
        if (c && i > 0 && !prev) m++;
        prev = c;
    }
    return m;
}

static int contains_vowel(const char *s, size_t n) {
    int prev = 0;
    for (size_t i = 0; i < n; i++) {
        prev = CONS_NEXT(s, i, prev);
        if (!prev) return 1;
    }
    return 0;
}

static int ends_double_cons(const char *s, size_t n) { return n >= 2 && s[n - 1] == s[n - 2] && is_cons(s, n - 1); }

/* _ends_cvc with the NLTK extension for two-letter stems. */
static int ends_cvc(const char *s, size_t n) {
    if (n >= 3 && is_cons(s, n - 3) && !is_cons(s, n - 2) && is_cons(s, n - 1) && s[n - 1] != 'w' && s[n - 1] != 'x' &&
        s[n - 1] != 'y')
        return 1;
    return n == 2 && !is_cons(s, 0) && is_cons(s, 1);
}

static int ends_with(const word *w, const char *suf) {
    size_t k = strlen(suf);
    return w->n >= k && !memcmp(w->s + w->n - k, suf, k);
}

/* word = word[:-len(suf)] + rep */
static void replace_suffix(word *w, const char *suf, const char *rep) {
    size_t k = strlen(suf), r = strlen(rep);
    w->n -= k;
    memcpy(w->s + w->n, rep, r);
    w->n += r;
    w->s[w->n] = 0;
}

/* Conditions on the stem (the word without the matched suffix). */
enum cond { C_NONE, C_M_GT0, C_M_GT1, C_ION, C_LOGI, C_LL };

typedef struct rule {
    const char *suf, *rep;
    enum cond cond;
} rule;

/* `whole` is the word the rule list was applied to (for conditions that
 * look past the stem, as the lambdas over `word` in porter.py do). */
static int cond_ok(enum cond c, const char *stem, size_t n, const word *whole) {
    switch (c) {
    case C_NONE: return 1;
    case C_M_GT0: return measure(stem, n) > 0;
    case C_M_GT1: return measure(stem, n) > 1;
    case C_ION: return measure(stem, n) > 1 && n > 0 && (stem[n - 1] == 's' || stem[n - 1] == 't');
    case C_LOGI: return measure(whole->s, whole->n - 3) > 0; /* word[:-3] */
    case C_LL: return measure(whole->s, whole->n - 1) > 1;   /* word[:-1] */
    }
    return 0;
}

/* _apply_rule_list without the "*d" rule (handled in step 1b). */
static void apply_rules(word *w, const rule *rules, size_t nr) {
    for (size_t i = 0; i < nr; i++) {
        if (!ends_with(w, rules[i].suf)) continue;
        size_t stem_n = w->n - strlen(rules[i].suf);
        if (cond_ok(rules[i].cond, w->s, stem_n, w)) replace_suffix(w, rules[i].suf, rules[i].rep);
        return;
    }
}

static void step1a(word *w) {
    if (ends_with(w, "ies") && w->n == 4) {
        replace_suffix(w, "ies", "ie");
        return;
    }
    static const rule r[] = {{"sses", "ss", C_NONE}, {"ies", "i", C_NONE}, {"ss", "ss", C_NONE}, {"s", "", C_NONE}};
    apply_rules(w, r, 4);
}

static void step1b(word *w) {
    if (ends_with(w, "ied")) {
        replace_suffix(w, "ied", w->n == 4 ? "ie" : "i");
        return;
    }
    if (ends_with(w, "eed")) {
        if (measure(w->s, w->n - 3) > 0) replace_suffix(w, "eed", "ee");
        return;
    }
    size_t stem_n = 0;
    int ok = 0;
    if (ends_with(w, "ed") && contains_vowel(w->s, w->n - 2)) {
        stem_n = w->n - 2;
        ok = 1;
    } else if (ends_with(w, "ing") && contains_vowel(w->s, w->n - 3)) {
        stem_n = w->n - 3;
        ok = 1;
    }
    if (!ok) return;
    w->n = stem_n; /* intermediate_stem */
    w->s[w->n] = 0;
    if (ends_with(w, "at")) {
        replace_suffix(w, "at", "ate");
        return;
    }
    if (ends_with(w, "bl")) {
        replace_suffix(w, "bl", "ble");
        return;
    }
    if (ends_with(w, "iz")) {
        replace_suffix(w, "iz", "ize");
        return;
    }
    /* ("*d", last letter, not l/s/z): drop one of the double letters */
    if (ends_double_cons(w->s, w->n)) {
        char last = w->s[w->n - 1];
        if (last != 'l' && last != 's' && last != 'z') {
            w->n -= 1;
            w->s[w->n] = 0;
        }
        return;
    }
    /* ("", "e", m == 1 and *o) */
    if (measure(w->s, w->n) == 1 && ends_cvc(w->s, w->n)) {
        w->s[w->n++] = 'e';
        w->s[w->n] = 0;
    }
}

static void step1c(word *w) {
    /* ("y", "i", len(stem) > 1 and stem ends with a consonant) */
    if (!ends_with(w, "y")) return;
    size_t n = w->n - 1;
    if (n > 1 && is_cons(w->s, n - 1)) w->s[n] = 'i';
}

static void step2(word *w) {
    if (ends_with(w, "alli") && measure(w->s, w->n - 4) > 0) {
        replace_suffix(w, "alli", "al");
        step2(w);
        return;
    }
    static const rule r[] = {
        {"ational", "ate", C_M_GT0}, {"tional", "tion", C_M_GT0}, {"enci", "ence", C_M_GT0},
        {"anci", "ance", C_M_GT0},   {"izer", "ize", C_M_GT0},    {"bli", "ble", C_M_GT0},
        {"alli", "al", C_M_GT0},     {"entli", "ent", C_M_GT0},   {"eli", "e", C_M_GT0},
        {"ousli", "ous", C_M_GT0},   {"ization", "ize", C_M_GT0}, {"ation", "ate", C_M_GT0},
        {"ator", "ate", C_M_GT0},    {"alism", "al", C_M_GT0},    {"iveness", "ive", C_M_GT0},
        {"fulness", "ful", C_M_GT0}, {"ousness", "ous", C_M_GT0}, {"aliti", "al", C_M_GT0},
        {"iviti", "ive", C_M_GT0},   {"biliti", "ble", C_M_GT0},  {"fulli", "ful", C_M_GT0},
        {"logi", "log", C_LOGI},
    };
    apply_rules(w, r, sizeof r / sizeof r[0]);
}

static void step3(word *w) {
    static const rule r[] = {
        {"icate", "ic", C_M_GT0}, {"ative", "", C_M_GT0}, {"alize", "al", C_M_GT0}, {"iciti", "ic", C_M_GT0},
        {"ical", "ic", C_M_GT0},  {"ful", "", C_M_GT0},   {"ness", "", C_M_GT0},
    };
    apply_rules(w, r, sizeof r / sizeof r[0]);
}

static void step4(word *w) {
    static const rule r[] = {
        {"al", "", C_M_GT1},    {"ance", "", C_M_GT1}, {"ence", "", C_M_GT1}, {"er", "", C_M_GT1},
        {"ic", "", C_M_GT1},    {"able", "", C_M_GT1}, {"ible", "", C_M_GT1}, {"ant", "", C_M_GT1},
        {"ement", "", C_M_GT1}, {"ment", "", C_M_GT1}, {"ent", "", C_M_GT1},  {"ion", "", C_ION},
        {"ou", "", C_M_GT1},    {"ism", "", C_M_GT1},  {"ate", "", C_M_GT1},  {"iti", "", C_M_GT1},
        {"ous", "", C_M_GT1},   {"ive", "", C_M_GT1},  {"ize", "", C_M_GT1},
    };
    apply_rules(w, r, sizeof r / sizeof r[0]);
}

static void step5a(word *w) {
    if (!ends_with(w, "e")) return;
    size_t n = w->n - 1;
    int m = measure(w->s, n);
    if (m > 1 || (m == 1 && !ends_cvc(w->s, n))) {
        w->n = n;
        w->s[n] = 0;
    }
}

static void step5b(word *w) {
    static const rule r[] = {{"ll", "l", C_LL}};
    apply_rules(w, r, 1);
}

/* The irregular forms of NLTK_EXTENSIONS (the "pool"). */
static const char *irregular(const char *s, size_t n) {
    static const char *const pool[][2] = {
        {"sky", "sky"},        {"skies", "sky"},       {"dying", "die"},        {"lying", "lie"},
        {"tying", "tie"},      {"news", "news"},       {"innings", "inning"},   {"inning", "inning"},
        {"outings", "outing"}, {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
        {"howe", "howe"},      {"proceed", "proceed"}, {"exceed", "exceed"},    {"succeed", "succeed"},
    };
    for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++)
        if (strlen(pool[i][0]) == n && !memcmp(pool[i][0], s, n)) return pool[i][1];
    return NULL;
}

size_t lf__porter_stem(const char *in, size_t n, char *out) {
    const char *irr = irregular(in, n);
    if (irr) {
        size_t k = strlen(irr);
        memcpy(out, irr, k + 1);
        return k;
    }
    memcpy(out, in, n);
    out[n] = 0;
    if (n <= 2) return n;
    word w = {out, n};
    step1a(&w);
    step1b(&w);
    step1c(&w);
    step2(&w);
    step3(&w);
    step4(&w);
    step5a(&w);
    step5b(&w);
    return w.n;
}
