/* Checkpoints: one file per rank, DIR/rank-R.ckpt, written under a temporary
 * name and renamed, so a crash leaves the previous checkpoint intact.
 * Layout: a 256-byte header (struct ckpt_header, little-endian), then the
 * parameters (rank 0 only), then AdamW m and v for this rank's range. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "fdio.h"
#include "llmc.h"
#include "ckpt.h"
#include "policy.h"

#define CKPT_MAGIC "SKIFFCK1"
#define CKPT_VERSION 1

struct ckpt_header {
    char magic[8];
    int32_t version;
    int32_t has_params;
    int32_t cfg[6]; /* maxT V Vp L NH C */
    int32_t world, rank, zero, step;
    uint64_t data_pos, rng, num_params, opt_off, opt_len;
    /* struct train_amp_state; zeros in files of builds before it existed */
    double loss_scale;
    int32_t scale_good, skipped_run;
    int64_t skipped;
    int32_t tp; /* --tp; 0 (read as 1) in files of builds before it existed */
    int32_t pp; /* --pp; the same */
    char pad[256 - 8 - 4 - 4 - 24 - 16 - 40 - 24 - 4 - 4];
};
_Static_assert(sizeof(struct ckpt_header) == 256, "checkpoint header is 256 bytes");

static void cfg_pack(const struct gpt2_config *c, int32_t o[6])
{
    o[0] = c->max_seq_len;
    o[1] = c->vocab_size;
    o[2] = c->padded_vocab_size;
    o[3] = c->num_layers;
    o[4] = c->num_heads;
    o[5] = c->channels;
}

int train_init_params(const struct train_opts *o, int rank, float *params, skiff_err *err)
{
    if (!o->init_from) {
        gpt2_init_params(&o->cfg, params, o->seed);
        return 0;
    }
    if (rank != 0) {
        memset(params, 0, gpt2_param_layout(&o->cfg, NULL, NULL) * sizeof(float));
        return 0;
    }
    return llmc_load(o->init_from, &o->cfg, params, err) < 0 ? skiff_err_wrap(err, "--init-from") : 0;
}

/* Floats of parameters in a file that has them: all of them, or under
 * ZeRO-3 the rank's shard (the same range as its optimizer state). */
static size_t ckpt_params_len(int zero, size_t num_params, size_t opt_len) { return zero == 3 ? opt_len : num_params; }

struct ckpt_write {
    const struct train_ckpt *c;
    const struct ckpt_header *h;
};

static int fill_ckpt(int fd, void *ctx)
{
    const struct ckpt_write *w = ctx;
    const struct train_ckpt *c = w->c;
    if (skiff_write_all(fd, w->h, sizeof *w->h) < 0) return -1;
    if (c->params &&
        skiff_write_all(fd, c->params, ckpt_params_len(c->zero, c->num_params, c->opt_len) * sizeof(float)) < 0)
        return -1;
    if (c->opt_len && (skiff_write_all(fd, c->m, c->opt_len * sizeof(float)) < 0 ||
                       skiff_write_all(fd, c->v, c->opt_len * sizeof(float)) < 0))
        return -1;
    return 0;
}

int train_ckpt_save(const char *dir, const struct train_ckpt *c, skiff_err *err)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return skiff_error(err, errno, "mkdir %s", dir);
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/rank-%d.ckpt", dir, c->rank);
    snprintf(tmp, sizeof tmp, "%s/.rank-%d.ckpt.tmp", dir, c->rank);
    struct ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    cfg_pack(&c->cfg, h.cfg);
    h.world = c->world;
    h.rank = c->rank;
    h.zero = c->zero;
    h.step = c->step;
    h.data_pos = c->data_pos;
    h.rng = c->rng;
    h.num_params = c->num_params;
    h.opt_off = c->opt_off;
    h.opt_len = c->opt_len;
    h.has_params = c->params != NULL;
    h.loss_scale = c->amp.loss_scale;
    h.scale_good = c->amp.scale_good;
    h.skipped_run = c->amp.skipped_run;
    h.skipped = c->amp.skipped;
    h.tp = c->tp > 1 ? c->tp : 1;
    h.pp = c->pp > 1 ? c->pp : 1;
    struct ckpt_write w = {c, &h};
    return skiff_atomic_write_file(path, tmp, fill_ckpt, &w, err) < 0 ? skiff_err_wrap(err, "checkpoint") : 0;
}

