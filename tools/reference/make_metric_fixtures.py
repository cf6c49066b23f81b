#!/usr/bin/env python3
# Interpreter: the default python3 (CPython 3.11) with the PyPI packages
# sacrebleu 2.6.0 and rouge-score 0.1.2 (which pulls in nltk for its Porter
# stemmer), installed with `pip install sacrebleu==2.6.0 rouge-score==0.1.2`.
#
# make_metric_fixtures.py -- writes the reference fixtures the C metrics are
# tested against (tests/eval/test_bleu.c, tests/eval/test_rouge.c):
#
#   tests/fixtures/metrics_bleu.json
#     "tokenize": sacreBLEU's preprocessing (BLEU._preprocess_segment, then
#                 ' '.join(.split())) of many texts, for each tokenizer and
#                 with/without lowercase;
#     "cases":    corpus_score and sentence_score (effective_order=True, as
#                 sacrebleu.sentence_bleu) of a varied set of hypothesis /
#                 reference sets under the tokenizers 13a, zh, char, none, the
#                 smoothing methods exp, floor, add-k, none (default and
#                 explicit values), lowercase, effective order, one to three
#                 references and a variable number of references. Each score
#                 stores score, counts, totals, precisions, bp, sys_len,
#                 ref_len and the signature string.
#   tests/fixtures/metrics_rouge.json
#     "tokenize": rouge-score's tokenizer output with and without stemmer;
#     "stems":    nltk PorterStemmer().stem(w) for classic Porter test words
#                 and generated words that reach every rule;
#     "cases":    RougeScorer(types, use_stemmer).score_multi(refs, pred) per
#                 item (rouge1, rouge2, rouge3, rougeL, rougeLsum; precision,
#                 recall, fmeasure) and their mean over items (summed in item
#                 order, divided by the count).
#
# All numbers are written with repr() precision (json.dump), so the C side
# can compare to the last bit. The texts are all written in this file; the
# generated ones come from random.Random with fixed seeds, and the fixture
# stores the texts themselves, so the C tests never regenerate anything.
#
# Usage:  python3 tools/reference/make_metric_fixtures.py [--out-dir tests/fixtures]
import argparse
import json
import os
import random

import nltk
import sacrebleu
from nltk.stem import porter
from rouge_score import rouge_scorer
from rouge_score import tokenize as rouge_tokenize
from sacrebleu.metrics import BLEU

assert sacrebleu.__version__ == "2.6.0", sacrebleu.__version__

# ---------------------------------------------------------------- texts
NEWS_HYP = [
    "The government announced on Tuesday that it would raise taxes on fuel.",
    "Shares in the company fell 5% after the results were published.",
    "The president met with leaders of the opposition to discuss the budget.",
    "Heavy rain caused flooding in several towns across the north of the country.",
    "Scientists say the new vaccine is safe and effective in older adults.",
    "The football club has signed a new striker for a record fee.",
    "Police arrested two men in connection with the robbery last night.",
    "It is a guide to action which ensures that the military always obeys the commands of the party.",
]
NEWS_REF1 = [
    "On Tuesday, the government said it will increase fuel taxes.",
    "The company's shares dropped 5% after it published its results.",
    "The president met opposition leaders to discuss the budget.",
    "Flooding hit several towns in the north of the country after heavy rain.",
    "The new vaccine is safe and effective for older people, scientists said.",
    "The club signed a new striker for a record transfer fee.",
    "Two men were arrested by police last night over the robbery.",
    "It is a guide to action that ensures that the military will forever heed Party commands.",
]
NEWS_REF2 = [
    "The government announced Tuesday a rise in taxes on fuel.",
    "Company shares fell by 5 percent once the results were out.",
    "Opposition leaders met the president to talk about the budget.",
    "Several northern towns were flooded after heavy rainfall.",
    "According to scientists the new vaccine is safe and works in older adults.",
    "A new striker has joined the football club for a record fee.",
    "Last night police arrested two men in connection with the robbery.",
    "It is the guiding principle which guarantees the military forces always being under the command of the Party.",
]
NEWS_REF3 = [
    "Fuel taxes will go up, the government announced on Tuesday.",
    "After publication of the results, the company's shares lost 5%.",
    "The budget was discussed by the president and opposition leaders.",
    "Heavy rain flooded several towns in the country's north.",
    "Scientists said the new vaccine was safe and effective among the elderly.",
    "The football club paid a record fee to sign a new striker.",
    "Two men have been arrested in connection with last night's robbery.",
    "It is the practical guide for the army always to heed the directions of the party.",
]

