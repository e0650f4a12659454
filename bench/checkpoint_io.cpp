// save_state / load_state throughput against dd writing (conv=fsync) and reading the same bytes, in the
// same run. Model: an MLP of 4096-wide layers (>= 256 MB of fp32 weights) with SGD momentum after one step
// (so optimizer.bin holds another model-sized buffer). Prints MB/s and the ratio to dd for each of several
// interleaved rounds, then medians, and the load average before and after (others may share the machine).
//
// The dd side, per round: `dd if=SRC of=FILE bs=1M conv=fsync` where SRC holds the checkpoint's files
// concatenated (made once, before the rounds, and read from the page cache), so dd writes the same bytes
// (content a virtual disk may compress favours neither side) and, as save_state replaces the previous
// checkpoint, replaces (truncates) its previous output; then `dd if=FILE of=/dev/null bs=1M` (page cache
// warm, as for load_state). dd discards what it reads (its 1 MiB buffer stays in the CPU cache), while a
// load must also write every byte to memory; so a third figure, "RAM read", times the best one-copy load of
// the same file: pread on as many threads as accel uses (cores, at most 4) into a buffer of the file's size
// that was written once before (like parameters and optimizer state that already exist).
//
//   bench_checkpoint_io [DIR] [ROUNDS]     (DIR defaults to $TMPDIR or /tmp)
#include <accel/accel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(accel_status_t st, const char *what)
{
    if (st != ACCEL_OK) {
        std::fprintf(stderr, "%s: %s: %s\n", what, accel_status_name(st), accel_last_error_message());
        std::exit(1);
    }
}

