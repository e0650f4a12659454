#include "config/dynamo.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cctype>

namespace accel::config {

namespace {
// Accelerate's DynamoBackend members (0.24.1 and 1.x) that need torch.compile ("OFI" is TorchScript's own).
constexpr const char *kCompiling[] = {"AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS",
                                      "FX2TRT", "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE",
                                      "TORCHXLA_TRACE_ONCE", "IPEX", "TVM", "HPU_BACKEND"};
} // namespace

std::string check_dynamo_backend(const std::string &value, const std::string &where)
{
    std::string v = value;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    if (v == "NO" || v == "EAGER" || v == "OFI") return v;
    for (const char *name : kCompiling)
        if (v == name)
            fail(ACCEL_ERR_UNIMPLEMENTED,
                 where + ": \"" + value + "\" compiles the model with torch.compile (TorchDynamo), which exists only in "
                                          "Python PyTorch, not in LibTorch's C++ API; accel accepts \"no\" and \"eager\" "
                                          "(both run the model as written) and \"ofi\" (TorchScript models' "
                                          "freeze + optimize_for_inference for evaluation)");
    fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected one of Accelerate's dynamo backends (\"no\", \"eager\", "
                                             "\"inductor\", ...), got \"" + value + "\"");
}

} // namespace accel::config
