#include "model/lora.hpp"

#include "checkpointing/safetensors.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/out_of_memory.hpp"
#include "model/linear.hpp"
#include "model/lora_linear.hpp"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace accel {

// Model's door for decorators' parameters (model.hpp declares it a friend).
struct LinearDecorating {
    static void insert(Model &model, const std::string &after, NamedTensors added)
    {
        model.insert_parameters_after(after, std::move(added));
    }
};

namespace {

const std::string kPeftPrefix = "base_model.model."; // PEFT's LoraModel wraps the model as base_model.model

bool ends_with(const std::string &s, const std::string &tail)
{
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// PEFT's check_target_module_exists: a list entry matches the module named exactly so or any module whose path
// ends with "." + entry; a string is a regular expression over the whole path.
bool targeted(const config::LoraConfig &c, const std::string &module)
{
    if (c.all_linear) return true;
    if (c.target_regex) return std::regex_match(module, std::regex(*c.target_regex));
    for (const auto &t : c.target_modules)
        if (module == t || ends_with(module, "." + t)) return true;
    return false;
}

// The model's name for a tensor it registered (the same TensorImpl), "" if none.
std::string name_of(const Model &model, const at::Tensor &t)
{
    for (const auto &[name, p] : model.named_parameters())
        if (p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return name;
    return {};
}

struct Adapted {
    std::string module;
    const LoraLinear *layer;
};

std::vector<Adapted> adapted_layers(const Model &model)
{
    std::vector<Adapted> out;
    // linear_slots() only lists pointers; nothing is changed through them here.
    for (const auto &slot : const_cast<Model &>(model).linear_slots())
        if (const auto *l = dynamic_cast<const LoraLinear *>(slot.linear->get())) out.push_back({slot.module, l});
    return out;
}

// PEFT's reset_lora_parameters: A ~ kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)) (gain
// sqrt(2 / (1 + 5)), bound sqrt(3) gain / sqrt(fan_in)); B = 0, so the adapted model starts as the base model.
// Float32 on the base weight's device, as PEFT keeps adapters of a 16-bit base (autocast_adapter_dtype).
std::pair<at::Tensor, at::Tensor> new_adapters(const Linear &base, int64_t r)
{
    at::NoGradGuard no_grad;
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(base.weight().device());
    const double bound = 1.0 / std::sqrt(static_cast<double>(base.in_features()));
    at::Tensor a = at::empty({r, base.in_features()}, opts).uniform_(-bound, bound);
    at::Tensor b = at::zeros({base.out_features(), r}, opts);
    a.requires_grad_(true);
    b.requires_grad_(true);
    return {a, b};
}

// What a lookup by accel name finds: the gathered state when given, else the model's own tensor.
at::Tensor value_of(const Model &model, const NamedTensors *state, const std::string &name, const char *what)
{
    if (state != nullptr) {
        for (const auto &[n, t] : *state)
            if (n == name) return t.detach();
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(what) + ": the state given has no \"" + name + "\"");
    }
    const at::Tensor *t = model.find_tensor(name);
    if (t == nullptr) fail(ACCEL_ERR_INTERNAL, std::string(what) + ": the model has no \"" + name + "\"");
    return t->detach();
}

} // namespace

size_t apply_lora(Model &model, const config::LoraConfig &given, const ParameterFn &on_parameter)
{
    if (model.prepared_by || model.forward_hooks)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "lora: the model is prepared already; add adapters before preparing it");
    std::vector<LinearSlot> slots = model.linear_slots();
    if (slots.empty())
        fail(ACCEL_ERR_UNIMPLEMENTED, "lora: this model has no linear layers accel can adapt (models built from a JSON "
                                      "spec have: gpt, llama and spec linear layers; TorchScript models do not)");
    auto config = std::make_shared<config::LoraConfig>(given);
    if (!config->targets_given) {
        config->target_modules = config::default_lora_targets(model.hf_config_json());
        if (config->target_modules.empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "lora.target_modules: required for this model (PEFT has defaults only for "
                                             "gpt2, llama, mistral and qwen2); e.g. [\"" + slots.front().module + "\"]");
    }
    std::vector<LinearSlot> chosen;
    for (const auto &slot : slots) {
        if (!targeted(*config, slot.module)) continue;
        if (dynamic_cast<const LoraLinear *>(slot.linear->get()) != nullptr)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "lora: " + slot.module + " has LoRA adapters already");
        chosen.push_back(slot);
    }
    if (chosen.empty()) {
        std::string modules;
        for (size_t i = 0; i < slots.size() && i < 8; ++i) modules += (i ? ", " : "") + slots[i].module;
        fail(ACCEL_ERR_INVALID_ARGUMENT, "lora.target_modules: match none of the model's linear layers (" + modules +
                                             (slots.size() > 8 ? ", ..." : "") + ")");
    }
    // A and B are r (in + out) floats per layer: refused before LibTorch is asked when they cannot fit at all.
    uint64_t bytes = 0;
    for (const auto &slot : chosen) {
        const auto n = static_cast<uint64_t>((*slot.linear)->in_features() + (*slot.linear)->out_features());
        uint64_t b = 0;
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(config->r) * sizeof(float), &b) ||
            __builtin_add_overflow(bytes, b, &bytes))
            bytes = UINT64_MAX;
    }
    if (bytes > memory_ceiling())
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "lora.r: " + std::to_string(config->r) + " makes adapters of " +
                                               std::to_string(bytes) + " bytes, more than this machine's memory and "
                                               "swap (" + std::to_string(memory_ceiling()) + " bytes)");
    const Model *self = &model;
    std::set<std::string> trainable;
    for (const auto &slot : chosen) {
        std::shared_ptr<Linear> base = *slot.linear;
        auto [a, b] = new_adapters(*base, config->r);
        if (on_parameter) {
            on_parameter(a);
            on_parameter(b);
        }
        // After the layer's last parameter: a layer's parameters stay contiguous in the model's list.
        const std::string weight_name = name_of(model, base->weight());
        const std::string bias_name = base->bias().defined() ? name_of(model, base->bias()) : std::string();
        if (weight_name.empty()) fail(ACCEL_ERR_INTERNAL, "lora: " + slot.module + "'s weight is not a parameter");
        const std::string a_name = slot.module + ".lora_A.weight", b_name = slot.module + ".lora_B.weight";
        LinearDecorating::insert(model, bias_name.empty() ? weight_name : bias_name, {{a_name, a}, {b_name, b}});
        *slot.linear = std::make_shared<LoraLinear>(base, a, b, config, [self] { return self->is_training(); });
        trainable.insert({a_name, b_name});
        if (config->bias == "lora_only" && !bias_name.empty()) trainable.insert(bias_name);
    }
    // Everything else is frozen, as PEFT's mark_only_lora_as_trainable, through the frozen-parameter API
    // (requires_grad is what every consumer asks: optimizer creation, DDP buckets, the sharding engine, clipping).
    model.set_requires_grad("*", false, "lora");
    if (config->bias == "all")
        for (const auto &[name, p] : model.named_parameters())
            if (ends_with(name, ".bias")) trainable.insert(name);
    for (const auto &name : trainable) model.set_requires_grad(name, true, "lora");
    return chosen.size();
}

