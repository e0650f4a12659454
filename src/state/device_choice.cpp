#include "state/device_choice.hpp"

#include "common/error.hpp"

#include <cctype>

namespace accel {

namespace {

const char kVariable[] = "ACCELERATE_TORCH_DEVICE";

// torch.device's "type" or "type:index" (index: decimal digits; LibTorch 1.13 keeps a device index in 8 bits).
std::pair<std::string, std::optional<int>> parse_torch_device(const std::string &text)
{
    const size_t colon = text.find(':');
    const std::string type = text.substr(0, colon);
    bool word = !type.empty();
    for (char c : type) word = word && (std::islower(static_cast<unsigned char>(c)) || c == '_');
    if (!word)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(kVariable) + "=" + text +
                                             ": expected a torch device such as cpu, cuda or cuda:1");
    if (colon == std::string::npos) return {type, std::nullopt};
    const std::string digits = text.substr(colon + 1);
    bool number = !digits.empty() && digits.size() <= 3;
    for (char c : digits) number = number && std::isdigit(static_cast<unsigned char>(c));
    if (!number || std::stoi(digits) > 127)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(kVariable) + "=" + text +
                                             ": expected a device index in 0..127 after \"" + type + ":\"");
    return {type, std::stoi(digits)};
}

} // namespace

DeviceChoice choose_device(bool cpu, int local_rank, int gpu_count, const std::optional<std::string> &torch_device)
{
    if (!torch_device) {
        if (cpu || gpu_count <= 0) return {};
        return {true, (local_rank < 0 ? 0 : local_rank) % gpu_count};
    }
    const auto [type, index] = parse_torch_device(*torch_device);
    if (type == "cpu") {
        if (index && *index != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(kVariable) + "=" + *torch_device + ": the CPU has index 0 only");
        return {};
    }
    if (type != "cuda")
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string(kVariable) + "=" + *torch_device + ": accel runs on the CPU and on "
                                      "CUDA GPUs (this LibTorch has no \"" + type + "\" device); use cpu or cuda:N");
    const int gpu = index.value_or(0);
    if (gpu >= gpu_count)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string(kVariable) + "=" + *torch_device + ": this process sees " + std::to_string(gpu_count) +
                 " GPU" + (gpu_count == 1 ? "" : "s") + (gpu_count > 0 ? " (cuda:0.." + std::to_string(gpu_count - 1) + ")" : "") +
                 " (CUDA_VISIBLE_DEVICES narrows them, and a LibTorch without CUDA sees none)");
    return {true, gpu};
}

} // namespace accel
