// The CUDA training loop. It mirrors train_cpu (trainer/train.c) step for
// step — same data windows, schedule, clipping, AdamW, ZeRO stages, checkpoint
// files and log lines — so a run can move between devices and the two paths
// can be compared; what differs is where the model runs and how gradients move.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_cuda.cuh"

extern "C" {
#include "clock.h"
#include "cuda_model.h"
#include "cuda_train.h"
#include "train.h"
}

struct run {
    const struct train_opts *o;
    struct train_dist dist;
    struct skiff_comm *comm;
    struct cuda_gpt2 *m;
    cudaStream_t s;
    int prec, P, rank;
    struct data_loader train, val;
    int have_train, have_val;
    size_t n, n_pad, opt_off, opt_len;
    float *hparams, *hm, *hv;  // host copies for init / checkpoints
    float *gshard;             // ZeRO-2 accumulated shard (device)
    float *dscal;              // device scalars: [0] sum of squares, [1..] gather slots
    int *in, *tg;
    struct train_log log;
    int log_open;
    // DDP requests of the current step
    struct skiff_comm_req **reqs;
    size_t nreqs, reqs_cap;
};

static void run_free(struct run *r) {
    if (r->s) cudaStreamSynchronize(r->s);
    cuda_gpt2_destroy(r->m);
    if (r->have_train) data_loader_close(&r->train);
    if (r->have_val) data_loader_close(&r->val);
    free(r->hparams);
    free(r->hm);
    free(r->hv);
    if (r->gshard) cudaFree(r->gshard);
    if (r->dscal) cudaFree(r->dscal);
    free(r->in);
    free(r->tg);
    free(r->reqs);
    if (r->log_open) train_log_close(&r->log);
    skiff_comm_destroy(r->comm);
    train_dist_fini(&r->dist);
}

// Mean over ranks of one value per rank, summed in rank order on every rank
// (train.c's mean_over_ranks, through device memory).
static int mean_over_ranks(struct run *r, double v, double *out, skiff_err *err) {
    if (r->P == 1) {
        *out = v;
        return 0;
    }
    float *slots = r->dscal + 1;
    float mine = (float)v;
    CUDA_CHECK(cudaMemsetAsync(slots, 0, r->P * sizeof(float), r->s));
    CUDA_CHECK(cudaMemcpyAsync(slots + r->rank, &mine, sizeof(float), cudaMemcpyHostToDevice, r->s));
    TRY(skiff_all_gather(r->comm, slots, (size_t)r->P, SKIFF_F32, err));
    float *all = (float *)calloc(r->P, sizeof(float));
    if (!all) return skiff_error(err, ENOMEM, "gather");
    cudaError_t e = cudaMemcpyAsync(all, slots, r->P * sizeof(float), cudaMemcpyDeviceToHost, r->s);
    if (e == cudaSuccess) {
        int rc = cuda_comm_sync(r->comm, err);
        if (rc < 0) {
            free(all);
            return rc;
        }
    }
    double s = 0;
    for (int i = 0; i < r->P; i++) s += all[i];
    free(all);
    CUDA_CHECK(e);
    *out = s / r->P;
    return 0;
}

// Broadcast of host data from rank 0 through a device buffer.
static int bcast_host(struct run *r, float *host, size_t n, skiff_err *err) {
    if (r->P == 1) return 0;
    float *d;
    CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(float)));
    int rc = -1;
    cudaError_t e = cudaMemcpyAsync(d, host, n * sizeof(float), cudaMemcpyHostToDevice, r->s);
    if (e == cudaSuccess && skiff_broadcast(r->comm, d, n * sizeof(float), 0, err) == 0) {
        e = cudaMemcpyAsync(host, d, n * sizeof(float), cudaMemcpyDeviceToHost, r->s);
        if (e == cudaSuccess && cuda_comm_sync(r->comm, err) == 0) rc = 0;
    }
    cudaFree(d);
    if (e != cudaSuccess) return skiff_error(err, 0, "%s:%d: broadcast staging: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    return rc;
}

