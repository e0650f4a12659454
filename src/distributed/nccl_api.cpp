// Loads the CUDA runtime and NCCL at first use (why: see nccl_api.hpp). Compiled only with
// ACCEL_WITH_NCCL; this file has been compiled and run on a machine without a GPU (loading works
// there: only device calls fail), never on one with a GPU.
#ifdef ACCEL_WITH_NCCL
#include "distributed/nccl_api.hpp"

#include "common/error.hpp"

#include <dlfcn.h>

#include <mutex>
#include <vector>

namespace accel::distributed {

namespace {

// Expands a macro argument before quoting it, so a header that renames a function (cudart does for
// some, e.g. cudaGetDeviceProperties -> _v2) is looked up under the name actually exported.
#define ACCEL_QUOTE2(x) #x
#define ACCEL_QUOTE(x) ACCEL_QUOTE2(x)

// A library handle: the process's global scope when `probe` is already there (a CUDA LibTorch has
// loaded its own cudart and NCCL, which accel then shares), else the first of `names` dlopen finds.
void *open_library(const std::vector<std::string> &names, const char *probe, const char *what, const char *hint,
                   std::string &source)
{
    if (dlsym(RTLD_DEFAULT, probe) != nullptr) {
        source = std::string(what) + " already loaded in this process";
        return RTLD_DEFAULT;
    }
    std::string tried;
    for (const auto &name : names) {
        if (void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
            source = name;
            return h;
        }
        const char *err = dlerror();
        tried += (tried.empty() ? "" : "; ") + std::string(err ? err : name + ": not found");
    }
    fail(ACCEL_ERR_UNIMPLEMENTED, std::string("kwargs_handlers.init_process_group.backend \"nccl\": ") + what +
                                      " was not found (" + tried + "); " + hint);
}

template <class Fn>
void resolve(void *handle, const char *name, const std::string &source, Fn &out)
{
    dlerror();
    void *p = dlsym(handle, name);
    if (p == nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend \"nccl\": " + source + " has no " +
                                          name + " (accel needs the CUDA runtime " +
                                          std::to_string(CUDART_VERSION / 1000) + ".x and NCCL 2.14 or newer)");
    out = reinterpret_cast<Fn>(p);
}

NcclApi load()
{
    NcclApi api;
    // The runtime's soname carries the major version the headers were from (libcudart.so.13 for CUDA 13).
    const std::string cudart_major = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
    void *cudart = open_library({cudart_major, "libcudart.so"}, "cudaGetDeviceCount", cudart_major.c_str(),
                                "install the CUDA runtime or add its folder to LD_LIBRARY_PATH, or use backend "
                                "\"gloo\"",
                                api.cudart_source);
#define ACCEL_RESOLVE_CUDART(f) resolve(cudart, ACCEL_QUOTE(f), api.cudart_source, api.f);
#define ACCEL_RESOLVE_CUDART_TYPED(f, type) ACCEL_RESOLVE_CUDART(f)
    ACCEL_CUDART_FUNCTIONS(ACCEL_RESOLVE_CUDART, ACCEL_RESOLVE_CUDART_TYPED)
#undef ACCEL_RESOLVE_CUDART
#undef ACCEL_RESOLVE_CUDART_TYPED
    void *nccl = open_library({"libnccl.so.2", "libnccl.so"}, "ncclCommInitRankConfig", "libnccl.so.2",
                              "install NCCL 2 or add its folder to LD_LIBRARY_PATH, or use backend \"gloo\"",
                              api.nccl_source);
#define ACCEL_RESOLVE_NCCL(f) resolve(nccl, ACCEL_QUOTE(f), api.nccl_source, api.f);
    ACCEL_NCCL_FUNCTIONS(ACCEL_RESOLVE_NCCL)
#undef ACCEL_RESOLVE_NCCL
    return api;
}

} // namespace

const NcclApi &nccl_api()
{
    // Loaded once; a failure is remembered so that every caller gets the same reason.
    static std::once_flag once;
    static NcclApi *api = nullptr; // leaked on purpose: the libraries stay loaded until exit
    static std::string error;
    std::call_once(once, [] {
        try {
            api = new NcclApi(load());
        } catch (const Error &e) {
            error = e.what();
        }
    });
    if (api == nullptr) fail(ACCEL_ERR_UNIMPLEMENTED, error);
    return *api;
}

} // namespace accel::distributed
#endif // ACCEL_WITH_NCCL
