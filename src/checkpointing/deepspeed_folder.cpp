#include "checkpointing/deepspeed_folder.hpp"

#include "checkpointing/checkpointing.hpp"
#include "checkpointing/integrity.hpp"
#include "checkpointing/torch_archive.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <accel/version.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>

#include <sys/stat.h>

namespace accel::ckpt {

namespace {

constexpr const char *kDsVersion = "0.0.0+accel." ACCEL_VERSION_STRING; // PEP 440, as DeepSpeed parses it
const char *kLossScaler = "deepspeed.runtime.fp16.loss_scaler.LossScaler";
const char *kZeroStage = "deepspeed.runtime.zero.config.ZeroStageEnum";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Python's f"{mp:02d}": at least two digits.
std::string two_digits(int32_t v)
{
    const std::string s = std::to_string(v);
    return s.size() < 2 ? std::string(2 - s.size(), '0') + s : s;
}

PyRef py_size(const std::vector<int64_t> &shape)
{
    auto dims = py_tuple();
    for (int64_t d : shape) dims->items.push_back(py_int(d));
    return py_call("torch.Size", {dims});
}

PyRef ds_config(const DsPartition &part, const DsRankState &s)
{
    auto zero = py_dict();
    py_set(*zero, "stage", py_int(part.stage()));
    auto bf16 = py_dict();
    py_set(*bf16, "enabled", py_bool(s.bf16));
    auto c = py_dict();
    py_set(*c, "zero_optimization", zero);
    py_set(*c, "bf16", bf16);
    py_set(*c, "gradient_clipping", py_float(s.clip_grad));
    return c;
}

} // namespace

std::string deepspeed_tag(size_t i) { return i == 0 ? "pytorch_model" : "pytorch_model_" + std::to_string(i); }

std::string deepspeed_model_states_name(int stage, int32_t rank, int32_t mp)
{
    const std::string mp_rank = "mp_rank_" + two_digits(mp) + "_model_states.pt";
    return stage == 3 ? "zero_pp_rank_" + std::to_string(rank) + "_" + mp_rank : mp_rank;
}

std::string deepspeed_optim_states_name(int32_t rank, bool bf16, int32_t mp)
{
    return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(rank) + "_mp_rank_" + two_digits(mp) +
           "_optim_states.pt";
}

int64_t DsParam::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

DsPartition::DsPartition(std::vector<DsParam> params, size_t groups, int stage, int32_t world)
    : params_(std::move(params)), groups_(groups), stage_(stage), world_(world), group_numel_(groups, 0),
      partition_(groups, 0)
{
    if (stage < 1 || stage > 3 || world < 1) fail(ACCEL_ERR_INTERNAL, "DeepSpeed layout: bad stage or world");
    for (const auto &p : params_) group_numel_.at(p.group) += p.numel();
    // ZeRO-1/2 align each group to 2 x world elements (NCCL's start alignment) and cut it evenly.
    for (size_t g = 0; g < groups; ++g) partition_[g] = ceil_div(group_numel_[g], 2 * world) * 2;
}

std::vector<DsRun> DsPartition::runs(int32_t rank, size_t g) const
{
    std::vector<DsRun> out;
    int64_t at = 0; // ZeRO-1/2: where the parameter starts in the group; ZeRO-3: in the rank's flat tensor
    for (size_t k = 0; k < params_.size(); ++k) {
        if (params_[k].group != g) continue;
        const int64_t n = params_[k].numel();
        if (stage_ == 3) {
            const int64_t ps = ceil_div(n, world_), lo = std::min(n, rank * ps), hi = std::min(n, lo + ps);
            if (hi > lo) out.push_back({k, lo, hi - lo, at});
            at += ps;
        } else {
            const int64_t lo = rank * partition_[g], hi = lo + partition_[g];
            const int64_t a = std::max(at, lo), b = std::min(at + n, hi);
            if (b > a) out.push_back({k, a - at, b - a, a - lo});
            at += n;
        }
    }
    return out;
}

int64_t DsPartition::flat_numel(size_t g) const
{
    if (stage_ != 3) return partition_.at(g);
    int64_t n = 0;
    for (const auto &p : params_)
        if (p.group == g) n += ceil_div(p.numel(), world_);
    return n;
}

int64_t DsPartition::padding(int32_t rank, size_t g) const
{
    if (stage_ == 3) return 0; // ZeRO-3 files keep their padding
    const int64_t end = (rank + 1) * partition_.at(g);
    return std::clamp<int64_t>(end - group_numel_.at(g), 0, partition_.at(g));
}

PyRef deepspeed_model_states(const DsPartition &part, const DsRankState &s)
{
    auto module = py_ordered_dict();
    for (const auto &[name, t] : s.module) py_set(*module, name, py_tensor(t));
    auto buffers = py_list();
    for (const auto &b : s.buffer_names) buffers->items.push_back(py_str(b));
    auto shapes = py_list();
    for (size_t g = 0; g < part.groups(); ++g) {
        auto d = py_ordered_dict();
        for (const auto &p : part.params())
            if (p.group == g) py_set(*d, p.name, py_size(p.shape));
        shapes->items.push_back(d);
    }
    // DeepSpeed records frozen parameters where it partitions gradients (ZeRO-2 and 3).
    PyRef frozen_shapes = py_none(), fragments = py_none();
    if (part.stage() >= 2) {
        frozen_shapes = py_ordered_dict();
        for (const auto &[name, shape] : s.frozen_shapes) py_set(*frozen_shapes, name, py_size(shape));
        fragments = py_dict();
        for (const auto &[name, t] : s.frozen_fragments) py_set(*fragments, name, py_tensor(t));
    }
    auto shared = py_dict();
    for (const auto &[name, with] : s.shared_params) py_set(*shared, name, py_str(with));
    auto d = py_dict();
    py_set(*d, "module", module);
    py_set(*d, "buffer_names", buffers);
    py_set(*d, "optimizer", py_none()); // ZeRO keeps it in the optimizer states files
    py_set(*d, "param_shapes", shapes);
    py_set(*d, "frozen_param_shapes", frozen_shapes);
    py_set(*d, "shared_params", shared);
    py_set(*d, "frozen_param_fragments", fragments);
    py_set(*d, "lr_scheduler", py_none()); // Accelerate saves the scheduler itself (scheduler.bin)
    py_set(*d, "data_sampler", py_none());
    py_set(*d, "random_ltd", py_none());
    py_set(*d, "sparse_tensor_module_names", py_call("builtins.set", {py_list()}));
    py_set(*d, "skipped_steps", py_int(0)); // no step is skipped without fp16, which sharding does not run
    py_set(*d, "global_steps", py_int(s.global_steps));
    py_set(*d, "dp_world_size", py_int(part.world()));
    py_set(*d, "mp_world_size", py_int(s.mp_world));
    if (!s.tp_slicing.empty()) {
        auto slicing = py_dict();
        for (const auto &[name, sl] : s.tp_slicing)
            py_set(*slicing, name, py_tuple({py_int(sl.dim), py_int(sl.groups), py_int(sl.whole)}));
        py_set(*d, "accel_tp_slicing", slicing);
    }
    py_set(*d, "ds_config", ds_config(part, s));
    py_set(*d, "ds_version", py_str(kDsVersion));
    return d;
}

PyRef deepspeed_optim_states(const DsPartition &part, const DsRankState &s)
{
    // The base optimizer steps one flat tensor per group: its state dict has one parameter per group.
    auto state = py_dict();
    auto groups = py_list();
    for (size_t g = 0; g < part.groups(); ++g) {
        if (s.group_state.at(g)) state->map.emplace_back(py_int(static_cast<int64_t>(g)), s.group_state[g]);
        auto group = py_dict();
        for (const auto &kv : s.group_options.at(g)->map) group->map.push_back(kv);
        py_set(*group, "params", py_list({py_int(static_cast<int64_t>(g))}));
        groups->items.push_back(group);
    }
    auto base = py_dict();
    py_set(*base, "state", state);
    py_set(*base, "param_groups", groups);
    auto fp32 = py_list();
    auto paddings = py_list(), counts = py_list();
    for (size_t g = 0; g < part.groups(); ++g) {
        const int64_t pad = part.padding(s.rank, g);
        fp32->items.push_back(py_tensor(s.fp32.at(g).narrow(0, 0, s.fp32[g].numel() - pad)));
        paddings->items.push_back(py_int(pad));
        counts->items.push_back(py_int(part.world()));
    }
    auto osd = py_dict();
    py_set(*osd, "zero_stage", py_call(kZeroStage, {py_int(part.stage())}));
    py_set(*osd, "loss_scaler", py_call(kLossScaler, {py_float(1.0)})); // static 1: fp32 and bf16
    py_set(*osd, "dynamic_loss_scale", py_bool(false));
    py_set(*osd, "overflow", py_bool(false));
    if (part.stage() == 3) {
        py_set(*osd, "partition_count", py_int(part.world()));
        py_set(*osd, "optimizer_state_dict", base);
        py_set(*osd, "fp32_flat_groups", fp32);
    } else {
        py_set(*osd, "clip_grad", py_float(s.clip_grad));
        py_set(*osd, "base_optimizer_state", base);
        py_set(*osd, "single_partition_of_fp32_groups", fp32);
        py_set(*osd, "group_paddings", paddings);
        py_set(*osd, "partition_count", counts);
    }
    py_set(*osd, "ds_version", py_str(kDsVersion));
    auto d = py_dict();
    py_set(*d, "optimizer_state_dict", osd);
    py_set(*d, "ds_config", ds_config(part, s));
    py_set(*d, "ds_version", py_str(kDsVersion));
    return d;
}

// ---- reading -------------------------------------------------------------------------------------

namespace {

const PyObj &need(const PyObj &d, const char *key, const std::string &what)
{
    const PyObj *v = d.get(key);
    if (v == nullptr) fail(ACCEL_ERR_DATA_LOSS, what + ": has no \"" + key + "\"");
    return *v;
}

const PyObj &need_list(const PyObj &d, const char *key, const std::string &what, size_t n)
{
    const PyObj &v = need(d, key, what);
    if (v.kind != PyObj::Kind::List || v.items.size() != n)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + key + "\" is not a list of " + std::to_string(n));
    return v;
}

const at::Tensor &need_tensor(const PyObj &v, int64_t numel, const std::string &what)
{
    if (v.kind != PyObj::Kind::Tensor || v.tensor.numel() != numel)
        fail(ACCEL_ERR_DATA_LOSS, what + " is not a tensor of " + std::to_string(numel) + " elements");
    return v.tensor;
}

// Where a tensor's elements lie: pieces of 1-D tensors, by offset into the flattened tensor.
struct Piece {
    int64_t offset, numel;
    at::Tensor from; // exactly `numel` elements
};
struct Located {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    std::vector<Piece> pieces;
};
using Locations = std::map<std::string, Located>;

ShardedSource source_of(std::shared_ptr<const Locations> where, std::vector<std::string> order, const std::string &dir)
{
    ShardedSource src;
    src.names = [order] { return order; };
    src.find = [where](const std::string &name, std::vector<int64_t> &shape) {
        auto it = where->find(name);
        if (it == where->end()) return false;
        shape = it->second.shape;
        return true;
    };
    auto at_name = [where, dir](const std::string &name) -> const Located & {
        auto it = where->find(name);
        if (it == where->end()) fail(ACCEL_ERR_INVALID_ARGUMENT, dir + ": has no tensor \"" + name + "\"");
        return it->second;
    };
    src.dtype = [at_name](const std::string &name) { return at_name(name).dtype; };
    src.read = [at_name](const std::string &name, int64_t offset, const at::Tensor &dst) {
        const Located &l = at_name(name);
        const int64_t end = offset + dst.numel();
        at::Tensor flat = dst.view({-1});
        for (const Piece &p : l.pieces) {
            const int64_t a = std::max(offset, p.offset), b = std::min(end, p.offset + p.numel);
            if (b > a) flat.narrow(0, a - offset, b - a).copy_(p.from.narrow(0, a - p.offset, b - a));
        }
    };
    return src;
}

Located whole(const at::Tensor &t)
{
    return Located{t.sizes().vec(), t.scalar_type(), {Piece{0, t.numel(), t.reshape({-1})}}};
}

// The model states' tensor-parallel record: mp_world_size (DeepSpeed's; 1 when absent, as DeepSpeed writes it
// without an mpu) agreeing with the files present, and accel's slicing of the split parameters.
void read_tp_layout(const PyObj &model, const std::string &what, int32_t mp_files, DsFolder &out)
{
    const PyObj *mp_world = model.get("mp_world_size");
    out.mp_world = 1;
    if (mp_world != nullptr) {
        if (mp_world->kind != PyObj::Kind::Int || mp_world->i < 1 || mp_world->i > 65536)
            fail(ACCEL_ERR_DATA_LOSS, what + ": \"mp_world_size\" is not a process count");
        out.mp_world = static_cast<int32_t>(mp_world->i);
    }
    if (out.mp_world != mp_files)
        fail(ACCEL_ERR_DATA_LOSS, what + ": \"mp_world_size\" is " + std::to_string(out.mp_world) + ", but the folder holds " +
                                      "the optimizer states of " + std::to_string(mp_files) + " model-parallel rank(s)");
    const PyObj *slicing = model.get("accel_tp_slicing");
    if (slicing == nullptr) return;
    if (!slicing->is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": \"accel_tp_slicing\" is not a dict");
    for (const auto &[k, v] : slicing->map) {
        const bool ok = k->kind == PyObj::Kind::Str && v->kind == PyObj::Kind::Tuple && v->items.size() == 3 &&
                        std::all_of(v->items.begin(), v->items.end(), [](const PyRef &x) { return x->kind == PyObj::Kind::Int; });
        const DsSlicing s = ok ? DsSlicing{v->items[0]->i, v->items[1]->i, v->items[2]->i} : DsSlicing{};
        if (!ok || s.dim < 0 || s.dim > 7 || s.groups < 1 || s.groups > (int64_t{1} << 20) || s.whole < 1)
            fail(ACCEL_ERR_DATA_LOSS, what + ": \"accel_tp_slicing\" holds an entry that is not (dim, groups, whole)");
        out.slicing[k->s] = s;
    }
}

} // namespace

