/* Private declarations shared by the training module's files. */
#ifndef LF_TRAIN_IMPL_H
#define LF_TRAIN_IMPL_H
#include "llmforge/obs.h"

/* lf_mem_plan_make_rank with the activation plan of backend table ops
 * (NULL: the CPU's, what `llmforge plan` shows): the trainer plans for its
 * own backend, whose attention buffers may differ (cuda) (plan.c). */
struct lf_mem_plan;
struct lf_model_config;
struct lf_backend_ops;
struct lf_train_config;
lf_status lf__mem_plan_make_ops(struct lf_mem_plan *p, const struct lf_train_config *cfg,
                                const struct lf_model_config *mcfg, int replicas, int host_staging, int rank,
                                const struct lf_backend_ops *ops);

/* log.jsonl writer as a bus sink (jsonl_sink.c). */
lf_status lf__jsonl_sink_open(lf_obs_sink **out, const char *path, int append);

/* The model registry and eval.suite (train_registry.c): opened at create
 * (fails only for a bad eval.suite; an unusable registry is a warning),
 * then the run's start, each saved checkpoint (eval.suite runs on every
 * rank; *event_json, rank 0: the suite's metrics for log.jsonl, free()), its
 * end, and close. NULL handles are no-ops. */
typedef struct lf__treg lf__treg;
struct lf_train_config;
struct lf_eval_results;
struct lf_model;
lf_status lf__treg_open(lf__treg **out, const struct lf_train_config *cfg, int rank, const char *tok_spec);
void lf__treg_run_begin(lf__treg *r, const struct lf_train_config *cfg, int world, const char *resumed_dir,
                        const char *init_from, const char *tok_spec);
void lf__treg_checkpoint(lf__treg *r, struct lf_model *model, long step, int evaluated, double train_loss,
                         double val_loss, const struct lf_eval_results *tasks, const char *best_name,
                         char **event_json);
void lf__treg_run_end(lf__treg *r, lf_status st, const char *message);
void lf__treg_close(lf__treg *r);

/* checkpoint.async and the rollback alert action against the rest of the
 * configuration (config_check.c): LF_ERR_CONFIG naming the keys for what the
 * trainer cannot do (async with ZeRO or eval.suite; rollback with ZeRO-3).
 * Called when a configuration is built and again by lf_trainer_create
 * (a caller may fill the struct by hand). */
struct lf_train_config;
lf_status lf__train_config_check_ckpt(const struct lf_train_config *c);

#endif
