// AcceleratedOptimizer::state_dict / load_state_dict: Python's Optimizer.state_dict() form,
// {"state": {index: {...}}, "param_groups": [{hyperparameters..., "params": [indices]}]}, in PyTorch 1.13's
// key names and order (which PyTorch 2.x also loads). Every optimizer type is described once, in kTypes:
// its group hyperparameters and its per-parameter state; reading, writing and reusing state memory are
// written once over that table.
#include "optimizer/accelerated_optimizer.hpp"

#include "common/error.hpp"
#include "optimizer/lomo.hpp"
#include "optimizer/state_key.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <type_traits>
#include <typeinfo>

namespace accel {

namespace {

namespace optim = torch::optim;
using Opts = optim::OptimizerOptions;
using ParamState = optim::OptimizerParamState;
using Pair = std::array<double, 2>; // a number (first), a flag (first != 0) or betas (both)

// One hyperparameter of a parameter group.
struct Option {
    enum class Kind { Number, Flag, Pair, None, False };
    const char *key;
    Kind kind;
    std::function<Pair(const Opts &)> get; // null for the constant kinds (None, False)
    std::function<void(Opts &, Pair)> set;
};

// One tensor of a parameter's state; when the optimizer has none (undefined), it is left out of the
// state dict, or written as None where PyTorch does so.
enum class Absent { Error, Omit, None };
struct StateTensor {
    const char *key;
    Absent absent; // how a missing tensor is read (Error) and written (Omit / None)
    std::function<at::Tensor(const ParamState &)> get;
    std::function<void(ParamState &, at::Tensor)> set;
    // Its shape from its parameter's (null: the same shape; AdaLomo's factored moments differ).
    std::function<std::vector<int64_t>(at::IntArrayRef)> shape = nullptr;
};

struct OptimizerType {
    const std::type_info &options_type;
    std::vector<Option> options;                            // in PyTorch 1.13's key order
    std::function<int64_t(const ParamState &)> get_step;    // null: no "step" (SGD)
    std::function<void(ParamState &, int64_t)> set_step;
    std::vector<StateTensor> tensors;
    std::function<std::unique_ptr<ParamState>()> make_state;
};

#define ACCEL_NUM(O, f) \
    Option{#f, Option::Kind::Number, [](const Opts &o) { return Pair{static_cast<const O &>(o).f(), 0}; }, \
           [](Opts &o, Pair v) { static_cast<O &>(o).f(v[0]); }}
#define ACCEL_FLAG(O, f) \
    Option{#f, Option::Kind::Flag, [](const Opts &o) { return Pair{static_cast<const O &>(o).f() ? 1.0 : 0.0, 0}; }, \
           [](Opts &o, Pair v) { static_cast<O &>(o).f(v[0] != 0); }}
#define ACCEL_PAIR(O, f) \
    Option{#f, Option::Kind::Pair, \
           [](const Opts &o) { auto b = static_cast<const O &>(o).f(); return Pair{std::get<0>(b), std::get<1>(b)}; }, \
           [](Opts &o, Pair v) { static_cast<O &>(o).f(std::make_tuple(v[0], v[1])); }}
#define ACCEL_NONE(k) Option{k, Option::Kind::None, nullptr, nullptr}
#define ACCEL_FALSE(k) Option{k, Option::Kind::False, nullptr, nullptr}
#define ACCEL_TENSOR(S, f, absent) \
    StateTensor{#f, Absent::absent, [](const ParamState &s) { return static_cast<const S &>(s).f(); }, \
                [](ParamState &s, at::Tensor t) { static_cast<S &>(s).f(std::move(t)); }}
#define ACCEL_STEP(S) \
    [](const ParamState &s) { return static_cast<const S &>(s).step(); }, \
        [](ParamState &s, int64_t v) { static_cast<S &>(s).step(v); }
#define ACCEL_MAKE(S) [] { return std::unique_ptr<ParamState>(std::make_unique<S>()); }

StateTensor with_shape(StateTensor t, std::function<std::vector<int64_t>(at::IntArrayRef)> shape)
{
    t.shape = std::move(shape);
    return t;
}
// Adafactor's factors of a parameter [..., rows, cols]: [..., rows] and [..., cols].
std::vector<int64_t> adalomo_row_shape(at::IntArrayRef p) { return {p.begin(), p.end() - 1}; }
std::vector<int64_t> adalomo_col_shape(at::IntArrayRef p)
{
    std::vector<int64_t> s(p.begin(), p.end() - 2);
    s.push_back(p.back());
    return s;
}

const std::vector<OptimizerType> &types()
{
    static const std::vector<OptimizerType> kTypes = [] {
        using AdamWO = optim::AdamWOptions;
        using AdamO = optim::AdamOptions;
        using SgdO = optim::SGDOptions;
        using AdagradO = optim::AdagradOptions;
        using RmsO = optim::RMSpropOptions;
        std::vector<OptimizerType> t;
        t.push_back({typeid(AdamWO),
                     {ACCEL_NUM(AdamWO, lr), ACCEL_PAIR(AdamWO, betas), ACCEL_NUM(AdamWO, eps),
                      ACCEL_NUM(AdamWO, weight_decay), ACCEL_FLAG(AdamWO, amsgrad), ACCEL_NONE("foreach"),
                      ACCEL_FALSE("maximize"), ACCEL_FALSE("capturable")},
                     ACCEL_STEP(optim::AdamWParamState),
                     {ACCEL_TENSOR(optim::AdamWParamState, exp_avg, Error),
                      ACCEL_TENSOR(optim::AdamWParamState, exp_avg_sq, Error),
                      ACCEL_TENSOR(optim::AdamWParamState, max_exp_avg_sq, Omit)},
                     ACCEL_MAKE(optim::AdamWParamState)});
        t.push_back({typeid(AdamO),
                     {ACCEL_NUM(AdamO, lr), ACCEL_PAIR(AdamO, betas), ACCEL_NUM(AdamO, eps),
                      ACCEL_NUM(AdamO, weight_decay), ACCEL_FLAG(AdamO, amsgrad), ACCEL_NONE("foreach"),
                      ACCEL_FALSE("maximize"), ACCEL_FALSE("capturable"), ACCEL_FALSE("differentiable"),
                      ACCEL_FALSE("fused")},
                     ACCEL_STEP(optim::AdamParamState),
                     {ACCEL_TENSOR(optim::AdamParamState, exp_avg, Error),
                      ACCEL_TENSOR(optim::AdamParamState, exp_avg_sq, Error),
                      ACCEL_TENSOR(optim::AdamParamState, max_exp_avg_sq, Omit)},
                     ACCEL_MAKE(optim::AdamParamState)});
        t.push_back({typeid(SgdO),
                     {ACCEL_NUM(SgdO, lr), ACCEL_NUM(SgdO, momentum), ACCEL_NUM(SgdO, dampening),
                      ACCEL_NUM(SgdO, weight_decay), ACCEL_FLAG(SgdO, nesterov), ACCEL_FALSE("maximize"),
                      ACCEL_NONE("foreach"), ACCEL_FALSE("differentiable")},
                     nullptr,
                     nullptr,
                     {ACCEL_TENSOR(optim::SGDParamState, momentum_buffer, None)},
                     ACCEL_MAKE(optim::SGDParamState)});
        t.push_back({typeid(AdagradO),
                     {ACCEL_NUM(AdagradO, lr), ACCEL_NUM(AdagradO, lr_decay), ACCEL_NUM(AdagradO, eps),
                      ACCEL_NUM(AdagradO, weight_decay), ACCEL_NUM(AdagradO, initial_accumulator_value),
                      ACCEL_NONE("foreach"), ACCEL_FALSE("maximize"), ACCEL_FALSE("differentiable")},
                     ACCEL_STEP(optim::AdagradParamState),
                     {ACCEL_TENSOR(optim::AdagradParamState, sum, Error)},
                     ACCEL_MAKE(optim::AdagradParamState)});
        t.push_back({typeid(RmsO),
                     {ACCEL_NUM(RmsO, lr), ACCEL_NUM(RmsO, momentum), ACCEL_NUM(RmsO, alpha), ACCEL_NUM(RmsO, eps),
                      ACCEL_FLAG(RmsO, centered), ACCEL_NUM(RmsO, weight_decay), ACCEL_NONE("foreach"),
                      ACCEL_FALSE("maximize"), ACCEL_FALSE("differentiable")},
                     ACCEL_STEP(optim::RMSpropParamState),
                     {ACCEL_TENSOR(optim::RMSpropParamState, square_avg, Error),
                      ACCEL_TENSOR(optim::RMSpropParamState, momentum_buffer, Omit),
                      ACCEL_TENSOR(optim::RMSpropParamState, grad_avg, Omit)},
                     ACCEL_MAKE(optim::RMSpropParamState)});
        // lomo_optim's param_groups keys (its defaults dict) plus the rest of each one's hyperparameters;
        // clip_grad_norm / clip_grad_value 0 where Python has None. Lomo has no state; AdaLomo's second moments
        // are kept here (lomo_optim keeps them outside the state dict, so its checkpoints lose them).
        using LomoO = LomoOptions;
        using AdaO = AdaLomoOptions;
        t.push_back({typeid(LomoO),
                     {ACCEL_NUM(LomoO, lr), ACCEL_NUM(LomoO, clip_grad_norm), ACCEL_NUM(LomoO, clip_grad_value),
                      ACCEL_NUM(LomoO, weight_decay)},
                     nullptr,
                     nullptr,
                     {},
                     ACCEL_MAKE(AdaLomoParamState)}); // never called: Lomo has no per-parameter state
        t.push_back({typeid(AdaO),
                     {ACCEL_NUM(AdaO, lr),
                      Option{"eps", Option::Kind::Pair,
                             [](const Opts &o) { auto &a = static_cast<const AdaO &>(o); return Pair{a.eps(), a.eps2()}; },
                             [](Opts &o, Pair v) { static_cast<AdaO &>(o).eps(v[0]).eps2(v[1]); }},
                      ACCEL_NUM(AdaO, weight_decay), ACCEL_NUM(AdaO, clip_grad_norm), ACCEL_NUM(AdaO, clip_grad_value),
                      ACCEL_NUM(AdaO, loss_scale), ACCEL_NUM(AdaO, clip_threshold), ACCEL_NUM(AdaO, decay_rate)},
                     ACCEL_STEP(AdaLomoParamState),
                     {ACCEL_TENSOR(AdaLomoParamState, exp_avg_sq, Omit),
                      with_shape(ACCEL_TENSOR(AdaLomoParamState, exp_avg_sq_row, Omit), adalomo_row_shape),
                      with_shape(ACCEL_TENSOR(AdaLomoParamState, exp_avg_sq_col, Omit), adalomo_col_shape)},
                     ACCEL_MAKE(AdaLomoParamState)});
        return t;
    }();
    return kTypes;
}
#undef ACCEL_NUM
#undef ACCEL_FLAG
#undef ACCEL_PAIR
#undef ACCEL_NONE
#undef ACCEL_FALSE
#undef ACCEL_TENSOR
#undef ACCEL_STEP
#undef ACCEL_MAKE

const OptimizerType &type_of(const Opts &o)
{
    for (const auto &t : types())
        if (typeid(o) == t.options_type) return t;
    fail(ACCEL_ERR_INTERNAL, "optimizer: unknown LibTorch optimizer options type");
}


// ---- reading ---------------------------------------------------------------------------------------

struct Reader {
    const std::string &what;

