#include "checkpointing/safetensors.hpp"

#include "common/files.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>

namespace accel::ckpt {

std::optional<StDtype> st_dtype_of(at::ScalarType t)
{
    switch (t) {
    case at::kBool: return StDtype::BOOL;
    case at::kByte: return StDtype::U8;
    case at::kChar: return StDtype::I8;
    case at::kShort: return StDtype::I16;
    case at::kHalf: return StDtype::F16;
    case at::kBFloat16: return StDtype::BF16;
    case at::kInt: return StDtype::I32;
    case at::kFloat: return StDtype::F32;
    case at::kComplexFloat: return StDtype::C64;
    case at::kDouble: return StDtype::F64;
    case at::kLong: return StDtype::I64;
    default: return std::nullopt; // complex128/complex32 and quantized types have no safetensors name
    }
}

std::optional<at::ScalarType> scalar_type_of(StDtype d)
{
    switch (d) {
    case StDtype::BOOL: return at::kBool;
    case StDtype::U8: return at::kByte;
    case StDtype::I8: return at::kChar;
    case StDtype::I16: return at::kShort;
    case StDtype::F16: return at::kHalf;
    case StDtype::BF16: return at::kBFloat16;
    case StDtype::I32: return at::kInt;
    case StDtype::F32: return at::kFloat;
    case StDtype::C64: return at::kComplexFloat;
    case StDtype::F64: return at::kDouble;
    case StDtype::I64: return at::kLong;
    default: return std::nullopt; // float8, unsigned 16/32/64 and sub-byte types do not exist in LibTorch 1.13
    }
}

namespace {
struct Prepared {
    std::vector<StWriteEntry> entries;
    std::vector<at::Tensor> keep; // contiguous copies kept alive while writing
    std::string header;
};

Prepared prepare(const TensorList &tensors, const StringMap *metadata)
{
    Prepared p;
    p.entries.reserve(tensors.size());
    for (const auto &[name, t0] : tensors) {
        if (!t0.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "safetensors: tensor \"" + name + "\" is undefined");
        auto dt = st_dtype_of(t0.scalar_type());
        if (!dt)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "safetensors: tensor \"" + name + "\" has dtype " +
                                                 std::string(c10::toString(t0.scalar_type())) +
                                                 ", which safetensors cannot store");
        at::Tensor t = t0.device().is_cpu() ? t0 : t0.cpu();
        if (!t.is_contiguous()) t = t.contiguous();
        p.keep.push_back(t);
        StWriteEntry e;
        e.name = name;
        e.dtype = *dt;
        for (int64_t s : t.sizes()) e.shape.push_back(static_cast<uint64_t>(s));
        e.nbytes = t.nbytes();
        e.data = t.data_ptr();
        p.entries.push_back(std::move(e));
    }
    p.header = build_st_header(p.entries, metadata);
    return p;
}

LoadedSafetensors make_tensors(const StHeader &h, const uint8_t *base, const std::shared_ptr<MappedFile> &owner,
                               const std::string &what)
{
    LoadedSafetensors out;
    out.has_metadata = h.has_metadata;
    out.metadata = h.metadata;
    const uint8_t *data = base + h.data_start();
    for (const auto &t : h.tensors) {
        auto st = scalar_type_of(t.dtype);
        if (!st)
            fail(ACCEL_ERR_UNIMPLEMENTED, what + ": tensor \"" + t.name + "\": dtype " + st_dtype_name(t.dtype) +
                                              " has no counterpart in this LibTorch");
        std::vector<int64_t> sizes;
        for (uint64_t d : t.shape) {
            if (d > static_cast<uint64_t>(INT64_MAX))
                fail(ACCEL_ERR_DATA_LOSS, what + ": tensor \"" + t.name + "\": dimension too large");
            sizes.push_back(static_cast<int64_t>(d));
        }
        auto opts = at::TensorOptions().dtype(*st);
        const uint8_t *p = data + t.begin;
        const size_t elem = c10::elementSize(*st);
        at::Tensor tensor;
        if (owner && reinterpret_cast<uintptr_t>(p) % elem == 0 && t.nbytes() > 0) {
            tensor = mapped_tensor(owner, static_cast<size_t>(p - base), sizes, *st);
        } else {
            tensor = at::empty(sizes, opts);
            if (t.nbytes() > 0) std::memcpy(tensor.data_ptr(), p, t.nbytes());
        }
        out.tensors.emplace_back(t.name, std::move(tensor));
    }
    return out;
}
} // namespace


void save_safetensors(const std::string &path, const TensorList &tensors, const StringMap *metadata)
{
    Prepared p = prepare(tensors, metadata);
    OutFile f(path);
    f.write(p.header.data(), p.header.size());
    for (const auto &e : p.entries)
        if (e.nbytes > 0) f.write(e.data, e.nbytes);
    f.close();
}

std::string safetensors_bytes(const TensorList &tensors, const StringMap *metadata)
{
    Prepared p = prepare(tensors, metadata);
    std::string out = p.header;
    for (const auto &e : p.entries) out.append(static_cast<const char *>(e.data), e.nbytes);
    return out;
}

LoadedSafetensors load_safetensors(const std::string &path)
{
    // Not populated: the caller reads the bytes once, with pread into their destination (CopyBatch).
    auto file = std::make_shared<MappedFile>(path);
    StHeader h = parse_st_header(file->data(), file->size(), path);
    return make_tensors(h, file->data(), file, path);
}

LoadedSafetensors parse_safetensors(const uint8_t *data, size_t len, const std::string &what)
{
    StHeader h = parse_st_header(data, len, what);
    return make_tensors(h, data, nullptr, what);
}

} // namespace accel::ckpt