bool has_lora(const Model &model) { return !adapted_layers(model).empty(); }

std::set<std::string> adapter_parameter_names(const Model &model)
{
    std::set<std::string> out;
    for (const auto &l : adapted_layers(model)) out.insert({l.module + ".lora_A.weight", l.module + ".lora_B.weight"});
    return out;
}

void load_adapter(Model &model, const std::string &dir_in)
{
    const std::string dir = normalize_path(dir_in);
    const std::string cfg_path = join(dir, "adapter_config.json"), st_path = join(dir, "adapter_model.safetensors");
    if (!is_regular_file(cfg_path)) fail(ACCEL_ERR_NOT_FOUND, "adapter: \"" + dir + "\" has no adapter_config.json");
    if (!is_regular_file(st_path))
        fail(ACCEL_ERR_NOT_FOUND, "adapter: \"" + dir + "\" has no adapter_model.safetensors" +
                                      (exists(join(dir, "adapter_model.bin"))
                                           ? std::string(" (adapter_model.bin, PEFT's pickle form, is not read)")
                                           : std::string()));
    if (has_lora(model)) fail(ACCEL_ERR_FAILED_PRECONDITION, "adapter: the model has LoRA adapters already");
    const config::LoraConfig c = config::parse_peft_adapter_config(read_small_file(cfg_path, 1 << 20), cfg_path);
    const ckpt::LoadedSafetensors file = ckpt::load_safetensors(st_path);
    NamedTensors entries;
    std::set<std::string> given;
    for (const auto &[key, t] : file.tensors) {
        if (key.rfind(kPeftPrefix, 0) != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "adapter: tensor \"" + key + "\" in " + st_path + " is not under PEFT's \"" +
                                                 kPeftPrefix + "\" prefix");
        entries.emplace_back(key.substr(kPeftPrefix.size()), t);
        given.insert(entries.back().first);
    }
    apply_lora(model, c);
    for (const auto &name : adapter_parameter_names(model))
        if (given.count(name) == 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "adapter: " + st_path + " has no \"" + kPeftPrefix + name +
                                                 "\" (adapter_config.json's target_modules adapt that layer)");
    const LoadReport report = model.load_state_dict(entries, false);
    if (!report.unexpected.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "adapter: tensor \"" + kPeftPrefix + report.unexpected.front() + "\" in " +
                                             st_path + " is not a tensor of the model");
}

