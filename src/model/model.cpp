#include "model/model.hpp"

#include "big_modeling/empty_init.hpp"
#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <fnmatch.h>
#include <map>
#include <set>

namespace accel {

std::vector<at::Tensor> Model::parameters() const
{
    std::vector<at::Tensor> out;
    out.reserve(parameters_.size());
    for (const auto &p : parameters_) out.push_back(p.second);
    return out;
}

const at::Tensor *Model::find_tensor(const std::string &key) const
{
    if (const at::Tensor *t = find_own(key)) return t;
    const std::string other = canonical_key(key);
    if (other.empty() || other == key) return nullptr;
    for (const auto *list : {&parameters_, &buffers_})
        for (const auto &e : *list)
            if (e.first == other) return &e.second;
    return nullptr;
}

void Model::set_activation_checkpointing(const std::vector<bool> &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "activation_checkpointing: this model has no layers to recompute (a TorchScript "
                                  "model; models built from a JSON spec have)");
}

// Default: parameters named "<layer index>.<name>" (torch::nn::Sequential's naming).
std::vector<size_t> Model::parameter_layers() const
{
    std::vector<size_t> out;
    if (layer_types().empty()) return out;
    for (const auto &p : parameters_) {
        size_t dot = p.first.find('.');
        try {
            out.push_back(static_cast<size_t>(std::stoul(p.first.substr(0, dot))));
        } catch (const std::exception &) {
            fail(ACCEL_ERR_INTERNAL, "model: parameter " + p.first + " does not name its layer");
        }
    }
    return out;
}

size_t Model::set_requires_grad(const std::string &glob, bool requires_grad, const std::string &what)
{
    if (prepared_by)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: set_requires_grad(\"" + glob + "\") after the model was prepared; "
                                            "freeze parameters before accel_accelerator_prepare (and before "
                                            "accel_optimizer_create), as the wrappers decide then what trains");
    for (const auto &h : holders_)
        if (!h.expired())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "model: set_requires_grad(\"" + glob + "\") while an optimizer holds "
                                                "the model's parameters; freeze parameters before accel_optimizer_create "
                                                "(free the optimizer and create a new one to change them)");
    std::vector<at::Tensor *> matched;
    for (auto &[name, p] : parameters_)
        if (fnmatch(glob.c_str(), name.c_str(), 0) == 0) matched.push_back(&p);
    // A literal name that is another spelling of a parameter (a tied head's "lm_head.weight") means that one.
    if (matched.empty()) {
        const std::string own = canonical_key(glob);
        for (auto &[name, p] : parameters_)
            if (!own.empty() && name == own) matched.push_back(&p);
    }
    if (matched.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": \"" + glob + "\" matches no parameter of the model (names as "
                                         "accel_model_get_parameter_name lists them; `*` matches any characters)");
    for (at::Tensor *p : matched) {
        if (requires_grad && !p->is_floating_point())
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": \"" + glob + "\" matches a parameter of dtype " +
                                                 std::string(c10::toString(p->scalar_type())) +
                                                 ", which cannot require gradients");
    }
    for (at::Tensor *p : matched) {
        p->requires_grad_(requires_grad);
        if (!requires_grad) p->mutable_grad() = at::Tensor(); // not counted by clipping, not stepped
    }
    return matched.size();
}

std::shared_ptr<void> Model::hold_parameters()
{
    auto token = std::make_shared<char>(0);
    holders_.erase(std::remove_if(holders_.begin(), holders_.end(), [](const auto &h) { return h.expired(); }),
                   holders_.end());
    holders_.push_back(token);
    return token;
}

void Model::enable_fp8(const config::FP8RecipeKwargs &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "model: mixed_precision \"fp8\" needs a model built from a JSON spec (its linear "
                                  "layers run through accel's FP8 emulation); this model type does not support it");
}

void Model::set_compile_backend(const std::string &backend)
{
    if (backend == "NO" || backend == "EAGER") return;
    fail(ACCEL_ERR_UNIMPLEMENTED, "dynamo_backend: \"" + backend + "\" needs a TorchScript model "
                                  "(accel_model_create_from_torchscript): it is TorchScript's freeze + "
                                  "optimize_for_inference, and this model is built from torch::nn modules (a JSON "
                                  "spec or a pretrained folder), which have no graph to freeze");
}

