#include "big_modeling/dispatch.hpp"

#include "accelerator/accelerator.hpp"
#include "big_modeling/device_map.hpp"
#include "big_modeling/device_map_infer.hpp"
#include "big_modeling/empty_init.hpp"
#include "big_modeling/offload_folder.hpp"
#include "common/allocator.hpp"
#include "common/error.hpp"
#include "checkpointing/checkpointing.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/files.hpp"
#include "model/model.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h> // NoGradGuard / GradMode: not through ATen.h in LibTorch 2

#include <cstring>
#include <memory>
#include <optional>
#include <set>

namespace accel::big_modeling {

namespace {

// A parameter with no memory and its shape and dtype (what a released disk parameter holds between forwards).
at::Tensor shell_like(const at::Tensor &p)
{
    at::Tensor shell = at::empty({0}, p.options().device(at::kCPU)); // CPU: the execution device (also for meta)
    shell.unsafeGetTensorImpl()->set_sizes_contiguous(p.sizes());
    return shell;
}

// The forward seam's hooks of a dispatched model: a disk parameter is read from the folder before its layer
// computes and released after (models without layers: around the whole forward).
class OffloadHooks final : public ForwardHooks {
public:
    struct Slot {
        std::string name;
        at::Tensor param; // the model's own tensor: set_data changes what every holder of it computes with
        size_t layer = 0;
        bool loaded = false;
        // Held for the whole forward (a buffer of a module without parameters: no layer is known for it).
        bool whole = false;
    };

    OffloadHooks(std::shared_ptr<const OffloadFolder> folder, std::vector<Slot> slots, bool layered)
        : folder_(std::move(folder)), slots_(std::move(slots)), layered_(layered)
    {
        for (auto &s : slots_) {
            // A parameter of an empty model (never loaded: its values are in the folder) becomes a CPU tensor first:
            // LibTorch's set_data keeps a tensor's device type. at::empty's pages are never touched before release.
            if (s.param.is_meta()) materialize(s.param, at::kCPU);
            release(s);
        }
    }

    at::Tensor before_forward(const at::Tensor &input) override
    {
        check_no_grad();
        for (auto &s : slots_)
            if (!layered_ || s.whole) load(s);
        return input;
    }
    void before_layer(size_t layer) override
    {
        check_no_grad();
        for (auto &s : slots_)
            if (!s.whole && s.layer == layer) load(s);
    }
    at::Tensor after_layer(size_t layer, const at::Tensor &out) override
    {
        for (auto &s : slots_)
            if (!s.whole && s.layer == layer) release(s);
        return out;
    }
    at::Tensor after_forward(const at::Tensor &out) override
    {
        for (auto &s : slots_) release(s);
        return out;
    }
    void check_access(const char *what) const override
    {
        // generate runs the layers through this seam (each layer's weights are read there).
        if (std::strcmp(what, "generate") == 0) return;
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string(what) + ": the model is dispatched with disk offload (accel_model_dispatch): its parameters "
                                 "mapped to \"disk\" live in " + folder_->dir() +
                 " and exist in memory only while their layer computes; read them from that folder");
    }

private:
    void check_no_grad() const
    {
        if (!at::GradMode::is_enabled()) return;
        for (const auto &s : slots_)
            if (s.param.requires_grad())
                fail(ACCEL_ERR_FAILED_PRECONDITION,
                     "model: a model dispatched with disk offload computes without gradients (its offloaded weights "
                     "are released after each layer, so no backward can follow): use accel_model_forward_no_grad or "
                     "accel_model_generate");
    }
    void load(Slot &s) const
    {
        if (s.loaded) return;
        at::Tensor t = at::empty(s.param.sizes(), s.param.options().device(at::kCPU));
        folder_->load_into(s.name, t);
        s.param.set_data(t);
        s.loaded = true;
    }
    static void release(Slot &s)
    {
        s.param.set_data(shell_like(s.param));
        s.loaded = false;
    }

    std::shared_ptr<const OffloadFolder> folder_;
    std::vector<Slot> slots_;
    bool layered_;
};

} // namespace

bool is_dispatched(const Model &model)
{
    return dynamic_cast<const OffloadHooks *>(model.forward_hooks.get()) != nullptr;
}

