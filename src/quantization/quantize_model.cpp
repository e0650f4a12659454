#include "quantization/quantize_model.hpp"

#include "big_modeling/empty_init.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "model/linear.hpp"
#include "model/lora_linear.hpp"
#include "quantization/bnb_4bit.hpp"
#include "quantization/bnb_8bit.hpp"
#include "quantization/bnb_linear.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

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
    const at::Tensor w = empty ? at::Tensor() : base.weight_out_in().detach().contiguous();
    const std::vector<int64_t> out_in = {base.out_features(), base.in_features()};
    at::NoGradGuard no_grad;
    weight.requires_grad_(false);
    NamedTensors added;
    if (c.load_in_8bit) {
        const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
        bnb::Int8Rows q = empty ? bnb::Int8Rows{at::empty(out_in, meta.dtype(at::kChar)),
                                                at::empty({out_in[0]}, meta.dtype(at::kFloat)), at::Tensor()}
                                : bnb::int8_vectorwise_quant(w);
        weight.set_data(q.q.to(device));
        at::Tensor scb = q.stats.to(device);
        added.emplace_back(slot.module + ".SCB", scb);
        replace(slot, bnb::make_linear_8bit(weight, scb, bias, c.llm_int8_threshold));
        return added;
    }
    const auto type = c.bnb_4bit_quant_type == "nf4" ? bnb::QuantType::Nf4 : bnb::QuantType::Fp4;
    bnb::Quantized4bit q = empty ? bnb::empty_4bit(out_in, weight.scalar_type(), type, 64, c.bnb_4bit_use_double_quant)
                                 : bnb::quantize_4bit(w, type, 64, c.bnb_4bit_use_double_quant);
    weight.set_data(q.packed.to(device));
    config::QuantStateMeta meta;
    meta.quant_type = bnb::quant_type_name(type);
    meta.blocksize = q.state.blocksize;
    meta.dtype = dtype_name(q.state.dtype);
    meta.shape = q.state.shape;
    meta.nested = q.state.nested;
    meta.nested_blocksize = q.state.nested_blocksize;
    meta.nested_offset = q.state.offset;
    const std::string p = slot.module + ".weight.";
    bnb::QuantStateTensors t;
    t.absmax = q.state.absmax.to(device);
    t.quant_map = q.state.code.to(device);
    added.emplace_back(p + "absmax", t.absmax);
    added.emplace_back(p + "quant_map", t.quant_map);
    if (q.state.nested) {
        t.nested_absmax = q.state.nested_absmax.to(device);
        t.nested_quant_map = q.state.nested_code.to(device);
        added.emplace_back(p + "nested_absmax", t.nested_absmax);
        added.emplace_back(p + "nested_quant_map", t.nested_quant_map);
    }
    // Real even on meta: the layer reads its shape and type from it when it is made (a 256-byte buffer).
    t.packed_meta = bytes_of(config::quant_state_meta_json(meta)).to(empty ? at::Device(at::kCPU) : device);
    added.emplace_back(p + "quant_state.bitsandbytes__" + meta.quant_type, t.packed_meta);
    replace(slot, bnb::make_linear_4bit(slot.module, weight, bias, t, compute_dtype(c.bnb_4bit_compute_dtype)));
    return added;
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

// The model's name of a tensor object (a LoRA base's weight is not under its module's plain name).
std::string name_of(Model &model, const at::Tensor &t)
{
    for (const auto &[name, p] : model.named_parameters())
        if (p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return name;
    fail(ACCEL_ERR_INTERNAL, "quantize: a layer's weight is not a parameter of the model");
}

} // namespace

std::vector<std::string> quantize_model(Model &model, const config::BnbQuantizationConfig &c)
{
    std::vector<LinearSlot> chosen = slots_to_quantize(model, c);
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

std::vector<std::string> load_and_quantize_model(Model &model, const config::BnbQuantizationConfig &c)
{
    const std::string where = normalize_path(c.weights_location);
    std::vector<LinearSlot> chosen = slots_to_quantize(model, c);
    // Mapped (safetensors): a tensor's bytes are read when it is copied, so only one float weight is in memory at
    // a time, as Accelerate's load_checkpoint_in_model quantizes each weight as it sets it.
    const NamedTensors file = ckpt::read_model_weights(where);
    std::map<std::string, const at::Tensor *> by_name;
    for (const auto &[name, t] : file) by_name.emplace(name, &t);
    std::set<std::string> quantized_names;
    NamedTensors added;
    std::vector<std::string> done;
    for (auto &slot : chosen) {
        const at::Tensor weight = target_of(slot)->weight();
        const std::string name = name_of(model, weight);
        const auto it = by_name.find(name);
        if (it == by_name.end())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + where + "\" has no tensor \"" + name + "\"");
        require(it->second->sizes() == weight.sizes(), ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location: \"" + name + "\" in \"" + where + "\" has shape " + c10::str(it->second->sizes()) +
                    ", the model's is " + c10::str(weight.sizes()) + " (a float checkpoint is quantized as it loads)");
        require(at::isFloatingType(it->second->scalar_type()), ACCEL_ERR_INVALID_ARGUMENT,
                "weights_location: \"" + name + "\" in \"" + where + "\" is " +
                    std::string(c10::toString(it->second->scalar_type())) + ", not a float weight to quantize");
        big_modeling::materialize(weight, at::kCPU);
        ckpt::CopyBatch one;
        one.add(weight, *it->second);
        one.run();
        NamedTensors a = quantize_layer(slot, c);
        added.insert(added.end(), a.begin(), a.end());
        quantized_names.insert(name);
        done.push_back(slot.module);
    }
    ModelQuantizing::add_buffers(model, added);
    // The other tensors load as load_checkpoint_in_model does: every one the model has must be in the checkpoint.
    NamedTensors rest;
    for (const auto &[name, t] : file)
        if (quantized_names.count(name) == 0) rest.emplace_back(name, t);
    ckpt::CopyBatch batch;
    LoadReport report = model.load_state_dict(rest, false, [&batch](const at::Tensor &dst, const at::Tensor &src) {
        batch.add(dst, src);
    });
    for (const auto &m : report.missing)
        if (quantized_names.count(m) == 0 && !is_quant_state_name(m))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + where + "\" has no tensor \"" + m + "\"");
    if (!report.unexpected.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "weights_location: \"" + report.unexpected.front() + "\" in \"" + where +
                                             "\" is not a tensor of the model");
    batch.run();
    return done;
}

} // namespace accel