PUNCT_HYP = [
    '"Hello," she said -- "it\'s 5:30 p.m. already!"',
    "The U.S. economy grew 3.2% in Q1 (vs. 2.9% expected); exports rose.",
    "Tom &amp; Jerry said &quot;no&quot; &lt;again&gt; &amp;amp; left.",
    "See http://example.com/a-b?c=d&e=f#g for details... really!?",
    "Prices: $3.50, EUR 4,20 and 1,000,000 yen -- a 1990-2000 high.",
    "<skipped> the rest of the sentence, e.g. this part; i.e. that one.",
    "Well-known self-driving cars: Tesla's Model-3, Waymo's 'Firefly'.",
    "[citation needed] {braces} |pipes| ~tilde~ `backticks` ^caret^ @at #hash",
    ".5 and 5. and ,5 and 5, and -5 and 5- and 5-5 and a-5",
    "Ellipsis...and dots.... and commas,,, and mixed.,.,",
]
PUNCT_REF = [
    '"Hello," she said, "it is 5:30 p.m. already!"',
    "The U.S. economy grew by 3.2% in Q1 (against 2.9% expected), and exports rose.",
    "Tom & Jerry said \"no\" <again> &amp; left.",
    "For details see http://example.com/a-b?c=d&e=f#g ... really?!",
    "Prices: $3.50, EUR 4,20 and 1,000,000 yen - a high for 1990-2000.",
    "The rest of the sentence, e.g. this part; i.e. that one.",
    "Well known self-driving cars: Tesla's Model 3 and Waymo's 'Firefly'.",
    "[citation needed] {braces} |pipes| ~tilde~ `backticks` ^caret^ @at #hash!",
    ".5 and 5. and ,5 and 5, and -5 and 5- and 5 - 5 and a - 5",
    "Ellipsis... and dots... and commas, and mixed.",
]

NUM_HYP = [
    "In 2023 the population was 8,045,311 and grew by 0.9 percent.",
    "The score was 3-2 after 90 minutes and 4-2 after extra time.",
    "Version 2.6.0 was released on 2024-05-01 with 1,234 changes.",
    "Pi is about 3.14159, e is about 2.71828.",
    "Room 101, floor 7, building 42B: 12.5 m2 at -3.5 C.",
]
NUM_REF = [
    "In 2023 the population was 8,045,311, an increase of 0.9 percent.",
    "After 90 minutes it was 3-2, and 4-2 after extra time.",
    "Version 2.6.0 came out on 2024-05-01 and had 1,234 changes.",
    "Pi is roughly 3.14159 and e is roughly 2.71828.",
    "Room 101 on floor 7 of building 42B: 12.5 m2 at -3.5 C.",
]

ZH_HYP = [
    "今天天气很好，我们去公园散步吧。",
    "中国的经济在2023年增长了5.2%。",
    "他说：“我明天会来北京。”",
    "这是一个关于机器学习的例子 -- machine learning。",
    "人工智能正在改变世界——尤其是语言模型。",
    "𠀀𠀁是扩展B区的汉字，「引号」和『书名号』。",
    "",
]
ZH_REF = [
    "今天天气不错，我们去公园走走吧。",
    "2023年中国经济增长5.2%。",
    "他说：“明天我会来北京。”",
    "这是机器学习（machine learning）的一个例子。",
    "人工智能正在改变世界，特别是语言模型。",
    "𠀀𠀁是汉字扩展B区的字，「引号」与『书名号』。",
    "空的假设。",
]

CASE_HYP = [
    "THE QUICK BROWN FOX jumps over THE LAZY DOG.",
    "Paris Is The Capital Of France.",
    "ÉCOLE NORMALE SUPÉRIEURE and STRASSE",
    "ΟΔΟΣ ΑΘΗΝΑΣ — ΣΟΦΟΣ Σ.",
    "İstanbul and the KELVIN sign K",
    "DŽungla ǅungla and ﬁne ligatures",
]
CASE_REF = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "école normale supérieure and straße",
    "οδος αθηνας — σοφος σ.",
    "i̇stanbul and the kelvin sign k",
    "džungla ǆungla and ﬁne ligatures",
]

