/* `skiff-train train` options: parsing and checking them, nothing else. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llmc.h"
#include "opts.h"

void train_opts_defaults(struct train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->grad_accum = 1;
    o->tp = 1;
    o->pp = 1;
    o->lr = 6e-4f;
    o->lr_min_frac = 0.1f;
    o->warmup = -1;
    o->weight_decay = 0.1f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->grad_clip = 1.0f;
    o->seed = 1337;
    o->bucket_mb = 25.0;
    o->zero3_buffers = 2;
    o->precision = NULL; /* per device: fp32 on CPU, bf16 on CUDA */
    o->val_batches = 4;
    o->timeout_ms = 300 * 1000;
}

int train_parse_int(const char *opt, const char *s, int lo, int *out, skiff_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > INT_MAX)
        return skiff_error(err, 0, "%s '%s': need an integer >= %d", opt, s, lo);
    *out = (int)v;
    return 0;
}

int train_parse_double(const char *opt, const char *s, double lo, double *out, skiff_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo) || !isfinite(v))
        return skiff_error(err, 0, "%s '%s': need a number >= %g", opt, s, lo);
    *out = v;
    return 0;
}

enum {
    O_MODEL = 256,
    O_DATA,
    O_VAL,
    O_BATCH,
    O_SEQ,
    O_ACCUM,
    O_STEPS,
    O_LR,
    O_LRMIN,
    O_WARMUP,
    O_WD,
    O_CLIP,
    O_SEED,
    O_ZERO,
    O_BUCKET,
    O_DEVICE,
    O_PREC,
    O_CKPT,
    O_CKPT_EVERY,
    O_RESUME,
    O_STOP,
    O_LOG,
    O_VAL_EVERY,
    O_VAL_BATCHES,
    O_THREADS,
    O_TIMEOUT,
    O_QUIET,
    O_INIT_FROM,
    O_BETA1,
    O_BETA2,
    O_EPS,
    O_ORDER,
    O_RECOMPUTE,
    O_ZERO3_BUFFERS,
    O_TP,
    O_PP,
    O_MICRO,
    O_PP_SCHED
};

int train_opt_error(int c, char **argv, skiff_err *err)
{
    if (c == ':') return skiff_error(err, 0, "option '%s' needs a value", argv[optind - 1]);
    return skiff_error(err, 0, "unknown option '%s'", argv[optind - 1]);
}

/* The shape comes from --model, from the --init-from file, or both (then
 * they must agree). */
static int resolve_model(struct train_opts *o, skiff_err *err)
{
    if (!o->model && !o->init_from)
        return skiff_error(err, 0, "--model NAME or --init-from FILE.bin is required (models: %s)",
                           gpt2_preset_names());
    if (o->model && gpt2_config_preset(o->model, &o->cfg, err) < 0) return skiff_err_wrap(err, "--model");
    if (!o->init_from) return 0;
    struct gpt2_config file;
    int version;
    if (llmc_peek(o->init_from, &file, &version, err) < 0) return skiff_err_wrap(err, "--init-from");
    if (o->model && memcmp(&file, &o->cfg, sizeof file)) {
        char a[160], b[160];
        llmc_shape_str(&file, a, sizeof a);
        llmc_shape_str(&o->cfg, b, sizeof b);
        return skiff_error(err, 0,
                           "--init-from %s holds %s, but --model %s is %s; drop --model to "
                           "take the file's shape",
                           o->init_from, a, o->model, b);
    }
    if (!o->model) {
        const char *slash = strrchr(o->init_from, '/');
        o->model = slash ? slash + 1 : o->init_from;
        o->cfg = file;
    }
    return 0;
}

/* --micro-batches M is the pipeline's name for the micro-steps of one
 * optimizer step (--grad-accum): the same batches, in the pipeline's order. */
static int check_pipeline(struct train_opts *o, int micro, int accum_set, skiff_err *err)
{
    if (micro && accum_set && micro != o->grad_accum)
        return skiff_error(err, 0,
                           "--micro-batches %d and --grad-accum %d: they name the same count of micro-steps "
                           "per optimizer step; give one",
                           micro, o->grad_accum);
    if (micro) o->grad_accum = micro;
    if (o->pp == 1) return 0;
    if (o->zero == 3 && o->device == TRAIN_DEVICE_CUDA) /* doc/trainer-parallelism.md, "ZeRO-3 and the pipeline" */
        return skiff_error(err, 0,
                           "--pp %d with --zero 3 on --device cuda: ZeRO-3 and pipeline stages are composed on the "
                           "CPU only so far; use --zero 1 or 2 with --pp (each stage's optimizer state and gradient "
                           "sharded over its data-parallel ranks), --zero 3 without --pp, or --device cpu",
                           o->pp);
    if (o->pp > o->cfg.num_layers)
        return skiff_error(err, 0, "--pp %d: model %s has only %d layers, and every stage needs at least one", o->pp,
                           o->model, o->cfg.num_layers);
    return 0;
}

