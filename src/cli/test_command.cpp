// `accel test [launch options]`: Accelerate's `accelerate test`. Runs a built-in end-to-end check under
// `accel launch` with the user's config file and options (this program again, as `accel test --worker
// DIR`), then the same training in one process as the reference, and says plainly whether this machine and
// config can train. The worker goes through the public C API only, as a user's program does:
//   1. the processes agree on their number and rank (gather, reduce, broadcast, a trigger);
//   2. a small model trains data-parallel for a few steps; every rank ends with the same weights;
//   3. save_state / load_state round-trip those weights through a checkpoint folder;
//   4. (outer command) the weights equal one process trained on the same global batches.
// The model and the reference follow the user's config (a Plan): an FSDP transformer wrap policy gets a model
// that has the layer types it names (a small GPT for gpt_block, ...), gradient accumulation is counted in
// micro-steps, and the reference accumulates (and, under DeepSpeed, clips) as the distributed run does.
#include "cli/commands.hpp"
#include "common/blas_kernels.hpp"
#include "common/files.hpp"
#include "common/json_reader.hpp"

#include <accel/accel.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace accel::cli {

namespace {

const char *kTestUsage =
    "usage: accel test [--config_file PATH] [other accel launch options]\n"
    "\n"
    "Checks that this machine and config can train: starts a built-in program under `accel launch` with the\n"
    "given options (the config file is found as launch finds it: --config_file, ACCELERATE_CONFIG_FILE, then\n"
    "$HF_HOME/accelerate/default_config.yaml), which runs collectives, trains a small model data-parallel\n"
    "(an MLP, or one with the layer types an FSDP wrap policy names: a GPT for gpt_block, a Llama for\n"
    "LlamaDecoderLayer, ...), checks that\n"
    "every process holds the same weights, and saves and loads a checkpoint; then trains the same model in one\n"
    "process on the same global batches, with the same accumulation and clipping, and compares the weights.\n"
    "\n"
    "Exit status: 0 when every check passed (\"Test is a success!\"), 1 when one failed (it is named), 2 when\n"
    "launch refuses the options or the config file.\n";

constexpr int kStepsPerRank = 4, kBatch = 4; // kBatch: per process and step

// The models the check can train, tried in this order: the first whose layer types include every class of
// an FSDP TRANSFORMER_BASED_WRAP policy is used. Together they hold every layer type of a JSON model spec.
// Inputs: "features" [n, 6] float, "image" [n, 1, 3, 3] float, "tokens" [n, 4] int64 ids below 16. Only
// conv2d with embedding, and gpt's blocks with any other type, are in no model (no spec chains them).
struct TestModel {
    const char *name;
    std::string spec;
    std::vector<std::string> types; // the spec's layer types (what TRANSFORMER_BASED_WRAP can name)
    const char *input;
    const char *loss;
    bool per_process_statistics; // batch_norm: each process normalizes its own batch, unlike one process
};

// The layers after a model's first ones: every activation, dropout and linear, to 3 classes from `width` inputs.
std::string spec_tail(int width, bool batch_norm)
{
    return R"({"type": "linear", "in_features": )" + std::to_string(width) + R"(, "out_features": 16},)" +
           (batch_norm ? R"({"type": "batch_norm", "num_features": 16},)" : "") +
           R"({"type": "relu"}, {"type": "linear", "in_features": 16, "out_features": 16}, {"type": "sigmoid"},
              {"type": "linear", "in_features": 16, "out_features": 16}, {"type": "tanh"},
              {"type": "linear", "in_features": 16, "out_features": 3}]})";
}

