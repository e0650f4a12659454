#include "quantization/quantize_model.hpp"

#include "big_modeling/device_map.hpp"
#include "big_modeling/device_map_infer.hpp"
#include "big_modeling/dispatch.hpp"
#include "big_modeling/empty_init.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "model/linear.hpp"
#include "model/lora.hpp"
#include "model/lora_linear.hpp"
#include "quantization/bnb_4bit.hpp"
#include "quantization/bnb_8bit.hpp"
#include "quantization/bnb_linear.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

namespace accel {

// Model's door for the quantization state (model.hpp declares it a friend): appended to the buffers.
struct ModelQuantizing {
    static void add_buffers(Model &model, const NamedTensors &added)
    {
        NamedTensors buffers = model.named_buffers();
        buffers.insert(buffers.end(), added.begin(), added.end());
        model.set_tensors(model.named_parameters(), std::move(buffers));
    }
};

namespace {

bool is_quantized_layer(const Linear *l)
{
    // The layers made here compute from a weight that is not floating point.
    return l != nullptr && !at::isFloatingType(l->weight().scalar_type());
}

// Accelerate's match (_replace_with_bnb_layers): an entry names the module itself or appears, followed by ".",
// in its dotted path.
bool matched(const std::vector<std::string> &keys, const std::string &module)
{
    for (const auto &k : keys)
        if (module == k || module.find(k + ".") != std::string::npos) return true;
    return false;
}

at::ScalarType compute_dtype(const std::string &name)
{
    return name == "fp32" ? at::kFloat : name == "bf16" ? at::kBFloat16 : at::kHalf;
}

std::string dtype_name(at::ScalarType t)
{
    return t == at::kHalf ? "float16" : t == at::kBFloat16 ? "bfloat16" : "float32";
}

// bitsandbytes packs the quant state's JSON as uint8 bytes of the length it happens to have (the offset's digits
// vary). accel pads it with spaces to one length, so that every layer's state has one shape and a state dict
// loads into another quantized model (load_state_dict copies into the model's tensors); json.loads, which
// bitsandbytes reads it with, ignores trailing whitespace.
constexpr size_t kQuantStateBytes = 256;

at::Tensor bytes_of(std::string s)
{
    if (s.size() > kQuantStateBytes) fail(ACCEL_ERR_INTERNAL, "quantize: quant_state JSON longer than expected: " + s);
    s.resize(kQuantStateBytes, ' ');
    at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
    std::copy(s.begin(), s.end(), t.data_ptr<uint8_t>());
    return t;
}

// The layer to quantize in a slot: the linear itself, or the base under LoRA adapters (QLoRA: adapters added
// before quantizing keep training over the quantized base, as PEFT's over a 4-bit one).
std::shared_ptr<Linear> target_of(const LinearSlot &slot)
{
    if (const auto *lora = dynamic_cast<const LoraLinear *>(slot.linear->get())) return lora->base();
    return *slot.linear;
}

void replace(LinearSlot &slot, std::shared_ptr<Linear> layer)
{
    if (auto *lora = dynamic_cast<LoraLinear *>(slot.linear->get())) lora->set_base(std::move(layer));
    else *slot.linear = std::move(layer);
}

// A layer's quantized tensors: the weight, then its state as bitsandbytes names it (`module` + ".SCB"; or
// ".weight.absmax", ".weight.quant_map", ".weight.nested_*", ".weight.quant_state.bitsandbytes__<type>").
// From `w` ([out, in], `dtype`: the float dtype the 4-bit state records), or, when `w` is undefined, the shapes
// and dtypes bitsandbytes stores on the meta device (the quant_state JSON real: layers read it when made).
struct LayerTensors {
    at::Tensor weight;
    NamedTensors state;
};
LayerTensors layer_tensors(const std::string &module, const at::Tensor &w, const std::vector<int64_t> &out_in,
                           at::ScalarType dtype, const config::BnbQuantizationConfig &c)
{
    const bool empty = !w.defined();
    at::NoGradGuard no_grad;
    if (c.load_in_8bit) {
        const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
        bnb::Int8Rows q = empty ? bnb::Int8Rows{at::empty(out_in, meta.dtype(at::kChar)),
                                                at::empty({out_in[0]}, meta.dtype(at::kFloat)), at::Tensor()}
                                : bnb::int8_vectorwise_quant(w.to(dtype).contiguous());
        return {q.q, {{module + ".SCB", q.stats}}};
    }
    const auto type = c.bnb_4bit_quant_type == "nf4" ? bnb::QuantType::Nf4 : bnb::QuantType::Fp4;
    bnb::Quantized4bit q = empty ? bnb::empty_4bit(out_in, dtype, type, 64, c.bnb_4bit_use_double_quant)
                                 : bnb::quantize_4bit(w.to(dtype).contiguous(), type, 64, c.bnb_4bit_use_double_quant);
    config::QuantStateMeta meta;
    meta.quant_type = bnb::quant_type_name(type);
    meta.blocksize = q.state.blocksize;
    meta.dtype = dtype_name(q.state.dtype);
    meta.shape = q.state.shape;
    meta.nested = q.state.nested;
    meta.nested_blocksize = q.state.nested_blocksize;
    meta.nested_offset = q.state.offset;
    const std::string p = module + ".weight.";
    LayerTensors out{q.packed, {{p + "absmax", q.state.absmax}, {p + "quant_map", q.state.code}}};
    if (q.state.nested) {
        out.state.emplace_back(p + "nested_absmax", q.state.nested_absmax);
        out.state.emplace_back(p + "nested_quant_map", q.state.nested_code);
    }
    out.state.emplace_back(p + "quant_state.bitsandbytes__" + meta.quant_type, bytes_of(config::quant_state_meta_json(meta)));
    return out;
}

// Quantizes one layer: the weight parameter takes the quantized values (set_data: the model's tensor object stays,
// so names, the parameter list and later moves see it), the state is returned as buffers to register.
NamedTensors quantize_layer(LinearSlot &slot, const config::BnbQuantizationConfig &c)
{
    const std::shared_ptr<Linear> target = target_of(slot);
    Linear &base = *target;
    at::Tensor weight = base.weight(), bias = base.bias();
    const at::Device device = weight.device();
    // A weight on the meta device (empty init) has no values: the layer gets the quantized tensors' shapes and
    // dtypes on meta, and loading a quantized checkpoint gives them memory and values (transformers'
    // replace_with_bnb_linear under init_empty_weights).
    const bool empty = weight.is_meta();
    // transformers quantizes Conv1D (GPT-2) weights transposed, as [out, in].
    const at::Tensor w = empty ? at::Tensor() : base.weight_out_in().detach();
    LayerTensors q = layer_tensors(slot.module, w, {base.out_features(), base.in_features()}, weight.scalar_type(), c);
    at::NoGradGuard no_grad;
    weight.requires_grad_(false);
    weight.set_data(q.weight.to(device));
    // The quant_state JSON stays real even on meta (a 256-byte buffer the layer reads when it is made).
    for (auto &[name, t] : q.state)
        if (!t.is_meta()) t = t.to(device.is_meta() ? at::Device(at::kCPU) : device);
    if (c.load_in_8bit) {
        replace(slot, bnb::make_linear_8bit(weight, q.state[0].second, bias, c.llm_int8_threshold));
        return q.state;
    }
    bnb::QuantStateTensors t;
    t.absmax = q.state[0].second;
    t.quant_map = q.state[1].second;
    if (c.bnb_4bit_use_double_quant) {
        t.nested_absmax = q.state[2].second;
        t.nested_quant_map = q.state[3].second;
    }
    t.packed_meta = q.state.back().second;
    replace(slot, bnb::make_linear_4bit(slot.module, weight, bias, t, compute_dtype(c.bnb_4bit_compute_dtype)));
    return q.state;
}

} // namespace

std::vector<std::string> keys_to_not_convert(Model &model)
{
    std::vector<std::string> out;
    // Tied: a layer's weight shares its storage with another parameter of the model.
    for (auto &slot : model.linear_slots()) {
        const void *storage = (*slot.linear)->weight().storage().unsafeGetStorageImpl();
        int owners = 0;
        for (const auto &np : model.named_parameters())
            if (np.second.defined() && np.second.has_storage() && np.second.storage().unsafeGetStorageImpl() == storage)
                ++owners;
        if (owners > 1) out.push_back(slot.module);
    }
    if (!model.hf_config_json().empty()) {
        out.push_back("lm_head");
    } else if (!model.named_parameters().empty()) {
        const std::string &last = model.named_parameters().back().first;
        out.push_back(last.substr(0, last.find('.')));
    }
    return out;
}

bool is_quantized(Model &model)
{
    for (auto &slot : model.linear_slots())
        if (is_quantized_layer(target_of(slot).get())) return true;
    return false;
}

std::optional<config::BnbQuantizationConfig> quantization_config_of(Model &model)
{
    std::optional<config::BnbQuantizationConfig> out;
    std::vector<std::string> skipped, quantized;
    for (auto &slot : model.linear_slots()) {
        const std::optional<config::BnbQuantizationConfig> c = bnb::layer_quantization(*target_of(slot));
        if (!c) {
            skipped.push_back(slot.module);
            continue;
        }
        quantized.push_back(slot.module);
        // accel_model_quantize quantizes a model once, with one config: the first layer's says it.
        if (!out) out = c;
    }
    if (out) {
        // Modules outside the linear seam (a llama's lm_head) stay float too: named, so that transformers' loader,
        // which would quantize any nn.Linear not listed, leaves them so.
        for (const auto &k : keys_to_not_convert(model))
            if (std::find(skipped.begin(), skipped.end(), k) == skipped.end() && !matched(quantized, k))
                skipped.push_back(k);
        out->skip_modules = skipped;
        out->skip_modules_given = true;
    }
    return out;
}

bool is_quant_state_name(const std::string &name)
{
    static const char *const suffixes[] = {".SCB", ".weight.absmax", ".weight.quant_map", ".weight.nested_absmax",
                                           ".weight.nested_quant_map", ".weight_format"};
    for (const char *s : suffixes) {
        const size_t n = std::strlen(s);
        if (name.size() >= n && name.compare(name.size() - n, n, s) == 0) return true;
    }
    return name.find(".weight.quant_state.bitsandbytes__") != std::string::npos;
}

void tensors_from_bnb_folder(NamedTensors &tensors, const std::function<std::string(const std::string &)> &file_of)
{
    static const std::string format_suffix = ".weight_format";
    NamedTensors kept;
    for (auto &[name, t] : tensors) {
        const std::string where = "tensor \"" + name + "\" in " + file_of(name);
        if (name.size() > format_suffix.size() &&
            name.compare(name.size() - format_suffix.size(), format_suffix.size(), format_suffix) == 0) {
            require(t.numel() == 1 && !at::isFloatingType(t.scalar_type()), ACCEL_ERR_INVALID_ARGUMENT,
                    where + ": weight_format must be one integer");
            const int64_t format = t.to(at::kCPU).reshape({}).item<int64_t>();
            if (format != 0)
                fail(ACCEL_ERR_UNIMPLEMENTED, where + ": weight_format " + std::to_string(format) +
                                                  " (a GPU tile layout: col32, col_turing or col_ampere) is not read; "
                                                  "0 (row-major) is");
            continue;
        }
        if (name.find(".weight.quant_state.bitsandbytes__") != std::string::npos) {
            require(t.dim() == 1 && t.scalar_type() == at::kByte, ACCEL_ERR_INVALID_ARGUMENT,
                    where + ": a quant_state must be 1-D uint8 (bitsandbytes' packed JSON)");
            require(t.numel() <= static_cast<int64_t>(kQuantStateBytes), ACCEL_ERR_INVALID_ARGUMENT,
                    where + ": " + std::to_string(t.numel()) + " bytes, more than the " +
                        std::to_string(kQuantStateBytes) + " a quant_state JSON takes");
            at::Tensor padded = at::full({static_cast<int64_t>(kQuantStateBytes)}, ' ', at::kByte);
            padded.narrow(0, 0, t.numel()).copy_(t);
            kept.emplace_back(name, padded);
            continue;
        }
        kept.emplace_back(name, std::move(t));
    }
    tensors = std::move(kept);
}

void check_quantized_layers(Model &model)
{
    for (auto &slot : model.linear_slots()) bnb::check_quantized_layer(*target_of(slot), slot.module);
}

namespace {

// The slots quantize_model converts, after its checks.
std::vector<LinearSlot> slots_to_quantize(Model &model, const config::BnbQuantizationConfig &c)
{
    if (model.prepared_by || model.forward_hooks)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "quantize: the model is prepared already; quantize it before preparing it");
    std::vector<LinearSlot> slots = model.linear_slots();
    if (slots.empty())
        fail(ACCEL_ERR_UNIMPLEMENTED, "quantize: this model has no linear layers accel can replace (gpt, llama and "
                                      "spec linear layers can be; TorchScript models cannot)");
    // A model on the meta device is quantized in structure only (quantize_layer); its callers load values after.
    model.check_tensor_access("quantize", true);
    if (c.load_in_4bit && c.bnb_4bit_compute_dtype == "fp16" && model.device().is_cpu())
        fail(ACCEL_ERR_UNIMPLEMENTED, "bnb_4bit_compute_dtype: \"fp16\" (the default) on the CPU: LibTorch 1.13 has no "
                                      "float16 matmul there; give \"bf16\" or \"fp32\"");
    const std::vector<std::string> skipped = c.skip_modules_given ? c.skip_modules : keys_to_not_convert(model);
    std::vector<LinearSlot> chosen;
    for (auto &slot : slots) {
        const std::shared_ptr<Linear> target = target_of(slot);
        if (is_quantized_layer(target.get()))
            fail(ACCEL_ERR_FAILED_PRECONDITION, "quantize: " + slot.module + " is quantized already");
        if (matched(skipped, slot.module) || matched(c.keep_in_fp32_modules, slot.module)) continue;
        // Another decorator (fp8) computes more than its weight: quantizing under it would drop that.
        if (target->added_parameters().size() > 0 || target->stateful_forward())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "quantize: " + slot.module + " is decorated (fp8 or nested adapters); "
                                                "quantize the model before preparing it with them");
        chosen.push_back(slot);
    }
    if (chosen.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "quantize: skip_modules and keep_in_fp32_modules leave no linear layer to "
                                         "quantize (first one: " + slots.front().module + ")");
    return chosen;
}