    [[noreturn]] void bad(const std::string &msg) const { fail(ACCEL_ERR_DATA_LOSS, what + ": " + msg); }

    // The two top-level entries of Optimizer.state_dict(): {"state": dict, "param_groups": list}.
    std::pair<const PyObj *, const PyObj *> top_level(const PyObj &sd) const
    {
        if (!sd.is_dict()) bad("not a dict");
        const PyObj *state = sd.get("state");
        const PyObj *groups = sd.get("param_groups");
        if (state == nullptr || !state->is_dict()) bad("no \"state\" dict");
        if (groups == nullptr || groups->kind != PyObj::Kind::List) bad("no \"param_groups\" list");
        return {state, groups};
    }

    double num(const PyObj &x, const std::string &where) const
    {
        if (x.kind == PyObj::Kind::Float) return x.f;
        if (x.kind == PyObj::Kind::Int) return static_cast<double>(x.i);
        bad(where + " is not a number");
    }
    // The group's value of `opt`, or the optimizer's current one when the key is absent (or None for a flag).
    Pair option(const PyObj &g, const Option &opt, const Opts &current, size_t gi) const
    {
        const std::string where = "param_groups[" + std::to_string(gi) + "][\"" + opt.key + "\"]";
        const PyObj *v = g.get(opt.key);
        switch (opt.kind) {
        case Option::Kind::Number:
            return v == nullptr ? opt.get(current) : Pair{num(*v, where), 0};
        case Option::Kind::Flag:
            if (v == nullptr || v->kind == PyObj::Kind::None) return opt.get(current);
            if (v->kind != PyObj::Kind::Bool) bad(where + " is not a boolean");
            return {v->b ? 1.0 : 0.0, 0};
        case Option::Kind::Pair:
            if (v == nullptr) return opt.get(current);
            if ((v->kind != PyObj::Kind::Tuple && v->kind != PyObj::Kind::List) || v->items.size() != 2)
                bad(where + " is not a pair");
            return {num(*v->items[0], where), num(*v->items[1], where)};
        case Option::Kind::False:
            // maximize=True would change the update rule, which LibTorch's optimizers do not have.
            if (std::string(opt.key) == "maximize" && v != nullptr && v->kind == PyObj::Kind::Bool && v->b)
                fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + where + " is True; LibTorch's optimizers cannot maximize");
            return {};
        case Option::Kind::None:
            return {}; // performance switches (foreach, fused, ...): any value gives the same result
        }
        return {};
    }
    int64_t step(const PyObj &st, int64_t index) const
    {
        const PyObj *v = st.get("step");
        if (v == nullptr) return 0;
        if (auto n = py_number(*v)) return static_cast<int64_t>(*n);
        bad("state[" + std::to_string(index) + "][\"step\"] is not a number");
    }
    at::Tensor tensor(const PyObj &st, const StateTensor &f, const at::Tensor &param, int64_t index) const
    {
        const PyObj *v = st.get(f.key);
        if (v == nullptr || v->kind == PyObj::Kind::None) {
            if (f.absent == Absent::Error) bad("state[" + std::to_string(index) + "] has no \"" + f.key + "\"");
            return {};
        }
        if (v->kind != PyObj::Kind::Tensor) bad("state[" + std::to_string(index) + "][\"" + f.key + "\"] is not a tensor");
        at::Tensor t = v->tensor;
        const std::vector<int64_t> want = f.shape && param.dim() >= 2 ? f.shape(param.sizes()) : param.sizes().vec();
        if (t.sizes() != at::IntArrayRef(want))
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": state[" + std::to_string(index) + "][\"" + f.key + "\"] has shape " +
                                                 c10::str(t.sizes()) + ", expected " + c10::str(at::IntArrayRef(want)) +
                                                 " for its parameter of shape " + c10::str(param.sizes()));
        // Still the loaded (possibly file-mapped) tensor; adopt() below gives it memory of its own.
        return t.scalar_type() != param.scalar_type() ? t.to(param.scalar_type()) : t;
    }
};