// image: conv2d [n, 4, 3, 3], a layer norm over it, then its 4 channels as a sequence of 9-wide tokens. (gelu
// comes after the encoder layer: conv2d, gelu, flatten, encoder layer once trained to NaN here, because the
// batch_first layer transposed its input and LibTorch 1.13's CPU gelu backward is wrong for a permuted gradient;
// the layer no longer transposes, and the order is kept so that the check's figures stay comparable.)
std::string image_spec(bool batch_norm)
{
    return R"({"type": "sequential", "layers": [{"type": "conv2d", "in_channels": 1, "out_channels": 4,
               "kernel_size": 3, "padding": 1},)" +
           std::string(batch_norm ? R"({"type": "batch_norm", "num_features": 4, "dims": 2},)" : "") +
           R"({"type": "layer_norm", "normalized_shape": [4, 3, 3]}, {"type": "dropout", "p": 0.0},
              {"type": "flatten", "start_dim": 2},
              {"type": "transformer_encoder_layer", "d_model": 9, "nhead": 3, "dim_feedforward": 16, "dropout": 0.0,
               "batch_first": true}, {"type": "gelu"}, {"type": "flatten"},)" + spec_tail(36, false);
}

// tokens: 4 ids below 16, embedded 8 wide.
std::string tokens_spec(bool batch_norm)
{
    return R"({"type": "sequential", "layers": [{"type": "embedding", "num_embeddings": 16, "embedding_dim": 8},
              {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0,
               "batch_first": true},
              {"type": "layer_norm", "normalized_shape": [8]}, {"type": "gelu"}, {"type": "dropout", "p": 0.0},
              {"type": "flatten"},)" + spec_tail(32, batch_norm);
}

const std::vector<TestModel> &test_models()
{
    const std::vector<std::string> rest = {"layer_norm", "gelu", "dropout", "flatten", "transformer_encoder_layer",
                                           "linear", "relu", "sigmoid", "tanh"};
    auto with = [&](std::vector<std::string> v) {
        v.insert(v.end(), rest.begin(), rest.end());
        return v;
    };
    static const std::vector<TestModel> models = {
        {"mlp", R"({"type": "mlp", "widths": [6, 16, 3], "activation": "tanh"})", {"linear", "tanh"}, "features",
         "cross_entropy", false},
        {"image", image_spec(false), with({"conv2d"}), "image", "cross_entropy", false},
        {"tokens", tokens_spec(false), with({"embedding"}), "tokens", "cross_entropy", false},
        {"gpt",
         R"({"type": "gpt", "vocab_size": 16, "n_positions": 8, "n_embd": 16, "n_layer": 2, "n_head": 2,
             "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0})",
         {"gpt_embeddings_and_head", "gpt_block"}, "tokens", "causal_lm", false},
        // The Llama family: decoder layers typed by transformers' class names, as Llama users' FSDP configs write them.
        {"llama",
         R"({"type": "llama", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": true})",
         {"llama_embeddings_and_head", "LlamaDecoderLayer"}, "tokens", "causal_lm", false},
        {"mistral",
         R"({"type": "llama", "model_type": "mistral", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 24,
             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "sliding_window": 4})",
         {"llama_embeddings_and_head", "MistralDecoderLayer"}, "tokens", "causal_lm", false},
        {"qwen2",
         R"({"type": "llama", "model_type": "qwen2", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 24,
             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": true})",
         {"llama_embeddings_and_head", "Qwen2DecoderLayer"}, "tokens", "causal_lm", false},
        {"image_bn", image_spec(true), with({"conv2d", "batch_norm"}), "image", "cross_entropy", true},
        {"tokens_bn", tokens_spec(true), with({"embedding", "batch_norm"}), "tokens", "cross_entropy", true},
    };
    return models;
}

const TestModel &test_model(const std::string &name)
{
    for (const auto &m : test_models())
        if (name == m.name) return m;
    return test_models().front();
}

// What the distributed run does, so that the one-process reference does the same (written to DIR/plan).
struct Plan {
    std::string model = "mlp";
    int64_t accumulation = 1; // gradient_accumulation_steps in force
    double clipping = 0.0;    // deepspeed_plugin.gradient_clipping: DeepSpeed clips inside its step
    std::string mixed_precision = "no";
    int32_t processes = 1;
    // A DeepSpeed config file (ACCELERATE_DEEPSPEED_CONFIG_FILE): its optimizer and scheduler blocks take the
    // place of Accelerate's DummyOptim / DummyScheduler, which a program must then pass (as this one does), and a
    // batch size it fixes is the batch per process (the one-process reference cannot have it: not compared).
    std::string ds_file;
    bool ds_optimizer = false, ds_scheduler = false;
    int batch = kBatch; // per process and micro-step
    bool compare = true;
};