// The model's name of each parameter's tensor object (a LoRA base's weight is not under its module's plain name),
// gathered once per call: each layer is then named in one lookup, not one walk of the parameters.
class ParameterNames {
public:
    explicit ParameterNames(Model &model)
    {
        for (const auto &[name, p] : model.named_parameters()) names_.emplace(p.unsafeGetTensorImpl(), name);
    }
    const std::string &of(const at::Tensor &t) const
    {
        const auto it = names_.find(t.unsafeGetTensorImpl());
        if (it == names_.end()) fail(ACCEL_ERR_INTERNAL, "quantize: a layer's weight is not a parameter of the model");
        return it->second;
    }

private:
    std::unordered_map<const c10::TensorImpl *, std::string> names_;
};

} // namespace

namespace {

at::ScalarType scalar_type_of(accel_dtype_t d)
{
    return d == ACCEL_DTYPE_BFLOAT16 ? at::kBFloat16 : d == ACCEL_DTYPE_FLOAT64 ? at::kDouble : at::kFloat;
}

// torch_dtype: every floating-point parameter and buffer not in keep_in_fp32_modules (which become float32) and
// not a LoRA adapter (PEFT keeps those float32) takes `dtype`, in place (set_data: the layers hold the tensors).
// Before quantizing, so the layers are quantized from torch_dtype values and their 4-bit state records it.
void apply_torch_dtype(Model &model, const config::BnbQuantizationConfig &c)
{
    if (!c.torch_dtype) return;
    const at::ScalarType dtype = scalar_type_of(*c.torch_dtype);
    const std::set<std::string> adapters = adapter_parameter_names(model);
    at::NoGradGuard no_grad;
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &[name, t] : *list) {
            if (!t.defined() || !at::isFloatingType(t.scalar_type()) || adapters.count(name) != 0) continue;
            const std::string module = name.substr(0, name.rfind('.'));
            const at::ScalarType want = matched(c.keep_in_fp32_modules, module) ? at::kFloat : dtype;
            if (t.scalar_type() != want) const_cast<at::Tensor &>(t).set_data(t.to(want));
        }
}

} // namespace