bool is_deepspeed_folder(const std::string &dir)
{
    if (!is_dir(dir)) return false;
    // Either kind of file: a tag folder that lost its optimizer states is a damaged DeepSpeed checkpoint (named
    // by read_deepspeed_folder), not some other layout.
    for (const std::string tail : {"_mp_rank_00_optim_states.pt", "_mp_rank_00_model_states.pt"})
        for (const auto &name : list_dir(dir))
            if (name.rfind("mp_rank_00", 0) == 0 || name.find("zero_pp_rank_") != std::string::npos)
                if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
                    return true;
    return false;
}

std::string deepspeed_load_folder(const std::string &dir, size_t i)
{
    const std::string own = join(dir, deepspeed_tag(i));
    const std::string latest = join(dir, "latest");
    // Accelerate's own tags come first (it passes DeepSpeed the tag; `latest` then only repeats the last one). A
    // `latest` that is not a plain file, or beside another layout's weights, is not DeepSpeed's but the user's.
    struct stat st {};
    if (i != 0 || is_dir(own) || ::lstat(latest.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return own;
    for (const char *other : {"model.safetensors", "pytorch_model.bin", "pytorch_model_fsdp_0"})
        if (exists(join(dir, other))) return own;
    std::string tag = read_small_file(latest, 4096);
    while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
    while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.front()))) tag.erase(0, 1);
    // The tag must be a folder of `dir`: nothing outside it is opened.
    if (tag.empty() || tag == "." || tag == ".." || tag.find('/') != std::string::npos || !is_dir(join(dir, tag)))
        fail(ACCEL_ERR_DATA_LOSS, "\"" + latest + "\" names tag \"" + tag.substr(0, 200) + "\", which is not a folder of \"" +
                                      dir + "\": the checkpoint's newest tag is missing or `latest` is damaged");
    return join(dir, tag);
}