struct Failure {
    std::string what;
};

void check(accel_status_t st, const char *what)
{
    if (st != ACCEL_OK)
        throw Failure{std::string(what) + ": " + accel_status_name(st) + ": " + accel_last_error_message()};
}

void expect(bool ok, const std::string &what)
{
    if (!ok) throw Failure{what};
}

// The model for a wrap policy: the first whose layer types cover the classes to wrap. None covers them when a
// class is no layer type of accel's models (a Python class name such as GPT2Block): no program can train so.
std::string model_for(const std::vector<std::string> &wrap_classes)
{
    std::set<std::string> known;
    for (const auto &m : test_models()) {
        bool all = true;
        for (const auto &c : wrap_classes)
            all = all && std::find(m.types.begin(), m.types.end(), c) != m.types.end();
        if (all) return m.name;
        known.insert(m.types.begin(), m.types.end());
    }
    std::string names, types;
    for (const auto &c : wrap_classes) names += (names.empty() ? "\"" : ", \"") + c + "\"";
    for (const auto &t : known) types += (types.empty() ? "" : ", ") + t;
    throw Failure{"fsdp_plugin.transformer_cls_names_to_wrap: accel test has no model with layers of every type in [" +
                  names + "] (accel's JSON models have the layer types " + types + "; a name unknown there is "
                  "refused by prepare in any program)"};
}