const at::Tensor *Model::find_own(const std::string &key) const
{
    for (const auto *list : {&parameters_, &buffers_})
        for (const auto &e : *list)
            if (e.first == key) return &e.second;
    return nullptr;
}

at::Device Model::device() const
{
    for (const auto &p : parameters_) return p.second.device();
    return at::Device(at::kCPU);
}

void Model::to(const at::Device &device)
{
    // Each tensor object moves once (a tied weight is one object under two names). Two objects over one
    // storage (views of each other) would come apart if each moved alone: refused rather than untied.
    std::map<const void *, std::string> storages;
    std::set<const void *> objects;
    for (const auto *list : {&parameters_, &buffers_})
        for (const auto &[name, t] : *list) {
            if (!t.defined() || t.device() == device || !objects.insert(t.unsafeGetTensorImpl()).second) continue;
            auto [it, fresh] = storages.emplace(t.storage().data(), name);
            if (!fresh && t.storage().nbytes() > 0)
                fail(ACCEL_ERR_UNIMPLEMENTED, "model: \"" + name + "\" and \"" + it->second +
                                                  "\" are different tensors over one storage; moving such a model "
                                                  "to " + device.str() + " is not supported");
        }
    if (objects.empty()) return; // nothing to move
    ++placement_;
    for (auto *list : {&parameters_, &buffers_})
        for (auto &entry : *list) {
            at::Tensor &t = entry.second;
            if (!t.defined() || t.device() == device) continue;
            at::Tensor grad = t.grad();
            t.set_data(t.detach().to(device));
            if (grad.defined()) t.mutable_grad() = grad.to(device);
        }
}

void Model::set_tensors(NamedTensors parameters, NamedTensors buffers)
{
    parameters_ = std::move(parameters);
    buffers_ = std::move(buffers);
}

void Model::insert_parameters_after(const std::string &after, NamedTensors added)
{
    auto it = std::find_if(parameters_.begin(), parameters_.end(), [&](const auto &p) { return p.first == after; });
    if (it == parameters_.end()) fail(ACCEL_ERR_INTERNAL, "model: no parameter \"" + after + "\" to insert after");
    std::string previous = after;
    for (const auto &[name, t] : added) {
        if (find_own(name) != nullptr) fail(ACCEL_ERR_INTERNAL, "model: parameter \"" + name + "\" exists already");
        inserted_.emplace_back(name, previous);
        previous = name;
    }
    parameters_.insert(it + 1, added.begin(), added.end());
}

std::vector<ModuleUnit> Model::with_inserted_parameters(std::vector<ModuleUnit> units) const
{
    for (const auto &[name, previous] : inserted_)
        for (auto &u : units) {
            auto at = std::find(u.parameter_names.begin(), u.parameter_names.end(), previous);
            if (at == u.parameter_names.end()) continue;
            u.parameter_names.insert(at + 1, name);
            break;
        }
    return units;
}

NamedTensors Model::state_dict(bool dedupe_shared) const
{
    NamedTensors out;
    std::set<std::pair<const void *, size_t>> seen;
    for (const auto *list : {&parameters_, &buffers_}) {
        for (const auto &[name, t] : *list) {
            if (!t.defined()) continue;
            if (dedupe_shared && t.numel() > 0) {
                // The same memory, not the same storage: sharded parameters are views of one flat buffer.
                auto key = std::make_pair(static_cast<const void *>(t.data_ptr()), t.nbytes());
                if (!seen.insert(key).second) continue; // tied weights are saved once, under the first name
            }
            out.emplace_back(name, t.detach());
        }
    }
    return out;
}

namespace {

std::string json_list(const std::vector<std::string> &v)
{
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_quote(v[i]);
    return out + "]";
}

std::string joined(const std::vector<std::string> &v)
{
    std::string out;
    for (const auto &k : v) out += (out.empty() ? "" : ", ") + k;
    return out;
}

} // namespace