void dispatch_model(Model &model, const config::DeviceMap &map, const config::DispatchOptions &options)
{
    if (model.prepared_by)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: a prepared model cannot be dispatched (dispatch it before, and "
                                            "only for inference)");
    if (is_dispatched(model)) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: already dispatched");
    if (model.forward_hooks)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: its parameters are partitioned (zero3_init_flag); it cannot be "
                                            "dispatched");
    check_device_map(model, map, "device_map");
    std::set<std::string> disk_modules;
    for (const auto &[name, target] : map) {
        if (target.kind == config::DeviceTarget::Kind::gpu)
            fail(ACCEL_ERR_UNIMPLEMENTED, "device_map: \"" + name + "\": " + target.str() +
                                              ": dispatching onto a GPU is not built yet (\"cpu\" and \"disk\" are)");
        if (target.kind == config::DeviceTarget::Kind::disk) disk_modules.insert(name);
    }
    // Everything on the CPU: nothing to move and nothing to hook (force_hooks changes nothing on the CPU).
    if (disk_modules.empty()) return;
    if (options.offload_dir.empty()) {
        std::string names;
        for (const auto &n : disk_modules) names += (names.empty() ? "" : ", ") + (n.empty() ? std::string("\"\"") : n);
        fail(ACCEL_ERR_INVALID_ARGUMENT, "options_json.offload_dir: needed to dispatch this model according to this "
                                         "device_map; the following submodules need to be offloaded: " + names);
    }
    auto on_disk = [&](const std::string &tensor) {
        const config::DeviceTarget *t = device_for(map, tensor);
        return t != nullptr && t->kind == config::DeviceTarget::Kind::disk;
    };
    std::vector<std::pair<std::string, at::Tensor>> to_write;
    for (const auto &[n, t] : model.named_parameters())
        if (on_disk(n)) to_write.emplace_back(n, t);
    for (const auto &[n, t] : model.named_buffers())
        if (on_disk(n)) to_write.emplace_back(n, t);
    // dispatch_model's rule: a folder that already holds an index is the weights' source, else they are written.
    const std::string dir = normalize_path(options.offload_dir);
    if (!exists(join(dir, kOffloadIndex))) {
        for (const auto &[n, t] : to_write)
            if (t.is_meta())
                fail(ACCEL_ERR_FAILED_PRECONDITION, "model: \"" + n + "\" (mapped to disk) has no values yet (empty "
                                                    "init): load them (accel_model_load_checkpoint_and_dispatch) or give "
                                                    "an offload_dir whose index.json holds them");
        offload_state_dict(dir, to_write);
    }
    auto folder = std::make_shared<const OffloadFolder>(dir);

    const std::vector<size_t> layers = model.parameter_layers();
    const bool layered = !model.layer_types().empty();
    std::vector<OffloadHooks::Slot> slots;
    auto check_entry = [&](const std::string &name, const at::Tensor &t) {
        const OffloadEntry *e = folder->find(name);
        if (e == nullptr)
            fail(ACCEL_ERR_NOT_FOUND, "options_json.offload_dir: " + join(dir, kOffloadIndex) + " has no entry for \"" +
                                          name + "\" (mapped to disk)");
        if (at::IntArrayRef(e->shape) != t.sizes())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "options_json.offload_dir: \"" + name + "\" has shape " +
                                                 c10::str(at::IntArrayRef(e->shape)) + " in " + dir + ", the model's " +
                                                 c10::str(t.sizes()));
    };
    const auto &params = model.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
        if (!on_disk(params[i].first)) continue;
        check_entry(params[i].first, params[i].second);
        slots.push_back({params[i].first, params[i].second, layered && i < layers.size() ? layers[i] : 0, false, false});
    }
    // offload_buffers: a disk module's buffers are read with its parameters and released with them (Accelerate's
    // AlignDevicesHook(offload_buffers=True)); false keeps them in memory, as Accelerate's default.
    if (options.offload_buffers)
        for (const auto &[n, t] : model.named_buffers()) {
            if (!on_disk(n)) continue;
            check_entry(n, t);
            // The layer of the module's parameters (a buffer belongs to the module its name ends in).
            const std::string module = n.substr(0, n.rfind('.') == std::string::npos ? 0 : n.rfind('.') + 1);
            OffloadHooks::Slot slot{n, t, 0, false, true};
            for (size_t i = 0; layered && !module.empty() && i < params.size() && i < layers.size(); ++i)
                if (params[i].first.compare(0, module.size(), module) == 0) {
                    slot.layer = layers[i];
                    slot.whole = false;
                    break;
                }
            slots.push_back(std::move(slot));
        }
    model.forward_hooks = std::make_shared<OffloadHooks>(std::move(folder), std::move(slots), layered);
    // The released weights stop counting at once (glibc may otherwise keep the freed pages in its heap).
    return_free_memory();
}