std::vector<std::string> quantize_model(Model &model, const config::BnbQuantizationConfig &c)
{
    std::vector<LinearSlot> chosen = slots_to_quantize(model, c);
    apply_torch_dtype(model, c);
    NamedTensors added;
    std::vector<std::string> done;
    for (auto &slot : chosen) {
        NamedTensors a = quantize_layer(slot, c);
        added.insert(added.end(), a.begin(), a.end());
        done.push_back(slot.module);
    }
    ModelQuantizing::add_buffers(model, added);
    return done;
}

namespace {

// Where load_and_quantize_model puts each tensor: the device map (given, or inferred on the quantized sizes) and
// the offload folder its "disk" modules go to.
struct Placement {
    std::optional<big_modeling::DeviceMap> map;
    std::string dir; // the offload folder ("" without disk modules)
    bool on_disk(const std::string &name) const
    {
        if (!map) return false;
        const config::DeviceTarget *t = big_modeling::device_for(*map, name);
        return t != nullptr && t->kind == config::DeviceTarget::Kind::disk;
    }
};

// The offload folder a device map needs ("" without disk modules), after refusing what the map cannot do yet.
std::string offload_dir_of(const big_modeling::DeviceMap &map, const config::BnbQuantizationConfig &c)
{
    std::string disk;
    bool any_disk = false;
    for (const auto &[name, target] : map) {
        if (target.kind == config::DeviceTarget::Kind::gpu)
            fail(ACCEL_ERR_UNIMPLEMENTED, "device_map: \"" + name + "\": " + target.str() +
                                              ": dispatching onto a GPU is not built yet (\"cpu\" and \"disk\" are)");
        if (target.kind != config::DeviceTarget::Kind::disk) continue;
        disk += std::string(any_disk ? ", " : "") + (name.empty() ? "\"\" (the whole model)" : name);
        any_disk = true;
    }
    if (!any_disk) return "";
    if (c.placement->dispatch.offload_dir.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "offload_folder: needed: the device_map offloads these modules to disk: " + disk);
    return normalize_path(c.placement->dispatch.offload_dir);
}

Placement place(Model &model, const config::BnbQuantizationConfig &c)
{
    Placement p;
    if (!c.placement) return p;
    p.map = c.placement->device_map;
    // Inferred once the layers are quantized on meta: the sizes are the quantized tensors' (Accelerate infers
    // with the quantized dtype as target_dtype).
    if (c.placement->infer) p.map = big_modeling::infer_auto_device_map(model, *c.placement->infer);
    if (!p.map) return p;
    big_modeling::check_device_map(model, *p.map, "device_map");
    p.dir = offload_dir_of(*p.map, c);
    return p;
}

// The checkpoint against the model, before any layer is replaced: each chosen layer's weight (present; a float
// one in the layer's stored shape, a pre-quantized one in the quantized weight's shape and dtype with its state
// tensors), every other tensor of the model present in its shape, and nothing the model does not have. A damaged
// or foreign folder is so refused by name with the model as it was.
void check_checkpoint(Model &model, const ParameterNames &names, const std::vector<LinearSlot> &chosen,
                      const NamedTensors &file, const config::BnbQuantizationConfig &c, const std::string &where)
{
    std::map<std::string, const at::Tensor *> by_name;
    for (const auto &[name, t] : file) by_name.emplace(name, &t);
    auto in_file = [&](const std::string &name) {
        const auto it = by_name.find(name);
        if (it == by_name.end())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + where + "\" has no tensor \"" + name + "\"");
        return it->second;
    };
    std::set<std::string> weights, states; // the chosen layers' weights; the state names their quantization adds
    // In the model's order, so that a checkpoint of another model is named by its first layer.
    for (const auto &slot : chosen) {
        const std::shared_ptr<Linear> target = target_of(slot);
        const std::string &name = names.of(target->weight());
        weights.insert(name);
        const std::vector<int64_t> out_in = {target->out_features(), target->in_features()};
        // The quantized tensors' shapes and dtypes (on meta: nothing is computed).
        const LayerTensors q = layer_tensors(slot.module, at::Tensor(), out_in, target->weight().scalar_type(), c);
        for (const auto &s : q.state) states.insert(s.first);
        const at::Tensor &t = *in_file(name);
        if (!at::isFloatingType(t.scalar_type())) {
            require(t.sizes() == q.weight.sizes() && t.scalar_type() == q.weight.scalar_type(),
                    ACCEL_ERR_INVALID_ARGUMENT,
                    "weights_location: \"" + name + "\" in \"" + where + "\" is a quantized weight " +
                        std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes()) +
                        ", this config quantizes the layer to " + std::string(c10::toString(q.weight.scalar_type())) +
                        " " + c10::str(q.weight.sizes()) + " (the folder was quantized with another config)");
            // Its state comes from the file (its values are checked with the layer once loaded:
            // check_quantized_layers).
            for (const auto &[n, s] : q.state) {
                const at::Tensor &st = *in_file(n);
                require(st.sizes() == s.sizes(), ACCEL_ERR_INVALID_ARGUMENT,
                        "weights_location: \"" + n + "\" in \"" + where + "\" has shape " + c10::str(st.sizes()) +
                            ", this config's is " + c10::str(s.sizes()));
            }
            continue;
        }
        const std::vector<int64_t> stored =
            target->layout() == Linear::Layout::OutIn ? out_in : std::vector<int64_t>{out_in[1], out_in[0]};
        require(t.sizes() == at::IntArrayRef(stored), ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location: \"" + name + "\" in \"" + where + "\" has shape " + c10::str(t.sizes()) +
                    ", the model's is " + c10::str(at::IntArrayRef(stored)) +
                    " (a float checkpoint is quantized as it loads)");
    }
    std::set<std::string> supplied;
    NamedTensors unknown;
    for (const auto &[name, t] : file) {
        if (weights.count(name) != 0 || states.count(name) != 0) continue;
        const std::string own = big_modeling::own_name(model, name);
        if (own.empty()) {
            unknown.emplace_back(name, at::Tensor());
            continue;
        }
        supplied.insert(own);
        const at::Tensor &dst = *model.find_tensor(own);
        require(dst.sizes() == t.sizes(), ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location: \"" + name + "\" in \"" + where + "\" has shape " + c10::str(t.sizes()) +
                    ", the model's is " + c10::str(dst.sizes()));
        require(!t.is_complex() && t.scalar_type() != at::kBool, ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location: \"" + name + "\" in \"" + where + "\" has dtype " +
                    std::string(c10::toString(t.scalar_type())) + ", which cannot be converted to " +
                    c10::toString(dst.scalar_type()));
    }
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list)
            if (weights.count(e.first) == 0 && supplied.count(e.first) == 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + where + "\" has no tensor \"" + e.first + "\"");
    // Names the model has no tensor for: the model's load tells the ones it ignores (an old transformers' rotary
    // or mask buffers) from the foreign ones; none of them names a tensor, so nothing is copied.
    const LoadReport report = model.load_state_dict(unknown, false, [](const at::Tensor &, const at::Tensor &) {});
    if (!report.unexpected.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + report.unexpected.front() + "\" in \"" + where +
                                             "\" is not a tensor of the model");
}

} // namespace

