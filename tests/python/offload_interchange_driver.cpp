// The accel side of tests/python/offload_interchange.py: Accelerate's offload folder format, both ways.
//
//   offload_interchange_driver write DIR   offload_state_dict(DIR, the pattern tensors)
//   offload_interchange_driver check DIR   every pattern tensor loads from DIR (OffloadFolder) bit for bit
//
// The pattern (also in offload_interchange.py): tensor k's byte j is (j*131 + k*71 + (j>>7)*13 + 17) & 0xFF (& 1 for
// bool), over every dtype the format names, a 0-d tensor included. It links libaccel's objects (the folder code
// is internal; the public entry to it is accel_model_dispatch).
#include "big_modeling/offload_folder.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Pattern {
    const char *name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
};

const std::vector<Pattern> &patterns()
{
    static const std::vector<Pattern> p{
        {"model.layers.0.self_attn.q_proj.weight", at::kFloat, {3, 5}},
        {"h.f16", at::kHalf, {7}},
        {"h.bf16", at::kBFloat16, {2, 3, 4}},
        {"h.f64", at::kDouble, {4}},
        {"h.i64", at::kLong, {3}},
        {"h.i32", at::kInt, {2, 2}},
        {"h.i16", at::kShort, {5}},
        {"h.i8", at::kChar, {9}},
        {"h.u8", at::kByte, {6}},
        {"h.bool", at::kBool, {10}},
        {"h.scalar", at::kFloat, {}},
        {"lm_head.weight", at::kBFloat16, {300}},
    };
    return p;
}

at::Tensor pattern_tensor(size_t k)
{
    const Pattern &p = patterns()[k];
    at::Tensor t = at::empty(p.shape, at::TensorOptions().dtype(p.dtype));
    auto *b = static_cast<uint8_t *>(t.data_ptr());
    for (size_t j = 0; j < t.nbytes(); ++j) {
        const uint8_t v = static_cast<uint8_t>((j * 131 + k * 71 + (j >> 7) * 13 + 17) & 0xFF);
        b[j] = p.dtype == at::kBool ? (v & 1) : v;
    }
    return t;
}

int run(const std::string &mode, const std::string &dir)
{
    using namespace accel::big_modeling;
    if (mode == "write") {
        std::vector<std::pair<std::string, at::Tensor>> tensors;
        for (size_t k = 0; k < patterns().size(); ++k) tensors.emplace_back(patterns()[k].name, pattern_tensor(k));
        offload_state_dict(dir, tensors);
        return 0;
    }
    if (mode != "check") return 2;
    OffloadFolder folder(dir);
    int bad = 0;
    for (size_t k = 0; k < patterns().size(); ++k) {
        const at::Tensor want = pattern_tensor(k);
        const at::Tensor got = folder.load(patterns()[k].name);
        const bool same = got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
                          std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) == 0;
        std::printf("%s %s\n", same ? "same" : "DIFFERENT", patterns()[k].name);
        bad += !same;
    }
    return bad == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s write|check DIR\n", argv[0]);
        return 2;
    }
    try {
        return run(argv[1], argv[2]);
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "%s: %s\n", accel_status_name(e.code()), e.what());
        return 1;
    }
}