// The optimizer updates its state in place, so each state tensor needs memory of its own: copy into the
// tensor the optimizer already has when it fits (no allocation, no page faults), else into new memory.
// The copy is only scheduled (it runs with the model's, when the caller runs its copies).
// New memory is made on `device` (the parameter's: a file's tensors come in on the CPU).
at::Tensor adopt(const at::Tensor &current, const at::Tensor &loaded, const at::Device &device, const CopyFn &copy)
{
    if (!loaded.defined()) return loaded;
    at::Tensor dst;
    if (current.defined() && current.device() == device && current.sizes() == loaded.sizes() &&
        current.scalar_type() == loaded.scalar_type() &&
        current.is_contiguous() && current.storage().nbytes() == current.nbytes() && current.storage_offset() == 0 &&
        !current.is_same(loaded))
        dst = current;
    else
        dst = at::empty(loaded.sizes(), loaded.options().device(device).memory_format(at::MemoryFormat::Contiguous));
    copy(dst, loaded);
    return dst;
}

} // namespace

PyRef AcceleratedOptimizer::resident_state_dict() const
{
    optim::Optimizer &o = *optimizer_;
    auto state = py_dict();
    auto groups = py_list();
    int64_t index = 0;
    for (size_t gi = 0; gi < o.param_groups().size(); ++gi) {
        auto &group = o.param_groups()[gi];
        const OptimizerType &type = type_of(group.options());
        auto g = py_dict();
        for (const auto &opt : type.options) {
            switch (opt.kind) {
            case Option::Kind::Number: py_set(*g, opt.key, py_float(opt.get(group.options())[0])); break;
            case Option::Kind::Flag: py_set(*g, opt.key, py_bool(opt.get(group.options())[0] != 0)); break;
            case Option::Kind::Pair: {
                Pair b = opt.get(group.options());
                py_set(*g, opt.key, py_tuple({py_float(b[0]), py_float(b[1])}));
                break;
            }
            case Option::Kind::None: py_set(*g, opt.key, py_none()); break;
            case Option::Kind::False: py_set(*g, opt.key, py_bool(false)); break;
            }
        }
        // After the hyperparameters, as a scheduler's setdefault leaves it in PyTorch's group dict.
        if (gi < initial_lr_.size() && initial_lr_[gi]) py_set(*g, "initial_lr", py_float(*initial_lr_[gi]));
        auto params = py_list();
        for (const auto &p : group.params()) {
            auto it = o.state().find(key_of(p));
            if (it != o.state().end() && it->second) {
                const ParamState &st = *it->second;
                auto d = py_dict();
                // PyTorch 1.13 keeps "step" as a float32 scalar tensor.
                if (type.get_step) py_set(*d, "step", py_tensor(at::scalar_tensor(static_cast<double>(type.get_step(st)), at::kFloat)));
                for (const auto &f : type.tensors) {
                    at::Tensor t = f.get(st);
                    if (t.defined()) py_set(*d, f.key, py_tensor(t));
                    else if (f.absent == Absent::None) py_set(*d, f.key, py_none());
                }
                state->map.emplace_back(py_int(index), d);
            }
            params->items.push_back(py_int(index));
            ++index;
        }
        py_set(*g, "params", params);
        groups->items.push_back(g);
    }
    auto out = py_dict();
    py_set(*out, "state", state);
    py_set(*out, "param_groups", groups);
    return out;
}

