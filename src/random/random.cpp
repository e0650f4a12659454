#include "random/random.hpp"

#include "checkpointing/pickle.hpp"
#include "common/error.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <array>
#include <cstring>
#include <mutex>

namespace accel {

namespace {

constexpr size_t kMtN = 624; // MT19937 state words

// MT19937's reference initialisation by one 32-bit seed (init_genrand).
std::array<uint32_t, kMtN> mt_init_genrand(uint32_t seed)
{
    std::array<uint32_t, kMtN> mt{};
    mt[0] = seed;
    for (uint32_t i = 1; i < kMtN; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
    return mt;
}

// MT19937's reference initialisation by an array of 32-bit words (init_by_array), which Python's
// random.seed(int) uses with the seed's 32-bit digits, least significant first.
std::array<uint32_t, kMtN> mt_init_by_array(const std::vector<uint32_t> &key)
{
    std::array<uint32_t, kMtN> mt = mt_init_genrand(19650218u);
    size_t i = 1, j = 0;
    for (size_t k = std::max(kMtN, key.size()); k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
        ++i;
        ++j;
        if (i >= kMtN) {
            mt[0] = mt[kMtN - 1];
            i = 1;
        }
        if (j >= key.size()) j = 0;
    }
    for (size_t k = kMtN - 1; k > 0; --k) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
        ++i;
        if (i >= kMtN) {
            mt[0] = mt[kMtN - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    return mt;
}

// random.getstate() after random.seed(seed): (3, (624 words..., 624), None).
PyRef python_random_state(uint64_t seed)
{
    std::vector<uint32_t> key;
    for (uint64_t s = seed; s != 0; s >>= 32) key.push_back(static_cast<uint32_t>(s));
    if (key.empty()) key.push_back(0);
    auto mt = mt_init_by_array(key);
    auto words = py_tuple();
    for (uint32_t w : mt) words->items.push_back(py_int(w));
    words->items.push_back(py_int(static_cast<int64_t>(kMtN)));
    return py_tuple({py_int(3), words, py_none()});
}

// numpy.random.get_state() after numpy.random.seed(seed):
// ("MT19937", uint32[624], 624, 0, 0.0). NumPy accepts seeds below 2^32 only; larger ones are reduced mod 2^32.
PyRef numpy_random_state(uint64_t seed)
{
    auto mt = mt_init_genrand(static_cast<uint32_t>(seed));
    std::string bytes(kMtN * 4, '\0');
    for (size_t i = 0; i < kMtN; ++i)
        for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((mt[i] >> (8 * b)) & 0xFF); // little-endian
    auto dtype = std::make_shared<PyObj>();
    dtype->kind = PyObj::Kind::Global;
    dtype->s = "numpy.dtype";
    dtype->items = {py_str("u4"), py_int(3),     py_str("<"),  py_none(), py_none(),
                    py_none(),    py_int(-1),    py_int(-1),   py_int(0)};
    auto array = std::make_shared<PyObj>();
    array->kind = PyObj::Kind::Global;
    array->s = "numpy.core.multiarray._reconstruct";
    array->items = {py_int(1), py_tuple({py_int(static_cast<int64_t>(kMtN))}), dtype, py_bool(false), py_bytes(bytes)};
    return py_tuple({py_str("MT19937"), array, py_int(static_cast<int64_t>(kMtN)), py_int(0), py_float(0.0)});
}

// What accel keeps for the generators it does not have (Python's random, NumPy, CUDA and other devices'
// generators): seeded as Accelerate's set_seed seeds them, or as loaded from a checkpoint, and written
// back unchanged by the next save.
struct Carried {
    std::mutex mutex;
    PyRef python;                                    // null: never seeded nor loaded
    PyRef numpy;
    std::vector<std::pair<std::string, PyRef>> other; // torch_cuda_manual_seed, xm_seed, ... as loaded
};
Carried &carried()
{
    static Carried c;
    return c;
}

// The GPUs whose generators checkpoints carry (none without CUDA).
int64_t cuda_generators() { return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0; }
at::Generator cuda_generator(int64_t i)
{
    return at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
}

[[noreturn]] void bad(const std::string &what, const std::string &msg) { fail(ACCEL_ERR_DATA_LOSS, what + ": " + msg); }

void check_python_state(const PyObj &v, const std::string &what)
{
    // (version 3, (624 words, index), gauss_next None or float), as random.setstate accepts it.
    if (v.kind != PyObj::Kind::Tuple || v.items.size() != 3 || v.items[0]->kind != PyObj::Kind::Int ||
        v.items[0]->i != 3)
        bad(what, "\"random_state\" is not a (3, state, gauss_next) tuple of Python's random");
    const PyObj &words = *v.items[1];
    if (words.kind != PyObj::Kind::Tuple || words.items.size() != kMtN + 1)
        bad(what, "\"random_state\" does not hold 625 integers");
    for (size_t i = 0; i < words.items.size(); ++i) {
        const PyObj &w = *words.items[i];
        const int64_t hi = i == kMtN ? static_cast<int64_t>(kMtN) : int64_t(0xFFFFFFFF);
        if (w.kind != PyObj::Kind::Int || w.i < 0 || w.i > hi)
            bad(what, "\"random_state\" word " + std::to_string(i) + " is out of range");
    }
    const PyObj &gauss = *v.items[2];
    if (gauss.kind != PyObj::Kind::None && gauss.kind != PyObj::Kind::Float)
        bad(what, "\"random_state\" gauss_next is neither None nor a float");
}

void check_numpy_state(const PyObj &v, const std::string &what)
{
    // ("MT19937", uint32[624], pos, has_gauss, cached_gaussian), as numpy.random.set_state accepts it.
    if (v.kind != PyObj::Kind::Tuple || v.items.size() != 5 || v.items[0]->kind != PyObj::Kind::Str ||
        v.items[0]->s != "MT19937")
        bad(what, "\"numpy_random_seed\" is not NumPy's (\"MT19937\", key, pos, has_gauss, cached_gaussian) state");
    const PyObj &key = *v.items[1];
    if (!ckpt::is_numpy_array(key) || key.items.size() != 5 || ckpt::numpy_code(*key.items[2]) != "u4" ||
        key.items[1]->items.size() != 1 || key.items[1]->items[0]->i != static_cast<int64_t>(kMtN))
        bad(what, "\"numpy_random_seed\" key is not a uint32 array of 624 words");
    const PyObj &pos = *v.items[2], &has_gauss = *v.items[3], &cached = *v.items[4];
    if (pos.kind != PyObj::Kind::Int || pos.i < 0 || pos.i > static_cast<int64_t>(kMtN))
        bad(what, "\"numpy_random_seed\" position is out of range");
    if (has_gauss.kind != PyObj::Kind::Int || (has_gauss.i != 0 && has_gauss.i != 1))
        bad(what, "\"numpy_random_seed\" has_gauss is not 0 or 1");
    if (cached.kind != PyObj::Kind::Float) bad(what, "\"numpy_random_seed\" cached_gaussian is not a float");
}

uint64_t initial_seed()
{
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.current_seed();
}

} // namespace

void set_seed(uint64_t seed, bool deterministic)
{
    at::manual_seed(seed);
    if (deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    auto &c = carried();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.python = python_random_state(seed);
    c.numpy = numpy_random_state(seed);
    c.other.clear(); // set_seed reseeds every device generator too
}

PyRef rng_state_dict()
{
    auto gen = at::detail::getDefaultCPUGenerator();
    at::Tensor state;
    {
        std::lock_guard<std::mutex> lock(gen.mutex());
        state = gen.get_state();
    }
    auto &c = carried();
    std::lock_guard<std::mutex> lock(c.mutex);
    // Never seeded nor loaded: Python's and NumPy's generators as if seeded with LibTorch's initial seed.
    auto d = py_dict();
    py_set(*d, "random_state", c.python ? c.python : python_random_state(initial_seed()));
    py_set(*d, "numpy_random_seed", c.numpy ? c.numpy : numpy_random_state(initial_seed()));
    py_set(*d, "torch_manual_seed", py_tensor(state));
    if (cuda_generators() > 0) {
        auto states = py_list(); // torch.cuda.get_rng_state_all(): one per GPU
        for (int64_t i = 0; i < cuda_generators(); ++i) {
            auto g = cuda_generator(i);
            std::lock_guard<std::mutex> lock(g.mutex());
            states->items.push_back(py_tensor(g.get_state()));
        }
        py_set(*d, "torch_cuda_manual_seed", states);
    } else {
        bool has_cuda = false;
        for (const auto &[k, v] : c.other) has_cuda = has_cuda || k == "torch_cuda_manual_seed";
        if (!has_cuda) py_set(*d, "torch_cuda_manual_seed", py_list()); // no CUDA generator here
    }
    for (const auto &[k, v] : c.other)
        if (cuda_generators() == 0 || k != "torch_cuda_manual_seed") py_set(*d, k, v);
    return d;
}

ApplyState load_rng_state_dict(const PyObj &d, const std::string &what)
{
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    at::Tensor rng;
    PyRef python, numpy;
    std::vector<std::pair<std::string, PyRef>> other;
    std::vector<at::Tensor> cuda; // states for GPUs 0, 1, ...
    for (const auto &[k, v] : d.map) {
        if (k->kind != PyObj::Kind::Str) bad(what, "a key is not a string");
        const std::string &key = k->s;
        if (key == "step") continue; // the Accelerator's
        if (key == "torch_manual_seed") {
            if (v->kind != PyObj::Kind::Tensor || v->tensor.scalar_type() != at::kByte)
                bad(what, "\"torch_manual_seed\" is not a uint8 tensor");
            rng = v->tensor.contiguous();
            try { // on a generator of its own, so that a bad state changes nothing
                at::make_generator<at::CPUGeneratorImpl>().set_state(rng);
            } catch (const c10::Error &) {
                bad(what, "\"torch_manual_seed\" is not a CPU generator state of this LibTorch");
            }
        } else if (key == "random_state") {
            check_python_state(*v, what);
            python = v;
        } else if (key == "numpy_random_seed") {
            check_numpy_state(*v, what);
            numpy = v;
        } else if (key == "torch_cuda_manual_seed") {
            // One uint8 state per CUDA device: restored into this process's GPUs' generators (as
            // torch.cuda.set_rng_state_all, the first ones where the file has fewer); without a GPU it is kept
            // as it is and written back.
            if (v->kind != PyObj::Kind::List) bad(what, "\"torch_cuda_manual_seed\" is not a list");
            for (size_t i = 0; i < v->items.size(); ++i) {
                const auto &t = v->items[i];
                if (t->kind != PyObj::Kind::Tensor || t->tensor.scalar_type() != at::kByte)
                    bad(what, "\"torch_cuda_manual_seed\" holds something other than uint8 tensors");
                if (static_cast<int64_t>(i) < cuda_generators()) {
                    auto g = cuda_generator(static_cast<int64_t>(i));
                    std::lock_guard<std::mutex> lock(g.mutex());
                    if (t->tensor.numel() != g.get_state().numel())
                        bad(what, "\"torch_cuda_manual_seed\"[" + std::to_string(i) + "] is not a CUDA generator "
                                  "state of this LibTorch");
                    cuda.push_back(t->tensor.contiguous());
                }
            }
            other.emplace_back(key, v);
        } else {
            other.emplace_back(key, v); // other devices' generators (xpu, mlu, xla, ...): kept, written back
        }
    }
    return [rng, python, numpy, other, cuda] {
        if (rng.defined()) {
            auto gen = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> lock(gen.mutex());
            gen.set_state(rng);
        }
        for (size_t i = 0; i < cuda.size(); ++i) {
            auto g = cuda_generator(static_cast<int64_t>(i));
            std::lock_guard<std::mutex> lock(g.mutex());
            g.set_state(cuda[i]);
        }
        auto &c = carried();
        std::lock_guard<std::mutex> lock(c.mutex);
        if (python) c.python = python;
        if (numpy) c.numpy = numpy;
        c.other = other;
    };
}

} // namespace accel