/* Reads and checks the header at the start of an open checkpoint. Readers
 * allocate and read what it says (sample and compare: num_params floats,
 * then the model's parameters from them), so it must describe a valid
 * model, a parameter count that is the model's padded to a multiple of the
 * world size (as train.c pads it), an optimizer range inside it, and a file
 * that holds exactly that. */
static int read_header(int fd, const char *path, struct ckpt_header *h, skiff_err *err)
{
    if (skiff_read_all(fd, h, sizeof *h) < 0 || memcmp(h->magic, CKPT_MAGIC, 8))
        return skiff_error(err, 0, "%s: not a skiff-train checkpoint", path);
    if (h->version != CKPT_VERSION)
        return skiff_error(err, 0, "%s: checkpoint version %d, this build reads %d", path, h->version, CKPT_VERSION);
    if (h->tp == 0) h->tp = 1;
    if (h->pp == 0) h->pp = 1;
    if (h->world < 1 || h->rank < 0 || h->rank >= h->world || h->zero < 0 || h->zero > 3 || h->step < 0 || h->tp < 1 ||
        h->pp < 1 || h->world % h->tp || h->world / h->tp % h->pp)
        return skiff_error(err, 0, "%s: corrupt checkpoint: world %d, rank %d, tp %d, pp %d, zero %d, step %d", path,
                           h->world, h->rank, h->tp, h->pp, h->zero, h->step);
    if (!(h->loss_scale >= 0 && h->loss_scale < 1e38) || h->scale_good < 0 || h->skipped_run < 0 || h->skipped < 0 ||
        h->skipped > h->step)
        return skiff_error(err, 0, "%s: corrupt checkpoint: loss scale %g, %lld of %d steps skipped", path,
                           h->loss_scale, (long long)h->skipped, h->step);
    struct gpt2_config cfg = {h->cfg[0], h->cfg[1], h->cfg[2], h->cfg[3], h->cfg[4], h->cfg[5]};
    if (gpt2_config_check(&cfg, err) < 0) /* (bounded: the layout below cannot overflow) */
        return skiff_err_wrap(err, "%s", path);
    struct stat st;
    if (fstat(fd, &st) < 0) return skiff_error(err, errno, "stat %s", path);
    if (h->zero == 3 && cfg.num_heads % h->tp)
        return skiff_error(err, 0, "%s: corrupt checkpoint: --tp %d of a model of %d heads", path, h->tp,
                           cfg.num_heads);
    uint64_t layout = gpt2_param_layout(&cfg, NULL, NULL), np = h->num_params, off = h->opt_off, len = h->opt_len;
    uint64_t pads = (uint64_t)h->world;
    if (h->zero == 3) { /* the units of a tensor-parallel rank's part, each padded to the data-parallel ranks */
        layout = gpt2_param_layout_tp(&cfg, h->tp, NULL, NULL);
        pads = (uint64_t)(h->world / (h->tp * h->pp)) * (uint64_t)gpt2_num_units(&cfg);
    }
    if (np < layout || np - layout >= pads || off > np || len > np - off ||
        sizeof *h + (h->has_params ? ckpt_params_len(h->zero, np, len) * 4 : 0) + len * 8 != (uint64_t)st.st_size)
        return skiff_error(err, 0,
                           "%s: corrupt checkpoint: %llu parameters (the model has %llu, world %d), "
                           "optimizer range %llu+%llu, %lld bytes",
                           path, (unsigned long long)np, (unsigned long long)layout, h->world, (unsigned long long)off,
                           (unsigned long long)len, (long long)st.st_size);
    return 0;
}

int train_ckpt_peek(const char *dir, struct train_ckpt *out, skiff_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.ckpt", dir, out->rank);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skiff_error(err, errno, "open %s", path);
    struct ckpt_header h;
    if (read_header(fd, path, &h, err) < 0) return -1;
    out->cfg = (struct gpt2_config){h.cfg[0], h.cfg[1], h.cfg[2], h.cfg[3], h.cfg[4], h.cfg[5]};
    out->world = h.world;
    out->tp = h.tp;
    out->pp = h.pp;
    out->zero = h.zero;
    out->step = h.step;
    out->data_pos = h.data_pos;
    out->rng = h.rng;
    out->num_params = h.num_params;
    out->opt_off = h.opt_off;
    out->opt_len = h.opt_len;
    out->params = out->m = out->v = NULL;
    out->amp = (struct train_amp_state){h.loss_scale, h.scale_good, h.skipped_run, h.skipped};
    return 0; /* (read_header checked the config) */
}