std::vector<std::string> load_and_quantize_model(Model &model, const config::BnbQuantizationConfig &c)
{
    const std::string where = normalize_path(c.weights_location);
    std::vector<LinearSlot> chosen = slots_to_quantize(model, c);
    // Mapped (safetensors): a tensor's bytes are read when it is copied, so only one float weight is in memory at
    // a time, as Accelerate's load_checkpoint_in_model quantizes each weight as it sets it. A pre-quantized
    // checkpoint (bitsandbytes' tensors, as save_pretrained of a quantized model writes them) is read as
    // from_pretrained reads one, its tensors loaded as they are.
    NamedTensors file = ckpt::read_model_weights(where);
    tensors_from_bnb_folder(file, [&where](const std::string &) { return where; });
    // Everything that can be refused is refused before the first layer is replaced: past that point the model's
    // float weights are gone (released to meta) and a failure would leave it half-quantized and unusable.
    const ParameterNames names(model);
    check_checkpoint(model, names, chosen, file, c, where);
    if (c.placement && c.placement->device_map && !c.placement->infer) {
        big_modeling::check_device_map(model, *c.placement->device_map, "device_map");
        (void)offload_dir_of(*c.placement->device_map, c);
    }
    apply_torch_dtype(model, c);
    // Each chosen layer is made quantized on meta first (its float weight, if any, released: the checkpoint's
    // replaces it), as Accelerate's replace_with_bnb_layers under init_empty_weights; the checkpoint then gives
    // the quantized tensors their values one layer at a time.
    std::map<std::string, std::pair<LinearSlot *, at::ScalarType>> float_weights; // weight name -> its layer, dtype
    NamedTensors added;
    std::vector<std::string> done;
    for (auto &slot : chosen) {
        const at::Tensor weight = target_of(slot)->weight();
        float_weights[names.of(weight)] = {&slot, weight.scalar_type()};
        if (!weight.is_meta()) big_modeling::move_to_meta(weight);
        NamedTensors a = quantize_layer(slot, c);
        added.insert(added.end(), a.begin(), a.end());
        done.push_back(slot.module);
    }
    ModelQuantizing::add_buffers(model, added);
    const Placement placement = place(model, c);
    // Disk parameters hold no memory: their values go from the checkpoint to the offload folder.
    for (const auto &[name, t] : model.named_parameters())
        if (placement.on_disk(name) && !t.is_meta()) big_modeling::move_to_meta(t);

    NamedTensors to_model;
    std::set<std::string> to_disk, parameters, supplied;
    for (const auto &e : model.named_parameters()) parameters.insert(e.first);
    auto route = [&](const std::string &name, const at::Tensor &t) {
        const std::string own = big_modeling::own_name(model, name);
        if (!own.empty()) supplied.insert(own);
        const bool parameter = parameters.count(own) != 0;
        if (!own.empty() && placement.on_disk(own) && parameter) {
            if (!to_disk.insert(own).second) return; // a tied weight's second name: written once
            const at::Tensor &dst = *model.find_tensor(own);
            require(dst.sizes() == t.sizes(), ACCEL_ERR_INVALID_ARGUMENT,
                    "weights_location: \"" + name + "\" in \"" + where + "\" has shape " + c10::str(t.sizes()) +
                        ", the model's is " + c10::str(dst.sizes()));
            big_modeling::offload_from_checkpoint(placement.dir, own, t, dst.scalar_type());
            return;
        }
        to_model.emplace_back(name, t);
    };
    for (auto &[name, t] : file) {
        const auto it = float_weights.find(name);
        if (it == float_weights.end() || !at::isFloatingType(t.scalar_type())) {
            route(name, t);
            continue;
        }
        // A float weight of a quantized layer: read (pread, not through the map), quantized, routed as a
        // pre-quantized layer's tensors would be.
        const LinearSlot &slot = *it->second.first;
        const std::shared_ptr<Linear> target = target_of(slot);
        const std::vector<int64_t> out_in = {target->out_features(), target->in_features()};
        at::Tensor w = at::empty(t.sizes(), t.options().device(at::kCPU));
        ckpt::CopyBatch one;
        one.add(w, t);
        one.run();
        if (target->layout() != Linear::Layout::OutIn) w = w.t();
        LayerTensors q = layer_tensors(slot.module, w, out_in, it->second.second, c);
        w = at::Tensor();
        route(name, q.weight);
        for (const auto &[n, v] : q.state) route(n, v);
        // Copied into the model now, so that one layer's quantized tensors are in flight at a time.
        ckpt::CopyBatch batch;
        (void)model.load_state_dict(to_model, false, [&batch](const at::Tensor &dst, const at::Tensor &src) {
            batch.add(dst, src);
        });
        batch.run();
        to_model.clear();
    }
    // The rest loads as load_checkpoint_in_model does: every tensor the model has must come from the checkpoint.
    ckpt::CopyBatch batch;
    LoadReport report = model.load_state_dict(to_model, false, [&batch](const at::Tensor &dst, const at::Tensor &src) {
        batch.add(dst, src);
    });
    batch.run();
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list)
            if (supplied.count(e.first) == 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + where + "\" has no tensor \"" + e.first + "\"");
    if (!report.unexpected.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + report.unexpected.front() + "\" in \"" + where +
                                             "\" is not a tensor of the model");
    // A pre-quantized layer's state that does not fit the config or the layer fails here, naming its tensor.
    check_quantized_layers(model);
    if (placement.map) {
        config::DispatchOptions d = c.placement->dispatch;
        d.offload_dir = placement.dir;
        big_modeling::dispatch_model(model, *placement.map, d);
    }
    return done;
}

} // namespace accel
