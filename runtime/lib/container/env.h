/* The environment of a command in a container: one rule, used by the CLI
 * (`skiff start`'s command, `skiff exec`) and by the plugin (each task of
 * a step), so that both front ends give a command the same variables. */
#ifndef SKIFF_ENV_H
#define SKIFF_ENV_H

#include "error.h"
#include "request.h"

/* The environment a command in the container runs with, lowest
 * precedence first:
 *   1. base: what the caller brings: the job's environment (the plugin's
 *      tasks), TERM and HOME (the CLI); or NULL;
 *   2. container: the container's own (skiff_container.env: PATH, the
 *      image's Env, what the hooks added, the locale fallback); or NULL;
 *   3. req's env (req NULL: nothing): NAME=VALUE sets NAME; a bare NAME
 *      keeps base's value of NAME over the container's where base has one
 *      (pyxis's --container-env=NAME).
 * skiff_container_start applies 3 over 2 (base NULL) to the container's
 * own environment, which `skiff exec` and steps that join the container
 * start from. *out gets a new list (skiff_strv_free); an entry of base or
 * container without '=' is left out. */
int skiff_env_compose(const char *const *base, const char *const *container, const struct skiff_start_request *req,
                      char ***out, skiff_err *err);

#endif