// NCCL refuses two ranks on one GPU: ranks publish host + PCI bus id and
// everyone picks host-staged when any two collide (all see the same data, so
// all pick the same backend).
static int pick_backend(struct run *r, const char **name, skiff_err *err) {
    const char *env = getenv("SKIFF_TRAIN_COMM");
    if (env && *env && strcmp(env, "auto")) {
        if (strcmp(env, "nccl") && strcmp(env, "host-staged"))
            return skiff_error(err, 0, "SKIFF_TRAIN_COMM='%s': use nccl, host-staged or auto", env);
        *name = env;
        return 0;
    }
    char me[512], host[256] = "", bus[64] = "";
    int dev = 0;
    gethostname(host, sizeof(host) - 1);
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), dev));
    snprintf(me, sizeof(me), "%s/%s", host, bus);
    char key[64];
    snprintf(key, sizeof(key), "cudadev/%d", r->rank);
    TRY(skiff_store_set(r->dist.store, key, me, strlen(me), err));
    char **ids = (char **)calloc(r->P, sizeof(char *));
    if (!ids) return skiff_error(err, ENOMEM, "device list");
    int rc = 0, shared = 0;
    for (int i = 0; i < r->P && rc == 0; i++) {
        size_t len;
        snprintf(key, sizeof(key), "cudadev/%d", i);
        rc = skiff_store_get(r->dist.store, key, (void **)&ids[i], &len, err);
        for (int j = 0; rc == 0 && j < i; j++)
            if (!strcmp(ids[i], ids[j])) shared = 1;
    }
    for (int i = 0; i < r->P; i++) free(ids[i]);
    free(ids);
    if (rc < 0) return skiff_err_wrap(err, "exchanging GPU ids");
    *name = shared ? "host-staged" : "nccl";
    return 0;
}

static int setup(struct run *r, const struct train_opts *o, int *start_step, skiff_err *err) {
    r->o = o;
    TRY(cuda_precision_parse(o->precision, &r->prec, err));
    TRY(train_dist_init(&r->dist, o->timeout_ms, err));
    r->P = r->dist.world, r->rank = r->dist.rank;
    char gpu[256] = "";
    TRY(cuda_select_device(r->dist.local_rank, gpu, sizeof(gpu), err));
    int P = r->P, rank = r->rank;
    r->n = gpt2_param_layout(&o->cfg, NULL, NULL);
    r->n_pad = (r->n + (size_t)P - 1) / (size_t)P * (size_t)P;
    if (o->zero) {
        r->opt_len = r->n_pad / (size_t)P;
        r->opt_off = (size_t)rank * r->opt_len;
    } else {
        r->opt_off = 0;
        r->opt_len = r->n_pad;
    }
    TRY(cuda_gpt2_create(&r->m, &o->cfg, o->batch, o->seq, r->prec, r->n_pad, r->opt_off, r->opt_len, err));
    r->s = (cudaStream_t)cuda_gpt2_stream(r->m);
    const char *backend = "single";
    if (P == 1) {
        TRY(cuda_comm_single_create(r->s, &r->comm, err));
    } else {
        TRY(pick_backend(r, &backend, err));
        if (!strcmp(backend, "nccl")) {
            TRY(cuda_comm_nccl_create(r->dist.store, rank, P, r->dist.local_rank, o->timeout_ms, r->s,
                                      &r->comm, err));
        } else {
            struct skiff_comm *host = NULL;
            TRY(skiff_comm_tcp_create(r->dist.store, rank, P, r->dist.local_rank, o->timeout_ms, &host, err));
            TRY(cuda_comm_staged_create(host, r->s, &r->comm, err));
        }
    }
    CUDA_CHECK(cudaMalloc((void **)&r->dscal, (1 + (size_t)P) * sizeof(float)));
    if (o->zero == 2) {
        CUDA_CHECK(cudaMalloc((void **)&r->gshard, r->opt_len * sizeof(float)));
    }
    r->hparams = (float *)calloc(r->n_pad, sizeof(float));
    r->hm = (float *)calloc(r->opt_len, sizeof(float));
    r->hv = (float *)calloc(r->opt_len, sizeof(float));
    r->in = (int *)calloc((size_t)o->batch * o->seq, sizeof(int));
    r->tg = (int *)calloc((size_t)o->batch * o->seq, sizeof(int));
    if (!r->hparams || !r->hm || !r->hv || !r->in || !r->tg) return skiff_error(err, ENOMEM, "host buffers");
    if (data_loader_open(&r->train, o->data, o->batch, o->seq, o->cfg.vocab_size, o->seed, !o->sequential,
                         err) < 0)
        return skiff_err_wrap(err, "--data");
    r->have_train = 1;
    if (o->val) {
        if (data_loader_open(&r->val, o->val, o->batch, o->seq, o->cfg.vocab_size, o->seed, 0, err) < 0)
            return skiff_err_wrap(err, "--val");
        r->have_val = 1;
    }

    *start_step = 0;
    TRY(train_init_params(o, rank, r->hparams, err));
    if (o->resume) {
        int has_opt = o->zero || rank == 0;
        struct train_ckpt c;
        memset(&c, 0, sizeof(c));
        c.cfg = o->cfg, c.world = P, c.rank = rank, c.zero = o->zero, c.num_params = r->n_pad;
        c.opt_off = has_opt ? r->opt_off : 0, c.opt_len = has_opt ? r->opt_len : 0;
        c.params = rank == 0 ? r->hparams : NULL, c.m = r->hm, c.v = r->hv;
        TRY(train_ckpt_load(o->ckpt_dir, &c, err));
        *start_step = c.step;
        if (o->zero == 0 && P > 1) {
            if (bcast_host(r, r->hm, r->n_pad, err) < 0 || bcast_host(r, r->hv, r->n_pad, err) < 0)
                return skiff_err_wrap(err, "sharing optimizer state");
        }
        TRY(cuda_gpt2_set_opt_state(r->m, r->hm, r->hv, err));
        double mine = c.step, mean;
        TRY(mean_over_ranks(r, mine, &mean, err));
        if (mean != mine)
            return skiff_error(err, 0,
                               "--resume: rank %d's checkpoint is at step %d but the ranks disagree "
                               "(mean %.2f): a save was interrupted; remove %s or restart from scratch",
                               rank, c.step, mean, o->ckpt_dir);
        if (*start_step >= o->steps)
            return skiff_error(err, 0, "--resume: checkpoint is at step %d, --steps is %d: nothing left to do",
                               *start_step, o->steps);
    }
    if (bcast_host(r, r->hparams, r->n_pad, err) < 0)
        return skiff_err_wrap(err, "broadcasting parameters from rank 0");
    TRY(cuda_gpt2_set_params(r->m, r->hparams, err));
    if (rank == 0) {
        TRY(train_log_open(&r->log, o->log_path, o->resume, o->quiet, err));
        r->log_open = 1;
    }
    if (rank == 0 && !o->quiet)
        printf("skiff-train: model %s (%zu params, L%d H%d C%d T%d V%d) on %s, %s, world %d (%s), "
               "batch %d x %d x accum %d x world = %zu tokens/step, zero %d, %.2f GiB on the GPU%s\n",
               o->model, r->n, o->cfg.num_layers, o->cfg.num_heads, o->cfg.channels, o->seq,
               o->cfg.vocab_size, gpu, o->precision ? o->precision : "bf16", P, backend, o->batch,
               o->seq, o->grad_accum, (size_t)o->batch * o->seq * o->grad_accum * P, o->zero,
               cuda_gpt2_bytes(r->m) / 1073741824.0, o->resume ? ", resumed" : "");
    return 0;
}

