// `accel test [launch options]`: Accelerate's `accelerate test`. Runs a built-in end-to-end check under
// `accel launch` with the user's config file and options (this program again, as `accel test --worker
// DIR`), then the same training in one process as the reference, and says plainly whether this machine and
// config can train. The worker goes through the public C API only, as a user's program does:
//   1. the processes agree on their number and rank (gather, reduce, broadcast, a trigger);
//   2. a small MLP trains data-parallel for a few steps; every rank ends with the same weights;
//   3. save_state / load_state round-trip those weights through a checkpoint folder;
//   4. (outer command) the weights equal one process trained on the same global batches.
#include "cli/commands.hpp"
#include "common/blas_kernels.hpp"
#include "common/files.hpp"

#include <accel/accel.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace accel::cli {

namespace {

const char *kTestUsage =
    "usage: accel test [--config_file PATH] [other accel launch options]\n"
    "\n"
    "Checks that this machine and config can train: starts a built-in program under `accel launch` with the\n"
    "given options (the config file is found as launch finds it: --config_file, ACCELERATE_CONFIG_FILE, then\n"
    "$HF_HOME/accelerate/default_config.yaml), which runs collectives, trains a small MLP data-parallel,\n"
    "checks that every process holds the same weights, and saves and loads a checkpoint; then trains the same\n"
    "model in one process on the same global batches and compares the weights.\n"
    "\n"
    "Exit status: 0 when every check passed (\"Test is a success!\"), 1 when one failed (it is named), 2 when\n"
    "launch refuses the options or the config file.\n";

constexpr int kFeatures = 6, kClasses = 3, kStepsPerRank = 4, kBatch = 4; // kBatch: per process and step
const char *kSpec = "{\"type\": \"mlp\", \"widths\": [6, 16, 3], \"activation\": \"tanh\"}";

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

// Trains kSpec for kStepsPerRank steps on `data_processes` x kStepsPerRank x kBatch samples with `batch`
// samples per process and step, and returns the weights. With a checkpoint folder it then saves the state,
// takes one more step and loads the state back: the weights must be the saved ones again.
std::vector<float> train(accel_accelerator_t *acc, int32_t data_processes, int batch, const std::string &checkpoint)
{
    const int n = data_processes * kStepsPerRank * kBatch;
    std::vector<float> x(static_cast<size_t>(n) * kFeatures);
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        y[static_cast<size_t>(i)] = i % kClasses;
        for (int f = 0; f < kFeatures; ++f)
            x[static_cast<size_t>(i * kFeatures + f)] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(f)) +
                                                        (f == i % kClasses ? 1.0f : 0.0f);
    }
    const int64_t xs[2] = {n, kFeatures}, ys[1] = {n};
    accel_tensor_t *features = nullptr, *labels = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_dataloader_t *dl = nullptr;
    auto release = [&] {
        accel_dataloader_free(dl);
        accel_optimizer_free(opt);
        accel_model_free(model);
        accel_tensor_free(features);
        accel_tensor_free(labels);
    };
    auto step = [&](bool *more) {
        accel_batch_t *b = nullptr;
        check(accel_dataloader_next(dl, &b), "next batch");
        *more = b != nullptr;
        if (b == nullptr) return;
        double loss = 0.0;
        accel_status_t st = accel_accelerator_train_step(acc, model, opt, nullptr, b, "cross_entropy", &loss);
        accel_batch_free(b);
        check(st, "train step");
    };
    std::vector<float> w;
    try {
        check(accel_random_set_seed(1234, false, false), "set_seed");
        check(accel_tensor_create(x.data(), x.size() * 4, ACCEL_DTYPE_FLOAT32, xs, 2, &features), "features");
        check(accel_tensor_create(y.data(), y.size() * 8, ACCEL_DTYPE_INT64, ys, 1, &labels), "labels");
        check(accel_model_create_from_json(kSpec, &model), "model");
        check(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9}", &opt), "optimizer");
        const std::string dl_config = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": false}";
        check(accel_dataloader_create_from_tensors(features, labels, dl_config.c_str(), &dl), "dataloader");
        check(accel_accelerator_prepare(acc, model, opt, dl, nullptr), "prepare");
        for (bool more = true; more;) step(&more);
        w = weights_of(acc, model);
        if (!checkpoint.empty()) {
            check(accel_accelerator_save_state(acc, checkpoint.c_str()), "save_state");
            bool more = false;
            step(&more); // a new epoch's first batch
            expect(weights_of(acc, model) != w, "checkpoint: a step after the save changed nothing");
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
        check(accel_accelerator_create(nullptr, &acc), "accelerator (the launch environment and config)");
        int32_t rank = 0, processes = 1;
        check(accel_accelerator_get_process_index(acc, &rank), "process index");
        check(accel_accelerator_get_num_processes(acc, &processes), "process count");
        check(accel_accelerator_is_main_process(acc, &main), "is_main_process");
        if (reference) { // the distributed run's process count: its global batches in one process
            int32_t p = 0;
            std::ifstream(dir + "/processes") >> p;
            expect(p >= 1, "the distributed run left no process count");
            write_floats(dir + "/reference.bin", train(acc, p, kBatch * p, ""));
            accel_accelerator_free(acc);
            return 0;
        }
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
        std::vector<float> w = train(acc, processes, kBatch, dir + "/checkpoint");
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
            if (main)
                std::printf("accel test: training ok (%s, %d steps, the same weights on every process; save_state / "
                            "load_state restore them)\n", strategy.c_str(), kStepsPerRank);
        }
        if (main) {
            write_floats(dir + "/distributed.bin", w);
            std::ofstream(dir + "/mixed_precision") << mp_names[mp];
            std::ofstream(dir + "/processes") << processes;
        }
        check(accel_accelerator_wait_for_everyone(acc), "wait_for_everyone");
    } catch (const Failure &f) {
        std::fprintf(stderr, "accel test: FAILED: %s\n", f.what.c_str());
        accel_accelerator_free(acc);
        return 1;
    }
    accel_accelerator_free(acc);
    return 0;
}