int train_ckpt_load(const char *dir, struct train_ckpt *w, skiff_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.ckpt", dir, w->rank);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "--resume: %s%s", path,
                           errno == ENOENT ? " (no checkpoint of this rank: was the run saved "
                                             "with the same world size and --ckpt-dir?)"
                                           : "");
    struct ckpt_header h;
    if (read_header(fd, path, &h, err) < 0) return -1;
    int32_t want[6];
    cfg_pack(&w->cfg, want);
    if (memcmp(want, h.cfg, sizeof want))
        return skiff_error(err, 0,
                           "%s: checkpoint of another model (T=%d V=%d Vp=%d L=%d H=%d C=%d; "
                           "this run: T=%d V=%d Vp=%d L=%d H=%d C=%d); use the same --model",
                           path, h.cfg[0], h.cfg[1], h.cfg[2], h.cfg[3], h.cfg[4], h.cfg[5], want[0], want[1], want[2],
                           want[3], want[4], want[5]);
    if (h.world != w->world)
        return skiff_error(err, 0,
                           "%s: saved with WORLD_SIZE=%d, this run has %d; resume "
                           "with the same number of ranks",
                           path, h.world, w->world);
    if (h.tp != (w->tp > 1 ? w->tp : 1))
        return skiff_error(err, 0,
                           "%s: saved with --tp %d, this run uses --tp %d; resume with the same --tp (the "
                           "weights alone move to another layout: export --llmc, then --init-from)",
                           path, h.tp, w->tp > 1 ? w->tp : 1);
    if (h.pp != (w->pp > 1 ? w->pp : 1))
        return skiff_error(err, 0, "%s: saved with --pp %d, this run uses --pp %d", path, h.pp, w->pp > 1 ? w->pp : 1);
    if (h.zero != w->zero)
        return skiff_error(err, 0, "%s: saved with --zero %d, this run uses --zero %d", path, h.zero, w->zero);
    if (h.num_params != w->num_params || h.opt_off != w->opt_off || h.opt_len != w->opt_len)
        return skiff_error(err, 0,
                           "%s: parameter/optimizer layout differs (%llu params, "
                           "shard %llu+%llu; want %zu, %zu+%zu)",
                           path, (unsigned long long)h.num_params, (unsigned long long)h.opt_off,
                           (unsigned long long)h.opt_len, w->num_params, w->opt_off, w->opt_len);
    if (w->params && !h.has_params) return skiff_error(err, 0, "%s: holds no parameters", path);
    if (h.has_params) {
        if (w->params) {
            if (skiff_read_all(fd, w->params, ckpt_params_len(h.zero, w->num_params, w->opt_len) * sizeof(float)) < 0)
                return skiff_error(err, errno, "%s: truncated parameters", path);
        } else if (lseek(fd, (off_t)(ckpt_params_len(h.zero, w->num_params, w->opt_len) * sizeof(float)), SEEK_CUR) <
                   0) {
            return skiff_error(err, errno, "%s: seek", path);
        }
    }
    if (w->opt_len && w->m && w->v &&
        (skiff_read_all(fd, w->m, w->opt_len * sizeof(float)) < 0 ||
         skiff_read_all(fd, w->v, w->opt_len * sizeof(float)) < 0))
        return skiff_error(err, errno, "%s: truncated optimizer state", path);
    w->step = h.step;
    w->data_pos = h.data_pos;
    w->rng = h.rng;
    w->amp = (struct train_amp_state){h.loss_scale, h.scale_good, h.skipped_run, h.skipped};
    return 0;
}

/* ---- another layout -------------------------------------------------------
 * A checkpoint of S processes as dp x tp x pp with ZeRO z holds AdamW's m
 * and v in pieces: tensor-parallel rank t's part of the model (its local
 * buffer, gpt2_param_layout_tp) on data-parallel rank 0 (z 0; with --pp
 * gathered from every stage before the save) or in shards over the
 * data-parallel ranks (z 1, 2; with --pp each stage's ranges sharded
 * piece by piece, train_pp_shard_copy); with ZeRO-3 every file holds its
 * shard of every unit (policy.h) of the weights, m and v: of the whole
 * model, or with --tp of its tensor-parallel rank's part; with --pp its
 * shard of its stage's ranges instead, cut as ZeRO-1/2's.
 * They are put back together into the whole model's, and this rank takes
 * its part of them as this run lays it out: the same state in another
 * layout. */

