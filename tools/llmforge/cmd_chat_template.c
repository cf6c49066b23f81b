/*
 * llmforge chat-template: a conversation rendered by a model's chat
 * template, for users to check their fine-tuning data and prompts.
 *
 *   llmforge chat-template --model DIR|FILE --messages FILE.json
 *                          [--add-generation-prompt] [--date "YYYY-MM-DD HH:MM:SS"] [--mask]
 *
 * DIR is a model directory (its chat_template.json, else its Hugging Face
 * template: chat_template.jinja or tokenizer_config.json's
 * "chat_template"), or FILE one of those files, or "chatml". FILE.json
 * holds a list of {"role", "content"} messages, or an object with
 * "messages" (one record of a `messages` JSONL). The rendering goes to
 * stdout as it is (no newline added). --mask prints instead one JSON
 * object: {"text", "assistant_turns": [[start, end], ...]} with UTF-8 byte
 * offsets of the turns `prepare --mode sft` trains on (each with its
 * end-of-turn marker). --date pins what strftime_now() returns (Llama 3's
 * "Today Date"). Exit status: 0, 1 (a bad template or messages, a refusal
 * by the template: the message names the file and line), 2 (usage).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_util.h"
#include "commands.h"
#include "llmforge/data.h"

static void usage(FILE *f) {
    fprintf(f, "usage: llmforge chat-template --model DIR|FILE --messages FILE.json [--add-generation-prompt]\n"
               "                              [--date \"YYYY-MM-DD HH:MM:SS\"] [--mask]\n\n"
               "  Print a conversation as the model's chat template renders it (byte for byte what\n"
               "  transformers' apply_chat_template(..., tokenize=False) gives for a Hugging Face template).\n\n"
               "  --model M      a model directory (chat_template.json, else chat_template.jinja or\n"
               "                 tokenizer_config.json's chat_template), one of those files, or chatml\n"
               "  --messages F   a JSON list of {\"role\", \"content\"} messages, or {\"messages\": [...]}\n"
               "  --add-generation-prompt  end with the text that opens the assistant's turn\n"
               "  --date D       what strftime_now() returns (default: the current UTC time)\n"
               "  --mask         print {\"text\", \"assistant_turns\": [[start, end], ...]} (UTF-8 byte\n"
               "                 offsets of the turns prepare --mode sft trains on)\n");
}

static int fail(const char *what) {
    fprintf(stderr, "llmforge chat-template: %s%s%s\n", what ? what : "", what ? ": " : "", lf_last_error());
    return 1;
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *date = NULL;
    int gen = 0, mask = 0;
    for (int i = 0; i < argc; i++) {
        const char *v;
        int missing = 0;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--add-generation-prompt")) gen = 1;
        else if (!strcmp(argv[i], "--mask")) mask = 1;
        else if ((v = opt_value(argc, argv, &i, "--model", &missing))) model = v;
        else if ((v = opt_value(argc, argv, &i, "--messages", &missing))) messages = v;
        else if ((v = opt_value(argc, argv, &i, "--date", &missing))) date = v;
        else {
            if (!missing) fprintf(stderr, "llmforge chat-template: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !messages) {
        fprintf(stderr, "llmforge chat-template: --model and --messages are required\n");
        usage(stderr);
        return 2;
    }
    lf_chat_template *t = NULL;
    lf_status st = lf_chat_template_open(model, &t);
    if (st != LF_OK) return fail(NULL);
    if (date && lf_chat_template_set_date(t, date) != LF_OK) {
        lf_chat_template_free(t);
        return fail(NULL);
    }
    char *json = NULL, *out = NULL;
    size_t len = 0, out_len = 0, *turns = NULL;
    int n_turns = 0, rc = 0;
    if ((st = lf_file_read_all(messages, (size_t)64 << 20, &json, &len)) != LF_OK) rc = fail(NULL);
    else if ((st = lf_chat_template_render(t, json, len, gen, &out, &out_len, mask ? &turns : NULL, &n_turns)) !=
             LF_OK) {
        char what[512];
        snprintf(what, sizeof what, "%s", messages);
        rc = fail(what);
    } else if (!mask) {
        fwrite(out, 1, out_len, stdout);
    } else {
        cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
        cJSON_AddStringToObject(o, "text", out);
        for (int i = 0; i < n_turns; i++) {
            double pair[2] = {(double)turns[2 * i], (double)(turns[2 * i] + turns[2 * i + 1])};
            cJSON_AddItemToArray(arr, cJSON_CreateDoubleArray(pair, 2));
        }
        cJSON_AddItemToObject(o, "assistant_turns", arr);
        char *txt = cJSON_PrintUnformatted(o);
        if (txt) printf("%s\n", txt);
        cJSON_free(txt);
        cJSON_Delete(o);
    }
    if (fflush(stdout) != 0 && !rc) rc = 1;
    lf_free(json);
    free(out);
    free(turns);
    lf_chat_template_free(t);
    return rc;
}