ApplyState AcceleratedOptimizer::resident_load_state_dict(const PyObj &sd, const std::string &what, const CopyFn &copy)
{
    Reader r{what};
    const auto [state, groups] = r.top_level(sd);
    optim::Optimizer &o = *optimizer_;
    auto &my_groups = o.param_groups();
    if (groups->items.size() != my_groups.size())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + std::to_string(groups->items.size()) +
                                             " parameter groups, the optimizer has " + std::to_string(my_groups.size()));
    // Check everything and build the new state first; then swap it in.
    struct NewState {
        StateKey key;
        std::unique_ptr<ParamState> state;
        const OptimizerType *type;
        at::Device device; // the parameter's: the state lives beside it
    };
    std::vector<NewState> new_state;
    std::vector<std::function<void()>> apply_options;
    int64_t index = 0;
    for (size_t gi = 0; gi < my_groups.size(); ++gi) {
        const PyObj &g = *groups->items[gi];
        if (!g.is_dict()) r.bad("param_groups[" + std::to_string(gi) + "] is not a dict");
        const PyObj *params = g.get("params");
        if (params == nullptr || params->kind != PyObj::Kind::List)
            r.bad("param_groups[" + std::to_string(gi) + "] has no params list");
        auto &group = my_groups[gi];
        if (params->items.size() != group.params().size())
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": param_groups[" + std::to_string(gi) + "] has " +
                                                 std::to_string(params->items.size()) + " parameters, the optimizer has " +
                                                 std::to_string(group.params().size()));
        Opts &opts = group.options();
        const OptimizerType &type = type_of(opts);
        for (const auto &opt : type.options) {
            Pair v = r.option(g, opt, opts, gi);
            if (opt.set) apply_options.push_back([&opts, set = opt.set, v] { set(opts, v); });
        }
        // PyTorch's load_state_dict takes the saved group whole: "initial_lr" is the file's, or gone.
        std::optional<double> initial_lr;
        if (const PyObj *v = g.get("initial_lr"); v != nullptr && v->kind != PyObj::Kind::None)
            initial_lr = r.num(*v, "param_groups[" + std::to_string(gi) + "][\"initial_lr\"]");
        apply_options.push_back([this, gi, initial_lr] {
            initial_lr_.resize(std::max(initial_lr_.size(), gi + 1));
            initial_lr_[gi] = initial_lr;
        });
        for (size_t pi = 0; pi < group.params().size(); ++pi, ++index) {
            const PyObj &id = *params->items[pi];
            if (id.kind != PyObj::Kind::Int) r.bad("param_groups[" + std::to_string(gi) + "].params holds a non-integer");
            const PyObj *st = state->get_int_key(id.i);
            if (st == nullptr) continue;
            if (!st->is_dict()) r.bad("state[" + std::to_string(id.i) + "] is not a dict");
            const at::Tensor &p = group.params()[pi];
            std::unique_ptr<ParamState> ps = type.make_state();
            if (type.set_step) type.set_step(*ps, r.step(*st, id.i));
            for (const auto &f : type.tensors) f.set(*ps, r.tensor(*st, f, p, id.i));
            new_state.push_back({key_of(p), std::move(ps), &type, p.device()});
        }
    }
    // Every check passed: give each state tensor memory of its own (reusing the current state's).
    for (auto &n : new_state) {
        auto it = o.state().find(n.key);
        const ParamState *old = it != o.state().end() ? it->second.get() : nullptr;
        const ParamState &loaded = *n.state; // (typeid of a plain reference: clang warns on `*n.state`)
        if (old != nullptr && typeid(*old) != typeid(loaded)) old = nullptr;
        for (const auto &f : n.type->tensors)
            f.set(*n.state, adopt(old != nullptr ? f.get(*old) : at::Tensor(), f.get(*n.state), n.device, copy));
    }
    auto shared_state = std::make_shared<decltype(new_state)>(std::move(new_state));
    return [&o, shared_state, apply_options = std::move(apply_options)] {
        for (auto &f : apply_options) f();
        o.state().clear();
        for (auto &n : *shared_state) o.state()[n.key] = std::move(n.state);
    };
}