// DDP: each layer's gradient slices start their all-reduce as soon as the
// backward pass has finished that layer; NCCL runs them on its own stream.
static int grad_ready(void *ctx, struct cuda_gpt2 *m, int layer, skiff_err *err) {
    struct run *r = (struct run *)ctx;
    size_t lo[16], hi[16];
    int k = cuda_gpt2_layer_ranges(m, layer, lo, hi);
    float *g = cuda_gpt2_grads(m);
    for (int i = 0; i < k; i++) {
        if (r->nreqs == r->reqs_cap) {
            size_t nc = r->reqs_cap ? 2 * r->reqs_cap : 64;
            struct skiff_comm_req **n = (struct skiff_comm_req **)realloc(r->reqs, nc * sizeof(*n));
            if (!n) return skiff_error(err, ENOMEM, "bucket list");
            r->reqs = n;
            r->reqs_cap = nc;
        }
        TRY(skiff_comm_start(r->comm, SKIFF_COMM_ALLREDUCE, g + lo[i], hi[i] - lo[i], SKIFF_F32,
                             &r->reqs[r->nreqs], err));
        r->nreqs++;
    }
    return 0;
}

static int save(struct run *r, int step, skiff_err *err) {
    const struct train_opts *o = r->o;
    // Full fp32 weights for rank 0: every rank's master range into the (now
    // free) gradient buffer, gathered when sharded.
    float *g = cuda_gpt2_grads(r->m);
    TRY(cuda_gpt2_master_to(r->m, g, err));
    if (o->zero && r->P > 1) TRY(skiff_all_gather(r->comm, g, r->n_pad, SKIFF_F32, err));
    CUDA_CHECK(cudaMemcpyAsync(r->hparams, g, r->n_pad * sizeof(float), cudaMemcpyDeviceToHost, r->s));
    TRY(cuda_comm_sync(r->comm, err));
    TRY(cuda_gpt2_get_opt_state(r->m, r->hm, r->hv, err));
    struct train_ckpt c;
    memset(&c, 0, sizeof(c));
    c.cfg = o->cfg, c.world = r->P, c.rank = r->rank, c.zero = o->zero, c.step = step;
    c.data_pos = (uint64_t)step * (uint64_t)o->batch * (uint64_t)o->grad_accum * (uint64_t)r->P;
    c.rng = o->seed, c.num_params = r->n_pad, c.opt_off = r->opt_off;
    c.opt_len = o->zero || r->rank == 0 ? r->opt_len : 0;
    c.params = r->rank == 0 ? r->hparams : NULL, c.m = r->hm, c.v = r->hv;
    TRY(train_ckpt_save(o->ckpt_dir, &c, err));
    return skiff_barrier(r->comm, err);
}

