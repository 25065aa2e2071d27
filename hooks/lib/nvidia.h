/* What the gpu hook reads from the NVIDIA driver and from the container
 * conventions NVIDIA's images follow, parsed without touching a GPU:
 *   - NVIDIA_DRIVER_CAPABILITIES (which driver libraries and tools go in);
 *   - NVIDIA_REQUIRE_* (constraints on the driver the image needs), the
 *     language of NVIDIA's container toolkit: alternatives separated by
 *     blanks (any one satisfied is enough), each a comma-separated list of
 *     rules that must all hold, a rule "NAME OP VALUE" with NAME cuda,
 *     driver, arch or brand and OP one of = != < <= > >=;
 *   - the driver's files under /proc/driver/nvidia: gpus/BUS/information
 *     (a GPU's UUID and device minor), capabilities/.../access (the minor
 *     of an nvidia-caps device, MIG), version (the kernel module's version).
 * Facts come from the hook; the parsers take text (unit tests, fuzzers). */
#ifndef SKIFF_NVIDIA_H
#define SKIFF_NVIDIA_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

enum {
    SKIFF_NV_COMPUTE = 1 << 0,
    SKIFF_NV_COMPAT32 = 1 << 1,
    SKIFF_NV_GRAPHICS = 1 << 2,
    SKIFF_NV_UTILITY = 1 << 3,
    SKIFF_NV_VIDEO = 1 << 4,
    SKIFF_NV_DISPLAY = 1 << 5,
    SKIFF_NV_ALL = (1 << 6) - 1,
};

/* "compute,utility", "all", ...: into *caps. An empty list gives 0 (the
 * caller's default applies); an unknown capability is an error naming it. */
int skiff_nv_caps_parse(const char *s, unsigned *caps, skiff_err *err);

/* The capabilities as a comma-separated list, in a fixed order. */
void skiff_nv_caps_format(unsigned caps, char *buf, size_t n);

/* Compares dotted numeric versions ("12.2" < "12.10", "535.104.05";
 * trailing ".0"s do not count): -1, 0 or 1 into *cmp. -1 when either is not
 * digits and dots. */
int skiff_nv_version_cmp(const char *a, const char *b, int *cmp);

/* The facts a requirement is checked against, each "" when unknown (an
 * unknown fact satisfies its rules, as in NVIDIA's toolkit). fact() is
 * asked lazily: the hook loads libcuda only when a rule names cuda. */
typedef const char *(*skiff_nv_fact_fn)(void *ctx, const char *name);

/* Evaluates one NVIDIA_REQUIRE_* value. Returns 1 when satisfied, 0 when
 * not (why: the first alternative, with the facts that failed it), -1 + err
 * for an expression that does not parse (a rule without an operator, an
 * unknown NAME, a version that is not a number). */
int skiff_nv_require_eval(const char *expr, skiff_nv_fact_fn fact, void *ctx, char *why, size_t whylen, skiff_err *err);

/* gpus/BUS/information: the "GPU UUID:" and "Device Minor:" fields. -1 +
 * err when either is missing or malformed. */
int skiff_nv_parse_information(const char *text, char *uuid, size_t n, unsigned *minor, skiff_err *err);

/* capabilities/.../access: the "DeviceFileMinor:" field. */
int skiff_nv_parse_access(const char *text, unsigned *minor, skiff_err *err);

/* version: the kernel module's version ("580.65.06") from "NVRM version:
 * NVIDIA UNIX ... Kernel Module  580.65.06  ...". */
int skiff_nv_parse_version(const char *text, char *ver, size_t n, skiff_err *err);

/* "MIG-GPU-<uuid>/GI/CI" (the drivers' older MIG spelling, which names its
 * GPU): the GPU's UUID ("GPU-<uuid>") and the instance ids. -1 when s is
 * not of that form. */
int skiff_nv_parse_mig_path(const char *s, char *gpu_uuid, size_t n, unsigned *gi, unsigned *ci);

/* NVML's brand number as NVIDIA_REQUIRE_*'s brand rule names it ("tesla",
 * "geforce", ...); "" for a number it does not know. */
const char *skiff_nv_brand_name(int brand);

#endif