// ---- sharded training: the unsharded layout -----------------------------------------------------------
// The optimizer over the engine's shards has one state entry per unit; files hold one per parameter.
// Per-element tensors (exp_avg, ...) are joined from every rank and cut at the parameters; values shared
// by a unit ("step", None) are repeated for each of its parameters.

namespace {

bool per_element(const std::string &key, const PyObj &v) { return key != "step" && v.kind == PyObj::Kind::Tensor; }

} // namespace

PyRef AcceleratedOptimizer::state_dict() const
{
    if (!layout_) return inner_state_dict();
    PyRef inner = joined_state(inner_state_dict());
    const parallel::ShardLayout &l = *layout_;
    const PyObj *state = inner->get("state");
    std::vector<PyRef> per_param(l.params.size());
    for (size_t u = 0; u < l.unit_params.size(); ++u) {
        const PyObj *st = state->get_int_key(static_cast<int64_t>(u));
        if (st == nullptr) continue; // the same on every rank: they all stepped (or not)
        std::vector<PyRef> outs;
        for (size_t k = 0; k < l.unit_params[u].size(); ++k) outs.push_back(py_dict());
        for (const auto &[key, value] : st->map) {
            const std::string &name = key->s;
            if (!per_element(name, *value)) {
                for (auto &o : outs) py_set(*o, name, value);
                continue;
            }
            at::Tensor whole = l.gather(u, value->tensor);
            int64_t offset = 0;
            for (size_t k = 0; k < l.unit_params[u].size(); ++k) {
                const at::Tensor &p = l.params[l.unit_params[u][k]];
                py_set(*outs[k], name, py_tensor(whole.narrow(0, offset, p.numel()).view(p.sizes())));
                offset += p.numel();
            }
        }
        for (size_t k = 0; k < l.unit_params[u].size(); ++k) per_param[l.unit_params[u][k]] = outs[k];
    }
    return unsharded_form(*inner, per_param);
}

// With runs (several groups): the LibTorch optimizer's state, one entry per run, joined per unit as it is
// with one group (the shard form); the groups stay as they are (their hyperparameters are what is read).
PyRef AcceleratedOptimizer::joined_state(const PyRef &inner) const
{
    if (runs_.empty()) return inner;
    const PyObj *state = inner->get("state");
    std::vector<std::vector<size_t>> of_unit(layout_->unit_params.size()); // run indices, in shard order
    for (size_t i = 0; i < runs_.size(); ++i) of_unit[runs_[i].unit].push_back(i);
    for (auto &v : of_unit)
        std::sort(v.begin(), v.end(), [this](size_t a, size_t b) { return runs_[a].start < runs_[b].start; });
    auto joined = py_dict();
    for (size_t u = 0; u < of_unit.size(); ++u) {
        const PyObj *first = state->get_int_key(static_cast<int64_t>(of_unit[u].front()));
        if (first == nullptr) continue; // a unit's runs step together (one gradient)
        auto out = py_dict();
        for (const auto &[key, value] : first->map) {
            if (!per_element(key->s, *value)) {
                py_set(*out, key->s, value);
                continue;
            }
            std::vector<at::Tensor> parts;
            for (size_t i : of_unit[u]) {
                const PyObj *st = state->get_int_key(static_cast<int64_t>(i));
                const PyObj *v = st != nullptr ? st->get(key->s) : nullptr;
                if (v == nullptr || v->kind != PyObj::Kind::Tensor)
                    fail(ACCEL_ERR_INTERNAL, "optimizer: the runs of unit " + std::to_string(u) + " differ in their state");
                parts.push_back(v->tensor);
            }
            py_set(*out, key->s, py_tensor(at::cat(parts)));
        }
        joined->map.emplace_back(py_int(static_cast<int64_t>(u)), out);
    }
    auto result = py_dict();
    py_set(*result, "state", joined);
    py_set(*result, "param_groups", std::make_shared<PyObj>(*inner->get("param_groups")));
    return result;
}

// The per-parameter form's top level: state[i] for the parameters that have state (numbered group by
// group, as PyTorch numbers them), and each group with its hyperparameters as they are and its parameters.
PyRef AcceleratedOptimizer::unsharded_form(const PyObj &inner, const std::vector<PyRef> &per_param) const
{
    std::vector<size_t> by_id(per_param.size());
    for (size_t i = 0; i < per_param.size(); ++i) by_id.at(static_cast<size_t>(state_id_.at(i))) = i;
    auto new_state = py_dict();
    for (size_t id = 0; id < by_id.size(); ++id)
        if (per_param[by_id[id]]) new_state->map.emplace_back(py_int(static_cast<int64_t>(id)), per_param[by_id[id]]);
    auto groups = py_list();
    const auto &inner_groups = inner.get("param_groups")->items;
    for (size_t g = 0; g < inner_groups.size(); ++g) {
        auto ids = py_list();
        for (size_t id = 0; id < by_id.size(); ++id)
            if (param_group_[by_id[id]] == g) ids->items.push_back(py_int(static_cast<int64_t>(id)));
        PyRef group = py_dict();
        for (const auto &kv : inner_groups[g]->map)
            py_set(*group, kv.first->s, kv.first->s == "params" ? ids : kv.second);
        groups->items.push_back(group);
    }
    auto out = py_dict();
    py_set(*out, "state", new_state);
    py_set(*out, "param_groups", groups);
    return out;
}

std::pair<int64_t, std::string> AcceleratedOptimizer::state_tensor_name(const std::string &name, const std::string &what)
{
    const size_t dot = name.rfind('.');
    char *end = nullptr;
    const long long id = name.compare(0, 6, "state.") == 0 && dot != std::string::npos && dot > 6
                             ? std::strtoll(name.c_str() + 6, &end, 10)
                             : -1;
    if (id < 0 || end != name.c_str() + dot)
        fail(ACCEL_ERR_DATA_LOSS, what + ": tensor \"" + name + "\" is not named state.{parameter}.{key}");
    return {static_cast<int64_t>(id), name.substr(dot + 1)};
}