// The DeepSpeed config file the launch exported (the effective configuration does not carry its blocks): read
// as a program adapting to it would, for its optimizer and scheduler blocks and the batch sizes it fixes.
void read_ds_file(Plan &p, int32_t processes)
{
    const char *file = std::getenv("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    if (file == nullptr || *file == '\0' || std::string(file) == "none") return;
    std::ifstream in(file, std::ios::binary);
    expect(in.good(), std::string("cannot read the DeepSpeed config file ") + file);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string t = text.str();
    const JsonValue ds = parse_json(t.data(), t.size(), file);
    p.ds_file = file;
    auto object = [&](const char *key) {
        const JsonValue *v = ds.find(key);
        return v != nullptr && v->kind == JsonValue::Kind::Object;
    };
    p.ds_optimizer = object("optimizer");
    p.ds_scheduler = object("scheduler");
    auto fixed = [&](const char *key) -> int64_t { // 0 when absent or "auto"
        const JsonValue *v = ds.find(key);
        return v != nullptr && v->kind == JsonValue::Kind::Number && v->is_uint ? static_cast<int64_t>(v->uint_value) : 0;
    };
    const int64_t micro = fixed("train_micro_batch_size_per_gpu"), total = fixed("train_batch_size");
    const int64_t per_process = micro > 0 ? micro : total / std::max<int64_t>(1, p.accumulation * processes);
    if (micro > 0 || total > 0) {
        p.batch = static_cast<int>(std::max<int64_t>(1, per_process));
        p.compare = false;
    }
}

// The plan from the accelerator's effective configuration (the launch environment and config file).
Plan plan_of(accel_accelerator_t *acc, int32_t processes)
{
    Plan p;
    check(accel_accelerator_get_gradient_accumulation_steps(acc, &p.accumulation), "gradient_accumulation_steps");
    char *json = nullptr;
    check(accel_accelerator_get_config_json(acc, &json), "get_config_json");
    const std::string text = json;
    accel_string_free(json);
    const JsonValue config = parse_json(text.data(), text.size(), "the effective configuration");
    const JsonValue *fsdp = config.find("fsdp_plugin"), *ds = config.find("deepspeed_plugin");
    if (fsdp != nullptr && fsdp->kind == JsonValue::Kind::Object) {
        const JsonValue *policy = fsdp->find("auto_wrap_policy"), *classes = fsdp->find("transformer_cls_names_to_wrap");
        if (policy != nullptr && policy->text == "TRANSFORMER_BASED_WRAP" && classes != nullptr) {
            std::vector<std::string> names;
            for (const auto &c : classes->items) names.push_back(c.text);
            p.model = model_for(names);
        }
    }
    if (ds != nullptr && ds->kind == JsonValue::Kind::Object) {
        if (const JsonValue *clip = ds->find("gradient_clipping"); clip != nullptr && clip->kind == JsonValue::Kind::Number)
            p.clipping = std::strtod(clip->text.c_str(), nullptr);
        read_ds_file(p, processes);
    }
    return p;
}

// One line of words, then the DeepSpeed config file's path (which may hold spaces) on a line of its own.
void write_plan(const std::string &path, const Plan &p)
{
    std::ofstream f(path);
    f.precision(17);
    f << p.model << ' ' << p.accumulation << ' ' << p.clipping << ' ' << p.mixed_precision << ' ' << p.processes << ' '
      << p.ds_optimizer << ' ' << p.ds_scheduler << ' ' << p.batch << ' ' << p.compare << '\n' << p.ds_file << '\n';
    expect(f.good(), "cannot write " + path);
}

Plan read_plan(const std::string &path)
{
    Plan p;
    std::ifstream f(path);
    f >> p.model >> p.accumulation >> p.clipping >> p.mixed_precision >> p.processes >> p.ds_optimizer >>
        p.ds_scheduler >> p.batch >> p.compare;
    expect(!f.fail() && p.processes >= 1, "the distributed run left no plan in " + path);
    f.ignore(1);
    std::getline(f, p.ds_file);
    return p;
}

// The one-process reference's accelerator config: the distributed run's precision and accumulation, and
// DeepSpeed's clipping (a ZeRO stage 0 engine, which clips inside its step as every stage does).
std::string reference_config(const Plan &p)
{
    std::ostringstream c;
    c.precision(17);
    c << "{\"mixed_precision\": \"" << p.mixed_precision << "\", \"gradient_accumulation_steps\": " << p.accumulation;
    if (!p.ds_file.empty()) // the same DeepSpeed config: its optimizer, scheduler and clipping, on one process
        c << ", \"deepspeed_plugin\": {\"gradient_clipping\": " << p.clipping << ", \"hf_ds_config\": "
          << json_quote(p.ds_file) << "}";
    else if (p.clipping > 0.0)
        c << ", \"deepspeed_plugin\": {\"zero_stage\": 0, \"gradient_clipping\": " << p.clipping << "}";
    c << "}";
    return c.str();
}

// The data set of `n` samples for the model's input kind, as (features, labels) tensors.
void make_data(const TestModel &m, int n, accel_tensor_t **features, accel_tensor_t **labels)
{
    const std::string input = m.input;
    const bool lm = std::string(m.loss) == "causal_lm";
    std::vector<int64_t> y(static_cast<size_t>(n) * (lm ? 4 : 1));
    if (input == "tokens") { // ids in [0, 16): labels are a class of the sequence, or (causal_lm) the next ids
        auto id = [](int i, int t) { return static_cast<int64_t>((i * 3 + t * 5 + (i * t) % 7) % 16); };
        std::vector<int64_t> x(static_cast<size_t>(n) * 4);
        for (int i = 0; i < n; ++i) {
            for (int t = 0; t < 4; ++t) {
                x[static_cast<size_t>(i * 4 + t)] = id(i, t);
                if (lm) y[static_cast<size_t>(i * 4 + t)] = id(i, t + 1);
            }
            if (!lm) y[static_cast<size_t>(i)] = i % 3;
        }
        const int64_t xs[2] = {n, 4};
        check(accel_tensor_create(x.data(), x.size() * 8, ACCEL_DTYPE_INT64, xs, 2, features), "features");
    } else { // "features" [n, 6] or "image" [n, 1, 3, 3]: sin waves plus a marker of the class
        const int width = input == "image" ? 9 : 6;
        std::vector<float> x(static_cast<size_t>(n) * static_cast<size_t>(width));
        for (int i = 0; i < n; ++i) {
            y[static_cast<size_t>(i)] = i % 3;
            for (int f = 0; f < width; ++f)
                x[static_cast<size_t>(i * width + f)] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(f)) +
                                                        (f == i % 3 ? 1.0f : 0.0f);
        }
        const int64_t fs[2] = {n, 6}, is[4] = {n, 1, 3, 3};
        check(accel_tensor_create(x.data(), x.size() * 4, ACCEL_DTYPE_FLOAT32, input == "image" ? is : fs,
                                  input == "image" ? 4 : 2, features), "features");
    }
    const int64_t ys[2] = {n, 4};
    check(accel_tensor_create(y.data(), y.size() * 8, ACCEL_DTYPE_INT64, ys, lm ? 2 : 1, labels), "labels");
}

