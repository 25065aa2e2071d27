/* The per-step log; see logger.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "logger.h"

int train_log_open(struct train_log *lg, const char *path, int resume, int quiet, skiff_err *err)
{
    lg->jsonl = NULL;
    lg->quiet = quiet;
    if (!path) return 0;
    lg->jsonl = fopen(path, resume ? "ae" : "we");
    if (!lg->jsonl) return skiff_error(err, errno, "opening log %s", path);
    return 0;
}

void train_log_step(struct train_log *lg, const struct train_step_log *s)
{
    if (lg->jsonl) {
        fprintf(lg->jsonl,
                "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"tokens_per_s\":%.1f,"
                "\"ms\":%.3f,\"comm_ms\":%.3f,\"wait_ms\":%.3f",
                s->step, s->loss, s->lr, s->grad_norm, s->tokens_per_s, s->ms, s->comm_ms, s->wait_ms);
        if (s->overlap_ms > 0) fprintf(lg->jsonl, ",\"overlap_ms\":%.3f", s->overlap_ms);
        if (!isnan(s->val_loss)) fprintf(lg->jsonl, ",\"val_loss\":%.6f", s->val_loss);
        fputs("}\n", lg->jsonl);
        fflush(lg->jsonl);
    }
    if (!lg->quiet) {
        printf("step %5d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.1f ms", s->step, s->loss, s->lr,
               s->grad_norm, s->tokens_per_s, s->ms);
        if (!isnan(s->val_loss)) printf(" | val loss %.6f", s->val_loss);
        putchar('\n');
        fflush(stdout);
    }
}

void train_log_close(struct train_log *lg)
{
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = NULL;
}