std::string LoadReport::json() const
{
    std::string tied = "[";
    for (size_t i = 0; i < aliased.size(); ++i)
        tied += (i ? ", " : "") + std::string("{\"key\": ") + json_quote(aliased[i].first) +
                ", \"loaded_into\": " + json_quote(aliased[i].second) + "}";
    return "{\"missing_keys\": " + json_list(missing) + ", \"unexpected_keys\": " + json_list(unexpected) +
           ", \"tied_keys\": " + tied + "]}";
}

std::string LoadReport::text() const
{
    std::string out;
    if (!unexpected.empty()) out += "unexpected keys: " + joined(unexpected);
    if (!missing.empty()) out += std::string(out.empty() ? "" : "; ") + "missing keys: " + joined(missing);
    for (const auto &[from, to] : aliased)
        out += std::string(out.empty() ? "" : "; ") + "\"" + from + "\" was loaded into its tied tensor \"" + to + "\"";
    return out;
}

namespace {
// Where the model's materialised tensors are (the CPU when none is).
at::Device materialized_device(const Model &model)
{
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list)
            if (e.second.defined() && !e.second.is_meta()) return e.second.device();
    return at::Device(at::kCPU);
}
} // namespace

void Model::check_materialized(const char *what) const
{
    const std::string name = big_modeling::first_meta_tensor(*this);
    if (!name.empty())
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string(what) + ": the model's \"" + name +
                 "\" is on the meta device (built with empty_init) and holds no values yet; load weights into "
                 "the model first (accel_model_load_checkpoint, accel_model_load_state_dict)");
}

LoadReport Model::load_state_dict(const NamedTensors &entries, bool strict, const CopyFn &copy)
{
    std::vector<std::pair<const at::Tensor *, const at::Tensor *>> plan;
    std::set<std::string> given, raw;
    LoadReport report;
    for (const auto &e : entries) {
        if (!raw.insert(e.first).second) fail(ACCEL_ERR_INVALID_ARGUMENT, "keys: \"" + e.first + "\" is given twice");
    }
    for (const auto &e : entries) {
        // A key that is not the model's own may be another name of one of its tensors (canonical_key):
        // it is skipped when the file also holds the tensor under its own name (a tied weight saved
        // twice loads from the model's own entry, or from the first alias), and an entry the model does not
        // need is skipped.
        std::string key = e.first;
        if (find_own(key) == nullptr) {
            key = canonical_key(e.first);
            if (key.empty() || (key != e.first && (raw.count(key) != 0 || given.count(key) != 0))) continue;
        }
        given.insert(key);
        const at::Tensor *dst = find_own(key);
        if (dst == nullptr) {
            report.unexpected.push_back(e.first);
            continue;
        }
        if (key != e.first) report.aliased.emplace_back(e.first, key);
        if (!e.second.defined())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tensors: the tensor for \"" + e.first + "\" is NULL");
        if (dst->sizes() != e.second.sizes())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tensors: \"" + e.first + "\" has shape " + c10::str(e.second.sizes()) +
                                                 ", the model expects " + c10::str(dst->sizes()));
        if (e.second.is_complex() || e.second.scalar_type() == at::kBool)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "tensors: \"" + e.first + "\" has dtype " +
                                                 std::string(c10::toString(e.second.scalar_type())) +
                                                 ", which cannot be converted to " + c10::toString(dst->scalar_type()));
        plan.emplace_back(dst, &e.second);
    }
    for (const auto *list : {&parameters_, &buffers_})
        for (const auto &e : *list)
            if (given.count(e.first) == 0) report.missing.push_back(e.first);
    if (strict && (!report.unexpected.empty() || !report.missing.empty())) {
        LoadReport keys = report;
        keys.aliased.clear();
        fail(ACCEL_ERR_INVALID_ARGUMENT, "keys: strict load failed; " + keys.text());
    }
    // Empty init: a tensor still on the meta device gets memory (where the model's other tensors are) before
    // its values are copied in.
    const at::Device home = materialized_device(*this);
    for (auto &[dst, src] : plan) {
        big_modeling::materialize(*dst, home);
        if (copy) {
            copy(*dst, *src);
        } else {
            at::NoGradGuard no_grad;
            const_cast<at::Tensor *>(dst)->copy_(*src);
        }
    }
    return report;
}

} // namespace accel