void save_adapter(const Model &model, const std::string &dir, const AdapterSaveOptions &options)
{
    const std::vector<Adapted> layers = adapted_layers(model);
    if (layers.empty())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "adapter_only: the model has no LoRA adapters (give the spec a \"lora\" object)");
    if (options.state == nullptr) model.check_tensor_access("save_adapter");
    const config::LoraConfig &c = layers.front().layer->config();
    TensorList tensors;
    auto add = [&](const std::string &name) {
        tensors.emplace_back(kPeftPrefix + name, value_of(model, options.state, name, "save_adapter").cpu().contiguous());
    };
    bool conv1d = false;
    for (const auto &l : layers) {
        add(l.module + ".lora_A.weight");
        add(l.module + ".lora_B.weight");
        if (c.bias == "lora_only" && l.layer->bias().defined()) add(l.module + ".bias");
        conv1d = conv1d || l.layer->layout() == Linear::Layout::InOut;
    }
    // PEFT's get_peft_model_state_dict with bias "all": every key with "bias" in it.
    if (c.bias == "all")
        for (const auto &[name, p] : model.named_parameters())
            if (name == "bias" || ends_with(name, ".bias")) add(name);
    make_dirs(dir);
    const ckpt::StringMap metadata = {{"format", "pt"}}; // what PEFT's safe_save_file writes
    ckpt::save_safetensors(join(dir, "adapter_model.safetensors"), tensors, &metadata);
    const std::string task = model.hf_config_json().empty() ? "" : "CAUSAL_LM";
    const std::string json = config::lora_config_to_peft_json(c, c.target_modules, conv1d, task,
                                                              options.base_model_name_or_path);
    write_file_durably(join(dir, "adapter_config.json"), json.data(), json.size());
}

NamedTensors merged_state_dict(const Model &model, const NamedTensors *state)
{
    if (state == nullptr) model.check_tensor_access("merged_state_dict");
    NamedTensors all = state != nullptr ? *state : model.state_dict(true);
    std::map<std::string, const Adapted *> by_weight;
    const std::set<std::string> adapters = adapter_parameter_names(model);
    const std::vector<Adapted> layers = adapted_layers(model);
    for (const auto &l : layers) by_weight[name_of(model, l.layer->weight())] = &l;
    NamedTensors out;
    at::NoGradGuard no_grad;
    for (const auto &[name, t] : all) {
        if (adapters.count(name) != 0) continue;
        auto it = by_weight.find(name);
        if (it == by_weight.end()) {
            out.emplace_back(name, t.detach());
            continue;
        }
        const std::string &m = it->second->module;
        if (!at::isFloatingType(t.scalar_type()))
            fail(ACCEL_ERR_UNIMPLEMENTED, "merge: " + m + " is quantized; merging adapters into a quantized layer "
                                          "(PEFT dequantizes, adds and quantizes again) is not built; save the adapters");
        const at::Tensor a = value_of(model, state, m + ".lora_A.weight", "merge");
        const at::Tensor b = value_of(model, state, m + ".lora_B.weight", "merge");
        at::Tensor delta = it->second->layer->delta_weight(a.to(t.device()), b.to(t.device()));
        out.emplace_back(name, (t.detach().to(at::kFloat) + delta).to(t.scalar_type()));
    }
    return out;
}

} // namespace accel