// SHARDED_STATE_DICT: the per-parameter form without its per-element tensors, which become this rank's
// pieces, named "state.{parameter}.{key}". No communication.
ShardedState AcceleratedOptimizer::sharded_state_dict() const
{
    if (!layout_) fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: a sharded state dict needs a sharded optimizer");
    PyRef inner = joined_state(inner_state_dict());
    const parallel::ShardLayout &l = *layout_;
    const PyObj *state = inner->get("state");
    ShardedState out;
    out.world_size = l.shard_world;
    out.rank = l.shard_rank;
    std::vector<PyRef> per_param(l.params.size());
    for (size_t u = 0; u < l.unit_params.size(); ++u) {
        const PyObj *st = state->get_int_key(static_cast<int64_t>(u));
        if (st == nullptr) continue;
        for (size_t k : l.unit_params[u]) {
            per_param[k] = py_dict();
            for (const auto &[key, value] : st->map) {
                if (!per_element(key->s, *value)) {
                    py_set(*per_param[k], key->s, value);
                    continue;
                }
                ShardedTensor t;
                t.name = "state." + std::to_string(state_id_[k]) + "." + key->s;
                t.dtype = value->tensor.scalar_type();
                t.shape = l.params[k].sizes().vec();
                for (int32_t r = 0; r < l.shard_world; ++r)
                    if (TensorPiece p = l.piece(k, r); p.numel > 0) t.pieces.push_back(p);
                t.local = l.local_piece(k, value->tensor);
                out.tensors.push_back(std::move(t));
            }
        }
    }
    out.rest = unsharded_form(*inner, per_param);
    return out;
}

namespace {
// Where one optimizer state shard's elements come from (load_shard_form): ranges of a sharded state
// dict's tensors, or slices of a loaded per-parameter state dict's.
struct ShardReads {
    struct Range {
        std::string tensor;    // in a sharded state dict: "state.{parameter}.{key}"
        at::Tensor from;       // or the elements themselves (1-D)
        int64_t offset;        // the first element of the tensor this rank holds
        int64_t start, numel;  // where they go in the shard
    };
    std::vector<Range> reads;  // in packing order
    void run(const ShardedSource *src, const at::Tensor &dst) const;
};
} // namespace

ApplyState AcceleratedOptimizer::load_sharded_state_dict(const PyObj &rest, const ShardedSource &src,
                                                         const std::string &what, const CopyFn &copy)
{
    // Sharded now: each rank reads only its pieces, straight into its shard form.
    if (layout_) return load_shard_form(rest, &src, what, copy);
    // Not sharded: back to the per-parameter form, each tensor read whole into its parameter's entry.
    Reader r{what};
    PyObj sd = rest; // the top level and the state entries are copied, the rest is shared
    auto state = std::make_shared<PyObj>(*r.top_level(sd).first);
    for (auto &kv : state->map) kv.second = std::make_shared<PyObj>(*kv.second);
    for (const auto &name : src.names()) {
        const auto [id, key] = state_tensor_name(name, what);
        PyObj *entry = nullptr;
        for (auto &kv : state->map)
            if (kv.first->kind == PyObj::Kind::Int && kv.first->i == id) entry = kv.second.get();
        if (entry == nullptr || !entry->is_dict()) r.bad("tensor \"" + name + "\" belongs to a parameter without state");
        std::vector<int64_t> shape;
        src.find(name, shape);
        at::Tensor t = at::empty(shape, src.dtype(name));
        src.read(name, 0, t.view({-1}));
        py_set(*entry, key, py_tensor(t));
    }
    for (auto &kv : sd.map)
        if (kv.first->kind == PyObj::Kind::Str && kv.first->s == "state") kv.second = state;
    return load_state_dict(sd, what, copy);
}

ApplyState AcceleratedOptimizer::load_state_dict(const PyObj &sd, const std::string &what, const CopyFn &copy)
{
    if (!layout_) return inner_load_state_dict(sd, what, copy);
    return load_shard_form(sd, nullptr, what, copy);
}