bool holds_only_deepspeed_files(const std::string &dir)
{
    auto ends_with = [](const std::string &s, const std::string &tail) {
        return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
    };
    for (const auto &name : list_dir(dir)) {
        struct stat st {};
        if (::lstat(join(dir, name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
        if (!ends_with(name, "_model_states.pt") && !ends_with(name, "_optim_states.pt") && name != kChecksumManifest)
            return false;
    }
    return true;
}

int32_t deepspeed_mp_world(const std::string &dir)
{
    // Data-parallel rank 0's optimizer states file of each model-parallel rank: mp_rank_00 up to the first missing.
    int32_t n = 0;
    while (n < 65536 && (exists(join(dir, deepspeed_optim_states_name(0, false, n))) ||
                         exists(join(dir, deepspeed_optim_states_name(0, true, n)))))
        ++n;
    return std::max(n, 1);
}

DsFolder read_deepspeed_folder(const std::string &dir, int32_t mp)
{
    verify_folder_manifest(dir); // every file accel wrote here, as recorded (none for DeepSpeed's own folders)
    DsFolder out;
    out.mp_rank = mp;
    const int32_t mp_files = deepspeed_mp_world(dir);
    if (mp < 0 || mp >= mp_files)
        fail(ACCEL_ERR_OUT_OF_RANGE, dir + ": holds the files of " + std::to_string(mp_files) +
                                         " model-parallel (tp) rank(s), not of mp_rank " + std::to_string(mp));
    const bool bf16 = exists(join(dir, deepspeed_optim_states_name(0, true, mp)));
    auto optim_path = [&](int32_t r) { return join(dir, deepspeed_optim_states_name(r, bf16, mp)); };
    if (!exists(optim_path(0))) fail(ACCEL_ERR_DATA_LOSS, optim_path(0) + ": does not exist");
    std::vector<PyRef> optim{load_torch_file(optim_path(0))};
    auto osd_of = [&](int32_t r) -> const PyObj & {
        const PyObj &v = need(*optim.at(r), "optimizer_state_dict", optim_path(r));
        if (!v.is_dict()) fail(ACCEL_ERR_DATA_LOSS, optim_path(r) + ": \"optimizer_state_dict\" is not a dict");
        return v;
    };
    const PyObj &stage = need(osd_of(0), "zero_stage", optim_path(0));
    if (stage.kind != PyObj::Kind::Int || stage.i < 1 || stage.i > 3)
        fail(ACCEL_ERR_DATA_LOSS, optim_path(0) + ": \"zero_stage\" is not 1, 2 or 3");
    out.stage = static_cast<int>(stage.i);
    const PyObj &count = need(osd_of(0), "partition_count", optim_path(0));
    const PyObj &first_count = count.kind == PyObj::Kind::List && !count.items.empty() ? *count.items[0] : count;
    if (first_count.kind != PyObj::Kind::Int || first_count.i < 1 || first_count.i > 65536)
        fail(ACCEL_ERR_DATA_LOSS, optim_path(0) + ": \"partition_count\" is not a process count");
    out.world = static_cast<int32_t>(first_count.i);
    for (int32_t r = 1; r < out.world; ++r) {
        if (!exists(optim_path(r)))
            fail(ACCEL_ERR_DATA_LOSS, optim_path(r) + ": does not exist (the checkpoint was written by " +
                                          std::to_string(out.world) + " processes)");
        optim.push_back(load_torch_file(optim_path(r)));
    }
    if (exists(optim_path(out.world)))
        fail(ACCEL_ERR_DATA_LOSS, optim_path(out.world) + ": one optimizer states file too many (partition_count is " +
                                      std::to_string(out.world) + ")");

    // The parameters, group by group, from the model states file.
    const std::string model_path = join(dir, deepspeed_model_states_name(out.stage, 0, mp));
    if (!exists(model_path)) fail(ACCEL_ERR_DATA_LOSS, model_path + ": does not exist");
    PyRef model = load_torch_file(model_path);
    if (!model->is_dict()) fail(ACCEL_ERR_DATA_LOSS, model_path + ": not a dict");
    read_tp_layout(*model, model_path, mp_files, out);
    const PyObj &shapes = need(*model, "param_shapes", model_path);
    if (shapes.kind != PyObj::Kind::List || shapes.items.empty())
        fail(ACCEL_ERR_DATA_LOSS, model_path + ": \"param_shapes\" is not a list of groups");
    auto shape_of = [](const PyObj &v, const std::string &what) {
        std::vector<int64_t> shape;
        if (v.kind != PyObj::Kind::Tuple) fail(ACCEL_ERR_DATA_LOSS, what + " is not a torch.Size");
        for (const auto &d : v.items) {
            if (d->kind != PyObj::Kind::Int || d->i < 0) fail(ACCEL_ERR_DATA_LOSS, what + " is not a torch.Size");
            shape.push_back(d->i);
        }
        return shape;
    };
    std::vector<DsParam> params;
    for (size_t g = 0; g < shapes.items.size(); ++g) {
        if (!shapes.items[g]->is_dict()) fail(ACCEL_ERR_DATA_LOSS, model_path + ": \"param_shapes\" holds a non-dict");
        for (const auto &[k, v] : shapes.items[g]->map) {
            if (k->kind != PyObj::Kind::Str) fail(ACCEL_ERR_DATA_LOSS, model_path + ": a parameter name is not a string");
            params.push_back({k->s, shape_of(*v, model_path + ": the shape of \"" + k->s + "\""), g});
        }
    }
    const size_t groups = shapes.items.size();
    const DsPartition part(params, groups, out.stage, out.world);

    // Each rank's float32 partitions and the base optimizer's state over them, checked against the layout.
    auto model_where = std::make_shared<Locations>();
    auto optim_where = std::make_shared<Locations>();
    std::vector<std::string> model_order, optim_order;
    for (const auto &p : params) {
        model_where->emplace(p.name, Located{p.shape, at::kFloat, {}});
        model_order.push_back(p.name);
        out.params.push_back(p.name);
    }
    const char *fp32_key = out.stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
    const char *base_key = out.stage == 3 ? "optimizer_state_dict" : "base_optimizer_state";
    std::vector<const PyObj *> group_entries(groups, nullptr); // rank 0's state entry per group
    const PyObj *param_groups = nullptr;
    for (int32_t r = 0; r < out.world; ++r) {
        const std::string what = optim_path(r);
        const PyObj &osd = osd_of(r);
        const PyObj &fp32 = need_list(osd, fp32_key, what, groups);
        const PyObj &base = need(osd, base_key, what);
        if (!base.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": \"" + base_key + "\" is not a dict");
        const PyObj &state = need(base, "state", what);
        if (r == 0) param_groups = &need_list(base, "param_groups", what, groups);
        for (size_t g = 0; g < groups; ++g) {
            const int64_t n = part.flat_numel(g);
            const at::Tensor &flat = need_tensor(*fp32.items[g], n - part.padding(r, g),
                                                 what + ": " + fp32_key + "[" + std::to_string(g) + "]");
            const PyObj *entry = state.is_dict() ? state.get_int_key(static_cast<int64_t>(g)) : nullptr;
            if (r == 0) group_entries[g] = entry;
            if ((entry == nullptr) != (group_entries[g] == nullptr) || (entry != nullptr && !entry->is_dict()))
                fail(ACCEL_ERR_DATA_LOSS, what + ": the optimizer state of group " + std::to_string(g) +
                                              " differs from rank 0's");
            for (const DsRun &run : part.runs(r, g)) {
                const DsParam &p = params[run.param];
                (*model_where)[p.name].pieces.push_back({run.param_offset, run.numel, flat.narrow(0, run.flat_offset, run.numel)});
                if (entry == nullptr) continue;
                for (const auto &[key, value] : entry->map) {
                    if (key->kind != PyObj::Kind::Str || key->s == "step" || value->kind != PyObj::Kind::Tensor) continue;
                    const at::Tensor &t = need_tensor(*value, n, what + ": state \"" + key->s + "\" of group " + std::to_string(g));
                    const std::string name = "state." + std::to_string(run.param) + "." + key->s;
                    auto [it, fresh] = optim_where->emplace(name, Located{p.shape, t.scalar_type(), {}});
                    if (fresh) optim_order.push_back(name);
                    it->second.pieces.push_back({run.param_offset, run.numel, t.narrow(0, run.flat_offset, run.numel)});
                }
            }
        }
    }
    // Every element of every parameter exactly once (ranks' pieces are disjoint by construction).
    for (auto *where : {model_where.get(), optim_where.get()})
        for (auto &[name, l] : *where) {
            int64_t n = 0, want = 1;
            for (const auto &p : l.pieces) n += p.numel;
            for (int64_t d : l.shape) want *= d;
            if (n != want) fail(ACCEL_ERR_DATA_LOSS, dir + ": the partitions of \"" + name + "\" do not cover it");
        }

    // Buffers and frozen parameters: whole in the model states' module (ZeRO-1), or, frozen under ZeRO-2/3,
    // from frozen_param_fragments (ZeRO-3: each rank's partition, in its own model states file).
    const PyObj &module = need(*model, "module", model_path);
    const PyObj &buffer_names = need(*model, "buffer_names", model_path);
    if (!module.is_dict() || buffer_names.kind != PyObj::Kind::List)
        fail(ACCEL_ERR_DATA_LOSS, model_path + ": \"module\" or \"buffer_names\" is malformed");
    for (const auto &b : buffer_names.items) {
        const PyObj *t = b->kind == PyObj::Kind::Str ? module.get(b->s) : nullptr;
        if (t == nullptr || t->kind != PyObj::Kind::Tensor)
            fail(ACCEL_ERR_DATA_LOSS, model_path + ": a buffer of \"buffer_names\" is not in \"module\"");
        model_where->emplace(b->s, whole(t->tensor));
        model_order.push_back(b->s);
    }
    const PyObj *frozen = model->get("frozen_param_shapes");
    const PyObj *shared = model->get("shared_params");
    if (out.stage == 1) {
        for (const auto &[k, v] : module.map) // frozen parameters: what is neither trainable nor a buffer
            if (k->kind == PyObj::Kind::Str && v->kind == PyObj::Kind::Tensor && !model_where->count(k->s) &&
                (shared == nullptr || shared->get(k->s) == nullptr)) {
                model_where->emplace(k->s, whole(v->tensor));
                model_order.push_back(k->s);
            }
    }
    // ZeRO-3: every rank's model states file is read (DeepSpeed loads each rank's own; they are small: buffers,
    // empty parameters, frozen fragments), so a missing, empty or truncated one is DATA_LOSS naming it.
    std::vector<PyRef> models{model};
    for (int32_t r = 1; out.stage == 3 && r < out.world; ++r) {
        const std::string path = join(dir, deepspeed_model_states_name(3, r, mp));
        if (!exists(path)) fail(ACCEL_ERR_DATA_LOSS, path + ": does not exist");
        models.push_back(load_torch_file(path));
    }
    if (out.stage != 1 && frozen != nullptr && frozen->is_dict() && !frozen->map.empty()) {
        for (const auto &[k, v] : frozen->map) {
            const std::vector<int64_t> shape = shape_of(*v, model_path + ": the shape of frozen \"" + k->s + "\"");
            Located l{shape, at::kFloat, {}};
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            const int64_t ps = out.stage == 3 ? ceil_div(n, out.world) : n;
            for (size_t r = 0; r < models.size(); ++r) {
                const std::string what = join(dir, deepspeed_model_states_name(out.stage, static_cast<int32_t>(r), mp));
                const PyObj *fragments = models[r]->get("frozen_param_fragments");
                const PyObj *t = fragments != nullptr ? fragments->get(k->s) : nullptr;
                if (t == nullptr) fail(ACCEL_ERR_DATA_LOSS, what + ": has no fragment of frozen \"" + k->s + "\"");
                const int64_t lo = std::min<int64_t>(n, static_cast<int64_t>(r) * ps), hi = std::min(n, lo + ps);
                const at::Tensor &f = need_tensor(*t, out.stage == 3 ? ps : n, what + ": the fragment of \"" + k->s + "\"");
                l.dtype = f.scalar_type();
                if (hi > lo) l.pieces.push_back({lo, hi - lo, f.reshape({-1}).narrow(0, 0, hi - lo)});
            }
            model_where->emplace(k->s, std::move(l));
            model_order.push_back(k->s);
        }
    }
    out.model = source_of(model_where, model_order, dir);
    out.optimizer = source_of(optim_where, optim_order, dir);

    // The rest of the optimizer state in accel's per-parameter form: each parameter takes its group's step
    // and hyperparameters.
    auto state = py_dict();
    auto groups_out = py_list();
    for (size_t g = 0; g < groups; ++g) {
        const PyObj &src = *param_groups->items[g];
        if (!src.is_dict()) fail(ACCEL_ERR_DATA_LOSS, optim_path(0) + ": a param group is not a dict");
        auto ids = py_list();
        for (size_t k = 0; k < params.size(); ++k) {
            if (params[k].group != g) continue;
            ids->items.push_back(py_int(static_cast<int64_t>(k)));
            if (group_entries[g] == nullptr) continue;
            auto entry = py_dict();
            for (const auto &[key, value] : group_entries[g]->map)
                if (key->kind == PyObj::Kind::Str && (key->s == "step" || value->kind != PyObj::Kind::Tensor))
                    py_set(*entry, key->s, value);
            state->map.emplace_back(py_int(static_cast<int64_t>(k)), entry);
        }
        auto group = py_dict();
        for (const auto &kv : src.map)
            if (kv.first->kind == PyObj::Kind::Str && kv.first->s != "params") group->map.push_back(kv);
        py_set(*group, "params", ids);
        groups_out->items.push_back(group);
    }
    // Parameters without state keep the numbering of those with it (PyTorch numbers them all).
    std::stable_sort(state->map.begin(), state->map.end(), [](const auto &a, const auto &b) { return a.first->i < b.first->i; });
    out.optimizer_rest = py_dict();
    py_set(*out.optimizer_rest, "state", state);
    py_set(*out.optimizer_rest, "param_groups", groups_out);
    return out;
}

namespace {

// Every model-parallel rank's slice of one tensor joined along its slicing; the parts are checked first (they come
// from files): DATA_LOSS naming the tensor when they cannot be the slices of one tensor.
at::Tensor join_slices(const std::vector<at::Tensor> &parts, const DsSlicing &s, const std::string &what)
{
    const at::Tensor &first = parts.front();
    bool ok = s.dim < first.dim() && first.size(s.dim) % s.groups == 0;
    for (const auto &p : parts) ok = ok && p.sizes() == first.sizes() && p.scalar_type() == first.scalar_type();
    if (ok) ok = first.size(s.dim) * static_cast<int64_t>(parts.size()) >= s.whole;
    if (!ok)
        fail(ACCEL_ERR_DATA_LOSS, what + ": its slices (shape " + std::to_string(first.dim()) + "-d, per mp_rank) do not "
                                         "join along dim " + std::to_string(s.dim) + " into " + std::to_string(s.whole) +
                                         " (accel_tp_slicing)");
    return parallel::tp::join(parts, s.dim, s.groups).narrow(s.dim, 0, s.whole).contiguous();
}

} // namespace

DsWhole read_deepspeed_whole(const std::string &dir)
{
    std::vector<DsFolder> mps;
    mps.push_back(read_deepspeed_folder(dir, 0));
    mps.reserve(static_cast<size_t>(mps.front().mp_world)); // `first` stays valid while the others are added
    const DsFolder &first = mps.front();
    if (first.mp_world > 1 && first.slicing.empty())
        fail(ACCEL_ERR_UNIMPLEMENTED, dir + ": holds the files of " + std::to_string(first.mp_world) +
                                          " model-parallel (tp) ranks without accel's record of how they were cut "
                                          "(accel_tp_slicing, as in a Megatron-DeepSpeed folder): joining them needs the "
                                          "model's split dimensions, which is not built");
    for (int32_t mp = 1; mp < first.mp_world; ++mp) {
        mps.push_back(read_deepspeed_folder(dir, mp));
        if (mps.back().mp_world != first.mp_world || mps.back().params != first.params)
            fail(ACCEL_ERR_DATA_LOSS, dir + ": mp_rank " + std::to_string(mp) + "'s model states give other parameters "
                                          "or another mp_world_size than mp_rank 0's");
    }
    // Every rank's tensors of one source, name by name; a split one joined (its slicing found by `split_name`).
    auto joined = [&](ShardedSource DsFolder::*which, auto &&split_name) {
        std::vector<TensorList> ranks;
        for (const auto &f : mps) ranks.push_back(read_source_tensors(f.*which));
        TensorList out = ranks.front();
        for (size_t r = 1; r < ranks.size(); ++r)
            if (ranks[r].size() != out.size())
                fail(ACCEL_ERR_DATA_LOSS, dir + ": mp_rank " + std::to_string(r) + " holds " + std::to_string(ranks[r].size()) +
                                              " tensors, mp_rank 0 " + std::to_string(out.size()));
        for (size_t k = 0; k < out.size(); ++k) {
            auto &[name, t] = out[k];
            for (size_t r = 1; r < ranks.size(); ++r)
                if (ranks[r][k].first != name)
                    fail(ACCEL_ERR_DATA_LOSS, dir + ": mp_rank " + std::to_string(r) + " holds \"" + ranks[r][k].first +
                                                  "\" where mp_rank 0 holds \"" + name + "\"");
            const auto it = first.slicing.find(split_name(name));
            if (it == first.slicing.end()) continue; // replicated: every tp rank holds the same
            std::vector<at::Tensor> parts;
            for (const auto &r : ranks) parts.push_back(r[k].second);
            t = join_slices(parts, it->second, dir + ": \"" + name + "\"");
        }
        return out;
    };
    DsWhole whole;
    whole.model = joined(&DsFolder::model, [](const std::string &name) { return name; });
    // "state.{id}.{key}": the parameter's slicing.
    const TensorList state = joined(&DsFolder::optimizer, [&first](const std::string &name) {
        const size_t dot = name.find('.', 6);
        const size_t id = dot == std::string::npos ? first.params.size() : std::stoul(name.substr(6, dot - 6));
        return id < first.params.size() ? first.params[id] : std::string();
    });
    // PyTorch's per-parameter form: the rest's entries (step counts) with the per-element tensors put in.
    auto entries = py_dict();
    for (const auto &kv : first.optimizer_rest->get("state")->map)
        entries->map.emplace_back(kv.first, std::make_shared<PyObj>(*kv.second));
    for (const auto &[name, t] : state) {
        const size_t dot = name.find('.', 6); // the reader's own names: "state.{id}.{key}"
        const int64_t id = std::stoll(name.substr(6, dot - 6));
        auto it = std::find_if(entries->map.begin(), entries->map.end(),
                               [id](const auto &kv) { return kv.first->kind == PyObj::Kind::Int && kv.first->i == id; });
        if (it == entries->map.end()) it = entries->map.insert(entries->map.end(), {py_int(id), py_dict()});
        py_set(*it->second, name.substr(dot + 1), py_tensor(t));
    }
    whole.optimizer = py_dict();
    for (const auto &kv : first.optimizer_rest->map)
        whole.optimizer->map.emplace_back(kv.first, kv.first->kind == PyObj::Kind::Str && kv.first->s == "state" ? entries : kv.second);
    return whole;
}

} // namespace accel::ckpt