// The weights, gathered whole first when the model is sharded (fsdp_plugin / deepspeed_plugin configs).
std::vector<float> weights_of(accel_accelerator_t *acc, accel_model_t *model)
{
    const bool summoned = accel_accelerator_summon_full_params_begin(acc, model) == ACCEL_OK;
    std::vector<float> out;
    size_t count = 0;
    accel_status_t st = accel_model_get_num_parameters(model, &count);
    for (size_t i = 0; st == ACCEL_OK && i < count; ++i) {
        const char *name = nullptr;
        accel_tensor_t *t = nullptr;
        int64_t n = 0;
        st = accel_model_get_parameter_name(model, i, &name);
        if (st == ACCEL_OK) st = accel_model_get_tensor(model, name, &t);
        if (st == ACCEL_OK) st = accel_tensor_get_numel(t, &n);
        if (st == ACCEL_OK) {
            out.resize(out.size() + static_cast<size_t>(n));
            st = accel_tensor_copy_to_buffer(t, out.data() + out.size() - n, static_cast<size_t>(n) * 4);
        }
        accel_tensor_free(t);
    }
    if (summoned) check(accel_accelerator_summon_full_params_end(acc, model), "summon_full_params_end");
    check(st, "read the weights");
    return out;
}

// Trains `m` for kStepsPerRank micro-steps on plan.processes x kStepsPerRank x plan.batch samples with `batch`
// samples per process and step, and returns the weights. With a checkpoint folder it then saves the state,
// trains until the optimizer steps again (with gradient accumulation the first micro-steps only accumulate;
// the end of the epoch always steps) and loads the state back: the weights must be the saved ones again.
std::vector<float> train(accel_accelerator_t *acc, const TestModel &m, const Plan &plan, int batch,
                         const std::string &checkpoint)
{
    const int n = plan.processes * kStepsPerRank * plan.batch;
    accel_tensor_t *features = nullptr, *labels = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_scheduler_t *sched = nullptr;
    accel_dataloader_t *dl = nullptr;
    auto release = [&] {
        accel_scheduler_free(sched);
        accel_dataloader_free(dl);
        accel_optimizer_free(opt);
        accel_model_free(model);
        accel_tensor_free(features);
        accel_tensor_free(labels);
    };
    // One micro-step; *stepped: the optimizer stepped (sync_gradients), *more: the epoch had a batch left.
    auto step = [&](bool *more, bool *stepped) {
        accel_batch_t *b = nullptr;
        check(accel_dataloader_next(dl, &b), "next batch");
        *more = b != nullptr;
        if (b == nullptr) return;
        double loss = 0.0;
        accel_status_t st = accel_accelerator_train_step(acc, model, opt, sched, b, m.loss, &loss);
        accel_batch_free(b);
        check(st, "train step");
        check(accel_accelerator_get_sync_gradients(acc, stepped), "sync_gradients");
    };
    std::vector<float> w;
    try {
        check(accel_random_set_seed(1234, false, false), "set_seed");
        make_data(m, n, &features, &labels);
        check(accel_model_create_from_json(m.spec.c_str(), &model), "model");
        // A DeepSpeed config's blocks take the dummies' places (their "auto" lr is the dummy's); the schedule's
        // "auto" total counts optimizer steps of the whole run, which Accelerate divides by the processes.
        check(accel_optimizer_create(model, plan.ds_optimizer ? "{\"type\": \"dummy\", \"lr\": 0.01}"
                                                              : "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}",
                                     &opt), "optimizer");
        if (plan.ds_scheduler) {
            const std::string total = std::to_string(2 * kStepsPerRank * plan.processes);
            check(accel_scheduler_create(opt, ("{\"type\": \"dummy\", \"total_num_steps\": " + total +
                                               ", \"warmup_num_steps\": 1}").c_str(), &sched), "scheduler");
        }
        const std::string dl_config = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": false}";
        check(accel_dataloader_create_from_tensors(features, labels, dl_config.c_str(), &dl), "dataloader");
        check(accel_accelerator_prepare(acc, model, opt, dl, sched), "prepare");
        bool more = true, stepped = false;
        while (more) step(&more, &stepped);
        w = weights_of(acc, model);
        if (!checkpoint.empty()) {
            check(accel_accelerator_save_state(acc, checkpoint.c_str()), "save_state");
            int micro = 0;
            for (more = true, stepped = false; more && !stepped; ++micro) step(&more, &stepped); // a new epoch
            expect(weights_of(acc, model) != w, "checkpoint: the optimizer step after the save (micro-step " +
                                                    std::to_string(micro) + " of the next epoch) changed nothing");
            check(accel_accelerator_load_state(acc, checkpoint.c_str()), "load_state");
            expect(weights_of(acc, model) == w, "checkpoint: load_state did not restore the saved weights");
        }
    } catch (...) {
        release();
        throw;
    }
    release();
    return w;
}

