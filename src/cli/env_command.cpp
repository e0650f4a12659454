// `accel env [--config_file PATH]`: the block a user pastes into a bug report, laid out as
// `accelerate env`'s: versions (accel, ABI, LibTorch, MPI), compiled backends, CPU and memory, and the
// config file's contents.
#include "cli/commands.hpp"
#include "common/blas_kernels.hpp"
#include "common/error.hpp"
#include "config/config_file.hpp"

#include <accel/status.h>
#include <accel/version.h>

#include <gnu/libc-version.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifdef ACCEL_WITH_MPI
// The C API only (Open MPI's and MPICH's mpi.h otherwise pull in their deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace accel::cli {

namespace {

const char *kEnvUsage = "usage: accel env [--config_file PATH]\n"
                        "\n"
                        "Prints versions (accel, its ABI, LibTorch, MPI), the compiled communication backends, the\n"
                        "kernels OpenBLAS chose (and the OPENBLAS_CORETYPE to set where it does not know the CPU),\n"
                        "the CPU count and memory, and the config file accel launch would read (--config_file, else\n"
                        "ACCELERATE_CONFIG_FILE, else $HF_HOME/accelerate/default_config.yaml): the block to paste\n"
                        "into a bug report.\n"
                        "\n"
                        "Exit status: 0; 1 when the config file cannot be read or is invalid; 2 bad arguments.\n";

// The string value of `"key": "..."` or the raw text of `"key": [...]` in accel_build_info_json()'s
// small, flat output (the CLI has no JSON library of its own).
std::string info_field(const std::string &json, const std::string &key)
{
    auto k = json.find("\"" + key + "\"");
    if (k == std::string::npos) return "?";
    auto colon = json.find(':', k);
    if (colon == std::string::npos) return "?";
    size_t b = json.find_first_not_of(" \t\n", colon + 1);
    if (b == std::string::npos) return "?";
    if (json[b] == '"') return json.substr(b + 1, json.find('"', b + 1) - b - 1);
    size_t e = json[b] == '[' ? json.find(']', b) + 1 : json.find_first_of(",}\n", b);
    std::string v = json.substr(b, e - b), out, item;
    // ["a", "b"] -> "a, b"
    for (char c : v + ",") {
        if (c == ',') {
            item.erase(0, item.find_first_not_of(" \n\t"));
            item.erase(item.find_last_not_of(" \n\t") + 1);
            if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
            item.clear();
        } else if (c != '"' && c != '[' && c != ']') {
            item += c;
        }
    }
    return out;
}

} // namespace

int env_main(int argc, char **argv)
{
    std::optional<std::string> flag;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kEnvUsage, stdout);
            return 0;
        } else if (a == "--config_file" && i + 1 < argc) {
            flag = argv[++i];
        } else if (a.rfind("--config_file=", 0) == 0) {
            flag = a.substr(14);
        } else {
            std::fprintf(stderr, "accel env: unknown argument \"%s\"\n\n%s", a.c_str(), kEnvUsage);
            return 2;
        }
    }

    char *info = nullptr;
    std::string build_info;
    if (accel_build_info_json(&info) == ACCEL_OK && info) build_info = info;
    accel_string_free(info);

    utsname u{};
    uname(&u);
    char exe[4096] = {0};
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) std::strcpy(exe, "?");
    struct sysinfo si{};
    sysinfo(&si);
    const double ram_gb = static_cast<double>(si.totalram) * si.mem_unit / (1024.0 * 1024.0 * 1024.0);

    std::printf("\nCopy-and-paste the text below in your GitHub issue\n\n");
    std::printf("- `accel` version: %s (ABI %d)\n", ACCEL_VERSION_STRING, accel_abi_version());
    std::printf("- Platform: %s-%s-%s-with-glibc%s\n", u.sysname, u.release, u.machine, gnu_get_libc_version());
    std::printf("- `accel` location: %s\n", exe);
    std::printf("- LibTorch version: %s\n", info_field(build_info, "torch_version").c_str());
    std::printf("- LibTorch accelerator: %s\n", info_field(build_info, "cuda") == "true" ? "CUDA" : "N/A");
    std::printf("- Communication backends compiled: %s\n", info_field(build_info, "backends").c_str());
#ifdef ACCEL_WITH_MPI
    {
        char v[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
        int len = 0;
        MPI_Get_library_version(v, &len);
        std::string s(v, static_cast<size_t>(len));
        if (auto nl = s.find_first_of("\n,"); nl != std::string::npos) s.resize(nl);
        std::printf("- MPI library: %s\n", s.c_str());
    }
#else
    std::printf("- MPI library: not compiled in\n");
#endif
    if (auto core = openblas_kernels()) {
        std::printf("- OpenBLAS kernels: %s", core->chosen.c_str());
        if (!core->suggested.empty())
            std::printf(" (generic: OpenBLAS does not know this CPU; float32 matrix products run faster with "
                        "OPENBLAS_CORETYPE=%s set before a process starts, as accel launch does)",
                        core->suggested.c_str());
        std::printf("\n");
    } else {
        std::printf("- OpenBLAS kernels: N/A (LibTorch's BLAS is not OpenBLAS)\n");
    }
    std::printf("- CPU count: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    std::printf("- System RAM: %.2f GB\n", ram_gb);

    std::optional<std::string> path;
    try {
        path = config::resolve_config_file(flag);
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "accel env: %s\n", e.what());
        return 1;
    }
    std::printf("- `accel` %s:", flag ? "config passed" : "default config");
    if (!path) {
        std::printf("\n\tNot found\n");
        return 0;
    }
    std::printf(" %s\n", path->c_str());
    try {
        config::ClusterConfig c = config::load_cluster_config(*path);
        for (const auto &[k, v] : c.entries) std::printf("\t- %s: %s\n", k.c_str(), v.c_str());
        for (const auto &w : c.warnings) std::printf("\t(warning) %s\n", w.c_str());
    } catch (const accel::Error &e) {
        std::printf("\t(unreadable)\n");
        std::fprintf(stderr, "accel env: %s\n", e.what());
        return 1;
    }
    return 0;
}

} // namespace accel::cli