/* Opens DIR/rank-R.ckpt and reads its header, which must be the layout and
 * step of `saved` (rank 0's). */
static int open_piece(const char *dir, int r, const struct train_ckpt *saved, struct ckpt_header *h, int *fd,
                      skiff_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.ckpt", dir, r);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return skiff_error(err, errno, "--resume: %s (a rank of the saved layout)", path);
    int32_t want[6];
    cfg_pack(&saved->cfg, want);
    if (read_header(*fd, path, h, err) < 0) return -1;
    if (memcmp(want, h->cfg, sizeof want) || h->world != saved->world || h->tp != saved->tp || h->pp != saved->pp ||
        h->zero != saved->zero || h->step != saved->step || h->num_params != saved->num_params)
        return skiff_error(err, 0, "--resume: %s is not of the layout or step of rank 0's file", path);
    return 0;
}

/* Reads the piece of m and v in file r into m and v (n floats each): at
 * the file's opt_off in the saved layout's local buffers, or with
 * `packed` (a --pp ZeRO shard, which must be `packed` floats) at 0; of a
 * ZeRO-3 file its shard of the weights too, into p at the same place, when
 * p is not NULL. */
static int read_piece(const char *dir, int r, const struct train_ckpt *saved, float *p, float *m, float *v, size_t n,
                      size_t packed, skiff_err *err)
{
    struct ckpt_header h;
    cleanup_close int fd = -1;
    if (open_piece(dir, r, saved, &h, &fd, err) < 0) return -1;
    size_t at = packed ? 0 : h.opt_off;
    if (packed && h.opt_len != packed)
        return skiff_error(err, 0, "--resume: rank-%d.ckpt: a stage's shard of %llu floats, this build lays out %zu", r,
                           (unsigned long long)h.opt_len, packed);
    if (at + h.opt_len > n)
        return skiff_error(err, 0, "--resume: rank-%d.ckpt: optimizer range %llu+%llu beyond %zu", r,
                           (unsigned long long)h.opt_off, (unsigned long long)h.opt_len, n);
    size_t plen = h.has_params ? ckpt_params_len(h.zero, h.num_params, h.opt_len) : 0;
    if (p && h.zero == 3 && (!plen || skiff_read_all(fd, p + at, plen * sizeof(float)) < 0))
        return skiff_error(err, errno, "--resume: rank-%d.ckpt: truncated or missing weights", r);
    off_t pos = (off_t)sizeof h + (off_t)(plen * sizeof(float));
    if (lseek(fd, pos, SEEK_SET) < 0 || skiff_read_all(fd, m + at, h.opt_len * sizeof(float)) < 0 ||
        skiff_read_all(fd, v + at, h.opt_len * sizeof(float)) < 0)
        return skiff_error(err, errno, "--resume: rank-%d.ckpt: truncated optimizer state", r);
    return 0;
}

/* Tensor-parallel rank t's part of m and v (its local buffers lm, lv of n
 * floats) from the saved layout's files: data-parallel rank 0's (ZeRO 0:
 * whole, with --pp gathered from every stage), or every data-parallel
 * rank's shard (ZeRO 1/2/3), with --pp of every stage; of a ZeRO-3 --pp
 * checkpoint the weights too (its stages' shards, cut as m and v's), into
 * lp when it is not NULL. */
static int read_tp_part(const char *dir, const struct train_ckpt *s, int t, float *lp, float *lm, float *lv, size_t n,
                        skiff_err *err)
{
    int stp = s->tp, spp = s->pp, sdp = s->world / (stp * spp);
    if (!s->zero || spp == 1) {
        for (int d = 0; d < (s->zero ? sdp : 1); d++)
            if (read_piece(dir, train_layout_rank(stp, sdp, 0, d, t), s, NULL, lm, lv, n, 0, err) < 0) return -1;
        return 0;
    }
    float *pm = malloc(n * sizeof(float)), *pv = malloc(n * sizeof(float)), *pp = lp ? malloc(n * sizeof(float)) : NULL;
    int rc = pm && pv && (pp || !lp) ? 0 : skiff_error(err, ENOMEM, "--resume: a stage's optimizer shard");
    for (int st = 0; rc == 0 && st < spp; st++) {
        size_t len = train_pp_shard_len(&s->cfg, stp, spp, st, sdp);
        for (int d = 0; rc == 0 && d < sdp; d++) {
            rc = read_piece(dir, train_layout_rank(stp, sdp, st, d, t), s, pp, pm, pv, n, len, err);
            if (rc == 0) {
                train_pp_shard_copy(&s->cfg, stp, spp, st, sdp, d, lm, pm, 1);
                train_pp_shard_copy(&s->cfg, stp, spp, st, sdp, d, lv, pv, 1);
                if (lp) train_pp_shard_copy(&s->cfg, stp, spp, st, sdp, d, lp, pp, 1);
            }
        }
    }
    free(pm);
    free(pv);
    free(pp);
    return rc;
}

