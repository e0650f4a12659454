/*
 * A one-line progress bar for the C examples, as Accelerate's examples use tqdm on the main process: drawn
 * only by the main process and only when the output is a terminal (directly, or through `accel launch`,
 * which sets ACCEL_PROGRESS_TTY=1 when its own output is one); redrawn in place with '\r'. In a pipe or a
 * log file nothing is drawn: the examples' own lines are the plain-text log.
 */
#ifndef ACCEL_EXAMPLES_PROGRESS_H
#define ACCEL_EXAMPLES_PROGRESS_H

#include <accel/accel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double progress_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether this process draws bars. */
static int progress_enabled(const accel_accelerator_t *acc)
{
    bool is_main = false;
    const char *tty = getenv("ACCEL_PROGRESS_TTY");
    if (accel_accelerator_is_main_process(acc, &is_main) != ACCEL_OK || !is_main)
        return 0;
    return isatty(STDOUT_FILENO) || (tty != NULL && strcmp(tty, "1") == 0);
}

/* "LABEL [#####.....] done/total  RATE UNIT/s  loss L" */
static void progress_draw(const char *label, int64_t done, int64_t total, double per_second, const char *unit,
                          double loss)
{
    char bar[21];
    for (int i = 0; i < 20; ++i)
        bar[i] = total > 0 && i < (int)(20 * done / total) ? '#' : '.';
    bar[20] = '\0';
    printf("\r%s [%s] %lld/%lld  %.0f %s/s  loss %.4f", label, bar, (long long)done, (long long)total, per_second, unit,
           loss);
    fflush(stdout);
}

/* Clears the bar's line, so that the next printed line replaces it. */
static void progress_clear(void)
{
    printf("\r\033[K");
    fflush(stdout);
}

#endif /* ACCEL_EXAMPLES_PROGRESS_H */