EMPTY_ONE_HYP = ["", "Yes", "", "dog", "the", "Hello world"]
EMPTY_ONE_REF = ["The answer is yes.", "Yes", "", "The dog barked.", "the", ""]

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were their one all we can her has there been if more when will would who so no market report "
         "government minister officials said year people company percent police country week city state told "
         "million billion economic public health data model training language learning network results first "
         "new last two three time world could after before over under between during against through").split()


def long_sentences(seed, n, lo, hi):
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        k = rnd.randint(lo, hi)
        words = [rnd.choice(WORDS) for _ in range(k)]
        # sprinkle punctuation and numbers so the tokenizer has work to do
        for i in range(0, k, rnd.randint(7, 13)):
            words[i] = words[i] + rnd.choice([",", ".", ";", ":", "", ""])
        for i in range(3, k, 17):
            words[i] = str(rnd.randint(0, 99999)) + rnd.choice(["", ".5", ",000", "-1"])
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + ".")
    return out


def perturb(sents, seed, p):
    """A hypothesis per reference: drop / swap / replace words with probability p."""
    rnd = random.Random(seed)
    out = []
    for s in sents:
        w = s.split()
        res = []
        for x in w:
            r = rnd.random()
            if r < p / 3:
                continue
            if r < 2 * p / 3:
                res.append(rnd.choice(WORDS))
            else:
                res.append(x)
            if rnd.random() < p / 4 and len(res) > 1:
                res[-1], res[-2] = res[-2], res[-1]
        out.append(" ".join(res))
    return out


LONG_REF = long_sentences(7, 6, 100, 180)
LONG_HYP = perturb(LONG_REF, 8, 0.3)
LONG_REF2 = perturb(LONG_REF, 9, 0.15)


# ---------------------------------------------------------------- BLEU
def bleu_result(score, sig):
    return {
        "score": score.score,
        "counts": list(score.counts),
        "totals": list(score.totals),
        "precisions": list(score.precisions),
        "bp": score.bp,
        "sys_len": score.sys_len,
        "ref_len": score.ref_len,
        "signature": sig,
    }


def bleu_case(name, hyps, refs, tokenize="13a", smooth="exp", smooth_value=None, lowercase=False, eff=False):
    kw = dict(tokenize=tokenize, smooth_method=smooth, smooth_value=smooth_value, lowercase=lowercase)
    # corpus_score may modify nothing we pass, but be safe: copies
    m = BLEU(effective_order=eff, **kw)
    corpus = m.corpus_score(list(hyps), [list(r) for r in refs])
    out = {
        "name": name,
        "tokenize": tokenize,
        "smooth_method": smooth,
        "smooth_value": smooth_value,
        "lowercase": lowercase,
        "effective_order": eff,
        "hyps": list(hyps),
        "refs": [list(r) for r in refs],
        "corpus": bleu_result(corpus, str(m.get_signature())),
        "sentences": [],
    }
    for i, h in enumerate(hyps):
        seg_refs = [r[i] for r in refs if r[i] is not None]
        s = BLEU(effective_order=True, **kw)
        sc = s.sentence_score(h, seg_refs)
        out["sentences"].append(bleu_result(sc, str(s.get_signature())))
    return out


