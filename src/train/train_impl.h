/* Private declarations shared by the training module's files. */
#ifndef LF_TRAIN_IMPL_H
#define LF_TRAIN_IMPL_H
#include "llmforge/obs.h"

/* log.jsonl writer as a bus sink (jsonl_sink.c). */
lf_status lf__jsonl_sink_open(lf_obs_sink **out, const char *path, int append);

#endif