int train_opts_parse(int argc, char **argv, struct train_opts *o, skiff_err *err)
{
    static const struct option lo[] = {{"model", 1, 0, O_MODEL},
                                       {"data", 1, 0, O_DATA},
                                       {"val", 1, 0, O_VAL},
                                       {"batch", 1, 0, O_BATCH},
                                       {"seq", 1, 0, O_SEQ},
                                       {"grad-accum", 1, 0, O_ACCUM},
                                       {"steps", 1, 0, O_STEPS},
                                       {"lr", 1, 0, O_LR},
                                       {"lr-min-frac", 1, 0, O_LRMIN},
                                       {"warmup", 1, 0, O_WARMUP},
                                       {"weight-decay", 1, 0, O_WD},
                                       {"grad-clip", 1, 0, O_CLIP},
                                       {"seed", 1, 0, O_SEED},
                                       {"zero", 1, 0, O_ZERO},
                                       {"bucket-mb", 1, 0, O_BUCKET},
                                       {"device", 1, 0, O_DEVICE},
                                       {"precision", 1, 0, O_PREC},
                                       {"ckpt-dir", 1, 0, O_CKPT},
                                       {"ckpt-every", 1, 0, O_CKPT_EVERY},
                                       {"resume", 0, 0, O_RESUME},
                                       {"stop-after", 1, 0, O_STOP},
                                       {"log", 1, 0, O_LOG},
                                       {"val-every", 1, 0, O_VAL_EVERY},
                                       {"val-batches", 1, 0, O_VAL_BATCHES},
                                       {"threads", 1, 0, O_THREADS},
                                       {"timeout", 1, 0, O_TIMEOUT},
                                       {"quiet", 0, 0, O_QUIET},
                                       {"recompute", 0, 0, O_RECOMPUTE},
                                       {"zero3-buffers", 1, 0, O_ZERO3_BUFFERS},
                                       {"tp", 1, 0, O_TP},
                                       {"pp", 1, 0, O_PP},
                                       {"micro-batches", 1, 0, O_MICRO},
                                       {"pp-schedule", 1, 0, O_PP_SCHED},
                                       {"init-from", 1, 0, O_INIT_FROM},
                                       {"beta1", 1, 0, O_BETA1},
                                       {"beta2", 1, 0, O_BETA2},
                                       {"eps", 1, 0, O_EPS},
                                       {"data-order", 1, 0, O_ORDER},
                                       {0, 0, 0, 0}};
    train_opts_defaults(o);
    const char *env_t = getenv("SKIFF_TRAIN_TIMEOUT");
    double d = 0;
    if (env_t && *env_t) {
        if (train_parse_double("SKIFF_TRAIN_TIMEOUT", env_t, 0.001, &d, err) < 0) return -1;
        o->timeout_ms = (int)(d * 1000);
    }
    optind = 1;
    opterr = 0;
    int c, v = 0, micro = 0, accum_set = 0;
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_VAL: o->val = optarg; break;
        case O_BATCH: rc = train_parse_int("--batch", optarg, 1, &o->batch, err); break;
        case O_SEQ: rc = train_parse_int("--seq", optarg, 1, &o->seq, err); break;
        case O_ACCUM:
            rc = train_parse_int("--grad-accum", optarg, 1, &o->grad_accum, err);
            accum_set = 1;
            break;
        case O_STEPS: rc = train_parse_int("--steps", optarg, 1, &o->steps, err); break;
        case O_LR:
            rc = train_parse_double("--lr", optarg, 0, &d, err);
            o->lr = (float)d;
            break;
        case O_LRMIN:
            rc = train_parse_double("--lr-min-frac", optarg, 0, &d, err);
            o->lr_min_frac = (float)d;
            break;
        case O_WARMUP: rc = train_parse_int("--warmup", optarg, 0, &o->warmup, err); break;
        case O_WD:
            rc = train_parse_double("--weight-decay", optarg, 0, &d, err);
            o->weight_decay = (float)d;
            break;
        case O_CLIP:
            rc = train_parse_double("--grad-clip", optarg, 0, &d, err);
            o->grad_clip = (float)d;
            break;
        case O_SEED:
            rc = train_parse_int("--seed", optarg, 0, &v, err);
            o->seed = (uint64_t)v;
            break;
        case O_ZERO:
            rc = train_parse_int("--zero", optarg, 0, &o->zero, err);
            if (!rc && o->zero > 3) rc = skiff_error(err, 0, "--zero %s: use 0, 1, 2 or 3", optarg);
            break;
        case O_BUCKET: rc = train_parse_double("--bucket-mb", optarg, 0.001, &o->bucket_mb, err); break;
        case O_DEVICE:
            if (!strcmp(optarg, "cpu"))
                o->device = TRAIN_DEVICE_CPU;
            else if (!strcmp(optarg, "cuda"))
                o->device = TRAIN_DEVICE_CUDA;
            else
                rc = skiff_error(err, 0, "--device '%s': use cpu or cuda", optarg);
            break;
        case O_PREC:
            if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16") && strcmp(optarg, "fp16"))
                rc = skiff_error(err, 0, "--precision '%s': use fp32, bf16 or fp16", optarg);
            o->precision = optarg;
            break;
        case O_CKPT: o->ckpt_dir = optarg; break;
        case O_CKPT_EVERY: rc = train_parse_int("--ckpt-every", optarg, 0, &o->ckpt_every, err); break;
        case O_RESUME: o->resume = 1; break;
        case O_STOP: rc = train_parse_int("--stop-after", optarg, 1, &o->stop_after, err); break;
        case O_LOG: o->log_path = optarg; break;
        case O_VAL_EVERY: rc = train_parse_int("--val-every", optarg, 0, &o->val_every, err); break;
        case O_VAL_BATCHES: rc = train_parse_int("--val-batches", optarg, 1, &o->val_batches, err); break;
        case O_THREADS: rc = train_parse_int("--threads", optarg, 0, &o->threads, err); break;
        case O_TIMEOUT:
            rc = train_parse_double("--timeout", optarg, 0.001, &d, err);
            o->timeout_ms = (int)(d * 1000);
            break;
        case O_QUIET: o->quiet = 1; break;
        case O_RECOMPUTE: o->recompute = 1; break;
        case O_ZERO3_BUFFERS:
            rc = train_parse_int("--zero3-buffers", optarg, 1, &o->zero3_buffers, err);
            if (!rc && o->zero3_buffers > 2) rc = skiff_error(err, 0, "--zero3-buffers %s: use 1 or 2", optarg);
            break;
        case O_TP: rc = train_parse_int("--tp", optarg, 1, &o->tp, err); break;
        case O_PP: rc = train_parse_int("--pp", optarg, 1, &o->pp, err); break;
        case O_MICRO: rc = train_parse_int("--micro-batches", optarg, 1, &micro, err); break;
        case O_PP_SCHED:
            if (!strcmp(optarg, "1f1b"))
                o->pp_gpipe = 0;
            else if (!strcmp(optarg, "gpipe"))
                o->pp_gpipe = 1;
            else
                rc = skiff_error(err, 0, "--pp-schedule '%s': use 1f1b or gpipe", optarg);
            break;
        case O_INIT_FROM: o->init_from = optarg; break;
        case O_BETA1:
            rc = train_parse_double("--beta1", optarg, 0, &d, err);
            if (!rc && d >= 1) rc = skiff_error(err, 0, "--beta1 %s: need 0 <= beta1 < 1", optarg);
            o->beta1 = (float)d;
            break;
        case O_BETA2:
            rc = train_parse_double("--beta2", optarg, 0, &d, err);
            if (!rc && d >= 1) rc = skiff_error(err, 0, "--beta2 %s: need 0 <= beta2 < 1", optarg);
            o->beta2 = (float)d;
            break;
        case O_EPS:
            rc = train_parse_double("--eps", optarg, 0, &d, err);
            o->eps = (float)d;
            break;
        case O_ORDER:
            if (!strcmp(optarg, "shuffle"))
                o->sequential = 0;
            else if (!strcmp(optarg, "sequential"))
                o->sequential = 1;
            else
                rc = skiff_error(err, 0, "--data-order '%s': use shuffle or sequential", optarg);
            break;
        default: return train_opt_error(c, argv, err);
        }
        if (rc < 0) return -1;
    }
    if (optind < argc) return skiff_error(err, 0, "unexpected argument '%s'", argv[optind]);
    if (resolve_model(o, err) < 0) return -1;
    if (!o->data) return skiff_error(err, 0, "--data GLOB is required");
    if (!o->batch || !o->seq || !o->steps) return skiff_error(err, 0, "--batch, --seq and --steps are required");
    if (o->seq > o->cfg.max_seq_len)
        return skiff_error(err, 0, "--seq %d: model %s has a context of %d", o->seq, o->model, o->cfg.max_seq_len);
    if (o->resume && !o->ckpt_dir) return skiff_error(err, 0, "--resume needs --ckpt-dir");
    if (o->stop_after && !o->ckpt_dir)
        return skiff_error(err, 0, "--stop-after checkpoints before it exits: give --ckpt-dir");
    if (!o->precision) o->precision = o->device == TRAIN_DEVICE_CPU ? "fp32" : "bf16";
    if (o->device == TRAIN_DEVICE_CPU && strcmp(o->precision, "fp32"))
        return skiff_error(err, 0, "--precision %s: the CPU path trains in fp32 only", o->precision);
    if (gpt2_tp_check(&o->cfg, o->tp, err) < 0) return -1;
    if (o->warmup < 0) o->warmup = o->steps / 10;
    return check_pipeline(o, micro, accum_set, err);
}