def bleu_fixture():
    cases = []
    news1 = [NEWS_REF1]
    news3 = [NEWS_REF1, NEWS_REF2, NEWS_REF3]
    for smooth, val in [("exp", None), ("floor", None), ("add-k", None), ("none", None), ("floor", 0.3),
                        ("add-k", 2), ("add-k", 0.5)]:
        cases.append(bleu_case(f"news-1ref-{smooth}-{val}", NEWS_HYP, news1, smooth=smooth, smooth_value=val))
    cases.append(bleu_case("news-2ref", NEWS_HYP, [NEWS_REF1, NEWS_REF2]))
    cases.append(bleu_case("news-3ref", NEWS_HYP, news3))
    cases.append(bleu_case("news-3ref-eff", NEWS_HYP, news3, eff=True))
    cases.append(bleu_case("news-3ref-floor-lc", NEWS_HYP, news3, smooth="floor", lowercase=True))
    # a variable number of references (None = no reference for that segment)
    var2 = [r if i % 3 else None for i, r in enumerate(NEWS_REF2)]
    var3 = [r if i % 2 else None for i, r in enumerate(NEWS_REF3)]
    cases.append(bleu_case("news-var-refs", NEWS_HYP, [NEWS_REF1, var2, var3]))
    for tok in ["13a", "none", "char", "zh"]:
        cases.append(bleu_case(f"punct-{tok}", PUNCT_HYP, [PUNCT_REF], tokenize=tok))
        cases.append(bleu_case(f"numbers-{tok}", NUM_HYP, [NUM_REF], tokenize=tok))
    for tok in ["zh", "char", "13a"]:
        for smooth in ["exp", "floor", "add-k", "none"]:
            cases.append(bleu_case(f"zh-{tok}-{smooth}", ZH_HYP, [ZH_REF], tokenize=tok, smooth=smooth))
    for lc in [False, True]:
        for tok in ["13a", "char", "zh", "none"]:
            cases.append(bleu_case(f"case-{tok}-lc{int(lc)}", CASE_HYP, [CASE_REF], tokenize=tok, lowercase=lc))
    for smooth in ["exp", "floor", "add-k", "none"]:
        cases.append(bleu_case(f"empty-one-{smooth}", EMPTY_ONE_HYP, [EMPTY_ONE_REF], smooth=smooth))
        cases.append(bleu_case(f"empty-one-{smooth}-eff", EMPTY_ONE_HYP, [EMPTY_ONE_REF], smooth=smooth, eff=True))
    cases.append(bleu_case("all-empty-hyps", ["", "", ""], [["a b c", "d", ""]]))
    cases.append(bleu_case("no-match", ["alpha beta gamma", "delta"], [["one two three", "four five"]]))
    for smooth in ["exp", "floor", "add-k", "none"]:
        cases.append(bleu_case(f"long-{smooth}", LONG_HYP, [LONG_REF], smooth=smooth))
    cases.append(bleu_case("long-2ref", LONG_HYP, [LONG_REF, LONG_REF2]))
    cases.append(bleu_case("long-char", LONG_HYP[:2], [LONG_REF[:2]], tokenize="char"))
    # texts with newlines and other whitespace (13a joins "-\n", turns "\n" into " ")
    ws_hyp = ["multi-\nline text\nhere", "tabs\tand\u00a0nbsp\u3000ideographic space  ", "\u2028line sep\u2029"]
    ws_ref = ["multiline text here", "tabs and nbsp ideographic space", "line sep"]
    for tok in ["13a", "zh", "char", "none"]:
        cases.append(bleu_case(f"whitespace-{tok}", ws_hyp, [ws_ref], tokenize=tok))
    # the whole mix in one corpus
    mix_h = NEWS_HYP + PUNCT_HYP + NUM_HYP + CASE_HYP + EMPTY_ONE_HYP
    mix_r = NEWS_REF1 + PUNCT_REF + NUM_REF + CASE_REF + EMPTY_ONE_REF
    cases.append(bleu_case("mix-13a", mix_h, [mix_r]))
    cases.append(bleu_case("mix-13a-lc", mix_h, [mix_r], lowercase=True))

    tok_texts = PUNCT_HYP + NUM_HYP + CASE_HYP + ZH_HYP + ws_hyp + [
        "a.b,c 1.2,3 a-1 1-a -1- x.", "&quot;&amp;quot;&lt;&gt;&", " leading and trailing ", "A.\nB-\nC",
        "\u0130I\u03a3\u03a3a\u03a3 \u03a3", "mixed 中文 and English—dash…", "﹏︰ＡＢＣ１２３", "\U0001F600 emoji!",
    ]
    # every character that str.lower() changes (one token: final-sigma contexts
    # included), and every str.isspace() character between two letters
    cased = "".join(chr(c) for c in range(0x110000)
                    if not 0xD800 <= c < 0xE000 and chr(c).lower() != chr(c))
    spaces = "x".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000 and chr(c).isspace())
    tok_texts += [cased, cased[::-1], "a" + spaces + "b", "\u03a3\u0301a\u03a3\u0301 a\u00ad\u03a3 \u03a3\u03a3"]
    tokenize = []
    for tok in ["13a", "zh", "char", "none"]:
        for lc in [False, True]:
            m = BLEU(tokenize=tok, lowercase=lc)
            for t in tok_texts:
                tokenize.append({"tokenize": tok, "lowercase": lc, "text": t,
                                 "tokens": " ".join(m._preprocess_segment(t).split())})
    return {"generator": "tools/reference/make_metric_fixtures.py", "sacrebleu_version": sacrebleu.__version__,
            "tokenize": tokenize, "cases": cases}


