/* Subcommands implemented in their own files (argc/argv exclude the command name). */
#ifndef LF_TOOLS_COMMANDS_H
#define LF_TOOLS_COMMANDS_H
int cmd_prepare(int argc, char **argv);       /* cmd_prepare.c: text -> token shards */
int cmd_train(int argc, char **argv);         /* cmd_train.c: a training run from a configuration */
int cmd_data(int argc, char **argv);          /* cmd_data.c: synthetic sets (arithmetic) and their eval */
int cmd_score(int argc, char **argv);         /* cmd_score.c: metrics over files, no model */
int cmd_eval(int argc, char **argv);          /* cmd_eval.c: a checkpoint on task files */
int cmd_tokenize(int argc, char **argv);      /* cmd_tokenize.c: text -> ids */
int cmd_detokenize(int argc, char **argv);    /* cmd_tokenize.c: ids -> text */
int cmd_tokenizer(int argc, char **argv);     /* cmd_tokenize.c: `tokenizer train` */
int cmd_plan(int argc, char **argv);          /* cmd_plan.c: the memory plan of a training config */
int cmd_launch(int argc, char **argv);        /* cmd_launch.c: ranks through Open MPI's mpirun */
int cmd_serve(int argc, char **argv);         /* cmd_serve.c: the OpenAI-compatible server */
int cmd_models(int argc, char **argv);        /* cmd_models.c: the model registry */
int cmd_report(int argc, char **argv);        /* cmd_report.c: a run directory as one HTML file */
int cmd_ckpt(int argc, char **argv);          /* cmd_ckpt.c: `ckpt verify` */
int cmd_sweep(int argc, char **argv);         /* cmd_sweep.c: hyperparameter sweeps */
int cmd_merge(int argc, char **argv);         /* cmd_merge.c: a PEFT LoRA adapter merged into its base */
int cmd_chat_template(int argc, char **argv); /* cmd_chat_template.c: a conversation through a chat template */
#endif