void write_floats(const std::string &path, const std::vector<float> &v)
{
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    expect(f.good(), "cannot write " + path);
}

std::vector<float> read_floats(const std::string &path)
{
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    expect(f.good(), "cannot read " + path);
    std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char *>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
}

// One process of the check (under accel launch), or the one-process reference (`--reference`).
int worker(const std::string &dir, bool reference)
{
    accel_accelerator_t *acc = nullptr;
    bool main = true;
    try {
        if (reference) { // the distributed run's global batches, model and training settings in one process
            const Plan plan = read_plan(dir + "/plan");
            check(accel_accelerator_create(reference_config(plan).c_str(), &acc), "accelerator (the reference)");
            write_floats(dir + "/reference.bin", train(acc, test_model(plan.model), plan, plan.batch * plan.processes, ""));
            accel_accelerator_free(acc);
            return 0;
        }
        check(accel_accelerator_create(nullptr, &acc), "accelerator (the launch environment and config)");
        int32_t rank = 0, processes = 1;
        check(accel_accelerator_get_process_index(acc, &rank), "process index");
        check(accel_accelerator_get_num_processes(acc, &processes), "process count");
        check(accel_accelerator_is_main_process(acc, &main), "is_main_process");
        const char *backend = "none";
        accel_mixed_precision_t mp = ACCEL_MIXED_PRECISION_NO;
        check(accel_accelerator_get_distributed_backend(acc, &backend), "backend");
        check(accel_accelerator_get_mixed_precision(acc, &mp), "mixed precision");
        const char *mp_names[] = {"no", "fp16", "bf16", "fp8"};
        if (main)
            std::printf("accel test: %d process(es), backend %s, mixed precision %s\n", processes, backend,
                        mp_names[mp]);

        // 1. Collectives.
        {
            float mine = static_cast<float>(rank), got[1024] = {0};
            accel_tensor_t *t = nullptr, *g = nullptr;
            check(accel_tensor_create(&mine, 4, ACCEL_DTYPE_FLOAT32, nullptr, 0, &t), "tensor");
            accel_status_t st = accel_accelerator_gather(acc, t, &g);
            if (st == ACCEL_OK) st = accel_tensor_copy_to_buffer(g, got, static_cast<size_t>(processes) * 4);
            accel_tensor_free(g);
            g = nullptr;
            check(st, "gather");
            for (int r = 0; r < processes; ++r)
                expect(got[r] == static_cast<float>(r), "gather: process " + std::to_string(r) + " sent " +
                                                            std::to_string(got[r]));
            check(accel_accelerator_reduce(acc, t, "sum", &g), "reduce");
            st = accel_tensor_copy_to_buffer(g, got, 4);
            accel_tensor_free(g);
            check(st, "reduce");
            expect(got[0] == static_cast<float>(processes * (processes - 1) / 2), "reduce: wrong sum");
            accel_tensor_free(t);
            if (rank == processes - 1) check(accel_accelerator_set_trigger(acc), "set_trigger");
            bool fired = false;
            check(accel_accelerator_check_trigger(acc, &fired), "check_trigger");
            expect(fired, "check_trigger: the last process's trigger was not seen");
            if (main) std::printf("accel test: collectives ok (gather, reduce, trigger)\n");
        }
        // 2. Data-parallel training; every process holds the same weights. 3. A checkpoint round trip.
        Plan plan = plan_of(acc, processes);
        plan.mixed_precision = mp_names[mp];
        plan.processes = processes;
        const TestModel &model = test_model(plan.model);
        std::vector<float> w = train(acc, model, plan, plan.batch, dir + "/checkpoint");
        std::string strategy = "?";
        {
            char *stats = nullptr;
            check(accel_accelerator_get_memory_stats_json(acc, &stats), "memory stats");
            const std::string text = stats;
            accel_string_free(stats);
            const size_t at = text.find("\"strategy\": \"");
            if (at != std::string::npos) strategy = text.substr(at + 13, text.find('"', at + 13) - at - 13);
        }
        {
            accel_tensor_t *t = nullptr, *g = nullptr;
            const int64_t n = static_cast<int64_t>(w.size());
            check(accel_tensor_create(w.data(), w.size() * 4, ACCEL_DTYPE_FLOAT32, &n, 1, &t), "tensor");
            std::vector<float> all(w.size() * static_cast<size_t>(processes));
            accel_status_t st = accel_accelerator_gather(acc, t, &g);
            if (st == ACCEL_OK) st = accel_tensor_copy_to_buffer(g, all.data(), all.size() * 4);
            accel_tensor_free(g);
            accel_tensor_free(t);
            check(st, "gather the weights");
            for (int r = 1; r < processes; ++r)
                expect(std::memcmp(all.data(), all.data() + static_cast<size_t>(r) * w.size(), w.size() * 4) == 0,
                       "process " + std::to_string(r) + " ended with other weights than process 0");
            const std::string accumulating =
                plan.accumulation > 1 ? ", accumulating " + std::to_string(plan.accumulation) + " micro-steps" : "";
            if (main)
                std::printf("accel test: training ok (%s, model %s, %d steps%s, the same weights on every process; "
                            "save_state / load_state restore them)\n", strategy.c_str(), model.name, kStepsPerRank,
                            accumulating.c_str());
        }
        if (main) {
            write_floats(dir + "/distributed.bin", w);
            write_plan(dir + "/plan", plan);
        }
        check(accel_accelerator_wait_for_everyone(acc), "wait_for_everyone");
    } catch (const Failure &f) {
        std::fprintf(stderr, "accel test: FAILED: %s\n", f.what.c_str());
        accel_accelerator_free(acc);
        return 1;
    } catch (const std::exception &e) { // accel::Error from reading the effective configuration
        std::fprintf(stderr, "accel test: FAILED: %s\n", e.what());
        accel_accelerator_free(acc);
        return 1;
    }
    accel_accelerator_free(acc);
    return 0;
}

