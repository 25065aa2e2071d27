/* skiff-train plot: the loss curve of a --log file as a PNG, drawn by
 * gnuplot. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools.h"

/* ---- plot --------------------------------------------------------------------- */

static int json_num(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    char *end;
    *out = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat);
}

/* gnuplot (Debian gnuplot-nox) draws the PNG: exec'd from an argv array,
 * the script and the data on its stdin, output to a temporary file renamed
 * when gnuplot succeeded. */
int tool_plot(int argc, char **argv, skiff_err *err)
{
    if (argc != 3) return USAGE("want LOG.jsonl and OUT.png");
    const char *log = argv[1], *png = argv[2];
    FILE *f = fopen(log, "re");
    if (!f) return skiff_error(err, errno, "open %s", log), 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", png, (int)getpid());
    if (strchr(tmp, '"') || strchr(tmp, '\n')) {
        fclose(f);
        return USAGE("%s: quotes and newlines are not allowed in the name", png);
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fclose(f);
        return skiff_error(err, errno, "pipe"), 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fclose(f);
        close(pfd[0]);
        close(pfd[1]);
        return skiff_error(err, errno, "fork"), 1;
    }
    if (pid == 0) {
        dup2(pfd[0], 0);
        char prog[] = "gnuplot";
        char *const av[] = {prog, NULL};
        execvp("gnuplot", av);
        _exit(127);
    }
    close(pfd[0]);
    FILE *g = fdopen(pfd[1], "w");
    if (!g) {
        close(pfd[1]);
        fclose(f);
        waitpid(pid, NULL, 0);
        return skiff_error(err, errno, "fdopen"), 1;
    }
    signal(SIGPIPE, SIG_IGN);
    fprintf(g, "set terminal png size 900,540\nset output \"%s\"\n", tmp);
    fprintf(g, "set xlabel 'step'\nset ylabel 'loss'\nset grid\nset key top right\n"
               "set title 'skiff-train loss'\n");
    char line[4096];
    int nval = 0, ntrain = 0;
    /* Beside each step's loss, its exponential moving average (weight 0.9,
     * debiased as Adam debiases its moments, so the first steps are not
     * pulled towards 0): one batch's loss is noisy when a step sees a few
     * hundred tokens (the demo: a hard batch reads 1.4 above its
     * neighbours, doc/trainer.md), the average shows the trend. */
    const double beta = 0.9;
    double ema = 0, corr = 1;
    fputs("$train << EOD\n", g);
    while (fgets(line, sizeof line, f)) {
        double s, l;
        if (json_num(line, "step", &s) && json_num(line, "loss", &l)) {
            ema = beta * ema + (1 - beta) * l;
            corr *= beta;
            fprintf(g, "%g %g %g\n", s, l, ema / (1 - corr));
            ntrain++;
        }
    }
    fputs("EOD\n$val << EOD\n", g);
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        double s, l;
        if (json_num(line, "step", &s) && json_num(line, "val_loss", &l)) {
            fprintf(g, "%g %g\n", s, l);
            nval++;
        }
    }
    fputs("EOD\n", g);
    fclose(f);
    if (ntrain == 0)
        fputs("exit status 3\n", g);
    else
        fprintf(g,
                "plot $train using 1:2 with lines lc rgb '#a0c0e8' title 'train', "
                "$train using 1:3 with lines lw 2 lc rgb '#1f5fa8' title 'train (moving average, 0.9)'%s\n",
                nval ? ", $val with linespoints lw 2 lc rgb '#c03020' title 'val'" : "");
    fclose(g);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        unlink(tmp);
        if (ntrain == 0) return skiff_error(err, 0, "%s: no step records with a loss", log), 1;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            return skiff_error(err, 0, "gnuplot not found (install Debian package gnuplot-nox)"), 1;
        return skiff_error(err, 0, "gnuplot failed (status %d)", st), 1;
    }
    if (rename(tmp, png) < 0) {
        int e = errno;
        unlink(tmp);
        return skiff_error(err, e, "rename to %s", png), 1;
    }
    return 0;
}