// The shard form: state[u] for unit u, this rank's piece of its parameters' joined tensors, cut from the
// per-parameter form `sd`, or, with `src`, read by range from a sharded state dict whose per-element
// tensors are "state.{parameter}.{key}" (`sd` then holds the rest: step counts and groups).
ApplyState AcceleratedOptimizer::load_shard_form(const PyObj &sd, const ShardedSource *src, const std::string &what,
                                                 const CopyFn &copy)
{
    const parallel::ShardLayout &l = *layout_;
    // Each shard in the shard form is an unwritten placeholder (no pages touched) with a plan of ranges
    // to read or copy; the load below decides where the state goes (the optimizer's current state tensors
    // when they fit) and the ranges are written straight there when the load applies. Building each shard
    // in fresh memory first cost more than the reading itself: page faults (measured: 100 ms to zero one
    // 33 MB shard on this VM, the whole sharded load 5 % of dd's speed).
    std::map<const c10::TensorImpl *, ShardReads> plans;
    std::map<int64_t, std::vector<std::string>> src_keys; // parameter id -> its per-element keys in `src`
    if (src)
        for (const auto &name : src->names()) {
            const auto [id, key] = state_tensor_name(name, what);
            src_keys[id].push_back(key);
        }
    Reader r{what};
    const auto [state, groups] = r.top_level(sd);
    const size_t num_groups = optimizer_->param_groups().size();
    if (groups->items.size() != num_groups)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + std::to_string(groups->items.size()) +
                                             " parameter groups, the optimizer has " + std::to_string(num_groups));
    // Each parameter's id in `sd`: group g's list pairs with the model's parameters of group g, in order.
    std::vector<int64_t> id_of(l.params.size());
    for (size_t gi = 0; gi < num_groups; ++gi) {
        const PyObj &g = *groups->items[gi];
        const std::string where = "param_groups[" + std::to_string(gi) + "]";
        if (!g.is_dict()) r.bad(where + " is not a dict");
        const PyObj *ids = g.get("params");
        if (ids == nullptr || ids->kind != PyObj::Kind::List) r.bad(where + " has no params list");
        size_t pos = 0;
        for (size_t k = 0; k < l.params.size(); ++k) {
            if (param_group_[k] != gi) continue;
            if (pos >= ids->items.size()) {
                pos = SIZE_MAX;
                break;
            }
            const PyObj &id = *ids->items[pos++];
            if (id.kind != PyObj::Kind::Int) r.bad(where + ".params holds a non-integer");
            id_of[k] = id.i;
        }
        const size_t mine = static_cast<size_t>(std::count(param_group_.begin(), param_group_.end(), gi));
        if (pos != ids->items.size())
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + where + " has " + std::to_string(ids->items.size()) +
                                                 " parameters, the optimizer's has " + std::to_string(mine));
    }
    // The shard form: state[u] for unit u, this rank's piece of its parameters' joined tensors.
    auto new_state = py_dict();
    for (size_t u = 0; u < l.unit_params.size(); ++u) {
        std::vector<std::pair<const PyObj *, int64_t>> entries; // (state entry or null, its id)
        const PyObj *first = nullptr;
        for (size_t k : l.unit_params[u]) {
            const PyObj *st = state->get_int_key(id_of[k]);
            if (st != nullptr && !st->is_dict()) r.bad("state[" + std::to_string(id_of[k]) + "] is not a dict");
            entries.emplace_back(st, id_of[k]);
            if (first == nullptr) first = st;
        }
        if (first == nullptr) continue; // none of the unit's parameters has state yet
        auto out = py_dict();
        std::vector<std::string> keys; // per-element
        for (const auto &[key, value] : first->map) {
            const std::string &name = key->s;
            if (per_element(name, *value)) {
                keys.push_back(name);
            } else {
                // Shared by the unit: "step" is the largest (a parameter without gradients steps less under DDP).
                PyRef v = value;
                if (name == "step")
                    for (const auto &e : entries)
                        if (e.first != nullptr)
                            if (const PyObj *s = e.first->get("step"); s != nullptr && py_number(*s).value_or(0.0) > py_number(*v).value_or(0.0))
                                v = std::make_shared<PyObj>(*s);
                py_set(*out, name, v);
            }
        }
        for (const auto &e : entries)
            for (const auto &key : src_keys[e.second])
                if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
        for (const std::string &name : keys) {
            // This rank's shard of the unit's joined tensor, cut straight from each parameter's entry (zeros
            // for padding and for a parameter that had no gradient yet: fresh state).
            at::Tensor shard = at::empty({l.shard_numel[u]}, l.shard_options.requires_grad(false));
            ShardReads plan;
            for (size_t k = 0; k < entries.size(); ++k) {
                const size_t param = l.unit_params[u][k];
                const at::Tensor &p = l.params[param];
                if (src) {
                    const std::string tensor = "state." + std::to_string(entries[k].second) + "." + name;
                    std::vector<int64_t> shape;
                    if (!src->find(tensor, shape)) continue;
                    if (at::IntArrayRef(shape) != p.sizes())
                        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": tensor \"" + tensor + "\" has shape " +
                                                             c10::str(at::IntArrayRef(shape)) + ", its parameter has " +
                                                             c10::str(p.sizes()));
                    const TensorPiece piece = l.piece(param, l.shard_rank);
                    if (piece.numel > 0)
                        plan.reads.push_back({tensor, {}, piece.offset, l.local_piece(param, shard).storage_offset(), piece.numel});
                    continue;
                }
                const PyObj *v = entries[k].first != nullptr ? entries[k].first->get(name) : nullptr;
                if (v == nullptr) continue;
                const std::string where = "state[" + std::to_string(entries[k].second) + "][\"" + name + "\"]";
                if (v->kind != PyObj::Kind::Tensor) r.bad(where + " is not a tensor");
                if (v->tensor.sizes() != p.sizes())
                    fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + where + " has shape " + c10::str(v->tensor.sizes()) +
                                                         ", its parameter has " + c10::str(p.sizes()));
                const TensorPiece piece = l.piece(param, l.shard_rank);
                if (piece.numel > 0)
                    plan.reads.push_back({{}, v->tensor.reshape({-1}).narrow(0, piece.offset, piece.numel), 0,
                                          l.local_piece(param, shard).storage_offset(), piece.numel});
            }
            // Cut into runs (several groups), the shard is read now: the runs' pieces are what the load sees.
            if (runs_.empty()) plans.emplace(shard.unsafeGetTensorImpl(), std::move(plan));
            else plan.run(src, shard);
            py_set(*out, name, py_tensor(shard));
        }
        new_state->map.emplace_back(py_int(static_cast<int64_t>(u)), out);
    }
    // What the LibTorch optimizer steps: the shards (state[u] as it is), or their runs (state[u] cut).
    if (!runs_.empty()) {
        auto run_state = py_dict();
        for (size_t i = 0; i < runs_.size(); ++i) {
            const PyObj *st = new_state->get_int_key(static_cast<int64_t>(runs_[i].unit));
            if (st == nullptr) continue;
            auto piece = py_dict();
            for (const auto &[key, value] : st->map)
                py_set(*piece, key->s, per_element(key->s, *value)
                                           ? py_tensor(value->tensor.narrow(0, runs_[i].start, runs_[i].numel))
                                           : value);
            run_state->map.emplace_back(py_int(static_cast<int64_t>(i)), piece);
        }
        new_state = run_state;
    }
    auto new_groups = py_list();
    for (size_t gi = 0, next = 0; gi < num_groups; ++gi) {
        auto ids = py_list();
        const size_t count = runs_.empty() ? l.unit_params.size() : optimizer_->param_groups()[gi].params().size();
        for (size_t i = 0; i < count; ++i) ids->items.push_back(py_int(static_cast<int64_t>(next++)));
        PyRef group = py_dict();
        for (const auto &kv : groups->items[gi]->map)
            py_set(*group, kv.first->s, kv.first->s == "params" ? ids : kv.second);
        new_groups->items.push_back(group);
    }
    PyObj shard_form;
    shard_form.kind = PyObj::Kind::Dict;
    py_set(shard_form, "state", new_state);
    py_set(shard_form, "param_groups", new_groups);
    // A placeholder's copy becomes its reads into the copy's destination.
    std::vector<std::pair<at::Tensor, ShardReads>> targets;
    const CopyFn read_instead = [&plans, &targets, &copy](const at::Tensor &dst, const at::Tensor &loaded) {
        auto it = plans.find(loaded.unsafeGetTensorImpl());
        if (it == plans.end()) return copy(dst, loaded);
        targets.emplace_back(dst, std::move(it->second));
        plans.erase(it);
    };
    ApplyState install = inner_load_state_dict(shard_form, what, read_instead);
    if (!plans.empty()) // the load converted a placeholder instead of copying it (it must not: same dtype)
        fail(ACCEL_ERR_INTERNAL, what + ": optimizer state shard was not placed by the load");
    std::optional<ShardedSource> source;
    if (src) source = *src;
    return [targets = std::move(targets), source = std::move(source), install = std::move(install)] {
        at::NoGradGuard no_grad;
        for (const auto &[dst, plan] : targets) plan.run(source ? &*source : nullptr, dst);
        install();
    };
}