void remove_test_dir(const std::string &dir)
{
    try {
        accel::remove_all(dir);
    } catch (...) { // a temporary folder left behind is not worth failing the check
    }
}

std::string self_path()
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "accel";
    buf[n] = '\0';
    return buf;
}

// Runs the one-process reference (this program, `test --worker DIR --reference`) and compares its weights
// with the distributed run's.
void compare_with_reference(const std::string &self, const std::string &dir, const std::string &mp)
{
    // The kernels launch gave the distributed run (the reference would otherwise warn about the generic ones).
    const std::optional<BlasKernels> core = generic_openblas_kernels();
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (const char *k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                              "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
            unsetenv(k);
        if (core) setenv("OPENBLAS_CORETYPE", core->suggested.c_str(), 1);
        execl(self.c_str(), self.c_str(), "test", "--worker", dir.c_str(), "--reference", static_cast<char *>(nullptr));
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the one-process reference run failed");
    const std::vector<float> dist = read_floats(dir + "/distributed.bin"), ref = read_floats(dir + "/reference.bin");
    expect(dist.size() == ref.size() && !ref.empty(), "the reference has another number of weights");
    // fp32 differs only by the order of the additions; 16-bit formats by their rounding.
    const double tol = mp == "no" ? 1e-5 : 3e-2;
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(dist[i]) - ref[i]) /
                                    std::max(1.0, std::fabs(static_cast<double>(ref[i]))));
    expect(worst <= tol, "the distributed weights differ from one process trained on the same global batches "
                         "(worst relative difference " + std::to_string(worst) + " > " + std::to_string(tol) + ")");
    std::printf("accel test: equal to one process on the same global batches (worst relative difference %.2g)\n",
                worst);
}

} // namespace

