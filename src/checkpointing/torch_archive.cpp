#include "checkpointing/torch_archive.hpp"

#include "common/files.hpp"
#include "checkpointing/integrity.hpp"
#include "checkpointing/mapped_tensor.hpp"
#include "common/job_pool.hpp"
#include "common/error.hpp"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

namespace accel::ckpt {

namespace {
// Chunks written by pass 1's callback that are at least this long and lie in a storage are borrowed.
constexpr size_t kBorrowMin = 4096;
} // namespace

void save_torch_file(const std::string &path, const PyObj &obj)
{
    OutFile f(path);
    // Storages in first-encounter order, keyed "0", "1", ... as torch.save does.
    std::map<const void *, std::string> keys;
    std::vector<at::Tensor> storages;
    std::string pkl = pickle_dumps(obj, [&](const at::Tensor &t0) {
        const void *id = t0.storage().unsafeGetStorageImpl();
        StorageRef ref;
        ref.type_name = storage_type_name(t0.scalar_type());
        ref.numel = static_cast<int64_t>(t0.storage().nbytes() / t0.element_size());
        auto it = keys.find(id);
        if (it == keys.end()) {
            it = keys.emplace(id, std::to_string(storages.size())).first;
            // A GPU tensor's whole storage comes to the host once: the pickle records the tensor's offset and
            // strides into it, as for a host tensor.
            storages.push_back(t0.is_cpu() ? t0
                                           : at::empty({0}, t0.options())
                                                 .set_(t0.storage(), 0, {ref.numel}, {1})
                                                 .cpu());
        }
        ref.key = it->second;
        return ref;
    });
    // Pass 1: LibTorch's writer lays the archive out and computes each record's CRC-32, but writes
    // nothing: bytes that lie in a tensor storage are only referenced, the rest (headers, data.pkl, the
    // directory) is kept. Pass 2 writes the pieces with pwrite, on several threads where the filesystem
    // lets buffered writes to one file overlap (ext4's inode lock serializes them; there the CRC pass of
    // optimizer.bin still overlaps the other files' writes, which run as other save_state jobs).
    std::map<const char *, const char *> ranges; // storage begin -> end
    for (const at::Tensor &t : storages) {
        const char *b = static_cast<const char *>(t.storage().data());
        if (b != nullptr) ranges[b] = b + t.storage().nbytes();
    }
    auto in_storage = [&](const char *p, size_t n) {
        auto it = ranges.upper_bound(p);
        if (it == ranges.begin()) return false;
        --it;
        // p must lie inside that storage: a chunk past its end (LibTorch's central directory, over 4 KiB from
        // about 64 records on) is the writer's own memory, freed before pass 2.
        return p >= it->first && p < it->second && n <= static_cast<size_t>(it->second - p);
    };
    struct Piece {
        uint64_t offset;
        size_t len;
        const char *borrowed; // null: bytes are owned[owned_index]
        size_t owned_index;
    };
    std::vector<Piece> pieces;
    std::vector<std::string> owned;
    uint64_t pos = 0;
    {
        caffe2::serialize::PyTorchStreamWriter writer([&](const void *data, size_t n) -> size_t {
            const char *p = static_cast<const char *>(data);
            if (n >= kBorrowMin && in_storage(p, n)) {
                pieces.push_back({pos, n, p, 0});
            } else if (!pieces.empty() && pieces.back().borrowed == nullptr) {
                owned[pieces.back().owned_index].append(p, n);
                pieces.back().len += n;
            } else {
                owned.emplace_back(p, n);
                pieces.push_back({pos, n, nullptr, owned.size() - 1});
            }
            pos += n;
            return n;
        });
        writer.writeRecord("data.pkl", pkl.data(), pkl.size());
        for (size_t k = 0; k < storages.size(); ++k) {
            const at::Tensor &t = storages[k];
            const auto &st = t.storage();
            writer.writeRecord("data/" + std::to_string(k), st.data(), st.nbytes());
        }
        writer.writeEndOfFile();
    }
    std::vector<std::function<void()>> jobs;
    for (const Piece &piece : pieces) {
        const char *base = piece.borrowed != nullptr ? piece.borrowed : owned[piece.owned_index].data();
        add_piece_jobs(jobs, piece.len,
                       [&f, base, off = piece.offset](size_t at, size_t len) { f.write_at(base + at, off + at, len); });
    }
    run_jobs(jobs, io_threads_for(pos));
    f.close();
}

PyRef load_torch_file(const std::string &path)
{
    if (!is_regular_file(path)) {
        if (!exists(path)) fail(ACCEL_ERR_NOT_FOUND, "\"" + path + "\" does not exist");
        fail(ACCEL_ERR_INVALID_ARGUMENT, "\"" + path + "\" is not a regular file");
    }
    try {
        // Storage records are stored uncompressed and 64-byte aligned: tensors are made over a map of the
        // file (copy-on-write), so loading copies each byte once, into wherever the caller puts it (with
        // pread, see CopyBatch; the map is therefore not populated up front).
        auto file = std::make_shared<MappedFile>(path);
        // Storages are read through their offsets, past miniz's CRC check: every member is checked here
        // first (unless the whole file was just checked against save_state's record of it).
        if (checkpoint_verification_enabled() && !is_trusted(path)) verify_zip_crcs(*file);
        caffe2::serialize::PyTorchStreamReader reader(path);
        if (!reader.hasRecord("data.pkl")) fail(ACCEL_ERR_DATA_LOSS, path + ": not a torch.save archive (no data.pkl)");
        auto [pkl_ptr, pkl_size] = reader.getRecord("data.pkl");
        auto loader = [&](const std::string &key, at::ScalarType dtype, int64_t numel) -> at::Tensor {
            const std::string name = "data/" + key;
            if (key.empty() || key.find('/') != std::string::npos || !reader.hasRecord(name))
                fail(ACCEL_ERR_DATA_LOSS, path + ": storage record \"" + name + "\" is missing");
            const size_t elem = c10::elementSize(dtype);
            const unsigned __int128 nbytes = static_cast<unsigned __int128>(numel) * elem;
            const size_t offset = reader.getRecordOffset(name);
            if (numel == 0) return at::empty({0}, at::TensorOptions().dtype(dtype));
            if (offset > file->size() || nbytes > file->size() - offset)
                fail(ACCEL_ERR_DATA_LOSS, path + ": storage \"" + key + "\" (" + std::to_string(numel) + " x " +
                                              std::to_string(elem) + " bytes at offset " + std::to_string(offset) +
                                              ") runs past the end of the file");
            const uint8_t *raw = file->data() + offset;
            if (reinterpret_cast<uintptr_t>(raw) % elem != 0) { // not written by torch.save: copy
                auto [ptr, size] = reader.getRecord(name);
                if (size != nbytes) fail(ACCEL_ERR_DATA_LOSS, path + ": storage \"" + key + "\" has the wrong size");
                at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(dtype));
                std::memcpy(t.data_ptr(), ptr.get(), size);
                return t;
            }
            return mapped_tensor(file, offset, {numel}, dtype);
        };
        return pickle_loads(static_cast<const uint8_t *>(pkl_ptr.get()), pkl_size, loader, path);
    } catch (const Error &) {
        throw;
    } catch (const c10::Error &e) {
        std::string msg = e.what_without_backtrace();
        fail(ACCEL_ERR_DATA_LOSS, path + ": not a readable torch.save archive: " + msg.substr(0, msg.find('\n')));
    }
}

} // namespace accel::ckpt