static int evaluate(struct run *r, double *out, skiff_err *err) {
    const struct train_opts *o = r->o;
    double sum = 0;
    for (int i = 0; i < o->val_batches; i++) {
        uint64_t first = ((uint64_t)i * (uint64_t)r->P + (uint64_t)r->rank) * (uint64_t)r->val.B;
        TRY(data_loader_batch(&r->val, first, r->in, r->tg, err));
        TRY(cuda_gpt2_forward(r->m, r->in, r->tg, 0.0f, err));
    }
    TRY(cuda_gpt2_take_loss(r->m, &sum, err));
    return mean_over_ranks(r, sum / o->val_batches, out, err);
}

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static int loop(struct run *r, int start, skiff_err *err) {
    const struct train_opts *o = r->o;
    struct skiff_comm *c = r->comm;
    int P = r->P, K = o->grad_accum;
    uint64_t G = (uint64_t)o->batch * (uint64_t)K * (uint64_t)P;
    int end = o->steps;
    if (o->stop_after && start + o->stop_after < end) end = start + o->stop_after;
    float *grads = cuda_gpt2_grads(r->m);
    // fp16: dynamic loss scaling. Overflowing steps are skipped and halve the
    // scale; `window` good steps in a row double it.
    int fp16 = r->prec == SKIFF_CUDA_FP16;
    double loss_scale = fp16 ? 65536.0 : 1.0;
    int window = env_int("SKIFF_TRAIN_SCALE_WINDOW", 1000), good = 0;
    int inject = env_int("SKIFF_TRAIN_INJECT_OVERFLOW_STEP", 0);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    int rc = -1;
    for (int step = start; step < end; step++) {
        double t0 = skiff_now_s(), busy0 = c->stats.busy_s;
        float wait_ms = 0.0f;
        float lr = train_lr(o, step);
        if (cuda_gpt2_zero_grad(r->m, err) < 0) goto out;
        if (o->zero == 2 && cudaMemsetAsync(r->gshard, 0, r->opt_len * sizeof(float), r->s) != cudaSuccess) {
            skiff_error(err, 0, "%s:%d: cudaMemsetAsync failed", __FILE__, __LINE__);
            goto out;
        }
        for (int k = 0; k < K; k++) {
            uint64_t first = (uint64_t)step * G + ((uint64_t)k * (uint64_t)P + (uint64_t)r->rank) * (uint64_t)o->batch;
            if (data_loader_batch(&r->train, first, r->in, r->tg, err) < 0) goto out;
            float dloss = (float)(loss_scale / ((double)o->batch * o->seq * K * P));
            if (cuda_gpt2_forward(r->m, r->in, r->tg, dloss, err) < 0) goto out;
            int last = k == K - 1;
            int ddp = o->zero == 0 && P > 1 && last;  // no_sync on earlier micro-steps
            r->nreqs = 0;
            if (cuda_gpt2_backward(r->m, ddp ? grad_ready : NULL, r, err) < 0) goto out;
            if (ddp) {
                cudaEventRecord(e0, r->s);
                for (size_t i = 0; i < r->nreqs; i++)
                    if (skiff_comm_wait(c, r->reqs[i], err) < 0) goto out;
                cudaEventRecord(e1, r->s);
            }
            if (o->zero == 2) {
                if (skiff_reduce_scatter(c, grads, r->n_pad, SKIFF_F32, err) < 0 ||
                    cuda_gpt2_accumulate(r->m, r->gshard, grads + r->opt_off, r->opt_len, err) < 0)
                    goto out;
                if (!last && cuda_gpt2_zero_grad(r->m, err) < 0) goto out;
            }
        }
        {
            const float *gopt;
            float *ss = r->dscal;
            if (o->zero == 1 && skiff_reduce_scatter(c, grads, r->n_pad, SKIFF_F32, err) < 0) goto out;
            gopt = o->zero == 0 ? grads : o->zero == 1 ? grads + r->opt_off : r->gshard;
            if (inject && inject == step + 1) {
                float inf = INFINITY;
                if (cudaMemcpyAsync((void *)gopt, &inf, sizeof(float), cudaMemcpyHostToDevice, r->s) != cudaSuccess) {
                    skiff_error(err, 0, "%s:%d: overflow injection failed", __FILE__, __LINE__);
                    goto out;
                }
            }
            if (cudaMemsetAsync(ss, 0, sizeof(float), r->s) != cudaSuccess ||
                cuda_gpt2_sumsq(r->m, ss, gopt, r->opt_len, err) < 0)
                goto out;
            float h = 0.0f;
            if (cudaMemcpyAsync(&h, ss, sizeof(float), cudaMemcpyDeviceToHost, r->s) != cudaSuccess) {
                skiff_error(err, 0, "%s:%d: norm copy failed", __FILE__, __LINE__);
                goto out;
            }
            if (cuda_comm_sync(c, err) < 0) goto out;
            double norm2 = h;
            if (o->zero) {
                double mean;
                if (mean_over_ranks(r, norm2, &mean, err) < 0) goto out;
                norm2 = mean * P;
            }
            double norm = sqrt(norm2) / loss_scale;
            if (!isfinite(norm)) {
                if (!fp16) {
                    skiff_error(err, ERANGE, "step %d: gradient norm is %f (loss diverged); lower --lr", step + 1, norm);
                    goto out;
                }
                loss_scale /= 2;
                good = 0;
                if (r->rank == 0)
                    printf("fp16: step %d: gradient overflow, step skipped, loss scale now %g\n", step + 1, loss_scale);
            } else {
                float gscale = o->grad_clip > 0 && norm > o->grad_clip ? (float)(o->grad_clip / norm) : 1.0f;
                gscale = (float)(gscale / loss_scale);
                if (cuda_gpt2_adamw(r->m, gopt, lr, o->beta1, o->beta2, o->eps, o->weight_decay, gscale,
                                    step + 1, o->zero == 0, err) < 0)
                    goto out;
                if (o->zero) {
                    // ZeRO: each rank updated its shard of the fp32 master; gather
                    // the full fp32 weights in the gradient buffer, then cast.
                    if (cuda_gpt2_master_to(r->m, grads, err) < 0 ||
                        skiff_all_gather(c, grads, r->n_pad, SKIFF_F32, err) < 0 ||
                        cuda_gpt2_params_from(r->m, grads, err) < 0)
                        goto out;
                }
                if (fp16 && ++good >= window) {
                    loss_scale *= 2;
                    good = 0;
                    if (r->rank == 0) printf("fp16: step %d: loss scale now %g\n", step + 1, loss_scale);
                }
            }
            double lsum, loss;
            if (cuda_gpt2_take_loss(r->m, &lsum, err) < 0) goto out;  // waits for the step
            if (mean_over_ranks(r, lsum / K, &loss, err) < 0) goto out;
            if (o->zero == 0 && P > 1) cudaEventElapsedTime(&wait_ms, e0, e1);
            double val_loss = NAN;
            if (r->have_val && o->val_every && ((step + 1) % o->val_every == 0 || step + 1 == o->steps) &&
                evaluate(r, &val_loss, err) < 0)
                goto out;
            double dt = skiff_now_s() - t0;
            if (r->rank == 0) {
                struct train_step_log sl;
                memset(&sl, 0, sizeof(sl));
                sl.step = step + 1, sl.loss = loss, sl.lr = lr, sl.grad_norm = norm;
                sl.tokens_per_s = (double)G * o->seq / dt, sl.ms = dt * 1000, sl.val_loss = val_loss;
                sl.comm_ms = (c->stats.busy_s - busy0) * 1000, sl.wait_ms = wait_ms;
                train_log_step(&r->log, &sl);
            }
        }
        int done = step + 1;
        if (o->ckpt_dir && ((o->ckpt_every && done % o->ckpt_every == 0) || done == end) && save(r, done, err) < 0)
            goto out;
    }
    rc = 0;
    if (r->rank == 0 && !o->quiet) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        printf("skiff-train: GPU memory: %.2f GiB allocated by the model, %.2f GiB in use on the device\n",
               cuda_gpt2_bytes(r->m) / 1073741824.0, (tot - fr) / 1073741824.0);
    }
out:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

extern "C" int cuda_train(const struct train_opts *o, skiff_err *err) {
    struct run r;
    memset(&r, 0, sizeof(r));
    int start = 0, rc = -1;
    if (setup(&r, o, &start, err) == 0 && loop(&r, start, err) == 0) rc = 0;
    if (rc < 0 && r.P > 1) skiff_err_wrap(err, "rank %d", r.rank);
    run_free(&r);
    return rc;
}
