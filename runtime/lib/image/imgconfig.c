/* The image config inside an image; see imgconfig.h. */
#include "imgconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "fsutil.h"
#include "rootfs.h"
#include "strv.h"

/* ---- reading (container start) ---- */

static int json_strv(json_t *o, const char *key, char ***out, skiff_err *err)
{
    json_t *a = json_object_get(o, key);
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return skiff_error(err, 0, "%s: %s is not an array", SKIFF_IMAGE_CONFIG_PATH, key);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v))
            return skiff_error(err, 0, "%s: %s[%zu] is not a string", SKIFF_IMAGE_CONFIG_PATH, key, i);
        if (skiff_strv_push(out, json_string_value(v), err) < 0)
            return -1;
    }
    return 0;
}

int skiff_imgconfig_read(int rootfd, struct skiff_image_config *ic, skiff_err *err)
{
    size_t len;
    cleanup_free char *text = skiff_root_read(rootfd, SKIFF_IMAGE_CONFIG_PATH, 1 << 20, &len, err);
    if (!text) {
        if (err->code == ENOENT) { /* images without it get defaults */
            skiff_err_clear(err);
            return 0;
        }
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root)
        return skiff_error(err, 0, "%s: line %d: %s", SKIFF_IMAGE_CONFIG_PATH, je.line, je.text);
    int rv = -1;
    if (!json_is_object(root)) {
        skiff_error(err, 0, "%s is not a JSON object", SKIFF_IMAGE_CONFIG_PATH);
        goto out;
    }
    if (json_strv(root, "Env", &ic->env, err) < 0 || json_strv(root, "Entrypoint", &ic->entrypoint, err) < 0 ||
        json_strv(root, "Cmd", &ic->cmd, err) < 0)
        goto out;
    json_t *wd = json_object_get(root, "WorkingDir");
    if (json_is_string(wd))
        snprintf(ic->workdir, sizeof(ic->workdir), "%s", json_string_value(wd));
    rv = 0;
out:
    json_decref(root);
    return rv;
}

void skiff_imgconfig_free(struct skiff_image_config *ic)
{
    skiff_strv_free(ic->env);
    skiff_strv_free(ic->entrypoint);
    skiff_strv_free(ic->cmd);
    ic->env = ic->entrypoint = ic->cmd = NULL;
}

/* ---- writing (import) ---- */

static int write_file_at(int dirfd, const char *name, const char *data, size_t len, skiff_err *err)
{
    cleanup_close int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return skiff_error(err, errno, "create /.skiff/%s", name);
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return skiff_error(err, errno, "write /.skiff/%s", name);
        off += (size_t)w;
    }
    if (fchmod(fd, 0644) < 0)
        return skiff_error(err, errno, "chmod /.skiff/%s", name);
    return 0;
}

int skiff_imgconfig_render(json_t *image_config, void (*warn)(void *ctx, const char *msg), void *warn_ctx,
                           char **config, size_t *config_len, char **env, size_t *env_len, skiff_err *err)
{
    *config = *env = NULL;
    json_t *c = json_object_get(image_config, "config");
    json_t *empty = NULL;
    if (!json_is_object(c))
        c = empty = json_object();
    cleanup_free char *text = json_dumps(c, JSON_INDENT(2));
    if (!text) {
        json_decref(empty);
        return skiff_error(err, ENOMEM, "config.json");
    }
    size_t tl = strlen(text);
    char *withnl = malloc(tl + 2);
    if (!withnl) {
        json_decref(empty);
        return skiff_error(err, ENOMEM, "config.json");
    }
    memcpy(withnl, text, tl);
    withnl[tl] = '\n';
    withnl[tl + 1] = '\0';
    char *e = NULL;
    size_t elen = 0;
    FILE *m = open_memstream(&e, &elen);
    if (!m) {
        json_decref(empty);
        free(withnl);
        return skiff_error(err, ENOMEM, "environment");
    }
    json_t *arr = json_object_get(c, "Env");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = json_string_value(v);
        if (!s || !strchr(s, '=') || strchr(s, '\n')) {
            if (warn) {
                char msg[1024];
                snprintf(msg, sizeof(msg),
                         "image Env entry %zu is not one KEY=VALUE line; left out of "
                         "/.skiff/environment",
                         i);
                warn(warn_ctx, msg);
            }
            continue;
        }
        fprintf(m, "%s\n", s);
    }
    json_decref(empty);
    if (fclose(m) != 0 || !e) {
        free(e);
        free(withnl);
        return skiff_error(err, ENOMEM, "environment");
    }
    *config = withnl;
    *config_len = tl + 1;
    *env = e;
    *env_len = elen;
    return 0;
}

int skiff_imgconfig_write(int rootfd, json_t *image_config, void (*warn)(void *ctx, const char *msg), void *warn_ctx,
                          skiff_err *err)
{
    cleanup_free char *config = NULL, *env = NULL;
    size_t config_len, env_len;
    if (skiff_imgconfig_render(image_config, warn, warn_ctx, &config, &config_len, &env, &env_len, err) < 0)
        return -1;
    if (skiff_remove_tree_at(rootfd, ".skiff", err) < 0)
        return -1;
    if (mkdirat(rootfd, ".skiff", 0755) < 0)
        return skiff_error(err, errno, "mkdir /.skiff");
    cleanup_close int dfd = openat(rootfd, ".skiff", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return skiff_error(err, errno, "open /.skiff");
    if (fchmod(dfd, 0755) < 0)
        return skiff_error(err, errno, "chmod /.skiff");
    if (write_file_at(dfd, "config.json", config, config_len, err) < 0)
        return -1;
    return write_file_at(dfd, "environment", env, env_len, err);
}
