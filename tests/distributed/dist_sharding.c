/*
 * dist_sharding CASE...   (CASE = "N,BATCH,DROP_LAST,SPLIT_BATCHES,EVEN_BATCHES[,DISPATCH_BATCHES]", flags 0 or 1)
 *
 * For each case (one accelerator each, in one process so that the processes start once): iterates one
 * pass of a prepared loader over range(N) (no shuffling) and prints, per batch, "case K batch [i,j,k]"
 * with the sample indices this rank got; with even_batches (or dispatch_batches, where every rank gets as
 * many equally-sized batches) it also gathers every batch's indices with gather_for_metrics and, on
 * rank 0, prints "case K gathered COUNT" and "case K gathered_indices [..]".
 */
#include "dist_common.h"

#include <string.h>

static void run_case(int case_no, int n, int batch, int drop_last, int split, int even, int dispatch)
{
    char acc_config[256];
    snprintf(acc_config, sizeof acc_config,
             "{\"split_batches\": %s, \"dataloader_config\": {\"even_batches\": %s, \"dispatch_batches\": %s}}",
             split ? "true" : "false", even ? "true" : "false", dispatch ? "true" : "false");
    /* with uneven batch counts the ranks would not all reach the collective */
    const int gather = even || dispatch;
    accel_accelerator_t *acc = NULL;
    accel_dataloader_t *dl = NULL;
    accel_tensor_t *features = NULL;
    float *x = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; ++i) x[i] = (float)i;
    int64_t shape[2] = {n, 1};
    char cfg[128];
    snprintf(cfg, sizeof cfg, "{\"batch_size\": %d, \"shuffle\": false, \"drop_last\": %s}", batch,
             drop_last ? "true" : "false");
    DIST_CHECK(accel_accelerator_create(acc_config, &acc));
    DIST_CHECK(accel_tensor_create(x, (size_t)n * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &features));
    DIST_CHECK(accel_dataloader_create_from_tensors(features, NULL, cfg, &dl));
    DIST_CHECK(accel_accelerator_prepare(acc, NULL, NULL, dl, NULL));
    int64_t length = 0;
    DIST_CHECK(accel_dataloader_get_length(dl, &length));
    printf("case %d length %lld\n", case_no, (long long)length);

    int32_t rank = 0;
    DIST_CHECK(accel_accelerator_get_process_index(acc, &rank));
    int64_t gathered = 0;
    char line[4096];
    char all[16384];
    all[0] = '\0';
    int64_t batches = 0;
    for (;;) {
        accel_batch_t *b = NULL;
        DIST_CHECK(accel_dataloader_next(dl, &b));
        if (b == NULL) break;
        ++batches;
        accel_tensor_t *idx = NULL, *g = NULL, *in = NULL;
        DIST_CHECK(accel_batch_get_indices(b, &idx));
        DIST_CHECK(accel_batch_get_inputs(b, &in));
        int64_t k = dist_numel(idx);
        int64_t buf[256];
        float vals[256];
        DIST_CHECK(accel_tensor_copy_to_buffer(idx, buf, (size_t)k * sizeof(int64_t)));
        DIST_CHECK(accel_tensor_copy_to_buffer(in, vals, (size_t)k * sizeof(float)));
        size_t pos = (size_t)snprintf(line, sizeof line, "case %d batch [", case_no);
        for (int64_t i = 0; i < k; ++i) {
            DIST_EXPECT(vals[i] == (float)buf[i], "the inputs of sample %lld are %g", (long long)buf[i], vals[i]);
            pos += (size_t)snprintf(line + pos, sizeof line - pos, "%s%lld", i ? "," : "", (long long)buf[i]);
        }
        snprintf(line + pos, sizeof line - pos, "]");
        printf("%s\n", line);
        /* gather_for_metrics needs equal shapes: only meaningful with even_batches. */
        if (gather) {
            DIST_CHECK(accel_accelerator_gather_for_metrics(acc, idx, &g));
            int64_t m = dist_numel(g);
            int64_t gb[1024];
            DIST_CHECK(accel_tensor_copy_to_buffer(g, gb, (size_t)m * sizeof(int64_t)));
            for (int64_t i = 0; i < m; ++i) {
                size_t l = strlen(all);
                snprintf(all + l, sizeof all - l, "%s%lld", gathered + i ? "," : "", (long long)gb[i]);
            }
            gathered += m;
            accel_tensor_free(g);
        }
        accel_tensor_free(idx);
        accel_tensor_free(in);
        accel_batch_free(b);
    }
    DIST_EXPECT(batches == length, "the pass yielded %lld batches, get_length said %lld", (long long)batches,
                (long long)length);
    if (rank == 0 && gather) {
        printf("case %d gathered %lld\n", case_no, (long long)gathered);
        printf("case %d gathered_indices [%s]\n", case_no, all);
    }
    accel_dataloader_free(dl);
    accel_tensor_free(features);
    accel_accelerator_free(acc);
    free(x);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dist_sharding N,BATCH,DROP_LAST,SPLIT,EVEN[,DISPATCH]...\n");
        return 2;
    }
    for (int k = 1; k < argc; ++k) {
        int n = 0, batch = 0, drop = 0, split = 0, even = 0, dispatch = 0;
        int got = sscanf(argv[k], "%d,%d,%d,%d,%d,%d", &n, &batch, &drop, &split, &even, &dispatch);
        if (got != 5 && got != 6) {
            fprintf(stderr, "dist_sharding: bad case \"%s\"\n", argv[k]);
            return 2;
        }
        run_case(k - 1, n, batch, drop, split, even, dispatch);
    }
    return 0;
}