uint64_t folder_bytes(const std::string &dir)
{
    std::string cmd = "du -sb '" + dir + "' | cut -f1";
    FILE *p = popen(cmd.c_str(), "r");
    unsigned long long n = 0;
    if (p) {
        if (std::fscanf(p, "%llu", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

double run_timed(const std::string &cmd)
{
    double t0 = now();
    if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "command failed: %s\n", cmd.c_str());
        std::exit(1);
    }
    return now() - t0;
}

std::string loadavg()
{
    FILE *f = std::fopen("/proc/loadavg", "r");
    char buf[128] = "?";
    if (f) {
        if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
        std::fclose(f);
    }
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

// Reads `path` into `dst` (its size) with pread, 32 MiB pieces shared among `threads` threads.
double read_into_memory(const std::string &path, std::vector<char> &dst, unsigned threads)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        std::perror(path.c_str());
        std::exit(1);
    }
    const size_t piece = size_t(32) << 20;
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
        for (size_t at = piece * next++; at < dst.size(); at = piece * next++) {
            for (size_t done = 0, len = std::min(piece, dst.size() - at); done < len;) {
                ssize_t n = ::pread(fd, dst.data() + at + done, len - done, static_cast<off_t>(at + done));
                if (n <= 0) {
                    failed = true;
                    return;
                }
                done += static_cast<size_t>(n);
            }
        }
    };
    double t0 = now();
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
    work();
    for (auto &t : pool) t.join();
    double t = now() - t0;
    ::close(fd);
    if (failed) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        std::exit(1);
    }
    return t;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv)
{
    const char *tmp = std::getenv("TMPDIR");
    std::string root = argc > 1 ? argv[1] : std::string(tmp ? tmp : "/tmp");
    int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
    std::string dir = root + "/accel_bench_ckpt";
    std::string ddfile = root + "/accel_bench_dd.bin";
    std::string ddsrc = root + "/accel_bench_dd_src.bin";

    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    check(accel_random_set_seed(0, false, false), "seed");
    check(accel_accelerator_create(nullptr, &acc), "accelerator");
    check(accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [4096, 4096, 4096, 4096, 4096]}", &model),
          "model");
    check(accel_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.001, \"momentum\": 0.9}", &opt), "optimizer");
    check(accel_accelerator_prepare(acc, model, opt, nullptr, nullptr), "prepare");
    {
        // One step so that the momentum buffers exist.
        std::vector<float> x(8 * 4096, 0.5f);
        int64_t shape[2] = {8, 4096};
        accel_tensor_t *in = nullptr, *out = nullptr, *loss = nullptr;
        check(accel_tensor_create(x.data(), x.size() * sizeof(float), ACCEL_DTYPE_FLOAT32, shape, 2, &in), "input");
        check(accel_model_forward(model, in, &out), "forward");
        check(accel_loss_compute("mse", out, in, &loss), "loss");
        check(accel_accelerator_backward(acc, loss), "backward");
        check(accel_optimizer_step(opt), "step");
        accel_tensor_free(in);
        accel_tensor_free(out);
        accel_tensor_free(loss);
    }

    // dd's source: the checkpoint's bytes, written (and synced) before the rounds, kept in the page cache.
    check(accel_accelerator_save_state(acc, dir.c_str()), "save_state");
    run_timed("cat '" + dir + "'/* > '" + ddsrc + "' && sync '" + ddsrc + "'");
    std::printf("load average before: %s\n", loadavg().c_str());
    struct stat st {};
    if (::stat(ddsrc.c_str(), &st) != 0) {
        std::perror(ddsrc.c_str());
        return 1;
    }
    std::vector<char> ram(static_cast<size_t>(st.st_size), 1); // written once, as existing tensors are
    const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);

    std::vector<double> save_mbs, dd_w_mbs, load_mbs, dd_r_mbs, ram_mbs, save_ratio, load_ratio, ram_ratio, dd64_ratio,
        dd64_mbs;
    std::printf("round  bytes(MB)  save_state MB/s  dd write MB/s  ratio  |  load_state MB/s  dd read MB/s  ratio  |  "
                "RAM read MB/s  ratio\n");
    for (int r = 0; r < rounds; ++r) {
        double t0 = now();
        check(accel_accelerator_save_state(acc, dir.c_str()), "save_state");
        double t_save = now() - t0;
        const uint64_t bytes = folder_bytes(dir);
        const double mb = static_cast<double>(bytes) / 1e6;
        double t_ddw = run_timed("dd if='" + ddsrc + "' of='" + ddfile + "' bs=1M conv=fsync status=none");
        t0 = now();
        check(accel_accelerator_load_state(acc, dir.c_str()), "load_state");
        double t_load = now() - t0;
        double t_ddr = run_timed("dd if='" + ddfile + "' of=/dev/null bs=1M status=none");
        double t_ram = read_into_memory(ddfile, ram, threads);
        // dd with a buffer the size of one of the model's tensors (64 MiB): its copy, like a load's, goes to memory.
        double t_ddr64 = run_timed("dd if='" + ddfile + "' of=/dev/null bs=64M status=none");
        const double dd_mb = mb;
        save_mbs.push_back(mb / t_save);
        dd_w_mbs.push_back(dd_mb / t_ddw);
        load_mbs.push_back(mb / t_load);
        dd_r_mbs.push_back(dd_mb / t_ddr);
        ram_mbs.push_back(dd_mb / t_ram);
        ram_ratio.push_back(load_mbs.back() / ram_mbs.back());
        dd64_mbs.push_back(dd_mb / t_ddr64);
        dd64_ratio.push_back(load_mbs.back() / dd64_mbs.back());
        save_ratio.push_back(save_mbs.back() / dd_w_mbs.back());
        load_ratio.push_back(load_mbs.back() / dd_r_mbs.back());
        std::printf("%5d  %9.1f  %15.0f  %13.0f  %4.0f%%  |  %15.0f  %12.0f  %4.0f%%  |  %13.0f  %4.0f%%\n", r + 1, mb,
                    save_mbs.back(), dd_w_mbs.back(), 100 * save_ratio.back(), load_mbs.back(), dd_r_mbs.back(),
                    100 * load_ratio.back(), ram_mbs.back(), 100 * ram_ratio.back());
    }
    std::printf("median        save_state %.0f MB/s = %.0f%% of dd write (%.0f MB/s); load_state %.0f MB/s = %.0f%% of "
                "dd read (%.0f MB/s)\n",
                median(save_mbs), 100 * median(save_ratio), median(dd_w_mbs), median(load_mbs),
                100 * median(load_ratio), median(dd_r_mbs));
    std::printf("              load_state = %.0f%% of RAM read (%.0f MB/s, pread on %u threads into existing memory)\n",
                100 * median(ram_ratio), median(ram_mbs), threads);
    std::printf("              load_state = %.0f%% of dd read with bs=64M (%.0f MB/s)\n", 100 * median(dd64_ratio),
                median(dd64_mbs));
    std::printf("load average after: %s\n", loadavg().c_str());
    std::remove(ddfile.c_str());
    std::remove(ddsrc.c_str());
    std::system(("rm -rf '" + dir + "'").c_str());
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_accelerator_free(acc);
    return 0;
}