std::string self_path()
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "accel";
    buf[n] = '\0';
    return buf;
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
    auto cleanup = [&dir] {
        try {
            accel::remove_all(dir);
        } catch (...) { // a temporary folder left behind is not worth failing the check
        }
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
    // 4. The reference: one process, the same global batches, the same mixed precision.
    std::string mp;
    std::ifstream(dir + "/mixed_precision") >> mp;
    // The kernels launch gave the distributed run (the reference would otherwise warn about the generic ones).
    const std::optional<BlasKernels> core = generic_openblas_kernels();
    pid_t pid = fork();
    if (pid == 0) {
        for (const char *k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                              "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
            unsetenv(k);
        setenv("ACCELERATE_MIXED_PRECISION", mp.c_str(), 1);
        if (core) setenv("OPENBLAS_CORETYPE", core->suggested.c_str(), 1);
        execl(self.c_str(), self.c_str(), "test", "--worker", dir.c_str(), "--reference", static_cast<char *>(nullptr));
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = 1;
    try {
        expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the one-process reference run failed");
        const std::vector<float> dist = read_floats(dir + "/distributed.bin"), ref = read_floats(dir + "/reference.bin");
        expect(dist.size() == ref.size() && !ref.empty(), "the reference has another number of weights");
        // fp32 differs only by the order of the additions; 16-bit formats by their rounding.
        const double tol = mp == "no" ? 1e-5 : 3e-2;
        double worst = 0.0;
        for (size_t i = 0; i < ref.size(); ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(dist[i]) - ref[i]) / std::max(1.0, std::fabs(static_cast<double>(ref[i]))));
        expect(worst <= tol, "the distributed weights differ from one process trained on the same global batches "
                             "(worst relative difference " + std::to_string(worst) + " > " + std::to_string(tol) + ")");
        std::printf("accel test: equal to one process on the same global batches (worst relative difference %.2g)\n",
                    worst);
        std::printf("Test is a success! You are ready for your distributed training!\n");
        rc = 0;
    } catch (const Failure &f) {
        std::fprintf(stderr, "accel test: FAILED: %s\n", f.what.c_str());
    }
    cleanup();
    return rc;
}

} // namespace accel::cli