/* A ZeRO-3 checkpoint without --pp: every rank's shard of m and v, and of the
 * weights when fp is not NULL, put together into each tensor-parallel
 * rank's part (its data-parallel ranks' shards) and the parts into the
 * whole model's. */
static int read_zero3(const char *dir, const struct train_ckpt *s, float *fp, float *fm, float *fv, skiff_err *err)
{
    int stp = s->tp, sdp = s->world / stp;
    size_t n = s->num_params, sh = n / (size_t)sdp; /* train_zero3_len: every data-parallel rank's shard back to back */
    size_t nl = stp > 1 ? gpt2_param_layout_tp(&s->cfg, stp, NULL, NULL) : 0;
    float *lp = fp ? calloc(n, sizeof(float)) : NULL, *lm = calloc(n, sizeof(float)), *lv = calloc(n, sizeof(float));
    float *tp = fp && nl ? calloc(nl, sizeof(float)) : NULL, *tm = nl ? calloc(nl, sizeof(float)) : fm,
          *tv = nl ? calloc(nl, sizeof(float)) : fv;
    int rc = lm && lv && (lp || !fp) && tm && tv && (tp || !fp || !nl)
                 ? 0
                 : skiff_error(err, ENOMEM, "--resume: the shards of a --zero 3 checkpoint");
    for (int t = 0; rc == 0 && t < stp; t++) {
        for (int d = 0; rc == 0 && d < sdp; d++) {
            if ((rc = read_piece(dir, train_layout_rank(stp, sdp, 0, d, t), s, lp, lm, lv, n, 0, err)) < 0) break;
            train_zero3_copy(&s->cfg, stp, sdp, d, tm, lm + (size_t)d * sh, 1);
            train_zero3_copy(&s->cfg, stp, sdp, d, tv, lv + (size_t)d * sh, 1);
            if (fp) train_zero3_copy(&s->cfg, stp, sdp, d, nl ? tp : fp, lp + (size_t)d * sh, 1);
        }
        if (rc == 0 && nl) { /* tensor-parallel rank t's part into its place in the whole */
            gpt2_tp_copy(&s->cfg, stp, t, fm, tm, 0);
            gpt2_tp_copy(&s->cfg, stp, t, fv, tv, 0);
            if (fp) gpt2_tp_copy(&s->cfg, stp, t, fp, tp, 0);
        }
    }
    free(lp);
    free(lm);
    free(lv);
    if (nl) {
        free(tp);
        free(tm);
        free(tv);
    }
    return rc;
}

/* The whole model's x (m, v or the weights) into this rank's ZeRO-3 shard
 * of its tensor-parallel part (local: scratch for the part), or with --pp
 * (pp > 1) into its shard of its stage's ranges (stage s), as ZeRO-1/2
 * cut them. */
static void shard_zero3(const struct gpt2_config *cfg, int tp, int pp, int s, int dp, int t, int d, float *full,
                        float *local, float *shard)
{
    if (tp > 1) gpt2_tp_copy(cfg, tp, t, full, local, 1);
    if (pp > 1)
        train_pp_shard_copy(cfg, tp, pp, s, dp, d, tp > 1 ? local : full, shard, 0);
    else
        train_zero3_copy(cfg, tp, dp, d, tp > 1 ? local : full, shard, 0);
}

