/*
 * The code version a run records: `git describe --always --dirty --tags` of
 * the source tree, captured at build time by cmake/code_version.cmake into
 * the generated header lf_code_version.h (rewritten only when it changes, so
 * only this file recompiles), or "unknown" when the tree was not a git
 * checkout or git was not installed.
 */
#include "lf_code_version.h"
#include "llmforge/registry.h"

const char *lf_registry_code_version(void) { return LF_CODE_VERSION; }