# ---------------------------------------------------------------- ROUGE
ROUGE_TYPES = ["rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum"]

SUMM_PRED = [
    "The government will raise fuel taxes.\nThe announcement came on Tuesday.",
    "Shares fell 5% after the results.\nInvestors were worried about debt.\nAnalysts expect more losses.",
    "Heavy rain flooded towns in the north.",
    "Scientists said the vaccine is safe.\nIt works in older adults.\nIt will be rolled out next month.",
    "running runs ran runner easily generously relational conditional hopefulness",
    "",
    "yes",
    "The cat sat on the mat.\n\nThe dog sat on the log.\n",
    "police police police arrested arrested men",
    "Café naïve résumé — Ünïcödé is deleted; KELVIN \u212a and \u0130stanbul stay.",
    "今天天气很好，我们去公园散步吧。",
    "the the the the",
    "A B C D E F G",
]
SUMM_REFS = [
    ["On Tuesday the government announced it will increase taxes on fuel.",
     "Fuel taxes are going up.\nThe government said so on Tuesday."],
    ["The company's shares dropped 5% after it published results.\nDebt worries investors."],
    ["Flooding hit several northern towns after heavy rain.", "Towns in the north were flooded.",
     "Heavy rain flooded towns in the north."],
    ["The new vaccine is safe and effective for older people, scientists said.\nIt will be available next month."],
    ["the runner runs easily and generously in relation to the conditions of hope"],
    ["Something was said."],
    ["Yes"],
    ["The cat was sitting on the mat.\nThe dog was on the log."],
    ["the police arrested two men"],
    ["Cafe naive resume: unicode is deleted; kelvin k and istanbul stay."],
    ["今天天气不错，我们去公园走走吧。"],
    ["the cat and the hat"],
    ["G F E D C B A", "A B C D E F G"],
]


def rouge_fixture():
    long_pred = ["\n".join(LONG_HYP[i:i + 3]) for i in range(0, 6, 3)] + LONG_HYP[:2]
    long_refs = [["\n".join(LONG_REF[i:i + 3])] for i in range(0, 6, 3)] + [[LONG_REF[0], LONG_REF2[0]], [LONG_REF[1]]]
    sets = [("summaries", SUMM_PRED, SUMM_REFS), ("long", long_pred, long_refs),
            ("news", NEWS_HYP, [[a, b, c] for a, b, c in zip(NEWS_REF1, NEWS_REF2, NEWS_REF3)]),
            ("punct-numbers", PUNCT_HYP + NUM_HYP, [[r] for r in PUNCT_REF + NUM_REF]),
            ("case", CASE_HYP, [[r] for r in CASE_REF])]
    cases = []
    for name, preds, refs in sets:
        for stem in [False, True]:
            sc = rouge_scorer.RougeScorer(ROUGE_TYPES, use_stemmer=stem)
            items = []
            for p, r in zip(preds, refs):
                s = sc.score_multi(r, p)
                items.append({"prediction": p, "references": r,
                              "scores": {t: [s[t].precision, s[t].recall, s[t].fmeasure] for t in ROUGE_TYPES}})
            mean = {}
            for t in ROUGE_TYPES:
                acc = [0.0, 0.0, 0.0]
                for it in items:
                    for k in range(3):
                        acc[k] += it["scores"][t][k]
                mean[t] = [a / len(items) for a in acc]
            cases.append({"name": f"{name}-stem{int(stem)}", "types": ROUGE_TYPES, "use_stemmer": stem,
                          "items": items, "mean": mean})
    # a scorer asked for rougeLsum alone (rouge-score skips the whole-text tokens then)
    sc = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    items = []
    for p, r in zip(SUMM_PRED, SUMM_REFS):
        s = sc.score_multi(r, p)
        items.append({"prediction": p, "references": r,
                      "scores": {"rougeLsum": [s["rougeLsum"].precision, s["rougeLsum"].recall,
                                               s["rougeLsum"].fmeasure]}})
    mean = {"rougeLsum": [sum(it["scores"]["rougeLsum"][k] for it in items) / len(items) for k in range(3)]}
    cases.append({"name": "lsum-only", "types": ["rougeLsum"], "use_stemmer": True, "items": items, "mean": mean})

    stemmer = porter.PorterStemmer()
    tok_texts = SUMM_PRED + PUNCT_HYP + CASE_HYP
    tokenize = []
    for stem in [False, True]:
        for t in tok_texts:
            toks = rouge_tokenize.tokenize(t, stemmer if stem else None)
            tokenize.append({"use_stemmer": stem, "text": t, "tokens": " ".join(toks)})
    return {"generator": "tools/reference/make_metric_fixtures.py", "rouge_score_version": "0.1.2",
            "nltk_version": nltk.__version__, "tokenize": tokenize, "stems": stem_words(stemmer), "cases": cases}