int test_main(int argc, char **argv)
{
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
        std::fputs(kTestUsage, stdout);
        return 0;
    }
    if (argc >= 3 && std::strcmp(argv[1], "--worker") == 0)
        return worker(argv[2], argc >= 4 && std::strcmp(argv[3], "--reference") == 0);

    char tmpl[] = "/tmp/accel-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
        std::perror("accel test: mkdtemp");
        return 1;
    }
    const std::string dir = tmpl, self = self_path();
    // launch_main exits by itself when it refuses the options or the config file (exit 2 / 1): the folder is
    // removed at exit then too, by this process only (launch's children exec or _exit).
    static std::string at_exit_dir;
    static pid_t owner = 0;
    at_exit_dir = dir;
    owner = getpid();
    std::atexit([] {
        if (getpid() == owner && !at_exit_dir.empty()) remove_test_dir(at_exit_dir);
    });
    auto cleanup = [&dir] {
        remove_test_dir(dir);
        at_exit_dir.clear();
    };
    std::vector<std::string> args{"launch"};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    for (const char *a : {self.c_str(), "test", "--worker", dir.c_str()}) args.emplace_back(a);
    std::vector<char *> launch_argv;
    for (auto &a : args) launch_argv.push_back(a.data());
    launch_argv.push_back(nullptr);
    std::fflush(stdout);
    if (launch_main(static_cast<int>(args.size()), launch_argv.data()) != 0) {
        std::fprintf(stderr, "accel test: the distributed check failed (see above): this machine or config cannot "
                             "train as configured\n");
        cleanup();
        return 1;
    }
    // 4. The reference: one process, the same global batches, model and training settings (DIR/plan).
    int rc = 1;
    try {
        const Plan plan = read_plan(dir + "/plan");
        if (test_model(plan.model).per_process_statistics) {
            // Each process normalizes its own batch (PyTorch's DDP without SyncBatchNorm does the same), so
            // the weights cannot equal one process's on the global batch; steps 1-3 above still ran.
            std::printf("accel test: not compared with one process: model %s normalizes each process's own batch\n",
                        plan.model.c_str());
        } else if (!plan.compare) {
            std::printf("accel test: not compared with one process: the DeepSpeed config file fixes the batch size "
                        "per process (%d)\n", plan.batch);
        } else {
            compare_with_reference(self, dir, plan.mixed_precision);
        }
        std::printf("Test is a success! You are ready for your distributed training!\n");
        rc = 0;
    } catch (const Failure &f) {
        std::fprintf(stderr, "accel test: FAILED: %s\n", f.what.c_str());
    }
    cleanup();
    return rc;
}

} // namespace accel::cli
