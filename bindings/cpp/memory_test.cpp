// include/accel/accel.hpp's find_executable_batch_size (C-level checks: tests/capi/test_memory.c): a step failing
// above a size lands on the largest of the sequence that fits, with either factor; std::bad_alloc counts as out
// of memory; another exception is rethrown unchanged; reaching zero; a forward pass under max_memory_bytes.
#include <accel/accel.hpp>

#include "expect.hpp"

#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Sizes = std::vector<std::int64_t>;

std::function<void(std::int64_t)> fails_above(std::int64_t fits, Sizes &tried)
{
    return [fits, &tried](std::int64_t batch_size) {
        tried.push_back(batch_size);
        if (batch_size > fits) throw accel::Error(ACCEL_ERR_RESOURCE_EXHAUSTED, "out of memory (a test's step)");
    };
}

} // namespace

int main()
{
    Sizes tried;
    EXPECT(accel::find_executable_batch_size(128, fails_above(37, tried)) == 32);
    EXPECT((tried == Sizes{128, 64, 32}));

    tried.clear();
    EXPECT(accel::find_executable_batch_size(128, fails_above(37, tried), R"({"reduce_batch_size_factor": 0.9})") == 36);
    EXPECT((tried == Sizes{128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36}));

    tried.clear();
    EXPECT(accel::find_executable_batch_size(64, [&](std::int64_t b) {
               tried.push_back(b);
               if (b > 20) throw std::bad_alloc();
           }) == 16);
    EXPECT((tried == Sizes{64, 32, 16}));

    // Another exception: rethrown as it was thrown, after the out-of-memory try before it.
    tried.clear();
    bool rethrown = false;
    try {
        accel::find_executable_batch_size(64, [&](std::int64_t b) {
            tried.push_back(b);
            if (b > 32) throw std::bad_alloc();
            throw std::logic_error("the data set is gone");
        });
    } catch (const std::logic_error &e) {
        rethrown = std::string(e.what()) == "the data set is gone";
    }
    EXPECT(rethrown);
    EXPECT((tried == Sizes{64, 32}));

    tried.clear();
    accel_status_t zero = ACCEL_OK;
    try {
        accel::find_executable_batch_size(4, fails_above(0, tried));
    } catch (const accel::Error &e) {
        zero = std::string(e.what()).find("reached zero") != std::string::npos ? e.status() : ACCEL_ERR_UNKNOWN;
    }
    EXPECT(zero == ACCEL_ERR_RESOURCE_EXHAUSTED);
    EXPECT((tried == Sizes{4, 2, 1}));

    // A real forward pass under a 4 MB budget for LibTorch's CPU allocations.
    auto model = accel::Model::from_json(R"({"type": "mlp", "widths": [256, 1024, 4]})");
    std::vector<std::string> seen;
    const std::int64_t found = accel::find_executable_batch_size(
        1024,
        [&](std::int64_t b) {
            auto x = accel::Tensor::from(std::vector<float>(static_cast<size_t>(b) * 256), {b, 256});
            try {
                model.forward(x);
            } catch (const accel::Error &e) {
                seen.push_back(std::to_string(b) + " " + e.status_name());
                throw;
            }
            seen.push_back(std::to_string(b) + " ok");
        },
        R"({"max_memory_bytes": "4MB"})");
    EXPECT(found == 256);
    EXPECT((seen == std::vector<std::string>{"1024 ACCEL_ERR_RESOURCE_EXHAUSTED", "512 ACCEL_ERR_RESOURCE_EXHAUSTED", "256 ok"}));
    std::printf("cpp.memory: ok\n");
    return 0;
}