CLASSIC = ("caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated troubled sized "
           "hopping tanned falling hissing fizzed failing filing happy sky relational conditional rational valenci "
           "hesitanci digitizer conformabli radicalli differentli vileli analogousli vietnamization predication "
           "operator feudalism decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate "
           "formative formalize electriciti electrical hopeful goodness revival allowance inference airliner "
           "gyroscopic adjustable defensible irritant replacement adjustment dependent adoption homologou communism "
           "activate angulariti homologous effective bowdlerize probate rate cease controll roll dying lying tying "
           "skies news innings inning outings outing cannings canning howe proceed exceed succeed generously "
           "yyyy syzygy toy enjoy spied died flies dies spy fly try cried ties lies happily archaeology geology "
           "theology analogy fulli hopefulli generalli y by oats trees ivy troubles private oaten orrery agreement "
           "feeding meeting needed speed bleed 1990s 4ever b2b abcd agree disagree hoping hopped zzzz xyzzy "
           "yellowy yay yoyo eyeing buyer relativity possibility capability sensibility "
           "unstoppable fizzing buzzing missing spilling ailing boiling oil owed mowing sowing axing taxing "
           "waxing").split()


def stem_words(stemmer):
    rnd = random.Random(11)
    suffixes = ["", "s", "es", "ies", "sses", "ss", "ed", "eed", "ied", "ing", "y", "ational", "tional", "enci",
                "anci", "izer", "bli", "alli", "entli", "eli", "ousli", "ization", "ation", "ator", "alism",
                "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "fulli", "logi", "icate", "ative",
                "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence", "er", "ic", "able", "ible", "ant",
                "ement", "ment", "ent", "sion", "tion", "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize", "e",
                "ll", "at", "bl", "iz", "ating", "bling", "izing", "ated", "led", "ped", "ying", "yed", "ly"]
    onsets = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
              "br", "cr", "dr", "fl", "gr", "pl", "st", "str", "th", "sh", "ch", "sp", "tr", "qu", "x"]
    nuclei = ["a", "e", "i", "o", "u", "y", "ee", "oo", "ai", "ea", "ou", "io", "ya", "ay", "oy"]
    codas = ["", "b", "d", "g", "k", "l", "m", "n", "p", "r", "s", "t", "x", "w", "y", "z", "ll", "ss", "tt",
             "nd", "rt", "ck", "ng", "st", "zz", "ff", "1", "9"]
    words = list(CLASSIC)
    for _ in range(3000):
        w = "".join(rnd.choice(onsets) + rnd.choice(nuclei) + rnd.choice(codas) for _ in range(rnd.randint(1, 3)))
        words.append(w + rnd.choice(suffixes))
    seen, out = set(), []
    for w in words:
        if len(w) > 3 and w not in seen:  # rouge-score only stems tokens longer than 3
            seen.add(w)
            out.append([w, stemmer.stem(w)])
    return out


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "..", "tests", "fixtures"))
    a = ap.parse_args()
    for name, data in [("metrics_bleu.json", bleu_fixture()), ("metrics_rouge.json", rouge_fixture())]:
        path = os.path.join(a.out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
