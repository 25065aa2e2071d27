/* NULL-terminated lists of strings (argv, envp, an image's Cmd), each string
 * owned by the list. A NULL list is the empty list everywhere. Environment
 * lists are string lists whose entries are K=V. */
#ifndef SKIFF_STRV_H
#define SKIFF_STRV_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of strings in v (0 for NULL). */
size_t skiff_strv_len(char *const *v);

/* Appends a copy of s to *v (which may be NULL), keeping it NULL-terminated. */
int skiff_strv_push(char ***v, const char *s, skiff_err *err);

/* Whether v holds a string equal to s. */
bool skiff_strv_contains(char *const *v, const char *s);

/* A copy of v (an empty list, not NULL, for an empty v); NULL + err on failure. */
char **skiff_strv_dup(char *const *v, skiff_err *err);

/* Frees every string and the list. Safe on NULL. */
void skiff_strv_free(char **v);

/* Environment lists (K=V strings). */

/* Sets kv (K=V) in *v: replaces the entry for K, else appends. An entry
 * without '=' or with an empty K is an error. */
int skiff_env_set(char ***v, const char *kv, skiff_err *err);

/* Whether the n bytes at s are a variable name a shell would take:
 * letters, digits and '_', not starting with a digit. */
bool skiff_env_name_valid(const char *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif
