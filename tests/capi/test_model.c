/* accel/model.h: models from JSON specs and TorchScript, forward, modes, parameters, state dicts, bad specs. */
#include "capi_helpers.h"

static accel_model_t *make_model(const char *json)
{
    accel_model_t *m = NULL;
    CHECK_OK(accel_model_create_from_json(json, &m));
    CHECK(m != NULL);
    return m;
}

static const char *param_name(const accel_model_t *m, size_t i)
{
    const char *name = NULL;
    CHECK_OK(accel_model_get_parameter_name(m, i, &name));
    return name != NULL ? name : "(null)";
}

static const char *state_key(const accel_model_t *m, size_t i)
{
    const char *name = NULL;
    CHECK_OK(accel_model_get_state_dict_key(m, i, &name));
    return name != NULL ? name : "(null)";
}

static void test_mlp(void)
{
    accel_model_t *m = make_model("{\"type\": \"mlp\", \"widths\": [4, 8, 3]}");
    size_t n = 0;
    int64_t numel = 0;
    const char *name = (const char *)1;
    float x[2 * 4] = {1, 2, 3, 4, -1, -2, -3, -4};
    accel_tensor_t *in = matrix_f32(x, 2, 4), *out = NULL;
    bool training = false;

    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 4);
    CHECK(strcmp(param_name(m, 0), "0.weight") == 0);
    CHECK(strcmp(param_name(m, 1), "0.bias") == 0);
    CHECK(strcmp(param_name(m, 2), "2.weight") == 0);
    CHECK(strcmp(param_name(m, 3), "2.bias") == 0);
    CHECK_FAILS(accel_model_get_parameter_name(m, 4, &name), ACCEL_ERR_OUT_OF_RANGE, "index");
    CHECK(name == NULL);
    CHECK_OK(accel_model_get_parameter_numel(m, &numel));
    CHECK(numel == 8 * 4 + 8 + 3 * 8 + 3);
    CHECK_OK(accel_model_get_state_dict_size(m, &n));
    CHECK(n == 4); /* no buffers */

    /* Forward: [2, 4] -> [2, 3]; a batch of one row too. */
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK(shape2_is(out, 2, 3));
    accel_tensor_free(out);
    out = NULL;
    {
        float one[4] = {0.5f, 0.5f, 0.5f, 0.5f};
        accel_tensor_t *in1 = matrix_f32(one, 1, 4);
        CHECK_OK(accel_model_forward(m, in1, &out));
        CHECK(shape2_is(out, 1, 3));
        accel_tensor_free(out);
        accel_tensor_free(in1);
        out = NULL;
    }

    /* Modes. */
    CHECK_OK(accel_model_is_training(m, &training));
    CHECK(training);
    CHECK_OK(accel_model_eval(m));
    CHECK_OK(accel_model_is_training(m, &training));
    CHECK(!training);
    CHECK_OK(accel_model_train(m));
    CHECK_OK(accel_model_is_training(m, &training));
    CHECK(training);

    /* get_tensor: a copy of the right shape. */
    {
        accel_tensor_t *w = NULL;
        CHECK_OK(accel_model_get_tensor(m, "0.weight", &w));
        CHECK(shape2_is(w, 8, 4));
        accel_tensor_free(w);
        w = NULL;
        CHECK_OK(accel_model_get_tensor(m, "2.bias", &w));
        CHECK(numel_of(w) == 3);
        accel_tensor_free(w);
        w = (accel_tensor_t *)&w;
        CHECK_FAILS(accel_model_get_tensor(m, "1.weight", &w), ACCEL_ERR_NOT_FOUND, "1.weight");
        CHECK(w == NULL);
        CHECK_FAILS(accel_model_get_tensor(m, NULL, &w), ACCEL_ERR_INVALID_ARGUMENT, "name");
        CHECK_FAILS(accel_model_get_tensor(m, "0.weight", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_tensor(NULL, "0.weight", &w), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK(w == NULL);
    }

    /* Wrong input shapes and dtypes are argument errors, not crashes. */
    {
        float bad[2 * 5] = {0};
        int64_t ibad[2 * 4] = {0};
        int64_t shape3[3] = {2, 2, 2};
        accel_tensor_t *t5 = matrix_f32(bad, 2, 5), *ti = NULL, *t3 = tensor_f32(bad, shape3, 3);
        int64_t s24[2] = {2, 4};
        ti = tensor_i64(ibad, s24, 2);
        out = (accel_tensor_t *)&out;
        CHECK_FAILS(accel_model_forward(m, t5, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK(out == NULL);
        CHECK_FAILS(accel_model_forward(m, ti, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK_FAILS(accel_model_forward(m, t3, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK_FAILS(accel_model_forward(m, NULL, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK_FAILS(accel_model_forward(NULL, in, &out), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_forward(m, in, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        /* The model still works afterwards. */
        CHECK_OK(accel_model_forward(m, in, &out));
        CHECK(shape2_is(out, 2, 3));
        accel_tensor_free(out);
        accel_tensor_free(t5);
        accel_tensor_free(ti);
        accel_tensor_free(t3);
    }

    /* NULL handles and outs on every getter. */
    {
        bool b;
        size_t sz;
        int64_t i64;
        const char *s;
        CHECK_FAILS(accel_model_train(NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_eval(NULL), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_is_training(NULL, &b), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_is_training(m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_num_parameters(NULL, &sz), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_get_num_parameters(m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_parameter_numel(NULL, &i64), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_get_parameter_numel(m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_parameter_name(NULL, 0, &s), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_get_parameter_name(m, 0, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_state_dict_size(NULL, &sz), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_get_state_dict_size(m, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_state_dict_key(NULL, 0, &s), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_get_state_dict_key(m, 0, NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");
        CHECK_FAILS(accel_model_get_state_dict_key(m, 4, &s), ACCEL_ERR_OUT_OF_RANGE, "index");
        {
            accel_tensor_t *g = (accel_tensor_t *)&g;
            CHECK_FAILS(accel_model_get_gradient(NULL, "0.weight", &g), ACCEL_ERR_INVALID_ARGUMENT, "model");
            CHECK(g == NULL); /* a failure leaves nothing to free */
        }
    }

    accel_tensor_free(in);
    accel_model_free(m);
}

static void test_mlp_options(void)
{
    accel_model_t *m;
    size_t n = 0;

    /* gelu + dropout: linear, gelu, dropout, linear. */
    m = make_model("{\"type\": \"mlp\", \"widths\": [3, 5, 2], \"activation\": \"gelu\", \"dropout\": 0.25}");
    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 4);
    CHECK(strcmp(param_name(m, 2), "3.weight") == 0);
    accel_model_free(m);

    /* No bias: only weights. Three layers: 0, 2, 4. */
    m = make_model("{\"type\": \"mlp\", \"widths\": [3, 5, 5, 2], \"activation\": \"tanh\", \"bias\": false}");
    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 3);
    CHECK(strcmp(param_name(m, 0), "0.weight") == 0);
    CHECK(strcmp(param_name(m, 1), "2.weight") == 0);
    CHECK(strcmp(param_name(m, 2), "4.weight") == 0);
    accel_model_free(m);

    /* sigmoid, and a single linear layer (no activation after the output layer). */
    m = make_model("{\"type\": \"mlp\", \"widths\": [3, 2], \"activation\": \"sigmoid\", \"dropout\": 0.0}");
    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 2);
    accel_model_free(m);
}

/* Every layer type in one sequential, built and listed (not run: embedding and conv2d take different inputs). */
static void test_sequential_every_layer(void)
{
    accel_model_t *m = make_model(
        "{\"type\": \"sequential\", \"layers\": ["
        "{\"type\": \"linear\", \"in_features\": 4, \"out_features\": 6, \"bias\": true},"
        "{\"type\": \"conv2d\", \"in_channels\": 1, \"out_channels\": 2, \"kernel_size\": 3, \"stride\": 1,"
        " \"padding\": 1, \"bias\": false},"
        "{\"type\": \"relu\"}, {\"type\": \"gelu\"}, {\"type\": \"tanh\"}, {\"type\": \"sigmoid\"},"
        "{\"type\": \"dropout\", \"p\": 0.1},"
        "{\"type\": \"layer_norm\", \"normalized_shape\": [6], \"eps\": 1e-5, \"elementwise_affine\": true},"
        "{\"type\": \"batch_norm\", \"num_features\": 6, \"dims\": 1, \"eps\": 1e-5, \"momentum\": 0.1,"
        " \"affine\": true, \"track_running_stats\": true},"
        "{\"type\": \"embedding\", \"num_embeddings\": 10, \"embedding_dim\": 3},"
        "{\"type\": \"flatten\", \"start_dim\": 1, \"end_dim\": -1}]}");
    const char *expect_params[] = {"0.weight", "0.bias", "1.weight", "7.weight", "7.bias",
                                   "8.weight", "8.bias", "9.weight"};
    const char *expect_buffers[] = {"8.running_mean", "8.running_var", "8.num_batches_tracked"};
    size_t n = 0, i;

    CHECK_OK(accel_model_get_num_parameters(m, &n));
    CHECK(n == 8);
    for (i = 0; i < 8 && i < n; ++i) CHECK(strcmp(param_name(m, i), expect_params[i]) == 0);
    CHECK_OK(accel_model_get_state_dict_size(m, &n));
    CHECK(n == 11);
    for (i = 0; i < 8 && i < n; ++i) CHECK(strcmp(state_key(m, i), expect_params[i]) == 0);
    for (i = 0; i < 3 && 8 + i < n; ++i) CHECK(strcmp(state_key(m, 8 + i), expect_buffers[i]) == 0);
    {
        int64_t numel = 0;
        CHECK_OK(accel_model_get_parameter_numel(m, &numel));
        CHECK(numel == (4 * 6 + 6) + (2 * 1 * 3 * 3) + (6 + 6) + (6 + 6) + (10 * 3));
    }
    accel_model_free(m);
}

/* A convolutional network: conv2d, batch_norm (2d), relu, flatten, linear, dropout, sigmoid. */
static void test_conv_forward(void)
{
    accel_model_t *m = make_model(
        "{\"type\": \"sequential\", \"layers\": ["
        "{\"type\": \"conv2d\", \"in_channels\": 1, \"out_channels\": 2, \"kernel_size\": 3, \"padding\": 1},"
        "{\"type\": \"batch_norm\", \"num_features\": 2, \"dims\": 2},"
        "{\"type\": \"relu\"},"
        "{\"type\": \"flatten\"},"
        "{\"type\": \"linear\", \"in_features\": 32, \"out_features\": 3},"
        "{\"type\": \"dropout\", \"p\": 0.5},"
        "{\"type\": \"sigmoid\"}]}");
    float x[2 * 16];
    int64_t shape[4] = {2, 1, 4, 4};
    accel_tensor_t *in, *out = NULL, *tracked = NULL;
    double count = -1.0;
    size_t i, n = 0;

    for (i = 0; i < 32; ++i) x[i] = (float)i / 10.0f - 1.0f;
    in = tensor_f32(x, shape, 4);
    CHECK_OK(accel_model_get_state_dict_size(m, &n));
    CHECK(n == 9);
    CHECK(strcmp(state_key(m, 6), "1.running_mean") == 0);
    CHECK(strcmp(state_key(m, 8), "1.num_batches_tracked") == 0);

    /* Training mode: batch-norm statistics move. */
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK(shape2_is(out, 2, 3));
    accel_tensor_free(out);
    out = NULL;
    CHECK_OK(accel_model_get_tensor(m, "1.num_batches_tracked", &tracked));
    CHECK_OK(accel_tensor_get_item(tracked, &count));
    CHECK(count == 1.0);
    accel_tensor_free(tracked);
    tracked = NULL;

    /* Evaluation mode: they do not, and dropout is off so two calls agree. */
    CHECK_OK(accel_model_eval(m));
    {
        float a[6], b[6];
        CHECK_OK(accel_model_forward(m, in, &out));
        read_f32(out, a, 6);
        accel_tensor_free(out);
        out = NULL;
        CHECK_OK(accel_model_forward(m, in, &out));
        read_f32(out, b, 6);
        accel_tensor_free(out);
        out = NULL;
        CHECK(memcmp(a, b, sizeof a) == 0);
        for (i = 0; i < 6; ++i) CHECK(a[i] > 0.0f && a[i] < 1.0f); /* sigmoid */
    }
    CHECK_OK(accel_model_get_tensor(m, "1.num_batches_tracked", &tracked));
    CHECK_OK(accel_tensor_get_item(tracked, &count));
    CHECK(count == 1.0);
    accel_tensor_free(tracked);

    /* A 2-D input cannot go through conv2d. */
    {
        accel_tensor_t *flat = matrix_f32(x, 2, 16);
        out = (accel_tensor_t *)&out;
        CHECK_FAILS(accel_model_forward(m, flat, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK(out == NULL);
        accel_tensor_free(flat);
    }
    /* Three channels where one is expected. */
    {
        float x3[3 * 16] = {0};
        int64_t s3[4] = {1, 3, 4, 4};
        accel_tensor_t *t3 = tensor_f32(x3, s3, 4);
        CHECK_FAILS(accel_model_forward(m, t3, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        accel_tensor_free(t3);
    }
    accel_tensor_free(in);
    accel_model_free(m);
}

/* An embedding network: embedding, layer_norm, flatten, linear, batch_norm (1d), gelu, tanh. */
static void test_embedding_forward(void)
{
    accel_model_t *m = make_model(
        "{\"type\": \"sequential\", \"layers\": ["
        "{\"type\": \"embedding\", \"num_embeddings\": 10, \"embedding_dim\": 4},"
        "{\"type\": \"layer_norm\", \"normalized_shape\": [4]},"
        "{\"type\": \"flatten\"},"
        "{\"type\": \"linear\", \"in_features\": 12, \"out_features\": 5},"
        "{\"type\": \"batch_norm\", \"num_features\": 5},"
        "{\"type\": \"gelu\"},"
        "{\"type\": \"tanh\"}]}");
    int64_t ids[2 * 3] = {0, 1, 2, 9, 8, 7};
    int64_t shape[2] = {2, 3};
    accel_tensor_t *in = tensor_i64(ids, shape, 2), *out = NULL;
    float y[10];
    size_t i;

    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK(shape2_is(out, 2, 5));
    if (read_f32(out, y, 10) == 0)
        for (i = 0; i < 10; ++i) CHECK(y[i] >= -1.0f && y[i] <= 1.0f); /* tanh */
    accel_tensor_free(out);
    out = NULL;

    /* An index beyond num_embeddings, and float ids: argument errors. */
    {
        int64_t bad_ids[6] = {0, 1, 2, 10, 8, 7};
        float fids[6] = {0, 1, 2, 3, 4, 5};
        accel_tensor_t *bad = tensor_i64(bad_ids, shape, 2), *fl = tensor_f32(fids, shape, 2);
        CHECK_FAILS(accel_model_forward(m, bad, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        CHECK_FAILS(accel_model_forward(m, fl, &out), ACCEL_ERR_INVALID_ARGUMENT, "input");
        accel_tensor_free(bad);
        accel_tensor_free(fl);
    }
    accel_tensor_free(in);
    accel_model_free(m);
}

static void test_gradients(void)
{
    accel_model_t *m = make_model("{\"type\": \"mlp\", \"widths\": [2, 3, 1]}");
    accel_accelerator_t *acc = NULL;
    float x[4] = {1, 2, 3, 4}, target[2] = {0.5f, -0.5f};
    accel_tensor_t *in = matrix_f32(x, 2, 2), *y = matrix_f32(target, 2, 1), *out = NULL, *loss = NULL, *g = NULL;

    /* No gradient yet: OK with NULL. */
    g = (accel_tensor_t *)&g;
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
    CHECK(g == NULL);
    CHECK_FAILS(accel_model_get_gradient(m, "nope", &g), ACCEL_ERR_NOT_FOUND, "nope");
    CHECK_FAILS(accel_model_get_gradient(m, NULL, &g), ACCEL_ERR_INVALID_ARGUMENT, "name");
    CHECK_FAILS(accel_model_get_gradient(m, "0.weight", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    CHECK_OK(accel_accelerator_create(NULL, &acc));
    CHECK_OK(accel_accelerator_prepare_model(acc, m));
    CHECK_OK(accel_model_forward(m, in, &out));
    CHECK_OK(accel_loss_compute("mse", out, y, &loss));
    CHECK_OK(accel_accelerator_backward(acc, loss));
    CHECK_OK(accel_model_get_gradient(m, "0.weight", &g));
    CHECK(g != NULL && shape2_is(g, 3, 2));
    accel_tensor_free(g);
    g = NULL;
    CHECK_OK(accel_model_get_gradient(m, "2.bias", &g));
    CHECK(g != NULL && numel_of(g) == 1);
    accel_tensor_free(g);

    /* Without the graph (issue 43.7): the same values, and no backward through them, in eval mode or not (eval
       mode alone keeps the graph, as in PyTorch). */
    {
        accel_tensor_t *out2 = NULL, *loss2 = NULL;
        float a[2], b[2];
        CHECK_OK(accel_model_eval(m));
        accel_tensor_free(loss);
        loss = NULL;
        accel_tensor_free(out);
        CHECK_OK(accel_model_forward(m, in, &out));
        CHECK_OK(accel_loss_compute("mse", out, y, &loss));
        CHECK_OK(accel_accelerator_backward(acc, loss)); /* eval mode: still a graph */
        CHECK_OK(accel_model_forward_no_grad(m, in, &out2));
        read_f32(out, a, 2);
        read_f32(out2, b, 2);
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK_OK(accel_loss_compute("mse", out2, y, &loss2));
        CHECK(accel_accelerator_backward(acc, loss2) != ACCEL_OK);
        accel_tensor_free(loss2);
        accel_tensor_free(out2);
        CHECK_FAILS(accel_model_forward_no_grad(NULL, in, &out2), ACCEL_ERR_INVALID_ARGUMENT, "model");
        CHECK_FAILS(accel_model_forward_no_grad(m, NULL, &out2), ACCEL_ERR_INVALID_ARGUMENT, "input");
    }

    accel_tensor_free(loss);
    accel_tensor_free(out);
    accel_tensor_free(in);
    accel_tensor_free(y);
    accel_accelerator_free(acc);
    accel_model_free(m);
}

static void test_state_dict(void)
{
    const char *spec = "{\"type\": \"sequential\", \"layers\": ["
                       "{\"type\": \"linear\", \"in_features\": 3, \"out_features\": 2},"
                       "{\"type\": \"batch_norm\", \"num_features\": 2}]}";
    accel_model_t *a, *b;
    const char *keys[8];
    accel_tensor_t *tensors[8];
    size_t n = 0, i;
    float before[6];
    size_t nw = 0;
    float *w;

    CHECK_OK(accel_random_set_seed(1, false, false));
    a = make_model(spec);
    CHECK_OK(accel_random_set_seed(2, false, false));
    b = make_model(spec);
    CHECK(max_param_diff(a, b) > 0.0);

    CHECK_OK(accel_model_get_state_dict_size(a, &n));
    CHECK(n == 7); /* 0.weight 0.bias 1.weight 1.bias + running_mean running_var num_batches_tracked */
    CHECK(strcmp(state_key(a, 0), "0.weight") == 0);
    CHECK(strcmp(state_key(a, 3), "1.bias") == 0);
    CHECK(strcmp(state_key(a, 4), "1.running_mean") == 0);
    CHECK(strcmp(state_key(a, 5), "1.running_var") == 0);
    CHECK(strcmp(state_key(a, 6), "1.num_batches_tracked") == 0);
    for (i = 0; i < n && i < 8; ++i) {
        keys[i] = state_key(a, i);
        tensors[i] = NULL;
        CHECK_OK(accel_model_get_tensor(a, keys[i], &tensors[i]));
    }

    /* b's 0.weight before any load. */
    w = model_tensor_f32(b, "0.weight", &nw);
    CHECK(nw == 6);
    if (w) memcpy(before, w, sizeof before);
    free(w);

    /* Strict, missing a key: rejected, naming it; nothing changed. */
    CHECK_FAILS(accel_model_load_state_dict(b, keys, (const accel_tensor_t *const *)tensors, n - 1, true),
                ACCEL_ERR_INVALID_ARGUMENT, "1.num_batches_tracked");
    CHECK_FAILS(accel_model_load_state_dict(b, keys, (const accel_tensor_t *const *)tensors, n - 1, true),
                ACCEL_ERR_INVALID_ARGUMENT, "missing");
    w = model_tensor_f32(b, "0.weight", &nw);
    CHECK(w != NULL && memcmp(w, before, sizeof before) == 0);
    free(w);

    /* Strict, with an unknown key: rejected, naming it. */
    {
        const char *k2[8];
        for (i = 0; i < n; ++i) k2[i] = keys[i];
        k2[n] = "2.weight";
        tensors[n] = tensors[0];
        CHECK_FAILS(accel_model_load_state_dict(b, k2, (const accel_tensor_t *const *)tensors, n + 1, true),
                    ACCEL_ERR_INVALID_ARGUMENT, "2.weight");
        CHECK_FAILS(accel_model_load_state_dict(b, k2, (const accel_tensor_t *const *)tensors, n + 1, true),
                    ACCEL_ERR_INVALID_ARGUMENT, "unexpected");
        /* Non-strict: the unknown key is skipped and the rest loads. */
        CHECK_OK(accel_model_load_state_dict(b, k2, (const accel_tensor_t *const *)tensors, n + 1, false));
        CHECK(max_param_diff(a, b) == 0.0);
    }

    /* Reset b, then strict with everything: equal to a. */
    accel_model_free(b);
    CHECK_OK(accel_random_set_seed(2, false, false));
    b = make_model(spec);
    CHECK(max_param_diff(a, b) > 0.0);
    CHECK_OK(accel_model_load_state_dict(b, keys, (const accel_tensor_t *const *)tensors, n, true));
    CHECK(max_param_diff(a, b) == 0.0);

    /* Non-strict subset: only 0.bias is replaced. */
    accel_model_free(b);
    CHECK_OK(accel_random_set_seed(2, false, false));
    b = make_model(spec);
    w = model_tensor_f32(b, "0.weight", &nw);
    if (w) memcpy(before, w, sizeof before);
    free(w);
    CHECK_OK(accel_model_load_state_dict(b, &keys[1], (const accel_tensor_t *const *)&tensors[1], 1, false));
    {
        size_t na = 0, nb = 0;
        float *ba = model_tensor_f32(a, "0.bias", &na), *bb = model_tensor_f32(b, "0.bias", &nb);
        CHECK(na == 2 && nb == 2 && ba && bb && memcmp(ba, bb, 2 * sizeof(float)) == 0);
        free(ba);
        free(bb);
    }
    w = model_tensor_f32(b, "0.weight", &nw);
    CHECK(w != NULL && memcmp(w, before, sizeof before) == 0);
    free(w);
    CHECK_OK(accel_model_load_state_dict(b, NULL, NULL, 0, false)); /* nothing to do */

    /* Shape mismatch: rejected, naming the key, and nothing changed (not even earlier valid entries). */
    {
        float wrong[4] = {9, 9, 9, 9};
        float newbias[2] = {42.0f, 43.0f};
        int64_t s22[2] = {2, 2}, s2[1] = {2};
        accel_tensor_t *tw = tensor_f32(wrong, s22, 2), *tb = tensor_f32(newbias, s2, 1);
        const char *k[2] = {"0.bias", "0.weight"};
        const accel_tensor_t *t[2];
        size_t nbias = 0;
        float *bias_before = model_tensor_f32(b, "0.bias", &nbias), *bias_after;
        t[0] = tb;
        t[1] = tw;
        CHECK_FAILS(accel_model_load_state_dict(b, k, t, 2, false), ACCEL_ERR_INVALID_ARGUMENT, "0.weight");
        CHECK_FAILS(accel_model_load_state_dict(b, k, t, 2, false), ACCEL_ERR_INVALID_ARGUMENT, "shape");
        bias_after = model_tensor_f32(b, "0.bias", &nbias);
        CHECK(bias_before && bias_after && memcmp(bias_before, bias_after, 2 * sizeof(float)) == 0);
        w = model_tensor_f32(b, "0.weight", &nw);
        CHECK(w != NULL && memcmp(w, before, sizeof before) == 0);
        free(w);
        free(bias_before);
        free(bias_after);

        /* dtype conversion: a float64 tensor loads into a float32 parameter. */
        {
            double d[2] = {0.25, -0.75};
            accel_tensor_t *td = NULL;
            float got[2];
            CHECK_OK(accel_tensor_create(d, sizeof d, ACCEL_DTYPE_FLOAT64, s2, 1, &td));
            CHECK_OK(accel_model_load_state_dict(b, k, (const accel_tensor_t *const *)&td, 1, false));
            bias_after = model_tensor_f32(b, "0.bias", &nbias);
            if (bias_after) memcpy(got, bias_after, sizeof got);
            free(bias_after);
            CHECK(got[0] == 0.25f && got[1] == -0.75f);
            accel_tensor_free(td);
        }
        /* A bool tensor cannot be converted. */
        {
            uint8_t flags[2] = {1, 0};
            accel_tensor_t *tbool = NULL;
            CHECK_OK(accel_tensor_create(flags, 2, ACCEL_DTYPE_BOOL, s2, 1, &tbool));
            CHECK_FAILS(accel_model_load_state_dict(b, k, (const accel_tensor_t *const *)&tbool, 1, false),
                        ACCEL_ERR_INVALID_ARGUMENT, "0.bias");
            accel_tensor_free(tbool);
        }
        /* The same key twice. */
        {
            const char *dup[2] = {"0.bias", "0.bias"};
            const accel_tensor_t *tt[2];
            tt[0] = tb;
            tt[1] = tb;
            CHECK_FAILS(accel_model_load_state_dict(b, dup, tt, 2, false), ACCEL_ERR_INVALID_ARGUMENT, "0.bias");
        }
        /* NULL arrays and entries. */
        CHECK_FAILS(accel_model_load_state_dict(b, NULL, t, 1, false), ACCEL_ERR_INVALID_ARGUMENT, "keys");
        CHECK_FAILS(accel_model_load_state_dict(b, k, NULL, 1, false), ACCEL_ERR_INVALID_ARGUMENT, "tensors");
        {
            const char *knull[1] = {NULL};
            const accel_tensor_t *tnull[1] = {NULL};
            CHECK_FAILS(accel_model_load_state_dict(b, knull, t, 1, false), ACCEL_ERR_INVALID_ARGUMENT, "keys[0]");
            CHECK_FAILS(accel_model_load_state_dict(b, k, tnull, 1, false), ACCEL_ERR_INVALID_ARGUMENT,
                        "tensors[0]");
        }
        CHECK_FAILS(accel_model_load_state_dict(NULL, k, t, 1, false), ACCEL_ERR_INVALID_ARGUMENT, "model");
        /* Strict with nothing given: everything is missing. */
        CHECK_FAILS(accel_model_load_state_dict(b, NULL, NULL, 0, true), ACCEL_ERR_INVALID_ARGUMENT, "0.weight");
        accel_tensor_free(tw);
        accel_tensor_free(tb);
    }

    for (i = 0; i < n; ++i) accel_tensor_free(tensors[i]);
    accel_model_free(a);
    accel_model_free(b);
}

static void test_torchscript(void)
{
    accel_model_t *m = (accel_model_t *)&m;
    const char *garbage_path = "capi_test_model_garbage.pt";
    const char *empty_path = "capi_test_model_empty.pt";
    FILE *f;
    int i;

    CHECK_FAILS(accel_model_create_from_torchscript("/nonexistent/dir/model.pt", &m), ACCEL_ERR_NOT_FOUND,
                "/nonexistent/dir/model.pt");
    CHECK(m == NULL);
    CHECK_FAILS(accel_model_create_from_torchscript(NULL, &m), ACCEL_ERR_INVALID_ARGUMENT, "path");
    CHECK_FAILS(accel_model_create_from_torchscript("x.pt", NULL), ACCEL_ERR_INVALID_ARGUMENT, "out");

    f = fopen(garbage_path, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
        for (i = 0; i < 4096; ++i) fputc((i * 7919 + 13) & 0xff, f);
        fclose(f);
        m = (accel_model_t *)&m;
        CHECK_FAILS(accel_model_create_from_torchscript(garbage_path, &m), ACCEL_ERR_DATA_LOSS, garbage_path);
        CHECK(m == NULL);
        remove(garbage_path);
    }
    f = fopen(empty_path, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
        CHECK_FAILS(accel_model_create_from_torchscript(empty_path, &m), ACCEL_ERR_DATA_LOSS, empty_path);
        remove(empty_path);
    }
    /* A zip archive that is not a TorchScript module (an empty zip: just the end-of-central-directory record). */
    f = fopen(empty_path, "wb");
    if (f != NULL) {
        static const unsigned char eocd[22] = {0x50, 0x4b, 0x05, 0x06};
        fwrite(eocd, 1, sizeof eocd, f);
        fclose(f);
        CHECK_FAILS(accel_model_create_from_torchscript(empty_path, &m), ACCEL_ERR_DATA_LOSS, empty_path);
        remove(empty_path);
    }
}

/* Each bad spec: the status, and a fragment that names the JSON path (and often the problem). */
static void bad_spec(const char *json, accel_status_t status, const char *fragment, int line)
{
    accel_model_t *m = (accel_model_t *)&m;
    accel_status_t st = accel_model_create_from_json(json, &m);
    const char *msg = accel_last_error_message();
    ++capi_checks;
    if (st != status || strstr(msg, fragment) == NULL || m != NULL) {
        ++capi_failures;
        fprintf(stderr, "%s:%d: spec %s: expected %s with \"%s\", got %s: \"%s\"%s\n", __FILE__, line, json,
                accel_status_name(status), fragment, accel_status_name(st), msg, m != NULL ? " (out not NULL)" : "");
    }
    if (st == ACCEL_OK) accel_model_free(m);
}
#define BAD_SPEC(json, fragment) bad_spec(json, ACCEL_ERR_INVALID_ARGUMENT, fragment, __LINE__)

static void test_bad_specs(void)
{
    accel_model_t *m = NULL;
    CHECK_FAILS(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", NULL),
                ACCEL_ERR_INVALID_ARGUMENT, "out");
    CHECK_FAILS(accel_model_create_from_json(NULL, &m), ACCEL_ERR_INVALID_ARGUMENT, "spec_json");

    /* Malformed JSON. */
    BAD_SPEC("{\"type\": \"mlp\", ", "malformed JSON");
    BAD_SPEC("{\"type\": \"mlp\", ", "spec_json");
    BAD_SPEC("", "spec_json");
    BAD_SPEC("{\"type\": mlp}", "malformed JSON");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2]} trailing", "malformed JSON");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2],}", "malformed JSON");

    /* Not an object. */
    BAD_SPEC("[1, 2]", "JSON object");
    BAD_SPEC("\"mlp\"", "JSON object");
    BAD_SPEC("null", "JSON object");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [1]}", "layers[0]");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": {\"type\": \"relu\"}}", "layers");

    /* Unknown keys, at the root and inside a layer. */
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"widht\": 3}", "widht: unknown key");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, "
             "{\"type\": \"linear\", \"in_features\": 2, \"out_features\": 2, \"bais\": true}]}",
             "layers[1].bais: unknown key");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\", \"p\": 0.5}]}", "layers[0].p");
    /* "layers" belongs to sequential only. */
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"layers\": []}", "layers: unknown key");
    BAD_SPEC("{\"type\": \"mlp\", \"type\": \"mlp\", \"widths\": [2, 2]}", "type");

    /* Wrong types. */
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": \"abc\"}", "widths");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": \"abc\"}", "\"abc\"");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [4, \"8\", 2]}", "widths[1]");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [4, 2.5]}", "widths[1]");
    BAD_SPEC("{\"type\": 3, \"widths\": [2, 2]}", "type");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"bias\": \"yes\"}", "bias");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"dropout\": \"0.1\"}", "dropout");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"activation\": 1}", "activation");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"in_features\": \"2\", "
             "\"out_features\": 2}]}",
             "layers[0].in_features");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\", \"normalized_shape\": 4}]}",
             "layers[0].normalized_shape");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"batch_norm\", \"num_features\": 4, "
             "\"affine\": 1}]}",
             "layers[0].affine");

    /* Out of range. */
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, "
             "{\"type\": \"linear\", \"in_features\": 4, \"out_features\": -3}]}",
             "layers[1].out_features");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, "
             "{\"type\": \"linear\", \"in_features\": 4, \"out_features\": -3}]}",
             "-3");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [4, 0, 2]}", "widths[1]");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [4, 2], \"dropout\": 1.5}", "dropout");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [4, 2], \"dropout\": -0.1}", "dropout");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"dropout\", \"p\": 2}]}", "layers[0].p");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"in_channels\": 1, "
             "\"out_channels\": 1, \"kernel_size\": 0}]}",
             "layers[0].kernel_size");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"in_channels\": 1, "
             "\"out_channels\": 1, \"kernel_size\": 3, \"padding\": -1}]}",
             "layers[0].padding");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"batch_norm\", \"num_features\": 4, "
             "\"dims\": 3}]}",
             "layers[0].dims");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\", \"normalized_shape\": [4], "
             "\"eps\": 0}]}",
             "layers[0].eps");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\", \"normalized_shape\": [0]}]}",
             "layers[0].normalized_shape[0]");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"embedding\", \"num_embeddings\": 0, "
             "\"embedding_dim\": 2}]}",
             "layers[0].num_embeddings");

    /* Missing required keys. */
    BAD_SPEC("{}", "type");
    BAD_SPEC("{\"widths\": [2, 2]}", "type: required");
    BAD_SPEC("{\"type\": \"mlp\"}", "widths: required");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2]}", "widths");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": []}", "widths");
    BAD_SPEC("{\"type\": \"sequential\"}", "layers: required");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": []}", "layers");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"in_features\": 2}]}", "layers[0].type");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, "
             "{\"type\": \"linear\", \"in_features\": 4}]}",
             "layers[1].out_features: required");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"in_channels\": 1, "
             "\"out_channels\": 1}]}",
             "layers[0].kernel_size");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\"}]}", "layers[0].normalized_shape");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"layer_norm\", \"normalized_shape\": []}]}",
             "layers[0].normalized_shape");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"batch_norm\"}]}", "layers[0].num_features");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"embedding\", \"num_embeddings\": 5}]}",
             "layers[0].embedding_dim");

    /* Unknown model and layer types, and activations. */
    BAD_SPEC("{\"type\": \"resnet\"}", "type");
    BAD_SPEC("{\"type\": \"resnet\"}", "resnet");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, {\"type\": \"lstm\"}]}",
             "layers[1].type");
    BAD_SPEC("{\"type\": \"sequential\", \"layers\": [{\"type\": \"relu\"}, {\"type\": \"lstm\"}]}", "lstm");
    BAD_SPEC("{\"type\": \"mlp\", \"widths\": [2, 2], \"activation\": \"swish\"}", "activation");
}

/* Sizes whose byte count overflows are argument errors naming the keys; sizes larger than the machine's memory
 * and swap are RESOURCE_EXHAUSTED naming them; both before LibTorch is asked, and no backtrace in the message. */
static void test_impossible_sizes(void)
{
    static const struct {
        const char *json;
        accel_status_t status;
        const char *fragment;
    } cases[] = {
        {"{\"type\":\"mlp\",\"widths\":[2147483648,2147483648]}", ACCEL_ERR_INVALID_ARGUMENT, "widths[0], widths[1]"},
        {"{\"type\":\"mlp\",\"widths\":[4,8,2147483648,2147483648]}", ACCEL_ERR_INVALID_ARGUMENT, "widths[2], widths[3]"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"embedding\",\"num_embeddings\":2147483648,"
         "\"embedding_dim\":2147483648}]}",
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].num_embeddings, layers[0].embedding_dim"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"conv2d\",\"in_channels\":65536,\"out_channels\":65536,"
         "\"kernel_size\":65536}]}",
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].in_channels, layers[0].out_channels, layers[0].kernel_size"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"relu\"},{\"type\":\"layer_norm\","
         "\"normalized_shape\":[2147483648,2147483648,4]}]}",
         ACCEL_ERR_INVALID_ARGUMENT, "layers[1].normalized_shape"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"transformer_encoder_layer\",\"d_model\":2147483648,"
         "\"nhead\":1}]}",
         ACCEL_ERR_INVALID_ARGUMENT, "layers[0].d_model"},
        /* 2^31 x 2^20 fp32 weights: 8 PiB, no overflow, more than any machine's memory. */
        {"{\"type\":\"mlp\",\"widths\":[2147483648,1048576]}", ACCEL_ERR_RESOURCE_EXHAUSTED, "widths[0], widths[1]"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"embedding\",\"num_embeddings\":2147483648,"
         "\"embedding_dim\":1048576}]}",
         ACCEL_ERR_RESOURCE_EXHAUSTED, "layers[0].num_embeddings"},
        {"{\"type\":\"sequential\",\"layers\":[{\"type\":\"layer_norm\",\"normalized_shape\":[1048576,1048576,1024]}]}",
         ACCEL_ERR_RESOURCE_EXHAUSTED, "layers[0].normalized_shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        accel_model_t *m = NULL;
        CHECK_FAILS(accel_model_create_from_json(cases[i].json, &m), cases[i].status, cases[i].fragment);
        CHECK(m == NULL);
        CHECK(strstr(accel_last_error_message(), "frame #") == NULL);
        CHECK(strstr(accel_last_error_message(), "Exception raised from") == NULL);
    }
}

int main(void)
{
    test_mlp();
    test_mlp_options();
    test_sequential_every_layer();
    test_conv_forward();
    test_embedding_forward();
    test_gradients();
    test_state_dict();
    test_torchscript();
    test_bad_specs();
    test_impossible_sizes();
    return capi_report("test_model");
}
