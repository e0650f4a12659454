#include "checkpointing/optimizer_state.hpp"

#include "common/error.hpp"
#include "optimizer/accelerated_optimizer.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <set>

namespace accel::ckpt {

namespace optim = torch::optim;

namespace {

std::string key_of(const at::Tensor &p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

PyRef step_tensor(int64_t step) { return py_tensor(at::scalar_tensor(static_cast<double>(step), at::kFloat)); }

PyRef betas(const std::tuple<double, double> &b)
{
    return py_tuple({py_float(std::get<0>(b)), py_float(std::get<1>(b))});
}

// Hyperparameters of one group, in PyTorch 1.13's key order.
void write_group_options(PyObj &g, optim::OptimizerOptions &o)
{
    if (auto *a = dynamic_cast<optim::AdamWOptions *>(&o)) {
        py_set(g, "lr", py_float(a->lr()));
        py_set(g, "betas", betas(a->betas()));
        py_set(g, "eps", py_float(a->eps()));
        py_set(g, "weight_decay", py_float(a->weight_decay()));
        py_set(g, "amsgrad", py_bool(a->amsgrad()));
        py_set(g, "foreach", py_none());
        py_set(g, "maximize", py_bool(false));
        py_set(g, "capturable", py_bool(false));
    } else if (auto *a = dynamic_cast<optim::AdamOptions *>(&o)) {
        py_set(g, "lr", py_float(a->lr()));
        py_set(g, "betas", betas(a->betas()));
        py_set(g, "eps", py_float(a->eps()));
        py_set(g, "weight_decay", py_float(a->weight_decay()));
        py_set(g, "amsgrad", py_bool(a->amsgrad()));
        py_set(g, "foreach", py_none());
        py_set(g, "maximize", py_bool(false));
        py_set(g, "capturable", py_bool(false));
        py_set(g, "differentiable", py_bool(false));
        py_set(g, "fused", py_bool(false));
    } else if (auto *s = dynamic_cast<optim::SGDOptions *>(&o)) {
        py_set(g, "lr", py_float(s->lr()));
        py_set(g, "momentum", py_float(s->momentum()));
        py_set(g, "dampening", py_float(s->dampening()));
        py_set(g, "weight_decay", py_float(s->weight_decay()));
        py_set(g, "nesterov", py_bool(s->nesterov()));
        py_set(g, "maximize", py_bool(false));
        py_set(g, "foreach", py_none());
        py_set(g, "differentiable", py_bool(false));
    } else if (auto *a = dynamic_cast<optim::AdagradOptions *>(&o)) {
        py_set(g, "lr", py_float(a->lr()));
        py_set(g, "lr_decay", py_float(a->lr_decay()));
        py_set(g, "eps", py_float(a->eps()));
        py_set(g, "weight_decay", py_float(a->weight_decay()));
        py_set(g, "initial_accumulator_value", py_float(a->initial_accumulator_value()));
        py_set(g, "foreach", py_none());
        py_set(g, "maximize", py_bool(false));
        py_set(g, "differentiable", py_bool(false));
    } else if (auto *r = dynamic_cast<optim::RMSpropOptions *>(&o)) {
        py_set(g, "lr", py_float(r->lr()));
        py_set(g, "momentum", py_float(r->momentum()));
        py_set(g, "alpha", py_float(r->alpha()));
        py_set(g, "eps", py_float(r->eps()));
        py_set(g, "centered", py_bool(r->centered()));
        py_set(g, "weight_decay", py_float(r->weight_decay()));
        py_set(g, "foreach", py_none());
        py_set(g, "maximize", py_bool(false));
        py_set(g, "differentiable", py_bool(false));
    } else {
        fail(ACCEL_ERR_INTERNAL, "optimizer: unknown LibTorch optimizer options type");
    }
}

// The state of one parameter, or nullptr when it has none yet.
PyRef param_state(optim::OptimizerParamState *st)
{
    if (st == nullptr) return nullptr;
    auto d = py_dict();
    if (auto *a = dynamic_cast<optim::AdamWParamState *>(st)) {
        py_set(*d, "step", step_tensor(a->step()));
        py_set(*d, "exp_avg", py_tensor(a->exp_avg()));
        py_set(*d, "exp_avg_sq", py_tensor(a->exp_avg_sq()));
        if (a->max_exp_avg_sq().defined()) py_set(*d, "max_exp_avg_sq", py_tensor(a->max_exp_avg_sq()));
    } else if (auto *a = dynamic_cast<optim::AdamParamState *>(st)) {
        py_set(*d, "step", step_tensor(a->step()));
        py_set(*d, "exp_avg", py_tensor(a->exp_avg()));
        py_set(*d, "exp_avg_sq", py_tensor(a->exp_avg_sq()));
        if (a->max_exp_avg_sq().defined()) py_set(*d, "max_exp_avg_sq", py_tensor(a->max_exp_avg_sq()));
    } else if (auto *s = dynamic_cast<optim::SGDParamState *>(st)) {
        py_set(*d, "momentum_buffer", s->momentum_buffer().defined() ? py_tensor(s->momentum_buffer()) : py_none());
    } else if (auto *a = dynamic_cast<optim::AdagradParamState *>(st)) {
        py_set(*d, "step", step_tensor(a->step()));
        py_set(*d, "sum", py_tensor(a->sum()));
    } else if (auto *r = dynamic_cast<optim::RMSpropParamState *>(st)) {
        py_set(*d, "step", step_tensor(r->step()));
        py_set(*d, "square_avg", py_tensor(r->square_avg()));
        if (r->momentum_buffer().defined()) py_set(*d, "momentum_buffer", py_tensor(r->momentum_buffer()));
        if (r->grad_avg().defined()) py_set(*d, "grad_avg", py_tensor(r->grad_avg()));
    } else {
        fail(ACCEL_ERR_INTERNAL, "optimizer: unknown LibTorch parameter state type");
    }
    return d;
}

// ---- reading ---------------------------------------------------------------------------------------

struct Reader {
    const std::string &what;

    [[noreturn]] void bad(const std::string &msg) const { fail(ACCEL_ERR_DATA_LOSS, what + ": " + msg); }

    double number(const PyObj &g, const char *key, double def) const
    {
        const PyObj *v = g.get(key);
        if (v == nullptr) return def;
        if (v->kind == PyObj::Kind::Float) return v->f;
        if (v->kind == PyObj::Kind::Int) return static_cast<double>(v->i);
        bad(std::string("param_groups: \"") + key + "\" is not a number");
    }
    bool flag(const PyObj &g, const char *key, bool def) const
    {
        const PyObj *v = g.get(key);
        if (v == nullptr || v->kind == PyObj::Kind::None) return def;
        if (v->kind != PyObj::Kind::Bool) bad(std::string("param_groups: \"") + key + "\" is not a boolean");
        return v->b;
    }
    std::tuple<double, double> pair(const PyObj &g, const char *key, std::tuple<double, double> def) const
    {
        const PyObj *v = g.get(key);
        if (v == nullptr) return def;
        if ((v->kind != PyObj::Kind::Tuple && v->kind != PyObj::Kind::List) || v->items.size() != 2)
            bad(std::string("param_groups: \"") + key + "\" is not a pair");
        auto num = [&](const PyObj &x) {
            if (x.kind == PyObj::Kind::Float) return x.f;
            if (x.kind == PyObj::Kind::Int) return static_cast<double>(x.i);
            bad(std::string("param_groups: \"") + key + "\" holds a non-number");
        };
        return {num(*v->items[0]), num(*v->items[1])};
    }
    int64_t step(const PyObj &st, int64_t index) const
    {
        const PyObj *v = st.get("step");
        if (v == nullptr) return 0;
        if (v->kind == PyObj::Kind::Int) return v->i;
        if (v->kind == PyObj::Kind::Float) return static_cast<int64_t>(v->f);
        if (v->kind == PyObj::Kind::Tensor && v->tensor.numel() == 1)
            return static_cast<int64_t>(v->tensor.to(at::kDouble).item<double>());
        bad("state[" + std::to_string(index) + "][\"step\"] is not a number");
    }
    at::Tensor tensor(const PyObj &st, const char *key, const at::Tensor &param, int64_t index, bool required)
    {
        const PyObj *v = st.get(key);
        if (v == nullptr || v->kind == PyObj::Kind::None) {
            if (required) bad("state[" + std::to_string(index) + "] has no \"" + key + "\"");
            return {};
        }
        if (v->kind != PyObj::Kind::Tensor) bad("state[" + std::to_string(index) + "][\"" + key + "\"] is not a tensor");
        at::Tensor t = v->tensor;
        if (t.sizes() != param.sizes())
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": state[" + std::to_string(index) + "][\"" + key + "\"] has shape " +
                                                 c10::str(t.sizes()) + ", its parameter has " + c10::str(param.sizes()));
        // Still the loaded (possibly file-mapped) tensor; adopt() below gives it memory of its own.
        return t.scalar_type() != param.scalar_type() ? t.to(param.scalar_type()) : t;
    }
};

// The optimizer updates its state in place, so each state tensor needs memory of its own: copy into the
// tensor the optimizer already has when it fits (no allocation, no page faults), else into new memory.
// The copy is only scheduled (it runs with the model's, in CopyBatch::run).
at::Tensor adopt(const at::Tensor &current, const at::Tensor &loaded, CopyBatch &batch)
{
    if (!loaded.defined()) return loaded;
    at::Tensor dst;
    if (current.defined() && current.sizes() == loaded.sizes() && current.scalar_type() == loaded.scalar_type() &&
        current.is_contiguous() && current.storage().nbytes() == current.nbytes() && current.storage_offset() == 0 &&
        !current.is_same(loaded))
        dst = current;
    else
        dst = at::empty(loaded.sizes(), loaded.options().memory_format(at::MemoryFormat::Contiguous));
    batch.add(dst, loaded);
    return dst;
}

// Gives every tensor of `fresh` its own memory, reusing those of `old` (same optimizer type) when they fit.
#define ACCEL_ADOPT(field) n->field(adopt(o != nullptr ? o->field() : at::Tensor(), n->field(), batch))
void adopt_state(optim::OptimizerParamState *old, optim::OptimizerParamState &fresh, CopyBatch &batch)
{
    if (auto *n = dynamic_cast<optim::AdamWParamState *>(&fresh)) {
        auto *o = dynamic_cast<optim::AdamWParamState *>(old);
        ACCEL_ADOPT(exp_avg);
        ACCEL_ADOPT(exp_avg_sq);
        ACCEL_ADOPT(max_exp_avg_sq);
    } else if (auto *n = dynamic_cast<optim::AdamParamState *>(&fresh)) {
        auto *o = dynamic_cast<optim::AdamParamState *>(old);
        ACCEL_ADOPT(exp_avg);
        ACCEL_ADOPT(exp_avg_sq);
        ACCEL_ADOPT(max_exp_avg_sq);
    } else if (auto *n = dynamic_cast<optim::SGDParamState *>(&fresh)) {
        auto *o = dynamic_cast<optim::SGDParamState *>(old);
        ACCEL_ADOPT(momentum_buffer);
    } else if (auto *n = dynamic_cast<optim::AdagradParamState *>(&fresh)) {
        auto *o = dynamic_cast<optim::AdagradParamState *>(old);
        ACCEL_ADOPT(sum);
    } else if (auto *n = dynamic_cast<optim::RMSpropParamState *>(&fresh)) {
        auto *o = dynamic_cast<optim::RMSpropParamState *>(old);
        ACCEL_ADOPT(square_avg);
        ACCEL_ADOPT(momentum_buffer);
        ACCEL_ADOPT(grad_avg);
    }
}
#undef ACCEL_ADOPT

} // namespace

PyRef optimizer_state_dict(const AcceleratedOptimizer &optimizer)
{
    optim::Optimizer &o = optimizer.torch_optimizer();
    auto state = py_dict();
    auto groups = py_list();
    int64_t index = 0;
    for (auto &group : o.param_groups()) {
        auto g = py_dict();
        write_group_options(*g, group.options());
        auto params = py_list();
        for (const auto &p : group.params()) {
            auto it = o.state().find(key_of(p));
            if (it != o.state().end()) {
                if (PyRef s = param_state(it->second.get())) state->map.emplace_back(py_int(index), s);
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

std::function<void()> load_optimizer_state_dict(AcceleratedOptimizer &optimizer, const PyObj &sd,
                                                const std::string &what, CopyBatch &batch)
{
    Reader r{what};
    if (!sd.is_dict()) r.bad("not a dict");
    const PyObj *state = sd.get("state");
    const PyObj *groups = sd.get("param_groups");
    if (state == nullptr || !state->is_dict()) r.bad("no \"state\" dict");
    if (groups == nullptr || groups->kind != PyObj::Kind::List) r.bad("no \"param_groups\" list");
    optim::Optimizer &o = optimizer.torch_optimizer();
    auto &my_groups = o.param_groups();
    if (groups->items.size() != my_groups.size())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": " + std::to_string(groups->items.size()) +
                                             " parameter groups, the optimizer has " + std::to_string(my_groups.size()));
    // Check everything and build the new state first; then swap it in.
    std::vector<std::pair<std::string, std::unique_ptr<optim::OptimizerParamState>>> new_state;
    std::vector<std::function<void()>> apply_options;
    int64_t index = 0;
    for (size_t gi = 0; gi < my_groups.size(); ++gi) {
        const PyObj &g = *groups->items[gi];
        if (!g.is_dict()) r.bad("param_groups[" + std::to_string(gi) + "] is not a dict");
        const PyObj *params = g.get("params");
        if (params == nullptr || params->kind != PyObj::Kind::List) r.bad("param_groups[" + std::to_string(gi) + "] has no params list");
        auto &group = my_groups[gi];
        if (params->items.size() != group.params().size())
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": param_groups[" + std::to_string(gi) + "] has " +
                                                 std::to_string(params->items.size()) + " parameters, the optimizer has " +
                                                 std::to_string(group.params().size()));
        auto &opts = group.options();
        if (auto *a = dynamic_cast<optim::AdamWOptions *>(&opts)) {
            double lr = r.number(g, "lr", a->lr()), eps = r.number(g, "eps", a->eps()),
                   wd = r.number(g, "weight_decay", a->weight_decay());
            auto b = r.pair(g, "betas", a->betas());
            bool ams = r.flag(g, "amsgrad", a->amsgrad());
            apply_options.push_back([=] { a->lr(lr).eps(eps).weight_decay(wd).betas(b).amsgrad(ams); });
        } else if (auto *a = dynamic_cast<optim::AdamOptions *>(&opts)) {
            double lr = r.number(g, "lr", a->lr()), eps = r.number(g, "eps", a->eps()),
                   wd = r.number(g, "weight_decay", a->weight_decay());
            auto b = r.pair(g, "betas", a->betas());
            bool ams = r.flag(g, "amsgrad", a->amsgrad());
            apply_options.push_back([=] { a->lr(lr).eps(eps).weight_decay(wd).betas(b).amsgrad(ams); });
        } else if (auto *s = dynamic_cast<optim::SGDOptions *>(&opts)) {
            double lr = r.number(g, "lr", s->lr()), m = r.number(g, "momentum", s->momentum()),
                   d = r.number(g, "dampening", s->dampening()), wd = r.number(g, "weight_decay", s->weight_decay());
            bool nest = r.flag(g, "nesterov", s->nesterov());
            apply_options.push_back([=] { s->lr(lr).momentum(m).dampening(d).weight_decay(wd).nesterov(nest); });
        } else if (auto *a = dynamic_cast<optim::AdagradOptions *>(&opts)) {
            double lr = r.number(g, "lr", a->lr()), ld = r.number(g, "lr_decay", a->lr_decay()),
                   eps = r.number(g, "eps", a->eps()), wd = r.number(g, "weight_decay", a->weight_decay()),
                   iav = r.number(g, "initial_accumulator_value", a->initial_accumulator_value());
            apply_options.push_back([=] { a->lr(lr).lr_decay(ld).eps(eps).weight_decay(wd).initial_accumulator_value(iav); });
        } else if (auto *rm = dynamic_cast<optim::RMSpropOptions *>(&opts)) {
            double lr = r.number(g, "lr", rm->lr()), m = r.number(g, "momentum", rm->momentum()),
                   al = r.number(g, "alpha", rm->alpha()), eps = r.number(g, "eps", rm->eps()),
                   wd = r.number(g, "weight_decay", rm->weight_decay());
            bool c = r.flag(g, "centered", rm->centered());
            apply_options.push_back([=] { rm->lr(lr).momentum(m).alpha(al).eps(eps).weight_decay(wd).centered(c); });
        }
        for (size_t pi = 0; pi < group.params().size(); ++pi, ++index) {
            const PyObj &id = *params->items[pi];
            if (id.kind != PyObj::Kind::Int) r.bad("param_groups[" + std::to_string(gi) + "].params holds a non-integer");
            const PyObj *st = state->get_int_key(id.i);
            if (st == nullptr) continue;
            if (!st->is_dict()) r.bad("state[" + std::to_string(id.i) + "] is not a dict");
            const at::Tensor &p = group.params()[pi];
            std::unique_ptr<optim::OptimizerParamState> ps;
            if (dynamic_cast<optim::AdamWOptions *>(&opts)) {
                auto s = std::make_unique<optim::AdamWParamState>();
                s->step(r.step(*st, id.i));
                s->exp_avg(r.tensor(*st, "exp_avg", p, id.i, true));
                s->exp_avg_sq(r.tensor(*st, "exp_avg_sq", p, id.i, true));
                s->max_exp_avg_sq(r.tensor(*st, "max_exp_avg_sq", p, id.i, false));
                ps = std::move(s);
            } else if (dynamic_cast<optim::AdamOptions *>(&opts)) {
                auto s = std::make_unique<optim::AdamParamState>();
                s->step(r.step(*st, id.i));
                s->exp_avg(r.tensor(*st, "exp_avg", p, id.i, true));
                s->exp_avg_sq(r.tensor(*st, "exp_avg_sq", p, id.i, true));
                s->max_exp_avg_sq(r.tensor(*st, "max_exp_avg_sq", p, id.i, false));
                ps = std::move(s);
            } else if (dynamic_cast<optim::SGDOptions *>(&opts)) {
                auto s = std::make_unique<optim::SGDParamState>();
                s->momentum_buffer(r.tensor(*st, "momentum_buffer", p, id.i, false));
                ps = std::move(s);
            } else if (dynamic_cast<optim::AdagradOptions *>(&opts)) {
                auto s = std::make_unique<optim::AdagradParamState>();
                s->step(r.step(*st, id.i));
                s->sum(r.tensor(*st, "sum", p, id.i, true));
                ps = std::move(s);
            } else if (dynamic_cast<optim::RMSpropOptions *>(&opts)) {
                auto s = std::make_unique<optim::RMSpropParamState>();
                s->step(r.step(*st, id.i));
                s->square_avg(r.tensor(*st, "square_avg", p, id.i, true));
                s->momentum_buffer(r.tensor(*st, "momentum_buffer", p, id.i, false));
                s->grad_avg(r.tensor(*st, "grad_avg", p, id.i, false));
                ps = std::move(s);
            } else {
                fail(ACCEL_ERR_INTERNAL, "optimizer: unknown LibTorch optimizer type");
            }
            new_state.emplace_back(key_of(p), std::move(ps));
        }
    }
    for (auto &[k, v] : new_state) {
        auto it = o.state().find(k);
        adopt_state(it != o.state().end() ? it->second.get() : nullptr, *v, batch);
    }
    auto shared_state = std::make_shared<decltype(new_state)>(std::move(new_state));
    return [&o, shared_state, apply_options = std::move(apply_options)] {
        for (auto &f : apply_options) f();
        o.state().clear();
        for (auto &[k, v] : *shared_state) o.state()[k] = std::move(v);
    };
}

} // namespace accel::ckpt