void ShardReads::run(const ShardedSource *src, const at::Tensor &dst) const
{
    // Ranges are in packing order; what no range covers (padding, parameters without this state) is zero.
    int64_t at = 0;
    for (const auto &r : reads) {
        if (r.start > at) dst.narrow(0, at, r.start - at).zero_();
        if (r.from.defined()) dst.narrow(0, r.start, r.numel).copy_(r.from);
        else src->read(r.tensor, r.offset, dst.narrow(0, r.start, r.numel));
        at = r.start + r.numel;
    }
    if (dst.numel() > at) dst.narrow(0, at, dst.numel() - at).zero_();
}

// ---- state tensors, for offloading -----------------------------------------------------------------

std::vector<at::Tensor> AcceleratedOptimizer::state_tensors(const at::Tensor &param) const
{
    auto it = optimizer_->state().find(key_of(param));
    if (it == optimizer_->state().end()) return {};
    std::vector<at::Tensor> out;
    for (const auto &st : type_of(optimizer_->param_groups()[0].options()).tensors) out.push_back(st.get(*it->second));
    return out;
}

void AcceleratedOptimizer::set_state_tensors(const at::Tensor &param, const std::vector<at::Tensor> &tensors)
{
    auto it = optimizer_->state().find(key_of(param));
    const auto &slots = type_of(optimizer_->param_groups()[0].options()).tensors;
    if (it == optimizer_->state().end() || tensors.size() != slots.size())
        fail(ACCEL_ERR_INTERNAL, "optimizer: state tensors put back for a parameter without that state");
    for (size_t i = 0; i < slots.size(); ++i) slots[i].set(*it->second, tensors[i]);
}

std::vector<at::Tensor> AcceleratedOptimizer::param_state(const at::Tensor &param) const
{
    auto it = optimizer_->state().find(key_of(param));
    if (it == optimizer_->state().end() || !it->second) return {};
    const OptimizerType &type = type_of(optimizer_->param_groups()[0].options());
    std::vector<at::Tensor> out{type.get_step ? at::scalar_tensor(type.get_step(*it->second), at::kLong) : at::Tensor()};
    for (const auto &st : type.tensors) out.push_back(st.get(*it->second));
    return out;
}

void AcceleratedOptimizer::set_param_state(const at::Tensor &param, const std::vector<at::Tensor> &state)
{
    // Over the shards of a sharding engine the state is per unit, not per parameter.
    if (layout_) fail(ACCEL_ERR_INTERNAL, "optimizer: per-parameter state put into a sharded optimizer");
    if (state.empty()) {
        optimizer_->state().erase(key_of(param));
        return;
    }
    const OptimizerType &type = type_of(optimizer_->param_groups()[0].options());
    if (state.size() != type.tensors.size() + 1)
        fail(ACCEL_ERR_INTERNAL, "optimizer: " + std::to_string(state.size()) + " state entries for a parameter of an "
                                 "optimizer with " + std::to_string(type.tensors.size() + 1));
    std::unique_ptr<ParamState> ps = type.make_state();
    if (type.set_step && state[0].defined()) type.set_step(*ps, state[0].item<int64_t>());
    for (size_t i = 0; i < type.tensors.size(); ++i) type.tensors[i].set(*ps, state[i + 1]);
    optimizer_->state()[key_of(param)] = std::move(ps);
}

void AcceleratedOptimizer::move_state_to_parameters()
{
    for (const auto &group : optimizer_->param_groups())
        for (const auto &p : group.params()) {
            std::vector<at::Tensor> st = state_tensors(p);
            bool moved = false;
            for (auto &t : st)
                if (t.defined() && t.device() != p.device()) {
                    t = t.to(p.device());
                    moved = true;
                }
            if (moved) set_state_tensors(p, st);
        }
}

int64_t AcceleratedOptimizer::state_bytes() const
{
    int64_t n = 0;
    for (const auto &group : optimizer_->param_groups())
        for (const auto &p : group.params())
            for (const auto &t : state_tensors(p))
                if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
    return n;
}

} // namespace accel