std::string own_name(const Model &model, const std::string &key)
{
    const at::Tensor *t = model.find_tensor(key);
    if (t == nullptr) return {};
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list)
            if (&e.second == t) return e.first;
    return {};
}

void offload_from_checkpoint(const std::string &dir, const std::string &name, const at::Tensor &src,
                             at::ScalarType dtype)
{
    // Read with pread into a tensor of its own (converted on the way), not through the map: the map's pages
    // would stay in the resident set for as long as the checkpoint is mapped (the whole model's, at the end).
    at::Tensor v = at::empty(src.sizes(), src.options().dtype(dtype));
    ckpt::CopyBatch read;
    read.add(v, src);
    read.run();
    offload_state_dict(dir, {{name, v}}); // one tensor's bytes in memory at most
}

namespace {

// Accelerate's load_checkpoint_in_model with an offload folder: the tensors of disk modules go from the checkpoint
// (mapped, not copied) straight into the folder, one at a time, and never into the model (an empty model's stay
// on the meta device); the others are loaded into the model. Returns false (nothing done) when there is no disk
// module or the folder already holds an index (then it is the weights' source, as in dispatch_model).
bool load_with_disk_offload(Model &model, const std::string &checkpoint, const config::DeviceMap &map,
                            const config::LoadAndDispatchOptions &options)
{
    bool any_disk = false;
    for (const auto &e : map) any_disk = any_disk || e.second.kind == config::DeviceTarget::Kind::disk;
    if (!any_disk || options.dispatch.offload_dir.empty()) return false;
    const std::string dir = normalize_path(options.dispatch.offload_dir);
    if (exists(join(dir, kOffloadIndex))) return false;
    TensorList all = ckpt::read_model_weights(normalize_path(checkpoint));
    std::optional<at::ScalarType> to;
    if (options.load.dtype)
        to = *options.load.dtype == ACCEL_DTYPE_FLOAT64    ? at::kDouble
             : *options.load.dtype == ACCEL_DTYPE_FLOAT16  ? at::kHalf
             : *options.load.dtype == ACCEL_DTYPE_BFLOAT16 ? at::kBFloat16
                                                             : at::kFloat;
    NamedTensors rest;
    std::set<std::string> on_disk;
    for (auto &[key, t] : all) {
        const std::string name = own_name(model, key);
        const config::DeviceTarget *target = name.empty() ? nullptr : device_for(map, name);
        if (target == nullptr || target->kind != config::DeviceTarget::Kind::disk) {
            rest.emplace_back(key, t);
            continue;
        }
        if (!on_disk.insert(name).second) continue; // a tied weight's second name: written once
        offload_from_checkpoint(dir, name, t, to && at::isFloatingType(t.scalar_type()) ? *to : t.scalar_type());
        t = at::Tensor();
    }
    config::LoadCheckpointOptions memory_part = options.load;
    memory_part.strict = false; // the disk part is checked below with the rest
    LoadReport report = load_checkpoint_tensors(model, std::move(rest), memory_part);
    std::vector<std::string> missing;
    for (const auto &m : report.missing)
        if (on_disk.count(m) == 0) missing.push_back(m);
    if (options.load.strict && (!missing.empty() || !report.unexpected.empty()))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "checkpoint_path: " + checkpoint + " does not match the model (strict): " +
                                             std::to_string(missing.size()) + " missing, " +
                                             std::to_string(report.unexpected.size()) + " unexpected" +
                                             (missing.empty() ? std::string() : ", e.g. missing " + missing[0]));
    return true;
}

} // namespace

void load_checkpoint_and_dispatch(Model &model, const std::string &checkpoint, const config::LoadAndDispatchOptions &options)
{
    if (is_dispatched(model)) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: already dispatched");
    // A strategy's map is computed before loading (an empty model has its sizes already), as Accelerate does.
    std::optional<config::DeviceMap> map = options.device_map;
    if (options.infer) map = infer_auto_device_map(model, *options.infer);
    if (map) check_device_map(model, *map, "device_map");
    if (!map || !load_with_disk_offload(model, checkpoint, *map, options))
        (void)load_checkpoint_in_model(model, checkpoint, options.load);
    if (map) dispatch_model(model, *map, options.dispatch);
}

} // namespace accel::big_modeling
