#include "checkpointing/sharded_folder.hpp"

#include "checkpointing/integrity.hpp"
#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <algorithm>

namespace accel::ckpt {

std::string sharded_rank_file(int32_t rank) { return "rank" + std::to_string(rank) + ".safetensors"; }
std::string sharded_model_folder(size_t i) { return "pytorch_model_fsdp_" + std::to_string(i); }
std::string sharded_optimizer_folder(size_t i) { return "optimizer_" + std::to_string(i); }

std::string sharded_metadata_json(const ShardedMeta &meta)
{
    // Version 2 only when a tensor is split by tp: folders written without tp stay as version 1 wrote them.
    const bool tp = std::any_of(meta.tensors.begin(), meta.tensors.end(), [](const ShardedTensorMeta &t) { return bool(t.tp); });
    std::string out = "{\n  \"format\": \"" + std::string(kShardedFormat) + "\",\n  \"version\": " + (tp ? "2" : "1") +
                      ",\n  \"world_size\": " + std::to_string(meta.world_size) + ",\n  \"tensors\": [";
    for (size_t i = 0; i < meta.tensors.size(); ++i) {
        const auto &t = meta.tensors[i];
        out += i ? ",\n    " : "\n    ";
        out += "{\"name\": " + json_quote(t.name) + ", \"dtype\": \"" + st_dtype_name(t.dtype) + "\", \"shape\": [";
        for (size_t d = 0; d < t.shape.size(); ++d) out += (d ? ", " : "") + std::to_string(t.shape[d]);
        out += "], ";
        if (t.tp)
            out += "\"tp\": {\"dim\": " + std::to_string(t.tp.dim) + ", \"groups\": " + std::to_string(t.tp.groups) +
                   ", \"size\": " + std::to_string(t.tp.size) + "}, ";
        out += "\"pieces\": [";
        for (size_t p = 0; p < t.pieces.size(); ++p)
            out += (p ? ", [" : "[") + std::to_string(t.pieces[p].rank) + ", " +
                   (t.tp ? std::to_string(t.pieces[p].tp_rank) + ", " : "") + std::to_string(t.pieces[p].offset) + ", " +
                   std::to_string(t.pieces[p].numel) + "]";
        out += "]}";
    }
    out += "\n  ]\n}\n";
    return out;
}

bool is_sharded_folder(const std::string &dir)
{
    if (!is_dir(dir)) return false;
    if (exists(join(dir, kShardedMetadata))) return true;
    // Pieces without their index are a damaged sharded checkpoint, not the absence of one: say what is missing
    // (the callers would otherwise look for model.safetensors or optimizer.bin and name those).
    for (const auto &name : list_dir(dir))
        if (name.rfind("rank", 0) == 0 && name.size() > 16 && name.compare(name.size() - 12, 12, ".safetensors") == 0)
            fail(ACCEL_ERR_DATA_LOSS, join(dir, kShardedMetadata) + " is missing: the folder holds a sharded "
                                      "checkpoint's pieces (" + name + ", ...) without the index that says what they are");
    return false;
}

namespace {

ShardedMeta parse_meta(const JsonValue &root, const std::string &path)
{
    auto bad = [&path](const std::string &what) -> void { fail(ACCEL_ERR_DATA_LOSS, path + ": " + what); };
    auto uint_of = [&](const JsonValue *v, const std::string &what) -> uint64_t {
        if (v == nullptr || v->kind != JsonValue::Kind::Number || !v->is_uint) bad(what + " is not a non-negative integer");
        return v->uint_value;
    };
    if (root.kind != JsonValue::Kind::Object) bad("not a JSON object");
    const JsonValue *format = root.find("format");
    if (format == nullptr || format->kind != JsonValue::Kind::String || format->text != kShardedFormat)
        bad("\"format\" is not \"" + std::string(kShardedFormat) + "\" (not a sharded state dict written by accel)");
    const uint64_t version = uint_of(root.find("version"), "\"version\"");
    if (version != 1 && version != 2) bad("\"version\" is not 1 or 2 (written by a newer accel?)");
    ShardedMeta m;
    const uint64_t world = uint_of(root.find("world_size"), "\"world_size\"");
    if (world < 1 || world > (1u << 20)) bad("\"world_size\" " + std::to_string(world) + " is out of range");
    m.world_size = static_cast<int32_t>(world);
    const JsonValue *tensors = root.find("tensors");
    if (tensors == nullptr || tensors->kind != JsonValue::Kind::Array) bad("\"tensors\" is not an array");
    for (size_t i = 0; i < tensors->items.size(); ++i) {
        const JsonValue &e = tensors->items[i];
        const std::string at = "tensors[" + std::to_string(i) + "]";
        if (e.kind != JsonValue::Kind::Object) bad(at + " is not an object");
        ShardedTensorMeta t;
        const JsonValue *name = e.find("name"), *dtype = e.find("dtype"), *shape = e.find("shape"), *pieces = e.find("pieces");
        if (name == nullptr || name->kind != JsonValue::Kind::String || name->text.empty()) bad(at + ".name is not a name");
        t.name = name->text;
        const std::string where = at + " (\"" + t.name + "\")";
        auto dt = dtype != nullptr && dtype->kind == JsonValue::Kind::String ? st_dtype_from_name(dtype->text) : std::nullopt;
        if (!dt) bad(where + ".dtype is not a safetensors dtype");
        t.dtype = *dt;
        if (shape == nullptr || shape->kind != JsonValue::Kind::Array) bad(where + ".shape is not an array");
        for (const auto &d : shape->items) t.shape.push_back(uint_of(&d, where + ".shape"));
        const uint64_t numel = st_numel(t.shape, path + ": " + where);
        if (pieces == nullptr || pieces->kind != JsonValue::Kind::Array) bad(where + ".pieces is not an array");
        if (const JsonValue *tp = e.find("tp")) {
            if (version < 2) bad(where + ".tp in a version 1 folder");
            if (tp->kind != JsonValue::Kind::Object) bad(where + ".tp is not an object");
            const uint64_t dim = uint_of(tp->find("dim"), where + ".tp.dim");
            if (dim >= t.shape.size()) bad(where + ".tp.dim " + std::to_string(dim) + " is not a dimension of its shape");
            t.tp.dim = static_cast<int64_t>(dim);
            t.tp.groups = uint_of(tp->find("groups"), where + ".tp.groups");
            t.tp.size = uint_of(tp->find("size"), where + ".tp.size");
            if (std::string problem = tp_split_problem(t.shape, t.tp); !problem.empty()) bad(where + ".tp: " + problem);
        }
        const size_t fields = t.tp ? 4 : 3;
        for (const auto &p : pieces->items) {
            if (p.kind != JsonValue::Kind::Array || p.items.size() != fields)
                bad(where + ".pieces holds other than " + (t.tp ? "[rank, tp_rank, offset, numel]" : "[rank, offset, numel]"));
            ShardedPiece piece;
            const uint64_t rank = uint_of(&p.items[0], where + " piece rank");
            if (rank >= world) bad(where + ": a piece of rank " + std::to_string(rank) + " >= world_size " + std::to_string(world));
            piece.rank = static_cast<int32_t>(rank);
            if (t.tp) {
                const uint64_t tp_rank = uint_of(&p.items[1], where + " piece tp_rank");
                if (tp_rank >= t.tp.size)
                    bad(where + ": a piece of tp rank " + std::to_string(tp_rank) + " >= tp size " + std::to_string(t.tp.size));
                piece.tp_rank = static_cast<int32_t>(tp_rank);
            }
            piece.offset = uint_of(&p.items[fields - 2], where + " piece offset");
            piece.numel = uint_of(&p.items[fields - 1], where + " piece numel");
            t.pieces.push_back(piece);
        }
        // A rank's file holds one piece of a tensor (under the tensor's name).
        std::vector<int32_t> ranks;
        for (const auto &p : t.pieces) ranks.push_back(p.rank);
        std::sort(ranks.begin(), ranks.end());
        if (auto twice = std::adjacent_find(ranks.begin(), ranks.end()); twice != ranks.end())
            bad(where + ": two pieces of rank " + std::to_string(*twice));
        std::sort(t.pieces.begin(), t.pieces.end(), [](const ShardedPiece &a, const ShardedPiece &b) {
            return a.tp_rank != b.tp_rank ? a.tp_rank < b.tp_rank : a.offset < b.offset;
        });
        // Each slice (the whole tensor without tp) covered exactly once.
        const uint64_t slice_numel = t.tp ? st_numel(tp_slice_shape(t.shape, t.tp), path + ": " + where) : numel;
        const uint64_t slices = t.tp ? t.tp.size : 1;
        const std::string uncovered = where + ": its pieces do not cover its " +
                                      (t.tp ? "tp slices' " + std::to_string(slice_numel) : std::to_string(numel)) +
                                      " elements exactly once";
        size_t at_piece = 0;
        for (uint64_t s = 0; s < slices; ++s) {
            uint64_t next = 0;
            for (; at_piece < t.pieces.size() && static_cast<uint64_t>(t.pieces[at_piece].tp_rank) == s; ++at_piece) {
                const ShardedPiece &p = t.pieces[at_piece];
                if (p.offset != next || p.numel == 0 || p.numel > slice_numel - p.offset) bad(uncovered);
                next = p.offset + p.numel;
            }
            if (next != slice_numel) bad(uncovered);
        }
        for (const auto &seen : m.tensors)
            if (seen.name == t.name) bad(where + " appears twice");
        m.tensors.push_back(std::move(t));
    }
    return m;
}

} // namespace

ShardedFolder::ShardedFolder(const std::string &dir) : dir_(dir)
{
    const std::string meta_path = join(dir, kShardedMetadata);
    if (!exists(meta_path)) fail(ACCEL_ERR_DATA_LOSS, "\"" + meta_path + "\" is missing (a sharded state dict folder must hold it)");
    const std::string text = read_small_file(meta_path, 1u << 30);
    const JsonValue root = parse_json(text.data(), text.size(), meta_path);
    // The record of the folder's files (save_state adds it once every rank has written): checked first, so a
    // damaged piece or an edited index is named rather than loaded.
    if (checkpoint_verification_enabled())
        if (auto sums = read_sealed_checksums(text, root, meta_path)) verify_files(dir, *sums);
    meta_ = parse_meta(root, meta_path);
    std::vector<StHeader> headers;
    for (int32_t r = 0; r < meta_.world_size; ++r) {
        const std::string path = join(dir, sharded_rank_file(r));
        bool used = false;
        for (const auto &t : meta_.tensors)
            for (const auto &p : t.pieces) used = used || p.rank == r;
        if (!used) { // a rank that holds nothing (more ranks than elements) may not have written a file
            files_.push_back(nullptr);
            headers.emplace_back();
            continue;
        }
        if (!is_regular_file(path))
            fail(ACCEL_ERR_DATA_LOSS, "\"" + path + "\" is missing: rank " + std::to_string(r) + " of the " +
                                          std::to_string(meta_.world_size) + " that wrote this sharded state dict");
        files_.push_back(std::make_unique<MappedFile>(path));
        headers.push_back(parse_st_header(files_.back()->data(), files_.back()->size(), path));
    }
    for (const auto &t : meta_.tensors) {
        std::vector<const uint8_t *> ptrs;
        for (const auto &p : t.pieces) {
            const std::string path = join(dir, sharded_rank_file(p.rank));
            const StTensorInfo *info = headers[static_cast<size_t>(p.rank)].find(t.name);
            if (info == nullptr) fail(ACCEL_ERR_DATA_LOSS, path + ": has no piece of tensor \"" + t.name + "\"");
            if (info->dtype != t.dtype || info->shape.size() != 1 || info->shape[0] != p.numel)
                fail(ACCEL_ERR_DATA_LOSS, path + ": tensor \"" + t.name + "\" is not the " + std::to_string(p.numel) +
                                              " elements of " + st_dtype_name(t.dtype) + " that " + kShardedMetadata +
                                              " lists");
            ptrs.push_back(files_[static_cast<size_t>(p.rank)]->data() + headers[static_cast<size_t>(p.rank)].data_start() +
                           info->begin);
        }
        index_[t.name] = data_.size();
        data_.push_back(std::move(ptrs));
    }
}

void ShardedFolder::for_each_run(size_t t, uint64_t offset, uint64_t numel,
                                 const std::function<void(size_t, uint64_t, uint64_t, uint64_t)> &fn) const
{
    const ShardedTensorMeta &m = meta_.tensors[t];
    const uint64_t total = st_numel(m.shape, dir_);
    if (offset > total || numel > total - offset)
        fail(ACCEL_ERR_INVALID_ARGUMENT, dir_ + ": elements [" + std::to_string(offset) + ", " + std::to_string(offset + numel) +
                                             ") of tensor \"" + m.name + "\" asked for; it has " + std::to_string(total));
    // Elements [a, a + n) of tp rank `slice`'s flattened slice (of the whole tensor without tp), `at` elements into
    // the range.
    auto from_pieces = [&](uint64_t slice, uint64_t a, uint64_t n, uint64_t at) {
        for (size_t p = 0; p < m.pieces.size(); ++p) {
            const ShardedPiece &piece = m.pieces[p];
            if (static_cast<uint64_t>(piece.tp_rank) != slice) continue;
            const uint64_t lo = std::max(a, piece.offset), hi = std::min(a + n, piece.offset + piece.numel);
            if (lo < hi) fn(p, lo - piece.offset, hi - lo, at + (lo - a));
        }
    };
    if (!m.tp) {
        from_pieces(0, offset, numel, 0);
        return;
    }
    uint64_t at = 0;
    whole_to_slice_runs(m.shape, m.tp, offset, numel, [&](uint64_t slice, uint64_t slice_offset, uint64_t count) {
        from_pieces(slice, slice_offset, count, at);
        at += count;
    });
}

void ShardedFolder::read_range(size_t t, uint64_t offset, uint64_t numel, void *dst) const
{
    const uint64_t elem = static_cast<uint64_t>(st_dtype_bits(meta_.tensors[t].dtype)) / 8;
    for_each_run(t, offset, numel, [&](size_t p, uint64_t in_piece, uint64_t count, uint64_t at) {
        const MappedFile &f = *files_[static_cast<size_t>(meta_.tensors[t].pieces[p].rank)];
        f.read_at(static_cast<uint8_t *>(dst) + at * elem, static_cast<size_t>(data_[t][p] - f.data()) + in_piece * elem,
                  count * elem);
    });
}

std::vector<std::pair<const uint8_t *, uint64_t>> ShardedFolder::whole_spans(size_t t) const
{
    const uint64_t elem = static_cast<uint64_t>(st_dtype_bits(meta_.tensors[t].dtype)) / 8;
    std::vector<std::pair<const uint8_t *, uint64_t>> out;
    for_each_run(t, 0, st_numel(meta_.tensors[t].shape, dir_), [&](size_t p, uint64_t in_piece, uint64_t count, uint64_t) {
        const uint8_t *data = data_[t][p] + in_piece * elem;
        if (!out.empty() && out.back().first + out.back().second == data) out.back().second += count * elem;
        else out.emplace_back(data, count * elem);
    });
    return out;
}

int64_t ShardedFolder::find(const std::string &name) const
{
    auto it = index_.find(name);
    return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

} // namespace accel::ckpt
