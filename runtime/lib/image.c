#include "image.h"

#include <errno.h>

int skiff_image_import(const struct skiff_config *cfg, const char *uri, const char *out_path,
                       const struct skiff_import_opts *o, char *out, size_t outsz, skiff_err *err)
{
    (void)cfg, (void)out_path, (void)o, (void)out, (void)outsz;
    return skiff_error(err, ENOSYS, "import %s: not implemented yet", uri);
}

int skiff_image_default_name(const char *uri, char *out, size_t n, skiff_err *err)
{
    (void)out, (void)n;
    return skiff_error(err, ENOSYS, "%s: not implemented yet", uri);
}

int skiff_image_resolve(const struct skiff_config *cfg, const char *image_arg, char *sqsh_path,
                        size_t n, skiff_err *err)
{
    (void)cfg, (void)sqsh_path, (void)n;
    return skiff_error(err, ENOSYS, "%s: not implemented yet", image_arg);
}
