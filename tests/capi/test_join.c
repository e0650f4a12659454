/* join_uneven_inputs in one process: a scope with no effect on training (Accelerate's null context), the
 * refused calls named, and the refusal under a sharding engine. Several processes: tests/distributed/dist_join.c. */
#include "capi_test.h"

#include <accel/accel.h>

#include <string.h>

static void prepared(const char *config, accel_accelerator_t **acc, accel_model_t **model, accel_optimizer_t **opt)
{
    CHECK_OK(accel_accelerator_create(config, acc));
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 1]}", model));
    CHECK_OK(accel_optimizer_create(*model, "{\"type\": \"sgd\", \"lr\": 0.1}", opt));
    CHECK_OK(accel_accelerator_prepare(*acc, *model, *opt, NULL, NULL));
}

static void check_one_process(void)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL, *other = NULL;
    accel_optimizer_t *opt = NULL;
    prepared("{\"dataloader_config\": {\"even_batches\": false}}", &acc, &model, &opt);
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_end(acc), ACCEL_ERR_FAILED_PRECONDITION,
                "no matching accel_accelerator_join_uneven_inputs_begin");
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(NULL, NULL, 0, -1), ACCEL_ERR_INVALID_ARGUMENT, "accelerator");
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(acc, NULL, 2, -1), ACCEL_ERR_INVALID_ARGUMENT, "joinables");
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, 3), ACCEL_ERR_INVALID_ARGUMENT,
                "even_batches");
    CHECK_OK(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4, 1]}", &other));
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(acc, &other, 1, -1), ACCEL_ERR_FAILED_PRECONDITION,
                "joinables[0]: not prepared by this accelerator");
    /* A failed begin opened no scope. */
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "no matching");

    /* One process: the scope has nothing to shadow; training inside it works as outside. */
    CHECK_OK(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, -1));
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(acc, NULL, 0, 0), ACCEL_ERR_FAILED_PRECONDITION,
                "does not nest");
    CHECK_FAILS(accel_accelerator_free_memory(acc), ACCEL_ERR_FAILED_PRECONDITION, "join_uneven_inputs");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[2] = {1, 0};
    const int64_t xs[2] = {2, 4}, ys[2] = {2, 1};
    accel_tensor_t *in = NULL, *lab = NULL, *out = NULL, *loss = NULL;
    CHECK_OK(accel_tensor_create(x, sizeof x, ACCEL_DTYPE_FLOAT32, xs, 2, &in));
    CHECK_OK(accel_tensor_create(y, sizeof y, ACCEL_DTYPE_FLOAT32, ys, 2, &lab));
    CHECK_OK(accel_model_forward(model, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, lab, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_optimizer_step(opt));
    CHECK_OK(accel_accelerator_join_uneven_inputs_end(acc));
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "no matching");
    /* Every model at once (NULL, 0), with an override. */
    CHECK_OK(accel_accelerator_join_uneven_inputs_begin(acc, NULL, 0, 1));
    CHECK_OK(accel_accelerator_join_uneven_inputs_end(acc));
    accel_tensor_free(in);
    accel_tensor_free(lab);
    accel_tensor_free(out);
    accel_tensor_free(loss);
    accel_model_free(other);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
}

static void check_sharded(const char *config, const char *plugin)
{
    accel_accelerator_t *acc = NULL;
    accel_model_t *model = NULL;
    accel_optimizer_t *opt = NULL;
    prepared(config, &acc, &model, &opt);
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_begin(acc, &model, 1, 0), ACCEL_ERR_UNIMPLEMENTED, plugin);
    CHECK_FAILS(accel_accelerator_join_uneven_inputs_end(acc), ACCEL_ERR_FAILED_PRECONDITION, "no matching");
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
}

int main(void)
{
    check_one_process();
    check_sharded("{\"fsdp_plugin\": {}}", "fsdp_plugin");
    check_sharded("{\"deepspeed_plugin\": {\"zero_stage\": 3}}", "deepspeed_plugin");
    return capi_report("test_join");
}