int train_ckpt_load_relayout(const char *dir, struct train_ckpt *w, const struct train_ckpt *saved, skiff_err *err)
{
    const struct gpt2_config *cfg = &w->cfg;
    int stp = saved->tp, sdp = saved->world / (saved->tp * saved->pp);
    int wtp = w->tp > 1 ? w->tp : 1, wpp = w->pp > 1 ? w->pp : 1, wdp = w->world / (wtp * wpp), ws, wd, wt;
    int sz3 = saved->zero == 3, wz3 = w->zero == 3, spp = saved->pp;
    train_layout_place(w->rank, wtp, wdp, &ws, &wd, &wt);
    size_t n = gpt2_param_layout(cfg, NULL, NULL);
    size_t sn = gpt2_param_layout_tp(cfg, stp, NULL, NULL), wn = gpt2_param_layout_tp(cfg, wtp, NULL, NULL);
    sn = stp == 1 ? saved->num_params : (sn + (size_t)sdp - 1) / (size_t)sdp * (size_t)sdp; /* as policy.c pads */
    if (wn < w->opt_off + w->opt_len) wn = w->opt_off + w->opt_len;
    float *fm = calloc(n, sizeof(float)), *fv = calloc(n, sizeof(float)),
          *fp = w->params ? calloc(n, sizeof(float)) : NULL;
    float *lm = calloc(sn > wn ? sn : wn, sizeof(float)), *lv = calloc(sn > wn ? sn : wn, sizeof(float));
    int rc = fm && fv && lm && lv && (fp || !w->params)
                 ? 0
                 : skiff_error(err, ENOMEM, "--resume: optimizer state of another layout");
    /* the whole model's m and v (ZeRO-3: and weights), from every piece of the saved layout */
    if (rc == 0 && sz3 && spp == 1 && (w->opt_len || fp)) rc = read_zero3(dir, saved, fp, fm, fv, err);
    /* ZeRO-3 under --pp: the weights are in every file's stage shard, as m and v */
    int z3pp = sz3 && spp > 1;
    float *lp = z3pp && fp ? calloc(sn, sizeof(float)) : NULL;
    if (rc == 0 && z3pp && fp && !lp) rc = skiff_error(err, ENOMEM, "--resume: the weights of a --zero 3 checkpoint");
    for (int t = 0; rc == 0 && (!sz3 || z3pp) && (w->opt_len || (z3pp && fp)) && t < stp; t++) {
        if ((rc = read_tp_part(dir, saved, t, lp, lm, lv, sn, err)) < 0) break;
        gpt2_tp_copy(cfg, stp, t, fm, lm, 0);
        gpt2_tp_copy(cfg, stp, t, fv, lv, 0);
        if (lp) gpt2_tp_copy(cfg, stp, t, fp, lp, 0);
    }
    free(lp);
    if (rc == 0 && w->opt_len && wz3) { /* this rank's shard (of its tensor-parallel part) */
        shard_zero3(cfg, wtp, wpp, ws, wdp, wt, wd, fm, lm, w->m);
        shard_zero3(cfg, wtp, wpp, ws, wdp, wt, wd, fv, lv, w->v);
    } else if (rc == 0 && w->opt_len) { /* this rank's part, in this run's layout */
        memset(lm, 0, wn * sizeof(float));
        memset(lv, 0, wn * sizeof(float));
        gpt2_tp_copy(cfg, wtp, wt, fm, lm, 1);
        gpt2_tp_copy(cfg, wtp, wt, fv, lv, 1);
        if (w->zero && wpp > 1) { /* its stage's shard */
            train_pp_shard_copy(cfg, wtp, wpp, ws, wdp, wd, lm, w->m, 0);
            train_pp_shard_copy(cfg, wtp, wpp, ws, wdp, wd, lv, w->v, 0);
        } else {
            memcpy(w->m, lm + w->opt_off, w->opt_len * sizeof(float));
            memcpy(w->v, lv + w->opt_off, w->opt_len * sizeof(float));
        }
    }
    if (rc == 0 && w->params && !sz3) { /* rank 0's weights, the model's floats (the padding differs) */
        struct ckpt_header h;
        cleanup_close int fd = -1;
        if (open_piece(dir, 0, saved, &h, &fd, err) < 0)
            rc = -1;
        else if (!h.has_params)
            rc = skiff_error(err, 0, "--resume: %s/rank-0.ckpt holds no parameters", dir);
        else if (skiff_read_all(fd, fp, n * sizeof(float)) < 0)
            rc = skiff_error(err, errno, "--resume: %s/rank-0.ckpt: truncated parameters", dir);
    }
    if (rc == 0 && w->params) { /* ZeRO-3: this rank's shard of them */
        if (wz3)
            shard_zero3(cfg, wtp, wpp, ws, wdp, wt, wd, fp, lm, w->params);
        else
            memcpy(w->params, fp, n * sizeof(float));
    }
    free(fm);
    free(fv);
    free(fp);
    free(lm);
    free(lv);
    if (rc < 0) return -1;
    w->step = saved->step;
    w->data_pos = saved->data_pos;
    w->rng = saved->rng;
    w->amp = saved->amp;
    return 0;
}
